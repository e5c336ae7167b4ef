"""Dense multi-head attention as pure functions: the full [T, S] logits and weights, and the output from them.

Shapes follow jax.nn: query [B, T, N, H], key and value [B, S, K, H] with N a
multiple of K (GQA; K == N is ordinary multi-head attention), bias and mask
broadcastable to [B, N, T, S]. Logits, weights and outputs all come from one
code path, ``_attend_grouped``, so what is measured is what runs.
``scaling.dot_product_attention`` runs ``dense_attention`` when it picks the
dense implementation. The public functions check their arguments
(``scaling.attention.logits.check_inputs``); ``dense_attention_unchecked`` and
``attention_with_aux_unchecked`` are the same computations for callers that
have checked them already (the dispatcher and the metrics).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from scaling.attention import logits as logits_lib
from scaling.attention import masking as masking_lib
from scaling.attention import rules as rules_lib

Array = jax.Array


def _logits_weights_grouped(query, key, bias, mask_bnts, opts: logits_lib.LogitOptions):
  """Core: returns (logits, weights, visible) as [B, K, G, T, S]; weights already carry weight_scale."""
  b, t, n, h = query.shape
  kh = key.shape[2]
  g = n // kh
  query, key = opts.rule.prepare(query, key)
  # [B, T, K, G, H] -> [B, K, G*T, H]: the dot's natural output [B, K, G*T, S] is then the grouped logits
  # (no copy or transpose of a T×S array).
  q = query.reshape(b, t, kh, g, h).transpose(0, 2, 3, 1, 4).reshape(b, kh, g * t, h)
  compute_dtype = jnp.promote_types(query.dtype, jnp.float32) if opts.float32_softmax else query.dtype
  logits = jnp.einsum("bkmh,bskh->bkms", q, key, preferred_element_type=compute_dtype).reshape(b, kh, g, t, -1)
  if bias is not None:
    bias = masking_lib.group_heads(masking_lib.ensure_4d(bias, "bias"), kh, g)
  logits = logits_lib.shape_logits(logits, bias, opts)
  mask = masking_lib.group_heads(mask_bnts, kh, g)
  weights = logits_lib.masked_softmax_unchecked(logits, mask, subtract_max=opts.subtract_max)
  if not logits_lib.is_unit_scale(opts.weight_scale):
    weights = weights * jnp.asarray(opts.weight_scale, weights.dtype)
  return logits, weights, mask


def _attend_grouped(query, key, value, bias, mask_bnts, opts: logits_lib.LogitOptions):
  """Returns (output [B, T, N, H], logits, weights, mask) with the last three grouped [B, K, G, T, S]."""
  b, t, n, h = query.shape
  logits, weights, mask_g = _logits_weights_grouped(query, key, bias, mask_bnts, opts)
  kh, g = key.shape[2], n // key.shape[2]
  w = weights.astype(value.dtype).reshape(b, kh, g * t, -1)
  out = jnp.einsum("bkms,bskh->bkmh", w, value).reshape(b, kh, g, t, -1)
  out = out.transpose(0, 3, 1, 2, 4).reshape(b, t, n, value.shape[-1])
  return out, logits, weights, mask_g


def _attend(query, key, value, bias, mask, opts: logits_lib.LogitOptions, *, is_causal=False, query_seq_lengths=None,
            key_value_seq_lengths=None, local_window_size=None):
  """Attends checked 4-D inputs: (mask [B|1, N|1, T, S] or None, *``_attend_grouped``)."""
  b, t, n, _ = query.shape
  mask_bnts = masking_lib.combined_mask(b, n, t, key.shape[1], mask=mask, is_causal=is_causal,
                                       query_seq_lengths=query_seq_lengths,
                                       key_value_seq_lengths=key_value_seq_lengths, local_window_size=local_window_size)
  return (mask_bnts, *_attend_grouped(query, key, value, bias, mask_bnts, opts))


def attention_with_aux_unchecked(query: Array, key: Array, value: Array, bias: Array | None, mask: Array | None,
                                 opts: logits_lib.LogitOptions, **mask_kwargs: Any
                                 ) -> tuple[Array, Array, Array, Array | None]:
  """``attention_with_aux`` of checked 4-D inputs and resolved options (``scaling.attention.logits.check_inputs``).

  Args:
    query, key, value: [B, T, N, H], [B, S, K, H], [B, S, K, H], checked.
    bias, mask: checked, or None.
    opts: the resolved logit options.
    **mask_kwargs: is_causal, query_seq_lengths, key_value_seq_lengths, local_window_size (checked).

  Returns:
    ``(output, logits, weights, mask)`` as ``attention_with_aux`` returns them for batched inputs.
  """
  mask_bnts, out, logits, weights, _ = _attend(query, key, value, bias, mask, opts, **mask_kwargs)
  return out, masking_lib.ungroup_heads(logits), masking_lib.ungroup_heads(weights), mask_bnts


def attention_with_aux(query: Array, key: Array, value: Array, bias: Array | None = None, mask: Array | None = None, *,
                       scale: float | None = None, rule: str | rules_lib.ScaleRule | None = None,
                       is_causal: bool = False, query_seq_lengths: Array | None = None,
                       key_value_seq_lengths: Array | None = None,
                       local_window_size: int | tuple[int, int] | None = None, logit_soft_cap: float | None = None,
                       logit_clamp: float | None = None, float32_softmax: bool = True,
                       subtract_max: bool = True) -> tuple[Array, Array, Array, Array | None]:
  """Attention output together with the logits, weights and mask it was computed from.

  Args: as ``dot_product_attention``.

  Returns:
    ``(output, logits, weights, mask)``: output [B, T, N, H]; logits
    [B, N, T, S] after scale, bias, soft cap and clamp (masked entries left as
    computed); weights [B, N, T, S] (0 where masked, all 0 for fully masked
    rows, multiplied by the rule's weight scale); the boolean visibility mask
    broadcastable to [B, N, T, S], or None when nothing is masked.
  """
  mask_kwargs = dict(is_causal=is_causal, query_seq_lengths=query_seq_lengths,
                     key_value_seq_lengths=key_value_seq_lengths, local_window_size=local_window_size)
  query, key, value, batched, opts = logits_lib.check_inputs(
      query, key, value, bias, mask, scale=scale, rule=rule, logit_soft_cap=logit_soft_cap, logit_clamp=logit_clamp,
      float32_softmax=float32_softmax, subtract_max=subtract_max, **mask_kwargs)
  out, logits, weights, mask_bnts = attention_with_aux_unchecked(query, key, value, bias, mask, opts, **mask_kwargs)
  if not batched:
    out, logits, weights = out[0], logits[0], weights[0]
    mask_bnts = None if mask_bnts is None else mask_bnts[0]
  return out, logits, weights, mask_bnts


def attention_logits_and_weights(query: Array, key: Array, bias: Array | None = None, mask: Array | None = None,
                                 **kwargs) -> tuple[Array, Array, Array | None]:
  """``(logits, weights, mask)`` exactly as ``dot_product_attention`` computes them (see ``attention_with_aux``)."""
  _, logits, weights, vis = attention_with_aux(query, key, key, bias, mask, **kwargs)
  return logits, weights, vis


def attention_logits(query: Array, key: Array, bias: Array | None = None, mask: Array | None = None,
                     **kwargs) -> Array:
  """Logits [B, N, T, S] exactly as ``dot_product_attention`` computes them (see there for arguments)."""
  return attention_logits_and_weights(query, key, bias, mask, **kwargs)[0]


def attention_weights(query: Array, key: Array, bias: Array | None = None, mask: Array | None = None,
                      **kwargs) -> Array:
  """Attention weights [B, N, T, S] exactly as ``dot_product_attention`` uses them."""
  return attention_logits_and_weights(query, key, bias, mask, **kwargs)[1]


def dense_attention(query: Array, key: Array, value: Array, bias: Array | None = None, mask: Array | None = None, *,
                    return_residual: bool = False, return_weights: bool = False,
                    **kwargs: Any) -> Array | tuple[Array, ...]:
  """The dense implementation of ``dot_product_attention``: the full [T, S] logits, then softmax and output.

  Args:
    query, key, value, bias, mask: as ``dot_product_attention``.
    return_residual: also return the log-sum-exp of the masked logits [B, T, N]
      (as jax.nn; -inf for fully masked rows), under stop_gradient.
    return_weights: also return the attention weights [B, N, T, S].
    **kwargs: the logit and masking options of ``attention_with_aux`` (scale,
      rule, is_causal, query_seq_lengths, key_value_seq_lengths,
      local_window_size, logit_soft_cap, logit_clamp, float32_softmax,
      subtract_max).

  Returns:
    Output [B, T, N, H] (fully masked query rows give 0), followed by the
    residual and/or weights when requested.
  """
  query, key, value, batched, opts = logits_lib.check_inputs(query, key, value, bias, mask, **kwargs)
  mask_kwargs = {k: v for k, v in kwargs.items() if k in logits_lib.MASK_ARGS}
  out = dense_attention_unchecked(query, key, value, bias, mask, opts, return_residual=return_residual,
                                  return_weights=return_weights, **mask_kwargs)
  if not batched:
    out = jax.tree.map(lambda x: x[0], out)
  return out


def dense_attention_unchecked(query: Array, key: Array, value: Array, bias: Array | None, mask: Array | None,
                              opts: logits_lib.LogitOptions, *, return_residual: bool = False,
                              return_weights: bool = False, **mask_kwargs: Any) -> Array | tuple[Array, ...]:
  """``dense_attention`` of checked 4-D inputs and resolved options (``scaling.attention.logits.check_inputs``).

  Args:
    query, key, value: [B, T, N, H], [B, S, K, H], [B, S, K, H], checked.
    bias, mask: checked, or None.
    opts: the resolved logit options.
    return_residual, return_weights: as ``dense_attention``.
    **mask_kwargs: is_causal, query_seq_lengths, key_value_seq_lengths, local_window_size (checked).

  Returns:
    What ``dense_attention`` returns for batched inputs.
  """
  _, out, logits, weights, mask_g = _attend(query, key, value, bias, mask, opts, **mask_kwargs)
  b, t, n, _ = out.shape
  extras = []
  if return_residual:
    masked = logits if mask_g is None else jnp.where(mask_g, logits, -jnp.inf)
    lse = jax.nn.logsumexp(masked.astype(jnp.float32), axis=-1)  # [B, K, G, T]
    extras.append(jax.lax.stop_gradient(jnp.moveaxis(lse.reshape(b, n, t), 1, 2)))
  if return_weights:
    extras.append(masking_lib.ungroup_heads(weights))
  return (out, *extras) if extras else out
