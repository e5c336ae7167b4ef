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
forward pass that the training step differentiates (``scaling.training.model.transformer`` returns
the RMS values in its aux output and ``scaling.training.loop.transformer_step.train_step`` passes them
on): the embedding output (input of the first block), each block's attention
logits (after the logit scale, visible entries only), attention-branch output
and MLP-branch output (before the residual add), and the readout logits.
Step t is measured at the parameters after t updates, so steps 0..k need
k + 1 training steps. Seeds are trained together as one vmapped grid
(``scaling.training.loop.run.run_training``: one compilation per parametrization and width), and
the growth with width is
summarized by the least-squares slope of log2(RMS) against log2(width)
(``scaling.studies.coord_check.slopes.fit_slope``): ≈ 0 means width-independent, 0.5 means ∝ √width, 1 means
∝ width.

The models of a check form a ``scaling.training.model.family.ModelFamily``: fixed depth,
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

The layers measured: ``scaling.studies.coord_check.layers``; the rows, slopes, tables and figure:
``scaling.studies.coord_check.slopes``; the coordinate check of any model: ``scaling.studies.coord_check.any_model``.
"""

from __future__ import annotations

import dataclasses
import pathlib
import time
from typing import Any, Callable

from scaling.training.data.config import DataConfig
from scaling.training.model.family import ModelFamily
from scaling.training.optimizer import OptimizerConfig
from scaling.runs import run_lock
from scaling.runs import distributed
from scaling.runs import results
from scaling.training.loop import run as loop_lib
from scaling.base.config import option
from scaling.base.config import Seeds
from scaling.studies.grid import run as grid_run
from scaling.studies.grid.points import GridStudy
from scaling.studies.grid.points import WidthGrid
from scaling.studies.coord_check.layers import DEPTH_LAYERS
from scaling.studies.coord_check.layers import DEPTH_METRICS
from scaling.studies.coord_check.layers import RMS_METRICS
from scaling.studies.coord_check.layers import depth_rms_by_layer
from scaling.studies.coord_check.layers import layer_names
from scaling.studies.coord_check.layers import rms_by_layer
from scaling.studies.coord_check.slopes import coord_rows
from scaling.studies.coord_check.slopes import slope_markdown
from scaling.studies.coord_check.slopes import slope_table
from scaling.studies.coord_check.slopes import slopes
from scaling.studies.coord_check.slopes import write_figure
from scaling.base.validation import ConfigError


@dataclasses.dataclass(frozen=True)
class CoordCheckConfig(GridStudy):
  """What to train and measure (the options of ``experiments.coord_check``).

  ``optim.steps`` is k: RMS is recorded at steps 0..k (k updates).
  """

  grid: WidthGrid = option(WidthGrid(widths=(64, 128, 256, 512, 1024)), "Parametrizations and widths.")
  fixed_batch: bool = option(True, "Train every step on the same batch (as mup's fix_data); false: a new batch each "
                             "step.")
  seeds: Seeds = option(Seeds(), "Seeds averaged (vmapped).")
  data: DataConfig = option(DataConfig(seq_len=32, batch_size=8), "Training data.")
  model: ModelFamily = option(ModelFamily(), "The models.")
  optim: OptimizerConfig = option(OptimizerConfig(steps=4, learning_rate=1e-2),
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

  The seeds are one vmapped grid (``scaling.training.loop.run.run_training``) with the same learning rate.

  Args:
    config: the coordinate check.
    point: one of ``config.grid.points(config.model)``: {parametrization, width} or, on the depth axis,
      {parametrization, depth_alpha, width, depth}.
    dataset: a ``scaling.training.data.dataset.Dataset`` (its vocab_size and seq_len set the model's).

  Returns:
    {"rms": {layer: float64 [k + 1, num_seeds]} over ``config.layers``, "loss": [k + 1, num_seeds]}.
  """
  model_config = config.grid.model_config(config.model, point, dataset)
  opt = dataclasses.replace(config.optim, steps=config.steps + 1)
  by_depth = config.grid.by_depth
  result = loop_lib.run_training(model_config, opt, dataset, loop_lib.Runs(seed=config.seeds.seeds),
                                 loop_lib.RunOptions(record=("loss", *(DEPTH_METRICS if by_depth else RMS_METRICS)),
                                                     fixed_batch=config.fixed_batch, stop_on_divergence=False))
  if by_depth:
    rms = depth_rms_by_layer(result.records, model_config.parametrization.residual_multiplier())
  else:
    rms = rms_by_layer(result.records, model_config.depth)
  return {"rms": rms, "loss": result.records["loss"]}


def run_coord_check(config: CoordCheckConfig, dataset: Any, *,
                    on_point: Callable[[dict[str, Any], list[dict[str, Any]]], None] | None = None
                    ) -> list[dict[str, Any]]:
  """The coordinate check of every point of the grid (parametrization and width, or α and depth).

  Args:
    config: what to train.
    dataset: a ``scaling.training.data.dataset.Dataset``.
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


OUTPUTS = ("results.jsonl", "slopes.jsonl", "slopes.csv", "slopes.md", "coord_check.png", "config.json",
           "timings.jsonl")
"""The files ``run`` writes into the output folder (besides run.json)."""


@run_lock.held_while_running
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
