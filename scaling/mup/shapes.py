"""Parameter paths and fans: the names along a parameter's path, the input axes of a kernel, and the
(fan_in, fan_out) of a parameter of a layer kind, from which the schemes (``scaling.mup.schemes``) compute its
init, multiplier and learning rates.
"""

from __future__ import annotations

import math
import operator
from typing import Any, Iterable, Sequence

import jax

from scaling.mup import schemes
from scaling.base.validation import ConfigError


def path_names(path: Iterable[Any]) -> tuple[str, ...]:
  """Turns a jax key path (DictKey, GetAttrKey, SequenceKey, ...) or strings into strings.

  Args:
    path: a key path of ``jax.tree_util.tree_flatten_with_path``, or strings.

  Returns:
    The name of each entry: a dict key, an attribute name, a sequence index as a string.
  """
  names = []
  for entry in path:
    if isinstance(entry, str):
      names.append(entry)
    elif isinstance(entry, jax.tree_util.DictKey):
      names.append(str(entry.key))
    elif isinstance(entry, jax.tree_util.GetAttrKey):
      names.append(entry.name)
    elif isinstance(entry, jax.tree_util.SequenceKey):
      names.append(str(entry.idx))
    else:
      names.append(str(entry))
  return tuple(names)


def input_axes(in_axes: int | Sequence[int], rank: int) -> tuple[int, ...]:
  """The input axes of a kernel of ``rank`` axes: the first ``in_axes`` (an int) or the given axis indices.

  Args:
    in_axes: an int n (the first n axes) or a sequence of axis indices.
    rank: the kernel's number of axes.

  Returns:
    The input axes, sorted.

  Raises:
    ValueError: no input axis, every axis an input, or an index out of range.
  """
  if isinstance(in_axes, bool):
    raise ConfigError(f"in_axes must be an int or a sequence of axis indices, got {in_axes!r}")
  if isinstance(in_axes, int):
    if not 0 < in_axes < rank:
      raise ConfigError(f"in_axes must be an integer in [1, {rank - 1}] for a parameter of rank {rank}, "
                        f"got {in_axes!r}")
    return tuple(range(in_axes))
  try:
    axes = tuple(sorted({operator.index(a) for a in in_axes}))
  except TypeError:
    raise ConfigError(f"in_axes must be an int or a sequence of axis indices, got {in_axes!r}") from None
  if not axes or len(axes) >= rank or axes[0] < 0 or axes[-1] >= rank:
    raise ConfigError(f"in_axes must name between 1 and {rank - 1} of the axes 0..{rank - 1}, got {in_axes!r}")
  return axes


def fans(kind: str, shape: Sequence[int], in_axes: int | Sequence[int] | None = None) -> tuple[int, int]:
  """(fan_in, fan_out) of a parameter of ``kind`` with ``shape``.

  * embedding [V, D]: (V, D);
  * Dense kernels [fan_in, fan_out] (input, hidden, attn_q/k/v, readout); a
    DenseGeneral kernel [D, N, H] has fan_out N·H;
  * attn_o [N·H, D] or [N, H, D]: fan_in is the product of all but the last axis;
  * bias and norm: (1, size); a fixed parameter of rank < 2 too;
  * ``in_axes`` (a matrix kind): an int n says the first n axes are the input (a Conv kernel [..., in, out] has
    n = rank − 1); a tuple of axis indices names the input axes wherever they are (a kernel stored [out, in] has
    (1,), as ``scaling.mup.usage`` reads it from the contraction). fan_in is the product of the input axes, fan_out of
    the others.

  Raises:
    ValueError: unknown kind, wrong rank, or an empty axis.
  """
  kind = schemes.check_kind(kind)
  try:
    dims = tuple(operator.index(d) for d in shape)
  except TypeError:
    raise ConfigError(f"shape must be a sequence of integers, got {shape!r}") from None
  if any(d <= 0 for d in dims):
    raise ConfigError(f"{kind} parameter has an empty or negative axis: shape {dims}")
  if kind in schemes.VECTOR_KINDS or (kind == "fixed" and len(dims) < 2):
    return 1, math.prod(dims)
  if in_axes is not None and len(dims) >= 2:
    axes = input_axes(in_axes, len(dims))
    return (math.prod(dims[a] for a in axes),
            math.prod(d for a, d in enumerate(dims) if a not in axes))
  if kind == "embedding":
    if len(dims) != 2:
      raise ConfigError(f"embedding parameter must be [V, D], got shape {dims}")
    return dims[0], dims[1]
  if len(dims) < 2:
    raise ConfigError(f"{kind} parameter must have at least 2 axes, got shape {dims}")
  if kind == "attn_o":
    return math.prod(dims[:-1]), dims[-1]
  return dims[0], math.prod(dims[1:])
