"""The built-in harness: the ``model`` (the Transformer and its options), the ``data`` (synthetic tasks and text),
the ``optimizer`` options (``OptimizerConfig``), the training ``loop`` (``run_training`` and what it steps),
``sharding`` (the device mesh) and ``resources`` (the memory a configuration needs).

Imports: ``scaling.base``, ``scaling.runs``, ``scaling.attention`` and ``scaling.mup``.
"""
