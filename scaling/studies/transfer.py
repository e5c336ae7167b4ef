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

from scaling import data as data_lib
from scaling import distributed
from scaling import model as model_lib
from scaling import optim
from scaling import parametrization as param_lib
from scaling import plotting
from scaling import report
from scaling import resources
from scaling import results
from scaling import train as train_lib
from scaling import config as config_lib
from scaling.config import option
from scaling.config import Options
from scaling.config import Seeds

OPTIMUM_COLUMNS = ("parametrization", "width", "log2_lr", "final_loss", "log2_lr_interp", "at_edge", "num_diverged")


AXES = ("width", "depth")
DEFAULT_DEPTH_WIDTH = 128
DEFAULT_DEPTHS = (2, 4, 8, 16)
# The fields that key a point of the grid (and its result rows), in order; the width axis uses the first two only.
WIDTH_KEY = ("parametrization", "width")
DEPTH_KEY = ("parametrization", "depth_alpha", "width", "depth")


@dataclasses.dataclass(frozen=True)
class WidthGrid(Options):
  """The parametrizations and the points a scaling study compares: widths, or depths at one width.

  ``--axis=width`` (the default): one point per (parametrization, width), every model at ``ModelFamily.depth``.
  ``--axis=depth``: one point per (parametrization, α, depth) at the width ``--width``, with α from
  ``--depth_alphas`` (default: the model's ``--depth_alpha``) and the base depth (where depth scaling is 1)
  defaulting to the smallest depth. Points are dicts of the fields that key their result rows
  (``WIDTH_KEY`` or ``DEPTH_KEY``).
  """

  parametrizations: tuple[str, ...] = option(("sp", "mup"), "Parametrizations to compare (panels of the figure).",
                                             choices=param_lib.available_parametrizations)
  widths: tuple[int, ...] = option((32, 64, 128, 256), "Model widths d_model (--axis=width).", lower=1)
  axis: str = option("width", "What the study varies: the width (--widths, at --depth) or the depth (--depths, at "
                     "--width).", choices=AXES)
  depths: tuple[int, ...] | None = option(None, f"Depths (blocks) of --axis=depth (default "
                                          f"{','.join(map(str, DEFAULT_DEPTHS))}).", lower=1)
  width: int | None = option(None, f"The width of every model of --axis=depth (default {DEFAULT_DEPTH_WIDTH}).",
                             lower=1)
  depth_alphas: tuple[float, ...] | None = option(None, "Depth-scaling alphas compared by --axis=depth, each 0 or in "
                                                  "[0.5, 1] (default: --depth_alpha).", lower=0.0, upper=1.0)

  def __post_init__(self):
    for name in ("parametrizations", "widths", "depths", "depth_alphas"):
      if getattr(self, name) is not None:
        object.__setattr__(self, name, tuple(dict.fromkeys(getattr(self, name))))
    super().__post_init__()

  def validate(self):
    if self.axis == "width":
      for name in ("depths", "width", "depth_alphas"):
        if getattr(self, name) is not None:
          raise ValueError(f"--{name} only applies to --axis=depth (--axis=width varies --widths at --depth)")
    for alpha in self.depth_alphas or ():
      try:
        param_lib.check_depth_alpha(alpha)
      except ValueError as e:
        raise ValueError(f"--depth_alphas: {e}") from None

  def check_unused(self, config: Any) -> None:
    """ValueError if a study ``config`` with --axis=depth is given --widths or --depth (values other than the
    study's defaults or the option groups' own): the depth axis trains --depths at --width."""
    if not self.by_depth:
      return
    default = default_option(config, "grid")
    if self.widths not in (default.widths, WidthGrid().widths):
      raise ValueError("--widths only applies to --axis=width; --axis=depth trains every depth at --width")
    if config.model.depth not in (default_option(config, "model").depth, model_lib.ModelFamily().depth):
      raise ValueError("--depth only applies to --axis=width; --axis=depth trains the --depths at --width")

  def shown_values(self, values: dict[str, Any]) -> dict[str, Any]:
    """Option values (``resources.option_values``) as this axis uses them, to name in messages: on the depth axis
    --depths and --width with their defaults filled in, and neither --widths nor --depth."""
    if not self.by_depth:
      return values
    values = {k: v for k, v in values.items() if k not in ("widths", "depth")}
    return {**values, "depths": self.depth_values, "width": self.depth_width}

  @property
  def by_depth(self) -> bool:
    """Whether the grid varies the depth."""
    return self.axis == "depth"

  @property
  def key_fields(self) -> tuple[str, ...]:
    """The fields of a point (and of the rows it keys)."""
    return DEPTH_KEY if self.by_depth else WIDTH_KEY

  @property
  def depth_width(self) -> int:
    """The width of the depth axis."""
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
    """The field the study fits and plots against: "width" or "depth"."""
    return self.axis

  def x_values(self) -> tuple[int, ...]:
    """The values of the axis: the widths or the depths."""
    return self.depth_values if self.by_depth else self.widths

  def points(self, model: model_lib.ModelFamily) -> list[dict[str, Any]]:
    """Every point of the grid, in order: parametrization, then (α, depth) or width."""
    if not self.by_depth:
      return [{"parametrization": p, "width": w} for p in self.parametrizations for w in self.widths]
    return [{"parametrization": p, "depth_alpha": float(a), "width": self.depth_width, "depth": d}
            for p in self.parametrizations for a in self.alphas(model) for d in self.depth_values]

  def key(self, row: dict[str, Any]) -> tuple[Any, ...]:
    """The point a row belongs to, as a tuple of its ``key_fields``."""
    return tuple(row[name] for name in self.key_fields)

  def series(self, row: dict[str, Any]) -> tuple[Any, ...]:
    """The point without the axis value: the curve a row is on ((parametrization,) or (parametrization, α))."""
    return (row["parametrization"], row["depth_alpha"]) if self.by_depth else (row["parametrization"],)

  @staticmethod
  def label(point: dict[str, Any]) -> str:
    """A short name of a point (or of a series), e.g. "mup α=0.5 depth=8"."""
    parts = [str(point["parametrization"])]
    if "depth_alpha" in point:
      parts.append(f"α={point['depth_alpha']:g}")
    parts += [f"{name}={point[name]}" for name in ("width", "depth") if name in point]
    return " ".join(parts)

  def family(self, model: model_lib.ModelFamily, point: dict[str, Any] | None = None) -> model_lib.ModelFamily:
    """The model family of a point (of every point on the width axis): base width = the smallest width of the
    grid and, on the depth axis, depth and α of the point with base depth = the smallest depth (unless given)."""
    if not self.by_depth:
      return model.with_base_width(self.widths)
    family = model.with_base_width((self.depth_width,)).with_base_depth(self.depth_values)
    if point is None:
      return family
    return dataclasses.replace(family, depth=point["depth"], depth_alpha=point["depth_alpha"])

  def model_config(self, model: model_lib.ModelFamily, point: dict[str, Any], dataset: data_lib.Dataset
                   ) -> model_lib.ModelConfig:
    """The ``ModelConfig`` of a point for ``dataset`` (its vocab size and sequence length)."""
    return self.family(model, point).model_config(point["parametrization"], point["width"],
                                                  vocab_size=dataset.vocab_size, max_len=dataset.seq_len)

  def check(self, model: model_lib.ModelFamily, dataset: data_lib.Dataset) -> None:
    """ValueError unless every point of the grid gives a valid model of ``model``'s family."""
    if not self.by_depth:
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
        flag = "--depth_alphas" if point["depth_alpha"] else "--width"
        raise ValueError(f"{flag}: {self.label(point)}: {e}") from None


def lr_grid(log2_lrs: Sequence[float], seeds: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
  """The members of a grid: (learning rates float32 [L·S], seeds int32 [L·S]); member i = (lr i // S, seed i % S)."""
  log2_lrs = np.asarray(log2_lrs, np.float64)
  seeds = np.asarray(seeds, np.int32)
  lrs = np.repeat(np.exp2(log2_lrs), len(seeds)).astype(np.float32)
  return lrs, np.tile(seeds, len(log2_lrs))


# ----------------------------------------------------------------------------
# The transfer experiment.


@dataclasses.dataclass(frozen=True)
class TransferConfig(Options):
  """A learning-rate sweep at several widths (the options of ``experiments.transfer``)."""

  HIDDEN = ("learning_rate",)

  grid: WidthGrid = option(WidthGrid(), "Parametrizations and widths.")
  log2_lrs: tuple[float, ...] = option(tuple(float(x) for x in range(-14, -3)),
                                       "Base-2 logarithms of the learning rates tried.", lower=-125.0, upper=63.0)
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
    if self.average_last is not None and self.average_last > self.optim.steps:
      raise ValueError(f"--average_last={self.average_last} exceeds --steps={self.optim.steps}")
    self.grid.check_unused(self)

  @property
  def family(self) -> model_lib.ModelFamily:
    """The models (of every point on the width axis), base width and depth derived (``WidthGrid.family``)."""
    return self.grid.family(self.model)

  @property
  def members(self) -> tuple[int, tuple[str, ...]]:
    """(models vmapped per width, the options that set it): learning rates x seeds."""
    return len(self.log2_lrs) * self.seeds.num_seeds, ("log2_lrs", "num_seeds")

  @property
  def last(self) -> int:
    """The number of final steps averaged."""
    return self.average_last if self.average_last is not None else max(1, self.optim.steps // 10)


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
  return resources.training_estimate(models, optimizer=config.optim.optimizer, momentum=config.optim.momentum,
                                     batch_size=dataset.batch_size, seq_len=dataset.seq_len, members=members,
                                     member_flags=member_flags, data_bytes=resources.dataset_bytes(dataset))


def _or_none(x: float) -> float | None:
  """x if finite, else None."""
  return float(x) if math.isfinite(x) else None


def summarize_grid(losses: np.ndarray, log2_lrs: Sequence[float], num_seeds: int, last: int) -> list[dict[str, Any]]:
  """Final losses of a grid from its loss history.

  Args:
    losses: [steps, L·S] training losses, member i = (lr i // S, seed i % S).
    log2_lrs: the L log2 learning rates.
    num_seeds: S.
    last: the final loss of a member is the mean of its last ``last`` losses.

  Returns:
    One row per learning rate: log2_lr, learning_rate, final_loss (mean over
    seeds; None if any seed diverged), final_loss_std, final_loss_seeds (None
    for a diverged seed), diverged_seeds (count), initial_loss (mean step-0 loss).
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
        "log2_lr": float(x),
        "learning_rate": float(2.0**x),
        "final_loss": float(np.mean(final[i])) if ok else None,
        "final_loss_std": float(np.std(final[i])) if ok else None,
        "final_loss_seeds": [_or_none(v) for v in final[i]],
        "diverged_seeds": int(diverged[i].sum()),
        "initial_loss": _or_none(float(np.nanmean(initial[i])) if np.isfinite(initial[i]).any() else float("nan")),
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


def find_optimum(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
  """The best learning rate of each grid point: (parametrization, width), or (parametrization, α, width, depth).

  Args:
    rows: rows with parametrization, width, log2_lr and final_loss (None or
      non-finite = diverged = +inf), and depth_alpha and depth where the
      points differ in them (rows are grouped by those of ``DEPTH_KEY`` present).

  Returns:
    One row per point, in order of first appearance: the point's fields,
    ``log2_lr`` (the grid argmin; None if every run diverged), ``final_loss``
    there, ``at_edge`` (the argmin is the smallest or largest learning rate
    tried, so the optimum may lie outside the grid), ``log2_lr_interp`` (vertex
    of the parabola through the argmin and its two neighbours in log2 LR, when
    both are finite and the parabola opens upwards; else None) and
    ``num_diverged`` (learning rates with a diverged seed).
  """
  groups: dict[tuple[tuple[str, Any], ...], list[tuple[float, float]]] = {}
  for r in rows:
    loss = r["final_loss"]
    loss = float("inf") if loss is None or not math.isfinite(loss) else float(loss)
    key = tuple((name, r[name]) for name in DEPTH_KEY if name in r)
    groups.setdefault(key, []).append((float(r["log2_lr"]), loss))
  out = []
  for key, points in groups.items():
    points.sort()
    xs = [x for x, _ in points]
    ys = [y for _, y in points]
    best = int(np.argmin(ys))
    row = {**dict(key), "log2_lr": None, "final_loss": None, "at_edge": None,
           "log2_lr_interp": None, "num_diverged": sum(not math.isfinite(y) for y in ys)}
    if math.isfinite(ys[best]):
      row.update(log2_lr=xs[best], final_loss=ys[best], at_edge=best in (0, len(xs) - 1))
      if 0 < best < len(xs) - 1 and all(math.isfinite(v) for v in ys[best - 1:best + 2]):
        row["log2_lr_interp"] = parabola_vertex(xs[best - 1:best + 2], ys[best - 1:best + 2])
    out.append(row)
  return out


def run_point(config: TransferConfig, point: dict[str, Any], dataset: Any) -> list[dict[str, Any]]:
  """Trains the whole learning-rate × seed grid of one point of ``config.grid`` and summarizes it.

  Args:
    config: the sweep.
    point: one of ``config.grid.points(config.model)``.
    dataset: a ``scaling.data.Dataset``.

  Returns:
    ``summarize_grid`` rows with the point's fields and steps added.
  """
  model_config = config.grid.model_config(config.model, point, dataset)
  lrs, seeds = lr_grid(config.log2_lrs, config.seeds.seeds)
  result = train_lib.run_training(model_config, config.optim, dataset, seed=seeds, learning_rates=lrs, record=("loss",),
                           stop_on_divergence=False)
  rows = summarize_grid(result.records["loss"], config.log2_lrs, config.seeds.num_seeds, config.last)
  return [{**point, **r, "steps": config.optim.steps,
           "average_last": config.last} for r in rows]


def run_transfer(config: TransferConfig, dataset: Any, *,
                 on_point: Callable[[dict[str, Any], list[dict[str, Any]]], None] | None = None
                 ) -> list[dict[str, Any]]:
  """The learning-rate sweep at every point of the grid (parametrization and width, or α and depth).

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


def write_figure(path, rows, optimum_rows) -> None:
  """Final loss against log2 learning rate, one curve per width (or per depth when the rows have a depth); one
  panel per parametrization (and α), side by side, shared y range; a star marks each curve's optimum."""
  x_name = "depth" if rows and "depth" in rows[0] else "width"
  panel = lambda r: (r["parametrization"], r["depth_alpha"]) if x_name == "depth" else (r["parametrization"],)
  panels = list(dict.fromkeys(panel(r) for r in rows))
  fig, axes = plotting.grid_figure(1, len(panels), width=4.6, height=3.6)
  ylim = _y_range(rows)
  for j, key in enumerate(panels):
    ax = axes[0][j]
    series, stars = {}, []
    for x in dict.fromkeys(r[x_name] for r in rows if panel(r) == key):
      points = sorted((r["log2_lr"], r["final_loss"]) for r in rows
                      if panel(r) == key and r[x_name] == x and r["final_loss"] is not None)
      if points:
        series[f"{x_name} {x}"] = ([lr for lr, _ in points], [y for _, y in points])
        stars.append([o for o in optimum_rows if panel(o) == key and o[x_name] == x])
    title = key[0] if len(key) == 1 else f"{key[0]}, α={key[1]:g}"
    plotting.line_plot(None, series, xlabel="log2 learning rate", ylabel="final training loss" if j == 0 else "",
                       title=title, ax=ax)
    for line, best in zip(ax.get_lines(), stars):
      if best and best[0]["log2_lr"] is not None:
        ax.plot([best[0]["log2_lr"]], [best[0]["final_loss"]], marker="*", markersize=11, color=line.get_color(),
                markeredgecolor="black", linestyle="none")
    if ylim is not None:
      ax.set_ylim(*ylim)
  plotting.save_figure(fig, path)


def optimum_log2_lr(row: dict[str, Any]) -> float | None:
  """The optimal log2 learning rate of a ``find_optimum`` row: the parabola vertex when there is one, else the grid
  argmin (None when every learning rate diverged)."""
  if row.get("log2_lr_interp") is not None:
    return float(row["log2_lr_interp"])
  return None if row.get("log2_lr") is None else float(row["log2_lr"])


def spread(values: Sequence[float | None]) -> float | None:
  """max − min of the values (None when any is None)."""
  if not values or any(v is None for v in values):
    return None
  return float(max(values) - min(values))


def optimum_markdown(optimum_rows: Sequence[dict[str, Any]], heading: str) -> str:
  """``heading``, the optimum of every point as a Markdown table, and per curve (parametrization[, α]) the spread
  (max − min) of its optimal log2 learning rate over the axis, in octaves (for README.md's generated sections)."""
  keys = key_columns(optimum_rows)
  names = {"parametrization": "parametrization", "depth_alpha": "α", "width": "width", "depth": "depth"}
  columns = [names[k] for k in keys] + ["best log2 lr (grid)", "optimum (parabola)", "final loss", "at grid edge"]
  fmt = lambda v, spec: "–" if v is None else format(v, spec)
  cells, curves = [], {}
  for r in optimum_rows:
    cells.append([f"{r[k]:g}" if isinstance(r[k], float) else r[k] for k in keys]
                 + [fmt(r["log2_lr"], "g"), fmt(r["log2_lr_interp"], ".2f"), fmt(r["final_loss"], ".3f"),
                    "–" if r["at_edge"] is None else ("yes" if r["at_edge"] else "no")])
    curve = tuple(r[k] for k in keys if k in ("parametrization", "depth_alpha"))
    curves.setdefault(curve, []).append(optimum_log2_lr(r))
  lines = [heading, "", report.markdown_table(columns, cells)]
  for curve, optima in curves.items():
    moved = spread(optima)
    label = " ".join([str(curve[0])] + [f"α={a:g}" for a in curve[1:]])
    amount = "n/a (every learning rate diverged at a point)" if moved is None else f"{moved:.2f} octaves"
    lines.append(f"- {label}: the optimum moves {amount} (max − min of the optimal log2 learning rate).")
  return "\n".join(lines) + "\n"


def key_columns(rows) -> tuple[str, ...]:
  """The point fields the rows carry: ``WIDTH_KEY`` or ``DEPTH_KEY``."""
  return DEPTH_KEY if rows and "depth" in rows[0] else WIDTH_KEY


def loss_grid_table(rows, log2_lrs) -> str:
  """Final loss per point and learning rate ('div' = a seed diverged)."""
  keys = key_columns(rows)
  grid = {}
  for r in rows:
    row = grid.setdefault(tuple(r[k] for k in keys), {k: r[k] for k in keys})
    row[f"{r['log2_lr']:g}"] = "div" if r["final_loss"] is None else f"{r['final_loss']:.3f}"
  return report.table(list(grid.values()), (*keys, *(f"{x:g}" for x in log2_lrs)))


OUTPUTS = ("results.jsonl", "optimum.jsonl", "optimum.md", "transfer.png", "config.json", "timings.jsonl")
"""The files ``run`` writes into the output folder (besides run.json)."""


def group_key(row: dict[str, Any]) -> tuple[Any, ...]:
  """The group of a result row: its point, (parametrization, width) or (parametrization, α, width, depth); one
  vmapped learning-rate x seed grid."""
  return tuple(row[name] for name in DEPTH_KEY if name in row)


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
  stream = results.GroupedRows(out_dir / "results.jsonl", plan, group_key)
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

  Each point's rows (a width, or an (α, depth) with --axis=depth) are appended whole to
  results.partial.jsonl when its grid is trained; rerun with the same options into the same folder, a killed
  run trains only the points it has not finished. optimum.jsonl and the figure are made from the complete rows
  at the end; wall times go to timings.jsonl.
  """
  dataset = prepare(config, out_dir, OUTPUTS)
  grid = config.grid
  points = grid.points(config.model)
  members = len(config.log2_lrs) * config.seeds.num_seeds
  if grid.by_depth:
    where = (f"{len(grid.alphas(config.model))} depth alphas x {len(grid.depth_values)} depths at width "
             f"{grid.depth_width}; each depth")
  else:
    where = f"{len(grid.widths)} widths; each width"
  print(f"{len(grid.parametrizations)} parametrizations x {where} trains {len(config.log2_lrs)} learning rates x "
        f"{config.seeds.num_seeds} seeds = {members} runs vmapped, {config.optim.steps} steps", flush=True)
  start = time.perf_counter()
  def found(rows):
    best = find_optimum(rows)[0]
    return ("all diverged" if best["log2_lr"] is None
            else f"best log2 lr {best['log2_lr']:g}, loss {best['final_loss']:.3f}")

  rows = run_points(grid, points, out_dir, len(config.log2_lrs), lambda point: run_point(config, point, dataset),
                    "transfer", describe=found)
  optimum_rows = find_optimum(rows)
  results.write_jsonl(out_dir / "optimum.jsonl", optimum_rows)
  at = f" at width {grid.depth_width}" if grid.by_depth else ""
  heading = (f"Optimal learning rate per {grid.axis} ({grid.axis}s {', '.join(map(str, grid.x_values()))}{at}; "
             f"{len(config.log2_lrs)} learning rates 2^{config.log2_lrs[0]:g} .. 2^{config.log2_lrs[-1]:g}, "
             f"{config.seeds.num_seeds} seeds, {config.optim.steps} {config.optim.schedule} {config.optim.optimizer} "
             f"steps on {dataset.name}; final loss = mean training loss of the last {config.last} steps):")
  results.write_text(out_dir / "optimum.md", optimum_markdown(optimum_rows, heading))
  write_figure(out_dir / "transfer.png", rows, optimum_rows)
  print(f"final training loss (mean of the last {config.last} steps, mean over {config.seeds.num_seeds} seeds):")
  print(loss_grid_table(rows, config.log2_lrs))
  print(f"\noptimal learning rate per {grid.axis}:")
  print(report.table(optimum_rows, (*key_columns(rows), *OPTIMUM_COLUMNS[2:]), floatfmt=".3f"))
  print(f"\n{len(rows)} rows in {time.perf_counter() - start:.1f}s; wrote results.jsonl, optimum.jsonl, "
        f"optimum.md, transfer.png and config.json to {out_dir}")
  return optimum_rows
