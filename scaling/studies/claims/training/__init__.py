"""The claims settled by training small transformers, one module per family, each ending with its claim entries:
``nan_and_gradient``, ``depth``, ``scale_rules``, ``qk_correlation``, ``mup_transfer`` (in the order of ``families``)
and ``norms`` (RMSNorm against LayerNorm); at the sizes of ``sizes``, on the grids of ``grids``, read by
``loss_curves`` and ``best_learning_rate``, their numbers worded by ``numbers``.

Imports: the library layers, the grid engine, the coordinate check and ``scaling.studies.claims``' context and
verdicts.
"""
