"""Argument checks shared by the library: each returns the clean value or raises one clear ValueError."""

from __future__ import annotations

import operator
from typing import Any


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
