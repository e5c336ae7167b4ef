"""Attention metrics as pure, jit-able functions.

Every ``*_per_head`` function takes logits or weights shaped [B, N, T, S] and an
optional boolean visibility mask broadcastable to that shape (as returned by
``scaling.attention_logits_and_weights``; causal masks included), and returns
one value per head, [N], averaged over batch and the visible query rows. Rows
with no visible key are left out of every average. ``average_heads`` turns a
dict of per-head values into scalars.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from scaling import attention as attention_lib

Array = jax.Array

SATURATION_THRESHOLD = 0.99


def _visible(shape: tuple[int, ...], mask: Array | None) -> Array:
  """Boolean visibility [B, N, T, S] (all True without a mask)."""
  if mask is None:
    return jnp.ones(shape, bool)
  return jnp.broadcast_to(mask, shape)


def _mean_over_rows(x_bnt: Array, valid_bnt: Array) -> Array:
  """Mean of per-row values over batch and query rows where valid, per head [N]."""
  w = valid_bnt.astype(jnp.float32)
  total = jnp.sum(jnp.where(valid_bnt, x_bnt, 0.0), axis=(0, 2))
  return total / jnp.maximum(jnp.sum(w, axis=(0, 2)), 1.0)


def logit_stats_per_head(logits: Array, mask: Array | None = None) -> dict[str, Array]:
  """Mean, variance, std and max |z| of the visible logits of each head.

  Args:
    logits: [B, N, T, S].
    mask: optional boolean visibility, broadcastable to [B, N, T, S].

  Returns:
    dict with ``mean``, ``var``, ``std``, ``absmax``, each [N] (population
    statistics over all visible entries of the head).
  """
  z = logits.astype(jnp.float32)
  vis = _visible(z.shape, mask)
  count = jnp.maximum(jnp.sum(vis, axis=(0, 2, 3)), 1)
  mean = jnp.sum(jnp.where(vis, z, 0.0), axis=(0, 2, 3)) / count
  centred = jnp.where(vis, z - mean[None, :, None, None], 0.0)
  var = jnp.sum(centred * centred, axis=(0, 2, 3)) / count
  absmax = jnp.max(jnp.where(vis, jnp.abs(z), 0.0), axis=(0, 2, 3))
  return {"mean": mean, "var": var, "std": jnp.sqrt(var), "absmax": absmax}


def softmax_distribution(weights: Array, mask: Array | None = None) -> Array:
  """Renormalizes weights [..., S] to sum to one per visible row (undoes post-softmax scaling)."""
  w = weights.astype(jnp.float32)
  if mask is not None:
    w = jnp.where(mask, w, 0.0)
  total = jnp.sum(w, axis=-1, keepdims=True)
  return w / jnp.where(total > 0, total, 1.0)


def row_entropy(p: Array) -> Array:
  """Entropy in nats of each row of a distribution p [..., S]; 0·log 0 = 0."""
  p = p.astype(jnp.float32)
  return -jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0), axis=-1)


def softmax_jacobian(p: Array) -> Array:
  """The softmax Jacobian ∂p/∂z = diag(p) − ppᵀ for each row p [..., S]; returns [..., S, S]."""
  return jnp.einsum("...i,ij->...ij", p, jnp.eye(p.shape[-1], dtype=p.dtype)) - p[..., :, None] * p[..., None, :]


def softmax_jacobian_fro_norm(p: Array) -> Array:
  """Frobenius norm of diag(p) − ppᵀ per row, in closed form: √(Σp² − 2Σp³ + (Σp²)²)."""
  p = p.astype(jnp.float32)
  s2 = jnp.sum(p * p, axis=-1)
  s3 = jnp.sum(p * p * p, axis=-1)
  return jnp.sqrt(jnp.maximum(s2 - 2.0 * s3 + s2 * s2, 0.0))


def _weight_row_values(weights: Array, mask: Array | None) -> tuple[dict[str, Array], Array, Array]:
  """Per-row values [B, N, T] of each weight statistic, the rows they average over, and the entropy-normalized rows."""
  vis = _visible(weights.shape, mask)
  p = softmax_distribution(weights, vis)
  n_visible = jnp.sum(vis, axis=-1)
  ent = row_entropy(p)
  log_n = jnp.log(jnp.maximum(n_visible, 2).astype(jnp.float32))
  max_p = jnp.max(p, axis=-1)
  rows = {
      "entropy": ent,
      "entropy_normalized": ent / log_n,
      "max_prob": max_p,
      "saturated_frac": (max_p > SATURATION_THRESHOLD).astype(jnp.float32),
      "softmax_jacobian_norm": softmax_jacobian_fro_norm(p),
  }
  return rows, n_visible > 0, n_visible > 1


def weight_stats_per_head(weights: Array, mask: Array | None = None) -> dict[str, Array]:
  """Entropy, normalized entropy, max probability, saturated fraction and Jacobian norm per head.

  Args:
    weights: attention weights [B, N, T, S]; renormalized per row first, so the
      post-softmax rule is measured on its softmax.
    mask: optional boolean visibility broadcastable to [B, N, T, S].

  Returns:
    dict of [N] arrays: ``entropy`` (nats), ``entropy_normalized`` (entropy /
    ln(#visible keys), over rows with at least 2 visible keys), ``max_prob``,
    ``saturated_frac`` (rows with max p > 0.99), ``softmax_jacobian_norm``
    (Frobenius norm of diag(p) − ppᵀ).
  """
  rows, valid, valid_norm = _weight_row_values(weights, mask)
  return {k: _mean_over_rows(v, valid_norm if k == "entropy_normalized" else valid) for k, v in rows.items()}


def _norm_per_head(x: Array, head_axis: int) -> Array:
  """Frobenius norm over all axes but batch (0) and ``head_axis``, averaged over batch: [heads]."""
  x = x.astype(jnp.float32)
  axes = tuple(a for a in range(x.ndim) if a not in (0, head_axis))
  return jnp.mean(jnp.sqrt(jnp.sum(x * x, axis=axes)), axis=0)


def attention_metrics_per_head(query: Array, key: Array, value: Array, cotangent: Array,
                               bias: Array | None = None, mask: Array | None = None,
                               **attention_kwargs: Any) -> dict[str, Array]:
  """All metrics of one attention call, per head, from a single forward and backward pass.

  The gradients are those of ⟨cotangent, attention(q, k, v)⟩; the logit
  gradient is taken with respect to the scaled logits (before soft cap and
  clamp) by differentiating through a zero additive bias.

  Args:
    query, key, value: [B, T, N, H], [B, S, K, H], [B, S, K, H].
    cotangent: the fixed upstream gradient, [B, T, N, H].
    bias, mask, **attention_kwargs: as for ``scaling.dot_product_attention``.

  Returns:
    dict of per-head arrays: ``logit_mean``, ``logit_var``, ``logit_std``,
    ``logit_absmax`` and the keys of ``weight_stats_per_head`` [N];
    ``grad_norm_q`` [N], ``grad_norm_k`` [K], ``grad_norm_v`` [K],
    ``grad_norm_logits`` [N]: Frobenius norms over positions and head_dim (over
    T and S for the logits), averaged over the batch.
  """
  b, t, n, _ = query.shape
  zero = jnp.zeros((b, n, t, key.shape[1]), jnp.float32)

  def f(q, k, v, delta):
    total_bias = delta if bias is None else delta + bias
    out, logits, weights, vis = attention_lib.attention_with_aux(q, k, v, total_bias, mask, **attention_kwargs)
    return out, (logits, weights, vis)

  _, vjp, (logits, weights, vis) = jax.vjp(f, query, key, value, zero, has_aux=True)
  gq, gk, gv, gz = vjp(cotangent.astype(query.dtype))
  out = {f"logit_{k}": v for k, v in logit_stats_per_head(logits, vis).items()}
  out.update(weight_stats_per_head(weights, vis))
  out.update({
      "grad_norm_q": _norm_per_head(gq, 2),
      "grad_norm_k": _norm_per_head(gk, 2),
      "grad_norm_v": _norm_per_head(gv, 2),
      "grad_norm_logits": _norm_per_head(gz, 1),
  })
  return out


def average_heads(per_head: dict[str, Array]) -> dict[str, Array]:
  """Averages each per-head metric over its head axis (the last one)."""
  return {k: jnp.mean(v, axis=-1) for k, v in per_head.items()}


def blockwise_attention_metrics_per_head(query: Array, key: Array, value: Array, cotangent: Array, *,
                                         block_q: int = 128, block_k: int = 128, rule: Any = None,
                                         is_causal: bool = False) -> dict[str, Array]:
  """``attention_metrics_per_head`` in O(T·block) memory instead of O(T·S).

  The output and the gradients w.r.t. q, k and v come from
  ``scaling.blockwise_attention`` (online softmax, recomputing backward pass);
  the logit and weight statistics and the logit gradient are accumulated one
  block of ``block_q`` query rows at a time (exact sums, then the same
  averages as the dense function). The logit gradient uses the closed form
  dL/dz = w ⊙ (dL/dw − Σ p·dL/dw) with dL/dw = cotangent·vᵀ.

  Args:
    query, key, value, cotangent: as ``attention_metrics_per_head``.
    block_q, block_k: tile sizes.
    rule: a logit-scale rule name or object.
    is_causal: causal masking.

  Returns:
    The same dict of per-head arrays as ``attention_metrics_per_head``.
  """
  from scaling import blockwise as blockwise_lib  # pylint: disable=g-import-not-at-top

  b, t, n, h = query.shape
  s_len, kh = key.shape[1], key.shape[2]
  attend = lambda q, k, v: blockwise_lib.blockwise_attention(q, k, v, block_q=block_q, block_k=block_k, rule=rule,
                                                             is_causal=is_causal)
  _, vjp = jax.vjp(attend, query, key, value)
  gq, gk, gv = vjp(cotangent.astype(query.dtype))

  bq = min(block_q, t)
  nb = -(-t // bq)
  pad = ((0, 0), (0, nb * bq - t), (0, 0), (0, 0))
  q_blocks = jnp.moveaxis(jnp.pad(query, pad).reshape(b, nb, bq, n, h), 1, 0)
  g_blocks = jnp.moveaxis(jnp.pad(cotangent, pad).reshape(b, nb, bq, n, h), 1, 0)
  v_rep = jnp.repeat(value.astype(jnp.float32), n // kh, axis=2)

  def block_sums(args):
    i, q_i, g_i = args
    q_pos = i * bq + jnp.arange(bq)
    mask = (q_pos < t)[None, None, :, None]
    causal = attention_lib.combined_mask(b, n, bq, s_len, is_causal=is_causal, q_offset=i * bq)
    if causal is not None:
      mask = mask & causal
    _, logits, weights, vis = attention_lib.attention_with_aux(q_i, key, key, mask=mask, rule=rule)
    vis = _visible(logits.shape, vis)
    z = jnp.where(vis, logits.astype(jnp.float32), 0.0)
    rows, valid, valid_norm = _weight_row_values(weights, vis)
    out = {"count": jnp.sum(vis, axis=(0, 2, 3)), "z": jnp.sum(z, axis=(0, 2, 3)),
           "z2": jnp.sum(z * z, axis=(0, 2, 3)), "absmax": jnp.max(jnp.abs(z), axis=(0, 2, 3)),
           "rows": jnp.sum(valid, axis=(0, 2)), "rows_norm": jnp.sum(valid_norm, axis=(0, 2))}
    for name, v in rows.items():
      out[name] = jnp.sum(jnp.where(valid_norm if name == "entropy_normalized" else valid, v, 0.0), axis=(0, 2))
    w = weights.astype(jnp.float32)
    p = softmax_distribution(w, vis)
    dw = jnp.einsum("btnh,bsnh->bnts", g_i.astype(jnp.float32), v_rep)
    dz = w * (dw - jnp.sum(p * dw, axis=-1, keepdims=True))
    out["dz2"] = jnp.sum(dz * dz, axis=(2, 3))  # [B, N]
    return out

  sums = jax.lax.map(block_sums, (jnp.arange(nb), q_blocks, g_blocks))
  total = {k: (jnp.max(v, axis=0) if k == "absmax" else jnp.sum(v, axis=0)) for k, v in sums.items()}
  count = jnp.maximum(total["count"], 1)
  mean = total["z"] / count
  var = jnp.maximum(total["z2"] / count - mean * mean, 0.0)
  out = {"logit_mean": mean, "logit_var": var, "logit_std": jnp.sqrt(var), "logit_absmax": total["absmax"]}
  for name in ("entropy", "entropy_normalized", "max_prob", "saturated_frac", "softmax_jacobian_norm"):
    rows = total["rows_norm"] if name == "entropy_normalized" else total["rows"]
    out[name] = total[name] / jnp.maximum(rows, 1)
  out.update({
      "grad_norm_q": _norm_per_head(gq, 2),
      "grad_norm_k": _norm_per_head(gk, 2),
      "grad_norm_v": _norm_per_head(gv, 2),
      "grad_norm_logits": jnp.mean(jnp.sqrt(total["dz2"]), axis=0),
  })
  return out
