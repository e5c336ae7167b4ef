"""The optimum of a grid study, from measured curves: final losses per swept value, the best value per point
(grid argmin and parabola vertex), its spread over the axis, and the learning-rate sensitivity.

Pure functions over the rows of ``scaling.studies.transfer.study`` (and of
``scaling.studies.claims.training.best_learning_rate``'s grids); no training here. A diverged run's loss is None, counted as +inf by ``find_optimum`` and at the initial
loss by ``lr_sensitivity`` (Wortsman et al. 2023, §3.1).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from scaling.studies import stats
from scaling.studies.grid.points import key_columns
from scaling.base.validation import ConfigError


def summarize_grid(losses: np.ndarray, log2_lrs: Sequence[float], num_seeds: int, last: int,
                   x_name: str = "log2_lr") -> list[dict[str, Any]]:
  """Final losses of a grid from its loss history.

  Args:
    losses: [steps, L·S] training losses, member i = (value i // S, seed i % S).
    log2_lrs: the L swept values (log2 learning rates, or log2 attention multipliers).
    num_seeds: S.
    last: the final loss of a member is the mean of its last ``last`` losses.
    x_name: the rows' name of the swept value; "log2_lr" rows also get ``learning_rate``.

  Returns:
    One row per swept value: ``x_name`` (and learning_rate), final_loss (mean over
    seeds; None if any seed diverged), final_loss_std, final_loss_seeds (None
    for a diverged seed), diverged_seeds (count), initial_loss (mean step-0 loss)
    and initial_loss_seeds.
  """
  losses = np.asarray(losses, np.float64)
  steps, m = losses.shape
  if m != len(log2_lrs) * num_seeds:
    raise ConfigError(f"losses have {m} members, expected {len(log2_lrs)} x {num_seeds}")
  if not 1 <= last <= steps:
    raise ConfigError(f"last must be in [1, {steps}], got {last}")
  diverged = ~np.all(np.isfinite(losses), axis=0)
  final = np.where(diverged, np.nan, np.mean(losses[-last:], axis=0)).reshape(len(log2_lrs), num_seeds)
  initial = losses[0].reshape(len(log2_lrs), num_seeds)
  diverged = diverged.reshape(len(log2_lrs), num_seeds)
  rows = []
  for i, x in enumerate(log2_lrs):
    ok = not diverged[i].any()
    final_loss = stats.mean_std(final[i]) if ok else {"mean": None, "std": None}
    rows.append({
        x_name: float(x),
        **({"learning_rate": float(2.0**x)} if x_name == "log2_lr" else {}),
        "final_loss": final_loss["mean"],
        "final_loss_std": final_loss["std"],
        "final_loss_seeds": [stats.finite_or_none(v) for v in final[i]],
        "diverged_seeds": int(diverged[i].sum()),
        "initial_loss": stats.finite_or_none(np.nanmean(initial[i])) if np.isfinite(initial[i]).any() else None,
        "initial_loss_seeds": [stats.finite_or_none(v) for v in initial[i]],
    })
  return rows


def parabola_vertex(x: Sequence[float], y: Sequence[float]) -> float | None:
  """The x of the vertex of the parabola through three points, or None unless it opens upwards."""
  (x0, x1, x2), (y0, y1, y2) = x, y
  denom = (x0 - x1) * (x0 - x2) * (x1 - x2)
  if denom == 0:
    return None
  a = (x2 * (y1 - y0) + x1 * (y0 - y2) + x0 * (y2 - y1)) / denom
  b = (x2**2 * (y0 - y1) + x1**2 * (y2 - y0) + x0**2 * (y1 - y2)) / denom
  if not a > 0:
    return None
  return float(-b / (2 * a))


def find_optimum(rows: Sequence[dict[str, Any]], *, x: str = "log2_lr",
                 keys: Sequence[str] | None = None) -> list[dict[str, Any]]:
  """The best swept value (learning rate) of each grid point, e.g. (parametrization, width).

  Args:
    rows: rows with the point's fields, the swept value ``x`` and final_loss
      (None or non-finite = diverged = +inf).
    x: the swept field ("log2_lr", or "log2_attn_mult").
    keys: the point fields rows are grouped by; default those of ``ROW_KEY`` present in the first row.

  Returns:
    One row per point, in order of first appearance: the point's fields,
    ``x`` (the grid argmin; None if every run diverged), ``final_loss``
    there, ``at_edge`` (the argmin is the smallest or largest value
    tried, so the optimum may lie outside the grid), ``<x>_interp`` (vertex
    of the parabola through the argmin and its two neighbours in ``x``, when
    both are finite and the parabola opens upwards; else None) and
    ``num_diverged`` (values with a diverged seed).
  """
  keys = key_columns(rows) if keys is None else tuple(keys)
  groups: dict[tuple[tuple[str, Any], ...], list[tuple[float, float]]] = {}
  for r in rows:
    loss = r["final_loss"]
    loss = float("inf") if loss is None or not math.isfinite(loss) else float(loss)
    key = tuple((name, r[name]) for name in keys if name in r)
    groups.setdefault(key, []).append((float(r[x]), loss))
  out = []
  for key, points in groups.items():
    points.sort()
    xs = [v for v, _ in points]
    ys = [y for _, y in points]
    best = int(np.argmin(ys))
    row = {**dict(key), x: None, "final_loss": None, "at_edge": None,
           f"{x}_interp": None, "num_diverged": sum(not math.isfinite(y) for y in ys)}
    if math.isfinite(ys[best]):
      row.update({x: xs[best], "final_loss": ys[best], "at_edge": best in (0, len(xs) - 1)})
      if 0 < best < len(xs) - 1 and all(math.isfinite(v) for v in ys[best - 1:best + 2]):
        row[f"{x}_interp"] = parabola_vertex(xs[best - 1:best + 2], ys[best - 1:best + 2])
    out.append(row)
  return out


def optimum_log2_lr(row: dict[str, Any], x: str = "log2_lr") -> float | None:
  """The optimal swept value (log2 learning rate) of a ``find_optimum`` row: the parabola vertex when there is
  one, else the grid argmin (None when every value diverged)."""
  if row.get(f"{x}_interp") is not None:
    return float(row[f"{x}_interp"])
  return None if row.get(x) is None else float(row[x])


def spread(values: Sequence[float | None]) -> float | None:
  """max − min of the values (None when any is None)."""
  if not values or any(v is None for v in values):
    return None
  return float(max(values) - min(values))


def lr_sensitivity(losses: Sequence[float | None], initial_loss: float) -> float | None:
  """Learning-rate sensitivity of one loss curve (Wortsman et al. 2023, "Small-scale proxies for large-scale
  Transformer training instabilities", §3.1): the mean over the grid's learning rates of
  min(loss(η), loss_init) − min_η loss(η).

  Args:
    losses: the final loss at each learning rate of the grid (evenly spaced in log learning rate); None or a
      non-finite value = diverged, counted at ``initial_loss``.
    initial_loss: the loss at initialization.

  Returns:
    The sensitivity (≥ 0; 0 when every learning rate reaches the same loss, or none gets below the initial loss:
    the best loss is the smallest capped one), or None when every run diverged or the initial loss is unknown.
  """
  if initial_loss is None or not math.isfinite(initial_loss):
    return None
  ys = np.array([np.nan if y is None else float(y) for y in losses], np.float64)
  finite = np.isfinite(ys)
  if not finite.any():
    return None
  capped = np.where(finite, np.minimum(ys, initial_loss), initial_loss)
  return float(np.mean(capped) - np.min(capped))


def sensitivity_rows(rows: Sequence[dict[str, Any]], keys: Sequence[str] | None = None) -> list[dict[str, Any]]:
  """The learning-rate sensitivity (``lr_sensitivity``) of each point of a learning-rate grid, with its spread
  over seeds.

  Args:
    rows: ``run_point`` rows (``final_loss_seeds`` and ``initial_loss_seeds`` per learning rate).
    keys: the point fields; default those of ``ROW_KEY`` present in the first row.

  Returns:
    One row per point, in order of first appearance: the point's fields, ``sensitivity`` (of the loss averaged
    over seeds, each diverged seed at its initial loss), ``sensitivity_seeds`` (one per seed),
    ``sensitivity_mean`` and ``sensitivity_std`` over the seeds (None where a seed has none).
  """
  keys = key_columns(rows) if keys is None else tuple(keys)
  groups: dict[tuple[tuple[str, Any], ...], list[dict[str, Any]]] = {}
  for r in rows:
    groups.setdefault(tuple((name, r[name]) for name in keys if name in r), []).append(r)
  out = []
  for key, members in groups.items():
    members = sorted(members, key=lambda r: r["log2_lr"])
    per_seed = np.array([[np.nan if v is None else v for v in r["final_loss_seeds"]] for r in members], np.float64)
    initial = np.array([[np.nan if v is None else v for v in r["initial_loss_seeds"]] for r in members], np.float64)
    init_seed = np.nanmean(initial, axis=0) if np.isfinite(initial).any() else np.full(per_seed.shape[1], np.nan)
    seeds = [lr_sensitivity(per_seed[:, s], float(init_seed[s])) for s in range(per_seed.shape[1])]
    filled = np.where(np.isfinite(per_seed), per_seed, init_seed[None, :])
    mean_curve = np.mean(filled, axis=1)
    whole = lr_sensitivity(list(mean_curve), float(np.nanmean(init_seed)) if np.isfinite(init_seed).any()
                           else float("nan"))
    spread_over_seeds = stats.mean_std(seeds) if all(v is not None for v in seeds) else {"mean": None, "std": None}
    out.append({**dict(key), "sensitivity": whole, "sensitivity_seeds": seeds,
                "sensitivity_mean": spread_over_seeds["mean"], "sensitivity_std": spread_over_seeds["std"]})
  return out
