"""Learning-rate transfer across widths: ``study`` (``python -m experiments.transfer`` on the built-in model),
``any_model`` (``scaling.transfer`` for any model) and ``report`` (the figures and tables of both).

Imports: the library layers, ``scaling.studies.grid`` and ``scaling.studies.stats``.
"""
