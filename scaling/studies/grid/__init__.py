"""The grid engine of the scaling studies: ``points`` (widths, depths, batch sizes and training lengths of a study),
``run`` (a study run over its points; grids declared, planned, compiled ahead and trained once) and ``optimum`` (the
best learning rate per point, from measured curves).

Imports: the library layers and ``scaling.studies.stats``.
"""
