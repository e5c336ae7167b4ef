"""The grid of a scaling study: the parametrizations and the points (widths, depths, batch sizes or training
lengths) that ``scaling.studies.transfer.study`` and ``scaling.studies.coord_check.study`` train, and the model family of each.

``WidthGrid`` holds the points of either axis, ``GridStudy`` is the base of the studies' configs that have one
(its ``grid`` and ``model`` options), and ``lr_grid`` lays out the members of a vmapped grid of learning rates ×
seeds. The point fields (``POINT_FIELDS``, ``ROW_KEY``) key the result rows of every such study.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Collection, Sequence

import numpy as np

from scaling.base import config as config_lib
from scaling.training.data.dataset import Dataset
from scaling.training.data.config import DataConfig
from scaling.training.model import family as model_family_lib
from scaling.training.model.family import ModelFamily
from scaling.training.model.config import ModelConfig
from scaling.training.optimizer import OptimizerConfig
from scaling.mup import schemes as param_lib
from scaling.attention import rules as rules_lib
from scaling.base.config import option
from scaling.base.config import Options
from scaling.base.validation import ConfigError


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
                                         "--rule alone.",
                                         choices=lambda: (model_family_lib.DEFAULT_RULE, *rules_lib.available_rules()))

  def __post_init__(self):
    for name in ("parametrizations", "widths", "depths", "depth_alphas", "batch_sizes", "step_counts", "rules"):
      if getattr(self, name) is not None:
        object.__setattr__(self, name, tuple(dict.fromkeys(getattr(self, name))))
    super().__post_init__()

  def validate(self):
    own = {"depth": ("depths", "depth_alphas"), "batch": ("batch_sizes",), "steps": ("step_counts",)}
    varies = {"width": ("widths", "depth"), "depth": ("depths", "width"), "batch": ("batch_sizes", "width"),
              "steps": ("step_counts", "width")}
    for axis, names in own.items():
      for name in names:
        if self.axis != axis and getattr(self, name) is not None:
          raise ConfigError(f"{name} only applies to axis={axis!r} (axis={self.axis!r} varies "
                            f"{' at '.join(varies[self.axis])})", fields=varies[self.axis])
    if self.axis == "width" and self.width is not None:
      raise ConfigError("width only applies to axis='depth', axis='batch' or axis='steps' (axis='width' varies "
                        "widths at depth)", fields=varies["width"])
    for axis, name in (("batch", "batch_sizes"), ("steps", "step_counts")):
      if self.axis == axis and getattr(self, name) is None:
        raise ConfigError(f"axis={axis!r} needs {name}", fields=(name,))
    for alpha in self.depth_alphas or ():
      try:
        param_lib.check_depth_alpha(alpha)
      except ValueError as e:
        raise ConfigError(f"depth_alphas: {e}") from None

  def check_unused(self, config: Any, given: Collection[str] | None = None) -> None:
    """ValueError if a study ``config`` on another axis than the width is given widths, or on the depth axis
    depth, or rule beside rules. ``given``: the option names typed on the command line (each counts even at
    its default); None: an option counts as given when its value differs from the study's and the option group's
    defaults (a config built in Python)."""
    model_default = default_option(config, "model")

    def typed(name: str, value: Any, *defaults: Any) -> bool:
      return name in given if given is not None else value not in defaults

    if self.rules is not None and typed("rule", config.model.rule, model_default.rule, ModelFamily().rule):
      raise ConfigError("rule does not apply with rules (each point trains every rule of rules)", fields=("rules",))
    if self.axis == "width":
      return
    if typed("widths", self.widths, default_option(config, "grid").widths, WidthGrid().widths):
      raise ConfigError(f"widths only applies to axis='width'; axis={self.axis!r} trains every point at width",
                        fields=("width",))
    if self.by_depth and typed("depth", config.model.depth, model_default.depth, ModelFamily().depth):
      raise ConfigError("depth only applies to axis='width'; axis='depth' trains the depths at width",
                        fields=("depths", "width"))

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

  def alphas(self, model: ModelFamily) -> tuple[float, ...]:
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

  def points(self, model: ModelFamily) -> list[dict[str, Any]]:
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

  def family(self, model: ModelFamily, point: dict[str, Any] | None = None) -> ModelFamily:
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

  def model_config(self, model: ModelFamily, point: dict[str, Any], dataset: Dataset
                   ) -> ModelConfig:
    """The ``ModelConfig`` of a point for ``dataset`` (its vocab size and sequence length)."""
    return self.family(model, point).model_config(point["parametrization"], point["width"],
                                                  vocab_size=dataset.vocab_size, max_len=dataset.seq_len)

  @staticmethod
  def data_config(data: DataConfig, point: dict[str, Any]) -> DataConfig:
    """The training data of a point: ``data`` with the point's batch size (on the batch axis)."""
    return dataclasses.replace(data, batch_size=point["batch_size"]) if "batch_size" in point else data

  @staticmethod
  def optim_config(opt: OptimizerConfig, point: dict[str, Any]) -> OptimizerConfig:
    """The optimizer of a point: ``opt`` with the point's number of steps (on the steps axis)."""
    return dataclasses.replace(opt, steps=point["steps"]) if "steps" in point else opt

  def check(self, model: ModelFamily, dataset: Dataset) -> None:
    """ValueError unless every point of the grid gives a valid model of ``model``'s family."""
    if self.axis == "width" and self.rules is None:
      try:
        self.family(model).check(self.parametrizations, self.widths, vocab_size=dataset.vocab_size,
                                 max_len=dataset.seq_len)
      except ValueError as e:
        raise ConfigError(f"widths: {e}", fields=getattr(e, "fields", ())) from None
      return
    for point in self.points(model):
      try:
        self.family(model).base_head_dim  # pylint: disable=expression-not-assigned
        self.model_config(model, point, dataset)
      except ValueError as e:
        name = "depth_alphas" if point.get("depth_alpha") else "widths" if self.axis == "width" else "width"
        raise ConfigError(f"{name}: {self.label(point)}: {e}", fields=getattr(e, "fields", ())) from None


def lr_grid(log2_lrs: Sequence[float], seeds: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
  """The members of a grid: (learning rates float32 [L·S], seeds int32 [L·S]); member i = (lr i // S, seed i % S)."""
  log2_lrs = np.asarray(log2_lrs, np.float64)
  seeds = np.asarray(seeds, np.int32)
  lrs = np.repeat(np.exp2(log2_lrs), len(seeds)).astype(np.float32)
  return lrs, np.tile(seeds, len(log2_lrs))


def default_option(config: Any, name: str) -> Any:
  """The default of option (or group) ``name`` of a study's config class."""
  return next(spec.default for spec in config_lib.option_specs(type(config)) if spec.name == name)


def key_columns(rows) -> tuple[str, ...]:
  """The point fields the rows carry: those of ``ROW_KEY`` present in the first row (``WIDTH_KEY`` or
  ``DEPTH_KEY`` without rules, batch sizes or steps)."""
  return tuple(name for name in ROW_KEY if rows and name in rows[0]) or WIDTH_KEY


def group_key(row: dict[str, Any]) -> tuple[Any, ...]:
  """The group of a result row: its point, e.g. (parametrization, width), (parametrization, rule, width) or
  (parametrization, α, width, depth); one vmapped grid. Rows of a steps axis need the grid's ``key``."""
  return tuple(row[name] for name in ROW_KEY if name in row)


class GridStudy(Options):
  """The base of a study's config with a ``grid`` (``WidthGrid``) and a ``model`` (``ModelFamily``) option."""

  def check_given(self, given: Collection[str]) -> None:
    """ValueError naming an option typed on the command line that this study's axis does not use."""
    self.grid.check_unused(self, given)

  @property
  def family(self) -> ModelFamily:
    """The models (of every point on the width axis), base width and depth derived (``WidthGrid.family``)."""
    return self.grid.family(self.model)
