"""μTransfer of the learning rate: a grid of learning rates × seeds per width, trained in one vmapped program.

Tensor Programs V (Yang et al. 2022, "Tuning Large Neural Networks via
Zero-Shot Hyperparameter Transfer", §1 and Fig. 1) shows that under μP the
optimal learning rate of a Transformer hardly moves as the width grows, so it
can be tuned on a small proxy model, whereas under SP it shrinks with width
(roughly ∝ 1/width for Adam). This module measures that: for each
parametrization and width it trains every (learning rate, seed) pair of a
grid and records the final training loss.

Training a grid. ``scaling.training.train.run_training`` trains every (learning rate, seed)
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
(``scaling.training.train.TrainState.attn_mult``), so one program per point serves the whole grid.

Any model (``transfer(model, loss_fn, batches, schemes=("sp", "mup"), widths=...)``, ``scaling.transfer``): a
factory of the width made each scheme at each width by ``scaling.WidthParametrization``; each width's learning-rate ×
seed grid trained by the same ``scaling.training.train.run_training`` (a ``scaling.training.train.FunctionalProgram``), one program per
width, resumable in ``out_dir``; the optimum per width, its spread, the sensitivity, figure and tables as for the
built-in model.

The study's parts: the grid of points (``scaling.studies.grid.points``), running it (``scaling.studies.grid.run``),
the optimum and sensitivity analysis of the measured curves (``scaling.studies.grid.optimum``) and the figures and
tables (``scaling.studies.transfer.report``); this module holds the study's options and ``run``, and keeps the
public names of those parts importable from here.

Divergence: a member whose loss is ever non-finite has diverged; its final
loss is None (reported as null, treated as +inf by ``find_optimum``), and a
learning rate at which any seed diverged has no mean loss.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import time
from typing import Any, Callable, Sequence

import numpy as np

from scaling.training import data as data_lib
from scaling.runs import distributed
from scaling.training import model as model_lib
from scaling.mup import optim
from scaling.runs import report
from scaling.runs import results
from scaling.training import train as train_lib
from scaling.mup import user_model
from scaling.mup import width_family
from scaling.base.config import option
from scaling.base.config import Options
from scaling.base.config import Seeds
# The public names of the study's parts, importable from here.
from scaling.studies.grid.points import AXES  # pylint: disable=unused-import
from scaling.studies.grid.points import AXIS_FIELD  # pylint: disable=unused-import
from scaling.studies.grid.points import DEFAULT_DEPTH_WIDTH  # pylint: disable=unused-import
from scaling.studies.grid.points import DEFAULT_DEPTHS  # pylint: disable=unused-import
from scaling.studies.grid.points import DEPTH_KEY  # pylint: disable=unused-import
from scaling.studies.grid.points import FIELD_NAMES
from scaling.studies.grid.points import GridStudy
from scaling.studies.grid.points import POINT_FIELDS  # pylint: disable=unused-import
from scaling.studies.grid.points import ROW_KEY  # pylint: disable=unused-import
from scaling.studies.grid.points import WIDTH_KEY  # pylint: disable=unused-import
from scaling.studies.grid.points import WidthGrid
from scaling.studies.grid.points import default_option  # pylint: disable=unused-import
from scaling.studies.grid.points import group_key  # pylint: disable=unused-import
from scaling.studies.grid.points import key_columns  # pylint: disable=unused-import
from scaling.studies.grid.points import lr_grid
from scaling.studies.grid.run import memory_estimate  # pylint: disable=unused-import
from scaling.studies.grid import run as grid_run
from scaling.studies.grid.run import prepare
from scaling.studies.grid.run import run_points
from scaling.studies.grid.optimum import find_optimum
from scaling.studies.grid.optimum import lr_sensitivity  # pylint: disable=unused-import
from scaling.studies.grid.optimum import optimum_log2_lr  # pylint: disable=unused-import
from scaling.studies.grid.optimum import parabola_vertex  # pylint: disable=unused-import
from scaling.studies.grid.optimum import sensitivity_rows
from scaling.studies.grid.optimum import spread  # pylint: disable=unused-import
from scaling.studies.grid.optimum import summarize_grid
from scaling.studies.transfer.report import CURVE_FIELDS  # pylint: disable=unused-import
from scaling.studies.transfer.report import TRANSFER_OCTAVES  # pylint: disable=unused-import
from scaling.studies.transfer.report import X_LABELS  # pylint: disable=unused-import
from scaling.studies.transfer.report import loss_grid_table
from scaling.studies.transfer.report import optimum_markdown
from scaling.studies.transfer.report import sensitivity_markdown
from scaling.studies.transfer.report import width_comparison_markdown  # pylint: disable=unused-import
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
  data: data_lib.DataConfig = option(data_lib.DataConfig(seq_len=32, batch_size=8), "Training data.")
  model: model_lib.ModelFamily = option(model_lib.ModelFamily(), "The models.")
  optim: optim.OptimizerConfig = option(optim.OptimizerConfig(steps=200, schedule="cosine", end_factor=0.1),
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
      if self.grid.rules is not None or self.model.rule != model_lib.DEFAULT_RULE:
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
    dataset: a ``scaling.training.data.Dataset`` (on the batch axis, the point's batch size replaces its own).

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
    result = train_lib.run_training(model_config, opt, dataset, seed=seeds, learning_rates=lrs, attn_mults=values,
                                    record=("loss",), stop_on_divergence=False)
    extra = {"log2_lr": config.swept.fixed_log2_lr}
  else:
    result = train_lib.run_training(model_config, opt, dataset, seed=seeds, learning_rates=values,
                                    record=("loss",), stop_on_divergence=False)
    extra = {}
  rows = summarize_grid(result.records["loss"], config.x_values, config.seeds.num_seeds, last, x_name=config.x_field)
  return [{**point, **r, **extra, "steps": opt.steps, "average_last": last} for r in rows]


def run_transfer(config: TransferConfig, dataset: Any, *,
                 on_point: Callable[[dict[str, Any], list[dict[str, Any]]], None] | None = None
                 ) -> list[dict[str, Any]]:
  """The sweep at every point of the grid (e.g. parametrization and width, or α and depth).

  Args:
    config: the sweep.
    dataset: a ``scaling.training.data.Dataset``.
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


# ----- The learning-rate transfer of any model (a factory of the width): one call. -----

KEYS = ("parametrization", "width")


@dataclasses.dataclass(frozen=True)
class TransferResult:
  """What ``transfer`` measured (combine several, e.g. SP and μP, with ``combine``).

  Attributes:
    rows: one per (parametrization, width, learning rate): ``scaling.studies.grid.optimum.summarize_grid``'s fields
      (final_loss mean over seeds, None when a seed diverged; final_loss_seeds; initial_loss ...), steps,
      average_last.
    optimum: one per (parametrization, width): ``find_optimum``'s fields (log2_lr, log2_lr_interp, final_loss,
      at_edge, num_diverged) and the learning-rate sensitivity (``sensitivity_rows``).
    log2_lrs: the learning rates tried (base-2 logarithms).
    steps: training steps per run.
    num_seeds: seeds per learning rate.
  """

  rows: list[dict[str, Any]]
  optimum: list[dict[str, Any]]
  log2_lrs: tuple[float, ...]
  steps: int
  num_seeds: int

  def moved(self, parametrization: str | None = None) -> float | None:
    """How far the optimal log2 learning rate moves over the widths (max − min, octaves; None if one diverged)."""
    names = {o["parametrization"] for o in self.optimum}
    if parametrization is None and len(names) != 1:
      raise ConfigError(f"name one parametrization of {sorted(names)}")
    return spread([optimum_log2_lr(o) for o in self.optimum
                               if parametrization in (None, o["parametrization"])])

  def transfers(self, parametrization: str | None = None) -> bool:
    """Whether the optimum moves at most ``TRANSFER_OCTAVES`` over the widths."""
    moved = self.moved(parametrization)
    return moved is not None and moved <= TRANSFER_OCTAVES

  def optimum_markdown(self, heading: str) -> str:
    """``heading``, the optimum per width as a Markdown table and per parametrization how far it moves."""
    return optimum_markdown(self.optimum, heading, keys=KEYS)

  def loss_table(self) -> str:
    """Final loss per (parametrization, width) and learning rate as plain text ('div' = a seed diverged)."""
    return loss_grid_table(self.rows, self.log2_lrs, keys=KEYS)

  def write_figure(self, path: str | pathlib.Path) -> None:
    """Final loss against log2 learning rate, one curve per width, one panel per parametrization."""
    write_figure(path, self.rows, self.optimum, keys=KEYS)


def combine(*results: TransferResult) -> TransferResult:
  """Several results (e.g. SP and μP of one model, on the same grid) as one."""
  if not results:
    raise ConfigError("combine needs at least one TransferResult")
  if len({(r.log2_lrs, r.steps, r.num_seeds) for r in results}) != 1:
    raise ConfigError("results must share the learning rates, steps and seeds")
  first = results[0]
  return TransferResult([row for r in results for row in r.rows], [o for r in results for o in r.optimum],
                        first.log2_lrs, first.steps, first.num_seeds)


def transfer(model: user_model.ModelFactory, loss_fn: user_model.LossFn, batches: Any,
             optimizer: user_model.OptimizerFactory | None = None, *, schemes: Sequence[Any] = ("sp", "mup"),
             widths: Sequence[int] = (64, 128, 256, 512), base_width: int | None = None,
             log2_lrs: Sequence[float] = tuple(float(x) for x in range(-12, -3)), steps: int = 200,
             seeds: Sequence[int] = (0,), init: str | user_model.InitFn | None = None, name: str = "model",
             average_last: int | None = None, progress: bool = True, out_dir: str | pathlib.Path | None = None,
             **options: Any) -> TransferResult:
  """The learning-rate × width (× seed) grid of any model under each scheme; one vmapped program per width.

  Tensor Programs V (Yang et al. 2022), §1 and Fig. 1. One call infers the roles, parametrizes each width under
  each scheme (``scaling.WidthParametrization``) and trains every grid, each width's (learning rate, seed) members
  vmapped in one program by ``scaling.training.train.run_training`` (as the built-in model's grids)::

    result = scaling.transfer(model, loss_fn, batches, schemes=("sp", "mup"), widths=(64, 128, 256, 512))

  With an ``optimizer`` factory instead, the model is trained as given under it (one run named ``name``; ``init``
  may then be an ``init(width, params, key)`` function).

  Args:
    model: ``model(width) -> flax.linen.Module | scaling.PureModel`` or ``model(width, rngs) -> flax.nnx.Module``.
    loss_fn: ``loss_fn(model, batch) -> scalar``.
    batches: a function ``batches(step) -> batch``, an iterator of batches, or one fixed batch.
    optimizer: None (each scheme's optimizer), or ``optimizer(width, params, learning_rate) ->
      optax.GradientTransformation`` (``learning_rate`` is traced: one program serves every learning rate).
    schemes: parametrizations compared (names, ``Parametrization`` objects or ``WidthParametrization`` s).
    widths: the widths (at least two).
    base_width: the schemes' base width (default: the smallest width).
    log2_lrs: base-2 logarithms of the learning rates tried.
    steps: training steps per run.
    seeds: initialization seeds per learning rate.
    init: "base" (None), "paper" or "rescale"; with ``optimizer``, an optional ``init(width, params, key)`` function.
    name: the run's name with ``optimizer``.
    average_last: final loss = mean training loss of the last this many steps (default steps // 10, at least 1).
    progress: show progress (``scaling.runs.report.Progress``) on stderr.
    out_dir: optional folder: each (scheme, width)'s rows are appended to ``results.jsonl`` when its grid is
      trained, and a rerun with the same options into it trains only what a killed run had not finished.
    **options: further options of ``scaling.WidthParametrization`` (overrides, tied_embedding, forward, the
      optimizer name as ``optimizer_name`` and its options).

  Returns:
    A ``TransferResult`` of every scheme.
  """
  widths = user_model.check_widths(widths)
  if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
    raise ConfigError(f"steps must be a positive int, got {steps!r}")
  log2_lrs = tuple(dict.fromkeys(float(x) for x in log2_lrs))
  if not log2_lrs or not all(math.isfinite(x) and -125 <= x <= 63 for x in log2_lrs):
    raise ConfigError(f"log2_lrs must be finite base-2 logarithms in [-125, 63], got {log2_lrs!r}")
  seeds = [int(s) for s in seeds]
  if not seeds:
    raise ConfigError("seeds must hold at least one seed")
  last = max(1, steps // 10) if average_last is None else average_last
  if isinstance(last, bool) or not isinstance(last, int) or not 1 <= last <= steps:
    raise ConfigError(f"average_last must be an int in [1, steps={steps}], got {average_last!r}")
  batches = user_model.Batches.of(batches, steps)
  runs = width_family.runs(model, loss_fn, batches.example, optimizer=optimizer, init=init, name=name,
                                    schemes=schemes, widths=widths, base_width=base_width, **options)
  rows = _train_grids(runs, widths, log2_lrs, seeds, steps, last, batches, progress, out_dir)
  optimum = find_optimum(rows, keys=KEYS)
  for o, sens in zip(optimum, sensitivity_rows(rows, KEYS)):
    o.update({k: v for k, v in sens.items() if k not in KEYS})
  return TransferResult(rows, optimum, log2_lrs, steps, len(seeds))


def heading(result: TransferResult, data: str, optimizer: str, widths: Sequence[int] | None = None) -> str:
  """The heading of a result's optimum table: what was trained, on what, and the final-loss definition."""
  widths = widths or sorted({o["width"] for o in result.optimum})
  lrs = result.log2_lrs
  last = result.rows[0]["average_last"] if result.rows else 1
  return (f"Optimal log2 lr per width (widths {', '.join(map(str, widths))}; {len(lrs)} learning rates "
          f"2^{lrs[0]:g} .. 2^{lrs[-1]:g}, {result.num_seeds} seeds, {result.steps} {optimizer} steps on {data}; "
          f"final loss = mean training loss of the last {last} steps):")

def _train_grids(runs: Sequence[width_family.Run], widths: Sequence[int], log2_lrs: tuple[float, ...],
                 seeds: Sequence[int], steps: int, last: int, batches: user_model.Batches, progress: bool,
                 out_dir: str | pathlib.Path | None) -> list[dict[str, Any]]:
  """The ``summarize_grid`` rows of every (name, model_at(width), optimizer factory) run at every width."""
  by_name = {run.name: (run.model_at, run.optimizer) for run in runs}
  if len(by_name) != len(runs):
    raise ConfigError(f"the schemes must have distinct names, got {[run.name for run in runs]}")
  lrs, member_seeds = lr_grid(log2_lrs, seeds)
  opt = optim.OptimizerConfig(steps=steps)

  def compute(point):
    model_at, optimizer = by_name[point["parametrization"]]
    program = train_lib.FunctionalProgram(model_at(point["width"]), optimizer)
    result = train_lib.run_training(program, opt, batches, seed=member_seeds, learning_rates=lrs, record=("loss",),
                                    stop_on_divergence=False)
    rows = summarize_grid(result.records["loss"], log2_lrs, len(seeds), last)
    return [{**point, **r, "steps": steps, "average_last": last} for r in rows]

  def describe(rows):
    best = find_optimum(rows, keys=())[0]
    return ("all diverged" if best["log2_lr"] is None else
            f"best log2 lr {best['log2_lr']:g}, loss {best['final_loss']:.3f}")

  points = [{"parametrization": run.name, "width": w} for run in runs for w in widths]
  return grid_run.run_rows(points, compute, "transfer", out_dir=out_dir, progress=progress, describe=describe,
                           count=lambda point: len(log2_lrs),
                           options={"study": "transfer", "schemes": list(by_name), "widths": list(widths),
                                    "log2_lrs": list(log2_lrs), "seeds": list(seeds), "steps": steps,
                                    "average_last": last})
