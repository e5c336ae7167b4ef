"""The data the built-in harness trains on: ``dataset`` (the batch format, ``Dataset``), ``synthetic_tasks``
(associative recall, induction copying), ``text_corpus`` (character-level text) and ``config`` (``DataConfig``: the
data options every training study shares, checked once; ``make`` builds the dataset).

Imports: the layers below ``scaling.training``, and ``scaling.training.resources``.
"""
