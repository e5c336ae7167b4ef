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
forward pass that the training step differentiates (``scaling.training.model`` returns
the RMS values in its aux output and ``scaling.training.train.train_step`` passes them
on): the embedding output (input of the first block), each block's attention
logits (after the logit scale, visible entries only), attention-branch output
and MLP-branch output (before the residual add), and the readout logits.
Step t is measured at the parameters after t updates, so steps 0..k need
k + 1 training steps. Seeds are trained together as one vmapped grid
(``scaling.training.train.run_training``: one compilation per parametrization and width), and
the growth with width is
summarized by the least-squares slope of log2(RMS) against log2(width)
(``fit_slope``): ≈ 0 means width-independent, 0.5 means ∝ √width, 1 means
∝ width.

The models of a check form a ``scaling.training.model.ModelFamily``: fixed depth,
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

Any model (``coord_check(model, loss_fn, batches, schemes=("sp", "mup"), widths=...)``, ``scaling.coord_check``):
a factory of the width (a linen or nnx module, or a ``scaling.PureModel``) made each scheme at each width by
``scaling.WidthParametrization``, trained by the same ``scaling.training.train.run_training`` (a
``scaling.training.train.FunctionalProgram``: seeds vmapped in one program per width, resumable in ``out_dir``); every
module's output is recorded without changing the model, as the RMS of its coordinates and of its change since
initialization (the same batch through the initial parameters). Verdict per module (``verdicts``): it breaks μP
when a slope exceeds the tolerance (default ``TOLERANCE``), of its output at initialization (step 0) or of its change
since initialization after updates (any step ≥ 1); falling curves pass (μP's readout shrinks like 1/√width at
initialization by design). The likely cause follows from when it grows and from the layer kind of the module's
weights (``likely_cause``): a readout growing after updates lacks its 1/width output multiplier; hidden activations
growing after updates get an Adam learning rate not scaled by 1/width; growth at initialization is an init std not
scaled with the fan-in. A module without weights of its own (a block, the whole model) grows because a layer inside
or before it does.

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
import io
from typing import Any, Callable, Mapping, Sequence

import jax
import numpy as np

from scaling.training import data as data_lib
from scaling.training import model as model_lib
from scaling.mup import optim
from scaling.runs import plotting
from scaling.runs import report
from scaling.runs import distributed
from scaling.runs import results
from scaling.mup import schemes as param_lib
from scaling.training import train as train_lib
from scaling.mup import user_model
from scaling.mup import width_family
from scaling.base.config import option
from scaling.base.config import Seeds
from scaling.studies.grid import run as grid_run
from scaling.studies import stats
from scaling.studies.grid.points import GridStudy
from scaling.studies.grid.points import WidthGrid
from scaling.base.validation import ConfigError
from scaling.base.validation import ConfigTypeError

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
      raise ConfigError(f"axis={self.grid.axis!r} only applies to experiments.transfer; the coordinate check varies "
                        "the width or the depth")
    if self.grid.rules is not None:
      raise ConfigError("rules only applies to experiments.transfer; the coordinate check takes one rule",
                        fields=("rule",))
    self.grid.check_unused(self)
    if self.grid.by_depth and len(self.grid.depth_values) < 2:
      raise ConfigError(f"depths needs at least two depths for a slope against depth, got {self.grid.depths[0]}")
    if not self.grid.by_depth and len(self.grid.widths) < 2:
      raise ConfigError(f"widths needs at least two widths for a slope against width, got {self.grid.widths[0]}")

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

  The seeds are one vmapped grid (``scaling.training.train.run_training``) with the same learning rate.

  Args:
    config: the coordinate check.
    point: one of ``config.grid.points(config.model)``: {parametrization, width} or, on the depth axis,
      {parametrization, depth_alpha, width, depth}.
    dataset: a ``scaling.training.data.Dataset`` (its vocab_size and seq_len set the model's).

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
    dataset: a ``scaling.training.data.Dataset``.
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



# ----- The coordinate check of any model (a factory of the width): one call, verdicts per module. -----

BREAKS = "breaks μP"
INCONCLUSIVE = "inconclusive (seed noise)"
TOLERANCE = 0.1
"""A module breaks μP when a slope of log2 RMS against log2 width exceeds this (growth faster than width^0.1)."""

# When a module holds parameters of several kinds, the group that names it.
_GROUP_PRIORITY = ("readout", "hidden", "input", "vector", "fixed")


def module_roles(roles: Mapping[str, Any] | None) -> dict[str, str]:
  """{module name: layer kind} from ``scaling.infer_kinds``'s roles (parameter path -> ``Role``), a nested parameter
  tree of kinds (``Roles.kinds()``), or a flat {module name: kind} mapping (kinds of
  ``scaling.mup.schemes.LAYER_KINDS``).

  The module of a parameter is its path without the last key ("Dense_0" for "Dense_0/kernel"); a module with
  parameters of several kinds takes the first group of ``_GROUP_PRIORITY`` (a Dense layer's kernel, not its bias).
  """
  if roles is None:
    return {}
  if not isinstance(roles, Mapping):
    raise ConfigTypeError(f"roles must be a mapping (scaling.infer_kinds's roles, a tree of kinds, or module name -> "
                          f"kind), got {type(roles).__name__}")
  if any(isinstance(v, Mapping) for v in roles.values()):
    by_param = [(list(param_lib.path_names(path)), leaf)
                for path, leaf in jax.tree_util.tree_flatten_with_path(dict(roles))[0]]
  elif all(hasattr(v, "kind") for v in roles.values()):
    by_param = [(str(path).split("/"), role.kind) for path, role in roles.items()]
  else:
    return {str(k): param_lib.check_kind(v) for k, v in roles.items()}
  found: dict[str, list[str]] = {}
  for keys, kind in by_param:
    if keys and keys[0] == "params":
      keys = keys[1:]
    found.setdefault("/".join(keys[:-1]) or "model", []).append(param_lib.check_kind(kind))
  return {m: min(kinds, key=lambda k: _GROUP_PRIORITY.index(param_lib.kind_group(k))) for m, kinds in found.items()}


def _growth(slope: float) -> str:
  """"like √width" / "like width" / "like width^0.3" for a positive slope."""
  if abs(slope - 0.5) < 0.15:
    return "like √width"
  if abs(slope - 1.0) < 0.2:
    return "like width"
  return f"like width^{slope:.2f}"


def likely_cause(role: str | None, when: str, slope: float) -> str:
  """The likely cause of a module whose output grows with width.

  Args:
    role: the layer kind of the module's weights (``scaling.mup.schemes.LAYER_KINDS``) or None (no weights of
      its own, or no roles given).
    when: "init" (it grows at step 0) or "update" (flat at step 0, grows after updates).
    slope: the largest slope.

  Returns:
    One sentence.
  """
  grows = _growth(slope)
  role = None if role is None else param_lib.kind_group(role)
  if when == "init":
    if role == "readout":
      return (f"grows {grows} at initialization: the readout's init std is not ∝ 1/fan_in (nor ∝ 1/√fan_in with "
              f"a 1/width multiplier)")
    if role in ("hidden", "input"):
      return f"grows {grows} at initialization: init std not ∝ 1/√fan_in"
    if role == "vector":
      return f"grows {grows} at initialization: a gain or bias initialized larger at larger width"
    return f"grows {grows} at initialization: a layer inside or before it has an init std too large for its fan-in"
  if role == "readout":
    return (f"grows {grows} after updates: missing 1/width output multiplier (or the readout's learning rate is "
            f"not scaled by 1/width)")
  if role == "hidden":
    return f"grows {grows} after updates: learning rate of the hidden weights not scaled by 1/width (Adam: η/fan_in)"
  if role == "input":
    return f"grows {grows} after updates: the input layer's learning rate grows with width"
  if role == "vector":
    return (f"grows {grows} after updates: its input changes more at larger width (a layer before it), or a gain or "
            f"bias learning rate grows with width")
  return (f"grows {grows} after updates: a layer inside or before it has a learning rate or output multiplier not "
          f"scaled with width")


def verdicts(slope_rows: Sequence[dict[str, Any]], delta_slope_rows: Sequence[dict[str, Any]] = (), *,
             roles: Mapping[str, Any] | None = None, tolerance: float = TOLERANCE) -> list[dict[str, Any]]:
  """The verdict of every (parametrization, module) from its slopes.

  μP keeps every module's output at initialization and its change since initialization Θ(1) in width (Tensor
  Programs V, §D.1; the updates are what μP scales): a module breaks μP when the slope of its RMS at step 0, or
  of its change at any step ≥ 1, exceeds ``tolerance`` by more than two standard errors of the slope over the
  seeds (``slopes``' ``slope_se``; none known: by any margin); above the tolerance by less, it is "inconclusive
  (seed noise)". The RMS after updates is not judged: it mixes the two, and where the initial part shrinks (μP's
  readout, ∝ 1/√width) while the optimizer cancels it, its slope passes through positive values at small widths
  although neither part grows.

  Args:
    slope_rows: ``scaling.studies.coord_check.study.slopes`` of the RMS rows (step 0 counts).
    delta_slope_rows: the same of the change since initialization (steps ≥ 1 count); when empty, the RMS slopes
      at steps ≥ 1 are judged instead.
    roles: module -> kind, or a parameter tree of kinds or roles (``module_roles``).
    tolerance: a slope above it is growth.

  Returns:
    One row per (parametrization, layer) in order: parametrization, layer, role, slope_init (step 0),
    slope_update (the largest slope of the change at steps ≥ 1), their standard errors slope_init_se and
    slope_update_se, verdict ("ok", "inconclusive (seed noise)" or "breaks μP") and cause ("" when ok).
  """
  by_module = module_roles(roles)
  out: dict[tuple[str, str], dict[str, Any]] = {}
  updates = delta_slope_rows if delta_slope_rows else [s for s in slope_rows if s["step"] > 0]
  for s in slope_rows:
    row = out.setdefault((s["parametrization"], s["layer"]), {
        "parametrization": s["parametrization"], "layer": s["layer"], "role": _role_of(s["layer"], by_module),
        "slope_init": None, "slope_init_se": None, "slope_update": None, "slope_update_se": None})
    if s["step"] == 0 and s["slope"] is not None:
      row.update(slope_init=s["slope"], slope_init_se=s.get("slope_se"))
  for s in updates:
    key = (s["parametrization"], s["layer"])
    if key in out and s["step"] > 0 and s["slope"] is not None:
      if out[key]["slope_update"] is None or s["slope"] > out[key]["slope_update"]:
        out[key].update(slope_update=s["slope"], slope_update_se=s.get("slope_se"))
  for row in out.values():
    row.update(verdict="ok", cause="")
    for when, slope, se in (("init", row["slope_init"], row["slope_init_se"]),
                            ("update", row["slope_update"], row["slope_update_se"])):
      if slope is not None and slope > tolerance:
        noisy = se is not None and slope - tolerance <= 2 * se
        row.update(verdict=INCONCLUSIVE if noisy else BREAKS, cause=likely_cause(row["role"], when, slope))
        if not noisy:
          break
  return list(out.values())


def _role_of(layer: str, by_module: dict[str, str]) -> str | None:
  """The role of a recorded output's module ("Dense_0[1]" and "Embed_0.attend" are those of Dense_0, Embed_0)."""
  name = layer.split("[", 1)[0].split(".", 1)[0]
  return by_module.get(name)


@dataclasses.dataclass(frozen=True)
class CoordCheckResult:
  """What ``coord_check`` measured (combine several with ``combine``).

  Attributes:
    rows: one per (parametrization, width, step, layer): rms (mean over seeds), rms_std, rms_seeds, delta_rms (of
      the change since initialization, mean over seeds), delta_rms_seeds,
      the change since initialization, mean over seeds), loss (mean over seeds).
    slopes: ``scaling.studies.coord_check.study.slopes`` of rms: per (parametrization, layer, step) the slope against
      log2 width.
    delta_slopes: the same of delta_rms (None at step 0, where the change is 0).
    verdicts: ``verdicts`` per (parametrization, layer).
    steps: k (RMS at steps 0..k).
    tolerance: the slope above which a module grows.
  """

  rows: list[dict[str, Any]]
  slopes: list[dict[str, Any]]
  delta_slopes: list[dict[str, Any]]
  verdicts: list[dict[str, Any]]
  steps: int
  tolerance: float

  @property
  def ok(self) -> bool:
    """Whether no module breaks μP."""
    return all(v["verdict"] == "ok" for v in self.verdicts)

  @property
  def broken(self) -> list[dict[str, Any]]:
    """The verdict rows of the modules that break μP."""
    return [v for v in self.verdicts if v["verdict"] == BREAKS]

  @property
  def inconclusive(self) -> list[dict[str, Any]]:
    """The verdict rows of the modules above the tolerance by less than two standard errors."""
    return [v for v in self.verdicts if v["verdict"] == INCONCLUSIVE]

  def slope(self, layer: str, step: int, parametrization: str | None = None, *, delta: bool = False) -> float | None:
    """The fitted slope of one module at one step (of its change since initialization with ``delta``)."""
    for s in self.delta_slopes if delta else self.slopes:
      if s["layer"] == layer and s["step"] == step and parametrization in (None, s["parametrization"]):
        return s["slope"]
    raise KeyError(f"no slope for layer {layer!r} at step {step}")

  def write_figure(self, path: str | pathlib.Path, *, delta: bool = False) -> None:
    """mup's plot: one row of panels per parametrization, one panel per step, RMS against width (log-log), one
    line per module with its slope in the legend (the change since initialization at steps ≥ 1 with ``delta``)."""
    rows = self.rows if not delta else [{**r, "rms": r["delta_rms"]} for r in self.rows if r["step"] > 0]
    write_figure(path, rows, self.delta_slopes if delta else self.slopes)

  def slope_markdown(self, heading: str) -> str:
    """``heading``, the slopes per (parametrization, module) and step as a Markdown table."""
    return slope_markdown(self.slopes, self.steps, heading)

  def verdict_markdown(self, heading: str) -> str:
    """``heading``, the verdict of every module as a Markdown table, then one line per parametrization."""
    fmt = lambda v: "–" if v is None else f"{v:+.2f}"
    cells = [[v["parametrization"], v["layer"], v["role"] or "–", fmt(v["slope_init"]), fmt(v["slope_update"]),
              v["verdict"], v["cause"] or "–"] for v in self.verdicts]
    columns = ["parametrization", "module", "role", "slope at init", "largest slope of the change", "verdict",
               "likely cause"]
    lines = [heading, "", report.markdown_table(columns, cells).rstrip(), ""]
    for name in dict.fromkeys(v["parametrization"] for v in self.verdicts):
      broken = [v["layer"] for v in self.verdicts if v["parametrization"] == name and v["verdict"] == BREAKS]
      noisy = [v["layer"] for v in self.verdicts if v["parametrization"] == name and v["verdict"] == INCONCLUSIVE]
      line = (f"{len(broken)} module(s) break μP ({', '.join(broken)})." if broken else
              "no module breaks μP." if noisy else "every module within the tolerance (μP holds).")
      if noisy:
        line += f" {len(noisy)} inconclusive within the seeds' noise ({', '.join(noisy)})."
      lines.append(f"- {name}: {line}")
    lines.append(f"- Criterion: a module breaks μP when the slope of log2 RMS against log2 width exceeds "
                 f"{self.tolerance:g} at initialization (its output) or at a step ≥ 1 (its change since "
                 "initialization) by more than two standard errors of the slope over the seeds; by less, it is "
                 "inconclusive.")
    return "\n".join(lines) + "\n"


def combine(*results: CoordCheckResult, roles: Mapping[str, Any] | None = None) -> CoordCheckResult:
  """Several results (e.g. SP and μP of one model) as one: one figure with a row of panels per parametrization."""
  if not results:
    raise ConfigError("combine needs at least one CoordCheckResult")
  steps = {r.steps for r in results}
  if len(steps) != 1:
    raise ConfigError(f"results must have the same number of steps, got {sorted(steps)}")
  rows = [row for r in results for row in r.rows]
  slopes = [row for r in results for row in r.slopes]
  delta = [row for r in results for row in r.delta_slopes]
  return CoordCheckResult(rows, slopes, delta, [v for r in results for v in r.verdicts], steps.pop(),
                          results[0].tolerance)


def coord_check(model: user_model.ModelFactory, loss_fn: user_model.LossFn, batches: Any,
                optimizer: user_model.OptimizerFactory | None = None, *, schemes: Sequence[Any] = ("sp", "mup"),
                widths: Sequence[int] = (64, 128, 256, 512), base_width: int | None = None,
                init: str | user_model.InitFn | None = None, steps: int = 3, learning_rate: float = 1e-2,
                seeds: Sequence[int] = (0, 1, 2), roles: Mapping[str, Any] | None = None, name: str = "model",
                tolerance: float = TOLERANCE, progress: bool = True, out_dir: str | pathlib.Path | None = None,
                **options: Any) -> CoordCheckResult:
  """The coordinate check of any model: every module's output RMS against width over the first steps.

  Tensor Programs V (Yang et al. 2022), §D.1 and Fig. 5; ``microsoft/mup``'s ``get_coord_data``. One call infers
  the roles (``scaling.WidthParametrization``: the computation and the shapes), parametrizes each width under each
  scheme and runs them all::

    result = scaling.coord_check(model, loss_fn, batch, schemes=("sp", "mup"), widths=(64, 128, 256, 512))

  With an ``optimizer`` factory instead, the model is trained as given under that optimizer (custom
  per-parameter learning rates; ``init`` may then be an ``init(width, params, key)`` function), one run named
  ``name``.

  Args:
    model: ``model(width) -> flax.linen.Module | scaling.PureModel`` or ``model(width, rngs) -> flax.nnx.Module``.
    loss_fn: ``loss_fn(model, batch) -> scalar``.
    batches: a fixed batch (as mup's ``fix_data``), a function ``batches(step) -> batch``, or an iterator.
    optimizer: None (each scheme's optimizer), or ``optimizer(width, params, learning_rate) ->
      optax.GradientTransformation`` (params: the shapes of the parameter tree).
    schemes: parametrizations compared: names ("sp", "mup", ...), ``scaling.mup.schemes.Parametrization``
      objects or ready ``scaling.WidthParametrization`` s.
    widths: at least two widths.
    base_width: the schemes' base width (default: the smallest width).
    init: "base" (None), "paper" or "rescale" (``scaling.WidthParametrization``); with ``optimizer``, an optional
      ``init(width, params, key) -> params`` applied after the model's own initialization.
    steps: k ≥ 1: RMS at steps 0..k (k updates).
    learning_rate: the (Adam) learning rate.
    seeds: the seeds (initialization keys), trained together as one vmapped program per width.
    roles: with ``optimizer``, the role of each module's weights for the likely causes (``module_roles``); the
      schemes' own roles otherwise.
    name: the run's name with ``optimizer``.
    tolerance: the slope above which a module grows.
    progress: show progress (``scaling.runs.report.Progress``) on stderr.
    out_dir: optional folder: each (scheme, width)'s rows are appended to ``results.jsonl`` when trained, and a
      rerun with the same options into it trains only what a killed run had not finished.
    **options: further options of ``scaling.WidthParametrization`` (overrides, tied_embedding, blocks, forward,
      optimizer name as ``optimizer_name``, its options).

  Returns:
    A ``CoordCheckResult`` of every scheme (one row of panels each in its figure).
  """
  widths = user_model.check_widths(widths)
  if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
    raise ConfigError(f"steps must be a positive int, got {steps!r}")
  if not isinstance(learning_rate, (int, float)) or not math.isfinite(learning_rate) or learning_rate <= 0:
    raise ConfigError(f"learning_rate must be a finite number > 0, got {learning_rate!r}")
  seeds = np.asarray(list(seeds), np.int32)
  if seeds.ndim != 1 or not seeds.size:
    raise ConfigError(f"seeds must be a non-empty sequence of ints, got {seeds!r}")
  if not isinstance(tolerance, (int, float)) or not tolerance > 0:
    raise ConfigError(f"tolerance must be a positive number, got {tolerance!r}")
  batches = user_model.Batches.of(batches, steps + 1)
  found = width_family.runs(model, loss_fn, batches.example, optimizer=optimizer, init=init, name=name,
                                     schemes=schemes, widths=widths, base_width=base_width, **options)
  rows = _measure(found, widths, steps, learning_rate, seeds, batches, progress, out_dir)
  return combine(*[from_rows([r for r in rows if r["parametrization"] == run.name], steps,
                             roles=roles if run.roles is None else run.roles, tolerance=tolerance) for run in found])


def _measure(runs: Sequence[width_family.Run], widths: Sequence[int], steps: int, learning_rate: float,
             seeds: np.ndarray, batches: user_model.Batches, progress: bool,
             out_dir: str | pathlib.Path | None) -> list[dict[str, Any]]:
  """The coordinate-check rows of every (name, model_at(width), optimizer factory) run at every width: each trained
  for ``steps`` updates by ``scaling.training.train.run_training`` (seeds vmapped in one program), resumable in ``out_dir``."""
  opt = optim.OptimizerConfig(steps=steps + 1, learning_rate=float(learning_rate))
  by_name = {run.name: (run.model_at, run.optimizer) for run in runs}
  if len(by_name) != len(runs):
    raise ConfigError(f"the schemes must have distinct names, got {[run.name for run in runs]}")
  models = {}

  def modules(point):
    """The model of a point and the names of its recorded module outputs (nothing computed)."""
    key = (point["parametrization"], point["width"])
    if key not in models:
      fm = by_name[key[0]][0](key[1])
      models[key] = fm, tuple(jax.eval_shape(lambda: fm.captured(*fm.init(jax.random.key(0)), batches.example))[1])
    return models[key]

  def compute(point):
    fm, shapes = modules(point)
    program = train_lib.FunctionalProgram(fm, by_name[point["parametrization"]][1], record_outputs=True)
    names = tuple(f"{kind}/{module}" for kind in ("rms", "delta_rms") for module in shapes)
    result = train_lib.run_training(program, opt, batches, seed=seeds,
                                    learning_rates=np.full(seeds.shape, learning_rate, np.float32),
                                    record=("loss", *names), stop_on_divergence=False)
    rec = result.records
    rms_rows = coord_rows(point, {"rms": {m: rec[f"rms/{m}"] for m in shapes}})
    delta = {m: np.asarray(rec[f"delta_rms/{m}"]) for m in shapes}
    loss = np.asarray(rec["loss"]).mean(axis=1)
    return [{**r, "delta_rms": stats.finite_or_none(float(delta[r["layer"]][r["step"]].mean())),
             "delta_rms_seeds": [float(v) for v in delta[r["layer"]][r["step"]]],
             "loss": stats.finite_or_none(float(loss[r["step"]]))} for r in rms_rows]

  points = [{"parametrization": run.name, "width": w} for run in runs for w in widths]
  return grid_run.run_rows(points, compute, "coord_check", out_dir=out_dir, progress=progress,
                           count=lambda point: len(modules(point)[1]) * (steps + 1),
                           options={"study": "coord_check", "schemes": list(by_name), "widths": list(widths),
                                    "steps": steps, "learning_rate": learning_rate, "seeds": seeds.tolist()})


def from_rows(rows: list[dict[str, Any]], steps: int, *, roles: Mapping[str, Any] | None = None,
              tolerance: float = TOLERANCE) -> CoordCheckResult:
  """The result of measured rows (``CoordCheckResult.rows``, e.g. read back from a file): slopes and verdicts.

  Args:
    rows: one per (parametrization, width, step, layer) with rms and delta_rms.
    steps: k (steps 0..k).
    roles: as in ``coord_check``.
    tolerance: as in ``coord_check``.

  Returns:
    A ``CoordCheckResult``.
  """
  slope_rows = slopes(rows)
  delta_rows = slopes([{**r, "rms": r["delta_rms"] if r["step"] else None, "rms_seeds": r.get("delta_rms_seeds")}
                       for r in rows])
  return CoordCheckResult(rows, slope_rows, delta_rows, verdicts(slope_rows, delta_rows, roles=roles,
                                                                 tolerance=tolerance), steps, float(tolerance))

