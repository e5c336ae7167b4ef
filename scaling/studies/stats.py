"""Statistics over seeds and the rounding of reported numbers, shared by the studies.

Every study reports a measured quantity as its mean and (population) standard deviation over seeds, often
rounded to a few significant digits so that the JSON and Markdown outputs stay readable; these helpers are the
one definition of that: ``mean_std`` (over every value), ``finite_mean_std`` (over the finite ones, diverged runs
left out), ``round_sig``, ``round_finite``, ``finite_or_none`` and the "mean ± std" text of ``format_mean_std``.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from scaling.base.validation import ConfigError


def finite_or_none(x: float | None) -> float | None:
  """``x`` as a float when it is finite, else None (for JSON: a diverged or undefined value)."""
  if x is None or not math.isfinite(x):
    return None
  return float(x)


def round_sig(x: float | None, digits: int = 4) -> float | None:
  """``x`` rounded to ``digits`` significant digits for reporting (None stays None, non-finite values unchanged).

  Args:
    x: the value.
    digits: significant digits, at least 1.

  Returns:
    The rounded float.
  """
  if isinstance(digits, bool) or not isinstance(digits, int) or digits < 1:
    raise ConfigError(f"digits must be a positive integer, got {digits!r}")
  if x is None:
    return None
  x = float(x)
  return float(f"{x:.{digits}g}") if math.isfinite(x) else x


def round_finite(x: float | None, digits: int = 4) -> float | None:
  """``round_sig`` of ``x``, None when ``x`` is None or not finite."""
  return finite_or_none(round_sig(x, digits))


def mean_std(values: Sequence[float] | np.ndarray, digits: int | None = None) -> dict[str, float]:
  """{"mean", "std"} over seeds (population std, float64; a NaN value makes both NaN).

  Args:
    values: the per-seed values.
    digits: round both to this many significant digits (None: unrounded).

  Returns:
    {"mean": float, "std": float}.
  """
  v = np.asarray(values, np.float64)
  mean, std = float(np.mean(v)), float(np.std(v))
  if digits is None:
    return {"mean": mean, "std": std}
  return {"mean": round_sig(mean, digits), "std": round_sig(std, digits)}


def finite_mean_std(values: Sequence[float] | np.ndarray, digits: int = 4) -> dict[str, float | None]:
  """``mean_std`` over the finite values, rounded to ``digits``; {"mean": None, "std": None} when there is none."""
  v = np.asarray(values, np.float64)
  v = v[np.isfinite(v)]
  if not v.size:
    return {"mean": None, "std": None}
  return {k: finite_or_none(x) for k, x in mean_std(v, digits).items()}


def standard_error(values: Sequence[float] | np.ndarray) -> float | None:
  """The standard error of the mean of repeated values (per seed, per timing round): their sample standard deviation
  (ddof 1) over √n, over the finite values (None with fewer than two)."""
  v = np.asarray(values, np.float64).ravel()
  v = v[np.isfinite(v)]
  if v.size < 2:
    return None
  return float(np.std(v, ddof=1) / math.sqrt(v.size))


def format_mean_std(mean: float, std: float, spec: str = ".3g") -> str:
  """"mean ± std", each formatted with ``spec``."""
  return f"{format(mean, spec)} ± {format(std, spec)}"
