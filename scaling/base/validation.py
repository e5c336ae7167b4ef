"""Argument checks shared by the library, and the exceptions they raise for bad input.

``ConfigError`` (a ValueError) and ``ConfigTypeError`` (also a TypeError) are
the library's word for "the caller gave bad input": every check here raises one
of them, naming the argument, what it got and what it expected. The command
line prints exactly these as one line; any other exception is a bug and keeps
its traceback. The checks read only shapes, dtypes and Python values, so they
run before anything is traced.
"""

from __future__ import annotations

import difflib
import math
import operator
import textwrap
from typing import Any, Sequence

import jax
import numpy as np

WRAP_COLUMNS = 100
"""A list of allowed names over ``WRAP_COLUMNS - 20`` characters goes below the message, wrapped at this width."""


class ConfigError(ValueError):
  """Bad input from the caller (an argument, an option, a file): one line, no traceback (long lists wrapped below).

  The message names options by their fields (``tau``, ``rule='temperature'``); ``fields`` lists those it names bare
  in the middle of a sentence (every such word is then the option), so that a front end can write each in its own
  form: the command line (``experiments/cli.py``) writes flags.
  """

  def __init__(self, *args: Any, fields: Sequence[str] = ()):
    super().__init__(*args)
    self.fields = tuple(fields)


class ConfigTypeError(ConfigError, TypeError):
  """An argument of the wrong type or dtype (a ``ConfigError`` that is also a TypeError)."""


def suggestion(value: Any, allowed: Sequence[Any]) -> str:
  """``" (did you mean 'x'?)"`` for the allowed name closest to ``value``, or ``""`` when none is close."""
  close = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1, cutoff=0.6)
  return f" (did you mean {close[0]!r}?)" if close else ""


def wrapped(allowed: Sequence[Any]) -> str:
  """The allowed names wrapped at ``WRAP_COLUMNS``, each line indented by two spaces."""
  return textwrap.fill(", ".join(str(a) for a in allowed), WRAP_COLUMNS, initial_indent="  ", subsequent_indent="  ")


def _short(allowed: Sequence[Any]) -> bool:
  return len(", ".join(str(a) for a in allowed)) <= WRAP_COLUMNS - 20


def must_be_one_of(value: Any, allowed: Sequence[Any], *, show_value: bool = True) -> str:
  """``"must be one of a, b; got 'v' (did you mean 'w'?)"``; a long list goes on wrapped lines below.

  Args:
    value: the value given.
    allowed: the choices.
    show_value: False leaves out ``; got 'v'`` (for a message that names the value already).

  Returns:
    The text, to follow the option's name.
  """
  got = f"; got {value!r}" if show_value else ""
  if _short(allowed):
    return f"must be one of {', '.join(str(a) for a in allowed)}{got}{suggestion(value, allowed)}"
  return f"must be one of the {len(allowed)} listed below{got}{suggestion(value, allowed)}\n{wrapped(allowed)}"


def unknown_choice(what: str, value: Any, allowed: Sequence[Any]) -> str:
  """``"unknown <what> 'v' (did you mean 'w'?); known: a, b"``; a long list goes on wrapped lines below."""
  head = f"unknown {what} {value!r}{suggestion(value, allowed)}"
  if _short(allowed):
    return f"{head}; known: {', '.join(str(a) for a in allowed)}"
  return f"{head}; the {len(allowed)} known:\n{wrapped(allowed)}"


def check_positive_int(name: str, value: Any) -> int:
  """``value`` as an int, or ConfigError unless it is a positive integer (bools are rejected)."""
  if isinstance(value, bool):
    raise ConfigError(f"{name} must be a positive integer, got {value!r}")
  try:
    result = operator.index(value)
  except TypeError:
    raise ConfigError(f"{name} must be a positive integer, got {value!r}") from None
  if result <= 0:
    raise ConfigError(f"{name} must be a positive integer, got {result}")
  return result


def check_bool(name: str, value: Any) -> bool:
  """``value`` as a bool, or ConfigTypeError unless it is True or False (a Python or numpy bool)."""
  if not isinstance(value, (bool, np.bool_)):
    raise ConfigTypeError(f"{name} must be True or False, got {value!r}")
  return bool(value)


def check_number(name: str, value: Any, *, positive: bool = False, nonnegative: bool = False) -> Any:
  """A finite real number (a traced or 0-d array passes through unchecked), or ConfigError naming ``name``."""
  if isinstance(value, jax.core.Tracer):
    return value
  if isinstance(value, (jax.Array, np.ndarray)):
    if value.ndim != 0:
      raise ConfigError(f"{name} must be a number, got an array of shape {value.shape}")
    value = value.item()
  if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
    raise ConfigTypeError(f"{name} must be a number, got {value!r}")
  if not math.isfinite(value):
    raise ConfigError(f"{name} must be finite, got {value!r}")
  if positive and not value > 0:
    raise ConfigError(f"{name} must be positive, got {value!r}")
  if nonnegative and not value >= 0:
    raise ConfigError(f"{name} must be >= 0, got {value!r}")
  return value


def _dtype(x: Any) -> np.dtype:
  """The dtype of an array, a tracer (never converted) or an array-like."""
  dtype = getattr(x, "dtype", None)
  return np.dtype(np.asarray(x).dtype if dtype is None else dtype)


def check_floating(name: str, x: Any, *, complex_ok: bool = False) -> None:
  """ConfigTypeError unless array ``x`` has a real floating dtype (or, with ``complex_ok``, a complex one)."""
  dtype, jnp = _dtype(x), jax.numpy
  is_complex = jnp.issubdtype(dtype, jnp.complexfloating)
  if jnp.issubdtype(dtype, jnp.floating) or (complex_ok and is_complex):
    return
  want = "a floating or complex dtype" if complex_ok else "a floating dtype"
  hint = " (complex values are not supported here: real dtypes only)" if is_complex else ""
  raise ConfigTypeError(f"{name} must have {want}, got {dtype}{hint}")


def check_integer_array(name: str, x: Any) -> None:
  """ConfigTypeError unless array ``x`` has an integer dtype."""
  if not jax.numpy.issubdtype(_dtype(x), jax.numpy.integer):
    raise ConfigTypeError(f"{name} must be integers, got dtype {_dtype(x)}")


def check_bool_array(name: str, x: Any, hint: str = "") -> None:
  """ConfigTypeError unless array ``x`` is boolean."""
  if _dtype(x) != np.bool_:
    raise ConfigTypeError(f"{name} must be boolean, got dtype {_dtype(x)}{hint}")


def check_rank(name: str, x: Any, ranks: Sequence[int], layout: str) -> None:
  """ConfigError unless ``x`` has one of ``ranks`` dimensions (``layout`` says which axes are meant)."""
  shape = np.shape(x)
  if len(shape) not in ranks:
    raise ConfigError(f"{name} must be {layout}, got shape {tuple(shape)}")


def check_broadcasts(name: str, shape: Sequence[int], target: Sequence[int], layout: str) -> None:
  """ConfigError unless ``shape`` (at most ``len(target)`` axes, aligned right) broadcasts to ``target``."""
  shape, target = tuple(shape), tuple(target)
  if len(shape) > len(target) or any(a not in (1, b) for a, b in zip(shape[::-1], target[::-1])):
    raise ConfigError(f"{name} of shape {shape} does not broadcast to {layout} = {target}")
