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
import gc
import json
import resource
import sys
import time

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


def _maxrss_mib() -> float:
  """Peak resident set size of this process so far, MiB (Linux reports KiB)."""
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _reset_peak_rss() -> bool:
  """Sets the kernel's peak-RSS mark to the current RSS (Linux >= 4.0); False where unsupported."""
  try:
    with open("/proc/self/clear_refs", "w") as f:
      f.write("5")
    return True
  except OSError:
    return False


def _proc_mib(path: str, field: str) -> float | None:
  """A "Field: N kB" line of a /proc file (VmHWM of /proc/self/status, MemAvailable of /proc/meminfo), MiB."""
  try:
    with open(path) as f:
      for line in f:
        if line.startswith(field + ":"):
          return int(line.split()[1]) / 1024
  except OSError:
    return None
  return None


def measure(config: MemoryConfig) -> dict:
  """Compiles and runs one forward+backward; returns the measurement as a dict."""
  import jax  # pylint: disable=g-import-not-at-top

  row = dataclasses.asdict(config)
  row["rss_at_start_mib"] = _maxrss_mib()
  args = bench_attention.make_inputs(config.batch, config.seq_len, config.num_heads, config.head_dim, config.seed)
  step = bench_attention.make_step(config.impl, "fwd+bwd", causal=config.causal, block_q=config.block_q,
                                   block_k=config.block_k)
  compiled = jax.jit(step).lower(*args).compile()
  analysis = compiled.memory_analysis()
  if analysis is not None:
    planned = (analysis.temp_size_in_bytes + analysis.argument_size_in_bytes + analysis.output_size_in_bytes)
    row["xla_temp_mib"] = analysis.temp_size_in_bytes / 2**20
    row["xla_planned_mib"] = planned / 2**20
  available = _proc_mib("/proc/meminfo", "MemAvailable")
  row["available_mib"] = available
  if analysis is not None and available is not None and row["xla_planned_mib"] > config.max_memory_fraction * available:
    row["status"] = "skipped"
    row["reason"] = (f"XLA plans {row['xla_planned_mib'] / 1024:.1f} GiB of buffers, more than "
                     f"{config.max_memory_fraction:g} of the {available / 1024:.1f} GiB available")
    return row
  gc.collect()
  row["rss_after_compile_peak_mib"] = _maxrss_mib()
  row["peak_reset"] = _reset_peak_rss()
  row["baseline_rss_mib"] = _maxrss_mib()
  start = time.perf_counter()
  jax.block_until_ready(compiled(*args))
  row["seconds"] = time.perf_counter() - start
  row["peak_rss_mib"] = _maxrss_mib()
  row["vm_hwm_mib"] = _proc_mib("/proc/self/status", "VmHWM")
  row["delta_rss_mib"] = row["peak_rss_mib"] - row["baseline_rss_mib"]
  row["status"] = "ok"
  return row


def _print(config: MemoryConfig, out_dir) -> None:
  del out_dir
  sys.stdout.write(json.dumps(measure(config)) + "\n")
  sys.stdout.flush()


def main(argv=None) -> int:
  return cli.main(MemoryConfig, _print, argv, __doc__, needs_out_dir=False)


if __name__ == "__main__":
  sys.exit(main())
