"""What a run leaves behind and how it reports: ``results`` (row files in resumable groups, ``run.json``, run
folders), ``report`` (rich progress and tables, generated sections), ``plotting``, ``tracking`` (TensorBoard, W&B),
``timesplit`` (wall time split into compilation, compute and the rest) and ``distributed`` (hosts: process 0 writes).

Imports: ``scaling.base`` only.
"""
