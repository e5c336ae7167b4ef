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

from absl import flags

from experiments import bench_attention
from experiments import common

_IMPL = flags.DEFINE_enum("impl", "blockwise", bench_attention.IMPLEMENTATIONS, "Attention implementation.")
_SEQ_LEN = flags.DEFINE_integer("seq_len", 16384, "Sequence length T (= S).", lower_bound=1)
_BATCH = flags.DEFINE_integer("batch", 1, "Batch size.", lower_bound=1)
_NUM_HEADS = flags.DEFINE_integer("num_heads", 4, "Number of heads.", lower_bound=1)
_HEAD_DIM = flags.DEFINE_integer("head_dim", 64, "Head dimension d_k.", lower_bound=1)
_BLOCK_Q = flags.DEFINE_integer("block_q", bench_attention.BLOCK_Q, "Blockwise query block.", lower_bound=1)
_BLOCK_K = flags.DEFINE_integer("block_k", bench_attention.BLOCK_K, "Blockwise key block.", lower_bound=1)
_CAUSAL = flags.DEFINE_boolean("causal", True, "Causal attention.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the random inputs.", lower_bound=0)
_MAX_FRACTION = common.define_finite_float(
    "max_memory_fraction", 0.6, "Skip when XLA plans more than this fraction of the available memory.",
    positive=True)


@dataclasses.dataclass(frozen=True)
class MemoryConfig:
  impl: str
  seq_len: int
  batch: int
  num_heads: int
  head_dim: int
  block_q: int
  block_k: int
  causal: bool
  seed: int
  max_memory_fraction: float


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


def _status_mib(field: str) -> float | None:
  """A memory field (VmRSS, VmHWM) of /proc/self/status, MiB."""
  try:
    with open("/proc/self/status") as f:
      for line in f:
        if line.startswith(field + ":"):
          return int(line.split()[1]) / 1024
  except OSError:
    return None
  return None


def _available_mib() -> float | None:
  """MemAvailable from /proc/meminfo, MiB (None where there is no such file)."""
  try:
    with open("/proc/meminfo") as f:
      for line in f:
        if line.startswith("MemAvailable:"):
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
  available = _available_mib()
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
  row["vm_hwm_mib"] = _status_mib("VmHWM")
  row["delta_rss_mib"] = row["peak_rss_mib"] - row["baseline_rss_mib"]
  row["status"] = "ok"
  return row


def main(argv):
  common.reject_extra_args(argv)
  config = MemoryConfig(_IMPL.value, _SEQ_LEN.value, _BATCH.value, _NUM_HEADS.value, _HEAD_DIM.value,
                        _BLOCK_Q.value, _BLOCK_K.value, _CAUSAL.value, _SEED.value, _MAX_FRACTION.value)
  if config.max_memory_fraction > 1:
    common.fail("--max_memory_fraction must be at most 1")
  sys.stdout.write(json.dumps(measure(config)) + "\n")
  sys.stdout.flush()


if __name__ == "__main__":
  common.run(main)
