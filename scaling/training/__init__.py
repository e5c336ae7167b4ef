"""The built-in harness: the model (``model_config``: ``ModelConfig``; ``model_family``: ``ModelFamily``, the model
options; ``model``: the ``Transformer``, of ``blocks``, ``scanned_blocks`` and ``model_scales``; ``init_rms``), the
data (``dataset``, ``synthetic_tasks``, ``text_corpus``; ``data_config``: ``DataConfig``), the ``optimizer`` options
(``OptimizerConfig``), training (``losses``, the ``state``, the ``programs`` a run trains, the
built-in model's ``transformer_step``, the jitted ``step`` and ``initialization``, ``sharded`` single runs, the
``loop``: ``run_training``, and the held-out ``evaluation``), ``checkpoint``, ``sharding`` (the device mesh) and
``resources`` (the memory a configuration needs).

Imports: ``scaling.base``, ``scaling.runs``, ``scaling.attention`` and ``scaling.mup``.
"""
