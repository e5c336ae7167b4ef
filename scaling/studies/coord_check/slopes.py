"""The rows of a coordinate check and their slopes: RMS against width (or depth) on log-log axes.

``coord_rows`` makes one row per (step, layer) from per-seed RMS values; ``fit_slope`` fits
log2(RMS) = slope · log2(width) + intercept (≈ 0: width-independent, 0.5: ∝ √width, 1: ∝ width); ``slopes`` fits
it per (parametrization[, α], layer, step) with its standard error over the seeds; ``slope_table``,
``slope_markdown`` and ``write_figure`` (mup's grid of panels) show them. Shared by the study on the built-in model
(``scaling.studies.coord_check.study``) and the check of any model (``scaling.studies.coord_check.any_model``).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from scaling.runs import plotting
from scaling.runs import report
from scaling.studies import stats
from scaling.base.validation import ConfigError


def coord_rows(point: dict[str, Any], data: dict[str, Any]) -> list[dict[str, Any]]:
  """One row per (step, layer): the point's fields, step, layer, rms (mean over seeds), rms_std, rms_seeds."""
  rows = []
  for layer, values in data["rms"].items():
    for step, per_seed in enumerate(values):
      rms = stats.mean_std(per_seed)
      rows.append({**point, "step": step, "layer": layer, "rms": rms["mean"], "rms_std": rms["std"],
                   "rms_seeds": [float(v) for v in per_seed]})
  return rows


def fit_slope(widths: Sequence[float], values: Sequence[float]) -> tuple[float, float]:
  """Least-squares line log2(value) = slope · log2(width) + intercept (or against the depth).

  Args:
    widths: at least two distinct positive widths (or depths).
    values: the measured sizes, same length.

  Returns:
    (slope, intercept); both NaN when fewer than two distinct widths are given
    or a value is not a positive finite number (log undefined).
  """
  x = np.asarray(widths, np.float64)
  y = np.asarray(values, np.float64)
  if x.shape != y.shape or x.ndim != 1:
    raise ConfigError(f"widths and values must be 1-D of the same length, got {x.shape} and {y.shape}")
  if (len(np.unique(x)) < 2 or not np.all(np.isfinite(y)) or np.any(y <= 0) or np.any(x <= 0)):
    return float("nan"), float("nan")
  lx, ly = np.log2(x), np.log2(y)
  slope, intercept = np.polyfit(lx, ly, 1)
  return float(slope), float(intercept)


def axis_of(rows: Sequence[dict[str, Any]]) -> str:
  """The axis the rows vary: "depth" when they carry a depth, else "width"."""
  return "depth" if rows and "depth" in rows[0] else "width"


def _series(row: dict[str, Any], axis: str) -> tuple[Any, ...]:
  """The curve a row is on: (parametrization,) or, on the depth axis, (parametrization, depth_alpha)."""
  return (row["parametrization"], row["depth_alpha"]) if axis == "depth" else (row["parametrization"],)


def slopes(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
  """The log-log slope of RMS against width (or depth, for rows with a depth) per series, layer and step.

  The slope is that of the seeds' mean RMS; ``slope_se`` is the standard error of the slope over the seeds (the
  std of each seed's own slope over √seeds, from the rows' ``rms_seeds``; None with fewer than two seeds).

  Returns:
    Rows {parametrization, [depth_alpha,] layer, step, slope, slope_se, intercept, widths | depths} in the order
    the (parametrization, [α,] layer, step) groups first appear; slope and intercept are None where undefined
    (an RMS of 0 or non-finite).
  """
  axis = axis_of(rows)
  names = ("parametrization", "depth_alpha") if axis == "depth" else ("parametrization",)
  groups: dict[tuple[Any, ...], list[tuple[int, float, Any]]] = {}
  for r in rows:
    groups.setdefault((*_series(r, axis), r["layer"], r["step"]), []).append((r[axis], r["rms"], r.get("rms_seeds")))
  out = []
  for (*series, layer, step), points in groups.items():
    points.sort(key=lambda p: p[0])
    xs = [x for x, _, _ in points]
    slope, intercept = fit_slope(xs, [v if v is not None else float("nan") for _, v, _ in points])
    out.append({**dict(zip(names, series)), "layer": layer, "step": step,
                "slope": slope if math.isfinite(slope) else None, "slope_se": _slope_se(xs, [s for _, _, s in points]),
                "intercept": intercept if math.isfinite(intercept) else None, f"{axis}s": xs})
  return out


def _slope_se(xs: Sequence[float], per_seed: Sequence[Any]) -> float | None:
  """The standard error of the slope over the seeds: std of the seeds' own slopes / √seeds (None if undefined)."""
  if any(s is None for s in per_seed) or len({len(s) for s in per_seed}) != 1 or len(per_seed[0]) < 2:
    return None
  seed_slopes = [fit_slope(xs, [s[i] if s[i] is not None else float("nan") for s in per_seed])[0]
                 for i in range(len(per_seed[0]))]
  if not all(math.isfinite(v) for v in seed_slopes):
    return None
  return float(np.std(seed_slopes, ddof=1) / math.sqrt(len(seed_slopes)))


def _measured(rms: Any) -> bool:
  """Whether an RMS can be drawn on a log axis: a positive finite number (not None, 0, NaN or inf)."""
  return rms is not None and math.isfinite(rms) and rms > 0


def write_figure(path, rows, slope_rows) -> None:
  """A grid like mup's: rows = parametrizations (and α on the depth axis), columns = steps; RMS against width
  (or depth; log-log), one line per layer.

  Every panel shares one y range; the legend gives each layer's fitted slope. A layer keeps its colour, marker
  and dash pattern in every panel; RMS values that are not positive finite numbers (a module that is not
  measurable, a diverged run) are left out.
  """
  axis = axis_of(rows)
  panels = list(dict.fromkeys(_series(r, axis) for r in rows))
  steps = sorted({r["step"] for r in rows})
  layers = list(dict.fromkeys(r["layer"] for r in rows))
  slope = {(*_series(s, axis), s["layer"], s["step"]): s["slope"] for s in slope_rows}
  fig, axes = plotting.grid_figure(max(1, len(panels)), max(1, len(steps)), width=4.2, height=3.4)
  positive = [r["rms"] for r in rows if _measured(r["rms"])]
  for i, key in enumerate(panels):
    title = key[0] if len(key) == 1 else f"{key[0]}, α={key[1]:g}"
    for j, step in enumerate(steps):
      ax = axes[i][j]
      series = {}
      for n, layer in enumerate(layers):
        points = sorted((r[axis], r["rms"]) for r in rows
                        if _series(r, axis) == key and r["step"] == step and r["layer"] == layer
                        and _measured(r["rms"]))
        s = slope.get((*key, layer, step))
        label = layer if s is None else f"{layer} ({s:+.2f})"
        # A layer with nothing to draw keeps its place (an empty line, no legend entry): the styles stay in step.
        series[label if points else f"_{n}"] = ([x for x, _ in points], [v for _, v in points])
      plotting.line_plot(None, series, xlabel=axis, ylabel="RMS" if j == 0 else "", logx2=True, logy=True,
                         title=f"{title}, step {step}", ax=ax)
      if positive:  # one y range for every panel, so growth across steps and parametrizations is comparable
        ax.set_ylim(min(positive) / 1.3, max(positive) * 1.3)
      if ax.get_legend() is not None:
        ax.legend(fontsize=plotting.SMALL_FONTSIZE, loc="best", labelspacing=0.25, handlelength=2.5,
                  borderaxespad=0.3, framealpha=0.8)
  plotting.save_figure(fig, path)


def slope_table(slope_rows, steps: int) -> str:
  """Slopes as a table: one row per (parametrization, [depth_alpha,] layer), one column per step."""
  keys = ("parametrization", "depth_alpha", "layer") if slope_rows and "depth_alpha" in slope_rows[0] else (
      "parametrization", "layer")
  grid = {}
  for s in slope_rows:
    row = grid.setdefault(tuple(s[k] for k in keys), {k: s[k] for k in keys})
    row[f"step{s['step']}"] = "-" if s["slope"] is None else f"{s['slope']:+.2f}"
  return report.table(list(grid.values()), (*keys, *(f"step{t}" for t in range(steps + 1))))


def slope_markdown(slope_rows, steps: int, heading: str) -> str:
  """``heading``, then the slopes as a Markdown table: one row per (parametrization, [α,] layer), one column per
  step (for the docs' generated sections)."""
  by_alpha = bool(slope_rows) and "depth_alpha" in slope_rows[0]
  keys = ("parametrization", "depth_alpha", "layer") if by_alpha else ("parametrization", "layer")
  grid: dict[tuple, dict[str, Any]] = {}
  for s in slope_rows:
    row = grid.setdefault(tuple(s[k] for k in keys), {})
    row[s["step"]] = "–" if s["slope"] is None else f"{s['slope']:+.2f}"
  names = {"parametrization": "parametrization", "depth_alpha": "α", "layer": "layer"}
  cells = [[f"{v:g}" if isinstance(v, float) else v for v in key] + [row.get(t, "–") for t in range(steps + 1)]
           for key, row in grid.items()]
  columns = [names[k] for k in keys] + [f"step {t}" for t in range(steps + 1)]
  return (f"{heading}\n\n{report.markdown_table(columns, cells).rstrip()}\n\n"
          + "\n".join(_largest_slopes(slope_rows, keys)) + "\n")


def _largest_slopes(slope_rows, keys: tuple[str, ...]) -> list[str]:
  """One line per series (parametrization[, α]): its largest slope at initialization and after it."""
  lines = []
  for series in dict.fromkeys(tuple(s[k] for k in keys[:-1]) for s in slope_rows):
    mine = [s for s in slope_rows if tuple(s[k] for k in keys[:-1]) == series and s["slope"] is not None]
    name = " ".join(f"α={v:g}" if k == "depth_alpha" else str(v) for k, v in zip(keys, series))
    parts = []
    for label, chosen in (("at step 0", [s for s in mine if s["step"] == 0]),
                          ("after step 0", [s for s in mine if s["step"] > 0])):
      if chosen:
        top = max(chosen, key=lambda s: s["slope"])
        parts.append(f"largest slope {label} {top['slope']:+.2f} ({top['layer']}, step {top['step']})")
    lines.append(f"- {name}: " + "; ".join(parts) + ".")
  return lines
