"""Benchmark suite `sweep`: the vmapped sweep against the same numbers computed one configuration at a time."""

from __future__ import annotations

import dataclasses
import functools
import pathlib
import time
from typing import Any, Callable

import jax
import numpy as np

from scaling import plotting
from scaling import report
from scaling import results as results_lib
from scaling.studies import sweep as sweep_lib


@functools.lru_cache(maxsize=256)
def _single_config_fn(config: sweep_lib.SweepConfig, d_k: int, rule_name: str) -> Callable[[jax.Array], dict]:
  """A jitted function key -> {metric: scalar} for one rule, one d_k and one seed (cached)."""
  dtype = sweep_lib.DTYPES[config.dtype[0]]
  source = sweep_lib.default_source(config)
  rule = config.rule(rule_name)
  compute = sweep_lib.metrics_fn(config)

  @jax.jit
  def single(key):
    k_qkv, k_g = jax.random.split(key)
    q, k, v = (x.astype(dtype) for x in source(k_qkv, d_k, config.qk_std[0]))
    g = jax.random.normal(k_g, q.shape).astype(dtype)
    return compute(q, k, v, g, rule)

  return single


def run_one_at_a_time(config: sweep_lib.SweepConfig) -> list[dict[str, Any]]:
  """The same numbers computed one (rule, d_k, seed) at a time: the baseline the benchmark compares against."""
  base_key = jax.random.key(config.seed)
  rows = []
  for d_k in config.d_k:
    keys = jax.random.split(jax.random.fold_in(base_key, d_k), config.num_seeds)
    for name in config.rules:
      single = _single_config_fn(config, d_k, name)
      per_seed = [jax.device_get(single(keys[i])) for i in range(config.num_seeds)]
      stacked = {m: np.stack([p[m] for p in per_seed]) for m in per_seed[0]}
      rows.append({"rule": name, "d_k": d_k, **sweep_lib.summarize(stacked)})
  return rows


def clear_caches() -> None:
  """Forgets compiled sweep functions (for cold-start timing)."""
  sweep_lib.make_shape_fn.cache_clear()
  _single_config_fn.cache_clear()
  jax.clear_caches()


def _timed(fn):
  start = time.perf_counter()
  out = fn()
  return out, time.perf_counter() - start


def run(out_dir: pathlib.Path, *, quick: bool = False) -> dict:
  """Times the default sweep (cold: compilation included; warm: compiled) vmapped and one at a time."""
  config = sweep_lib.SweepConfig()
  if quick:
    config = sweep_lib.SweepConfig(d_k=(8,), rules=("sqrt", "qk_norm"), num_seeds=2, seq_len=16, batch=1)
  results = {"config": dataclasses.asdict(config), "devices": [str(d) for d in jax.devices()]}
  timings = {}
  for name, fn in (("vmapped", lambda: sweep_lib.run_sweep(config)),
                   ("one_at_a_time", lambda: run_one_at_a_time(config))):
    clear_caches()
    rows, cold = _timed(fn)
    _, warm = _timed(fn)
    timings[name] = {"cold_s": cold, "warm_s": warm, "rows": rows}
  fast = {(r["rule"], r["d_k"]): r for r in timings["vmapped"].pop("rows")}
  slow = timings["one_at_a_time"].pop("rows")
  max_rel = max(abs(fast[(r["rule"], r["d_k"])][m]["mean"] - r[m]["mean"]) / (abs(r[m]["mean"]) + 1e-12)
                for r in slow for m in sweep_lib.METRICS)
  ratio = timings["one_at_a_time"]["cold_s"] / timings["vmapped"]["cold_s"]
  warm_ratio = timings["one_at_a_time"]["warm_s"] / timings["vmapped"]["warm_s"]
  results.update(timings=timings, speedup_cold=ratio, speedup_warm=warm_ratio, max_rel_diff=max_rel)
  rows = [{"method": k, "cold_s": v["cold_s"], "warm_s": v["warm_s"]} for k, v in timings.items()]
  print(report.table(rows, ("method", "cold_s", "warm_s"), floatfmt=".2f"))
  print(f"sweep: vmapped is {ratio:.1f}x faster cold (compilation included) and {warm_ratio:.1f}x faster warm "
        f"than one configuration at a time "
        f"({len(slow)} configurations x {config.num_seeds} seeds; max relative difference {max_rel:.1e})")
  results_lib.write_json(out_dir / "sweep.json", results)
  fig, axes = plotting.grid_figure(1, 1)
  ax = axes[0][0]
  x = np.arange(len(rows))
  ax.bar(x - 0.2, [r["cold_s"] for r in rows], 0.4, label="cold (incl. compilation)")
  ax.bar(x + 0.2, [r["warm_s"] for r in rows], 0.4, label="warm")
  ax.set_xticks(x, [r["method"] for r in rows])
  ax.set_ylabel("wall time (s)")
  ax.legend()
  ax.set_title(f"default sweep: vmapped {ratio:.1f}x (cold), {warm_ratio:.1f}x (warm) faster")
  plotting.save_figure(fig, out_dir / "sweep.png")
  return {"speedup_cold": ratio, "speedup_warm": warm_ratio, "vmapped_cold_s": timings["vmapped"]["cold_s"]}
