"""The attention computations of the random-input claims beside the library's attention itself.

The variance of the library's logits and its rules stacked to ``jax.vmap`` over; attention output in low precision
with q·k accumulated and the softmax run each in float32 or the input dtype; attention with q·k clamped before the
scale; the online softmax with every step in the inputs' dtype; and the fraction of non-finite output rows.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from scaling.attention import dense as dense_lib
from scaling.attention import dispatch as attention_lib
from scaling.attention import logits as logits_lib
from scaling.attention import rules as rules_lib

LOW_PRECISION = {"float16": jnp.float16, "bfloat16": jnp.bfloat16}  # the low-precision input dtypes


def logit_var(q: jax.Array, k: jax.Array, rule: str | rules_lib.ScaleRule) -> jax.Array:
  """The variance of ``rule``'s attention logits over all their entries (through the library's logits).

  Args:
    q, k: [B, T, N, H] queries and [B, S, N, H] keys.
    rule: the logit-scale rule.

  Returns:
    The variance, a scalar.
  """
  return jnp.var(dense_lib.attention_logits(q, k, rule=rule))


def stacked_rules(names: tuple[str, ...], d_k: int) -> rules_lib.FixedScale:
  """Several rules as one ``FixedScale`` pytree to ``jax.vmap`` over (one compile for all of them).

  Args:
    names: rule names of rules without a prepare step.
    d_k: the head dim they are fixed at.

  Returns:
    A ``FixedScale`` whose ``logit`` and ``weight`` are [len(names)] float32.
  """
  fixed = [rules_lib.as_fixed_scale(rules_lib.get_rule(n), d_k) for n in names]
  return rules_lib.FixedScale(jnp.asarray([f.logit for f in fixed], jnp.float32),
                              jnp.asarray([f.weight for f in fixed], jnp.float32))


def low_precision_output(q, k, v, *, dtype, rule: str, acc32: bool, softmax32: bool, subtract_max: bool):
  """Attention output of q, k, v cast to ``dtype``, with q·k accumulated and softmax computed as asked.

  The library's ``float32_softmax`` switch covers both in float32 (True) or both in the input dtype (False);
  the mixed cases take the library's logits in one precision and its softmax in the other.

  Args:
    q: [B, T, N, H] queries.
    k, v: [B, S, N, H] keys and values.
    dtype: the low-precision dtype the inputs are cast to.
    rule: the logit-scale rule.
    acc32: accumulate q·k in float32 (else in ``dtype``).
    softmax32: run the softmax in float32 (else in ``dtype``).
    subtract_max: subtract the row maximum before exp.

  Returns:
    [B, T, N, H].
  """
  q, k, v = (x.astype(dtype) for x in (q, k, v))
  if acc32 == softmax32:
    return attention_lib.dot_product_attention(q, k, v, rule=rule, float32_softmax=acc32, subtract_max=subtract_max)
  logits = dense_lib.attention_logits(q, k, rule=rule, float32_softmax=acc32, subtract_max=subtract_max)
  logits = logits.astype(jnp.float32 if softmax32 else dtype)
  weights = logits_lib.masked_softmax(logits, None, subtract_max=subtract_max).astype(dtype)
  return jnp.einsum("bnts,bsnh->btnh", weights, v)


def nonfinite_rows(out: jax.Array) -> jax.Array:
  """The fraction of query rows [B, T, N] of an attention output [B, T, N, H] with a non-finite entry."""
  return jnp.mean(jnp.any(~jnp.isfinite(out.astype(jnp.float32)), axis=-1))


def clamped_attention(q, k, v, *, rule: rules_lib.ScaleRule, clamp: float, subtract_max: bool) -> jax.Array:
  """softmax(clip(q·k, −clamp, clamp)·s)·v with q·k, the clip and the softmax in the inputs' dtype (note 2 §3).

  Args:
    q: [B, T, N, H] queries.
    k, v: [B, S, N, H] keys and values.
    rule: a ``FixedScale`` (its ``logit`` factor s is applied after the clip).
    clamp: the bound c of the clip, before the scale.
    subtract_max: subtract the row maximum before exp.

  Returns:
    [B, T, N, H], in the inputs' dtype.
  """
  z = dense_lib.attention_logits(q, k, rule="none", float32_softmax=False, subtract_max=subtract_max)
  z = jnp.clip(z, -clamp, clamp) * jnp.asarray(rule.logit, z.dtype)
  weights = logits_lib.masked_softmax(z, None, subtract_max=subtract_max).astype(q.dtype)
  return jnp.einsum("bnts,bsnh->btnh", weights, v)


def online_softmax_attention(q: jax.Array, k: jax.Array, v: jax.Array, *, scale: float, block: int) -> jax.Array:
  """softmax(s·q·k)·v by the online softmax (FlashAttention's recurrence: a running maximum, sum and output over key
  blocks) with every step in the inputs' dtype, q·k accumulated in it too.

  The library's ``scaling.attention.blockwise`` runs the same recurrence with q·k and the statistics in float32; this
  one keeps the inputs' dtype throughout, so that it can be compared with dense attention at the same accumulation
  dtype.

  Args:
    q: [B, T, N, H] queries.
    k, v: [B, S, N, H] keys and values; S a multiple of ``block``.
    scale: the logit factor s.
    block: keys per block.

  Returns:
    [B, T, N, H] in the inputs' dtype.
  """
  if k.shape[1] % block:
    raise ValueError(f"block must divide the key length {k.shape[1]}, got {block}")
  dt = q.dtype
  b, t, n, h = q.shape
  m = jnp.full((b, n, t), -jnp.inf, dt)
  total = jnp.zeros((b, n, t), dt)
  acc = jnp.zeros((b, n, t, h), dt)
  for j in range(0, k.shape[1], block):
    z = jnp.einsum("btnh,bsnh->bnts", q, k[:, j:j + block], preferred_element_type=dt) * jnp.asarray(scale, dt)
    m_new = jnp.maximum(m, jnp.max(z, axis=-1))
    p = jnp.exp(z - m_new[..., None])
    alpha = jnp.exp(m - m_new)
    total = alpha * total + jnp.sum(p, axis=-1, dtype=dt)
    acc = alpha[..., None] * acc + jnp.einsum("bnts,bsnh->bnth", p, v[:, j:j + block], preferred_element_type=dt)
    m = m_new
  return jnp.transpose(acc / total[..., None], (0, 2, 1, 3))
