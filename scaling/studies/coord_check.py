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
quantities shrink at initialization by design: the readout logits ∝ 1/width
(multiplier 1/m on a fan-in-initialized readout: slope −1 at step 0) and, when
the head dim grows with the width, the attention logits ∝ 1/√d_head (α/d_head
applied to independent q and k: slope −0.5 at step 0). Both slopes rise
towards 0, never above it, as training adds the width-independent
contribution of the updates.
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
from scaling.config import Options
from scaling.config import Seeds
from scaling.studies import transfer

# train_step metrics measured once per model, and those measured per block [depth] (layer "block_{i}/<name>").
_MODEL_RMS = {"embed_rms": "embed", "readout_rms": "readout"}
_BLOCK_RMS = {"attn_logits_rms": "attn_logits", "attn_out_rms": "attn_out", "mlp_out_rms": "mlp_out"}
RMS_METRICS = (*_MODEL_RMS, *_BLOCK_RMS)


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


def fit_slope(widths: Sequence[float], values: Sequence[float]) -> tuple[float, float]:
  """Least-squares line log2(value) = slope · log2(width) + intercept.

  Args:
    widths: at least two distinct positive widths.
    values: the measured sizes, same length.

  Returns:
    (slope, intercept); both NaN when fewer than two distinct widths are given
    or a value is not a positive finite number (log undefined).
  """
  x = np.asarray(widths, np.float64)
  y = np.asarray(values, np.float64)
  if x.shape != y.shape or x.ndim != 1:
    raise ValueError(f"widths and values must be 1-D of the same length, got {x.shape} and {y.shape}")
  if (len(np.unique(x)) < 2 or not np.all(np.isfinite(y)) or np.any(y <= 0) or np.any(x <= 0)):
    return float("nan"), float("nan")
  lx, ly = np.log2(x), np.log2(y)
  slope, intercept = np.polyfit(lx, ly, 1)
  return float(slope), float(intercept)


@dataclasses.dataclass(frozen=True)
class CoordCheckConfig(Options):
  """What to train and measure (the options of ``experiments.coord_check``).

  ``optim.steps`` is k: RMS is recorded at steps 0..k (k updates).
  """

  grid: transfer.WidthGrid = option(transfer.WidthGrid(widths=(64, 128, 256, 512, 1024)),
                                    "Parametrizations and widths.")
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
    if len(self.grid.widths) < 2:
      raise ValueError(f"--widths needs at least two widths for a slope against width, got {self.grid.widths[0]}")

  @property
  def family(self) -> model_lib.ModelFamily:
    """The models, with the base width defaulting to the smallest width."""
    return self.model.with_base_width(self.grid.widths)

  @property
  def members(self) -> tuple[int, tuple[str, ...]]:
    """(models vmapped per width, the options that set it): the seeds."""
    return self.seeds.num_seeds, ("num_seeds",)

  @property
  def steps(self) -> int:
    """k, the number of updates."""
    return self.optim.steps


def coord_data(config: CoordCheckConfig, parametrization: str, width: int, dataset: Any) -> dict[str, Any]:
  """Trains ``num_seeds`` models of one width for k + 1 steps and records RMS per layer.

  The seeds are one vmapped grid (``scaling.train.run_training``) with the same learning rate.

  Args:
    config: the coordinate check.
    parametrization: one scheme name.
    width: D.
    dataset: a ``scaling.data.Dataset`` (its vocab_size and seq_len set the model's).

  Returns:
    {"rms": {layer: float64 [k + 1, num_seeds]}, "loss": [k + 1, num_seeds]}.
  """
  model_config = config.family.model_config(parametrization, width, vocab_size=dataset.vocab_size,
                                            max_len=dataset.seq_len)
  opt = dataclasses.replace(config.optim, steps=config.steps + 1)
  result = train_lib.run_training(model_config, opt, dataset, seed=config.seeds.seeds, record=("loss", *RMS_METRICS),
                           fixed_batch=config.fixed_batch, stop_on_divergence=False)
  return {"rms": rms_by_layer(result.records, model_config.depth), "loss": result.records["loss"]}


def coord_rows(parametrization: str, width: int, data: dict[str, Any]) -> list[dict[str, Any]]:
  """One row per (step, layer): parametrization, width, step, layer, rms (mean over seeds), rms_std, rms_seeds."""
  rows = []
  for layer, values in data["rms"].items():
    for step, per_seed in enumerate(values):
      rows.append({"parametrization": parametrization, "width": width, "step": step, "layer": layer,
                   "rms": float(np.mean(per_seed)), "rms_std": float(np.std(per_seed)),
                   "rms_seeds": [float(v) for v in per_seed]})
  return rows


def run_coord_check(config: CoordCheckConfig, dataset: Any, *,
                    on_width: Callable[[str, int, list[dict[str, Any]]], None] | None = None) -> list[dict[str, Any]]:
  """The coordinate check of every parametrization and width.

  Args:
    config: what to train.
    dataset: a ``scaling.data.Dataset``.
    on_width: called as ``on_width(parametrization, width, rows)`` after each width.

  Returns:
    Rows of ``coord_rows`` for all parametrizations and widths.
  """
  rows = []
  for name in config.grid.parametrizations:
    for width in config.grid.widths:
      new = coord_rows(name, width, coord_data(config, name, width, dataset))
      rows += new
      if on_width is not None:
        on_width(name, width, new)
  return rows


def slopes(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
  """The log-log slope of RMS against width per (parametrization, layer, step).

  Returns:
    Rows {parametrization, layer, step, slope, intercept, widths} in the order
    the (parametrization, layer, step) triples first appear; slope and
    intercept are None where undefined (an RMS of 0 or non-finite).
  """
  groups: dict[tuple[str, str, int], list[tuple[int, float]]] = {}
  for r in rows:
    groups.setdefault((r["parametrization"], r["layer"], r["step"]), []).append((r["width"], r["rms"]))
  out = []
  for (name, layer, step), points in groups.items():
    points.sort()
    widths = [w for w, _ in points]
    slope, intercept = fit_slope(widths, [v if v is not None else float("nan") for _, v in points])
    out.append({"parametrization": name, "layer": layer, "step": step,
                "slope": slope if math.isfinite(slope) else None,
                "intercept": intercept if math.isfinite(intercept) else None, "widths": widths})
  return out


def write_figure(path, rows, slope_rows) -> None:
  """A grid like mup's: rows = parametrizations, columns = steps; RMS against width (log-log), one line per layer.

  Every panel shares one y range; the legend gives each layer's fitted slope.
  """
  params = list(dict.fromkeys(r["parametrization"] for r in rows))
  steps = sorted({r["step"] for r in rows})
  layers = list(dict.fromkeys(r["layer"] for r in rows))
  slope = {(s["parametrization"], s["layer"], s["step"]): s["slope"] for s in slope_rows}
  fig, axes = plotting.grid_figure(len(params), len(steps), width=3.6, height=3.0)
  positive = [r["rms"] for r in rows if r["rms"] is not None and r["rms"] > 0]
  for i, name in enumerate(params):
    for j, step in enumerate(steps):
      ax = axes[i][j]
      series = {}
      for layer in layers:
        points = sorted((r["width"], r["rms"]) for r in rows
                        if r["parametrization"] == name and r["step"] == step and r["layer"] == layer
                        and r["rms"] is not None and r["rms"] > 0)
        if points:
          s = slope.get((name, layer, step))
          label = layer if s is None else f"{layer} ({s:+.2f})"
          series[label] = ([w for w, _ in points], [v for _, v in points])
      plotting.line_plot(None, series, xlabel="width", ylabel="RMS" if j == 0 else "", logx2=True, logy=True,
                         title=f"{name}, step {step}", ax=ax)
      ax.legend(fontsize=5, loc="best")
      if positive:  # one y range for every panel, so growth across steps and parametrizations is comparable
        ax.set_ylim(min(positive) / 1.3, max(positive) * 1.3)
  plotting.save_figure(fig, path)


def slope_table(slope_rows, steps: int) -> str:
  """Slopes as a table: one row per (parametrization, layer), one column per step."""
  grid = {}
  for s in slope_rows:
    row = grid.setdefault((s["parametrization"], s["layer"]), {"parametrization": s["parametrization"],
                                                               "layer": s["layer"]})
    row[f"step{s['step']}"] = "-" if s["slope"] is None else f"{s['slope']:+.2f}"
  return report.table(list(grid.values()), ("parametrization", "layer", *(f"step{t}" for t in range(steps + 1))))


OUTPUTS = ("results.jsonl", "slopes.jsonl", "slopes.csv", "coord_check.png", "config.json", "timings.jsonl")
"""The files ``run`` writes into the output folder (besides run.json)."""


def group_key(row: dict[str, Any]) -> tuple[str, int]:
  """The group of a result row: (parametrization, width), one vmapped grid of seeds."""
  return row["parametrization"], row["width"]


def run(config: CoordCheckConfig, out_dir: pathlib.Path) -> list[dict[str, Any]]:
  """The study as ``experiments.coord_check`` runs it: trains, streams rows, fits slopes, plots, prints them.

  Each width's rows are appended whole to results.partial.jsonl when it is
  trained; rerun with the same options into the same folder, a killed run trains
  only the widths it has not finished. Slopes and the figure come from the complete
  rows at the end; wall times go to timings.jsonl.
  """
  dataset = transfer.prepare(config, out_dir, OUTPUTS)
  start = time.perf_counter()
  size = len(layer_names(config.family.depth)) * (config.steps + 1)
  plan = [((name, width), size) for name in config.grid.parametrizations for width in config.grid.widths]
  stream = results.GroupedRows(out_dir / "results.jsonl", plan, group_key)
  missing = stream.missing()
  if len(missing) < len(plan):
    print(f"resuming: {len(plan) - len(missing)} of {len(plan)} widths already in {out_dir}", flush=True)
  with report.Progress(len(missing), "coord_check") as progress:
    for name, width in missing:
      began = time.perf_counter()
      stream.add((name, width), coord_rows(name, width, coord_data(config, name, width, dataset)))
      results.append_timing(out_dir, {"parametrization": name, "width": width,
                                      "seconds": time.perf_counter() - began})
      progress.update(f"{name} width={width}")
  rows = stream.finish()
  slope_rows = slopes(rows)
  results.write_jsonl(out_dir / "slopes.jsonl", slope_rows)
  results.write_csv(out_dir / "slopes.csv", [{k: v for k, v in s.items() if k != "widths"} for s in slope_rows])
  write_figure(out_dir / "coord_check.png", rows, slope_rows)
  print(f"slope of log2 RMS against log2 width (widths {', '.join(map(str, config.grid.widths))}; "
        f"{config.optim.optimizer} lr={config.optim.learning_rate:g}, {config.seeds.num_seeds} seeds):")
  print(slope_table(slope_rows, config.steps))
  print(f"\n{len(rows)} rows in {time.perf_counter() - start:.1f}s; wrote results.jsonl, slopes.jsonl, "
        f"slopes.csv, coord_check.png and config.json to {out_dir}")
  return slope_rows
