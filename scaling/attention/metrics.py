"""Attention metrics as pure, jit-able functions, all computed through one mergeable accumulator.

Every ``*_per_head`` function takes logits or weights shaped [B, N, T, S] and an
optional boolean visibility mask broadcastable to that shape (as returned by
``scaling.attention.dense.attention_logits_and_weights``; causal masks included), and returns
one value per head, [N], averaged over batch and the visible query rows. Rows
with no visible key are left out of every average. ``average_heads`` turns a
dict of per-head values into scalars.

The statistics are sums over query rows kept in a ``MetricSums`` pytree:
``metric_sums`` computes them for one block of query rows, ``merge_sums``
combines two blocks (the logit mean and variance by the parallel update of Chan,
Golub & LeVeque 1979) and ``finalize_sums`` turns them into per-head metrics.
The dense metrics are those of a single block that holds every row; the
blockwise metrics merge blocks of query rows, so both use the same formulas.
"""

from __future__ import annotations

from typing import Any

from flax import struct
import jax
import jax.numpy as jnp
import numpy as np

from scaling.attention import blockwise as blockwise_lib
from scaling.attention import dense as dense_lib
from scaling.attention import logits as logits_lib
from scaling.attention import masking as masking_lib
from scaling.base import validation

Array = jax.Array

SATURATION_THRESHOLD = 0.99

_SUM_AXES = (0, 2, 3)  # batch, query rows and keys of a [B, N, T, S] array


def _visible(shape: tuple[int, ...], mask: Array | None) -> Array:
  """Boolean visibility [B, N, T, S] (all True without a mask)."""
  if mask is None:
    return jnp.ones(shape, bool)
  return jnp.broadcast_to(mask, shape)


@struct.dataclass
class MetricSums:
  """Mergeable per-head partial sums of the attention metrics over a block of query rows.

  A field is None when the input it comes from was not given to ``metric_sums``
  (logits: ``count`` to ``absmax``; weights: ``rows`` to ``row_sums``;
  logit gradients: ``dlogits_sq``).
  """

  count: Array | None = None  # [N] int: visible logits
  mean: Array | None = None  # [N]: their mean
  m2: Array | None = None  # [N]: the sum of their squared deviations from the mean
  absmax: Array | None = None  # [N]: their largest |z| (0 when none is visible)
  rows: Array | None = None  # [N] int: (batch, query) rows with at least one visible key
  rows_norm: Array | None = None  # [N] int: rows with at least two visible keys (normalized entropy)
  row_sums: dict[str, Array] | None = None  # weight statistic -> [N] sum of its per-row values over its rows
  dlogits_sq: Array | None = None  # [B, N]: the sum of squared logit gradients over rows and keys

def softmax_distribution(weights: Array, mask: Array | None = None) -> Array:
  """Renormalizes weights [..., S] to sum to one per visible row (undoes post-softmax scaling)."""
  w = weights.astype(jnp.float32)
  if mask is not None:
    w = jnp.where(mask, w, 0.0)
  total = jnp.sum(w, axis=-1, keepdims=True)
  return w / jnp.where(total > 0, total, 1.0)


def row_entropy(p: Array) -> Array:
  """Entropy in nats of each row of a distribution p [..., S]; 0·log 0 = 0."""
  logits_lib.check_scores("p", p)
  return _row_entropy(p)


def _row_entropy(p: Array) -> Array:
  """``row_entropy`` of a checked p."""
  p = p.astype(jnp.float32)
  return -jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0), axis=-1)


def softmax_jacobian(p: Array) -> Array:
  """The softmax Jacobian ∂p/∂z = diag(p) − ppᵀ for each row p [..., S]; returns [..., S, S]."""
  logits_lib.check_scores("p", p)
  return jnp.einsum("...i,ij->...ij", p, jnp.eye(p.shape[-1], dtype=p.dtype)) - p[..., :, None] * p[..., None, :]


def softmax_jacobian_fro_norm(p: Array) -> Array:
  """Frobenius norm of diag(p) − ppᵀ per row, in closed form: √(Σp² − 2Σp³ + (Σp²)²)."""
  logits_lib.check_scores("p", p)
  return _jacobian_fro_norm(p)


def _jacobian_fro_norm(p: Array) -> Array:
  """``softmax_jacobian_fro_norm`` of a checked p."""
  p = p.astype(jnp.float32)
  s2 = jnp.sum(p * p, axis=-1)
  s3 = jnp.sum(p * p * p, axis=-1)
  return jnp.sqrt(jnp.maximum(s2 - 2.0 * s3 + s2 * s2, 0.0))


def _weight_row_values(weights: Array, mask: Array | None) -> tuple[dict[str, Array], Array, Array]:
  """Per-row values [B, N, T] of each weight statistic, the rows they average over, and the entropy-normalized rows."""
  vis = _visible(weights.shape, mask)
  p = softmax_distribution(weights, vis)
  n_visible = jnp.sum(vis, axis=-1)
  ent = _row_entropy(p)
  log_n = jnp.log(jnp.maximum(n_visible, 2).astype(jnp.float32))
  max_p = jnp.max(p, axis=-1)
  rows = {
      "entropy": ent,
      "entropy_normalized": ent / log_n,
      "max_prob": max_p,
      "saturated_frac": (max_p > SATURATION_THRESHOLD).astype(jnp.float32),
      "softmax_jacobian_norm": _jacobian_fro_norm(p),
  }
  return rows, n_visible > 0, n_visible > 1


def metric_sums(logits: Array | None = None, weights: Array | None = None, mask: Array | None = None,
                dlogits: Array | None = None) -> MetricSums:
  """The partial sums of one block of query rows, for whichever of logits, weights and logit gradients are given.

  Args:
    logits: [B, N, T, S], or None.
    weights: attention weights [B, N, T, S] (renormalized per row, so the
      post-softmax rule is measured on its softmax), or None.
    mask: optional boolean visibility broadcastable to [B, N, T, S].
    dlogits: the gradient of the loss w.r.t. the logits [B, N, T, S], or None.

  Returns:
    A ``MetricSums`` (fields of inputs not given are None).
  """
  sums = {}
  if logits is not None:
    z = logits.astype(jnp.float32)
    vis = _visible(z.shape, mask)
    count = jnp.sum(vis, axis=_SUM_AXES)
    mean = jnp.sum(jnp.where(vis, z, 0.0), axis=_SUM_AXES) / jnp.maximum(count, 1)
    centred = jnp.where(vis, z - mean[None, :, None, None], 0.0)
    sums.update(count=count, mean=mean, m2=jnp.sum(centred * centred, axis=_SUM_AXES),
                absmax=jnp.max(jnp.where(vis, jnp.abs(z), 0.0), axis=_SUM_AXES))
  if weights is not None:
    rows, valid, valid_norm = _weight_row_values(weights, mask)
    row_sum = lambda x, where: jnp.sum(jnp.where(where, x, 0.0), axis=(0, 2))
    sums.update(rows=jnp.sum(valid, axis=(0, 2)), rows_norm=jnp.sum(valid_norm, axis=(0, 2)),
                row_sums={k: row_sum(v, valid_norm if k == "entropy_normalized" else valid) for k, v in rows.items()})
  if dlogits is not None:
    dz = dlogits.astype(jnp.float32)
    sums["dlogits_sq"] = jnp.sum(dz * dz, axis=(2, 3))
  return MetricSums(**sums)


def merge_sums(a: MetricSums, b: MetricSums) -> MetricSums:
  """The sums of two disjoint blocks of query rows taken together.

  Args:
    a, b: sums with the same fields present (and, for ``dlogits_sq``, the same batch).

  Returns:
    Their ``MetricSums``: counts and row sums add, ``absmax`` takes the larger,
    and mean and M2 combine by Chan et al.'s parallel formula (exact for empty blocks).
  """
  add = lambda x, y: None if x is None else jax.tree.map(jnp.add, x, y)
  merged = {k: add(getattr(a, k), getattr(b, k)) for k in ("rows", "rows_norm", "row_sums", "dlogits_sq")}
  if a.count is not None:
    count = a.count + b.count
    frac_b = b.count.astype(jnp.float32) / jnp.maximum(count, 1).astype(jnp.float32)
    delta = b.mean - a.mean
    merged.update(count=count, mean=a.mean + delta * frac_b,
                  m2=a.m2 + b.m2 + delta * delta * a.count.astype(jnp.float32) * frac_b,
                  absmax=jnp.maximum(a.absmax, b.absmax))
  return MetricSums(**merged)


def finalize_sums(sums: MetricSums) -> dict[str, Array]:
  """The per-head metrics of accumulated sums.

  Args:
    sums: a ``MetricSums`` of one block or of merged blocks.

  Returns:
    dict of per-head arrays, for the fields present: ``logit_mean``,
    ``logit_var`` (population variance), ``logit_std``, ``logit_absmax`` [N];
    the keys of ``weight_stats_per_head`` [N] (means over the rows with a
    visible key, normalized entropy over those with two or more);
    ``grad_norm_logits`` [N] (Frobenius norm over rows and keys, averaged over
    the batch).
  """
  out = {}
  if sums.count is not None:
    var = sums.m2 / jnp.maximum(sums.count, 1)
    out.update(logit_mean=sums.mean, logit_var=var, logit_std=jnp.sqrt(var), logit_absmax=sums.absmax)
  if sums.row_sums is not None:
    for k, total in sums.row_sums.items():
      rows = sums.rows_norm if k == "entropy_normalized" else sums.rows
      out[k] = total / jnp.maximum(rows, 1)
  if sums.dlogits_sq is not None:
    out["grad_norm_logits"] = jnp.mean(jnp.sqrt(sums.dlogits_sq), axis=0)
  return out


def logit_stats_per_head(logits: Array, mask: Array | None = None) -> dict[str, Array]:
  """Mean, variance, std and max |z| of the visible logits of each head.

  Args:
    logits: [B, N, T, S].
    mask: optional boolean visibility, broadcastable to [B, N, T, S].

  Returns:
    dict with ``mean``, ``var``, ``std``, ``absmax``, each [N] (population
    statistics over all visible entries of the head).
  """
  logits_lib.check_scores("logits", logits, mask, rank=4, layout="[B, N, T, S]")
  stats = finalize_sums(metric_sums(logits=logits, mask=mask))
  return {k.removeprefix("logit_"): v for k, v in stats.items()}


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
  logits_lib.check_scores("weights", weights, mask, rank=4, layout="[B, N, T, S]")
  return finalize_sums(metric_sums(weights=weights, mask=mask))


def _norm_per_head(x: Array, head_axis: int) -> Array:
  """Frobenius norm over all axes but batch (0) and ``head_axis``, averaged over batch: [heads]."""
  x = x.astype(jnp.float32)
  axes = tuple(a for a in range(x.ndim) if a not in (0, head_axis))
  return jnp.mean(jnp.sqrt(jnp.sum(x * x, axis=axes)), axis=0)


def _input_grad_norms(gq: Array, gk: Array, gv: Array) -> dict[str, Array]:
  """Per-head gradient norms of q [N], k [K] and v [K] from gradients laid out [B, T|S, heads, H]."""
  return {"grad_norm_q": _norm_per_head(gq, 2), "grad_norm_k": _norm_per_head(gk, 2),
          "grad_norm_v": _norm_per_head(gv, 2)}


def _block_sums(query: Array, key: Array, value: Array, cotangent: Array, bias: Array | None, mask: Array | None,
                opts: logits_lib.LogitOptions, *, input_grads: bool,
                **mask_kwargs: Any) -> tuple[MetricSums, tuple[Array, ...] | None]:
  """Dense-path ``MetricSums`` of a block of query rows of checked inputs, and the (q, k, v) gradients when
  ``input_grads``."""
  b, t, n, _ = query.shape
  zero = jnp.zeros((b, n, t, key.shape[1]), jnp.float32)

  def f(q, k, v, delta):
    total_bias = delta if bias is None else delta + bias
    out, logits, weights, vis = dense_lib.attention_with_aux_unchecked(q, k, v, total_bias, mask, opts, **mask_kwargs)
    return out, (logits, weights, vis)

  cotangent = cotangent.astype(query.dtype)
  if input_grads:
    _, vjp, (logits, weights, vis) = jax.vjp(f, query, key, value, zero, has_aux=True)
    *grads, gz = vjp(cotangent)
  else:  # only the logit gradient: no q, k or v cotangents are computed
    _, vjp, (logits, weights, vis) = jax.vjp(lambda delta: f(query, key, value, delta), zero, has_aux=True)
    (gz,), grads = vjp(cotangent), None
  return metric_sums(logits, weights, vis, gz), grads


def attention_metrics_per_head(query: Array, key: Array, value: Array, cotangent: Array,
                               bias: Array | None = None, mask: Array | None = None,
                               **attention_kwargs: Any) -> dict[str, Array]:
  """All metrics of one attention call, per head, from a single forward and backward pass.

  The gradients are those of ⟨cotangent, attention(q, k, v)⟩; the logit
  gradient is taken with respect to the scaled logits (before soft cap and
  clamp) by differentiating through a zero additive bias. The statistics are
  ``finalize_sums`` of one block holding all query rows.

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
  query, key, value, opts = check_metric_inputs(query, key, value, cotangent, bias, mask, **attention_kwargs)
  mask_kwargs = {k: v for k, v in attention_kwargs.items() if k in logits_lib.MASK_ARGS}
  sums, grads = _block_sums(query, key, value, cotangent, bias, mask, opts, input_grads=True, **mask_kwargs)
  return {**finalize_sums(sums), **_input_grad_norms(*grads)}


def check_metric_inputs(query: Array, key: Array, value: Array, cotangent: Array, bias: Array | None = None,
                        mask: Array | None = None,
                        **attention_kwargs: Any) -> tuple[Array, Array, Array, logits_lib.LogitOptions]:
  """Every check of a metrics call: batched q, k, v, the attention's arguments, a cotangent shaped like the output.

  Args:
    query, key, value, cotangent, bias, mask, **attention_kwargs: as ``attention_metrics_per_head``.

  Returns:
    ``(query, key, value, opts)``: the arrays as ``scaling.attention.logits.check_inputs`` returns them, and the resolved
    logit options.

  Raises:
    ConfigError or ConfigTypeError naming the argument.
  """
  validation.check_rank("query", query, (4,), "[B, T, N, H]")
  query, key, value, _, opts = logits_lib.check_inputs(query, key, value, bias, mask, **attention_kwargs)
  expected = query.shape[:3] + value.shape[3:]
  if np.shape(cotangent) != expected:
    raise validation.ConfigError(f"cotangent must have the output's shape [B, T, N, H] = {expected}, "
                                 f"got {np.shape(cotangent)}")
  validation.check_floating("cotangent", cotangent)
  return query, key, value, opts


def average_heads(per_head: dict[str, Array]) -> dict[str, Array]:
  """Averages each per-head metric over its head axis (the last one)."""
  if not isinstance(per_head, dict):
    raise validation.ConfigTypeError(f"per_head must be a dict of per-head arrays, got {type(per_head).__name__}")
  return {k: jnp.mean(v, axis=-1) for k, v in per_head.items()}


def blockwise_attention_metrics_per_head(query: Array, key: Array, value: Array, cotangent: Array, *,
                                         block_q: int = 128, block_k: int = 128, rule: Any = None,
                                         is_causal: bool = False) -> dict[str, Array]:
  """``attention_metrics_per_head`` in O(T·block) memory instead of O(T·S).

  The output and the gradients w.r.t. q, k and v come from
  ``scaling.blockwise_attention`` (online softmax, recomputing backward pass).
  The logit and weight statistics and the logit gradient come from the dense
  path run on one block of ``block_q`` query rows at a time (rows are
  independent, so each block's logit gradient is exact), and the blocks'
  ``MetricSums`` are merged in a ``lax.scan``: the same sums, merge and
  finalization as the dense function.

  Args:
    query, key, value, cotangent: as ``attention_metrics_per_head``.
    block_q, block_k: tile sizes.
    rule: a logit-scale rule name or object.
    is_causal: causal masking.

  Returns:
    The same dict of per-head arrays as ``attention_metrics_per_head``.
  """
  blockwise_lib.check_blocks(block_q, block_k)
  query, key, value, opts = check_metric_inputs(query, key, value, cotangent, rule=rule, is_causal=is_causal)
  b, t, n, h = query.shape
  attend = lambda q, k, v: blockwise_lib.blockwise_attention_unchecked(q, k, v, None, None, opts, block_q=block_q,
                                                                       block_k=block_k, is_causal=is_causal)
  _, vjp = jax.vjp(attend, query, key, value)
  grads = vjp(cotangent.astype(query.dtype))

  bq = min(block_q, t)
  nb = -(-t // bq)
  pad = ((0, 0), (0, nb * bq - t), (0, 0), (0, 0))
  q_blocks = jnp.moveaxis(jnp.pad(query, pad).reshape(b, nb, bq, n, h), 1, 0)
  g_blocks = jnp.moveaxis(jnp.pad(cotangent, pad).reshape(b, nb, bq, n, h), 1, 0)

  def block(i, q_i, g_i):
    mask = masking_lib.tile_mask(b, n, bq, key.shape[1], q_offset=i * bq, q_len=t if nb * bq > t else None,
                                 is_causal=is_causal)
    return _block_sums(q_i, key, value, g_i, None, mask, opts, input_grads=False)[0]

  def step(acc, xs):
    return merge_sums(acc, block(*xs)), None

  xs = (jnp.arange(nb), q_blocks, g_blocks)
  empty = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), jax.eval_shape(block, *(x[0] for x in xs)))
  sums, _ = jax.lax.scan(step, empty, xs)
  return {**finalize_sums(sums), **_input_grad_norms(*grads)}


def max_lse(lse: Array) -> Array:
  """Largest finite log-sum-exp over rows; -inf when every row is fully masked.

  Args:
    lse: row log-sum-exps of any shape (e.g. [B, T, N] from ``return_residual`` or [B, N, T]), -inf for fully
      masked rows.

  Returns:
    A float32 scalar.
  """
  lse = lse.astype(jnp.float32)
  return jnp.max(jnp.where(jnp.isfinite(lse), lse, -jnp.inf))


def attention_layer_metrics(logits: Array, weights: Array, mask: Array | None) -> dict[str, Array]:
  """Scalar metrics of one attention layer from the logits, weights and mask it used.

  Args:
    logits: [B, N, T, S] as returned by ``scaling.attention_with_aux``.
    weights: [B, N, T, S].
    mask: boolean visibility broadcastable to [B, N, T, S], or None.

  Returns:
    ``attn_entropy`` (nats) and ``attn_max_prob``: means over heads of
    ``weight_stats_per_head``; ``attn_max_logit``: the largest |logit| of any
    head (``logit_stats_per_head``'s absmax); ``attn_logits_rms``: RMS over heads
    of each head's visible-logit RMS, √mean(var + mean²); ``attn_max_lse``: the
    largest row log-sum-exp of the visible logits.
  """
  stats = finalize_sums(metric_sums(logits, weights, mask))
  z = logits.astype(jnp.float32)
  if mask is not None:
    z = jnp.where(mask, z, -jnp.inf)
  return {
      "attn_entropy": jnp.mean(stats["entropy"]),
      "attn_max_prob": jnp.mean(stats["max_prob"]),
      "attn_max_logit": jnp.max(stats["logit_absmax"]),
      "attn_logits_rms": jnp.sqrt(jnp.mean(stats["logit_var"] + stats["logit_mean"] ** 2)),
      "attn_max_lse": max_lse(jax.nn.logsumexp(z, axis=-1)),
  }
