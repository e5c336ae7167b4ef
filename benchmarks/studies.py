"""Benchmark suite `studies`: where a study's time goes (compilation, compute, the rest), and how compilation grows
with depth.

Three measurements, each side by side in one run:

* The studies end to end. Each study (the quick claims run, the coordinate check and the width transfer on their
  defaults) runs twice in a fresh process of its own (``worker``, as ``python -m experiments.<study>`` runs it) with
  one fresh, empty compilation-cache folder: cold (every program compiled and written) and warm (read back). Each
  run writes its wall time split into compilation, compute and the rest (``scaling.runs.timesplit``; ``time_split.json``
  in its output folder); the table puts both runs of every study beside the targets (``TARGETS``) and says whether
  each is met.
* XLA's backend optimization level on a CPU (``time_levels``): the coordinate check cold at the level the
  library's programs compile at (``scaling.base.compilation``) and at XLA's default, in alternating fresh processes:
  their compile and compute times, and whether the results are identical.
* Compilation against depth, two ways. The training run as a user starts it (``python -m experiments.train`` on its
  defaults but ``--depth``), in a fresh process with an empty compilation cache at each depth: the compilation its
  own time split measured (every program: the parameters' init, the step, the evaluation). And the training step
  alone of one model (and of a vmapped grid of ``grid_members`` learning rates) at each depth, with the blocks
  unrolled and scanned (``ModelConfig.scan_layers``). Every variant afresh in interleaved rounds (best of
  ``rounds``); the ratio depth 12 / depth 2 against the target ``DEPTH_TARGET``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import subprocess
import tempfile
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from scaling.base import compilation
from scaling.base import config as config_lib
from scaling.training.model.family import ModelFamily
from scaling.training.optimizer import OptimizerConfig
from scaling.runs import plotting
from scaling.runs import report
from scaling.runs import results as results_lib
from scaling.runs import timesplit
from scaling.training.loop import run as loop_lib
from scaling.training.loop import programs as programs_lib
from scaling.training.loop import step as step_lib
from scaling.base import validation
from scaling.base.config import option
from scaling.base.config import Options
from scaling.studies.claims import study as claims_lib
from scaling.studies.coord_check import study as coord_check_lib
from scaling.studies.transfer import study as transfer_lib
from scaling.studies import train as train_lib
from benchmarks import timing
from benchmarks import worker
from scaling.base.validation import ConfigError
from scaling.base.validation import ConfigTypeError

STUDIES = ("claims", "coord_check", "transfer")
TARGETS = {"claims": (240.0, 0.40), "coord_check": (60.0, None), "transfer": (600.0, None)}
"""Study: (most wall seconds of the cold run, largest share of compilation in it or None)."""
DEPTH_TARGET = 1.3
"""The most a depth-12 training run (and its step alone) may take to compile over a depth-2 one."""


@dataclasses.dataclass(frozen=True)
class StudiesBenchConfig(Options):
  """Which studies are timed and their configs, and the sizes of the depth measurement."""

  studies: tuple[str, ...] = option(STUDIES, "Studies run end to end, cold and warm.", choices=STUDIES)
  claims: claims_lib.ClaimsConfig = option(claims_lib.ClaimsConfig(mode="quick"), "The claims run (quick mode).")
  coord_check: coord_check_lib.CoordCheckConfig = option(coord_check_lib.CoordCheckConfig(),
                                                         "The coordinate check run.")
  transfer: transfer_lib.TransferConfig = option(transfer_lib.TransferConfig(), "The width transfer run.")
  train: train_lib.TrainConfig = option(train_lib.TrainConfig(), "The training run compiled at each depth (its "
                                        "model's depth replaced).")
  depths: tuple[int, ...] = option((2, 12), "Depths whose training run and training step are compiled.", lower=1)
  width: int = option(64, "Width of the depth measurement's model.", lower=1)
  grid_members: int = option(15, "Members of the vmapped grid compiled beside the single run.", lower=2)
  rounds: int = option(2, "Rounds of the depth measurement (best of).", lower=1)

  def validate(self):
    if len(self.depths) < 2:
      raise ConfigError("depths needs at least two depths")

  def config_of(self, study: str) -> Options:
    """The config ``study`` runs with."""
    if study not in STUDIES:
      raise ConfigError(f"study {validation.must_be_one_of(study, STUDIES)}")
    return getattr(self, study)


QUICK = StudiesBenchConfig(studies=("coord_check",), depths=(1, 2), width=16, grid_members=2, rounds=1,
                           train=config_lib.build(train_lib.TrainConfig, {"width": 16, "steps": 2,
                                                                          "eval_batches": 1}),
                           coord_check=config_lib.build(coord_check_lib.CoordCheckConfig,
                                                        {"widths": (16, 32), "steps": 1, "num_seeds": 1, "depth": 1}))
"""Tiny sizes for a smoke run (one small study, shallow models), not a measurement."""


def run_study(study: str, config: Options, cache: pathlib.Path, out: pathlib.Path,
              env: dict[str, str] | None = None) -> dict[str, Any]:
  """Runs ``study`` on ``config`` once in a fresh process (``worker``) with ``cache`` as its compilation cache and
  ``out`` as its output folder (``env``: its environment, default ``worker.environment()``); returns its time split
  with the process's own wall time (``process_s``)."""
  job = dataclasses.replace(config, output=dataclasses.replace(config.output, out_dir=str(out)))
  start = time.perf_counter()
  subprocess.run(worker.command(study, job, cache), env=env or worker.environment(), check=True,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  split = json.loads((out / timesplit.FILE).read_text())
  return {**split, "process_s": time.perf_counter() - start}


def time_studies(config: StudiesBenchConfig) -> list[dict[str, Any]]:
  """Each study cold then warm (one fresh cache folder per study): one row per run."""
  rows = []
  for study in dict.fromkeys(config.studies):
    with tempfile.TemporaryDirectory(prefix=f"studies-{study}-") as tmp:
      study_config = config.config_of(study)
      flags = list(config_lib.command_line(study_config))
      for cache_state in ("cold", "warm"):
        split = run_study(study, study_config, pathlib.Path(tmp) / "cache", pathlib.Path(tmp) / cache_state)
        rows.append({"study": study, "cache": cache_state, "flags": flags, **split})
        print(f"studies: {study} ({cache_state} cache): {split['wall_s']:.1f}s = compilation "
              f"{split['compile_s']:.1f}s + compute {split['compute_s']:.1f}s + rest {split['rest_s']:.1f}s", flush=True)
  return rows


XLA_DEFAULT_LEVEL = 3
"""XLA's own backend optimization level (its ``DebugOptions`` default), timed beside ``compilation.jit``'s."""


def level_environment(level: int | None) -> dict[str, str]:
  """``worker.environment()`` with XLA_FLAGS' backend optimization level removed (None: the library's ``jit``
  chooses it) or set to ``level``."""
  env = worker.environment()
  kept = [f for f in env.get("XLA_FLAGS", "").split() if compilation.LEVEL_FLAG not in f]
  if level is not None:
    kept.append(f"--{compilation.LEVEL_FLAG}={level}")
  env["XLA_FLAGS"] = " ".join(kept)
  return env


def time_levels(config: StudiesBenchConfig) -> list[dict[str, Any]]:
  """The coordinate check cold, compiled at the library's CPU level (``compilation.CPU_BACKEND_OPTIMIZATION_LEVEL``)
  and at XLA's default (``XLA_DEFAULT_LEVEL``), each in a fresh process with an empty cache, alternating over
  ``config.rounds`` rounds (best wall time of each); how far apart their results are (``largest_difference`` of
  the two results.jsonl) is in each row. Empty on other backends, where ``compilation.jit`` is ``jax.jit``."""
  if jax.default_backend() != "cpu":
    return []
  study_config = config.coord_check
  levels = (("library", compilation.CPU_BACKEND_OPTIMIZATION_LEVEL, None),
            ("XLA default", XLA_DEFAULT_LEVEL, XLA_DEFAULT_LEVEL))
  best: dict[str, dict[str, Any]] = {}
  written: dict[str, list[dict[str, Any]]] = {}
  for _ in range(config.rounds):
    for name, level, env_level in levels:
      with tempfile.TemporaryDirectory(prefix="studies-level-") as tmp:
        out = pathlib.Path(tmp) / "out"
        split = run_study("coord_check", study_config, pathlib.Path(tmp) / "cache", out, level_environment(env_level))
        written[name] = results_lib.read_jsonl(out / "results.jsonl")
      if name not in best or split["wall_s"] < best[name]["wall_s"]:
        best[name] = {"setting": name, "level": level, **split}
  difference = largest_difference(written["library"], written["XLA default"])
  rows = [{**best[name], "largest_difference": difference} for name, _, _ in levels]
  print("studies: coord_check cold by XLA backend level: " + ", ".join(
      f"{r['setting']} ({r['level']}) {r['wall_s']:.1f}s, compilation {r['compile_s']:.1f}s" for r in rows)
        + f"; results differ by at most {difference:.2g} (relative)", flush=True)
  return rows


def largest_difference(a: Any, b: Any) -> float:
  """The largest relative difference |x − y| / max(|x|, |y|) between the numbers at the same place of two JSON
  values (rows of one study); 0.0 when equal, inf when they differ in anything but numbers (keys, lengths, text)."""
  if isinstance(a, bool) or isinstance(b, bool) or not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
      return max((largest_difference(a[k], b[k]) for k in a), default=0.0)
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
      return max((largest_difference(x, y) for x, y in zip(a, b)), default=0.0)
    return 0.0 if a == b else float("inf")
  if a == b or (np.isnan(a) and np.isnan(b)):
    return 0.0
  return float(abs(a - b) / max(abs(a), abs(b)))


def step_compile_seconds(depth: int, width: int, members: int, scan: bool) -> float:
  """Seconds to lower and compile the training step (every metric) of an SP model of ``depth`` blocks (4 heads,
  batch 8 × 64 tokens), a single run or a vmapped grid of ``members``; nothing is cached between calls."""
  family = ModelFamily(depth=depth, num_heads=4, base_width=width, scan_layers=scan)
  config = family.model_config("sp", width, vocab_size=65, max_len=64)
  opt = OptimizerConfig(steps=10)
  grid = members > 1
  program = programs_lib.as_program(config, opt)
  init = jax.vmap(program.init_state) if grid else program.init_state
  state = jax.eval_shape(lambda *args: program.with_constants(init(*args)),
                         *(jnp.zeros((members,) if grid else (), d) for d in (jnp.int32, jnp.float32)))
  shape = (members, 8, 64) if grid else (8, 64)
  batch = {"inputs": jax.ShapeDtypeStruct(shape, jnp.int32), "targets": jax.ShapeDtypeStruct(shape, jnp.int32),
           "weights": jax.ShapeDtypeStruct(shape, jnp.float32)}
  chunk = step_lib.default_grid_chunk(config, members) if grid else None
  loop_lib.clear_caches()
  jax.clear_caches()
  step = step_lib.make_train_step(config, opt, grid=grid, chunk=chunk)
  start = time.perf_counter()
  step.lower(state, batch).compile()
  return time.perf_counter() - start


def time_train_depths(config: StudiesBenchConfig) -> list[dict[str, Any]]:
  """The training run's compilation seconds (its own time split) at each depth, cold: a fresh process and cache
  folder per run, best of ``config.rounds`` interleaved rounds."""
  best: dict[int, dict[str, Any]] = {}
  for _ in range(config.rounds):
    for depth in config.depths:
      train = dataclasses.replace(config.train, model=dataclasses.replace(config.train.model, depth=depth))
      with tempfile.TemporaryDirectory(prefix=f"studies-train-depth{depth}-") as tmp:
        split = run_study("train", train, pathlib.Path(tmp) / "cache", pathlib.Path(tmp) / "out")
      if depth not in best or split["compile_s"] < best[depth]["compile_s"]:
        best[depth] = {"depth": depth, "flags": list(config_lib.command_line(train)), **split}
  return [best[d] for d in config.depths]


def train_depth_ratio(rows: list[dict[str, Any]]) -> dict[str, Any]:
  """The training run's compilation at the deepest depth over the shallowest, against ``DEPTH_TARGET``."""
  lo = min(rows, key=lambda r: r["depth"])
  hi = max(rows, key=lambda r: r["depth"])
  ratio = hi["compile_s"] / lo["compile_s"]
  return {"ratio": ratio, "meets_target": ratio <= DEPTH_TARGET}


def time_depths(config: StudiesBenchConfig) -> list[dict[str, Any]]:
  """Compile seconds per (members, layout, depth), best of ``config.rounds`` interleaved rounds."""
  variants = [(m, scan, d) for m in (1, config.grid_members) for scan in (False, True) for d in config.depths]
  best = {v: float("inf") for v in variants}
  for _ in range(config.rounds):
    for v in variants:
      best[v] = min(best[v], step_compile_seconds(v[2], config.width, v[0], v[1]))
  return [{"members": m, "layout": "scanned" if scan else "unrolled", "depth": d, "compile_s": best[(m, scan, d)]}
          for m, scan, d in variants]


def depth_ratios(rows: list[dict[str, Any]], depths: tuple[int, ...]) -> list[dict[str, Any]]:
  """Compile time at the deepest depth over the shallowest, per (members, layout), against ``DEPTH_TARGET``."""
  lo, hi = min(depths), max(depths)
  by = {(r["members"], r["layout"], r["depth"]): r["compile_s"] for r in rows}
  out = []
  for members, layout in dict.fromkeys((r["members"], r["layout"]) for r in rows):
    ratio = by[(members, layout, hi)] / by[(members, layout, lo)]
    out.append({"members": members, "layout": layout, f"depth_{lo}_s": by[(members, layout, lo)],
                f"depth_{hi}_s": by[(members, layout, hi)], "ratio": ratio, "meets_target": ratio <= DEPTH_TARGET})
  return out


def judge(row: dict[str, Any]) -> dict[str, Any]:
  """A study run's row with its targets and whether the cold run meets them (warm runs are not judged)."""
  wall, share = TARGETS[row["study"]]
  compile_share = row["compile_s"] / row["wall_s"] if row["wall_s"] > 0 else float("nan")
  met = None
  if row["cache"] == "cold":
    met = row["wall_s"] <= wall and (share is None or compile_share <= share)
  return {**row, "compile_share": compile_share, "target_wall_s": wall, "target_compile_share": share,
          "meets_target": met}


def run(bench: StudiesBenchConfig, out_dir: pathlib.Path) -> dict:
  """Times the studies cold and warm and the step's compilation against depth; writes studies.json, studies.md and
  studies.png into ``out_dir`` (which must exist).

  Returns:
    The headline numbers: each study's cold wall seconds and whether every target was met.
  """
  if not isinstance(bench, StudiesBenchConfig):
    raise ConfigTypeError(f"bench must be a StudiesBenchConfig, got {type(bench).__name__}")
  results = {"config": dataclasses.asdict(bench), "devices": [str(d) for d in jax.devices()],
             "load_average": [os.getloadavg()[0]]}
  studies = [judge(r) for r in time_studies(bench)]
  levels = time_levels(bench)
  train_rows = time_train_depths(bench)
  train_ratio = train_depth_ratio(train_rows)
  print(f"studies: experiments.train compilation at depths {bench.depths}: "
        + ", ".join(f"{r['compile_s']:.1f}s" for r in train_rows) + f" (ratio {train_ratio['ratio']:.2f})", flush=True)
  depth_rows = time_depths(bench)
  ratios = depth_ratios(depth_rows, bench.depths)
  results["load_average"].append(os.getloadavg()[0])
  results.update(studies=studies, levels=levels, train_depths=train_rows, train_depth_ratio=train_ratio,
                 depths=depth_rows, depth_ratios=ratios)
  print(report.table([{k: r[k] for k in ("study", "cache", "wall_s", "compile_s", "compute_s", "rest_s", "compiles",
                                         "cache_hits", "meets_target")} for r in studies],
                     ("study", "cache", "wall_s", "compile_s", "compute_s", "rest_s", "compiles", "cache_hits",
                      "meets_target"), floatfmt=".1f"))
  print(report.table(ratios, tuple(ratios[0]), floatfmt=".2f"))
  results_lib.write_json(out_dir / "studies.json", results)
  (out_dir / "studies.md").write_text(readme_markdown(results))
  _figure(studies, out_dir / "studies.png")
  return {**{f"{r['study']}_cold_s": r["wall_s"] for r in studies if r["cache"] == "cold"},
          "targets_met": all(r["meets_target"] for r in studies if r["meets_target"] is not None)
          and all(r["meets_target"] for r in ratios) and train_ratio["meets_target"]}


def _figure(studies: list[dict[str, Any]], path: pathlib.Path) -> None:
  """Stacked bars: each run's compilation, compute and rest."""
  fig, axes = plotting.grid_figure(1, 1, width=max(4.0, 1.1 * len(studies)), height=3.6)
  ax = axes[0][0]
  x = np.arange(len(studies))
  bottom = np.zeros(len(studies))
  for part in ("compile_s", "compute_s", "rest_s"):
    values = np.array([max(0.0, r[part]) for r in studies])
    ax.bar(x, values, 0.6, bottom=bottom, label=part.removesuffix("_s"))
    bottom += values
  ax.set_xticks(x, [f"{r['study']}\n{r['cache']}" for r in studies])
  ax.set_ylabel("wall time (s)")
  ax.legend()
  ax.set_title("where each study's time goes\n(cold and warm compilation cache)")
  plotting.save_figure(fig, path)


def _verdict(met: bool | None) -> str:
  return "–" if met is None else ("**yes**" if met else "**no**")


def readme_markdown(results: dict[str, Any]) -> str:
  """The measurements of ``results`` (studies.json) as Markdown for the docs' generated section."""
  lines = ["**studies**: each study as `python -m experiments.<study>` twice with one fresh compilation-cache folder "
           "(cold: every program compiled; warm: read back), its wall time split as the run measured it "
           "(`scaling.runs.timesplit`)" + timing.load_note(results) + ":", ""]
  rows = []
  for r in results["studies"]:
    share = r["target_compile_share"]
    target = f"≤ {r['target_wall_s']:.0f} s" + (f", compilation ≤ {100 * share:.0f}%" if share is not None else "")
    rows.append((f"`{' '.join([r['study'], *r['flags']])}`", r["cache"], f"{r['wall_s']:.1f}",
                 f"{r['compile_s']:.1f} ({100 * r['compile_share']:.0f}%)", f"{r['compute_s']:.1f}",
                 f"{r['rest_s']:.1f}", f"{r['compiles']} ({r['cache_hits']} from the cache)",
                 target if r["cache"] == "cold" else "", _verdict(r["meets_target"])))
  lines.append(report.markdown_table(("study", "cache", "wall s", "compilation s", "compute s", "rest s",
                                      "programs", "target (cold)", "met"), rows))
  lines.append("")
  c = results["config"]
  if results.get("levels"):
    base = results["levels"][-1]
    lines.append(f"XLA's backend optimization level on a CPU: the coordinate check (`coord_check` above) cold at the "
                 f"level the library's programs compile at (`scaling.base.compilation`) and at XLA's default, best of "
                 f"{c['rounds']} alternating rounds; their results compared number by number:")
    lines.append("")
    lines.append(report.markdown_table(
        ("level", "wall s", "compilation s", "compute s", "programs", "compilation / XLA default's"),
        [(f"{r['level']} ({r['setting']})", f"{r['wall_s']:.1f}", f"{r['compile_s']:.1f}", f"{r['compute_s']:.1f}",
          r["compiles"], f"{r['compile_s'] / base['compile_s']:.2f}") for r in results["levels"]]))
    difference = base["largest_difference"]
    lines.append("")
    lines.append("Their results (every RMS of results.jsonl) are " + (
        "identical." if difference == 0 else f"equal up to a relative difference of {difference:.2g} at most."))
    lines.append("")
  lo, hi = min(c["depths"]), max(c["depths"])
  if results.get("train_depths"):
    ratio = results["train_depth_ratio"]
    lines.append(f"Compilation of the training run as a user starts it (`python -m experiments.train` on its defaults "
                 f"but `--depth`), cold: a fresh process and compilation-cache folder per run, the compilation its "
                 f"own time split measured, best of {c['rounds']} interleaved rounds; target: depth {hi} within "
                 f"{DEPTH_TARGET:g}× depth {lo}:")
    lines.append("")
    lines.append(report.markdown_table(
        ("command", "wall s", "compilation s", "programs", "ratio", "met"),
        [(f"`{' '.join(['train', *r['flags']])}`", f"{r['wall_s']:.1f}", f"{r['compile_s']:.1f}", r["compiles"],
          f"{ratio['ratio']:.2f}" if r["depth"] == hi else "",
          _verdict(ratio["meets_target"]) if r["depth"] == hi else "") for r in results["train_depths"]]))
    lines.append("")
  lines.append(f"Compilation of the training step (every metric; SP, width {c['width']}, 4 heads, batch 8 × 64) at "
               f"depth {lo} and {hi}, blocks unrolled or scanned (`--scan_layers`), best of {c['rounds']} "
               f"interleaved rounds; target: depth {hi} within {DEPTH_TARGET:g}× depth {lo}:")
  lines.append("")
  lines.append(report.markdown_table(
      ("members", "blocks", f"depth {lo} s", f"depth {hi} s", "ratio", "met"),
      [(r["members"], r["layout"], f"{r[f'depth_{lo}_s']:.2f}", f"{r[f'depth_{hi}_s']:.2f}", f"{r['ratio']:.2f}",
        _verdict(r["meets_target"])) for r in results["depth_ratios"]]))
  return "\n".join(lines) + "\n"
