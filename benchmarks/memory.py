"""Peak host memory of one attention forward+backward, each measured in a fresh process.

``measure_memory`` runs in that process (``worker``'s ``memory`` job, which prints
it with ``print_measurement``, as ``python -m experiments.attention_memory`` does;
so one measurement's allocations cannot inflate another's): it compiles
the jitted forward+backward first, asks XLA how many bytes of buffers it
plans, and skips (status "skipped") when that plan exceeds
``max_memory_fraction`` of the memory currently available. Otherwise it
resets the kernel's peak-RSS mark to the current RSS (Linux
``/proc/self/clear_refs``, so the compiler's transient memory is not counted),
reads the peak resident set size ``ru_maxrss`` just before the computation
(the baseline: interpreter, JAX, inputs and the compiled program) and again
after it. ``launch`` and ``collect`` run it from the attention suite.

``ru_maxrss`` also carries the peak of the process image replaced by ``exec``;
the program is launched through ``/bin/sh`` from the (large) benchmark
process, or the parent's peak would show up in the child's.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import resource
import shlex
import signal
import subprocess
import sys
import time
from typing import Any

import jax

from scaling.training import resources
from scaling.base.config import option
from scaling.base.config import Options
from benchmarks import implementations
from benchmarks import worker
from scaling.base.validation import ConfigTypeError

MAX_MEMORY_FRACTION = 0.6
"""Measurements whose XLA-planned buffers exceed this fraction of the available memory are skipped."""


@dataclasses.dataclass(frozen=True)
class MemoryConfig(Options):
  """One measurement (the options of ``python -m experiments.attention_memory``)."""

  impl: str = option("blockwise", "Attention implementation.", choices=implementations.IMPLEMENTATIONS)
  seq_len: int = option(16384, "Sequence length T (= S).", lower=1)
  batch: int = option(1, "Batch size.", lower=1)
  num_heads: int = option(4, "Number of heads.", lower=1)
  head_dim: int = option(64, "Head dimension d_k.", lower=1)
  block_q: int = option(implementations.BLOCK_Q, "Blockwise query block.", lower=1)
  block_k: int = option(implementations.BLOCK_K, "Blockwise key block.", lower=1)
  causal: bool = option(True, "Causal attention.")
  seed: int = option(0, "Seed of the random inputs.", lower=0)
  max_memory_fraction: float = option(MAX_MEMORY_FRACTION, "Skip when XLA plans more than this fraction of the "
                                      "available memory.", positive=True, upper=1.0)


def planned_bytes(analysis: Any) -> float | None:
  """Bytes of the temporary, argument and output buffers in a compiled program's ``memory_analysis()``; None if none."""
  if analysis is None:
    return None
  return float(analysis.temp_size_in_bytes + analysis.argument_size_in_bytes + analysis.output_size_in_bytes)


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


def _vm_hwm_mib() -> float | None:
  """The "VmHWM: N kB" line of /proc/self/status (the kernel's peak-RSS mark), MiB; None where absent."""
  try:
    with open("/proc/self/status") as f:
      for line in f:
        if line.startswith("VmHWM:"):
          return int(line.split()[1]) / 1024
  except OSError:
    return None
  return None


def measure_memory(config: MemoryConfig) -> dict:
  """Compiles and runs one forward+backward of ``config`` in this process; returns the measurement.

  Args:
    config: the measurement.

  Returns:
    The config's fields with XLA's planned MiB, the available MiB and, unless
    skipped, the baseline and peak RSS, their difference and the seconds taken.
  """
  if not isinstance(config, MemoryConfig):
    raise ConfigTypeError(f"config must be a MemoryConfig, got {type(config).__name__}")
  row = dataclasses.asdict(config)
  row["rss_at_start_mib"] = _maxrss_mib()
  args = implementations.make_inputs(config.batch, config.seq_len, config.num_heads, config.head_dim, config.seed)
  step = implementations.make_step(config.impl, "fwd+bwd", causal=config.causal, block_q=config.block_q,
                                   block_k=config.block_k)
  compiled = jax.jit(step).lower(*args).compile()
  analysis = compiled.memory_analysis()
  planned = planned_bytes(analysis)
  if analysis is not None:
    row["xla_temp_mib"] = analysis.temp_size_in_bytes / 2**20
    row["xla_planned_mib"] = planned / 2**20
  available = resources.host_available_bytes()
  row["available_mib"] = None if available is None else available / 2**20
  if planned is not None and available is not None and planned > config.max_memory_fraction * available:
    row["status"] = "skipped"
    row["reason"] = (f"XLA plans {row['xla_planned_mib'] / 1024:.1f} GiB of buffers, more than "
                     f"{config.max_memory_fraction:g} of the {row['available_mib'] / 1024:.1f} GiB available")
    return row
  gc.collect()
  row["rss_after_compile_peak_mib"] = _maxrss_mib()
  row["peak_reset"] = _reset_peak_rss()
  row["baseline_rss_mib"] = _maxrss_mib()
  start = time.perf_counter()
  jax.block_until_ready(compiled(*args))
  row["seconds"] = time.perf_counter() - start
  row["peak_rss_mib"] = _maxrss_mib()
  row["vm_hwm_mib"] = _vm_hwm_mib()
  row["delta_rss_mib"] = row["peak_rss_mib"] - row["baseline_rss_mib"]
  row["status"] = "ok"
  return row


def print_measurement(config: MemoryConfig, out_dir: None = None) -> None:
  """Measures ``config`` in this process (``measure_memory``) and prints the row as one JSON line on stdout.

  Args:
    config: the measurement.
    out_dir: unused (a measurement writes no files; the run signature of a study).
  """
  del out_dir
  sys.stdout.write(json.dumps(measure_memory(config)) + "\n")
  sys.stdout.flush()


def launch(config: MemoryConfig, timeout_s: float):
  """Starts the measurement of ``config`` in a fresh process (``worker``); returns what ``collect`` needs.

  Args:
    config: the measurement.
    timeout_s: ``collect`` kills the process after this many seconds from now.

  Returns:
    (the process, the row's known fields, the start time).
  """
  if not isinstance(config, MemoryConfig):
    raise ConfigTypeError(f"config must be a MemoryConfig, got {type(config).__name__}")
  cmd = worker.command("memory", config)
  if os.path.exists("/bin/sh"):
    # The shell forks the program instead of exec-ing it from this (large) process, whose peak RSS would
    # otherwise be inherited by the child's ru_maxrss.
    cmd = ["/bin/sh", "-c", shlex.join(cmd) + "; exit $?"]
  base = {"impl": config.impl, "seq_len": config.seq_len, "head_dim": config.head_dim,
          "num_heads": config.num_heads, "timeout_s": timeout_s}
  proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=worker.environment(),
                          start_new_session=True)
  return proc, base, time.perf_counter()


def collect(launched) -> dict:
  """Waits for a launched measurement (killing it at its time limit); returns its JSON row or why it failed."""
  proc, base, start = launched
  remaining = max(base["timeout_s"] - (time.perf_counter() - start), 0.0)
  try:
    stdout, stderr = proc.communicate(timeout=remaining)
  except subprocess.TimeoutExpired:
    os.killpg(proc.pid, signal.SIGKILL)  # the shell and the program under it
    proc.communicate()
    return {**base, "status": "timeout", "reason": f"did not finish within {base['timeout_s']:g} s",
            "wall_s": time.perf_counter() - start}
  wall = time.perf_counter() - start
  lines = stdout.strip().splitlines()
  if proc.returncode != 0 or not lines:
    tail = (stderr.strip().splitlines() or ["(no output)"])[-1]
    return {**base, "status": "failed", "reason": f"exit status {proc.returncode}: {tail}", "wall_s": wall}
  return {**base, **json.loads(lines[-1]), "wall_s": wall}


def describe(row: dict) -> str:
  """One measurement as a console line."""
  if row.get("status") == "ok":
    return (f"{row['impl']:>9} T={row['seq_len']} N={row['num_heads']}: peak RSS {row['peak_rss_mib']:.0f} MiB, baseline "
            f"{row['baseline_rss_mib']:.0f} MiB, difference {row['delta_rss_mib']:.0f} MiB; XLA plans "
            f"{row.get('xla_planned_mib', float('nan')):.0f} MiB; {row['seconds']:.1f} s")
  planned = row.get("xla_planned_mib")
  extra = f" (XLA plans {planned:.0f} MiB)" if planned is not None else ""
  return f"{row['impl']:>9} T={row['seq_len']} N={row['num_heads']}: {row['status']}: {row.get('reason', '')}{extra}"


def markdown(row: dict) -> str:
  """One measurement in a sentence (for the suite's Markdown)."""
  what = f"{row['impl']} at T = {row['seq_len']}, {row['num_heads']} head(s), d_k {row['head_dim']}"
  planned = "" if row.get("xla_planned_mib") is None else f"XLA plans {row['xla_planned_mib']:.0f} MiB"
  if row.get("status") == "ok":
    return f"{what}: peak RSS grows by {row['delta_rss_mib']:.0f} MiB ({planned}; {row['seconds']:.1f} s)"
  return f"{what}: {row.get('status')}, {row.get('reason', '')}" + (f" ({planned})" if planned else "")
