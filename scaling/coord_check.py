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
(``scaling.transfer.train_grid``: one compilation per parametrization and
width), and the growth with width is
summarized by the least-squares slope of log2(RMS) against log2(width)
(``fit_slope``): ≈ 0 means width-independent, 0.5 means ∝ √width, 1 means
∝ width.

The models of a check form a ``scaling.transfer.WidthFamily``: fixed depth,
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
from typing import Any, Callable, Sequence

import numpy as np

from scaling import optim
from scaling import transfer

# Metric name of train_step -> (layer name template, per-block).
_RMS_METRICS = (
    ("embed_rms", "embed", False),
    ("attn_logits_rms", "block_{i}/attn_logits", True),
    ("attn_out_rms", "block_{i}/attn_out", True),
    ("mlp_out_rms", "block_{i}/mlp_out", True),
    ("readout_rms", "readout", False),
)
RMS_METRICS = tuple(name for name, _, _ in _RMS_METRICS)


def layer_names(depth: int) -> tuple[str, ...]:
  """The measured layers in forward order: embed, block_i/{attn_logits,attn_out,mlp_out}, readout."""
  names = ["embed"]
  for i in range(depth):
    names += [template.format(i=i) for _, template, per_block in _RMS_METRICS if per_block]
  return tuple(names) + ("readout",)


def rms_by_layer(metrics: dict[str, Any], depth: int) -> dict[str, np.ndarray]:
  """Layer name -> RMS values from ``train_step`` metrics (any leading axes; per-block ones end in [depth])."""
  out = {}
  for name, template, per_block in _RMS_METRICS:
    value = np.asarray(metrics[name])
    if per_block:
      for i in range(depth):
        out[template.format(i=i)] = value[..., i]
    else:
      out[template] = value
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
class CoordCheckConfig:
  """What to train and measure.

  Attributes:
    parametrizations: schemes to compare (``scaling.available_parametrizations``).
    widths: model widths D.
    steps: k; RMS is recorded at steps 0..k (k updates).
    family: the models (``scaling.transfer.WidthFamily``); its base_width
      defaults to min(widths).
    learning_rate: the global learning rate (per-layer multipliers come from
      the parametrization).
    optimizer: "adam", "adamw" or "sgd".
    num_seeds: seeds averaged (trained together under vmap).
    seed: the first seed; seed i initializes with ``PRNGKey(seed + i)`` and
      draws its data with ``dataset.batch(·, seed + i)``.
    fixed_batch: train every step on the same batch (``mup``'s default
      ``fix_data=True``), else on batch t at step t.
  """

  parametrizations: tuple[str, ...] = ("sp", "mup")
  widths: tuple[int, ...] = (64, 128, 256, 512, 1024)
  steps: int = 4
  family: transfer.WidthFamily = transfer.WidthFamily()
  learning_rate: float = 1e-2
  optimizer: str = "adam"
  num_seeds: int = 2
  seed: int = 0
  fixed_batch: bool = True

  def __post_init__(self):
    object.__setattr__(self, "parametrizations", transfer.check_parametrizations(self.parametrizations))
    object.__setattr__(self, "widths", transfer.check_widths(self.widths))
    object.__setattr__(self, "family", self.family.with_base_width(self.widths))
    transfer.check_positive_int("steps", self.steps)
    transfer.check_positive_int("num_seeds", self.num_seeds)
    transfer.check_finite("learning_rate", self.learning_rate, positive=True)
    if self.optimizer not in optim.OPTIMIZERS:
      raise ValueError(f"unknown optimizer {self.optimizer!r}; expected one of {', '.join(optim.OPTIMIZERS)}")
    transfer.check_seed(self.seed, self.num_seeds)


def coord_data(config: CoordCheckConfig, parametrization: str, width: int, dataset: Any) -> dict[str, Any]:
  """Trains ``config.num_seeds`` models of one width for ``config.steps`` steps and records RMS per layer.

  The seeds are one vmapped grid (``scaling.transfer.train_grid``) with the
  same learning rate.

  Args:
    config: the coordinate check.
    parametrization: one scheme name.
    width: D.
    dataset: a ``scaling.data.Dataset`` (its vocab_size and seq_len set the model's).

  Returns:
    {"rms": {layer: float64 [steps + 1, num_seeds]}, "loss": [steps + 1, num_seeds]}.
  """
  model_config = config.family.model_config(parametrization, width, vocab_size=dataset.vocab_size,
                                            max_len=dataset.seq_len)
  seeds = np.arange(config.seed, config.seed + config.num_seeds, dtype=np.int32)
  lrs = np.full(seeds.shape, config.learning_rate, np.float32)
  metrics = transfer.train_grid(model_config, transfer.OptimizerSpec(config.optimizer), dataset, lrs, seeds,
                                config.steps + 1, fixed_batch=config.fixed_batch)
  return {"rms": rms_by_layer(metrics, model_config.depth), "loss": metrics["loss"]}


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
  for name in config.parametrizations:
    for width in config.widths:
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
