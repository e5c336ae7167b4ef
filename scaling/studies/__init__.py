"""Studies built on the library, per study a config dataclass, a ``run(config, out_dir)`` and its tables: ``sweep``
(the d_k sweep), ``claims`` (the notes' claims), ``coord_check``, ``transfer``, ``train`` (one training run),
``stability`` (z-loss, Adam-atan2); ``grid`` (the engine of the scaling studies), ``stats`` (over seeds),
``sweep_memory`` (the sweep's memory, checked first), ``device_time`` (a run's time on an accelerator, from its
datasheet) and ``process`` (a study's run in its process: the compilation cache and the time split).

Imports: every library layer. No library module imports a study (``import scaling`` loads ``scaling.coord_check``
and ``scaling.transfer`` on first use); the mains (``experiments``, ``benchmarks``, ``scripts``, ``examples``) do.
"""
