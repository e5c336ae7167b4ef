"""μTransfer of the learning rate: a grid of learning rates × seeds per width, trained in one vmapped program.

Tensor Programs V (Yang et al. 2022, "Tuning Large Neural Networks via
Zero-Shot Hyperparameter Transfer", §1 and Fig. 1) shows that under μP the
optimal learning rate of a Transformer hardly moves as the width grows, so it
can be tuned on a small proxy model, whereas under SP it shrinks with width
(roughly ∝ 1/width for Adam). This module measures that: for each
parametrization and width it trains every (learning rate, seed) pair of a
grid and records the final training loss.

Training a grid. ``scaling.train.run_training`` trains every (learning rate, seed)
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
(``scaling.train.TrainState.attn_mult``), so one program per point serves the whole grid.

Divergence: a member whose loss is ever non-finite has diverged; its final
loss is None (reported as null, treated as +inf by ``find_optimum``), and a
learning rate at which any seed diverged has no mean loss.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import time
from typing import Any, Callable, Collection, Sequence

import numpy as np

from scaling import data as data_lib
from scaling import distributed
from scaling import model as model_lib
from scaling import optim
from scaling import parametrization as param_lib
from scaling import plotting
from scaling import report
from scaling import resources
from scaling import results
from scaling import rules as rules_lib
from scaling import train as train_lib
from scaling import config as config_lib
from scaling.config import option
from scaling.config import Options
from scaling.config import Seeds


AXES = ("width", "depth", "batch", "steps")
DEFAULT_DEPTH_WIDTH = 128
DEFAULT_DEPTHS = (2, 4, 8, 16)
# The fields that key a point of the grid (and its result rows), in order; each axis uses some of them.
WIDTH_KEY = ("parametrization", "width")
DEPTH_KEY = ("parametrization", "depth_alpha", "width", "depth")
POINT_FIELDS = ("parametrization", "rule", "depth_alpha", "width", "depth", "batch_size", "steps")
# The fields whose presence in a row tells its point ("steps" is in every transfer row, so only a grid names it).
ROW_KEY = ("parametrization", "rule", "depth_alpha", "width", "depth", "batch_size")
# The point field each axis varies.
AXIS_FIELD = {"width": "width", "depth": "depth", "batch": "batch_size", "steps": "steps"}
FIELD_NAMES = {"parametrization": "parametrization", "rule": "rule", "depth_alpha": "α", "width": "width",
               "depth": "depth", "batch_size": "batch size", "steps": "steps"}


@dataclasses.dataclass(frozen=True)
class WidthGrid(Options):
  """The parametrizations and the points a scaling study compares: widths, or depths, batch sizes or training
  lengths at one width, optionally per logit-scale rule.

  ``--axis=width`` (the default): one point per (parametrization, width), every model at ``ModelFamily.depth``.
  ``--axis=depth``: one point per (parametrization, α, depth) at the width ``--width``, with α from
  ``--depth_alphas`` (default: the model's ``--depth_alpha``) and the base depth (where depth scaling is 1)
  defaulting to the smallest depth. ``--axis=batch`` / ``--axis=steps``: one point per (parametrization, batch
  size) / (parametrization, number of steps) at ``--width`` (base width: ``--base_width``, default that width).
  ``--rules``: every point once per logit-scale rule (a ``rule`` field; otherwise the model's ``--rule`` and no
  such field). Points are dicts of the fields that key their result rows (``key_fields``).
  """

  parametrizations: tuple[str, ...] = option(("sp", "mup"), "Parametrizations to compare (panels of the figure).",
                                             choices=param_lib.available_parametrizations)
  widths: tuple[int, ...] = option((32, 64, 128, 256), "Model widths d_model (--axis=width).", lower=1)
  axis: str = option("width", "What the study varies: the width (--widths, at --depth), the depth (--depths), the "
                     "batch size (--batch_sizes) or the number of steps (--step_counts), the last three at --width.",
                     choices=AXES)
  depths: tuple[int, ...] | None = option(None, f"Depths (blocks) of --axis=depth (default "
                                          f"{','.join(map(str, DEFAULT_DEPTHS))}).", lower=1)
  width: int | None = option(None, f"The width of every model of --axis=depth, batch or steps (default "
                             f"{DEFAULT_DEPTH_WIDTH}).", lower=1)
  depth_alphas: tuple[float, ...] | None = option(None, "Depth-scaling alphas compared by --axis=depth, each 0 or in "
                                                  "[0.5, 1] (default: --depth_alpha).", lower=0.0, upper=1.0)
  batch_sizes: tuple[int, ...] | None = option(None, "Batch sizes of --axis=batch (sequences per step).", lower=1)
  step_counts: tuple[int, ...] | None = option(None, "Training lengths (optimizer steps, the schedule stretched to "
                                               "each) of --axis=steps.", lower=1)
  rules: tuple[str, ...] | None = option(None, "Logit-scale rules compared at every point (one curve each); default: "
                                         "--rule alone.", choices=lambda: (model_lib.DEFAULT_RULE, *rules_lib.available_rules()))

  def __post_init__(self):
    for name in ("parametrizations", "widths", "depths", "depth_alphas", "batch_sizes", "step_counts", "rules"):
      if getattr(self, name) is not None:
        object.__setattr__(self, name, tuple(dict.fromkeys(getattr(self, name))))
    super().__post_init__()

  def validate(self):
    own = {"depth": ("depths", "depth_alphas"), "batch": ("batch_sizes",), "steps": ("step_counts",)}
    varies = {"width": "--widths at --depth", "depth": "--depths at --width", "batch": "--batch_sizes at --width",
              "steps": "--step_counts at --width"}
    for axis, names in own.items():
      for name in names:
        if self.axis != axis and getattr(self, name) is not None:
          raise ValueError(f"--{name} only applies to --axis={axis} (--axis={self.axis} varies {varies[self.axis]})")
    if self.axis == "width" and self.width is not None:
      raise ValueError("--width only applies to --axis=depth, batch or steps (--axis=width varies --widths at --depth)")
    for axis, name in (("batch", "batch_sizes"), ("steps", "step_counts")):
      if self.axis == axis and getattr(self, name) is None:
        raise ValueError(f"--axis={axis} needs --{name}")
    for alpha in self.depth_alphas or ():
      try:
        param_lib.check_depth_alpha(alpha)
      except ValueError as e:
        raise ValueError(f"--depth_alphas: {e}") from None

  def check_unused(self, config: Any, given: Collection[str] | None = None) -> None:
    """ValueError if a study ``config`` on another axis than the width is given --widths, or on the depth axis
    --depth, or --rule beside --rules. ``given``: the option names typed on the command line (each counts even at
    its default); None: an option counts as given when its value differs from the study's and the option group's
    defaults (a config built in Python)."""
    model_default = default_option(config, "model")

    def typed(name: str, value: Any, *defaults: Any) -> bool:
      return name in given if given is not None else value not in defaults

    if self.rules is not None and typed("rule", config.model.rule, model_default.rule, model_lib.ModelFamily().rule):
      raise ValueError("--rule does not apply with --rules (each point trains every rule of --rules)")
    if self.axis == "width":
      return
    if typed("widths", self.widths, default_option(config, "grid").widths, WidthGrid().widths):
      raise ValueError(f"--widths only applies to --axis=width; --axis={self.axis} trains every point at --width")
    if self.by_depth and typed("depth", config.model.depth, model_default.depth, model_lib.ModelFamily().depth):
      raise ValueError("--depth only applies to --axis=width; --axis=depth trains the --depths at --width")

  def shown_values(self, values: dict[str, Any]) -> dict[str, Any]:
    """Option values (``resources.option_values``) as this axis uses them, to name in messages: on the depth, batch
    and steps axes --width with its default filled in (and the depth axis's --depths), and no --widths."""
    if self.axis == "width":
      return values
    values = {k: v for k, v in values.items() if k != "widths" and not (self.by_depth and k == "depth")}
    if self.by_depth:
      values["depths"] = self.depth_values
    return {**values, "width": self.depth_width}

  @property
  def by_depth(self) -> bool:
    """Whether the grid varies the depth."""
    return self.axis == "depth"

  @property
  def key_fields(self) -> tuple[str, ...]:
    """The fields of a point (and of the rows it keys), in ``POINT_FIELDS`` order."""
    return tuple(name for name in POINT_FIELDS if name in self._template())

  def _template(self) -> dict[str, Any]:
    """The fields of a point (values unused)."""
    fields = {"parametrization": None, "width": None}
    if self.rules is not None:
      fields["rule"] = None
    if self.by_depth:
      fields.update(depth_alpha=None, depth=None)
    elif self.axis != "width":
      fields[AXIS_FIELD[self.axis]] = None
    return fields

  @property
  def depth_width(self) -> int:
    """The width of the depth, batch and steps axes."""
    return DEFAULT_DEPTH_WIDTH if self.width is None else self.width

  @property
  def depth_values(self) -> tuple[int, ...]:
    """The depths of the depth axis."""
    return DEFAULT_DEPTHS if self.depths is None else self.depths

  def alphas(self, model: model_lib.ModelFamily) -> tuple[float, ...]:
    """The α values of the depth axis (``--depth_alphas``, else the model's ``--depth_alpha``)."""
    return (model.depth_alpha,) if self.depth_alphas is None else self.depth_alphas

  @property
  def x_name(self) -> str:
    """The point field the study fits and plots against: "width", "depth", "batch_size" or "steps"."""
    return AXIS_FIELD[self.axis]

  def x_values(self) -> tuple[int, ...]:
    """The values of the axis: the widths, depths, batch sizes or step counts."""
    return {"width": self.widths, "depth": self.depth_values, "batch": self.batch_sizes,
            "steps": self.step_counts}[self.axis]

  def points(self, model: model_lib.ModelFamily) -> list[dict[str, Any]]:
    """Every point of the grid, in order: parametrization, rule, then (α, depth), width, batch size or steps."""
    rules = [{}] if self.rules is None else [{"rule": r} for r in self.rules]
    out = []
    for p in self.parametrizations:
      for rule in rules:
        if self.axis == "width":
          out += [{"parametrization": p, **rule, "width": w} for w in self.widths]
        elif self.by_depth:
          out += [{"parametrization": p, **rule, "depth_alpha": float(a), "width": self.depth_width, "depth": d}
                  for a in self.alphas(model) for d in self.depth_values]
        else:
          out += [{"parametrization": p, **rule, "width": self.depth_width, self.x_name: x} for x in self.x_values()]
    return out

  def key(self, row: dict[str, Any]) -> tuple[Any, ...]:
    """The point a row belongs to, as a tuple of its ``key_fields``."""
    return tuple(row[name] for name in self.key_fields)

  def series(self, row: dict[str, Any]) -> tuple[Any, ...]:
    """The point without the axis value: the curve a row is on (e.g. (parametrization,), (parametrization, α))."""
    return tuple(row[name] for name in self.key_fields if name != self.x_name)

  @staticmethod
  def label(point: dict[str, Any]) -> str:
    """A short name of a point (or of a series), e.g. "mup α=0.5 depth=8" or "sp rule=linear width=64"."""
    parts = [str(point["parametrization"])]
    if "rule" in point:
      parts.append(f"rule={point['rule']}")
    if "depth_alpha" in point:
      parts.append(f"α={point['depth_alpha']:g}")
    parts += [f"{name}={point[name]}" for name in ("width", "depth", "batch_size", "steps") if name in point]
    return " ".join(parts)

  def family(self, model: model_lib.ModelFamily, point: dict[str, Any] | None = None) -> model_lib.ModelFamily:
    """The model family of a point (of every point on the width axis without rules): base width = the smallest
    width of the grid (the width itself on the depth, batch and steps axes, unless given), on the depth axis the
    depth and α of the point with base depth = the smallest depth (unless given), and the point's rule."""
    if self.axis == "width":
      family = model.with_base_width(self.widths)
    elif self.by_depth:
      family = model.with_base_width((self.depth_width,)).with_base_depth(self.depth_values)
      if point is not None:
        family = dataclasses.replace(family, depth=point["depth"], depth_alpha=point["depth_alpha"])
    else:
      family = model.with_base_width((self.depth_width,))
    if point is not None and "rule" in point:
      family = dataclasses.replace(family, rule=point["rule"])
    return family

  def model_config(self, model: model_lib.ModelFamily, point: dict[str, Any], dataset: data_lib.Dataset
                   ) -> model_lib.ModelConfig:
    """The ``ModelConfig`` of a point for ``dataset`` (its vocab size and sequence length)."""
    return self.family(model, point).model_config(point["parametrization"], point["width"],
                                                  vocab_size=dataset.vocab_size, max_len=dataset.seq_len)

  @staticmethod
  def data_config(data: data_lib.DataConfig, point: dict[str, Any]) -> data_lib.DataConfig:
    """The training data of a point: ``data`` with the point's batch size (on the batch axis)."""
    return dataclasses.replace(data, batch_size=point["batch_size"]) if "batch_size" in point else data

  @staticmethod
  def optim_config(opt: optim.OptimizerConfig, point: dict[str, Any]) -> optim.OptimizerConfig:
    """The optimizer of a point: ``opt`` with the point's number of steps (on the steps axis)."""
    return dataclasses.replace(opt, steps=point["steps"]) if "steps" in point else opt

  def check(self, model: model_lib.ModelFamily, dataset: data_lib.Dataset) -> None:
    """ValueError unless every point of the grid gives a valid model of ``model``'s family."""
    if self.axis == "width" and self.rules is None:
      try:
        self.family(model).check(self.parametrizations, self.widths, vocab_size=dataset.vocab_size,
                                 max_len=dataset.seq_len)
      except ValueError as e:
        raise ValueError(f"--widths: {e}") from None
      return
    for point in self.points(model):
      try:
        self.family(model).base_head_dim  # pylint: disable=expression-not-assigned
        self.model_config(model, point, dataset)
      except ValueError as e:
        flag = ("--depth_alphas" if point.get("depth_alpha") else "--widths" if self.axis == "width" else "--width")
        raise ValueError(f"{flag}: {self.label(point)}: {e}") from None


def lr_grid(log2_lrs: Sequence[float], seeds: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
  """The members of a grid: (learning rates float32 [L·S], seeds int32 [L·S]); member i = (lr i // S, seed i % S)."""
  log2_lrs = np.asarray(log2_lrs, np.float64)
  seeds = np.asarray(seeds, np.int32)
  lrs = np.repeat(np.exp2(log2_lrs), len(seeds)).astype(np.float32)
  return lrs, np.tile(seeds, len(log2_lrs))


# ----------------------------------------------------------------------------
# The transfer experiment.


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
class TransferConfig(Options):
  """A learning-rate (or attention-multiplier) sweep at several points (the options of ``experiments.transfer``)."""

  HIDDEN = ("learning_rate",)

  grid: WidthGrid = option(WidthGrid(), "Parametrizations and widths.")
  log2_lrs: tuple[float, ...] = option(tuple(float(x) for x in range(-14, -3)),
                                       "Base-2 logarithms of the learning rates tried.", lower=-125.0, upper=63.0)
  swept: SweptValue = option(SweptValue(), "The value the vmapped grid sweeps.")
  average_last: int | None = option(None, "Final loss = mean training loss of the last this many steps (default: "
                                    "steps // 10, at least 1).", lower=1)
  seeds: Seeds = option(Seeds(), "Seeds per learning rate.")
  data: data_lib.DataConfig = option(data_lib.DataConfig(), "Training data.")
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
      raise ValueError(f"--average_last={self.average_last} exceeds --steps={shortest}")
    self.grid.check_unused(self)
    if self.swept.by_attn_mult:
      if self.grid.rules is not None or self.model.rule != model_lib.DEFAULT_RULE:
        raise ValueError("--grid=attn_mult sweeps the linear rule's α; it takes no --rules or --rule")
      if "umup" in self.grid.parametrizations:
        raise ValueError("--grid=attn_mult: umup sets its attention multiplier itself; use sp, ntk or mup")

  def check_given(self, given: Collection[str]) -> None:
    """ValueError naming an option typed on the command line that this study's axis does not use."""
    self.grid.check_unused(self, given)

  @property
  def family(self) -> model_lib.ModelFamily:
    """The models (of every point on the width axis), base width and depth derived (``WidthGrid.family``)."""
    return self.grid.family(self.model)

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


def default_option(config: Any, name: str) -> Any:
  """The default of option (or group) ``name`` of a study's config class."""
  return next(spec.default for spec in config_lib.option_specs(type(config)) if spec.name == name)


def prepare(config: Any, out_dir: pathlib.Path, outputs: Sequence[str] = ()) -> data_lib.Dataset:
  """For a width study (``data``, ``seeds``, ``grid``, ``family``): the dataset, every model checked, then
  the output folder opened (``results.open_run``: resumed, or refused if made with other options, unless
  --overwrite; ``outputs`` are the study's files) and config.json written; bad input fails before anything is
  written."""
  dataset = config.data.make(config.seeds.seed)
  config.grid.check(config.model, dataset)
  shown = config.grid.shown_values(resources.option_values(config))
  resources.check(memory_estimate(config, dataset), shown)
  results.open_run(out_dir, config, overwrite=config.output.overwrite, outputs=outputs,
                   extra={"dataset": data_lib.describe(dataset)})
  results.write_json(out_dir / "config.json", {"config": dataclasses.asdict(config),
                                               "dataset": data_lib.describe(dataset)})
  return dataset


def memory_estimate(config: Any, dataset: data_lib.Dataset) -> resources.Estimate:
  """For a width or depth study: the largest program of a grid point, its ``config.members`` models vmapped."""
  members, member_flags = config.members
  grid = config.grid
  models = [(f"at {grid.label(point)}", grid.model_config(config.model, point, dataset))
            for point in grid.points(config.model)]
  batch_size = max(grid.data_config(config.data, p).batch_size for p in grid.points(config.model))
  return resources.training_estimate(models, optimizer=config.optim.optimizer, momentum=config.optim.momentum,
                                     batch_size=batch_size, seq_len=dataset.seq_len, members=members,
                                     member_flags=member_flags, data_bytes=resources.dataset_bytes(dataset))


def _or_none(x: float) -> float | None:
  """x if finite, else None."""
  return float(x) if math.isfinite(x) else None


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
    raise ValueError(f"losses have {m} members, expected {len(log2_lrs)} x {num_seeds}")
  if not 1 <= last <= steps:
    raise ValueError(f"last must be in [1, {steps}], got {last}")
  diverged = ~np.all(np.isfinite(losses), axis=0)
  final = np.where(diverged, np.nan, np.mean(losses[-last:], axis=0)).reshape(len(log2_lrs), num_seeds)
  initial = losses[0].reshape(len(log2_lrs), num_seeds)
  diverged = diverged.reshape(len(log2_lrs), num_seeds)
  rows = []
  for i, x in enumerate(log2_lrs):
    ok = not diverged[i].any()
    rows.append({
        x_name: float(x),
        **({"learning_rate": float(2.0**x)} if x_name == "log2_lr" else {}),
        "final_loss": float(np.mean(final[i])) if ok else None,
        "final_loss_std": float(np.std(final[i])) if ok else None,
        "final_loss_seeds": [_or_none(v) for v in final[i]],
        "diverged_seeds": int(diverged[i].sum()),
        "initial_loss": _or_none(float(np.nanmean(initial[i])) if np.isfinite(initial[i]).any() else float("nan")),
        "initial_loss_seeds": [_or_none(v) for v in initial[i]],
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
    ok = all(v is not None for v in seeds)
    out.append({**dict(key), "sensitivity": whole, "sensitivity_seeds": seeds,
                "sensitivity_mean": float(np.mean(seeds)) if ok else None,
                "sensitivity_std": float(np.std(seeds)) if ok else None})
  return out


def run_point(config: TransferConfig, point: dict[str, Any], dataset: Any) -> list[dict[str, Any]]:
  """Trains the whole (learning rate or attention multiplier) × seed grid of one point of ``config.grid``.

  With --grid=attn_mult every member trains at the learning rate 2^--fixed_log2_lr and member i's attention logit
  scale is α_i/d_head (``TrainState.attn_mult``, vmapped like the learning rate): one compiled step per point.

  Args:
    config: the sweep.
    point: one of ``config.grid.points(config.model)``.
    dataset: a ``scaling.data.Dataset`` (on the batch axis, the point's batch size replaces its own).

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
    dataset: a ``scaling.data.Dataset``.
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


def write_figure(path, rows, optimum_rows, *, x: str = "log2_lr", keys: Sequence[str] | None = None) -> None:
  """Final loss against the swept value (log2 learning rate), one curve per axis value (width, depth, ...); one
  panel per curve key (parametrization, rule, α), at most four per row, shared y range; a star marks each
  curve's optimum."""
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
        ax.plot([best[0][x]], [best[0]["final_loss"]], marker="*", markersize=11, color=line.get_color(),
                markeredgecolor="black", linestyle="none")
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
  ``TRANSFER_OCTAVES`` (for README.md's generated sections); with the learning-rate sensitivity (mean ± std over seeds) when the rows carry it."""
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
                 + ([_mean_std(r)] if sensitive else []))
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


def _mean_std(row: dict[str, Any]) -> str:
  """"0.123 ± 0.004" of a row's sensitivity over seeds ("–" when a seed has none)."""
  if row.get("sensitivity_mean") is None:
    return "–"
  return f"{row['sensitivity_mean']:.3f} ± {row['sensitivity_std']:.3f}"


def sensitivity_markdown(optimum_rows: Sequence[dict[str, Any]], heading: str, *,
                         keys: Sequence[str] | None = None) -> str:
  """``heading``, the learning-rate sensitivity (mean ± std over seeds) as a Markdown table with one row per curve
  (parametrization, rule, α) and one column per axis value, then per axis value the curve with the lowest mean
  sensitivity and whether the same curve is lowest at every value (for README.md's generated sections)."""
  keys = key_columns(optimum_rows) if keys is None else tuple(keys)
  x_name = _axis_field(keys)
  fields = [f for f in CURVE_FIELDS if f in keys]
  values = list(dict.fromkeys(o[x_name] for o in optimum_rows))
  table: dict[tuple[Any, ...], dict[Any, dict[str, Any]]] = {}
  for o in optimum_rows:
    table.setdefault(tuple(o[f] for f in fields), {})[o[x_name]] = o
  cells = [[_cell(v) for v in curve] + [_mean_std(by[v]) if v in by else "–" for v in values]
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
                 f"({best:.3f} ± {std:.3f}){gap}.")
  if lowest:
    same = len(set(lowest)) == 1
    lines.append(f"- The same curve is lowest at every {FIELD_NAMES[x_name]}: "
                 + (f"yes ({_panel_title(lowest[0], fields)})." if same else "no."))
  return "\n".join(lines) + "\n"


def key_columns(rows) -> tuple[str, ...]:
  """The point fields the rows carry: those of ``ROW_KEY`` present in the first row (``WIDTH_KEY`` or
  ``DEPTH_KEY`` without rules, batch sizes or steps)."""
  return tuple(name for name in ROW_KEY if rows and name in rows[0]) or WIDTH_KEY


def loss_grid_table(rows, log2_lrs, *, x: str = "log2_lr", keys: Sequence[str] | None = None) -> str:
  """Final loss per point and swept value ('div' = a seed diverged)."""
  keys = key_columns(rows) if keys is None else tuple(keys)
  grid = {}
  for r in rows:
    row = grid.setdefault(tuple(r[k] for k in keys), {k: r[k] for k in keys})
    row[f"{r[x]:g}"] = "div" if r["final_loss"] is None else f"{r['final_loss']:.3f}"
  return report.table(list(grid.values()), (*keys, *(f"{v:g}" for v in log2_lrs)))


OUTPUTS = ("results.jsonl", "optimum.jsonl", "optimum.md", "sensitivity.md", "transfer.png", "sensitivity.png",
           "config.json", "timings.jsonl")
"""The files ``run`` writes into the output folder (besides run.json); the sensitivity files with a learning-rate
grid only."""


def group_key(row: dict[str, Any]) -> tuple[Any, ...]:
  """The group of a result row: its point, e.g. (parametrization, width), (parametrization, rule, width) or
  (parametrization, α, width, depth); one vmapped grid. Rows of a steps axis need the grid's ``key``."""
  return tuple(row[name] for name in ROW_KEY if name in row)


def run_points(grid: WidthGrid, points: Sequence[dict[str, Any]], out_dir: pathlib.Path, rows_per_point: int,
               compute: Callable[[dict[str, Any]], list[dict[str, Any]]], title: str, *,
               describe: Callable[[list[dict[str, Any]]], str] | None = None) -> list[dict[str, Any]]:
  """Computes the rows of every point of a grid into ``out_dir/results.jsonl``, resuming what a killed run left.

  Each point's rows are one group of ``results.GroupedRows`` (appended whole when computed); a rerun computes only
  the points not yet written. Wall times go to timings.jsonl; progress shows each point (and ``describe(rows)``).

  Args:
    grid: the grid (its ``key`` and ``label`` of a point).
    points: the points, in the order of the final file.
    out_dir: the output folder.
    rows_per_point: how many rows ``compute`` returns per point.
    compute: the rows of one point.
    title: the progress bar's title.
    describe: optional words on a finished point's rows.

  Returns:
    Every point's rows, in point order.
  """
  plan = [(grid.key(point), rows_per_point) for point in points]
  stream = results.GroupedRows(out_dir / "results.jsonl", plan, grid.key)
  missing = set(stream.missing())
  todo = [point for point in points if grid.key(point) in missing]
  if len(todo) < len(plan):
    print(f"resuming: {len(plan) - len(todo)} of {len(plan)} {grid.axis}s already in {out_dir}", flush=True)
  with report.Progress(len(todo), title) as progress:
    for point in todo:
      began = time.perf_counter()
      rows = stream.add(grid.key(point), compute(point))
      results.append_timing(out_dir, {**point, "seconds": time.perf_counter() - began})
      progress.update(grid.label(point) + (f": {describe(rows)}" if describe else ""))
  return stream.finish()


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
      if r.get("final_loss") is not None and (r["width"] not in best or r["final_loss"] < best[r["width"]]["final_loss"]):
        best[r["width"]] = r
    for w in sorted(best):
      r = best[w]
      seeds = [s for s in r["final_loss_seeds"] if s is not None]
      table.append([label, w, _cell(r["log2_lr"]), f"{np.mean(seeds):.3f} ± {np.std(seeds):.3f}",
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
