"""μTransfer of the learning rate: a grid of learning rates × seeds per width, trained in one vmapped program.

Tensor Programs V (Yang et al. 2022, "Tuning Large Neural Networks via
Zero-Shot Hyperparameter Transfer", §1 and Fig. 1) shows that under μP the
optimal learning rate of a Transformer hardly moves as the width grows, so it
can be tuned on a small proxy model, whereas under SP it shrinks with width
(roughly ∝ 1/width for Adam). This module measures that: for each
parametrization and width it trains every (learning rate, seed) pair of a
grid and records the final training loss.

Training a grid. ``scaling.training.loop.run.run_training`` trains every (learning rate, seed)
member of a width in one vmapped program (the learning rate lives in the
optimizer state), so each width compiles one init and one step whatever the
size of the grid. Member i = (learning rate i // S, seed i % S) is initialized
with ``PRNGKey(seed)`` and trained on ``dataset.batch(t, seed)`` at step t,
exactly as a single run would be; all learning rates share the same seeds
(common random numbers), so differences between learning rates are not
sampling noise of the data or init.

Depth (``--axis=depth``): the same grid at one width and several depths, for
each α of ``--depth_alphas`` (CompleteP, Dey et al. 2025: with α = 1/2 or 1 the
optimal learning rate is meant to stay put as the depth grows); ``WidthGrid``
holds the points of either axis and the model family of each point.

Batch size and training length (``--axis=batch`` / ``--axis=steps``): the same grid at one width for every
batch size or number of steps. Rules (``--rules``): every point once per logit-scale rule, a curve each.

Learning-rate sensitivity (Wortsman et al. 2023, "Small-scale proxies for large-scale Transformer training
instabilities", §3.1): per point, the mean over the grid's log learning rates of min(loss(η), initial loss) − the
best loss, diverged runs at the initial loss (``lr_sensitivity``), per seed and for the seed-mean curve
(``sensitivity_rows``).

Attention multiplier (``--grid=attn_mult``): the vmapped grid sweeps the α of the logit scale α/d_head at one
learning rate instead of the learning rate; α is a traced member of the train state
(``scaling.training.loop.state.TrainState.attn_mult``), so one program per point serves the whole grid.

The study's parts: the grid of points (``scaling.studies.grid.points``), running it (``scaling.studies.grid.run``),
the optimum and sensitivity analysis of the measured curves (``scaling.studies.grid.optimum``) and the figures and
tables (``scaling.studies.transfer.report``); this module holds the study's options and ``run``, and
``scaling.studies.transfer.any_model`` the transfer of any model.

Divergence: a member whose loss is ever non-finite has diverged; its final
loss is None (reported as null, treated as +inf by ``find_optimum``), and a
learning rate at which any seed diverged has no mean loss.
"""

from __future__ import annotations

import dataclasses
import pathlib
import time
from typing import Any, Callable

import numpy as np

from scaling.training.data.config import DataConfig
from scaling.runs import run_lock
from scaling.runs import distributed
from scaling.training.model.family import ModelFamily
from scaling.training.model import family as model_family_lib
from scaling.training.optimizer import OptimizerConfig
from scaling.runs import report
from scaling.runs import results
from scaling.training.loop import run as loop_lib
from scaling.base.config import option
from scaling.base.config import Options
from scaling.base.config import Seeds
from scaling.studies.grid.points import FIELD_NAMES
from scaling.studies.grid.points import GridStudy
from scaling.studies.grid.points import WidthGrid
from scaling.studies.grid.points import lr_grid
from scaling.studies.grid.run import prepare
from scaling.studies.grid.run import run_points
from scaling.studies.grid.optimum import find_optimum
from scaling.studies.grid.optimum import sensitivity_rows
from scaling.studies.grid.optimum import summarize_grid
from scaling.studies.transfer.report import loss_grid_table
from scaling.studies.transfer.report import optimum_markdown
from scaling.studies.transfer.report import sensitivity_markdown
from scaling.studies.transfer.report import write_figure
from scaling.studies.transfer.report import write_sensitivity_figure
from scaling.base.validation import ConfigError


GRIDS = ("lr", "attn_mult")


@dataclasses.dataclass(frozen=True)
class SweptValue(Options):
  """What the vmapped grid of each point sweeps: the learning rate, or the attention logit multiplier."""

  grid: str = option("lr", "The value the vmapped grid of each point sweeps: the learning rate (--log2_lrs), or "
                     "the multiplier α of the linear rule's logit scale α/d_head (--log2_attn_mults) at the learning "
                     "rate 2^--fixed_log2_lr.", choices=GRIDS)
  log2_attn_mults: tuple[float, ...] = option(tuple(float(x) for x in range(-2, 7)), "Base-2 logarithms of the "
                                              "attention multipliers α tried by --grid=attn_mult.", lower=-30.0,
                                              upper=30.0)
  fixed_log2_lr: float = option(-6.0, "Base-2 logarithm of the learning rate of --grid=attn_mult.", lower=-125.0,
                                upper=63.0)

  def __post_init__(self):
    object.__setattr__(self, "log2_attn_mults", tuple(dict.fromkeys(float(x) for x in self.log2_attn_mults)))
    super().__post_init__()

  @property
  def by_attn_mult(self) -> bool:
    """Whether the grid sweeps the attention multiplier."""
    return self.grid == "attn_mult"


@dataclasses.dataclass(frozen=True)
class TransferConfig(GridStudy):
  """A learning-rate (or attention-multiplier) sweep at several points (the options of ``experiments.transfer``)."""

  HIDDEN = ("learning_rate",)

  grid: WidthGrid = option(WidthGrid(), "Parametrizations and widths.")
  log2_lrs: tuple[float, ...] = option(tuple(float(x) for x in range(-11, -3)),
                                       "Base-2 logarithms of the learning rates tried.", lower=-125.0, upper=63.0)
  swept: SweptValue = option(SweptValue(), "The value the vmapped grid sweeps.")
  average_last: int | None = option(None, "Final loss = mean training loss of the last this many steps (default: "
                                    "steps // 10, at least 1).", lower=1)
  seeds: Seeds = option(Seeds(), "Seeds per learning rate.")
  # docs/transfer.md's setting (8 learning rates, batch 8 x 32): minutes on 2 CPU cores, every optimum interior.
  data: DataConfig = option(DataConfig(seq_len=32, batch_size=8), "Training data.")
  model: ModelFamily = option(ModelFamily(), "The models.")
  optim: OptimizerConfig = option(OptimizerConfig(steps=200, schedule="cosine", end_factor=0.1),
                                        "Optimizer and schedule.")
  output: results.OutputConfig = option(results.OutputConfig("runs/transfer"), "Output.")
  cluster: distributed.DistributedConfig = option(distributed.DistributedConfig(), "Several processes.")

  def __post_init__(self):
    object.__setattr__(self, "log2_lrs", tuple(dict.fromkeys(float(x) for x in self.log2_lrs)))
    super().__post_init__()

  def validate(self):
    shortest = min(self.grid.step_counts) if self.grid.axis == "steps" else self.optim.steps
    if self.average_last is not None and self.average_last > shortest:
      raise ConfigError(f"average_last={self.average_last} exceeds steps={shortest}")
    self.grid.check_unused(self)
    if self.swept.by_attn_mult:
      if self.grid.rules is not None or self.model.rule != model_family_lib.DEFAULT_RULE:
        raise ConfigError("grid='attn_mult' sweeps the α of the linear logit scale; it takes no rules or rule",
                          fields=("rules", "rule"))
      if "umup" in self.grid.parametrizations:
        raise ConfigError("grid='attn_mult': umup sets its attention multiplier itself; use sp, ntk or mup")

  @property
  def x_field(self) -> str:
    """The field of a row that the vmapped grid sweeps: "log2_lr" or "log2_attn_mult"."""
    return "log2_attn_mult" if self.swept.by_attn_mult else "log2_lr"

  @property
  def x_values(self) -> tuple[float, ...]:
    """The swept values (log2 learning rates or log2 attention multipliers)."""
    return self.swept.log2_attn_mults if self.swept.by_attn_mult else self.log2_lrs

  @property
  def members(self) -> tuple[int, tuple[str, ...]]:
    """(models vmapped per point, the options that set it): swept values x seeds."""
    flag = "log2_attn_mults" if self.swept.by_attn_mult else "log2_lrs"
    return len(self.x_values) * self.seeds.num_seeds, (flag, "num_seeds")

  @property
  def last(self) -> int:
    """The number of final steps averaged (at --steps)."""
    return self.last_of(self.optim.steps)

  def last_of(self, steps: int) -> int:
    """The number of final steps averaged in a run of ``steps`` steps."""
    return self.average_last if self.average_last is not None else max(1, steps // 10)


def run_point(config: TransferConfig, point: dict[str, Any], dataset: Any) -> list[dict[str, Any]]:
  """Trains the whole (learning rate or attention multiplier) × seed grid of one point of ``config.grid``.

  With --grid=attn_mult every member trains at the learning rate 2^--fixed_log2_lr and member i's attention logit
  scale is α_i/d_head (``TrainState.attn_mult``, vmapped like the learning rate): one compiled step per point.

  Args:
    config: the sweep.
    point: one of ``config.grid.points(config.model)``.
    dataset: a ``scaling.training.data.dataset.Dataset`` (on the batch axis, the point's batch size replaces its own).

  Returns:
    ``summarize_grid`` rows with the point's fields, steps and average_last added (and, with --grid=attn_mult,
    log2_lr).
  """
  grid = config.grid
  if "batch_size" in point:
    dataset = grid.data_config(config.data, point).make(config.seeds.seed)
  opt = grid.optim_config(config.optim, point)
  last = config.last_of(opt.steps)
  model_config = grid.model_config(config.model, point, dataset)
  values, seeds = lr_grid(config.x_values, config.seeds.seeds)
  if config.swept.by_attn_mult:
    lrs = np.full(values.shape, 2.0**config.swept.fixed_log2_lr, np.float32)
    result = loop_lib.run_training(model_config, opt, dataset,
                                   loop_lib.Runs(seed=seeds, learning_rates=lrs, attn_mults=values),
                                   loop_lib.RunOptions(record=("loss",), stop_on_divergence=False))
    extra = {"log2_lr": config.swept.fixed_log2_lr}
  else:
    result = loop_lib.run_training(model_config, opt, dataset, loop_lib.Runs(seed=seeds, learning_rates=values),
                                   loop_lib.RunOptions(record=("loss",), stop_on_divergence=False))
    extra = {}
  rows = summarize_grid(result.records["loss"], config.x_values, config.seeds.num_seeds, last, x_name=config.x_field)
  return [{**point, **r, **extra, "steps": opt.steps, "average_last": last} for r in rows]


def run_transfer(config: TransferConfig, dataset: Any, *,
                 on_point: Callable[[dict[str, Any], list[dict[str, Any]]], None] | None = None
                 ) -> list[dict[str, Any]]:
  """The sweep at every point of the grid (e.g. parametrization and width, or α and depth).

  Args:
    config: the sweep.
    dataset: a ``scaling.training.data.dataset.Dataset``.
    on_point: called as ``on_point(point, rows)`` when a point is done (to
      append results as they come).

  Returns:
    All ``run_point`` rows.
  """
  rows = []
  for point in config.grid.points(config.model):
    new = run_point(config, point, dataset)
    rows += new
    if on_point is not None:
      on_point(point, new)
  return rows


OUTPUTS = ("results.jsonl", "optimum.jsonl", "optimum.md", "sensitivity.md", "transfer.png", "sensitivity.png",
           "config.json", "timings.jsonl")
"""The files ``run`` writes into the output folder (besides run.json); the sensitivity files with a learning-rate
grid only."""


@run_lock.held_while_running
def run(config: TransferConfig, out_dir: pathlib.Path) -> list[dict[str, Any]]:
  """The study as ``experiments.transfer`` runs it: trains, streams results, plots and prints; returns the optima.

  Each point's rows (a width, an (α, depth), a batch size or a number of steps, per rule with --rules) are
  appended whole to results.partial.jsonl when its grid is trained; rerun with the same options into the same
  folder, a killed run trains only the points it has not finished. optimum.jsonl (with the learning-rate
  sensitivity per point on a learning-rate grid), optimum.md, sensitivity.md and the figures are made from the
  complete rows at the end; wall times go to timings.jsonl.
  """
  dataset = prepare(config, out_dir, OUTPUTS)
  grid = config.grid
  points = grid.points(config.model)
  keys = grid.key_fields
  x = config.x_field
  members = len(config.x_values) * config.seeds.num_seeds
  rules = f" x {len(grid.rules)} rules" if grid.rules else ""
  if grid.by_depth:
    where = (f"{len(grid.alphas(config.model))} depth alphas x {len(grid.depth_values)} depths at width "
             f"{grid.depth_width}; each depth")
  elif grid.axis == "width":
    where = f"{len(grid.widths)} widths; each width"
  else:
    where = f"{len(grid.x_values())} {FIELD_NAMES[grid.x_name]}s at width {grid.depth_width}; each"
  swept = (f"{len(config.x_values)} attention multipliers at learning rate 2^{config.swept.fixed_log2_lr:g}"
           if config.swept.by_attn_mult else f"{len(config.x_values)} learning rates")
  steps = (f"{', '.join(map(str, grid.step_counts))} steps" if grid.axis == "steps"
           else f"{config.optim.steps} steps")
  print(f"{len(grid.parametrizations)} parametrizations{rules} x {where} trains {swept} x "
        f"{config.seeds.num_seeds} seeds = {members} runs vmapped, {steps}", flush=True)
  start = time.perf_counter()
  what = "log2 α" if config.swept.by_attn_mult else "log2 lr"

  def found(rows):
    best = find_optimum(rows, x=x, keys=keys)[0]
    return ("all diverged" if best[x] is None else f"best {what} {best[x]:g}, loss {best['final_loss']:.3f}")

  rows = run_points(grid, points, out_dir, len(config.x_values), lambda point: run_point(config, point, dataset),
                    "transfer", describe=found)
  optimum_rows = find_optimum(rows, x=x, keys=keys)
  if not config.swept.by_attn_mult:
    for o, sens in zip(optimum_rows, sensitivity_rows(rows, keys)):
      o.update({k: v for k, v in sens.items() if k not in keys})
  results.write_jsonl(out_dir / "optimum.jsonl", optimum_rows)
  at = f" at width {grid.depth_width}" if grid.axis != "width" else ""
  xs = ", ".join(map(str, grid.x_values()))
  rule_text = f", rules {', '.join(grid.rules)}" if grid.rules else ""
  if "umup" in grid.parametrizations:
    rule_text += f", u-μP op scales {config.model.umup_scales}"
  if config.swept.by_attn_mult:
    sweep_text = (f"{len(config.x_values)} attention multipliers α = 2^{config.x_values[0]:g} .. "
                  f"2^{config.x_values[-1]:g} of the logit scale α/d_head at learning rate "
                  f"2^{config.swept.fixed_log2_lr:g}")
  else:
    sweep_text = f"{len(config.x_values)} learning rates 2^{config.x_values[0]:g} .. 2^{config.x_values[-1]:g}"
  steps_text = (f"{steps}" if grid.axis == "steps" else f"{config.optim.steps}")
  if config.average_last is None and grid.axis == "steps":
    last_text = "the last tenth of the steps"
  else:
    last_text = f"the last {config.last} steps"
  heading = (f"Optimal {what} per {FIELD_NAMES[grid.x_name]} ({FIELD_NAMES[grid.x_name]}s {xs}{at}{rule_text}; "
             f"{sweep_text}, {config.seeds.num_seeds} seeds, {steps_text.replace(' steps', '')} "
             f"{config.optim.schedule} {config.optim.optimizer} steps on {dataset.name}, batch "
             f"{dataset.batch_size if grid.axis != 'batch' else 'per point'}; final loss = mean training loss of "
             f"{last_text}):")
  results.write_text(out_dir / "optimum.md", optimum_markdown(optimum_rows, heading, x=x, keys=keys))
  write_figure(out_dir / "transfer.png", rows, optimum_rows, x=x, keys=keys)
  written = ["results.jsonl", "optimum.jsonl", "optimum.md", "transfer.png"]
  if not config.swept.by_attn_mult:
    sens_heading = (f"Learning-rate sensitivity (Wortsman et al. 2023: mean over the {len(config.x_values)} "
                    f"learning rates 2^{config.x_values[0]:g} .. 2^{config.x_values[-1]:g} of min(final loss, "
                    f"initial loss) − best final loss; a diverged run counts at the initial loss) per "
                    f"{FIELD_NAMES[grid.x_name]}{at}{rule_text}; mean ± std over {config.seeds.num_seeds} seeds "
                    f"of the per-seed sensitivity; {steps_text.replace(' steps', '')} {config.optim.schedule} "
                    f"{config.optim.optimizer} steps on {dataset.name}:")
    results.write_text(out_dir / "sensitivity.md", sensitivity_markdown(optimum_rows, sens_heading, keys=keys))
    write_sensitivity_figure(out_dir / "sensitivity.png", optimum_rows, keys=keys)
    written += ["sensitivity.md", "sensitivity.png"]
  print(f"final training loss (mean of the last steps, mean over {config.seeds.num_seeds} seeds):")
  print(loss_grid_table(rows, config.x_values, x=x, keys=keys))
  print(f"\noptimal {'attention multiplier' if config.swept.by_attn_mult else 'learning rate'} per "
        f"{FIELD_NAMES[grid.x_name]}:")
  columns = (*keys, x, "final_loss", f"{x}_interp", "at_edge", "num_diverged")
  if not config.swept.by_attn_mult:
    columns += ("sensitivity_mean", "sensitivity_std")
  print(report.table(optimum_rows, columns, floatfmt=".3f"))
  print(f"\n{len(rows)} rows in {time.perf_counter() - start:.1f}s; wrote {', '.join(written)} and config.json to "
        f"{out_dir}")
  return optimum_rows
