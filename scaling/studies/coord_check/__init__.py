"""The coordinate check: ``layers`` (the layers measured on the built-in Transformer), ``slopes`` (the rows and
their slopes against width or depth, tables and figure), ``verdicts`` (the verdict and likely cause per module,
``CoordCheckResult``), ``any_model`` (``scaling.coord_check`` for any model) and ``study``
(``python -m experiments.coord_check`` on the built-in model).

Imports: the library layers, ``scaling.studies.grid`` and ``scaling.studies.stats``.
"""
