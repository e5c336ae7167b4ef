"""Benchmark suites, each timing alternatives side by side in one run (``python -m experiments.benchmark``).

* ``sweep``: the vmapped sweep against one configuration at a time, and a
  rerun of ``python -m experiments.sweep`` with the persistent compilation cache;
* ``attention``: dense, blockwise, jax.nn and flax attention (``attention``,
  with the attention functions in ``implementations`` and the peak-memory
  measurement in ``memory``);
* ``attention_profile``: blockwise forward+backward against the matmul peak,
  with its op time split by a profiler trace (``attention_profile``);
* ``train``: training throughput against the matmul peak, and the vmapped
  learning-rate grid against one run at a time.

Each suite module has a config (an ``Options`` class), its ``QUICK`` sizes
for a smoke run, and ``run(config, out_dir)``; the shared timing helpers are
in ``timing``.
"""

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[3]
"""The checkout whose ``experiments`` the suites' subprocesses run (``python -m experiments...``)."""
