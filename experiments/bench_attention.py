"""Benchmark suite `attention`: dense, blockwise, jax.nn and flax attention timed side by side.

  python -m experiments.benchmark --suite=attention          # via the dispatcher
  python -m experiments.bench_attention --out_dir=runs/attn   # on its own (add --quick for a smoke run)

For each sequence length T (= S), head dimension d_k and masking (causal or
not) it times the forward pass and the forward+backward pass (value and
gradients w.r.t. q, k, v) of five implementations (batch 1, ``NUM_HEADS``
heads, float32; ``extra_shapes`` adds (B, T, N, d_k) cases, both maskings):

* ``ours``: ``scaling.dot_product_attention`` as called by default
  (``implementation=None``: the measured rule of
  ``scaling.attention.select_implementation`` picks dense or blockwise and
  the blocks; the chosen path is recorded);
* ``dense``: the same with ``implementation="dense"`` (materializes [B, N, T, S]);
* ``blockwise``: ``scaling.blockwise.blockwise_attention`` (online softmax,
  with the blocks the rule picks for the shape);
* ``jax_nn``: ``jax.nn.dot_product_attention`` (XLA implementation);
* ``flax``: ``flax.linen.dot_product_attention`` with an explicit causal mask.

Timing: every function is compiled ahead of time (compilation excluded) and
called once to warm up; then the implementations are called in turn,
``repeats`` rounds, each call ending in ``block_until_ready``, and the median
is reported. A measurement is skipped, with the reason printed, when its time
predicted from the previous length (time ∝ T²) exceeds ``max_call_s`` or when
XLA plans more buffer memory than ``MAX_MEMORY_FRACTION`` of what is available.

FLOP counts: the forward pass counts 4·B·N·T·S·H (two matmuls), halved for
causal attention (only the visible half is useful work, whatever an
implementation actually computes); forward+backward counts 3.5 times that
(the backward's five matmuls, QKᵀ recomputed, are 2.5 forward passes; this is
the FlashAttention benchmarks' convention). GFLOP/s are compared with the
machine's matmul peak, measured in the same run as the best of several large
float32 ``jnp.dot`` calls.

Memory: the peak resident set size of one forward+backward at
``memory_seq_lens`` (d_k = ``memory_head_dim``) is measured for dense and
blockwise, each in a fresh subprocess (``experiments.attention_memory``), and a
blockwise forward+backward at ``long_seq_len`` (``long_num_heads`` heads, to
keep it to a minute or two on two cores) is run in a subprocess with a time
limit.

Writes ``attention.json`` (every measurement), ``attention.md`` (the timing
table in Markdown, for README's generated section: ``python
scripts/update_readme.py attention <out_dir>/attention.md``) and
``attention.png`` (time against T, one line per implementation and head
dimension; forward and forward+backward panels, causal) into the output
directory.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import pathlib
import resource
import shlex
import signal
import statistics
import subprocess
import sys
import time
from typing import Any, Callable

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp

from experiments import cli
from scaling import attention as attention_lib
from scaling import blockwise as blockwise_lib
from scaling import report
from scaling import results as results_lib
from scaling.config import option
from scaling.config import Options
from scaling import plotting

IMPLEMENTATIONS = ("ours", "dense", "blockwise", "jax_nn", "flax")
MODES = ("fwd", "fwd+bwd")
NUM_HEADS = 4
BATCH = 1
# Blocks of the memory measurements. Measured on 2 CPU cores at T = 8192, d_k = 64, causal,
# forward+backward (ms): 128x128 2251, 256x256 2781, 256x512 2271, 512x512 2389, 1024x256 3048, 512x256 1941.
# The timings use the blocks of scaling.attention.select_implementation instead.
BLOCK_Q = 512
BLOCK_K = 256
# Goals reported (never asserted): the default at least as fast as jax.nn everywhere, and blockwise
# forward+backward at T >= PEAK_TARGET_MIN_LEN reaching PEAK_TARGET of the measured matmul peak.
PEAK_TARGET = 0.45
PEAK_TARGET_MIN_LEN = 2048
FWD_BWD_FLOP_FACTOR = 3.5
MAX_MEMORY_FRACTION = 0.6


@dataclasses.dataclass(frozen=True)
class AttentionBenchConfig:
  """Sizes and limits of one run of the suite."""

  seq_lens: tuple[int, ...] = (512, 2048, 8192)
  head_dims: tuple[int, ...] = (64, 128)
  repeats: int = 5
  num_heads: int = NUM_HEADS
  batch: int = BATCH
  causal: tuple[bool, ...] = (True, False)
  extra_shapes: tuple[tuple[int, int, int, int], ...] = ((4, 512, 8, 64), (1, 2048, 8, 64))
  block_q: int = BLOCK_Q
  block_k: int = BLOCK_K
  max_call_s: float = 8.0
  peak_matmul_size: int = 2048
  memory_seq_lens: tuple[int, ...] = (4096, 16384)
  memory_head_dim: int = 64
  long_seq_len: int = 65536
  long_num_heads: int = 1
  long_timeout_s: float = 300.0
  memory_timeout_s: float = 300.0
  parallel_subprocesses: bool = False
  seed: int = 0


QUICK = dict(seq_lens=(128, 256), head_dims=(32,), repeats=2, extra_shapes=(), peak_matmul_size=256,
             memory_seq_lens=(1024,),
             memory_head_dim=32, long_seq_len=2048, long_timeout_s=120.0, memory_timeout_s=120.0,
             parallel_subprocesses=True)


def attention_fn(impl: str, *, causal: bool, block_q: int = BLOCK_Q,
                 block_k: int = BLOCK_K) -> Callable[[jax.Array, jax.Array, jax.Array], jax.Array]:
  """The attention function of one implementation, all taking q, k, v as [B, T, N, H]."""
  if impl == "ours":
    return lambda q, k, v: attention_lib.dot_product_attention(q, k, v, is_causal=causal)
  if impl == "dense":
    return lambda q, k, v: attention_lib.dot_product_attention(q, k, v, is_causal=causal, implementation="dense")
  if impl == "blockwise":
    return lambda q, k, v: blockwise_lib.blockwise_attention(q, k, v, is_causal=causal, block_q=block_q,
                                                             block_k=block_k)
  if impl == "jax_nn":
    return lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=causal)
  if impl == "flax":
    def flax_attention(q, k, v):
      t, s = q.shape[1], k.shape[1]
      mask = jnp.tril(jnp.ones((t, s), bool))[None, None] if causal else None
      return nn.dot_product_attention(q, k, v, mask=mask, deterministic=True)
    return flax_attention
  raise ValueError(f"unknown implementation {impl!r}; choose from {', '.join(IMPLEMENTATIONS)}")


def make_step(impl: str, mode: str, **kwargs) -> Callable[..., Any]:
  """The timed function: the forward output, or the loss ⟨out, ct⟩ with its gradients w.r.t. q, k, v."""
  fn = attention_fn(impl, **kwargs)
  if mode == "fwd":
    return lambda q, k, v, ct: fn(q, k, v)
  if mode == "fwd+bwd":
    return jax.value_and_grad(lambda q, k, v, ct: jnp.vdot(fn(q, k, v), ct), argnums=(0, 1, 2))
  raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")


def make_inputs(batch: int, seq_len: int, num_heads: int, head_dim: int, seed: int = 0) -> tuple[jax.Array, ...]:
  """Random float32 q, k, v and output cotangent, [B, T, N, H] each."""
  keys = jax.random.split(jax.random.fold_in(jax.random.PRNGKey(seed), seq_len * 1000 + head_dim), 4)
  return tuple(jax.random.normal(k, (batch, seq_len, num_heads, head_dim), jnp.float32) for k in keys)


def attention_flops(batch: int, seq_len: int, num_heads: int, head_dim: int, *, causal: bool, mode: str) -> float:
  """Useful FLOPs: 4·B·N·T·S·H forward, halved when causal, times 3.5 for forward+backward."""
  flops = 4.0 * batch * num_heads * seq_len * seq_len * head_dim
  if causal:
    flops /= 2
  return flops * (FWD_BWD_FLOP_FACTOR if mode == "fwd+bwd" else 1.0)


def measure_matmul_peak(size: int, repeats: int = 5) -> dict:
  """Best GFLOP/s of a [size, size] float32 jnp.dot (compiled, warmed up)."""
  a, b = (jax.random.normal(k, (size, size), jnp.float32) for k in jax.random.split(jax.random.PRNGKey(1)))
  dot = jax.jit(jnp.dot).lower(a, b).compile()
  jax.block_until_ready(dot(a, b))
  best = min(_time_call(dot, (a, b)) for _ in range(repeats))
  return {"size": size, "seconds": best, "gflops": 2.0 * size**3 / best / 1e9}


def _time_call(fn, args) -> float:
  start = time.perf_counter()
  jax.block_until_ready(fn(*args))
  return time.perf_counter() - start


def _available_bytes() -> float | None:
  try:
    with open("/proc/meminfo") as f:
      for line in f:
        if line.startswith("MemAvailable:"):
          return int(line.split()[1]) * 1024.0
  except OSError:
    return None
  return None


def _planned_bytes(compiled) -> float | None:
  analysis = compiled.memory_analysis()
  if analysis is None:
    return None
  return float(analysis.temp_size_in_bytes + analysis.argument_size_in_bytes + analysis.output_size_in_bytes)


def _time_size(config: AttentionBenchConfig, batch: int, seq_len: int, num_heads: int, head_dim: int, causal: bool,
               mode: str, previous: dict[str, tuple[int, float]]) -> list[dict]:
  """Times all implementations at one case, interleaved; updates ``previous`` {impl: (T, s)}."""
  args = make_inputs(batch, seq_len, num_heads, head_dim, config.seed)
  flops = attention_flops(batch, seq_len, num_heads, head_dim, causal=causal, mode=mode)
  choice = attention_lib.select_implementation(args[0].shape, args[1].shape, attention_lib.resolve_logit_options(
      head_dim, scale=None, rule=None, logit_soft_cap=None, logit_clamp=None, float32_softmax=True,
      subtract_max=True), is_causal=causal)
  block_q, block_k = ((choice.block_q, choice.block_k) if choice.implementation == "blockwise"
                      else attention_lib.blockwise_blocks(seq_len, seq_len))
  rows, active = {}, {}
  for impl in IMPLEMENTATIONS:
    row = {"batch": batch, "seq_len": seq_len, "num_heads": num_heads, "head_dim": head_dim, "causal": causal,
           "mode": mode, "impl": impl, "flops": flops}
    if impl == "ours":
      row["chosen"] = choice.implementation + (f" {choice.block_q}x{choice.block_k}" if choice.block_q else "")
    if impl == "blockwise":
      row["blocks"] = f"{block_q}x{block_k}"
    rows[impl] = row
    if impl in previous:
      t_prev, s_prev = previous[impl]
      predicted = s_prev * (seq_len / t_prev) ** 2
      if predicted > config.max_call_s:
        row.update(status="skipped", reason=f"predicted {predicted:.0f} s per call from {s_prev * 1e3:.0f} ms "
                                            f"at T={t_prev} exceeds the {config.max_call_s:g} s limit")
        continue
    step = make_step(impl, mode, causal=causal, block_q=block_q, block_k=block_k)
    start = time.perf_counter()
    compiled = jax.jit(step).lower(*args).compile()
    row["compile_s"] = time.perf_counter() - start
    planned, available = _planned_bytes(compiled), _available_bytes()
    row["xla_planned_mib"] = None if planned is None else planned / 2**20
    if planned is not None and available is not None and planned > MAX_MEMORY_FRACTION * available:
      row.update(status="skipped", reason=f"XLA plans {planned / 2**30:.1f} GiB, more than {MAX_MEMORY_FRACTION:g} "
                                          f"of the {available / 2**30:.1f} GiB available")
      continue
    warm = _time_call(compiled, args)
    row["warmup_s"] = warm
    if warm > config.max_call_s:
      row.update(status="skipped", reason=f"the warm-up call took {warm:.1f} s, over the {config.max_call_s:g} s "
                                          f"limit")
      previous[impl] = (seq_len, warm)
      continue
    active[impl] = compiled
    row["times_s"] = []
  for _ in range(config.repeats):
    for impl, compiled in active.items():
      rows[impl]["times_s"].append(_time_call(compiled, args))
  for impl in active:
    row = rows[impl]
    median = statistics.median(row["times_s"])
    previous[impl] = (seq_len, median)
    row.update(status="ok", ms=median * 1e3, gflops=flops / median / 1e9)
  base = rows["jax_nn"].get("ms")
  for row in rows.values():
    if row.get("ms") is not None and base is not None:
      row["ratio_to_jax_nn"] = row["ms"] / base
  return list(rows.values())


def _launch_memory(impl: str, seq_len: int, num_heads: int, config: AttentionBenchConfig, timeout_s: float):
  """Starts experiments.attention_memory in a fresh process; returns what ``_collect_memory`` needs."""
  head_dim = config.memory_head_dim
  cmd = [sys.executable, "-m", "experiments.attention_memory", f"--impl={impl}", f"--seq_len={seq_len}",
         f"--batch={config.batch}", f"--num_heads={num_heads}", f"--head_dim={head_dim}",
         f"--block_q={config.block_q}", f"--block_k={config.block_k}", "--causal=True",
         f"--seed={config.seed}", f"--max_memory_fraction={MAX_MEMORY_FRACTION}"]
  if os.path.exists("/bin/sh"):
    # The shell forks the program instead of exec-ing it from this (large) process, whose peak RSS would
    # otherwise be inherited by the child's ru_maxrss.
    cmd = ["/bin/sh", "-c", shlex.join(cmd) + "; exit $?"]
  base = {"impl": impl, "seq_len": seq_len, "head_dim": head_dim, "num_heads": num_heads, "timeout_s": timeout_s}
  proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          cwd=pathlib.Path(__file__).resolve().parent.parent, env=dict(os.environ),
                          start_new_session=True)
  return proc, base, time.perf_counter()


def _collect_memory(launched) -> dict:
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


def _fmt_memory(row: dict) -> str:
  if row.get("status") == "ok":
    return (f"{row['impl']:>9} T={row['seq_len']} N={row['num_heads']}: peak RSS {row['peak_rss_mib']:.0f} MiB, baseline "
            f"{row['baseline_rss_mib']:.0f} MiB, difference {row['delta_rss_mib']:.0f} MiB; XLA plans "
            f"{row.get('xla_planned_mib', float('nan')):.0f} MiB; {row['seconds']:.1f} s")
  planned = row.get("xla_planned_mib")
  extra = f" (XLA plans {planned:.0f} MiB)" if planned is not None else ""
  return f"{row['impl']:>9} T={row['seq_len']} N={row['num_heads']}: {row['status']}: {row.get('reason', '')}{extra}"


def _targets(timings: list[dict], memory: list[dict], long_run: dict, memory_seq_len: int) -> dict:
  """The goals this suite reports on (none is asserted)."""
  key = lambda r: (r["batch"], r["seq_len"], r["num_heads"], r["head_dim"], r["causal"], r["mode"])
  by_key = {(*key(r), r["impl"]): r for r in timings}
  ours_vs_nn, bw_vs_dense, bw_peak = [], [], []
  for r in timings:
    case = {"batch": r["batch"], "seq_len": r["seq_len"], "num_heads": r["num_heads"], "head_dim": r["head_dim"],
            "causal": r["causal"], "mode": r["mode"]}
    if r["impl"] == "ours" and r.get("ratio_to_jax_nn") is not None:
      ours_vs_nn.append({**case, "ratio": r["ratio_to_jax_nn"], "met": r["ratio_to_jax_nn"] <= 1.0})
    if r["impl"] == "blockwise" and r.get("ms") is not None:
      dense = by_key[(*key(r), "dense")]
      if dense.get("ms") is not None:
        bw_vs_dense.append({**case, "ratio": r["ms"] / dense["ms"], "met": r["ms"] <= 2 * dense["ms"]})
      if r["mode"] == "fwd+bwd" and r["seq_len"] >= PEAK_TARGET_MIN_LEN:
        bw_peak.append({**case, "fraction": r["fraction_of_peak"], "met": r["fraction_of_peak"] >= PEAK_TARGET})
  mem = {r["impl"]: r for r in memory if r["seq_len"] == memory_seq_len}
  mem_target: dict[str, Any] = {"seq_len": memory_seq_len, "met": None}
  dense_m, bw_m = mem.get("dense", {}), mem.get("blockwise", {})
  if dense_m.get("status") == "ok" and bw_m.get("status") == "ok":
    ratio = bw_m["delta_rss_mib"] / max(dense_m["delta_rss_mib"], 1e-9)
    mem_target.update(basis="measured peak RSS above baseline", ratio=ratio, met=ratio <= 1 / 8)
  elif bw_m.get("status") == "ok" and dense_m.get("xla_planned_mib") and bw_m.get("xla_planned_mib"):
    ratio = bw_m["xla_planned_mib"] / dense_m["xla_planned_mib"]
    mem_target.update(basis=f"XLA-planned buffers (dense {dense_m.get('status')}: {dense_m.get('reason', '')})",
                      ratio=ratio, met=ratio <= 1 / 8)
  verdict = lambda rows: all(r["met"] for r in rows) if rows else None
  return {
      "default_at_least_as_fast_as_jax_nn": {"per_size": ours_vs_nn, "met": verdict(ours_vs_nn)},
      "blockwise_within_2x_of_dense": {"per_size": bw_vs_dense, "met": verdict(bw_vs_dense)},
      f"blockwise_fwd_bwd_at_least_{PEAK_TARGET:g}_of_peak_from_T_{PEAK_TARGET_MIN_LEN}": {
          "per_size": bw_peak, "met": verdict(bw_peak)},
      "blockwise_memory_at_most_eighth_of_dense": mem_target,
      "blockwise_long_sequence_runs": {"seq_len": long_run.get("seq_len"), "met": long_run.get("status") == "ok"},
  }


def _fmt_target(name: str, target: dict) -> str:
  verdict = {True: "met", False: "NOT met", None: "not measured"}[target["met"]]
  detail = ""
  if "per_size" in target and target["per_size"]:
    parts = []
    for r in target["per_size"]:
      value = r["ratio"] if "ratio" in r else r["fraction"]
      parts.append(f"{_case_name(r)}: {value:.2f}")
    detail = (" (time ratio " if "ratio" in target["per_size"][0] else " (fraction of peak ") + ", ".join(parts) + ")"
  elif target.get("ratio") is not None:
    detail = f" (blockwise/dense = {target['ratio']:.4f}, {target['basis']})"
  return f"target {name}: {verdict}{detail}"


def _case_name(r: dict) -> str:
  """B, T, N, d_k, masking and pass of a row, briefly."""
  return (f"B{r['batch']} T{r['seq_len']} N{r['num_heads']} d{r['head_dim']} {'causal' if r['causal'] else 'full'} "
          f"{r['mode']}")


def _table_order(item) -> tuple:
  """Shape family (B, N), d_k, causal first, pass, then T."""
  b, t, n, h, causal, mode = item[0]
  return b, n, h, not causal, mode, t


def markdown(timings: list[dict], peak_gflops: float, targets: dict | None = None,
             memory: list[dict] = ()) -> str:
  """The timing table in Markdown (one line per case, ms and time / jax.nn's per implementation), then the goals."""
  cases: dict[tuple, dict[str, dict]] = {}
  for r in timings:
    cases.setdefault((r["batch"], r["seq_len"], r["num_heads"], r["head_dim"], r["causal"], r["mode"]), {})[
        r["impl"]] = r
  def cell(r: dict) -> str:
    if r.get("ms") is None:
      return "skipped"
    ms = f"{r['ms']:.3g}" if r["ms"] < 1000 else f"{r['ms']:.0f}"
    return ms if r["impl"] == "jax_nn" or r.get("ratio_to_jax_nn") is None else f"{ms} ({r['ratio_to_jax_nn']:.2f})"
  rows = []
  for (b, t, n, h, causal, mode), by_impl in sorted(cases.items(), key=_table_order):
    bw = by_impl["blockwise"]
    rows.append([b, t, n, h, "causal" if causal else "none", mode, cell(by_impl["ours"]), by_impl["ours"]["chosen"],
                 cell(by_impl["dense"]), cell(bw), bw.get("blocks", ""), cell(by_impl["jax_nn"]), cell(by_impl["flax"]),
                 "" if bw.get("fraction_of_peak") is None else f"{bw['fraction_of_peak']:.2f}"])
  columns = ("B", "T", "N", "d_k", "mask", "pass", "ours ms (ratio)", "ours runs", "dense ms (ratio)",
             "blockwise ms (ratio)", "blocks", "jax.nn ms", "flax ms (ratio)", "blockwise / peak")
  text = report.markdown_table(columns, rows) + (
      f"\nratio = time / jax.nn's time in the same run (median of interleaved calls); blockwise / peak = its "
      f"GFLOP/s over the {peak_gflops:.0f} GFLOP/s float32 matmul peak measured in the same run.\n")
  if targets is not None:
    text += "\n" + _goals_markdown(targets)
  for r in memory:
    text += f"- memory, forward+backward, {_memory_markdown(r)}\n"
  return text


def _memory_markdown(r: dict) -> str:
  """One memory measurement in a sentence."""
  what = f"{r['impl']} at T = {r['seq_len']}, {r['num_heads']} head(s), d_k {r['head_dim']}"
  planned = "" if r.get("xla_planned_mib") is None else f"XLA plans {r['xla_planned_mib']:.0f} MiB"
  if r.get("status") == "ok":
    return f"{what}: peak RSS grows by {r['delta_rss_mib']:.0f} MiB ({planned}; {r['seconds']:.1f} s)"
  return f"{what}: {r.get('status')}, {r.get('reason', '')}" + (f" ({planned})" if planned else "")


def _goals_markdown(targets: dict) -> str:
  """One line per timing goal: met or not, and the extreme case."""
  lines = []
  speed = targets["default_at_least_as_fast_as_jax_nn"]["per_size"]
  if speed:
    worst = max(speed, key=lambda r: r["ratio"])
    missed = [r for r in speed if not r["met"]]
    lines.append(f"- default path at least as fast as jax.nn: met in {len(speed) - len(missed)} of {len(speed)} "
                 f"cases where both ran; slowest relative to jax.nn: {_case_name(worst)}, ratio "
                 f"{worst['ratio']:.2f}" + (f"; missed: " + ", ".join(f"{_case_name(r)} ({r['ratio']:.2f})"
                                                                       for r in missed) if missed else ""))
  name = next(k for k in targets if k.startswith("blockwise_fwd_bwd_at_least"))
  peak = targets[name]["per_size"]
  if peak:
    parts = ", ".join(f"{_case_name(r)}: {r['fraction']:.2f}" for r in peak)
    lines.append(f"- blockwise forward+backward at T >= {PEAK_TARGET_MIN_LEN}, fraction of the matmul peak "
                 f"(goal {PEAK_TARGET:g}): {parts}")
  return "\n".join(lines) + "\n"


def _plot(path: pathlib.Path, timings: list[dict], config: AttentionBenchConfig) -> None:
  fig, axes = plotting.grid_figure(1, 2, width=5.5, height=4.0)
  for ax, mode in zip(axes[0], MODES):
    series = {}
    for impl in IMPLEMENTATIONS:
      for h in config.head_dims:
        pts = [(r["seq_len"], r["ms"]) for r in timings
               if r["impl"] == impl and r["head_dim"] == h and r["mode"] == mode and r.get("ms") is not None
               and r["causal"] and r["batch"] == config.batch and r["num_heads"] == config.num_heads]
        if pts:
          series[f"{impl} d_k={h}"] = ([p[0] for p in pts], [p[1] for p in pts])
    plotting.line_plot(path, series, xlabel="sequence length T", ylabel="milliseconds (median)",
                       title=f"causal attention, {mode}", logx2=True, logy=True, ax=ax)
  plotting.save_figure(fig, path)


def run(out_dir: pathlib.Path, *, quick: bool = False, seq_lens=(512, 2048, 8192), head_dims=(64, 128),
        repeats: int = 5, **overrides) -> dict:
  """Runs the attention benchmark; prints the tables and writes attention.json and attention.png to out_dir.

  Args:
    out_dir: output directory (created if needed).
    quick: tiny sizes for a smoke run (T 128 and 256, one head dim, no extra
      shapes, 2 repeats, memory at T = 1024, the long run at T = 2048);
      overrides the sizes below.
    seq_lens: sequence lengths T (= S) to time.
    head_dims: head dimensions d_k to time.
    repeats: timed calls per implementation (median reported).
    **overrides: other ``AttentionBenchConfig`` fields (e.g. ``max_call_s``).

  Returns:
    Everything written to attention.json.
  """
  wall_start = time.perf_counter()
  out_dir = pathlib.Path(out_dir)
  out_dir.mkdir(parents=True, exist_ok=True)
  fields = dict(seq_lens=tuple(seq_lens), head_dims=tuple(head_dims), repeats=int(repeats))
  fields.update(overrides)
  if quick:
    fields.update(QUICK)
  config = AttentionBenchConfig(**fields)
  if not config.seq_lens or not config.head_dims or config.repeats < 1:
    raise ValueError(f"need at least one sequence length, one head dim and one repeat, got {config}")

  peak = measure_matmul_peak(config.peak_matmul_size)
  print(f"matmul peak: {peak['gflops']:.1f} GFLOP/s (float32 {config.peak_matmul_size}^2 jnp.dot, best of 5) "
        f"on {jax.devices()[0].platform}, {os.cpu_count()} cores; measured again after the timings", flush=True)
  timings = []
  series = [[(config.batch, t, config.num_heads, h) for t in sorted(config.seq_lens)] for h in config.head_dims]
  series += [[shape] for shape in config.extra_shapes]
  total = sum(map(len, series)) * len(config.causal) * len(MODES)
  with report.Progress(total, "attention") as progress:
    for shapes in series:
      for causal in config.causal:
        for mode in MODES:
          previous: dict[str, tuple[int, float]] = {}
          for b, seq_len, n, head_dim in shapes:
            rows = _time_size(config, b, seq_len, n, head_dim, causal, mode, previous)
            for row in rows:
              if row["status"] != "ok":
                print(f"  skip {row['impl']} {_case_name(row)}: {row['reason']}", flush=True)
            timings.extend(rows)
            progress.update(_case_name(rows[0]))
  # The peak is measured before and after the timings (other load on the machine can depress either) and the
  # better of the two is the reference.
  peak_after = measure_matmul_peak(config.peak_matmul_size)
  peak = {**max(peak, peak_after, key=lambda p: p["gflops"]), "before_gflops": peak["gflops"],
          "after_gflops": peak_after["gflops"]}
  print(f"matmul peak: {peak_after['gflops']:.1f} GFLOP/s after the timings; reference {peak['gflops']:.1f}",
        flush=True)
  for row in timings:
    if row.get("gflops") is not None:
      row["fraction_of_peak"] = row["gflops"] / peak["gflops"]
  columns = ("batch", "seq_len", "num_heads", "head_dim", "causal", "mode", "impl", "ms", "gflops", "ratio_to_jax_nn",
             "fraction_of_peak")
  table_rows = [{**r, "ms": r.get("ms", r["status"])} for r in timings]
  table = report.table(table_rows, columns, floatfmt=".3g")
  print(table, flush=True)

  # One fresh process per measurement; sequential (they would compete for memory and cores), except in a
  # quick run, whose tiny processes run side by side.
  jobs = [(impl, seq_len, config.num_heads, config.memory_timeout_s) for seq_len in config.memory_seq_lens
          for impl in ("dense", "blockwise")]
  jobs.append(("blockwise", config.long_seq_len, config.long_num_heads, config.long_timeout_s))
  if config.parallel_subprocesses:
    launched = [_launch_memory(*job[:3], config, job[3]) for job in jobs]
    rows = [_collect_memory(job) for job in launched]
  else:
    rows = [_collect_memory(_launch_memory(*job[:3], config, job[3])) for job in jobs]
  memory, long_run = rows[:-1], rows[-1]
  for row in memory:
    print("memory " + _fmt_memory(row), flush=True)
  print("long   " + _fmt_memory(long_run), flush=True)

  targets = _targets(timings, memory, long_run, max(config.memory_seq_lens))
  for name, target in targets.items():
    print(_fmt_target(name, target), flush=True)
  results = {
      "config": dataclasses.asdict(config),
      "machine": {"platform": jax.devices()[0].platform, "cpu_count": os.cpu_count(), "jax": jax.__version__,
                  "flax": flax.__version__, "matmul_peak": peak},
      "flop_convention": "4*B*N*T*S*H forward, x0.5 causal, x3.5 forward+backward",
      "timings": timings,
      "table": table,
      "memory": memory,
      "long_run": long_run,
      "targets": targets,
      "wall_s": time.perf_counter() - wall_start,
  }
  results_lib.write_json(out_dir / "attention.json", results)
  (out_dir / "attention.md").write_text(markdown(timings, peak["gflops"], targets, memory + [long_run]))
  _plot(out_dir / "attention.png", timings, config)
  print(f"attention suite: {results['wall_s']:.0f} s; wrote attention.json, attention.md and attention.png to "
        f"{out_dir}")
  return results


# Peak memory of one measurement, run by experiments.attention_memory in a fresh process.


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


def measure_memory(config: Any) -> dict:
  """Compiles and runs one forward+backward of ``experiments.attention_memory``'s config; returns the measurement."""

  row = dataclasses.asdict(config)
  row["rss_at_start_mib"] = _maxrss_mib()
  args = make_inputs(config.batch, config.seq_len, config.num_heads, config.head_dim, config.seed)
  step = make_step(config.impl, "fwd+bwd", causal=config.causal, block_q=config.block_q,
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


@dataclasses.dataclass(frozen=True)
class AttentionSuiteOptions(Options):
  """Options for running this suite on its own."""

  seq_lens: tuple[int, ...] = option((512, 2048, 8192), "Sequence lengths T to time.", lower=1)
  head_dims: tuple[int, ...] = option((64, 128), "Head dimensions d_k to time.", lower=1)
  repeats: int = option(5, "Timed calls per implementation.", lower=1)
  max_call_s: float = option(8.0, "Skip a size when one call would take longer.", positive=True)
  quick: bool = option(False, "Tiny sizes: a smoke run, not a measurement.")
  output: results_lib.OutputConfig = option(results_lib.OutputConfig("runs/bench_attention"), "Output.")


def _run(options: AttentionSuiteOptions, out_dir: pathlib.Path) -> None:
  results_lib.make_dir(out_dir)
  run(out_dir, quick=options.quick, seq_lens=list(options.seq_lens), head_dims=list(options.head_dims),
      repeats=options.repeats, max_call_s=options.max_call_s)


if __name__ == "__main__":
  sys.exit(cli.main(AttentionSuiteOptions, _run, None, __doc__))
