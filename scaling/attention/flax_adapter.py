"""Logit-scale rules inside Flax's own attention modules, through their ``attention_fn`` hook.

``make_attention_fn(rule)`` returns a function with the signature of Flax's
``dot_product_attention`` that ``flax.linen.MultiHeadDotProductAttention`` and
``flax.nnx.MultiHeadAttention`` accept as ``attention_fn``::

    layer = nn.MultiHeadDotProductAttention(num_heads=8, qkv_features=512,
                                            attention_fn=make_attention_fn(rule="linear"))

Logits, softmax and masking come from ``scaling.attention.dispatch`` and, when the
weights are needed, ``scaling.attention.dense`` (one code path with the rest of
the library); dropout on the weights, dtype promotion and sowing of
the weights copy Flax's ``dot_product_attention_weights`` so that, with
``rule="sqrt"``, the adapter reproduces Flax's default attention.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax.linen import dtypes as flax_dtypes

from scaling.attention import dispatch as attention_lib
from scaling.attention import dense as dense_lib
from scaling.attention import logits as logits_lib
from scaling.attention import masking as masking_lib
from scaling.attention import metrics as metrics_lib
from scaling.attention import rules as rules_lib
from scaling.base import validation
from scaling.base.validation import ConfigError
from scaling.base.validation import ConfigTypeError

Array = jax.Array

_SOW_NAME = "attention_weights"
LOGIT_STATS = ("std", "absmax")
"""The logit statistics ``sow_logit_stats`` sows, each [heads], as ``attention_logit_<name>``."""


def make_attention_fn(
    rule: str | rules_lib.ScaleRule = "sqrt",
    *,
    logit_soft_cap: float | None = None,
    logit_clamp: float | None = None,
    sow_logit_stats: bool = False,
    **rule_options: Any,
) -> Callable[..., Array]:
  """An ``attention_fn`` for Flax attention modules that scales the logits with ``rule``.

  The rule is resolved here, once; the returned function accepts every argument
  that ``flax.linen.MultiHeadDotProductAttention`` and
  ``flax.nnx.MultiHeadAttention`` pass (the signature of Flax's
  ``dot_product_attention``, linen's and nnx's combined) and behaves like it:

  * ``mask`` (True or nonzero = attend) and ``bias`` broadcastable to
    [batch..., heads, q_length, kv_length]; nnx's ``is_causal``.
  * ``dtype`` promotes query, key and value like Flax (``promote_dtype``);
    the weights are cast to it before dropout and the output is in it.
  * dropout on the attention weights when ``dropout_rate > 0`` and not
    ``deterministic``, with Flax's ``broadcast_dropout`` shapes and
    ``jax.random.bernoulli`` draws, so the same ``dropout_rng`` drops the same
    entries as Flax's default attention.
  * ``module`` sows the weights (before dropout) as Flax does: linen into the
    ``'intermediates'`` collection, nnx as ``nnx.Intermediate``, both under
    ``'attention_weights'``; with ``sow_logit_stats`` also the statistics of
    the logits beside them (``attention_logit_std``, ``attention_logit_absmax``).
  * ``force_fp32_for_softmax`` (linen) with inputs narrower than float32
    (bfloat16, float16): the weights stay float32, sown so, and the output,
    float32 weights times the values, is float32, as Flax's.
  * complex query, key and value (Flax supports them): logits s·q·k without a
    conjugate, plus bias, and the complex softmax exp(z)/Σ exp(z) over the
    visible keys, with the rule's s. ``scaling.dot_product_attention`` itself
    takes real inputs only (its kernels, caps, clamps and statistics are for
    real logits), so complex inputs take this path, which refuses
    ``logit_soft_cap``, ``logit_clamp``, sown logit statistics and rules that
    transform query and key (``qk_norm``); ``force_fp32_for_softmax`` does not
    apply to them (Flax's drops the imaginary part there).
  * ``precision`` applies to every matmul (as ``jax.default_matmul_precision``).

  Differences from Flax's default: logits and softmax are always computed in
  at least float32 (with ``force_fp32_for_softmax=False`` the weights are then
  cast to the input dtype as Flax's), and a query row whose keys are all
  masked gets weights 0 and output 0 instead of Flax's uniform weights.
  Arguments that cannot be honoured (AQT einsum overrides,
  ``einsum_dot_general``, a pair of different precisions) raise.

  Args:
    rule: a logit-scale rule name (see ``scaling.available_rules()``) or a
      ``scaling.ScaleRule`` object.
    logit_soft_cap: c > 0 replaces logits z by c·tanh(z/c) (Gemma 2).
    logit_clamp: c > 0 clips logits to [-c, c].
    sow_logit_stats: when the module sows (``sow_weights=True``), also sow the
      standard deviation and the largest |z| of each head's visible logits
      (after scale, bias, soft cap and clamp; over all batch entries, queries
      and keys), each [heads], as ``scaling.logit_stats_per_head`` computes them:
      the quantities whose growth with d_k the logit-scale rules control.
    **rule_options: options of a named rule, e.g. ``tau`` for
      ``"temperature"``, ``alpha`` or ``base_head_dim`` for ``"linear"``.

  Returns:
    ``attention_fn(query, key, value, bias=None, mask=None, broadcast_dropout=True, dropout_rng=None,
    dropout_rate=0.0, deterministic=False, dtype=None, precision=None, module=None, *, ...)`` with query
    [batch..., q_length, heads, head_dim] and key, value [batch..., kv_length, kv_heads, head_dim], returning
    [batch..., q_length, heads, v_head_dim]. The resolved rule is its ``rule`` attribute.

  References:
    Vaswani et al. 2017, "Attention Is All You Need", §3.2.1 (the 1/√d_k default);
    Yang et al. 2022, "Tensor Programs V", §4 (the 1/d_k μP rule).
  """
  validation.check_bool("sow_logit_stats", sow_logit_stats)
  rule_obj = rules_lib.get_rule(rule, **rule_options)
  # Validates the caps now rather than at the first call; the head dim does not matter for that.
  logits_lib.resolve_logit_options(1, scale=None, rule=rule_obj, logit_soft_cap=logit_soft_cap,
                                   logit_clamp=logit_clamp, float32_softmax=True, subtract_max=True)
  logit_kwargs = dict(rule=rule_obj, logit_soft_cap=logit_soft_cap, logit_clamp=logit_clamp)

  def attention_fn(
      query: Array,
      key: Array,
      value: Array,
      bias: Array | None = None,
      mask: Array | None = None,
      broadcast_dropout: bool = True,
      dropout_rng: Array | None = None,
      dropout_rate: float = 0.0,
      deterministic: bool = False,
      dtype: Any = None,
      precision: Any = None,
      module: Any = None,
      *,
      is_causal: bool = False,
      force_fp32_for_softmax: bool = False,
      promote_dtype: Callable[..., Any] | None = None,
      einsum_dot_general: Callable[..., Array] | None = None,
      qk_attn_weights_einsum: Callable[..., Array] | None = None,
      attn_weights_value_einsum: Callable[..., Array] | None = None,
  ) -> Array:
    """Flax-compatible attention with the rule fixed by ``make_attention_fn`` (see there)."""
    for name, v in (("einsum_dot_general", einsum_dot_general), ("qk_attn_weights_einsum", qk_attn_weights_einsum),
                    ("attn_weights_value_einsum", attn_weights_value_einsum)):
      if v is not None:
        raise NotImplementedError(f"scaling.attention.flax_adapter cannot honour {name}: its logits come from "
                                  "scaling.attention.dispatch; use Flax's default attention_fn for custom einsums")
    validation.check_bool("force_fp32_for_softmax", force_fp32_for_softmax)
    dropout = _dropout_active(dropout_rate, deterministic, dropout_rng)
    if promote_dtype is None:
      query, key, value = flax_dtypes.promote_dtype(query, key, value, dtype=dtype)
    else:  # nnx's convention: one tuple in, one tuple out
      query, key, value = promote_dtype((query, key, value), dtype=dtype)
    dtype = query.dtype  # dropout's multiplier is in this dtype, as Flax's
    is_complex = jnp.issubdtype(dtype, jnp.complexfloating)
    if force_fp32_for_softmax and jnp.issubdtype(dtype, jnp.floating) and jnp.finfo(dtype).bits < 32:
      # Flax then keeps the weights in float32, and the output (float32 weights times the values) too.
      query, key, value = (x.astype(jnp.float32) for x in (query, key, value))
    batch_shape = _check_shapes(query, key, value)
    with _precision_context(precision):
      q, k, v = (_flatten_batch(x, batch_shape) for x in (query, key, value))
      bias4, mask4 = _flatten_batch_bnts(bias, batch_shape), _flatten_batch_bnts(_as_bool_mask(mask), batch_shape)
      if not (dropout or module is not None or v.shape[-1] != k.shape[-1] or is_complex):
        out = attention_lib.dot_product_attention(q, k, v, bias4, mask4, is_causal=is_causal, **logit_kwargs)
        return out.reshape(batch_shape + out.shape[-3:])
      if is_complex:
        if module is not None and sow_logit_stats:
          raise ConfigTypeError(f"sow_logit_stats needs real logits; the inputs are {dtype}")
        logits, weights, visible = _complex_logits_and_weights(q, k, bias4, mask4, is_causal=is_causal,
                                                               **logit_kwargs)
      else:
        logits, weights, visible = dense_lib.attention_logits_and_weights(q, k, bias4, mask4, is_causal=is_causal,
                                                                          **logit_kwargs)
      weights = weights.reshape(batch_shape + weights.shape[-3:]).astype(query.dtype)
      if module is not None:
        _sow(module, _SOW_NAME, weights)
        if sow_logit_stats:
          stats = metrics_lib.logit_stats_per_head(logits, visible)
          for name in LOGIT_STATS:
            _sow(module, f"attention_logit_{name}", stats[name])
      if dropout:
        weights = _dropout(weights, dropout_rng, dropout_rate, broadcast_dropout, key.ndim, dtype)
      return _weighted_values(weights, value, precision)

  attention_fn.rule = rule_obj
  attention_fn.__qualname__ = attention_fn.__name__ = f"attention_fn_{type(rule_obj).__name__}"
  return attention_fn


def _dropout_active(rate: float, deterministic: bool, rng: Array | None) -> bool:
  """Flax's test for applying dropout, with the rate and rng checked."""
  if not 0.0 <= rate < 1.0:
    raise ConfigError(f"dropout_rate must be in [0, 1), got {rate}")
  active = not deterministic and rate > 0.0
  if active and rng is None:
    raise ConfigError("dropout_rng is required when dropout_rate > 0 and deterministic is False")
  return active


def _check_shapes(query: Array, key: Array, value: Array) -> tuple[int, ...]:
  """Checks Flax's [batch..., length, heads, depth] layouts; returns the batch shape."""
  if not query.ndim == key.ndim == value.ndim or query.ndim < 3:
    raise ConfigError("query, key and value must all be [batch..., length, heads, depth] with the same rank; got "
                     f"{query.shape}, {key.shape}, {value.shape}")
  batch_shape = query.shape[:-3]
  if key.shape[:-3] != batch_shape or value.shape[:-3] != batch_shape:
    raise ConfigError(f"query, key and value batch dims must match; got {query.shape}, {key.shape}, {value.shape}")
  if key.shape[-3] != value.shape[-3] or key.shape[-2] != value.shape[-2]:
    raise ConfigError(f"key {key.shape} and value {value.shape} must agree in length and heads")
  return batch_shape


def _flatten_batch(x: Array, batch_shape: tuple[int, ...]) -> Array:
  """[batch..., L, N, H] -> [B, L, N, H] when there are several batch dims (our functions take at most one)."""
  if len(batch_shape) <= 1:
    return x
  return x.reshape((math.prod(batch_shape),) + x.shape[-3:])


def _flatten_batch_bnts(x: Array | None, batch_shape: tuple[int, ...]) -> Array | None:
  """A bias or mask broadcastable to [batch..., N, T, S], made broadcastable to [B, N, T, S]."""
  if x is None or len(batch_shape) <= 1:
    return x
  x, nb = jnp.asarray(x), len(batch_shape)
  if x.ndim > nb + 3:
    raise ConfigError(f"mask/bias of shape {x.shape} has more dims than [batch..., heads, q_length, kv_length]")
  if x.ndim <= 3:
    return x
  x = x.reshape((1,) * (nb + 3 - x.ndim) + x.shape)
  if all(d == 1 for d in x.shape[:nb]):
    return x.reshape((1,) + x.shape[nb:])
  x = jnp.broadcast_to(x, batch_shape + x.shape[nb:])
  return x.reshape((math.prod(batch_shape),) + x.shape[nb:])


def _as_bool_mask(mask: Array | None) -> Array | None:
  """Flax masks may be float (``nn.make_attention_mask`` defaults to float32); nonzero = attend."""
  if mask is None:
    return None
  mask = jnp.asarray(mask)
  return mask if mask.dtype == jnp.bool_ else mask != 0


def _precision_context(precision: Any) -> contextlib.AbstractContextManager:
  """Applies ``precision`` to every matmul inside; None leaves any outer ``jax.default_matmul_precision`` alone."""
  if precision is None:
    return contextlib.nullcontext()
  return jax.default_matmul_precision(_matmul_precision(precision))


def _matmul_precision(precision: Any) -> str:
  """A ``jax.lax.dot_general`` precision as a ``jax.default_matmul_precision`` name."""
  if isinstance(precision, (tuple, list)):
    if len(precision) != 2 or precision[0] != precision[1]:
      raise NotImplementedError(f"precision must be one value or a pair of equal values, got {precision!r}")
    precision = precision[0]
  if isinstance(precision, str):
    try:
      precision = jax.lax.Precision(precision)
    except ValueError:
      try:
        precision = jax.lax.DotAlgorithmPreset[precision.upper()]
      except KeyError:
        raise ConfigError(f"unknown precision {precision!r}") from None
  if isinstance(precision, jax.lax.Precision):
    return precision.name.lower()
  if isinstance(precision, jax.lax.DotAlgorithmPreset):
    return precision.name
  raise NotImplementedError(f"precision {precision!r} is not supported; use a jax.lax.Precision or DotAlgorithmPreset")


def _sow(module: Any, name: str, value: Array) -> None:
  """Sows ``value`` where Flax's default attention sows its weights (linen 'intermediates', nnx ``Intermediate``)."""
  from flax import nnx  # imported here: flax.nnx is not otherwise loaded by this library

  if isinstance(module, nnx.Module):
    module.sow(nnx.Intermediate, name, value)
  else:
    module.sow("intermediates", name, value)


def _dropout(weights: Array, rng: Array, rate: float, broadcast: bool, key_ndim: int, dtype: Any) -> Array:
  """Flax's attention dropout, draw for draw (flax.linen.attention.dot_product_attention_weights)."""
  keep_prob = 1.0 - rate
  shape = (1,) * (key_ndim - 2) + weights.shape[-2:] if broadcast else weights.shape
  keep = jax.random.bernoulli(rng, keep_prob, shape)
  return weights * (keep.astype(dtype) / jnp.asarray(keep_prob, dtype=dtype))


def _complex_logits_and_weights(query: Array, key: Array, bias: Array | None, mask: Array | None, *, is_causal: bool,
                                rule: rules_lib.ScaleRule, logit_soft_cap: float | None,
                                logit_clamp: float | None) -> tuple[Array, Array, Array | None]:
  """Flax's complex attention with the rule's scale: softmax over keys of z = s·q·k + bias, exp(z) / Σ exp(z).

  As Flax: no conjugate in q·k, and the softmax is the complex exponential normalized over the visible keys.
  Arguments as ``dense_attention.attention_logits_and_weights``; returns (logits, weights, visible) as it does.
  """
  dtype = query.dtype
  for name, v in (("logit_soft_cap", logit_soft_cap), ("logit_clamp", logit_clamp)):
    if v is not None:
      raise ConfigTypeError(f"{name} needs real logits; the inputs are {dtype}")
  if type(rule).prepare is not rules_lib.ScaleRule.prepare:
    raise ConfigTypeError(f"rule {type(rule).__name__} transforms query and key before the dot product, which is "
                          f"defined for real inputs only; the inputs are {dtype}")
  batched = query.ndim == 4
  q, k = (x if batched else x[None] for x in (query, key))
  logits_lib.check_attention_args(q.shape, k.shape, None, mask, batched=batched, is_causal=is_causal)
  b, t, n, h = q.shape
  s, kh = k.shape[1], k.shape[2]
  if n % kh:
    raise ConfigError(f"query heads N ({n}) must be a multiple of key heads K ({kh}) for GQA; got query "
                      f"{query.shape} and key {key.shape}")
  if bias is not None:
    validation.check_floating("bias", bias, complex_ok=True)
    validation.check_broadcasts("bias", np.shape(bias), (b, n, t, s)[0 if batched else 1:],
                                "[B, N, T, S]" if batched else "[N, T, S]")
  opts = logits_lib.resolve_logit_options(h, scale=None, rule=rule, logit_soft_cap=None, logit_clamp=None,
                                          float32_softmax=True, subtract_max=True)
  compute = jnp.promote_types(dtype, jnp.complex64)
  z = jnp.einsum("btkgh,bskh->bkgts", q.reshape(b, t, kh, n // kh, h), k, preferred_element_type=compute)
  z = logits_lib.shape_logits(z.reshape(b, n, t, s), masking_lib.ensure_4d(bias, "bias"), opts)
  visible = masking_lib.combined_mask(b, n, t, s, mask=mask, is_causal=is_causal)
  if visible is None:
    weights = jax.nn.softmax(z, axis=-1)
  else:  # masked logits: a finite large negative real part, as logits.masked_softmax; fully masked rows give 0
    fill = jnp.asarray(logits_lib.MASKED_LOGIT_FRACTION * jnp.finfo(compute).min, compute)
    weights = jax.nn.softmax(jnp.where(visible, z, fill), axis=-1)
    weights = jnp.where(jnp.any(visible, axis=-1, keepdims=True), weights, jnp.zeros((), compute))
  if not logits_lib.is_unit_scale(opts.weight_scale):
    weights = weights * jnp.asarray(opts.weight_scale, compute)
  if not batched:
    z, weights = z[0], weights[0]
    visible = None if visible is None else visible[0]
  return z, weights, visible


def _weighted_values(weights: Array, value: Array, precision: Any) -> Array:
  """weights [..., N, T, S] times value [..., S, K, H] -> [..., T, N, H], N a multiple of K (GQA)."""
  n, kh = weights.shape[-3], value.shape[-2]
  if n == kh:
    return jnp.einsum("...hqk,...khd->...qhd", weights, value, precision=precision)
  w = weights.reshape(weights.shape[:-3] + (kh, n // kh) + weights.shape[-2:])
  out = jnp.einsum("...hgqk,...khd->...qhgd", w, value, precision=precision)
  return out.reshape(out.shape[:-3] + (n, out.shape[-1]))
