"""The μP coordinate check: activation sizes against width over the first training steps.

Yang et al. 2022 ("Tensor Programs V: Tuning Large Neural Networks via
Zero-Shot Hyperparameter Transfer", §D.1 and Fig. 5) check a parametrization by
training models of several widths for a few steps on the same data and
plotting the average size of each layer's output coordinates against width at
each step; ``microsoft/mup``'s ``get_coord_data`` records it as the mean |x| of
every module output at the forward pass of step t (before that step's update).
Under μP every curve is flat (or falls) with width at every step; under SP
some grow, most visibly the readout logits and the attention logits once
training has moved the weights.

Here the size is the root mean square of the coordinates, taken from the very
forward pass that the training step differentiates (``scaling.model`` returns
the RMS values in its aux output and ``scaling.train.train_step`` passes them
on): the embedding output (input of the first block), each block's attention
logits (after the logit scale, visible entries only), attention-branch output
and MLP-branch output (before the residual add), and the readout logits.
Step t is measured at the parameters after t updates, so steps 0..k need
k + 1 training steps. Seeds are trained together as one vmapped grid
(``scaling.train.run_training``: one compilation per parametrization and width), and
the growth with width is
summarized by the least-squares slope of log2(RMS) against log2(width)
(``fit_slope``): ≈ 0 means width-independent, 0.5 means ∝ √width, 1 means
∝ width.

The models of a check form a ``scaling.model.ModelFamily``: fixed depth,
every width-like dimension (heads × head dim, MLP width) proportional to the
width.

What to expect (Adam, widths far above the base width): under SP the slopes
after the first update are clearly positive (updates of Θ(lr) per entry move
each output by Θ(lr · width)); under μP they are ≈ 0 or negative. Two μP
quantities shrink at initialization by design: the readout logits ∝ 1/√width
(effective init std ∝ 1/width, Tensor Programs V Table 3: slope −0.5 at step 0) and, when
the head dim grows with the width, the attention logits ∝ 1/√d_head (α/d_head
applied to independent q and k: slope −0.5 at step 0). Both slopes rise
towards 0, never above it, as training adds the width-independent
contribution of the updates.

Depth axis (``--axis=depth``; CompleteP, Dey et al. 2025, Fig. 7): models of
one width and several depths, each α of ``--depth_alphas`` (the residual
branch multiplier (L/L_base)^−α, L_base the smallest depth), measured on
layers every depth has (``DEPTH_LAYERS``): the embedding, the means over blocks
of the attention-logit RMS and of the branch outputs as added to the residual
stream (multiplier included), the residual stream after the last block
(``resid_final``) and the readout; slopes are against log2 depth. With α = 0
the final residual RMS grows with depth (each block adds a Θ(1) branch); with
α = 1/2 or 1 it stays flat.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import time
from typing import Any, Callable, Sequence

import numpy as np

from scaling import data as data_lib
from scaling import model as model_lib
from scaling import optim
from scaling import plotting
from scaling import report
from scaling import distributed
from scaling import results
from scaling import train as train_lib
from scaling.config import option
from scaling.config import Seeds
from scaling.studies import grid_run
from scaling.studies import stats
from scaling.studies.grid import GridStudy
from scaling.studies.grid import WidthGrid
from scaling.validation import ConfigError

# train_step metrics measured once per model, and those measured per block [depth] (layer "block_{i}/<name>").
_MODEL_RMS = {"embed_rms": "embed", "readout_rms": "readout"}
_BLOCK_RMS = {"attn_logits_rms": "attn_logits", "attn_out_rms": "attn_out", "mlp_out_rms": "mlp_out"}
RMS_METRICS = (*_MODEL_RMS, *_BLOCK_RMS)
# The layers of the depth axis, comparable across depths: per-block values averaged over the blocks (branch outputs
# as added to the residual stream, times the multiplier s) and the residual stream after the last block.
DEPTH_LAYERS = ("embed", "attn_logits_mean", "attn_out_mean", "mlp_out_mean", "resid_final", "readout")
DEPTH_METRICS = (*RMS_METRICS, "resid_rms")


def layer_names(depth: int) -> tuple[str, ...]:
  """The measured layers in forward order: embed, block_i/{attn_logits,attn_out,mlp_out}, readout."""
  blocks = [f"block_{i}/{layer}" for i in range(depth) for layer in _BLOCK_RMS.values()]
  return ("embed", *blocks, "readout")


def rms_by_layer(metrics: dict[str, Any], depth: int) -> dict[str, np.ndarray]:
  """Layer name -> RMS values from ``train_step`` metrics (any leading axes; per-block ones end in [depth])."""
  out = {layer: np.asarray(metrics[name]) for name, layer in _MODEL_RMS.items()}
  for name, layer in _BLOCK_RMS.items():
    value = np.asarray(metrics[name])
    out.update({f"block_{i}/{layer}": value[..., i] for i in range(depth)})
  return {name: out[name] for name in layer_names(depth)}


def depth_rms_by_layer(metrics: dict[str, Any], branch_multiplier: float) -> dict[str, np.ndarray]:
  """``DEPTH_LAYERS`` -> RMS values from ``train_step`` metrics (per-block ones end in [depth]).

  Args:
    metrics: ``train_step`` metrics with the keys of ``DEPTH_METRICS`` (any leading axes).
    branch_multiplier: s, the residual-branch multiplier the model applies to every branch output before the add
      (``Parametrization.residual_multiplier``): attn_out_mean and mlp_out_mean are the mean over blocks of
      s · RMS(f(x)), the RMS of what each branch adds to the residual stream.

  Returns:
    {layer: values with the block axis removed}.
  """
  block_mean = lambda name: np.mean(np.asarray(metrics[name], np.float64), axis=-1)
  return {"embed": np.asarray(metrics["embed_rms"]), "attn_logits_mean": block_mean("attn_logits_rms"),
          "attn_out_mean": branch_multiplier * block_mean("attn_out_rms"),
          "mlp_out_mean": branch_multiplier * block_mean("mlp_out_rms"),
          "resid_final": np.asarray(metrics["resid_rms"])[..., -1], "readout": np.asarray(metrics["readout_rms"])}


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


@dataclasses.dataclass(frozen=True)
class CoordCheckConfig(GridStudy):
  """What to train and measure (the options of ``experiments.coord_check``).

  ``optim.steps`` is k: RMS is recorded at steps 0..k (k updates).
  """

  grid: WidthGrid = option(WidthGrid(widths=(64, 128, 256, 512, 1024)), "Parametrizations and widths.")
  fixed_batch: bool = option(True, "Train every step on the same batch (as mup's fix_data); false: a new batch each "
                             "step.")
  seeds: Seeds = option(Seeds(), "Seeds averaged (vmapped).")
  data: data_lib.DataConfig = option(data_lib.DataConfig(seq_len=32, batch_size=8), "Training data.")
  model: model_lib.ModelFamily = option(model_lib.ModelFamily(), "The models.")
  optim: optim.OptimizerConfig = option(optim.OptimizerConfig(steps=4, learning_rate=1e-2),
                                        "Optimizer; --steps is k, RMS is recorded at steps 0..k.")
  output: results.OutputConfig = option(results.OutputConfig("runs/coord_check"), "Output.")
  cluster: distributed.DistributedConfig = option(distributed.DistributedConfig(), "Several processes.")

  def validate(self):
    if self.grid.axis in ("batch", "steps"):
      raise ConfigError(f"--axis={self.grid.axis} only applies to experiments.transfer; the coordinate check varies "
                       "the width or the depth")
    if self.grid.rules is not None:
      raise ConfigError("--rules only applies to experiments.transfer; the coordinate check takes one --rule")
    self.grid.check_unused(self)
    if self.grid.by_depth and len(self.grid.depth_values) < 2:
      raise ConfigError(f"--depths needs at least two depths for a slope against depth, got {self.grid.depths[0]}")
    if not self.grid.by_depth and len(self.grid.widths) < 2:
      raise ConfigError(f"--widths needs at least two widths for a slope against width, got {self.grid.widths[0]}")

  @property
  def layers(self) -> tuple[str, ...]:
    """The measured layers: ``layer_names(--depth)`` on the width axis, ``DEPTH_LAYERS`` on the depth axis."""
    return DEPTH_LAYERS if self.grid.by_depth else layer_names(self.family.depth)

  @property
  def members(self) -> tuple[int, tuple[str, ...]]:
    """(models vmapped per width, the options that set it): the seeds."""
    return self.seeds.num_seeds, ("num_seeds",)

  @property
  def steps(self) -> int:
    """k, the number of updates."""
    return self.optim.steps


def coord_data(config: CoordCheckConfig, point: dict[str, Any], dataset: Any) -> dict[str, Any]:
  """Trains ``num_seeds`` models of one grid point for k + 1 steps and records RMS per layer.

  The seeds are one vmapped grid (``scaling.train.run_training``) with the same learning rate.

  Args:
    config: the coordinate check.
    point: one of ``config.grid.points(config.model)``: {parametrization, width} or, on the depth axis,
      {parametrization, depth_alpha, width, depth}.
    dataset: a ``scaling.data.Dataset`` (its vocab_size and seq_len set the model's).

  Returns:
    {"rms": {layer: float64 [k + 1, num_seeds]} over ``config.layers``, "loss": [k + 1, num_seeds]}.
  """
  model_config = config.grid.model_config(config.model, point, dataset)
  opt = dataclasses.replace(config.optim, steps=config.steps + 1)
  by_depth = config.grid.by_depth
  result = train_lib.run_training(model_config, opt, dataset, seed=config.seeds.seeds,
                                  record=("loss", *(DEPTH_METRICS if by_depth else RMS_METRICS)),
                                  fixed_batch=config.fixed_batch, stop_on_divergence=False)
  if by_depth:
    rms = depth_rms_by_layer(result.records, model_config.parametrization.residual_multiplier())
  else:
    rms = rms_by_layer(result.records, model_config.depth)
  return {"rms": rms, "loss": result.records["loss"]}


def coord_rows(point: dict[str, Any], data: dict[str, Any]) -> list[dict[str, Any]]:
  """One row per (step, layer): the point's fields, step, layer, rms (mean over seeds), rms_std, rms_seeds."""
  rows = []
  for layer, values in data["rms"].items():
    for step, per_seed in enumerate(values):
      rms = stats.mean_std(per_seed)
      rows.append({**point, "step": step, "layer": layer, "rms": rms["mean"], "rms_std": rms["std"],
                   "rms_seeds": [float(v) for v in per_seed]})
  return rows


def run_coord_check(config: CoordCheckConfig, dataset: Any, *,
                    on_point: Callable[[dict[str, Any], list[dict[str, Any]]], None] | None = None
                    ) -> list[dict[str, Any]]:
  """The coordinate check of every point of the grid (parametrization and width, or α and depth).

  Args:
    config: what to train.
    dataset: a ``scaling.data.Dataset``.
    on_point: called as ``on_point(point, rows)`` after each point.

  Returns:
    Rows of ``coord_rows`` for all points.
  """
  rows = []
  for point in config.grid.points(config.model):
    new = coord_rows(point, coord_data(config, point, dataset))
    rows += new
    if on_point is not None:
      on_point(point, new)
  return rows


def axis_of(rows: Sequence[dict[str, Any]]) -> str:
  """The axis the rows vary: "depth" when they carry a depth, else "width"."""
  return "depth" if rows and "depth" in rows[0] else "width"


def _series(row: dict[str, Any], axis: str) -> tuple[Any, ...]:
  """The curve a row is on: (parametrization,) or, on the depth axis, (parametrization, depth_alpha)."""
  return (row["parametrization"], row["depth_alpha"]) if axis == "depth" else (row["parametrization"],)


def slopes(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
  """The log-log slope of RMS against width (or depth, for rows with a depth) per series, layer and step.

  Returns:
    Rows {parametrization, [depth_alpha,] layer, step, slope, intercept, widths | depths} in the order the
    (parametrization, [α,] layer, step) groups first appear; slope and intercept are None where undefined
    (an RMS of 0 or non-finite).
  """
  axis = axis_of(rows)
  names = ("parametrization", "depth_alpha") if axis == "depth" else ("parametrization",)
  groups: dict[tuple[Any, ...], list[tuple[int, float]]] = {}
  for r in rows:
    groups.setdefault((*_series(r, axis), r["layer"], r["step"]), []).append((r[axis], r["rms"]))
  out = []
  for (*series, layer, step), points in groups.items():
    points.sort()
    xs = [x for x, _ in points]
    slope, intercept = fit_slope(xs, [v if v is not None else float("nan") for _, v in points])
    out.append({**dict(zip(names, series)), "layer": layer, "step": step,
                "slope": slope if math.isfinite(slope) else None,
                "intercept": intercept if math.isfinite(intercept) else None, f"{axis}s": xs})
  return out


def write_figure(path, rows, slope_rows) -> None:
  """A grid like mup's: rows = parametrizations (and α on the depth axis), columns = steps; RMS against width
  (or depth; log-log), one line per layer.

  Every panel shares one y range; the legend gives each layer's fitted slope.
  """
  axis = axis_of(rows)
  panels = list(dict.fromkeys(_series(r, axis) for r in rows))
  steps = sorted({r["step"] for r in rows})
  layers = list(dict.fromkeys(r["layer"] for r in rows))
  slope = {(*_series(s, axis), s["layer"], s["step"]): s["slope"] for s in slope_rows}
  fig, axes = plotting.grid_figure(len(panels), len(steps), width=3.6, height=3.0)
  positive = [r["rms"] for r in rows if r["rms"] is not None and r["rms"] > 0]
  for i, key in enumerate(panels):
    title = key[0] if len(key) == 1 else f"{key[0]}, α={key[1]:g}"
    for j, step in enumerate(steps):
      ax = axes[i][j]
      series = {}
      for layer in layers:
        points = sorted((r[axis], r["rms"]) for r in rows
                        if _series(r, axis) == key and r["step"] == step and r["layer"] == layer
                        and r["rms"] is not None and r["rms"] > 0)
        if points:
          s = slope.get((*key, layer, step))
          label = layer if s is None else f"{layer} ({s:+.2f})"
          series[label] = ([x for x, _ in points], [v for _, v in points])
      plotting.line_plot(None, series, xlabel=axis, ylabel="RMS" if j == 0 else "", logx2=True, logy=True,
                         title=f"{title}, step {step}", ax=ax)
      ax.legend(fontsize=5, loc="best")
      if positive:  # one y range for every panel, so growth across steps and parametrizations is comparable
        ax.set_ylim(min(positive) / 1.3, max(positive) * 1.3)
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


OUTPUTS = ("results.jsonl", "slopes.jsonl", "slopes.csv", "slopes.md", "coord_check.png", "config.json",
           "timings.jsonl")
"""The files ``run`` writes into the output folder (besides run.json)."""


def run(config: CoordCheckConfig, out_dir: pathlib.Path) -> list[dict[str, Any]]:
  """The study as ``experiments.coord_check`` runs it: trains, streams rows, fits slopes, plots, prints them.

  Each point's rows (a width, or an (α, depth) with --axis=depth) are appended whole to results.partial.jsonl
  when it is trained; rerun with the same options into the same folder, a killed run trains only the points it
  has not finished. Slopes and the figure come from the complete rows at the end; wall times go to timings.jsonl.
  """
  dataset = grid_run.prepare(config, out_dir, OUTPUTS)
  grid = config.grid
  start = time.perf_counter()
  points = grid.points(config.model)
  size = len(config.layers) * (config.steps + 1)
  rows = grid_run.run_points(grid, points, out_dir, size,
                             lambda point: coord_rows(point, coord_data(config, point, dataset)), "coord_check")
  slope_rows = slopes(rows)
  xs = f"{grid.axis}s"
  results.write_jsonl(out_dir / "slopes.jsonl", slope_rows)
  results.write_csv(out_dir / "slopes.csv", [{k: v for k, v in s.items() if k != xs} for s in slope_rows])
  write_figure(out_dir / "coord_check.png", rows, slope_rows)
  at = f" at width {grid.depth_width}" if grid.by_depth else ""
  heading = (f"slope of log2 RMS against log2 {grid.axis} ({xs} {', '.join(map(str, grid.x_values()))}{at}; "
             f"{config.optim.optimizer} lr={config.optim.learning_rate:g}, {config.seeds.num_seeds} seeds, "
             f"{config.steps} steps on {dataset.name})")
  results.write_text(out_dir / "slopes.md", slope_markdown(slope_rows, config.steps, heading[0].upper() + heading[1:]
                                                           + ":"))
  print(heading + ":")
  print(slope_table(slope_rows, config.steps))
  print(f"\n{len(rows)} rows in {time.perf_counter() - start:.1f}s; wrote results.jsonl, slopes.jsonl, "
        f"slopes.csv, slopes.md, coord_check.png and config.json to {out_dir}")
  return slope_rows
