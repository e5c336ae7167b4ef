"""Learning-rate transfer across widths: ``study`` (``python -m experiments.transfer`` on the built-in model, and
``scaling.transfer`` for any model) and ``report`` (its figures and tables).

Imports: the library layers and ``scaling.studies.grid``.
"""
