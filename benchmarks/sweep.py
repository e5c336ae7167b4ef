"""Benchmark suite `sweep`: the vmapped sweep against the same numbers computed one configuration at a time, and
the same sweep run twice in fresh processes, as ``python -m experiments.sweep`` runs it, the second run reading
back what the first wrote to JAX's persistent compilation cache.

The rerun comparison starts the sweep twice as separate processes (``worker``)
with one fresh, empty cache folder: the first run compiles and writes every
program, the second reads them back. It reports the wall time of each whole
process and the in-run time (the sum of the per-head-dimension times in
timings.jsonl), and their ratios.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import pathlib
import subprocess
import tempfile
import time
from typing import Any, Callable

import jax
import numpy as np

from scaling.base import config as config_lib
from scaling.runs import plotting
from scaling.runs import report
from scaling.runs import results as results_lib
from scaling.base.config import option
from scaling.base.config import Options
from benchmarks import timing
from benchmarks import worker
from scaling.studies import sweep as sweep_lib
from scaling.base.validation import ConfigTypeError


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


def rerun_with_cache(config: sweep_lib.SweepConfig) -> dict[str, Any]:
  """Runs the sweep ``config`` twice, each in a fresh process, with one fresh cache folder; times both runs.

  Args:
    config: the sweep (both runs; each writes its own output folder).

  Returns:
    {"flags" (the command line of ``config``), "runs": [{"wall_s", "in_run_s", "cache_files"} for the first and
    second run], "wall_ratio", "in_run_ratio"} (ratios: first / second).
  """
  if not isinstance(config, sweep_lib.SweepConfig):
    raise ConfigTypeError(f"config must be a SweepConfig, got {type(config).__name__}")
  flags = config_lib.command_line(config)
  runs = []
  with tempfile.TemporaryDirectory(prefix="sweep-rerun-") as tmp:
    cache = pathlib.Path(tmp) / "cache"
    for i in range(2):
      out = pathlib.Path(tmp) / f"run{i}"
      job = dataclasses.replace(config, output=dataclasses.replace(config.output, out_dir=str(out)))
      start = time.perf_counter()
      subprocess.run(worker.command("sweep", job, cache), env=worker.environment(), check=True,
                     stdout=subprocess.DEVNULL)
      wall = time.perf_counter() - start
      in_run = sum(json.loads(line)["seconds"] for line in (out / "timings.jsonl").read_text().splitlines())
      runs.append({"wall_s": wall, "in_run_s": in_run, "cache_files": sum(1 for p in cache.rglob("*") if p.is_file())})
  return {"flags": list(flags), "runs": runs, "wall_ratio": runs[0]["wall_s"] / runs[1]["wall_s"],
          "in_run_ratio": runs[0]["in_run_s"] / runs[1]["in_run_s"]}


@dataclasses.dataclass(frozen=True)
class SweepBenchConfig(Options):
  """The sweep timed (vmapped, one at a time, and rerun with the persistent compilation cache)."""

  sweep: sweep_lib.SweepConfig = option(sweep_lib.SweepConfig(), "The sweep timed vmapped, one at a time and "
                                        "rerun in fresh processes.")


QUICK = SweepBenchConfig(sweep=sweep_lib.SweepConfig(d_k=(8,), rules=("sqrt", "qk_norm"), num_seeds=2, seq_len=(16,),
                                                     batch=1))
"""Tiny sizes for a smoke run, not a measurement."""


def run(bench: SweepBenchConfig, out_dir: pathlib.Path) -> dict:
  """Times the sweep (cold: compilation included; warm: compiled) vmapped and one at a time, and the rerun.

  Args:
    bench: the sweep (``QUICK`` for a smoke run).
    out_dir: the output folder (it must exist); gets sweep.json, sweep.md and sweep.png.

  Returns:
    The headline numbers: both speedups, the vmapped cold time and the rerun's wall-time ratio.
  """
  if not isinstance(bench, SweepBenchConfig):
    raise ConfigTypeError(f"bench must be a SweepBenchConfig, got {type(bench).__name__}")
  config = bench.sweep
  results = {"config": dataclasses.asdict(config), "devices": [str(d) for d in jax.devices()],
             "load_average": [os.getloadavg()[0]]}
  timings = {}
  for name, fn in (("vmapped", lambda: sweep_lib.run_sweep(config)),
                   ("one_at_a_time", lambda: run_one_at_a_time(config))):
    clear_caches()
    rows, cold = timing.timed(fn)
    _, warm = timing.timed(fn)
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
  rerun = rerun_with_cache(config)
  results["rerun"] = rerun
  results["load_average"].append(os.getloadavg()[0])
  first, second = rerun["runs"]
  print(report.table([{"run": name, "process_s": r["wall_s"], "in_run_s": r["in_run_s"],
                       "cache_files": r["cache_files"]} for name, r in zip(("first", "second"), rerun["runs"])],
                     ("run", "process_s", "in_run_s", "cache_files"), floatfmt=".2f"))
  print(f"sweep: with the persistent compilation cache, the second identical run of the sweep is "
        f"{rerun['wall_ratio']:.1f}x faster than the first (whole process; {rerun['in_run_ratio']:.1f}x in-run)")
  results_lib.write_json(out_dir / "sweep.json", results)
  (out_dir / "sweep.md").write_text(readme_markdown(results))
  _figure(rows, ratio, warm_ratio, out_dir / "sweep.png")
  return {"speedup_cold": ratio, "speedup_warm": warm_ratio, "vmapped_cold_s": timings["vmapped"]["cold_s"],
          "rerun_wall_ratio": rerun["wall_ratio"]}


def _figure(rows: list[dict[str, Any]], ratio: float, warm_ratio: float, path: pathlib.Path) -> None:
  """Bars of each method's wall time, cold and warm; the title gives the vmapped sweep's speedups."""
  fig, axes = plotting.grid_figure(1, 1, width=max(4.0, 1.6 * len(rows)), height=3.6)
  ax = axes[0][0]
  x = np.arange(len(rows))
  ax.bar(x - 0.2, [r["cold_s"] for r in rows], 0.4, label="cold (incl. compilation)")
  ax.bar(x + 0.2, [r["warm_s"] for r in rows], 0.4, label="warm")
  ax.set_xticks(x, [r["method"] for r in rows])
  ax.set_ylabel("wall time (s)")
  ax.legend()
  ax.set_title(f"default sweep: vmapped {ratio:.1f}x (cold),\n{warm_ratio:.1f}x (warm) faster")
  plotting.save_figure(fig, path)


def outside_run_bound(rerun: dict[str, Any]) -> str:
  """The part of the second run spent outside the sweep itself (start-up, imports, tables and figures), which no
  compilation cache shortens, and the whole-process speedup it allows at most (first run / that part), in words."""
  first, second = rerun["runs"]
  outside = second["wall_s"] - second["in_run_s"]
  bound = first["wall_s"] / outside if outside > 0 else float("inf")
  return (f"Of the second run's {second['wall_s']:.1f} s, {outside:.1f} s are spent outside the sweep (Python "
          f"start-up, imports, tables and figures), which no cache shortens: even a sweep that took no time at all "
          f"would make the whole process at most {bound:.1f}× faster.")


def readme_markdown(results: dict[str, Any]) -> str:
  """The measurements of ``results`` (sweep.json) as Markdown for the docs' generated section."""
  c, t, rerun = results["config"], results["timings"], results["rerun"]
  configurations = len(c["d_k"]) * len(c["rules"] or sweep_lib.DEFAULT_RULES)
  lines = [f"**sweep**: the sweep ({len(c['d_k'])} head dims × {len(c['rules'] or sweep_lib.DEFAULT_RULES)} rules, "
           f"{c['num_seeds']} seeds, T = {c['seq_len'][0]}) vmapped over rules and seeds against the same "
           f"{configurations} configurations × {c['num_seeds']} seeds computed one at a time (same numbers to "
           f"{results['max_rel_diff']:.0e} relative)" + timing.load_note(results) + ":", ""]
  lines.append(report.markdown_table(("method", "cold s (with compilation)", "warm s"),
                                     [(name.replace("_", " "), f"{v['cold_s']:.1f}", f"{v['warm_s']:.2f}")
                                      for name, v in t.items()]))
  lines.append(f"Vmapped is **{results['speedup_cold']:.1f}× faster cold** and {results['speedup_warm']:.1f}× warm.")
  lines.append("")
  command = " ".join(["python -m experiments.sweep", *rerun["flags"]])
  lines.append(f"Rerunning `{command}` with JAX's persistent compilation cache (two processes, one fresh cache "
               f"folder; in-run = the sum of the per-head-dimension times in timings.jsonl):")
  lines.append("")
  lines.append(report.markdown_table(("run", "process s", "in-run s", "files in the cache"),
                                     [(name, f"{r['wall_s']:.1f}", f"{r['in_run_s']:.1f}", r["cache_files"])
                                      for name, r in zip(("first", "second"), rerun["runs"])]))
  lines.append(f"The second run is **{rerun['wall_ratio']:.1f}× faster** as a whole process and "
               f"{rerun['in_run_ratio']:.1f}× in-run. {outside_run_bound(rerun)}")
  return "\n".join(lines) + "\n"
