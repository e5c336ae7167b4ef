"""Studies built on the library, per study a config dataclass, a ``run(config, out_dir)`` and its tables: ``sweep``
(the d_k sweep), ``claims`` (the notes' claims), ``coord_check``, ``transfer``, ``train`` (one training run),
``stability`` (z-loss, Adam-atan2); ``grid`` (the engine of the scaling studies), ``stats`` (over seeds) and
``process`` (a study's run in its process: the compilation cache and the time split).

Imports: every library layer; nothing imports the studies but ``experiments`` and ``benchmarks``.
"""
