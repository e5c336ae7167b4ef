"""Per-run readings of training loss curves ([steps, M] losses, one column per run; pure numpy, known-answer tests in
tests/test_training_claims.py): divergence, stalls, convergence, final losses, the best learning rate of a grid's
table, roughness, the swings of the loss smoothed over windows (and what batch noise alone gives) and the steps to
reach a loss.

Divergence follows ``scaling.training.loop.run``: a run diverges at a non-finite loss or one above 3 × its step-0 loss; a
run stalls when its final loss stays above a fraction (the sizes' ``stall_fraction``, 0.9) of its step-0 loss.
"""

from __future__ import annotations

import numpy as np

from scaling.training.loop import run as loop_lib


DIVERGENCE_FACTOR = loop_lib.DEFAULT_DIVERGENCE_FACTOR
"""A loss above this factor × its step-0 loss diverged (the training loop's own default)."""


def diverged(losses: np.ndarray, factor: float = DIVERGENCE_FACTOR, window: int | None = None) -> np.ndarray:
  """Per run, whether its loss diverged within the first ``window`` steps (all steps when None).

  Args:
    losses: [steps, M] training losses.
    factor: a loss above factor × the run's step-0 loss counts as diverged, as does a non-finite one.
    window: how many initial steps to look at.

  Returns:
    bool [M].
  """
  losses = np.asarray(losses, np.float64)[:window]
  with np.errstate(invalid="ignore"):
    grown = losses > factor * losses[:1]
  return np.any(~np.isfinite(losses) | grown, axis=0)


def nonfinite_within(losses: np.ndarray, window: int | None = None) -> np.ndarray:
  """Per run, whether its loss was non-finite (NaN or inf) in the first ``window`` steps: bool [M]."""
  return np.any(~np.isfinite(np.asarray(losses, np.float64)[:window]), axis=0)


def smallest_finite(values: np.ndarray) -> float:
  """The smallest finite value of an array (NaN when there is none)."""
  values = np.asarray(values, np.float64)
  finite = values[np.isfinite(values)]
  return float(finite.min()) if finite.size else float("nan")


def final_losses(losses: np.ndarray, last: int) -> np.ndarray:
  """Per run, the mean of its last ``last`` losses, NaN for a run whose loss was ever non-finite: [M]."""
  losses = np.asarray(losses, np.float64)
  ok = np.all(np.isfinite(losses), axis=0)
  with np.errstate(invalid="ignore"):
    return np.where(ok, np.mean(losses[-last:], axis=0), np.nan)


def window_mean(losses: np.ndarray, step: int, width: int) -> np.ndarray:
  """Per run, the mean loss of steps (step − width, step]: [M] (NaN if any of them is non-finite)."""
  losses = np.asarray(losses, np.float64)
  step = min(step, losses.shape[0] - 1)
  chunk = losses[max(0, step - width + 1):step + 1]
  return np.where(np.all(np.isfinite(chunk), axis=0), np.mean(chunk, axis=0), np.nan)


def best_index(per_lr_seed: np.ndarray) -> int | None:
  """The learning rate (row) with the lowest seed-mean of a [L, S] array; rows with a NaN seed are out (None: all)."""
  per_lr_seed = np.asarray(per_lr_seed, np.float64)
  means = np.where(np.all(np.isfinite(per_lr_seed), axis=1), np.mean(per_lr_seed, axis=1), np.inf)
  return int(np.argmin(means)) if np.isfinite(means).any() else None


def stalled(losses: np.ndarray, fraction: float, last: int) -> np.ndarray:
  """Per run, whether its final loss (mean of the last ``last`` steps) stays above ``fraction`` × its step-0 loss.

  Args:
    losses: [steps, M] training losses.
    fraction: a run that does not get below fraction × its initial loss made no progress.
    last: the final-loss window.

  Returns:
    bool [M] (False for a run with a non-finite loss: that one diverged).
  """
  losses = np.asarray(losses, np.float64)
  final = final_losses(losses, last)
  with np.errstate(invalid="ignore"):
    return np.isfinite(final) & (final > fraction * losses[0])


def converged(losses: np.ndarray, stall_fraction: float, last: int) -> np.ndarray:
  """Per run, whether it converged: finite, never above ``DIVERGENCE_FACTOR`` × its step-0 loss, and its final loss
  (mean of the last ``last`` steps) at most ``stall_fraction`` × its step-0 loss: [steps, M] -> bool [M]."""
  return ~diverged(losses) & ~stalled(losses, stall_fraction, last)


def roughness(losses: np.ndarray) -> np.ndarray:
  """Per run, the RMS of the step-to-step loss change over the second half of training: [steps, M] -> [M]."""
  losses = np.asarray(losses, np.float64)
  half = losses[losses.shape[0] // 2:]
  return np.sqrt(np.mean(np.square(np.diff(half, axis=0)), axis=0))


def steps_to_reach(losses: np.ndarray, target: np.ndarray, width: int) -> np.ndarray:
  """Per run, the first step whose ``width``-step window mean is at or below ``target`` [M] (NaN: never)."""
  losses = np.asarray(losses, np.float64)
  kernel = np.ones(width) / width
  out = np.full(losses.shape[1], np.nan)
  for m in range(losses.shape[1]):
    smooth = np.convolve(losses[:, m], kernel, mode="valid")  # smooth[i] = mean of steps i .. i + width − 1
    hit = np.nonzero(smooth <= np.asarray(target)[m])[0]
    if hit.size:
      out[m] = hit[0] + width - 1
  return out


def window_means(losses: np.ndarray, width: int) -> np.ndarray:
  """The loss averaged over consecutive windows of ``width`` steps (the last partial window dropped).

  Args:
    losses: [steps, M] training losses.
    width: steps per window (>= 1, at most ``steps``).

  Returns:
    [steps // width, M]: row k is the mean of steps k·width .. (k + 1)·width − 1 (NaN where any is non-finite).
  """
  losses = np.asarray(losses, np.float64)
  if losses.ndim != 2 or not 1 <= int(width) <= losses.shape[0]:
    raise ValueError(f"losses must be [steps, M] and width in 1 .. steps; got shape {losses.shape}, width {width}")
  n = losses.shape[0] // int(width)
  return losses[:n * int(width)].reshape(n, int(width), losses.shape[1]).mean(axis=1)


def swings(losses: np.ndarray, width: int) -> np.ndarray:
  """Per run, how far its smoothed loss climbs back up over the second half of training: the sum of the rises
  (never the falls) between consecutive ``width``-step window means (``window_means``) of the second half.

  A curve that only falls swings 0; averaging ``width`` steps divides the step-to-step batch noise's standard
  deviation by √width, so what remains is the ups and downs of the curve itself.

  Args:
    losses: [steps, M] training losses.
    width: steps per window (>= 1); the second half must hold at least two windows.

  Returns:
    [M] (NaN for a run whose second half has a non-finite loss).
  """
  losses = np.asarray(losses, np.float64)
  half = losses[losses.shape[0] // 2:]
  if half.shape[0] < 2 * int(width):
    raise ValueError(f"the second half ({half.shape[0]} steps) must hold two windows of {width} steps")
  return np.sum(np.maximum(np.diff(window_means(half, width), axis=0), 0.0), axis=0)


def swing_noise_floor(losses: np.ndarray, width: int) -> np.ndarray:
  """Per run, the ``swings`` that batch noise alone would give a curve that only falls: (number of window pairs) ×
  σ_w/√π, with σ_w the within-window standard deviation of the step losses over √width (the mean rise of a
  difference of two independent window means N(0, 2σ_w²) is σ_w/√π).

  Args:
    losses: [steps, M] training losses.
    width: steps per window (>= 2); the second half must hold at least two windows.

  Returns:
    [M].
  """
  losses = np.asarray(losses, np.float64)
  half = losses[losses.shape[0] // 2:]
  if int(width) < 2 or half.shape[0] < 2 * int(width):
    raise ValueError(f"width must be >= 2 and the second half ({half.shape[0]} steps) hold two windows of it")
  n = half.shape[0] // int(width)
  chunks = half[:n * int(width)].reshape(n, int(width), half.shape[1])
  sigma_w = np.sqrt(np.mean(np.var(chunks, axis=1, ddof=1), axis=0) / int(width))
  return (n - 1) * sigma_w / np.sqrt(np.pi)
