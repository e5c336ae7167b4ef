"""The figures and Markdown tables of learning-rate transfer (``scaling.studies.transfer.study`` and ``any_model``):
final loss against the swept value per point, the optimum per point and its spread over the axis, the learning-rate
sensitivity, the loss grid, and the "wider is better" comparison of runs (for the docs' generated sections).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from scaling.runs import plotting
from scaling.runs import report
from scaling.studies import stats
from scaling.studies.grid.points import FIELD_NAMES
from scaling.studies.grid.points import key_columns
from scaling.studies.grid.optimum import optimum_log2_lr
from scaling.studies.grid.optimum import spread


def _y_range(rows) -> tuple[float, float] | None:
  """A shared loss range: from the best loss up to the loss at initialization (higher losses are clipped)."""
  losses = [r["final_loss"] for r in rows if r["final_loss"] is not None]
  if not losses:
    return None
  initial = sorted(r["initial_loss"] for r in rows if r["initial_loss"] is not None)
  lo, hi = min(losses), max(losses)
  if initial:
    hi = min(hi, initial[len(initial) // 2])
  pad = 0.05 * max(hi - lo, 1e-3)
  return lo - pad, hi + pad


CURVE_FIELDS = ("parametrization", "rule", "depth_alpha")
"""The point fields that name a curve (a panel of the figure); the others are the axis (and its fixed width)."""
X_LABELS = {"log2_lr": "log2 learning rate", "log2_attn_mult": "log2 attention multiplier α"}


def _axis_field(keys: Sequence[str]) -> str:
  """The point field the axis varies: the last key (width, depth, batch_size or steps)."""
  return keys[-1]


def _panel_title(key: tuple[Any, ...], fields: Sequence[str]) -> str:
  """"mup, rule=linear, α=1" for a panel's key."""
  names = {"parametrization": "{}", "rule": "rule={}", "depth_alpha": "α={:g}"}
  return ", ".join(names[f].format(v) for f, v in zip(fields, key))


EDGE_LABEL = "at grid edge"
"""The words beside an optimum at the smallest or largest swept value (the optimum table's "at grid edge")."""


def mark_optimum(ax, x: float, y: float, color: Any, *, at_edge: bool) -> None:
  """A star at a curve's optimum: filled inside the grid; hollow, labelled ``EDGE_LABEL``, at its edge (the true
  optimum may lie outside the grid)."""
  if at_edge:
    ax.plot([x], [y], marker="*", markersize=13, markerfacecolor="none", markeredgecolor=color, markeredgewidth=1.5,
            linestyle="none")
    ax.annotate(EDGE_LABEL, (x, y), xytext=(0, 8), textcoords="offset points", ha="center", fontsize=7, color=color)
  else:
    ax.plot([x], [y], marker="*", markersize=11, color=color, markeredgecolor="black", linestyle="none")


def write_figure(path, rows, optimum_rows, *, x: str = "log2_lr", keys: Sequence[str] | None = None) -> None:
  """Final loss against the swept value (log2 learning rate), one curve per axis value (width, depth, ...); one
  panel per curve key (parametrization, rule, α), at most four per row, shared y range; a star marks each
  curve's optimum, hollow and labelled "at grid edge" where the table says so."""
  keys = key_columns(rows) if keys is None else tuple(keys)
  x_name = _axis_field(keys)
  fields = [f for f in CURVE_FIELDS if f in keys]
  panel = lambda r: tuple(r[f] for f in fields)
  panels = list(dict.fromkeys(panel(r) for r in rows))
  ncols = min(4, len(panels))
  nrows = -(-len(panels) // ncols)
  fig, axes = plotting.grid_figure(nrows, ncols, width=4.2 if ncols > 2 else 4.6, height=3.4)
  ylim = _y_range(rows)
  for j, key in enumerate(panels):
    ax = axes[j // ncols][j % ncols]
    series, stars = {}, []
    for value in dict.fromkeys(r[x_name] for r in rows if panel(r) == key):
      points = sorted((r[x], r["final_loss"]) for r in rows
                      if panel(r) == key and r[x_name] == value and r["final_loss"] is not None)
      if points:
        series[f"{FIELD_NAMES[x_name]} {value}"] = ([v for v, _ in points], [y for _, y in points])
        stars.append([o for o in optimum_rows if panel(o) == key and o[x_name] == value])
    plotting.line_plot(None, series, xlabel=X_LABELS.get(x, x),
                       ylabel="final training loss" if j % ncols == 0 else "", title=_panel_title(key, fields), ax=ax)
    for line, best in zip(ax.get_lines(), stars):
      if best and best[0][x] is not None:
        mark_optimum(ax, best[0][x], best[0]["final_loss"], line.get_color(), at_edge=bool(best[0].get("at_edge")))
    if ylim is not None:
      ax.set_ylim(*ylim)
  for j in range(len(panels), nrows * ncols):
    axes[j // ncols][j % ncols].set_visible(False)
  plotting.save_figure(fig, path)


def write_sensitivity_figure(path, optimum_rows, *, keys: Sequence[str] | None = None) -> None:
  """Learning-rate sensitivity (mean over seeds, ± std band) against the axis value, one curve per curve key
  (parametrization, rule, α)."""
  keys = key_columns(optimum_rows) if keys is None else tuple(keys)
  x_name = _axis_field(keys)
  fields = [f for f in CURVE_FIELDS if f in keys]
  series, errors = {}, {}
  for key in dict.fromkeys(tuple(o[f] for f in fields) for o in optimum_rows):
    mine = sorted((o[x_name], o["sensitivity_mean"], o["sensitivity_std"]) for o in optimum_rows
                  if tuple(o[f] for f in fields) == key and o.get("sensitivity_mean") is not None)
    if mine:
      label = _panel_title(key, fields)
      series[label] = ([m[0] for m in mine], [m[1] for m in mine])
      errors[label] = [m[2] for m in mine]
  fig, axes = plotting.grid_figure(1, 1, width=5.0, height=3.6)
  plotting.line_plot(None, series, xlabel=FIELD_NAMES[x_name], ylabel="learning-rate sensitivity",
                     title="LR sensitivity (mean ± std over seeds)", logx2=True, errors=errors, ax=axes[0][0])
  plotting.save_figure(fig, path)


def _cell(value: Any) -> Any:
  """A table cell of a point field: floats with %g."""
  return f"{value:g}" if isinstance(value, float) else value


# Transfer holds on an axis when the optimum moves at most this many octaves over it (the criterion of the
# generated tables' last lines).
TRANSFER_OCTAVES = 1.0


def optimum_markdown(optimum_rows: Sequence[dict[str, Any]], heading: str, *, x: str = "log2_lr",
                     keys: Sequence[str] | None = None) -> str:
  """``heading``, the optimum of every point as a Markdown table, and per curve (parametrization[, rule][, α])
  the spread (max − min) of its optimal swept value over the axis, in octaves, and whether it is within
  ``TRANSFER_OCTAVES`` (for the docs' generated sections); with the learning-rate sensitivity (mean ± std over
  seeds) when the rows carry it."""
  keys = key_columns(optimum_rows) if keys is None else tuple(keys)
  what = "log2 lr" if x == "log2_lr" else "log2 α"
  columns = [FIELD_NAMES[k] for k in keys] + [f"best {what} (grid)", "optimum (parabola)", "final loss",
                                               "at grid edge"]
  sensitive = any(r.get("sensitivity_mean") is not None for r in optimum_rows)
  if sensitive:
    columns.append("LR sensitivity (seeds: mean ± std)")
  fmt = lambda v, spec: "–" if v is None else format(v, spec)
  cells, curves = [], {}
  for r in optimum_rows:
    cells.append([_cell(r[k]) for k in keys]
                 + [fmt(r[x], "g"), fmt(r[f"{x}_interp"], ".2f"), fmt(r["final_loss"], ".3f"),
                    "–" if r["at_edge"] is None else ("yes" if r["at_edge"] else "no")]
                 + ([_sensitivity_cell(r)] if sensitive else []))
    curve = tuple(r[k] for k in keys if k in CURVE_FIELDS)
    curves.setdefault(curve, []).append(optimum_log2_lr(r, x))
  lines = [heading, "", report.markdown_table(columns, cells)]
  fields = [k for k in keys if k in CURVE_FIELDS]
  for curve, optima in curves.items():
    moved = spread(optima)
    label = " ".join(str(v) if f == "parametrization" else _panel_title((v,), (f,)) for f, v in zip(fields, curve))
    if moved is None:
      lines.append(f"- {label}: the optimum moves n/a (every value diverged at a point).")
    else:
      verdict = "yes" if moved <= TRANSFER_OCTAVES else "no"
      lines.append(f"- {label}: the optimum moves {moved:.2f} octaves (max − min of the optimal {what}); "
                   f"within {TRANSFER_OCTAVES:g} octave: {verdict}.")
  return "\n".join(lines) + "\n"


def _sensitivity_cell(row: dict[str, Any]) -> str:
  """"0.123 ± 0.004" of a row's sensitivity over seeds ("–" when a seed has none)."""
  if row.get("sensitivity_mean") is None:
    return "–"
  return stats.format_mean_std(row["sensitivity_mean"], row["sensitivity_std"], ".3f")


def sensitivity_markdown(optimum_rows: Sequence[dict[str, Any]], heading: str, *,
                         keys: Sequence[str] | None = None) -> str:
  """``heading``, the learning-rate sensitivity (mean ± std over seeds) as a Markdown table with one row per curve
  (parametrization, rule, α) and one column per axis value, then per axis value the curve with the lowest mean
  sensitivity and whether the same curve is lowest at every value (for the docs' generated sections)."""
  keys = key_columns(optimum_rows) if keys is None else tuple(keys)
  x_name = _axis_field(keys)
  fields = [f for f in CURVE_FIELDS if f in keys]
  values = list(dict.fromkeys(o[x_name] for o in optimum_rows))
  table: dict[tuple[Any, ...], dict[Any, dict[str, Any]]] = {}
  for o in optimum_rows:
    table.setdefault(tuple(o[f] for f in fields), {})[o[x_name]] = o
  cells = [[_cell(v) for v in curve] + [_sensitivity_cell(by[v]) if v in by else "–" for v in values]
           for curve, by in table.items()]
  columns = [FIELD_NAMES[f] for f in fields] + [f"{FIELD_NAMES[x_name]} {v}" for v in values]
  lines = [heading, "", report.markdown_table(columns, cells)]
  lowest = []
  for v in values:
    scored = [(by[v]["sensitivity_mean"], curve) for curve, by in table.items()
              if v in by and by[v].get("sensitivity_mean") is not None]
    if not scored:
      continue
    best, curve = min(scored)
    std = table[curve][v]["sensitivity_std"]
    runner = sorted(scored)[1] if len(scored) > 1 else None
    gap = "" if runner is None else (f"; next: {_panel_title(runner[1], fields)} at {runner[0]:.3f}")
    lowest.append(curve)
    lines.append(f"- {FIELD_NAMES[x_name]} {v}: lowest sensitivity {_panel_title(curve, fields)} "
                 f"({stats.format_mean_std(best, std, '.3f')}){gap}.")
  if lowest:
    same = len(set(lowest)) == 1
    lines.append(f"- The same curve is lowest at every {FIELD_NAMES[x_name]}: "
                 + (f"yes ({_panel_title(lowest[0], fields)})." if same else "no."))
  return "\n".join(lines) + "\n"


def loss_grid_table(rows, log2_lrs, *, x: str = "log2_lr", keys: Sequence[str] | None = None) -> str:
  """Final loss per point and swept value ('div' = a seed diverged)."""
  keys = key_columns(rows) if keys is None else tuple(keys)
  grid = {}
  for r in rows:
    row = grid.setdefault(tuple(r[k] for k in keys), {k: r[k] for k in keys})
    row[f"{r[x]:g}"] = "div" if r["final_loss"] is None else f"{r['final_loss']:.3f}"
  return report.table(list(grid.values()), (*keys, *(f"{v:g}" for v in log2_lrs)))


def width_comparison_markdown(runs: Sequence[tuple[str, Sequence[dict[str, Any]]]], heading: str) -> str:
  """Whether the wider model is at least as good (Tensor Programs V's "wider is better"), as Markdown.

  Args:
    runs: (label, transfer result rows) per run; each run's rows hold one parametrization and two or more widths.
    heading: the text above the table.

  Returns:
    ``heading``, a table with one row per (run, width) at that width's best learning rate (final loss mean ± std
    and per seed), then one line per run and pair of consecutive widths: the difference of the seed means, the
    standard error of that difference, and the verdict (criterion: the wider model is not worse if its loss is at
    most the narrower one's plus twice that standard error).
  """
  table, lines = [], []
  for label, rows in runs:
    best = {}
    for r in rows:
      if r.get("final_loss") is not None and (r["width"] not in best
                                              or r["final_loss"] < best[r["width"]]["final_loss"]):
        best[r["width"]] = r
    for w in sorted(best):
      r = best[w]
      seeds = [s for s in r["final_loss_seeds"] if s is not None]
      table.append([label, w, _cell(r["log2_lr"]), stats.format_mean_std(np.mean(seeds), np.std(seeds), ".3f"),
                    ", ".join(f"{s:.3f}" for s in seeds)])
    widths = sorted(best)
    for narrow, wide in zip(widths, widths[1:]):
      a = np.asarray([s for s in best[narrow]["final_loss_seeds"] if s is not None])
      b = np.asarray([s for s in best[wide]["final_loss_seeds"] if s is not None])
      diff = float(b.mean() - a.mean())
      se = float(np.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)) if min(a.size, b.size) > 1 else float("nan")
      verdict = ("not worse" if diff <= 2 * se else "worse") if math.isfinite(se) else (
          "not worse" if diff <= 0 else "worse (one seed: no error bar)")
      lines.append(f"- {label}: width {wide} − width {narrow} = {diff:+.4f} (standard error {se:.4f}): "
                   f"the wider model is {verdict}.")
  columns = ["run", "width", "best log2 lr", "final loss (mean ± std over seeds)", "per seed"]
  return f"{heading}\n\n{report.markdown_table(columns, table).rstrip()}\n\n" + "\n".join(lines) + "\n"
