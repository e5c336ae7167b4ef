"""The built-in harness: the ``model`` (``Transformer``, ``ModelConfig``, ``ModelFamily``), the ``data`` (synthetic
tasks, character-level text, ``DataConfig``), the training loop ``train`` (``run_training``), ``checkpoint``,
``sharding`` (the device mesh) and ``resources`` (the memory a configuration needs).

Imports: ``scaling.base``, ``scaling.runs``, ``scaling.attention`` and ``scaling.mup``.
"""
