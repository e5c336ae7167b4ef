"""Peak host memory of one attention forward+backward, measured in a fresh process.

  python -m experiments.attention_memory --impl=blockwise --seq_len=16384

The attention benchmark runs the same measurement (one fresh process per
measurement, so that one measurement's allocations cannot inflate another's;
``benchmarks.worker``). The program compiles the
jitted forward+backward first, asks XLA how many bytes of buffers it plans,
and skips (status "skipped") when that plan exceeds ``--max_memory_fraction``
of the memory currently available. Otherwise it resets the kernel's peak-RSS
mark to the current RSS (Linux ``/proc/self/clear_refs``, so the compiler's
transient memory is not counted), reads the peak resident set size
``ru_maxrss`` just before the computation (the baseline: interpreter, JAX,
inputs and the compiled program) and again after it, and prints one JSON line:
baseline, peak, their difference, XLA's planned bytes and the time taken.

``ru_maxrss`` also carries the peak of the process image replaced by ``exec``;
launch this program from a small process (the benchmark goes through
``/bin/sh``), not directly from a large one, or the parent's peak shows up here.
"""

from __future__ import annotations

import sys

from experiments import cli
from benchmarks import memory


def main(argv=None) -> int:
  return cli.main(memory.MemoryConfig, memory.print_measurement, argv, __doc__, needs_out_dir=False)


if __name__ == "__main__":
  sys.exit(main())
