"""What a run leaves behind and how it reports: ``results`` (row files in resumable groups, ``run.json``, run
folders), ``report`` (rich progress and tables, generated sections), ``plotting``, ``tracking`` (TensorBoard, W&B),
``timesplit`` (wall time split into compilation, compute and the rest), ``distributed`` (hosts: process 0 writes),
``interrupt`` (SIGINT and SIGTERM stop a run at a safe point) and ``run_lock`` (one writer per run folder).

Imports: ``scaling.base`` only.
"""
