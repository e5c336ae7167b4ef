"""Masking shared by the dense, blockwise and metrics paths: visibility masks, tiles of them and GQA head groups.

Conventions (as jax.nn): a mask is boolean, True = attend, broadcastable to
[B, N, T, S]; None means nothing is masked. Causal masking aligns query i with
key i (top-left). Grouped arrays put the N = K·G query heads of GQA as
[B, K, G, T, S], G query heads per key/value head.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from scaling.base.validation import ConfigError

Array = jax.Array


def ensure_4d(x: Any, name: str) -> Array | None:
  """Adds leading axes to an array of at most 4 dimensions: [..., T, S] -> [1.., T, S]; None stays None.

  Args:
    x: an array-like with at most 4 dimensions, or None.
    name: the argument's name, for the error message.

  Returns:
    ``x`` as a 4-D array (or None).

  Raises:
    ValueError: when ``x`` has more than 4 dimensions.
  """
  if x is None:
    return None
  x = jnp.asarray(x)
  if x.ndim > 4:
    raise ConfigError(f"{name} must have at most 4 dimensions, got shape {x.shape}")
  return x.reshape((1,) * (4 - x.ndim) + x.shape)


def ensure_bool_mask(mask: Any) -> Array | None:
  """A user mask as a 4-D boolean array [B|1, N|1, T|1, S|1] (None stays None).

  Args:
    mask: boolean, True = attend, with at most 4 dimensions; or None.

  Returns:
    The mask with leading axes added.

  Raises:
    ValueError: when the mask is not boolean (additive masks belong in ``bias``) or has over 4 dimensions.
  """
  mask = ensure_4d(mask, "mask")
  if mask is not None and mask.dtype != jnp.bool_:
    raise ConfigError(f"mask must be boolean (True = attend), got dtype {mask.dtype}; pass additive masks as bias")
  return mask


def window_bounds(local_window_size: int | tuple[int, int] | None) -> tuple[int, int] | None:
  """Normalizes a local window to (left, right) Python ints; one int means the same on both sides.

  Args:
    local_window_size: None, an int, or a (left, right) pair.

  Returns:
    ``(left, right)`` or None.

  Raises:
    ValueError: when a sequence is not a pair.
  """
  if local_window_size is None:
    return None
  if not isinstance(local_window_size, (tuple, list)):
    return int(local_window_size), int(local_window_size)
  window = tuple(int(w) for w in local_window_size)
  if len(window) != 2:
    raise ConfigError(f"local_window_size must be an int or a (left, right) pair, got {local_window_size!r}")
  return window


def _and_all(parts: list[Array]) -> Array | None:
  """Logical and of a list of broadcastable boolean arrays, None for an empty list."""
  if not parts:
    return None
  out = parts[0]
  for p in parts[1:]:
    out = jnp.logical_and(out, p)
  return out


def combined_mask(
    batch: int,
    num_heads: int,
    q_len: int,
    kv_len: int,
    *,
    mask: Array | None = None,
    is_causal: bool = False,
    query_seq_lengths: Array | None = None,
    key_value_seq_lengths: Array | None = None,
    local_window_size: int | tuple[int, int] | None = None,
    q_offset: Array | int = 0,
    kv_offset: Array | int = 0,
) -> Array | None:
  """Boolean mask broadcastable to [B, N, T, S] (True = attend), or None when nothing is masked.

  Args:
    batch: B, the size of the sequence-length arrays.
    num_heads: N (unused: every part broadcasts over heads; kept for the call signature).
    q_len: T, the number of query rows of the mask.
    kv_len: S, the number of key columns of the mask.
    mask: boolean, True = attend, broadcastable to [B, N, T, S].
    is_causal: query i attends keys j <= i.
    query_seq_lengths: int [B]; queries at or past the length see nothing.
    key_value_seq_lengths: int [B]; keys at or past the length are hidden.
    local_window_size: (left, right) window, or one int for both.
    q_offset: position of the first query row (a tile of a longer sequence).
    kv_offset: position of the first key column.

  Returns:
    The conjunction of all the given constraints, broadcastable to [B, N, T, S], or None.
  """
  del num_heads
  parts = []
  mask = ensure_bool_mask(mask)
  if mask is not None:
    parts.append(mask)
  q_pos = q_offset + jnp.arange(q_len)[:, None]
  k_pos = kv_offset + jnp.arange(kv_len)[None, :]
  if is_causal:
    parts.append((k_pos <= q_pos)[None, None])
  window = window_bounds(local_window_size)
  if window is not None:
    left, right = window
    parts.append(((q_pos <= k_pos + left) & (q_pos >= k_pos - right))[None, None])
  if query_seq_lengths is not None:
    qs = jnp.asarray(query_seq_lengths).reshape(batch)
    parts.append((q_pos[None] < qs[:, None, None])[:, None])
  if key_value_seq_lengths is not None:
    ks = jnp.asarray(key_value_seq_lengths).reshape(batch)
    parts.append((k_pos[None] < ks[:, None, None])[:, None])
  return _and_all(parts)


def tile_mask(batch: int, num_heads: int, block_q: int, block_k: int, *, q_offset: Array | int = 0,
              kv_offset: Array | int = 0, q_len: int | None = None, kv_len: int | None = None,
              **mask_kwargs: Any) -> Array | None:
  """``combined_mask`` of one [block_q, block_k] tile of a sequence padded up to whole tiles.

  Args:
    batch, num_heads: B and N, as for ``combined_mask``.
    block_q, block_k: the tile's query rows and key columns.
    q_offset, kv_offset: positions of the tile's first query row and first key column.
    q_len: the real query length T; rows at or past it are padding and see nothing. None: no query padding.
    kv_len: the real key length S; keys at or past it are padding and hidden. None: no key padding.
    **mask_kwargs: ``mask`` (already cut to the tile), ``is_causal``, ``query_seq_lengths``,
      ``key_value_seq_lengths``, ``local_window_size``, as for ``combined_mask``.

  Returns:
    Boolean visibility broadcastable to [B, N, block_q, block_k], or None when all of the tile is visible.
  """
  vis = combined_mask(batch, num_heads, block_q, block_k, q_offset=q_offset, kv_offset=kv_offset, **mask_kwargs)
  parts = [] if vis is None else [vis]
  if q_len is not None:
    parts.append((q_offset + jnp.arange(block_q) < q_len)[None, None, :, None])
  if kv_len is not None:
    parts.append((kv_offset + jnp.arange(block_k) < kv_len)[None, None, None, :])
  return _and_all(parts)


def group_heads(x: Array | None, num_kv_heads: int, groups: int) -> Array | None:
  """Splits the head axis for GQA: [B, N|1, T, S] -> [B, K|1, G|1, T, S] (None stays None).

  Args:
    x: an array with N = num_kv_heads · groups heads, or a single broadcast head, on axis 1.
    num_kv_heads: K.
    groups: G, query heads per key/value head.

  Returns:
    The grouped array (a view: query head n is kv head n // G, member n % G).
  """
  if x is None:
    return None
  b, n, t, s = x.shape
  if n == 1:
    return x[:, :, None]
  return x.reshape(b, num_kv_heads, groups, t, s)


def ungroup_heads(x: Array) -> Array:
  """Inverse of ``group_heads``: [B, K, G, T, S] -> [B, K·G, T, S].

  Args:
    x: a grouped array.

  Returns:
    The array with its K and G axes merged into one head axis.
  """
  b, k, g, t, s = x.shape
  return x.reshape(b, k * g, t, s)
