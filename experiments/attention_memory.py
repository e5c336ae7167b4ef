"""Peak host memory of one attention forward+backward, measured in a fresh process.

  python -m experiments.attention_memory --impl=blockwise --seq_len=16384

Run by the attention benchmark (one subprocess per measurement, so that one
measurement's allocations cannot inflate another's). The program compiles the
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

import dataclasses
import json
import sys

from experiments import bench_attention
from experiments import cli
from scaling.config import option
from scaling.config import Options


@dataclasses.dataclass(frozen=True)
class MemoryConfig(Options):
  """One measurement."""

  impl: str = option("blockwise", "Attention implementation.", choices=bench_attention.IMPLEMENTATIONS)
  seq_len: int = option(16384, "Sequence length T (= S).", lower=1)
  batch: int = option(1, "Batch size.", lower=1)
  num_heads: int = option(4, "Number of heads.", lower=1)
  head_dim: int = option(64, "Head dimension d_k.", lower=1)
  block_q: int = option(bench_attention.BLOCK_Q, "Blockwise query block.", lower=1)
  block_k: int = option(bench_attention.BLOCK_K, "Blockwise key block.", lower=1)
  causal: bool = option(True, "Causal attention.")
  seed: int = option(0, "Seed of the random inputs.", lower=0)
  max_memory_fraction: float = option(0.6, "Skip when XLA plans more than this fraction of the available memory.",
                                      positive=True, upper=1.0)


def _print(config: MemoryConfig, out_dir) -> None:
  del out_dir
  sys.stdout.write(json.dumps(bench_attention.measure_memory(config)) + "\n")
  sys.stdout.flush()


def main(argv=None) -> int:
  return cli.main(MemoryConfig, _print, argv, __doc__, needs_out_dir=False)


if __name__ == "__main__":
  sys.exit(main())
