"""Argument checks shared by the library: each returns the clean value or raises one clear ValueError."""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np


def check_positive_int(name: str, value: Any) -> int:
  """``value`` as an int, or ValueError unless it is a positive integer (bools are rejected)."""
  if isinstance(value, bool):
    raise ValueError(f"{name} must be a positive integer, got {value!r}")
  try:
    result = operator.index(value)
  except TypeError:
    raise ValueError(f"{name} must be a positive integer, got {value!r}") from None
  if result <= 0:
    raise ValueError(f"{name} must be a positive integer, got {result}")
  return result


def check_finite(name: str, value: Any, *, positive: bool = False, nonnegative: bool = False) -> float:
  """``value`` as a float, or ValueError unless it is a finite (positive / non-negative) number."""
  ok = isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, bool)
  ok = ok and math.isfinite(value) and (not positive or value > 0) and (not nonnegative or value >= 0)
  if not ok:
    kind = "positive " if positive else "non-negative " if nonnegative else ""
    raise ValueError(f"{name} must be a finite {kind}number, got {value!r}")
  return float(value)
