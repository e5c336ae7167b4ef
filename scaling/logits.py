"""The pieces every attention implementation shares: logit options, input checks, logit shaping and the softmax.

This is the bottom of the attention modules: it imports only ``scaling.rules``.
The dense (``scaling.dense_attention``), blockwise (``scaling.blockwise``) and
Pallas (``scaling.pallas_attention``) implementations build on it, and the
dispatcher ``scaling.attention`` on them, so the same options give the same
logits whichever implementation runs.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from scaling import rules as rules_lib

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class LogitOptions:
  """Everything besides the arrays that shapes the logits; shared by dense and blockwise paths."""

  rule: rules_lib.ScaleRule
  scale: float
  weight_scale: float
  logit_soft_cap: float | None
  logit_clamp: float | None
  float32_softmax: bool
  subtract_max: bool


def resolve_logit_options(
    head_dim: int,
    *,
    scale: float | None,
    rule: str | rules_lib.ScaleRule | None,
    logit_soft_cap: float | None,
    logit_clamp: float | None,
    float32_softmax: bool,
    subtract_max: bool,
) -> LogitOptions:
  """Validates the scalar options and turns (scale, rule) into one rule and one factor."""
  if scale is not None and rule is not None:
    raise ValueError("give either `scale` or `rule`, not both")
  rule_obj = rules_lib.get_rule("sqrt" if rule is None else rule)
  if scale is not None:
    s, w = _as_scalar(scale), 1.0
  else:
    s, w = _as_scalar(rule_obj.logit_scale(head_dim)), _as_scalar(rule_obj.weight_scale(head_dim))
  for name, v in (("logit_soft_cap", logit_soft_cap), ("logit_clamp", logit_clamp)):
    if v is not None and not (np.isfinite(v) and v > 0):
      raise ValueError(f"{name} must be a positive finite number, got {v}")
  return LogitOptions(rule_obj, s, w, logit_soft_cap, logit_clamp, bool(float32_softmax), bool(subtract_max))


def _as_scalar(x: Any) -> float | Array:
  """A Python float, or a scalar array left as is so that scales can be traced (vmapped over rules)."""
  if isinstance(x, (jax.Array, np.ndarray)) and not isinstance(x, jax.core.Tracer) and x.ndim == 0:
    return float(x)
  if isinstance(x, jax.core.Tracer):
    return x
  return float(x)


def is_unit_scale(x: float | Array) -> bool:
  """True only for a concrete scale of exactly 1 (traced scales are never skipped)."""
  return isinstance(x, float) and x == 1.0


def check_qkv(query: Array, key: Array, value: Array) -> tuple[Array, Array, Array, bool]:
  """Validates shapes; adds a batch axis to unbatched [T, N, H] inputs. Returns (q, k, v, batched)."""
  query, key, value = jnp.asarray(query), jnp.asarray(key), jnp.asarray(value)
  if not query.ndim == key.ndim == value.ndim or query.ndim not in (3, 4):
    raise ValueError(
        f"query, key and value must all be [B, T, N, H] or [T, N, H]; got {query.shape}, {key.shape}, {value.shape}")
  batched = query.ndim == 4
  if not batched:
    query, key, value = query[None], key[None], value[None]
  if key.shape != value.shape:
    raise ValueError(f"key and value must have the same shape, got {key.shape} and {value.shape}")
  if query.shape[0] != key.shape[0] or query.shape[-1] != key.shape[-1]:
    raise ValueError(f"query {query.shape} and key {key.shape} must agree in batch and head_dim")
  if query.shape[2] % key.shape[2]:
    raise ValueError(f"query heads ({query.shape[2]}) must be a multiple of key heads ({key.shape[2]})")
  return query, key, value, batched


def shape_logits(logits: Array, bias: Array | None, opts: LogitOptions) -> Array:
  """Applies scale, bias, soft cap and clamp to raw dot products (float32 or input dtype)."""
  logits = logits * jnp.asarray(opts.scale, logits.dtype)
  if bias is not None:
    logits = (logits + bias).astype(logits.dtype)
  if opts.logit_soft_cap is not None:
    cap = jnp.asarray(opts.logit_soft_cap, logits.dtype)
    logits = cap * jnp.tanh(logits / cap)
  if opts.logit_clamp is not None:
    logits = jnp.clip(logits, -opts.logit_clamp, opts.logit_clamp)
  return logits


def masked_softmax(logits: Array, mask: Array | None, *, subtract_max: bool = True) -> Array:
  """Softmax over the last axis; masked entries get weight 0 and fully masked rows are all 0.

  With ``subtract_max=False`` the exponentials are taken of the raw logits, which
  overflows in low precision: it exists only to demonstrate that failure.
  """
  if subtract_max:
    # jax.nn.softmax has a custom JVP (y·(g − Σ y·g)), so its backward keeps only the weights;
    # with `where` it gives 0 to masked entries and to fully masked rows.
    return jax.nn.softmax(logits, axis=-1, where=mask)
  if mask is not None:
    logits = jnp.where(mask, logits, -jnp.inf)
  e = jnp.exp(logits)
  denom = jnp.sum(e, axis=-1, keepdims=True)
  return e / jnp.where(denom == 0, jnp.ones_like(denom), denom)
