"""Benchmark suite `attention`: dense, blockwise, jax.nn and flax attention timed side by side.

  python -m experiments.benchmark --suite=attention                    # add --quick for a smoke run
  python -m experiments.benchmark --suite=attention --seq_lens=512,2048 --head_dims=64

For each sequence length T (= S), head dimension d_k and masking (causal or
not) it times the forward pass and the forward+backward pass (value and
gradients w.r.t. q, k, v) of the five implementations of
``benchmarks.implementations`` (batch 1, ``num_heads`` heads,
float32; ``extra_shapes`` adds (B, T, N, d_k) cases, and the GQA grid
``gqa_groups`` × ``gqa_seq_lens`` cases of batch ``gqa_batch`` with
``gqa_num_heads`` query heads over gqa_num_heads / group key/value heads,
both maskings); for ``ours`` the path the rule of
``scaling.attention.dispatch.select_implementation`` chose is recorded, and
``blockwise`` runs with the blocks that rule picks for the shape. Blockwise
also runs forced to the tiles the rule picks for the forward pass alone,
where they differ, and to each tile of ``tile_candidates``: per case the default's
time is printed against the fastest forced configuration (dense or blockwise
with any of those tiles) and against jax.nn's. ``ours (auto)`` is
``implementation="auto"`` (``scaling.attention.autotune``), timed beside the others:
before its forward+backward case is timed (that pass runs first) the
autotune measures the case itself, unless the row is skipped for its size
(``tune_attention`` over dense, ``tile_candidates`` and the rule's tiles,
forward+backward and then forward alone; its wall time is recorded as
``tune_s``, never mixed into the timings); the forward pass reuses that
choice (its forward, where it has one) and has no auto row where the
forward+backward one was skipped. The choices are kept
in a cache of the suite's own,
``attention_autotune.json`` in the output directory, started afresh each run
unless ``autotune_cache`` names a file to reuse.

Timing: every function is compiled ahead of time (compilation excluded) and
called twice to warm up; a forced tile of ``tile_candidates`` whose second
warm-up call took over ``PRUNE_FACTOR`` times the fastest forced
configuration's is not timed further (its row says so). Then the
implementations are called in turn, ``repeats`` rounds, each timed call
directly after an untimed call of the same function
(``scaling.attention.autotune.interleaved_times``: timed right after a dense path, a
blockwise one pays for the caches dense evicted), each call ending in
``block_until_ready``, and the fastest call is reported (other work on the
machine only adds time, so the minimum is the steadiest estimate of a path's
own cost; the median is kept as ``median_ms``). A measurement is skipped, with the reason printed, when its time
predicted from the previous length (time ∝ T²) exceeds ``max_call_s`` or when
XLA plans more buffer memory than ``memory.MAX_MEMORY_FRACTION`` of what is
available.

FLOP counts (``implementations.attention_flops``): 4·B·N·T·S·H forward,
halved for causal attention, times 3.5 for forward+backward (the
FlashAttention benchmarks' convention). GFLOP/s are compared with the
machine's matmul peak, timed per case in the same interleaved rounds as the
case's own calls (a float32 ``peak_matmul_size``² ``jnp.dot``, its fastest
call): a machine whose peak drifts from minute to minute is measured in the
minute the case ran, as the train suite does.

Memory: the peak resident set size of one forward+backward at
``memory_seq_lens`` (d_k = ``memory_head_dim``) is measured for dense and
blockwise, each in a fresh subprocess (``benchmarks.memory``),
and a blockwise forward+backward at ``long_seq_len`` (``long_num_heads``
heads, to keep it to a minute or two on two cores) is run in a subprocess
with a time limit.

Writes ``attention.json`` (every measurement), ``attention.md`` (the timing
table in Markdown, for the generated section of docs/benchmarks.md: ``python
scripts/update_readme.py attention <out_dir>/attention.md``) and
``attention.png`` (time against T, one line per implementation and head
dimension; forward and forward+backward panels, causal) into the output
directory.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import pathlib
import statistics
import time
from typing import Any, Callable

import flax
import jax

from scaling.attention import dispatch as attention_lib
from scaling.attention import logits as logits_lib
from scaling.attention import autotune
from scaling.runs import plotting
from scaling.runs import report
from scaling.training import resources
from scaling.runs import results as results_lib
from scaling.base.config import option
from scaling.base.config import Options
from benchmarks import memory as memory_lib
from benchmarks import timing
from benchmarks.implementations import attention_flops
from benchmarks.implementations import AUTO
from benchmarks.implementations import BLOCK_K
from benchmarks.implementations import BLOCK_Q
from benchmarks.implementations import IMPLEMENTATIONS
from benchmarks.implementations import make_inputs
from benchmarks.implementations import make_step
from benchmarks.implementations import MODES
from scaling.base.validation import ConfigError
from scaling.base.validation import ConfigTypeError

# Goals reported (never asserted): the default at least as fast as jax.nn everywhere, and blockwise
# forward+backward at T >= PEAK_TARGET_MIN_LEN reaching PEAK_TARGET of the measured matmul peak, and the default
# within BEST_FORCED_TARGET of the fastest forced configuration.
PEAK_TARGET = 0.45
PEAK_TARGET_MIN_LEN = 2048
BEST_FORCED_TARGET = 1.1
PRUNE_FACTOR = 1.5
"""A forced tile whose warm-up call took over this times the fastest forced configuration's is not timed further."""
FORCED = ("dense", "blockwise")
"""The forced configurations the default is compared with (and blockwise at each of ``tile_candidates``)."""


COMMAND_LINE = ("seq_lens", "head_dims", "repeats", "max_call_s", "gqa_groups", "gqa_seq_lens", "autotune_cache")
"""The options of ``AttentionBenchConfig`` that ``python -m experiments.benchmark`` has flags for."""


@dataclasses.dataclass(frozen=True)
class AttentionBenchConfig(Options):
  """Sizes and limits of one run of the suite."""

  seq_lens: tuple[int, ...] = option((512, 2048, 8192), "Attention suite: sequence lengths T to time.", lower=1)
  head_dims: tuple[int, ...] = option((64, 128), "Attention suite: head dimensions d_k to time.", lower=1)
  repeats: int = option(5, "Attention suite: timed calls per implementation (the fastest is reported).", lower=1)
  num_heads: int = option(4, "Heads of the timed cases.", lower=1)
  batch: int = option(1, "Batch of the timed cases.", lower=1)
  causal: tuple[bool, ...] = option((True, False), "Maskings timed (causal or not).")
  extra_shapes: tuple[tuple[int, int, int, int], ...] = ((4, 512, 8, 64), (1, 1024, 8, 64), (4, 1024, 8, 64),
                                                         (1, 2048, 8, 64), (1, 1536, 4, 128), (8, 256, 8, 64))
  """(B, T, N, d_k) cases timed besides the grid of ``seq_lens`` × ``head_dims`` (both maskings); the last two check
  the default path where it has been slowest relative to the fastest forced configuration: d_k 128 at a T between
  the grid's, and a batch of 8 at T 256, where the rule's step cap decides the tile."""
  gqa_groups: tuple[int, ...] = option((1, 4, 8), "Attention suite: GQA groups N/K of the GQA grid.", lower=1)
  gqa_seq_lens: tuple[int, ...] = option((256, 1024, 4096, 8192), "Attention suite: T of the GQA grid.", lower=1)
  gqa_batch: int = option(2, "Batch of the GQA grid.", lower=1)
  gqa_num_heads: int = option(8, "Query heads N of the GQA grid.", lower=1)
  gqa_head_dim: int = option(64, "Head dimension of the GQA grid.", lower=1)
  tile_candidates: tuple[tuple[int, int], ...] = autotune.TILE_CANDIDATES
  """(block_q, block_k) tiles blockwise is also forced to, for the best forced configuration of each case (and
  those the autotune measures, with dense and the fixed rule's tiles)."""
  autotune_modes: tuple[str, ...] = option(MODES, "Passes (fwd, fwd+bwd) that also time implementation='auto' "
                                           "(tuned before its first case); empty: none.")
  autotune_repeats: int = option(autotune.REPEATS, "Timed calls per candidate of the autotune (the fastest counts).",
                                 lower=1)
  autotune_cache: str | None = option(None, "Attention suite: autotune cache file to read and extend; default: a "
                                      "fresh attention_autotune.json in the output directory.")
  block_q: int = option(BLOCK_Q, "Blockwise query block of the memory measurements.", lower=1)
  block_k: int = option(BLOCK_K, "Blockwise key block of the memory measurements.", lower=1)
  max_call_s: float = option(8.0, "Attention suite: skip a size when one call would take longer (seconds).",
                             positive=True)
  peak_matmul_size: int = option(2048, "Side of the float32 matmul whose GFLOP/s is the peak.", lower=1)
  memory_seq_lens: tuple[int, ...] = option((4096, 16384), "Sequence lengths of the memory measurements.", lower=1)
  memory_head_dim: int = option(64, "Head dimension of the memory measurements.", lower=1)
  long_seq_len: int = option(65536, "Sequence length of the long blockwise run.", lower=1)
  long_num_heads: int = option(1, "Heads of the long blockwise run.", lower=1)
  long_timeout_s: float = option(300.0, "Time limit of the long blockwise run (seconds).", positive=True)
  memory_timeout_s: float = option(300.0, "Time limit of each memory measurement (seconds).", positive=True)
  parallel_subprocesses: bool = option(False, "Run the memory measurements side by side (tiny sizes only).")
  seed: int = option(0, "Seed of the random inputs.", lower=0)

  def validate(self):
    for mode in self.autotune_modes:
      if mode not in MODES:
        raise ConfigError(f"autotune_modes must hold passes of {', '.join(MODES)}, got {mode!r}")
    for group in self.gqa_groups:
      if self.gqa_num_heads % group:
        raise ConfigError(f"gqa_groups must divide gqa_num_heads = {self.gqa_num_heads}, got {group}")
    for tile in self.tile_candidates:
      if (not isinstance(tile, tuple) or len(tile) != 2
          or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in tile)):
        raise ConfigError(f"tile_candidates must hold (block_q, block_k) pairs of positive integers, got {tile!r}")
    for shape in self.extra_shapes:
      if (not isinstance(shape, tuple) or len(shape) != 4
          or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in shape)):
        raise ConfigError(f"extra_shapes must hold (B, T, N, d_k) tuples of positive integers, got {shape!r}")


QUICK = AttentionBenchConfig(seq_lens=(256,), head_dims=(32,), repeats=2, causal=(True,), extra_shapes=(),
                             gqa_groups=(4,), gqa_seq_lens=(256,), gqa_num_heads=4, gqa_head_dim=32,
                             tile_candidates=((64, 128),), autotune_repeats=1, autotune_modes=("fwd+bwd",),
                             peak_matmul_size=256, memory_seq_lens=(1024,), memory_head_dim=32, long_seq_len=2048,
                             long_timeout_s=120.0, memory_timeout_s=120.0, parallel_subprocesses=True)
"""Tiny sizes for a smoke run (T 256, one head dim, causal only, no extra shapes, one GQA case, one forced tile,
2 repeats, the autotune in the forward+backward pass with one call per candidate, memory at T = 1024, the long
run at T = 2048), not a measurement."""


PEAK_CALL = "matmul peak"
"""The name of the peak's matmul among a case's interleaved calls."""


def _time_size(config: AttentionBenchConfig, shape: tuple[int, int, int, int, int], causal: bool, mode: str,
               previous: dict[str, tuple[int, float]], peak_call: Callable[..., Any]) -> list[dict]:
  """Times all implementations (and blockwise at each forced tile) at one (B, T, N, K, d_k) case, interleaved.

  ``peak_call`` (the peak's matmul, ignoring its arguments) is timed in the same rounds; each timed row records
  that peak (``peak_gflops``) and its fraction of it. Updates ``previous`` {impl: (T, s)}.
  """
  batch, seq_len, num_heads, num_kv_heads, head_dim = shape
  args = make_inputs(batch, seq_len, num_heads, head_dim, config.seed, num_kv_heads=num_kv_heads)
  flops = attention_flops(batch, seq_len, num_heads, head_dim, causal=causal, mode=mode)
  opts = logits_lib.resolve_logit_options(head_dim, scale=None, rule=None, logit_soft_cap=None, logit_clamp=None,
                                          float32_softmax=True, subtract_max=True)
  choice = attention_lib.select_implementation(args[0].shape, args[1].shape, opts, is_causal=causal)
  block_q, block_k = ((choice.block_q, choice.block_k) if choice.implementation == "blockwise"
                      else attention_lib.blockwise_blocks(args[0].shape, args[1].shape, is_causal=causal))
  entries = {impl: (impl, block_q, block_k) for impl in IMPLEMENTATIONS}
  if mode in config.autotune_modes:
    entries[AUTO_ROW] = (AUTO, block_q, block_k)
  for bq, bk in (*attention_lib.fixed_tiles(choice), *config.tile_candidates):  # the rule's forward tiles too
    bq, bk = min(bq, seq_len), min(bk, seq_len)
    if (bq, bk) != (block_q, block_k):
      entries.setdefault(f"blockwise {bq}x{bk}", ("blockwise", bq, bk))
  rows, active = {}, {}
  for name, (impl, bq, bk) in entries.items():
    row = {"batch": batch, "seq_len": seq_len, "num_heads": num_heads, "num_kv_heads": num_kv_heads,
           "head_dim": head_dim, "causal": causal, "mode": mode, "impl": name, "flops": flops}
    if impl == "ours":
      row["chosen"] = autotune.choice_name(choice)
    if impl == "blockwise":
      row["blocks"] = f"{bq}x{bk}"
    rows[name] = row
    if name in previous:
      t_prev, s_prev = previous[name]
      predicted = s_prev * (seq_len / t_prev) ** 2
      if predicted > config.max_call_s:
        row.update(status="skipped", reason=f"predicted {predicted:.0f} s per call from {s_prev * 1e3:.0f} ms "
                                            f"at T={t_prev} exceeds the {config.max_call_s:g} s limit")
        continue
    if impl == AUTO:
      # The autotune tunes in the forward+backward pass only (run first), timing both passes; the forward pass
      # reuses its choice, and has none where that pass was skipped.
      row.update(_tune(config, args[0].shape, args[1].shape, opts, causal, may_tune=mode == TUNED_MODE))
      if row["chosen"] is None:
        row.update(status="skipped", reason=f"not tuned: the autotune's {TUNED_MODE} case was skipped at this size")
        continue
    step = make_step(impl, mode, causal=causal, block_q=bq, block_k=bk)
    start = time.perf_counter()
    compiled = jax.jit(step).lower(*args).compile()
    row["compile_s"] = time.perf_counter() - start
    planned, available = memory_lib.planned_bytes(compiled.memory_analysis()), resources.host_available_bytes()
    row["xla_planned_mib"] = None if planned is None else planned / 2**20
    fraction = memory_lib.MAX_MEMORY_FRACTION
    if planned is not None and available is not None and planned > fraction * available:
      row.update(status="skipped", reason=f"XLA plans {planned / 2**30:.1f} GiB, more than {fraction:g} "
                                          f"of the {available / 2**30:.1f} GiB available")
      continue
    first = timing.time_call(compiled, args)  # pays one-time costs
    warm = first if first > config.max_call_s else timing.time_call(compiled, args)
    row["warmup_s"] = warm
    if warm > config.max_call_s:
      row.update(status="skipped", reason=f"the warm-up call took {warm:.1f} s, over the {config.max_call_s:g} s "
                                          f"limit")
      previous[name] = (seq_len, warm)
      continue
    active[name] = compiled
  for name, reason in _pruned({name: (entries[name][0], rows[name]["warmup_s"]) for name in active}).items():
    rows[name].update(status="pruned", reason=reason)
    del active[name]
  times = autotune.interleaved_times({**active, PEAK_CALL: peak_call} if active else {}, args, config.repeats)
  peak_gflops = (timing.matmul_flops(config.peak_matmul_size) / min(times.pop(PEAK_CALL)) / 1e9 if active
                 else None)
  for name, row_times in times.items():
    rows[name]["times_s"] = row_times
  for impl in active:
    row = rows[impl]
    fastest = min(row["times_s"])
    previous[impl] = (seq_len, fastest)
    gflops = flops / fastest / 1e9
    row.update(status="ok", ms=fastest * 1e3, median_ms=statistics.median(row["times_s"]) * 1e3, gflops=gflops,
               peak_gflops=peak_gflops, fraction_of_peak=gflops / peak_gflops)
  base = rows["jax_nn"].get("ms")
  for row in rows.values():
    if row.get("ms") is not None and base is not None:
      row["ratio_to_jax_nn"] = row["ms"] / base
  forced = [r for r in rows.values() if r.get("ms") is not None and r["impl"].split(" ")[0] in FORCED]
  for ours in (rows["ours"], rows.get(AUTO_ROW, {})):
    if forced and ours.get("ms") is not None:
      best = min(forced, key=lambda r: r["ms"])
      ours.update(best_forced=best["impl"] + (f" {best['blocks']}" if best["impl"] == "blockwise" else ""),
                  best_forced_ms=best["ms"], ratio_to_best_forced=ours["ms"] / best["ms"])
  return list(rows.values())


def _pruned(warmups: dict[str, tuple[str, float]]) -> dict[str, str]:
  """The extra forced tiles not worth timing further, with why: {row name: reason}.

  Args:
    warmups: {row name: (implementation, warm-up seconds)} of the rows that ran; the extra tiles are the rows
      named other than their implementation (``"blockwise 64x128"``).

  Returns:
    The extra tiles whose warm-up took over ``PRUNE_FACTOR`` times the fastest forced configuration's.
  """
  forced = [s for impl, s in warmups.values() if impl in FORCED]
  if not forced:
    return {}
  fastest = min(forced)
  return {name: f"its warm-up call ({s * 1e3:.0f} ms) took over {PRUNE_FACTOR:g}x the fastest forced one's "
                f"({fastest * 1e3:.0f} ms)"
          for name, (impl, s) in warmups.items() if name != impl and impl in FORCED and s > PRUNE_FACTOR * fastest}


AUTO_ROW = "ours (auto)"
"""The row of ``implementation="auto"``."""
TUNED_MODE = "fwd+bwd"
"""The pass that tunes (``scaling.attention.autotune.tune_attention``, which times both passes): timed first."""


def _tune(config: AttentionBenchConfig, query_shape: tuple[int, ...], key_shape: tuple[int, ...],
          opts: logits_lib.LogitOptions, causal: bool, may_tune: bool = True) -> dict[str, Any]:
  """Tunes the case (unless the cache has it) by the autotune's own measurements; its choice and wall time.

  With ``may_tune=False`` a case missing from the cache is not tuned: its ``chosen`` is None.
  """
  key = autotune.cache_key(query_shape, key_shape, "float32", opts, is_causal=causal)
  start = time.perf_counter()
  tune = autotune.load().get(key) is None and key_shape[-3] >= attention_lib.BLOCKWISE_MIN_KV_LEN
  if tune and not may_tune:
    return {"chosen": None, "tune_s": 0.0, "tuned": False}
  if tune:
    fixed = attention_lib.select_implementation(query_shape, key_shape, opts, is_causal=causal)
    candidates = autotune.candidates_for(query_shape, key_shape, config.tile_candidates,
                                         attention_lib.fixed_tiles(fixed))
    autotune.tune_attention(query_shape, key_shape, "float32", is_causal=causal, opts=opts, candidates=candidates,
                            repeats=config.autotune_repeats)
  choice = attention_lib.auto_choice(query_shape, key_shape, "float32", opts, is_causal=causal, local_window_size=None,
                                has_bias=False, has_mask=False, has_lengths=False, return_weights=False)
  return {"chosen": autotune.choice_name(choice), "tune_s": time.perf_counter() - start, "tuned": tune}


def _describe_case(rows: list[dict]) -> str:
  """One line: the default's time against the best forced configuration's and jax.nn's."""
  ours = next(r for r in rows if r["impl"] == "ours")
  if ours.get("ms") is None:
    return f"{_case_name(ours)}: ours {ours['status']}"
  text = f"{_case_name(ours)}: ours ({ours['chosen']}) {ours['ms']:.4g} ms"
  if ours.get("best_forced") is not None:
    text += (f"; best forced ({ours['best_forced']}) {ours['best_forced_ms']:.4g} ms, ours / best "
             f"{ours['ratio_to_best_forced']:.2f}")
  if ours.get("ratio_to_jax_nn") is not None:
    text += f"; ours / jax.nn {ours['ratio_to_jax_nn']:.2f}"
  auto = next((r for r in rows if r["impl"] == AUTO_ROW), None)
  if auto is not None and auto.get("ms") is not None:
    text += (f"; auto ({auto['chosen']}, tuned in {auto['tune_s']:.1f} s) {auto['ms']:.4g} ms"
             + (f", auto / best {auto['ratio_to_best_forced']:.2f}" if auto.get("ratio_to_best_forced") else ""))
  return text


def _configuration(row: dict) -> str | None:
  """The exact path a timing row ran ("dense" or "blockwise BQxBK"); None for jax.nn's and flax's."""
  if row["impl"] in ("ours", AUTO_ROW):
    chosen = row.get("chosen")
    if chosen is not None and autotune.FORWARD in chosen:  # its forward alone, its own path under differentiation
      differentiated, forward = chosen.split(autotune.FORWARD)
      return forward if row["mode"] == "fwd" else differentiated
    return chosen
  if row["impl"] == "blockwise":
    return f"blockwise {row['blocks']}"
  return row["impl"] if row["impl"].split(" ")[0] in FORCED else None


def timing_noise(timings: list[dict]) -> dict[str, Any]:
  """How far apart one run's timings of the same compiled path are: the noise floor of its ratios.

  The default runs the same program as one forced row whenever its rule picks that path, and auto as another,
  so per case every path timed as two or more rows gives a spread (slowest / fastest of those rows' times).

  Args:
    timings: the suite's timing rows.

  Returns:
    {"spreads": [{case..., "path", "spread"}], "median", "max"} (None without a path timed twice).
  """
  groups: dict[tuple, list[float]] = {}
  for r in timings:
    path = _configuration(r)
    if r.get("ms") is not None and path is not None:
      groups.setdefault((*(r[name] for name in CASE_KEYS), path), []).append(r["ms"])
  spreads = [{**dict(zip(CASE_KEYS, key[:-1])), "path": key[-1], "spread": max(ms) / min(ms)}
             for key, ms in groups.items() if len(ms) > 1]
  values = [s["spread"] for s in spreads]
  return {"spreads": spreads, "median": statistics.median(values) if values else None,
          "max": max(values) if values else None}


def _targets(timings: list[dict], memory: list[dict], long_run: dict, memory_seq_len: int) -> dict:
  """The goals this suite reports on (none is asserted)."""
  key = lambda r: tuple(r[name] for name in CASE_KEYS)
  by_key = {(*key(r), r["impl"]): r for r in timings}
  ours_vs_nn, ours_vs_best, auto_vs_best, bw_vs_dense, bw_peak = [], [], [], [], []
  for r in timings:
    case = {name: r[name] for name in CASE_KEYS}
    if r["impl"] == "ours" and r.get("ratio_to_jax_nn") is not None:
      ours_vs_nn.append({**case, "ratio": r["ratio_to_jax_nn"], "met": r["ratio_to_jax_nn"] <= 1.0})
    if r["impl"] in ("ours", AUTO_ROW) and r.get("ratio_to_best_forced") is not None:
      (ours_vs_best if r["impl"] == "ours" else auto_vs_best).append(
          {**case, "ratio": r["ratio_to_best_forced"], "best": r["best_forced"],
           "picked_best": _configuration(r) == r["best_forced"], "met": r["ratio_to_best_forced"] <= BEST_FORCED_TARGET})
    if r["impl"] == "blockwise" and r.get("ms") is not None:
      dense = by_key[(*key(r), "dense")]
      if dense.get("ms") is not None:
        bw_vs_dense.append({**case, "ratio": r["ms"] / dense["ms"], "met": r["ms"] <= 2 * dense["ms"]})
      if r["mode"] == "fwd+bwd" and r["seq_len"] >= PEAK_TARGET_MIN_LEN:
        bw_peak.append({**case, "fraction": r["fraction_of_peak"], "peak_gflops": r.get("peak_gflops"),
                        "met": r["fraction_of_peak"] >= PEAK_TARGET})
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
      f"default_within_{BEST_FORCED_TARGET:g}x_of_best_forced": {"per_size": ours_vs_best,
                                                                "met": verdict(ours_vs_best)},
      f"auto_within_{BEST_FORCED_TARGET:g}x_of_best_forced": {"per_size": auto_vs_best, "met": verdict(auto_vs_best)},
      "blockwise_within_2x_of_dense": {"per_size": bw_vs_dense, "met": verdict(bw_vs_dense)},
      f"blockwise_fwd_bwd_at_least_{PEAK_TARGET:g}_of_peak_from_T_{PEAK_TARGET_MIN_LEN}": {
          "per_size": bw_peak, "met": verdict(bw_peak)},
      "blockwise_memory_at_most_eighth_of_dense": mem_target,
      "blockwise_long_sequence_runs": {"seq_len": long_run.get("seq_len"), "met": long_run.get("status") == "ok"},
      "timing_noise": timing_noise(timings),
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


CASE_KEYS = ("batch", "seq_len", "num_heads", "num_kv_heads", "head_dim", "causal", "mode")
"""The fields of a timing row that name its case."""


def _case_name(r: dict) -> str:
  """B, T, N (K under GQA), d_k, masking and pass of a row, briefly."""
  kv = f"/K{r['num_kv_heads']}" if r["num_kv_heads"] != r["num_heads"] else ""
  return (f"B{r['batch']} T{r['seq_len']} N{r['num_heads']}{kv} d{r['head_dim']} "
          f"{'causal' if r['causal'] else 'full'} {r['mode']}")


def _table_order(item) -> tuple:
  """Shape family (B, N, K), d_k, causal first, pass, then T."""
  b, t, n, kh, h, causal, mode = item[0]
  return b, n, -kh, h, not causal, mode, t


def markdown(timings: list[dict], peak: dict, targets: dict | None = None,
             memory: list[dict] = (), load: str = "") -> str:
  """The timing table in Markdown (one line per case, ms and time / jax.nn's per implementation), then the goals.

  ``peak`` is the results' ``machine.matmul_peak``: timed per case (with ``min_gflops``) or, in results of older
  runs, once for the whole suite.
  """
  cases: dict[tuple, dict[str, dict]] = {}
  for r in timings:
    cases.setdefault(tuple(r[name] for name in CASE_KEYS), {})[r["impl"]] = r
  def cell(r: dict) -> str:
    if r.get("ms") is None:
      return "skipped"
    ms = f"{r['ms']:.3g}" if r["ms"] < 1000 else f"{r['ms']:.0f}"
    return ms if r["impl"] == "jax_nn" or r.get("ratio_to_jax_nn") is None else f"{ms} ({r['ratio_to_jax_nn']:.2f})"
  rows = []
  for (b, t, n, kh, h, causal, mode), by_impl in sorted(cases.items(), key=_table_order):
    bw, ours, auto = by_impl["blockwise"], by_impl["ours"], by_impl.get(AUTO_ROW, {"impl": AUTO_ROW})
    best = ("" if ours.get("best_forced") is None
            else f"{ours['best_forced']} ({ours['ratio_to_best_forced']:.2f})")
    auto_runs = ("" if auto.get("ratio_to_best_forced") is None
                 else f"{auto['chosen']} ({auto['ratio_to_best_forced']:.2f})")
    rows.append([b, t, n, kh, h, "causal" if causal else "none", mode, cell(ours), ours["chosen"], best,
                 cell(auto) if AUTO_ROW in by_impl else "",
                 auto_runs,
                 cell(by_impl["dense"]), cell(bw), bw.get("blocks", ""), cell(by_impl["jax_nn"]), cell(by_impl["flax"]),
                 "" if bw.get("fraction_of_peak") is None else f"{bw['fraction_of_peak']:.2f}"])
  columns = ("B", "T", "N", "K", "d_k", "mask", "pass", "ours ms (ratio)", "ours runs", "best forced (ours / it)",
             "auto ms (ratio)", "auto runs (auto / best)",
             "dense ms (ratio)", "blockwise ms (ratio)", "blocks", "jax.nn ms", "flax ms (ratio)", "blockwise / peak")
  text = report.markdown_table(columns, rows) + (
      f"\nratio = time / jax.nn's time in the same run (fastest of interleaved calls); best forced = the fastest of "
      f"dense and blockwise at the rule's and the candidate tiles, with the default's time over its; auto = "
      f"implementation=\"auto\", tuned by its own measurements before the timings, with its time over the best "
      f"forced; blockwise / "
      f"peak = its GFLOP/s over {_peak_text(peak)}{load}.\n")
  if targets is not None:
    text += "\n" + _goals_markdown(targets)
  for r in memory:
    text += f"- memory, forward+backward, {memory_lib.markdown(r)}\n"
  return text


def _peak_text(peak: dict) -> str:
  """What the fractions of peak are over, in words."""
  if not peak.get("per_case"):
    return f"the {peak['gflops']:.0f} GFLOP/s float32 matmul peak measured in the same run"
  if peak["gflops"] is None:
    return "the float32 matmul peak timed in the same interleaved rounds as the case (no case was timed)"
  return (f"the float32 matmul peak timed in the same interleaved rounds as the case ({peak['min_gflops']:.0f}–"
          f"{peak['max_gflops']:.0f} GFLOP/s across cases, median {peak['gflops']:.0f})")


def markdown_from_results(results: dict) -> str:
  """attention.md from a run's results (as ``run`` returns them or attention.json holds them), goals recomputed."""
  targets = _targets(results["timings"], results["memory"], results["long_run"],
                     max(results["config"]["memory_seq_lens"]))
  text = markdown(results["timings"], results["machine"]["matmul_peak"], targets,
                  [*results["memory"], results["long_run"]], load=timing.load_note(results))
  limit = results["config"]["max_call_s"]
  return text + (f"- the suite took {results['wall_s'] / 60:.0f} min (calls predicted over {limit:g} s "
                 f"skipped)\n")


OWN_PATH = "its own path"
"""Marks a missed case in which the default (or auto) ran the fastest forced row's own program."""


def _miss(r: dict) -> str:
  """A missed case of a best-forced goal: its name, ratio and the path that won."""
  return f"{_case_name(r)} ({r['ratio']:.2f}, best {r['best']}" + (f", {OWN_PATH}" if r["picked_best"] else "") + ")"


def _goals_markdown(targets: dict) -> str:
  """One line per timing goal: met or not, and the extreme case."""
  lines = []
  speed = targets["default_at_least_as_fast_as_jax_nn"]["per_size"]
  if speed:
    worst = max(speed, key=lambda r: r["ratio"])
    missed = [r for r in speed if not r["met"]]
    lines.append(f"- default path at least as fast as jax.nn: met in {len(speed) - len(missed)} of {len(speed)} "
                 f"cases where both ran; slowest relative to jax.nn: {_case_name(worst)}, ratio "
                 f"{worst['ratio']:.2f}" + ("; missed: " + ", ".join(f"{_case_name(r)} ({r['ratio']:.2f})"
                                                                       for r in missed) if missed else ""))
  for path, name in (("default path", "default"), ('implementation="auto"', "auto")):
    best = targets.get(f"{name}_within_{BEST_FORCED_TARGET:g}x_of_best_forced", {}).get("per_size")
    if best:
      worst = max(best, key=lambda r: r["ratio"])
      missed = [r for r in best if not r["met"]]
      picked = sum(r["picked_best"] for r in best)
      lines.append(f"- {path} within {BEST_FORCED_TARGET:g}x of the fastest forced configuration: met in "
                   f"{len(best) - len(missed)} of {len(best)} cases; slowest relative to it: {_case_name(worst)}, "
                   f"ratio {worst['ratio']:.2f} (best: {worst['best']}); it ran the fastest forced configuration "
                   f"itself in {picked} of {len(best)}" + (f"; missed (\"{OWN_PATH}\": it ran the very program of the "
                                                            f"fastest forced row, so the miss is timing noise): "
                                                            + ", ".join(map(_miss, missed)) if missed else ""))
  noise = targets.get("timing_noise", {})
  if noise.get("spreads"):
    worst = max(noise["spreads"], key=lambda r: r["spread"])
    lines.append(f"- timing noise: the same compiled path timed as two rows of one case ({len(noise['spreads'])} "
                 f"cases) differs by a median factor of {noise['median']:.2f}, at most {noise['max']:.2f} "
                 f"({_case_name(worst)}, {worst['path']}); ratios within that factor of 1 are not told apart")
  name = next(k for k in targets if k.startswith("blockwise_fwd_bwd_at_least"))
  peak = targets[name]["per_size"]
  if peak:
    parts = ", ".join(f"{_case_name(r)}: {r['fraction']:.2f}"
                      + ("" if r.get("peak_gflops") is None else f" (of {r['peak_gflops']:.0f} GFLOP/s)") for r in peak)
    lines.append(f"- blockwise forward+backward at T >= {PEAK_TARGET_MIN_LEN}, fraction of the matmul peak "
                 f"(goal {PEAK_TARGET:g}): {parts}")
  return "\n".join(lines) + "\n"


def _plot(path: pathlib.Path, timings: list[dict], config: AttentionBenchConfig) -> None:
  beside = len(IMPLEMENTATIONS) * len(config.head_dims) > plotting.LEGEND_INSIDE
  fig, axes = plotting.grid_figure(1, 2, width=5.5 + (plotting.LEGEND_WIDTH if beside else 0), height=4.0)
  for ax, mode in zip(axes[0], MODES):
    series = {}
    for impl in IMPLEMENTATIONS:
      for h in config.head_dims:
        pts = [(r["seq_len"], r["ms"]) for r in timings
               if r["impl"] == impl and r["head_dim"] == h and r["mode"] == mode and r.get("ms") is not None
               and r["causal"] and r["batch"] == config.batch and r["num_heads"] == config.num_heads
               and r["num_kv_heads"] == config.num_heads]
        if pts:
          series[f"{impl} d_k={h}"] = ([p[0] for p in pts], [p[1] for p in pts])
    plotting.line_plot(path, series, xlabel="sequence length T", ylabel="milliseconds (fastest call)",
                       title=f"causal attention, {mode}", logx2=True, logy=True, ax=ax)
  plotting.save_figure(fig, path)


def run(config: AttentionBenchConfig, out_dir: pathlib.Path) -> dict:
  """Runs the attention benchmark; prints the tables and writes attention.json, attention.md and attention.png.

  Args:
    config: the sizes and limits (``QUICK`` for a smoke run).
    out_dir: output directory (created if needed).

  Returns:
    Everything written to attention.json.
  """
  if not isinstance(config, AttentionBenchConfig):
    raise ConfigTypeError(f"config must be an AttentionBenchConfig, got {type(config).__name__}")
  wall_start = time.perf_counter()
  load_start = os.getloadavg()[0]
  out_dir = pathlib.Path(out_dir)
  out_dir.mkdir(parents=True, exist_ok=True)

  dot, dot_args = timing.matmul_call(config.peak_matmul_size)
  peak_call = lambda *_: dot(*dot_args)
  print(f"matmul peak: timed per case, a float32 {config.peak_matmul_size}^2 jnp.dot interleaved with the case's "
        f"calls, on {jax.devices()[0].platform}, {os.cpu_count()} cores", flush=True)
  timings = []
  n_gqa = config.gqa_num_heads
  series = [[(config.batch, t, config.num_heads, config.num_heads, h) for t in sorted(config.seq_lens)]
            for h in config.head_dims]
  series += [[(b, t, n, n, h)] for b, t, n, h in config.extra_shapes]
  series += [[(config.gqa_batch, t, n_gqa, n_gqa // g, config.gqa_head_dim) for t in sorted(config.gqa_seq_lens)]
             for g in config.gqa_groups]
  total = sum(map(len, series)) * len(config.causal) * len(MODES)
  tune_cache = out_dir / autotune.CACHE_NAME if config.autotune_cache is None else pathlib.Path(
      config.autotune_cache).expanduser()
  if config.autotune_cache is None:
    tune_cache.unlink(missing_ok=True)
  with report.Progress(total, "attention") as progress, autotune.cache_file(tune_cache):
    for shapes in series:
      for causal in config.causal:
        for mode in sorted(MODES, key=lambda m: m != TUNED_MODE):
          previous: dict[str, tuple[int, float]] = {}
          for shape in shapes:
            rows = _time_size(config, shape, causal, mode, previous, peak_call)
            for row in rows:
              if row["status"] != "ok":
                print(f"  skip {row['impl']} {_case_name(row)}: {row['reason']}", flush=True)
            print(_describe_case(rows), flush=True)
            timings.extend(rows)
            progress.update(_case_name(rows[0]))
  case_peaks = {_case_name(r): r["peak_gflops"] for r in timings if r.get("peak_gflops") is not None}
  peak = {"size": config.peak_matmul_size, "per_case": True,
          "gflops": statistics.median(case_peaks.values()) if case_peaks else None,
          "min_gflops": min(case_peaks.values(), default=None), "max_gflops": max(case_peaks.values(), default=None)}
  if case_peaks:
    print(f"matmul peak per case: {peak['min_gflops']:.1f}–{peak['max_gflops']:.1f} GFLOP/s, median "
          f"{peak['gflops']:.1f}", flush=True)
  columns = (*CASE_KEYS, "impl", "ms", "gflops", "ratio_to_jax_nn", "peak_gflops", "fraction_of_peak")
  table_rows = [{**r, "ms": r.get("ms", r["status"])} for r in timings]
  table = report.table(table_rows, columns, floatfmt=".3g")
  print(table, flush=True)

  # One fresh process per measurement; sequential (they would compete for memory and cores), except in a
  # quick run, whose tiny processes run side by side.
  measure = functools.partial(memory_lib.MemoryConfig, batch=config.batch, head_dim=config.memory_head_dim,
                              block_q=config.block_q, block_k=config.block_k, causal=True, seed=config.seed,
                              max_memory_fraction=memory_lib.MAX_MEMORY_FRACTION)
  jobs = [(measure(impl=impl, seq_len=seq_len, num_heads=config.num_heads), config.memory_timeout_s)
          for seq_len in config.memory_seq_lens for impl in ("dense", "blockwise")]
  jobs.append((measure(impl="blockwise", seq_len=config.long_seq_len, num_heads=config.long_num_heads),
               config.long_timeout_s))
  if config.parallel_subprocesses:
    launched = [memory_lib.launch(*job) for job in jobs]
    rows = [memory_lib.collect(job) for job in launched]
  else:
    rows = [memory_lib.collect(memory_lib.launch(*job)) for job in jobs]
  memory, long_run = rows[:-1], rows[-1]
  for row in memory:
    print("memory " + memory_lib.describe(row), flush=True)
  print("long   " + memory_lib.describe(long_run), flush=True)

  targets = _targets(timings, memory, long_run, max(config.memory_seq_lens))
  for name, target in targets.items():
    if name != "timing_noise":
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
      "load_average": [load_start, os.getloadavg()[0]],
  }
  results_lib.write_json(out_dir / "attention.json", results)
  (out_dir / "attention.md").write_text(markdown_from_results(results))
  print(_goals_markdown(targets), end="", flush=True)
  _plot(out_dir / "attention.png", timings, config)
  print(f"attention suite: {results['wall_s']:.0f} s; wrote attention.json, attention.md and attention.png to "
        f"{out_dir}")
  return results


