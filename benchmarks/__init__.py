"""Benchmark suites, each timing alternatives side by side in one run (``python -m experiments.benchmark``).

* ``sweep``: the vmapped sweep against one configuration at a time, and the
  same sweep rerun in fresh processes with the persistent compilation cache;
* ``attention``: dense, blockwise, jax.nn and flax attention (``attention``,
  with the attention functions in ``implementations`` and the peak-memory
  measurement in ``memory``);
* ``attention_profile``: blockwise forward+backward against the matmul peak,
  with its op time split by a profiler trace (``attention_profile``);
* ``train``: training throughput against the matmul peak, and the vmapped
  learning-rate grid against one run at a time;
* ``studies``: where each study's time goes, cold and warm compilation cache.

Each suite module has a config (an ``Options`` class), its ``QUICK`` sizes
for a smoke run, and ``run(config, out_dir)``; the shared timing helpers are
in ``timing``. What must run in a fresh process (a memory measurement, a study
with a cold compilation cache) runs library code there too: ``worker``.
"""
