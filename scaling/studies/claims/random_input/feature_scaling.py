"""The feature-scaling analogy of note 2 §6: in logistic regression, features of very different scales make gradient
descent oscillate, and normalizing the inputs' range prevents it.

This is an analogy the note draws for attention, not attention itself: a logistic regression on synthetic data with
two features whose scales differ ``FEATURE_SCALES`` (100×), trained by full-batch gradient descent on the raw features
and on the same features standardized, each at its best stable learning rate from one grid. How much each weight's
path goes back and forth, the sign changes of its successive updates, the steps where the loss rises and the steps to
a target loss are compared. All in numpy (float64). The measurement, then the claim (``FEATURE_SCALING_CLAIMS``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from scaling.base.validation import ConfigError
from scaling.studies.claims.context import Context
from scaling.studies.claims.context import seed_mean
from scaling.studies.claims.context import seeds_text
from scaling.studies.claims.verdicts import Claim
from scaling.studies.claims.verdicts import Criterion
from scaling.studies.claims.verdicts import Measurement
from scaling.studies.stats import mean_std
from scaling.studies.stats import round_sig

FEATURE_SCALES = (1.0, 100.0)  # the features' stds: "very different scales"
SAMPLES = 512  # examples per seed
TRUE_LOGIT_STD = 1.5  # each feature's share of the true logit, in its own std (labels are noisy: no separation)
STEPS = 300  # gradient-descent steps per run
LEARNING_RATES = tuple(float(x) for x in 2.0 ** np.arange(-18.0, 8.01, 0.25))  # the grid each condition picks from
TARGET_FRACTION = 0.01  # the target loss: the optimum plus this fraction of the initial loss's excess over it
FLIP_WINDOW = 20  # the first updates whose sign changes are counted
NEWTON_STEPS = 50  # Newton iterations for the optimum


def logistic_data(rng: np.random.Generator, scales: tuple[float, ...] | None = None,
                  samples: int = SAMPLES) -> tuple[np.ndarray, np.ndarray]:
  """Zero-mean Gaussian features of the given stds, and labels drawn from a logistic model in which each feature
  moves the logit by TRUE_LOGIT_STD per std of its own.

  Args:
    rng: the seed's generator.
    scales: the features' stds (None: FEATURE_SCALES).
    samples: the number of examples.

  Returns:
    (x [samples, len(scales)], y [samples] in {0, 1}), float64.
  """
  scales_arr = np.asarray(FEATURE_SCALES if scales is None else scales, np.float64)
  if scales_arr.ndim != 1 or scales_arr.size < 1 or np.any(scales_arr <= 0) or samples < 2:
    raise ConfigError(f"scales must be positive stds and samples at least 2, got {scales!r} and {samples!r}")
  x = rng.standard_normal((samples, scales_arr.size)) * scales_arr
  y = (rng.uniform(size=samples) < _sigmoid(x @ (TRUE_LOGIT_STD / scales_arr))).astype(np.float64)
  return x, y


def _sigmoid(z: np.ndarray) -> np.ndarray:
  return 0.5 * (1.0 + np.tanh(0.5 * z))  # no overflow for large |z|


def logistic_loss(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
  """The mean log-loss of logistic regression without bias.

  Args:
    w: [..., F] weights (leading axes: several runs at once).
    x: [n, F] features.
    y: [n] labels in {0, 1}.

  Returns:
    [...] the losses.
  """
  z = w @ x.T
  return np.mean(np.logaddexp(0.0, z) - y * z, axis=-1)


def optimum(x: np.ndarray, y: np.ndarray, steps: int = NEWTON_STEPS) -> tuple[np.ndarray, float]:
  """The weights that minimize ``logistic_loss`` and the minimum, by Newton's method from 0.

  Args:
    x: [n, F] features.
    y: [n] labels.
    steps: Newton iterations.

  Returns:
    (weights [F], loss).
  """
  w = np.zeros(x.shape[1])
  for _ in range(steps):
    p = _sigmoid(x @ w)
    hessian = (x * (p * (1 - p))[:, None]).T @ x / len(y)
    w = w - np.linalg.solve(hessian, (p - y) @ x / len(y))
  return w, float(logistic_loss(w, x, y))


def gradient_descent(x: np.ndarray, y: np.ndarray, learning_rates: tuple[float, ...],
                     steps: int) -> tuple[np.ndarray, np.ndarray]:
  """Full-batch gradient descent from w = 0 at each learning rate, all at once.

  Args:
    x: [n, F] features.
    y: [n] labels.
    learning_rates: the learning rates.
    steps: the steps of each run.

  Returns:
    (weights [steps + 1, len(learning_rates), F], losses [steps + 1, len(learning_rates)]), the first entries before
    any step; a diverged run's entries may be non-finite.
  """
  if steps < 1 or not learning_rates:
    raise ConfigError(f"steps must be positive and learning_rates non-empty, got {steps!r} and {learning_rates!r}")
  lr = np.asarray(learning_rates, np.float64)[:, None]
  w = np.zeros((len(learning_rates), x.shape[1]))
  weights, losses = [w], [logistic_loss(w, x, y)]
  with np.errstate(over="ignore", invalid="ignore"):
    for _ in range(steps):
      w = w - lr * ((_sigmoid(w @ x.T) - y) @ x / len(y))
      weights.append(w)
      losses.append(logistic_loss(w, x, y))
  return np.stack(weights), np.stack(losses)


def best_stable(losses: np.ndarray) -> int | None:
  """The run with the lowest final loss among the stable ones (finite, and never above its initial loss).

  Args:
    losses: [steps + 1, runs].

  Returns:
    The run's index, or None when no run is stable.
  """
  losses = np.asarray(losses, np.float64)
  with np.errstate(invalid="ignore"):
    stable = np.all(np.isfinite(losses), axis=0) & np.all(losses <= losses[0] * (1 + 1e-12), axis=0)
  if not stable.any():
    return None
  return int(np.argmin(np.where(stable, losses[-1], np.inf)))


def back_and_forth(path: np.ndarray) -> np.ndarray:
  """The share of each weight's path that is retraced: 1 − |w_T − w_0| / Σ_t |w_{t+1} − w_t|.

  Args:
    path: [steps + 1, F] the weights along a run.

  Returns:
    [F]: 0 for a weight that moves one way only, toward 1 for one that swings back and forth (0 if it never moves).
  """
  path = np.asarray(path, np.float64)
  length = np.sum(np.abs(np.diff(path, axis=0)), axis=0)
  net = np.abs(path[-1] - path[0])
  return np.where(length > 0, 1.0 - net / np.where(length > 0, length, 1.0), 0.0)


def sign_changes(path: np.ndarray, window: int = FLIP_WINDOW) -> np.ndarray:
  """The fraction of successive updates, among the first ``window``, whose signs differ, per weight.

  Args:
    path: [steps + 1, F] the weights along a run (at least window + 1 steps).
    window: the updates compared.

  Returns:
    [F] fractions.
  """
  d = np.diff(np.asarray(path, np.float64), axis=0)[:window + 1]
  return np.mean(np.sign(d[1:]) != np.sign(d[:-1]), axis=0)


def steps_to(losses: np.ndarray, target: float) -> int | None:
  """The first step at which the loss [steps + 1] is at or below ``target`` (None: never)."""
  hit = np.asarray(losses, np.float64) <= target
  return int(np.argmax(hit)) if hit.any() else None


CONDITIONS = ("raw", "standardized")


def _one_seed(rng: np.random.Generator) -> dict[str, Any]:
  """Per condition: the best stable learning rate's run and what it shows (RuntimeError when that rate is at the
  grid's edge, so that the optimum is not located)."""
  x, y = logistic_data(rng)
  _, best_loss = optimum(x, y)
  out = {}
  for name, features in zip(CONDITIONS, (x, x / np.std(x, axis=0))):
    weights, losses = gradient_descent(features, y, LEARNING_RATES, STEPS)
    b = best_stable(losses)
    if b is None or b in (0, len(LEARNING_RATES) - 1):  # the optimum would not be located: widen the grid
      raise RuntimeError(f"the best stable learning rate of the {name} features is not inside the grid "
                         f"2^{math.log2(LEARNING_RATES[0]):g}–2^{math.log2(LEARNING_RATES[-1]):g}")
    path, curve = weights[:, b], losses[:, b]
    target = best_loss + TARGET_FRACTION * (curve[0] - best_loss)
    out[name] = {"lr": LEARNING_RATES[b], "back_and_forth": float(np.max(back_and_forth(path))),
                 "by_weight": back_and_forth(path),
                 "sign_changes": float(np.max(sign_changes(path))),
                 "loss_rises": float(np.mean(np.diff(curve) > 1e-12 * curve[0])),
                 "steps_to_target": steps_to(curve, target), "final_excess": float(curve[-1] - best_loss)}
  return out


def _oscillation(ctx: Context) -> Measurement:
  runs = ctx.cached("feature_scaling", lambda: [_one_seed(rng) for rng in ctx.rngs("feature_scaling")])
  per = lambda name, key: np.asarray([r[name][key] for r in runs], np.float64)
  excess = per("raw", "back_and_forth") - per("standardized", "back_and_forth")
  se = float(np.std(excess, ddof=1) / math.sqrt(len(excess))) if len(excess) > 1 else None
  steps = {n: [r[n]["steps_to_target"] for r in runs] for n in CONDITIONS}
  reach = lambda s: f"none within {STEPS}" if any(x is None for x in s) else f"{np.mean(s):.0f}"
  numbers = {
      "back_and_forth_excess": round_sig(float(np.mean(excess))), "back_and_forth_excess_se": round_sig(se),
      "learning_rate_grid_log2": [round_sig(math.log2(LEARNING_RATES[0])), round_sig(math.log2(LEARNING_RATES[-1]))],
      "feature_scales": list(FEATURE_SCALES), "samples": SAMPLES, "steps": STEPS,
      **{n: {"best_lr_log2": mean_std(np.log2(per(n, "lr")), 3),
             "back_and_forth": mean_std(per(n, "back_and_forth"), 4),
             "back_and_forth_by_weight": [round_sig(float(x)) for x in np.mean([r[n]["by_weight"] for r in runs], 0)],
             f"sign_change_fraction_first_{FLIP_WINDOW}": mean_std(per(n, "sign_changes"), 3),
             "loss_rise_fraction": mean_std(per(n, "loss_rises"), 3), "steps_to_target": steps[n],
             "final_loss_excess": mean_std(per(n, "final_excess"), 3)} for n in CONDITIONS}}
  show = lambda n, key: f"{seed_mean(per(n, key)):.2f}"
  return Measurement(numbers, (
      f"Logistic regression on {SAMPLES} examples with feature stds {FEATURE_SCALES[0]:g} and {FEATURE_SCALES[1]:g} "
      f"(an analogy, not attention), {STEPS} steps of gradient descent at each condition's best stable learning rate "
      f"(2^{seed_mean(np.log2(per('raw', 'lr'))):.2f} raw, 2^{seed_mean(np.log2(per('standardized', 'lr'))):.2f} "
      f"standardized): the most retraced weight's path goes back and forth over {show('raw', 'back_and_forth')} of "
      f"its length raw against {show('standardized', 'back_and_forth')} standardized; its first {FLIP_WINDOW} updates "
      f"change sign {show('raw', 'sign_changes')} of the time against {show('standardized', 'sign_changes')}, the loss "
      f"rises at {show('raw', 'loss_rises')} against {show('standardized', 'loss_rises')} of steps, and the steps to "
      f"reach {TARGET_FRACTION:.0%} of the initial loss's excess over the optimum are {reach(steps['raw'])} raw and "
      f"{reach(steps['standardized'])} standardized ({seeds_text(ctx)})."))


FEATURE_SCALING_CLAIMS: tuple[Claim, ...] = (
    Claim("feature_scales_oscillate", "note 2 §6 (如果你只做过传统 NLP)",
          "As in logistic regression, where features of very different scales make gradient descent oscillate, the "
          "inputs' range needs normalizing (an analogy for attention's logits).",
          Criterion("back_and_forth_excess", "share of the most retraced weight's path that goes back and forth, "
                    f"1 − |w_T − w_0| / Σ|Δw|, gradient descent on a logistic regression with feature stds "
                    f"{FEATURE_SCALES[0]:g} and {FEATURE_SCALES[1]:g} less that on the same features standardized, "
                    f"each at its best stable learning rate inside a grid ({STEPS} steps; mean over seeds)",
                    holds=(">", 0.3), fails=("<", 0.05), noise=True,
                    reason="'oscillates' = a weight retraces much of its path, over 30% of it more than with features "
                    "of one scale; within 5% the scales change nothing"),
          _oscillation),
)
"""The claim of the logistic-regression analogy."""
