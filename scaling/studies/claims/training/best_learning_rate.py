"""Trained grids read at their optimum: each rule at its best learning rate, an optimum on a swept axis, the grid
widened once past the edge its optimum sits at.

An optimum located on a grid (the loss-optimal logit multiplier, each width's optimal learning rate,
``locate_optimum``), and the best learning rate a comparison is read at ("each at its best learning rate",
``at_best_lr``, ``compare_at_best_lr``), whose argmin sits at the grid's edge widens the grid once, up to the mode's
``edge_octaves`` past that edge (``widened_values``, ``widened_at_best``); still at the edge, its verdict is
inconclusive (``scaling.studies.claims.verdicts.Criterion.edge``). Those widenings are trained when found, so a plan
does not count them.

Picking the best of rates octaves apart is itself noisy. In a mode with ``refine_best_lr`` a comparison that asks for
it (``compare_at_best_lr``'s ``refine``) trains a finer grid around the best rate, the log2 midpoints between it and
its neighbours (``refined_values``, ``refined_at_best``; declared in the plan by ``refined_plan_spec``, padded to its
grid's compiled step), reads the best rate of the joined grid, and reports how the choice enters: the rates whose
final loss is within the seeds' noise of the best (``near_best``) and the statistic's range over them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Sequence

import numpy as np

from scaling.studies import stats
from scaling.studies.grid import optimum
from scaling.studies.grid.run import GridRun
from scaling.studies.grid.run import GridSpec
from scaling.studies.grid.run import join_runs
from scaling.studies.claims.context import Context
from scaling.studies.claims.training.loss_curves import best_index
from scaling.studies.claims.training.loss_curves import final_losses
from scaling.studies.claims.training.loss_curves import window_mean
from scaling.studies.claims.training.numbers import lr_label
from scaling.studies.claims.training.numbers import spread
from scaling.studies.claims.training.sizes import sizes
from scaling.studies.claims.verdicts import Criterion
from scaling.studies.claims.verdicts import NOISE_SES


def widened_values(values: Sequence[float], best: int, octaves: float) -> tuple[float, ...]:
  """The values a grid is widened by when its optimum sits at an edge: past that edge, in steps of the grid's
  spacing there (at most ``octaves``), up to ``octaves`` beyond it, nearest first.

  Args:
    values: the grid's values (log2), ascending, at least two.
    best: the index of the optimum.
    octaves: how far past the edge to go (> 0).

  Returns:
    The new values; () when ``best`` is interior.
  """
  values = [float(v) for v in values]
  if len(values) < 2 or not octaves > 0:
    raise ValueError(f"values needs at least two values and octaves must be > 0; got {values} and {octaves}")
  if 0 < best < len(values) - 1:
    return ()
  low = best == 0
  step = min(values[1] - values[0] if low else values[-1] - values[-2], float(octaves))
  n = max(1, int(math.floor(octaves / step + 1e-9)))
  edge = values[0] if low else values[-1]
  return tuple(edge - k * step if low else edge + k * step for k in range(1, n + 1))


def best_rate(run: GridRun) -> int | None:
  """The learning rate (index) with the lowest seed-mean final loss of a trained grid (``best_index``)."""
  last = max(1, run.records["loss"].shape[0] // 10)
  return best_index(run.by_lr(final_losses(run.records["loss"], last)))


def widened_at_best(ctx: Context, run: GridRun) -> tuple[GridRun, int | None, bool]:
  """A learning-rate grid widened past the edge its best rate sits at (up to the mode's ``edge_octaves``,
  ``widened_values``; the widening trained by ``ctx.planner``), its best rate's index and whether that rate still
  sits at the grid's edge (the optimum may lie beyond it: a verdict read at it is inconclusive).

  Returns:
    (the grid, joined with its widening when there is one; ``best_rate`` of it; at the edge).
  """
  best = best_rate(run)
  if best is None or len(run.log2_lrs) < 2:
    return run, best, False
  if best in (0, len(run.log2_lrs) - 1):
    added = widened_values(run.log2_lrs, best, sizes(ctx)["edge_octaves"])
    wider = ctx.planner.train(dataclasses.replace(run.spec, log2_lrs=added, label=f"{run.spec.label}, widened"),
                              like=run.spec)
    run = join_runs(run, wider)
    best = best_rate(run)
  return run, best, best is not None and best in (0, len(run.log2_lrs) - 1)


REFINED = ", refined around its best rate"
"""How the label of a grid refined around its best rate ends (``refined_spec``)."""


def refined_values(values: Sequence[float], best: int) -> tuple[float, ...]:
  """The rates of a finer grid around a grid's best rate: the log2 midpoints between it and each of its neighbours.

  Args:
    values: the grid's rates (log2), ascending, at least two.
    best: the index of the best rate.

  Returns:
    The midpoints, ascending (one when ``best`` is at an edge).
  """
  values = [float(v) for v in values]
  if len(values) < 2 or any(b <= a for a, b in zip(values, values[1:])) or not 0 <= best < len(values):
    raise ValueError(f"values must be at least two ascending rates and best one of their indices; got {values} and "
                     f"{best}")
  return tuple((values[best] + values[j]) / 2.0 for j in (best - 1, best + 1) if 0 <= j < len(values))


def refined_spec(spec: GridSpec, log2_lrs: Sequence[float]) -> GridSpec:
  """``spec`` at the rates ``log2_lrs`` of its refinement around its best rate, labelled so."""
  return dataclasses.replace(spec, log2_lrs=tuple(log2_lrs), label=f"{spec.label}{REFINED}")


def refined_plan_spec(ctx: Context, spec: GridSpec) -> GridSpec | None:
  """The refinement of a learning-rate grid as a plan counts it (None in a mode without ``refine_best_lr``, or for a
  grid of fewer than two rates): ``refined_spec`` at the midpoints around its first rate, standing for those around
  the best rate (known only once the grid is trained), padded to the grid's rates, as ``refined_at_best`` trains it
  (its compiled step, ``GridPlanner.train``'s ``like``)."""
  if not sizes(ctx).get("refine_best_lr") or len(spec.log2_lrs) < 2:
    return None
  return refined_spec(spec, refined_values(spec.log2_lrs, 0)).padded(spec.num_values)


def refined_at_best(ctx: Context, run: GridRun, best: int | None, like: GridSpec) -> tuple[GridRun, int | None, list]:
  """A learning-rate grid joined with its refinement around its best rate (``refined_values``, trained by
  ``ctx.planner`` on ``like``'s compiled step) in a mode with ``refine_best_lr``; itself otherwise, or when there is no
  best rate.

  Args:
    ctx: the context.
    run: the trained grid (widened past an edge, ``widened_at_best``).
    best: its best rate's index (None: none).
    like: the grid as declared (the refinement runs its compiled step).

  Returns:
    (the grid, its best rate's index, the rates (log2) the refinement added).
  """
  if not sizes(ctx).get("refine_best_lr") or best is None or len(run.log2_lrs) < 2 or len(like.log2_lrs) < 2:
    return run, best, []
  added = [x for x in refined_values(run.log2_lrs, best) if x not in run.log2_lrs]
  if not added:
    return run, best, []
  finer = ctx.planner.train(refined_spec(like, added), like=like)
  run = join_runs(run, finer)
  return run, best_rate(run), added


def near_best(final: np.ndarray, best: int | None) -> list[int]:
  """The rates whose final loss is within the seeds' noise of the best's: every seed finite and the mean over seeds
  of (loss − the best rate's loss), paired by seed, at most ``NOISE_SES`` standard errors of that difference (ties
  included; with one seed, only ties).

  Args:
    final: the final losses [L, S].
    best: the best rate's index (None: no best, so none).

  Returns:
    The indices, ascending (the best among them).
  """
  final = np.asarray(final, np.float64)
  if final.ndim != 2:
    raise ValueError(f"final must be [rates, seeds], got shape {final.shape}")
  if best is None:
    return []
  out = []
  for i in range(final.shape[0]):
    d = final[i] - final[best]
    if not np.all(np.isfinite(d)):
      continue
    se = stats.standard_error(d) or 0.0
    if float(np.mean(d)) <= NOISE_SES * se:
      out.append(i)
  return out


def at_best_lr(ctx: Context, grid: GridRun, last: int, refine: bool = False) -> dict[str, Any]:
  """A trained grid read at its best learning rate, the grid widened past an edge its best rate sits at
  (``widened_at_best``) and, with ``refine``, refined around its best rate (``refined_at_best``).

  Args:
    ctx: the context (its planner trains the widening and the refinement).
    grid: the trained grid.
    last: the final loss is the mean of the last ``last`` steps.
    refine: refine the grid around its best rate (in a mode with ``refine_best_lr``).

  Returns:
    {"run": the grid joined with its widening (and refinement), "best": the best rate's index (None: no rate kept
    every seed finite), "final_at_best": the final losses [S] at the best rate (None when there is none),
    "best_learning_rate", "best_at_grid_edge" (None when there is no best), "widened_by" (the rates the widening
    added), "refined_by" (the rates the refinement added), "near_best" (the indices of ``near_best``),
    "near_best_learning_rates", "final_loss_by_lr" (the seed mean at each rate)}; rates as ``lr_label`` writes them.
  """
  run, best, at_edge = widened_at_best(ctx, grid)
  added: list = []
  if refine:
    run, best, added = refined_at_best(ctx, run, best, grid.spec)
    at_edge = best is not None and best in (0, len(run.log2_lrs) - 1)
  final = run.by_lr(final_losses(run.records["loss"], last))  # [L, S]
  near = near_best(final, best)
  return {"run": run, "best": best, "final_at_best": None if best is None else final[best],
          "best_learning_rate": None if best is None else lr_label(run.log2_lrs[best]),
          "best_at_grid_edge": None if best is None else at_edge,
          "widened_by": [lr_label(x) for x in run.log2_lrs if x not in grid.log2_lrs and x not in added],
          "refined_by": [lr_label(x) for x in added], "near_best": near,
          "near_best_learning_rates": [lr_label(run.log2_lrs[i]) for i in near],
          "final_loss_by_lr": {lr_label(x): stats.finite_mean_std(final[i])["mean"]
                               for i, x in enumerate(run.log2_lrs)}}


def values_at_best(run: GridRun, best: int | None, values: np.ndarray) -> np.ndarray:
  """The per-seed values [S] of a per-member array [L·S] at learning rate ``best`` (NaN when None)."""
  return np.full(len(run.seeds), np.nan) if best is None else run.by_lr(values)[best]


# ----------------------------------------------------------------------------
# Two rules compared, each at its best learning rate.


def compare_at_best_lr(ctx: Context, runs: dict[str, GridRun], rule: str, reference: str, depth: int,
                       refine: bool = False) -> dict[str, Any]:
  """Final losses of ``rule`` and ``reference`` at ``depth``, each at its own best learning rate, and their gaps.

  Args:
    ctx: the context.
    runs: the trained grids by rule, ``rule`` and ``reference`` among them.
    rule: the rule compared.
    reference: the rule it is compared with.
    depth: number of blocks (the mode's steps at this depth).
    refine: refine each grid around its best rate (``at_best_lr``; in a mode with ``refine_best_lr``) and report
      how the choice of rate enters: the rates of each within the seeds' noise of its best (``near_best``) and the
      relative final gap's range over every pair of them ("relative_final_gap_near_best": {"min", "max"}).

  Returns:
    the numbers: steps, the window of the final loss, per rule its best learning rate (each grid widened past an
    edge its best rate sits at, ``widened_at_best``; whether it still sits there, and "best_lr_at_edge" if either
    does), final loss (mean and std over seeds), loss at the mode's fixed step, initial loss and final loss per
    learning rate; the relative gaps (rule − reference) / reference of the final loss (mean, and per seed) and at the
    fixed step.
  """
  s = sizes(ctx)
  steps = s["steps"][depth]
  last = max(1, steps // 10)
  fixed = min(s["fixed_step"], steps - 1)
  rows, finals, fixeds, near = {}, {}, {}, {}
  for name in (rule, reference):
    found = at_best_lr(ctx, runs[name], last, refine=refine)
    run, best, final = found["run"], found["best"], found["final_at_best"]
    loss = run.records["loss"]
    at_fixed = run.by_lr(window_mean(loss, fixed, last))
    finals[name] = final
    fixeds[name] = None if best is None else at_fixed[best]
    near[name] = [run.by_lr(final_losses(loss, last))[i] for i in found["near_best"]]
    rows[name] = {
        "best_learning_rate": found["best_learning_rate"], "best_at_grid_edge": found["best_at_grid_edge"],
        "widened_by": found["widened_by"], "refined_by": found["refined_by"],
        "near_best_learning_rates": found["near_best_learning_rates"],
        "final_loss": stats.finite_mean_std([] if final is None else final),
        "final_loss_seeds": None if final is None else [stats.round_finite(v) for v in final],
        "loss_at_fixed_step": stats.finite_mean_std([] if best is None else at_fixed[best]),
        "initial_loss": stats.finite_mean_std(run.by_lr(loss[0]).ravel()),
        "final_loss_by_lr": found["final_loss_by_lr"],
    }
  gap = gap_fixed = None
  per_seed = np.array([])
  a, b = finals[rule], finals[reference]
  if a is not None and b is not None:
    gap = float(np.mean(a) - np.mean(b)) / float(np.mean(b))
    gap_fixed = float(np.mean(fixeds[rule]) - np.mean(fixeds[reference])) / float(np.mean(fixeds[reference]))
    per_seed = (a - b) / b  # paired: seed i of each starts from the same initialization seed
  out = {"depth": depth, "steps": steps, "final_loss_mean_of_last": last, "fixed_step": fixed,
         "best_lr_at_edge": bool(rows[rule]["best_at_grid_edge"] or rows[reference]["best_at_grid_edge"]),
         "relative_final_gap": stats.round_finite(gap), "relative_final_gap_per_seed": stats.finite_mean_std(per_seed),
         **spread("relative_final_gap", per_seed),
         "relative_gap_at_fixed_step": stats.round_finite(gap_fixed), rule: rows[rule], reference: rows[reference]}
  if refine:
    out["relative_final_gap_near_best"] = value_range(
        [(float(np.mean(x)) - float(np.mean(y))) / float(np.mean(y)) for x in near[rule] for y in near[reference]])
  return out


def value_range(values: Sequence[float]) -> dict[str, float | None]:
  """{"min", "max"} of the finite ``values`` (None each when there is none)."""
  v = np.asarray(values, np.float64).ravel()
  v = v[np.isfinite(v)]
  return {"min": stats.round_finite(float(v.min())) if v.size else None,
          "max": stats.round_finite(float(v.max())) if v.size else None}


def choice_words(c: dict[str, Any], names: dict[str, str], statistic: str = "the gap") -> str:
  """How the choice of the best rate enters a ``compare_at_best_lr(..., refine=True)`` result, in a sentence: the
  refinement's rates, the rates of each rule within the seeds' noise of its best, and the statistic's range over
  them ("" when the comparison was not refined)."""
  near = c.get("relative_final_gap_near_best")
  if near is None:
    return ""
  refined = [f"{words} at {', '.join(c[rule]['refined_by'])}" for rule, words in names.items() if c[rule]["refined_by"]]
  rates = "; ".join(f"{words}: {', '.join(c[rule]['near_best_learning_rates']) or 'none'}"
                    for rule, words in names.items())
  return ((f" Choice of the best rate: the grids were refined around it ({'; '.join(refined)})." if refined else
           " Choice of the best rate: no refinement was trained.")
          + f" The rates whose final loss is within {NOISE_SES:g} standard errors (over seeds) of the best ({rates})"
          f" give {statistic} from {fmt_range(near)}.")


def fmt_range(r: dict[str, float | None]) -> str:
  """"min to max" of a ``value_range`` (3 significant digits; "n/a" when empty)."""
  return "n/a" if r["min"] is None else f"{r['min']:.3g} to {r['max']:.3g}"


def relative_gap_criterion(rule: str, reference: str, denominator: str, depth: int, holds: float = 0.02,
                            fails: float = 0.0, reason: str = "'worse' = at least 2% higher final loss at the best "
                            "learning rate of each; equal or better is not worse") -> Criterion:
  """The criterion of ``compare_at_best_lr``'s relative final-loss gap of ``rule`` over ``reference`` at ``depth``."""
  return Criterion("relative_final_gap", f"(final loss {rule} − final loss {reference}) / {denominator} at depth "
                   f"{depth}, each at its best learning rate, mean over seeds", holds=(">=", holds),
                   fails=("<=", fails), reason=reason, noise=True, edge="best_lr_at_edge")


def edge_words(c: dict[str, Any], names: dict[str, str]) -> str:
  """" (... grid widened to ...; best learning rate still at the grid's edge for ...)" for the rules of a
  ``compare_at_best_lr`` result whose grid was widened past an edge, or whose best rate still is the grid's smallest or
  largest (their optimum may lie outside the grid); "" when neither."""
  widened = [f"{words}'s grid widened to {', '.join(c[rule]['widened_by'])}" for rule, words in names.items()
             if c[rule].get("widened_by")]
  at_edge = [words for rule, words in names.items() if c[rule]["best_at_grid_edge"]]
  parts = widened + ([f"best learning rate still at the grid's edge for {' and '.join(at_edge)}"] if at_edge else [])
  return f" ({'; '.join(parts)})" if parts else ""


def still_at_edge_words(rules: Sequence[str]) -> str:
  """"; the best learning rate stays at the edge of its widened grid for ..." (those ``rules``), or ""."""
  names = {"none": "unscaled", "sqrt": "1/√d_k"}
  words = " and ".join(names.get(r, r) for r in rules)
  return f"; the best learning rate stays at the edge of its widened grid for {words}" if rules else ""


# ----------------------------------------------------------------------------
# The optimum of a swept axis (learning rates, logit multipliers).


def _axis_rows(parts: Sequence[tuple[Sequence[float], GridRun]], last: int, x: str,
               seed: int | None = None) -> list[dict[str, Any]]:
  """``optimum.summarize_grid``'s rows of every (values, grid) part of one swept axis (one seed's, given ``seed``)."""
  rows = []
  for values, run in parts:
    loss, n = run.records["loss"], len(run.seeds)
    if seed is not None:
      loss, n = loss[:, seed::n], 1
    rows += optimum.summarize_grid(loss, values, n, last, x_name=x)
  return rows


def locate_optimum(parts: Sequence[tuple[Sequence[float], GridRun]], *, last: int, x: str = "log2_lr",
                   widen: Callable[[tuple[float, ...]], GridRun] | None = None,
                   octaves: float = 2.0) -> dict[str, Any]:
  """The optimum of a swept axis (learning rates, or logit multipliers) over trained grids, the grid widened once past
  the edge the optimum sits at.

  Args:
    parts: (values, trained grid) pairs covering the axis: the grid's rows (``GridRun.by_lr``) are the values.
    last: the final loss is the mean of the last ``last`` steps.
    x: the swept value's name in the rows.
    widen: trains the grid of the values ``widened_values`` adds past the edge (None: no widening).
    octaves: how far past the edge (``widened_values``).

  Returns:
    {"optimum": the parabola vertex, else the grid argmin, of the seed-mean final loss (None: every value diverged),
    "optimum_seeds": each seed's, "at_edge": the optimum still sits at the edge after widening, "widened_by": the
    values added, "final_loss_by_value": the seed-mean final loss of each value}.
  """
  parts = list(parts)
  top = optimum.find_optimum(_axis_rows(parts, last, x), x=x, keys=())[0]
  added: tuple[float, ...] = ()
  if widen is not None and top["at_edge"]:
    values = sorted(float(v) for vs, _ in parts for v in vs)
    added = widened_values(values, values.index(top[x]), octaves)
    parts.append((added, widen(added)))
  rows = _axis_rows(parts, last, x)
  top = optimum.find_optimum(rows, x=x, keys=())[0]
  seeds = []
  for j in range(len(parts[0][1].seeds)):
    seeds.append(optimum.optimum_log2_lr(optimum.find_optimum(_axis_rows(parts, last, x, seed=j), x=x, keys=())[0],
                                         x=x))
  return {"optimum": optimum.optimum_log2_lr(top, x=x), "optimum_seeds": [np.nan if v is None else v for v in seeds],
          "at_edge": bool(top["at_edge"]), "widened_by": list(added),
          "final_loss_by_value": {f"{r[x]:g}": stats.round_finite(r["final_loss"])
                                  for r in sorted(rows, key=lambda r: r[x])}}
