"""The built-in Transformer: ``config`` (``ModelConfig``: one concrete model, as objects), ``family``
(``ModelFamily``: the model options every training study shares, a ``ModelConfig`` per width), ``transformer`` (the
``Transformer``; ``parametrized``, ``init_params``), its ``blocks``, ``scanned_blocks`` (consecutive blocks as one
``jax.lax.scan``), ``scales`` (u-μP's op scales of a model) and ``init_rms`` (the RMS of every tensor at init).

Imports: the layers below ``scaling.training``.
"""
