"""The coordinate check: ``study`` (``python -m experiments.coord_check`` on the built-in model, and
``scaling.coord_check`` for any model).

Imports: the library layers and ``scaling.studies.grid``.
"""
