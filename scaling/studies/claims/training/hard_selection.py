"""Training claim about the attention early in training (note 1 §3 (b)): without the scale, the attention degenerates
into "hard selection" in the first steps, one key taking nearly all of a query's weight.

It reads the grids of the gradient claims (``nan_and_gradient.depth_grids``: unscaled and 1/√d_k at every depth),
which record at every step, before its update, each block's mean largest attention probability (``attn_max_prob``:
the mean over heads and visible query rows of max_s p_ts, ``scaling.attention.metrics.attention_layer_metrics``), so
no model is trained for it alone.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from scaling.studies import stats
from scaling.studies.grid.run import GridRun
from scaling.studies.claims.context import Context
from scaling.studies.claims.training.best_learning_rate import best_rate
from scaling.studies.claims.training.best_learning_rate import values_at_best
from scaling.studies.claims.training.grids import trained
from scaling.studies.claims.training.nan_and_gradient import depth_grids
from scaling.studies.claims.training.numbers import about
from scaling.studies.claims.training.numbers import fmt
from scaling.studies.claims.training.numbers import lr_label
from scaling.studies.claims.training.numbers import spread
from scaling.studies.claims.training.sizes import data_name
from scaling.studies.claims.training.sizes import depths_of
from scaling.studies.claims.training.sizes import sizes
from scaling.studies.claims.verdicts import Claim
from scaling.studies.claims.verdicts import Criterion
from scaling.studies.claims.verdicts import Measurement
from scaling.studies.claims.verdicts import Reading

EARLY_FRACTION = 0.1
"""The first steps read as "early in training": this fraction of the steps (rounded up), step 0 included."""


def early_steps(steps: int, fraction: float = EARLY_FRACTION) -> int:
  """The number of first steps read as early training: ⌈fraction × steps⌉, at least 1.

  Args:
    steps: the steps trained (>= 1).
    fraction: the fraction of them (in (0, 1]).

  Returns:
    An int in 1 .. steps.
  """
  if int(steps) < 1 or not 0.0 < float(fraction) <= 1.0:
    raise ValueError(f"steps must be >= 1 and fraction in (0, 1]; got {steps} and {fraction}")
  return max(1, min(int(steps), math.ceil(float(fraction) * int(steps) - 1e-9)))


def uniform_max_prob(seq_len: int) -> float:
  """The mean largest probability of uniform causal attention over ``seq_len`` query rows: query t sees t + 1 keys,
  each with weight 1/(t + 1), so the mean is H_T / T (H_T the T-th harmonic number).

  Args:
    seq_len: T >= 1.

  Returns:
    The mean over rows of 1/(t + 1).
  """
  if int(seq_len) < 1:
    raise ValueError(f"seq_len must be >= 1, got {seq_len}")
  return float(np.mean(1.0 / np.arange(1, int(seq_len) + 1)))


def early_max_prob(max_prob: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
  """Per run, the mean largest attention probability at step 0 and over the first ``window`` steps.

  Args:
    max_prob: [steps, M, depth] the recorded ``attn_max_prob`` (each block's mean over heads and visible rows).
    window: the first steps averaged (1 .. steps).

  Returns:
    (at step 0 [M], over steps 0 .. window − 1 [M]), each averaged over the blocks.
  """
  max_prob = np.asarray(max_prob, np.float64)
  if max_prob.ndim != 3 or not 1 <= int(window) <= max_prob.shape[0]:
    raise ValueError(f"max_prob must be [steps, M, depth] and window in 1 .. steps; got shape {max_prob.shape}, "
                     f"window {window}")
  return max_prob[0].mean(axis=-1), max_prob[:int(window)].mean(axis=(0, 2))


def _at_best(run: GridRun, window: int) -> dict[str, Any]:
  """A grid's early attention at its best learning rate: {"best", "step0" [S], "early" [S]}."""
  best = best_rate(run)
  step0, early = early_max_prob(run.records["attn_max_prob"], window)
  return {"best": best, "step0": values_at_best(run, best, step0), "early": values_at_best(run, best, early)}


def _depth_mean(by_depth: list[np.ndarray]) -> np.ndarray:
  """Per seed, the mean over the depths measured (NaN ones left out): [S]."""
  values = np.stack(by_depth)
  counted = np.sum(np.isfinite(values), axis=0)
  total = np.sum(np.where(np.isfinite(values), values, 0.0), axis=0)
  return np.where(counted > 0, total / np.maximum(counted, 1), np.nan)


def measure_hard_selection(ctx: Context) -> Measurement:
  """The unscaled model's mean largest attention probability in the first tenth of training (step 0 included), at
  its best learning rate, averaged over blocks and depths; 1/√d_k's and the values at step 0 beside it."""
  s = sizes(ctx)
  runs = trained(ctx, depth_grids(ctx))
  per_rule: dict[str, dict[str, list[np.ndarray]]] = {}
  by_depth: dict[str, dict[str, Any]] = {}
  windows = {}
  for depth in depths_of(ctx):
    windows[depth] = early_steps(s["steps"][depth])
    for rule in ("none", "sqrt"):
      run = runs[(rule, depth)]
      got = _at_best(run, windows[depth])
      for key in ("step0", "early"):
        per_rule.setdefault(rule, {}).setdefault(key, []).append(got[key])
      by_depth.setdefault(str(depth), {})[rule] = {
          "best_learning_rate": None if got["best"] is None else lr_label(run.log2_lrs[got["best"]]),
          "max_prob_step0": stats.finite_mean_std(got["step0"]),
          "max_prob_early": stats.finite_mean_std(got["early"])}
  seeds = {rule: {key: _depth_mean(v) for key, v in d.items()} for rule, d in per_rule.items()}  # [S] each
  mean = lambda x: stats.round_finite(float(np.mean(x)))
  gap = seeds["none"]["early"] - seeds["sqrt"]["early"]  # paired by seed: the same initial draws and batches
  uniform = uniform_max_prob(s["seq_len"])
  numbers = {**about(ctx), "depths": list(depths_of(ctx)),
             "early_steps_by_depth": {str(d): w for d, w in windows.items()},
             "max_prob": "each block's mean over heads and visible query rows of the largest attention probability, "
                         "recorded before each step's update, averaged over blocks",
             "early_max_prob_none": mean(seeds["none"]["early"]), **spread("early_max_prob_none",
                                                                           seeds["none"]["early"]),
             "step0_max_prob_none": mean(seeds["none"]["step0"]), **spread("step0_max_prob_none",
                                                                           seeds["none"]["step0"]),
             "early_max_prob_sqrt": mean(seeds["sqrt"]["early"]), **spread("early_max_prob_sqrt",
                                                                           seeds["sqrt"]["early"]),
             "step0_max_prob_sqrt": mean(seeds["sqrt"]["step0"]),
             "early_max_prob_gap": mean(gap), **spread("early_max_prob_gap", gap),
             "uniform_max_prob": stats.round_finite(uniform), "by_depth": by_depth}
  w = ", ".join(f"{w} at depth {d}" for d, w in windows.items())
  return Measurement(numbers, (
      f"On the {data_name(ctx)}, depths {', '.join(map(str, depths_of(ctx)))}, each rule at its best learning rate: "
      f"over the first steps ({w}; a tenth of training, step 0 included) a query's largest attention probability is "
      f"on average {fmt(numbers['early_max_prob_none'])} unscaled (at step 0 {fmt(numbers['step0_max_prob_none'])}) "
      f"and {fmt(numbers['early_max_prob_sqrt'])} with 1/√d_k (at step 0 {fmt(numbers['step0_max_prob_sqrt'])}), "
      f"a gap of {fmt(numbers['early_max_prob_gap'], '+.3g')}; uniform causal attention over {s['seq_len']} tokens "
      f"gives {fmt(numbers['uniform_max_prob'])}, one-hot attention 1."))


HARD_SELECTION_CLAIMS: tuple[Claim, ...] = (
    Claim(
        "train_attention_hard_selection", "note 1 §3 (b)",
        "Without scaling, the attention degenerates into 'hard selection' early in training (the largest component "
        "dominates, the other probabilities go to 0).",
        Criterion("early_max_prob_none", "mean largest attention probability of a query (over blocks, heads, visible "
                  "rows and depths) of the unscaled model over the first tenth of training, step 0 included, at its "
                  "best learning rate (mean over seeds)", holds=(">=", 0.9), fails=("<=", 0.5), noise=True,
                  reason="'hard selection' = one key takes nearly all the weight: at least 0.9 on average holds; at "
                         "most 0.5, no key has a majority, is no selection"),
        measure_hard_selection, training=True, grids=depth_grids,
        beside=(Reading("already at initialization (step 0)", Criterion(
            "step0_max_prob_none", "the same mean largest probability of the unscaled model at step 0",
            holds=(">=", 0.9), fails=("<=", 0.5), noise=True, reason="as the verdict's, before any update")),
                Reading("because the scale is missing (sharper than with 1/√d_k)", Criterion(
                    "early_max_prob_gap", "the unscaled model's early mean largest probability minus 1/√d_k's, "
                    "paired by seed", holds=(">=", 0.25), fails=("<=", 0.05), noise=True,
                    reason="degenerating for want of the scale: the top key takes at least a quarter more of the "
                           "weight than with it; within 0.05 the scale changes nothing")))),
)
"""The claims of this module, in the order of their table (``scaling.studies.claims.training.families``)."""
