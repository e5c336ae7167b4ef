"""Dense multi-head attention as pure functions, a drop-in for ``jax.nn.dot_product_attention``.

Shapes follow jax.nn: query [B, T, N, H], key and value [B, S, K, H] with N a
multiple of K (GQA; K == N is ordinary multi-head attention), bias and mask
broadcastable to [B, N, T, S]. Logits, weights and outputs all come from one
code path, ``attention_logits_and_weights``, so what is measured is what runs.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from scaling import masking as masking_lib
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


IMPLEMENTATIONS = ("dense", "xla", "blockwise", "cudnn", "pallas")

# How ``dot_product_attention(..., implementation=None)`` chooses. Measured on a 2-core CPU (float32, fwd+bwd =
# value and gradients w.r.t. q, k, v; median of interleaved calls) by timing these paths side by side, as
#   nice -n 5 python -m experiments.benchmark --suite=attention
# does; its table (README, "Benchmarks") is the check of the rule. Time relative to jax.nn.dot_product_attention:
#
#   (B, T = S, N, H)     mask    pass      dense   blockwise 64x64   128x128   256x256   512x256
#   1, 128, 4, 64        causal  fwd+bwd   0.89    0.92              0.49      0.92      -
#   1, 256, 4, 64        causal  fwd+bwd   1.05    0.54              0.79      0.80      -
#   1, 256, 4, 64        none    fwd+bwd   0.81    0.76              0.54      0.74      -
#   4, 512, 8, 64        causal  fwd+bwd   1.11    -                 -         -         0.71
#   1, 2048, 8, 64       causal  fwd+bwd   0.61    -                 -         -         0.15
#   1, 2048, 8, 64       none    fwd+bwd   0.80    -                 -         -         0.39
#
# and blockwise block sizes against each other (fwd+bwd, B = 1, N = 4, ms):
#
#   T = S, H, mask       128x128   256x256   512x256   512x512   256x512   1024x256
#   2048, 64, causal     334       342       362       459       382       524
#   2048, 128, causal    520       713       606       873       595       925
#   2048, 64, none       383       635       1305      -         -         -
#   8192, 64, causal     6062      7093      14380     -         -         -
#
# and, side by side on a quiet machine (load average about 2; fwd+bwd, B = 1, N = 4, median ms):
#
#   T = S, H, mask       128x128   256x256   256x512   512x512
#   512, 64, causal      13        15        19        11
#   1024, 64, causal     40        -         36        -
#   1024, 128, causal    76        -         56        -
#   1024, 64, none       70        -         42        -
#   2048, 64, causal     134       141       96        114
#   2048, 128, causal    280       189       148       153
#   2048, 64, none       247       233       141       151
#   4096, 64, causal     567       -         361       -
#   4096, 128, none      1666      -         992       -
#   8192, 64, causal     2244      2075      1304      1237
#
# so from S = LARGE_BLOCKS_MIN_KV_LEN the tiles are LARGE_BLOCKS (the loaded-machine table above had favoured
# 128x128 there; its timings were 2-5x slower throughout); and in one benchmark run, with blockwise 128x128
# (time relative to jax.nn; dense forced):
#
#   (B, T = S, N, H)     mask    pass      dense   blockwise
#   1, 512, 4, 64        none    fwd       0.80    0.95
#   1, 512, 4, 128       none    fwd       0.79    1.28
#   1, 512, 4, 128       none    fwd+bwd   0.83    1.14
#   4, 512, 8, 64        none    fwd+bwd   1.12    0.69
#   1, 512, 4, 128       causal  fwd+bwd   0.73    0.69
#
# Below S = BLOCKWISE_MIN_KV_LEN the few tiles leave blockwise and dense within the machine's noise of each other
# (at S = 128 either wins by up to 2x from one run to the next), so dense, which also returns weights, is kept
# there. Without a causal mask or window there are no tiles to skip, and while the B·N·T·S logits fit in
# DENSE_MAX_LOGITS elements (4 MiB of float32) dense's few large matmuls beat the tile loop; otherwise blockwise
# with BLOCKS (LARGE_BLOCKS from S = LARGE_BLOCKS_MIN_KV_LEN) is faster than dense and jax.nn, forward and
# forward+backward. Options blockwise lacks (``blockwise_unsupported``) fall back to dense.
BLOCKWISE_MIN_KV_LEN = 256
DENSE_MAX_LOGITS = 2**20
BLOCKS = (128, 128)
LARGE_BLOCKS = (256, 512)
LARGE_BLOCKS_MIN_KV_LEN = 1024
# On GPU, cuDNN's fused kernel (jax.nn, implementation="cudnn") takes these input dtypes and head dims.
CUDNN_DTYPES = ("float16", "bfloat16")
CUDNN_MAX_HEAD_DIM = 128


@dataclasses.dataclass(frozen=True)
class Choice:
  """What ``dot_product_attention`` runs: an implementation, its blocks, and why."""

  implementation: str
  block_q: int | None = None
  block_k: int | None = None
  reason: str = ""


def blockwise_unsupported(opts: LogitOptions, *, return_weights: bool) -> str | None:
  """Why the blockwise path cannot compute these options (None when it can)."""
  if not opts.float32_softmax or not opts.subtract_max:
    return "float32_softmax=False or subtract_max=False (dense only)"
  if return_weights:
    return "return_weights needs the full [T, S] weights"
  if not isinstance(opts.scale, float) or not isinstance(opts.weight_scale, float):
    return "a traced (vmapped) scale"
  return None


def _cudnn_unsupported(opts: LogitOptions, *, return_weights: bool) -> str | None:
  """Why jax.nn's cuDNN kernel cannot compute these options (None when it can)."""
  if (opts.rule.has_prepare or not _is_one(opts.weight_scale) or opts.logit_soft_cap is not None
      or opts.logit_clamp is not None or not opts.float32_softmax or not opts.subtract_max or return_weights):
    return ("implementation='cudnn' supports only plain scale rules without prepare, weight scale, soft cap, "
            "clamp, return_weights or the failure-demonstration switches")
  return None


def select_implementation(query_shape: tuple[int, ...], key_shape: tuple[int, ...], opts: LogitOptions, *,
                          dtype: Any = jnp.float32, return_weights: bool = False, has_bias: bool = False,
                          is_causal: bool = False, has_local_window: bool = False,
                          backend: str | None = None) -> Choice:
  """The exact implementation ``dot_product_attention(implementation=None)`` runs, by the measured rule above.

  Args:
    query_shape: [B, T, N, H] (or [T, N, H]).
    key_shape: [B, S, K, H] (or [S, K, H]).
    opts: the resolved logit options (``resolve_logit_options``).
    dtype: the input dtype.
    return_weights: whether the weights are requested (dense only).
    has_bias: whether a bias is given (cuDNN is not chosen automatically then).
    is_causal: whether the attention is causal (blockwise then skips tiles).
    has_local_window: whether a local window is given (likewise; and cuDNN is not chosen automatically).
    backend: "cpu", "gpu" or "tpu"; None = ``jax.default_backend()``.

  Returns:
    A ``Choice``: "dense", "blockwise" (with its blocks) or "cudnn", and the reason.
  """
  backend = jax.default_backend() if backend is None else backend
  t, s, n, h = query_shape[-3], key_shape[-3], query_shape[-2], query_shape[-1]
  b = query_shape[0] if len(query_shape) == 4 else 1
  if (backend == "gpu" and jnp.dtype(dtype).name in CUDNN_DTYPES and h <= CUDNN_MAX_HEAD_DIM and h % 8 == 0
      and not has_bias and not has_local_window and _cudnn_unsupported(opts, return_weights=return_weights) is None):
    return Choice("cudnn", reason="GPU, half precision, plain scale: cuDNN's fused kernel")
  reason = blockwise_unsupported(opts, return_weights=return_weights)
  if reason is not None:
    return Choice("dense", reason=reason)
  if s < BLOCKWISE_MIN_KV_LEN or t < 1:
    return Choice("dense", reason=f"S = {s} < {BLOCKWISE_MIN_KV_LEN}: few tiles, dense is as fast")
  if not is_causal and not has_local_window and b * n * t * s <= DENSE_MAX_LOGITS:
    return Choice("dense", reason=f"no tiles to skip and B·N·T·S = {b * n * t * s} <= {DENSE_MAX_LOGITS}")
  return Choice("blockwise", *blockwise_blocks(t, s), reason=f"S = {s} >= {BLOCKWISE_MIN_KV_LEN}")


def blockwise_blocks(q_len: int, kv_len: int) -> tuple[int, int]:
  """(block_q, block_k) of the measured rule above for T = ``q_len``, S = ``kv_len`` (capped at T and S)."""
  block_q, block_k = LARGE_BLOCKS if kv_len >= LARGE_BLOCKS_MIN_KV_LEN else BLOCKS
  return min(block_q, q_len), min(block_k, kv_len)


def _as_scalar(x: Any) -> float | Array:
  """A Python float, or a scalar array left as is so that scales can be traced (vmapped over rules)."""
  if isinstance(x, (jax.Array, np.ndarray)) and not isinstance(x, jax.core.Tracer) and x.ndim == 0:
    return float(x)
  if isinstance(x, jax.core.Tracer):
    return x
  return float(x)


def _is_one(x: float | Array) -> bool:
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


def _logits_weights_grouped(query, key, bias, mask_bnts, opts: LogitOptions):
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
  logits = shape_logits(logits, bias, opts)
  mask = masking_lib.group_heads(mask_bnts, kh, g)
  weights = masked_softmax(logits, mask, subtract_max=opts.subtract_max)
  if not _is_one(opts.weight_scale):
    weights = weights * jnp.asarray(opts.weight_scale, weights.dtype)
  return logits, weights, mask


def _attend_grouped(query, key, value, bias, mask_bnts, opts: LogitOptions):
  """Returns (output [B, T, N, H], logits, weights, mask) with the last three grouped [B, K, G, T, S]."""
  b, t, n, h = query.shape
  logits, weights, mask_g = _logits_weights_grouped(query, key, bias, mask_bnts, opts)
  kh, g = key.shape[2], n // key.shape[2]
  w = weights.astype(value.dtype).reshape(b, kh, g * t, -1)
  out = jnp.einsum("bkms,bskh->bkmh", w, value).reshape(b, kh, g, t, -1)
  out = out.transpose(0, 3, 1, 2, 4).reshape(b, t, n, value.shape[-1])
  return out, logits, weights, mask_g


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
  query, key, value, batched = check_qkv(query, key, value)
  b, t, n, h = query.shape
  opts = resolve_logit_options(h, scale=scale, rule=rule, logit_soft_cap=logit_soft_cap, logit_clamp=logit_clamp,
                               float32_softmax=float32_softmax, subtract_max=subtract_max)
  mask_bnts = masking_lib.combined_mask(b, n, t, key.shape[1], mask=mask, is_causal=is_causal,
                                       query_seq_lengths=query_seq_lengths,
                                       key_value_seq_lengths=key_value_seq_lengths, local_window_size=local_window_size)
  out, logits, weights, _ = _attend_grouped(query, key, value, bias, mask_bnts, opts)
  logits, weights = masking_lib.ungroup_heads(logits), masking_lib.ungroup_heads(weights)
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


def dot_product_attention(query: Array, key: Array, value: Array, bias: Array | None = None,
                          mask: Array | None = None, *, scale: float | None = None,
                          rule: str | rules_lib.ScaleRule | None = None, is_causal: bool = False,
                          query_seq_lengths: Array | None = None, key_value_seq_lengths: Array | None = None,
                          local_window_size: int | tuple[int, int] | None = None,
                          logit_soft_cap: float | None = None, logit_clamp: float | None = None,
                          float32_softmax: bool = True, subtract_max: bool = True, implementation: str | None = None,
                          return_residual: bool = False, return_weights: bool = False) -> Array | tuple[Array, ...]:
  """Scaled dot-product attention, softmax(s·QKᵀ + bias)·V, with pluggable logit-scale rules.

  A drop-in for ``jax.nn.dot_product_attention`` (same layout and argument
  names); Vaswani et al. 2017, §3.2.1. B batch, T query length, S key length,
  N query heads, K key/value heads (N a multiple of K: GQA), H head dim.

  Args:
    query: [B, T, N, H] or [T, N, H].
    key: [B, S, K, H] or [S, K, H].
    value: same shape as key.
    bias: added to the logits after scaling; broadcastable to [B, N, T, S].
    mask: boolean, True = attend; broadcastable to [B, N, T, S].
    scale: a number s; the default (with ``rule=None``) is 1/√H as in jax.nn.
    rule: a logit-scale rule name (see ``scaling.available_rules()``) or a
      ``ScaleRule``; an alternative to ``scale``.
    is_causal: query i attends keys j <= i.
    query_seq_lengths: int [B]; queries at or past the length output 0.
    key_value_seq_lengths: int [B]; keys at or past the length are masked.
    local_window_size: (left, right) window, or one int for both.
    logit_soft_cap: c > 0 replaces logits z by c·tanh(z/c) (Gemma 2).
    logit_clamp: c > 0 clips logits to [-c, c].
    float32_softmax: compute logits and softmax in float32 whatever the input
      dtype (default). False computes them in the input dtype: only to
      demonstrate low-precision failures.
    subtract_max: subtract the row maximum before exp (default). False exists
      only to demonstrate overflow.
    implementation: None picks the fastest exact path from the shapes,
      options and backend (``select_implementation``; the measured rule is
      written next to it): blockwise for S >= ``BLOCKWISE_MIN_KV_LEN`` when
      it supports the options (unless nothing is masked causally or by a
      window and B·N·T·S <= ``DENSE_MAX_LOGITS``), dense otherwise, cuDNN on
      GPU in half precision with a plain scale. ``"dense"`` (alias ``"xla"``) forces the
      dense code; ``"blockwise"`` forces ``scaling.blockwise`` (default
      blocks); ``"pallas"`` the Pallas flash-attention kernel
      (``scaling.pallas_attention``; rules "prepare, then a plain scale",
      optionally causal, no bias, mask, lengths, window, cap or clamp);
      ``"cudnn"`` dispatches to
      ``jax.nn.dot_product_attention(implementation="cudnn")`` on GPU when the
      options allow it (a plain scale, no cap, clamp or weight scale) and
      raises otherwise. Forced implementations raise on options they lack.
    return_residual: also return the log-sum-exp of the masked logits [B, T, N]
      (as jax.nn; -inf for fully masked rows).
    return_weights: also return the attention weights [B, N, T, S].

  Returns:
    Output [B, T, N, H] (fully masked query rows give 0), followed by the
    residual and/or weights when requested.
  """
  query, key, value, batched = check_qkv(query, key, value)
  b, t, n, h = query.shape
  opts = resolve_logit_options(h, scale=scale, rule=rule, logit_soft_cap=logit_soft_cap, logit_clamp=logit_clamp,
                               float32_softmax=float32_softmax, subtract_max=subtract_max)
  if implementation is not None and implementation not in IMPLEMENTATIONS:
    raise ValueError(f"implementation must be None or one of {', '.join(IMPLEMENTATIONS)}, got {implementation!r}")
  blocks = {}
  if implementation is None:
    choice = select_implementation(query.shape, key.shape, opts, dtype=query.dtype, return_weights=return_weights,
                                   has_bias=bias is not None, is_causal=is_causal,
                                   has_local_window=local_window_size is not None)
    implementation = choice.implementation
    blocks = dict(block_q=choice.block_q, block_k=choice.block_k)
  if implementation in ("blockwise", "pallas"):
    if return_weights:
      raise ValueError(f"implementation={implementation!r} does not return weights")
    out = _flash_like(implementation, query, key, value, bias, mask, scale=scale, rule=rule, is_causal=is_causal,
                      query_seq_lengths=query_seq_lengths, key_value_seq_lengths=key_value_seq_lengths,
                      local_window_size=local_window_size, logit_soft_cap=logit_soft_cap, logit_clamp=logit_clamp,
                      float32_softmax=float32_softmax, subtract_max=subtract_max, return_residual=return_residual,
                      **blocks)
    if not batched:
      out = jax.tree.map(lambda x: x[0], out)
    return out
  if implementation == "cudnn":
    return _cudnn(query, key, value, bias, mask, opts, batched, is_causal=is_causal,
                  query_seq_lengths=query_seq_lengths, key_value_seq_lengths=key_value_seq_lengths,
                  local_window_size=local_window_size, return_residual=return_residual,
                  return_weights=return_weights)
  mask_bnts = masking_lib.combined_mask(b, n, t, key.shape[1], mask=mask, is_causal=is_causal,
                                       query_seq_lengths=query_seq_lengths,
                                       key_value_seq_lengths=key_value_seq_lengths, local_window_size=local_window_size)
  out, logits, weights, mask_g = _attend_grouped(query, key, value, bias, mask_bnts, opts)
  extras = []
  if return_residual:
    masked = logits if mask_g is None else jnp.where(mask_g, logits, -jnp.inf)
    lse = jax.nn.logsumexp(masked.astype(jnp.float32), axis=-1)  # [B, K, G, T]
    extras.append(jax.lax.stop_gradient(jnp.moveaxis(lse.reshape(b, n, t), 1, 2)))
  if return_weights:
    extras.append(masking_lib.ungroup_heads(weights))
  if not batched:
    out = out[0]
    extras = [e[0] for e in extras]
  return (out, *extras) if extras else out


def _flash_like(implementation, query, key, value, bias, mask, *, block_q=None, block_k=None, **kwargs):
  """Runs the blockwise or the Pallas path on batched inputs (blocks None: that path's defaults)."""
  blocks = {k: v for k, v in (("block_q", block_q), ("block_k", block_k)) if v is not None}
  if implementation == "blockwise":
    from scaling import blockwise as blockwise_lib  # pylint: disable=g-import-not-at-top (imports this module)
    return blockwise_lib.blockwise_attention(query, key, value, bias, mask, **blocks, **kwargs)
  from scaling import pallas_attention as pallas_lib  # pylint: disable=g-import-not-at-top (imports this module)
  opts = resolve_logit_options(query.shape[-1], scale=kwargs["scale"], rule=kwargs["rule"],
                               logit_soft_cap=kwargs["logit_soft_cap"], logit_clamp=kwargs["logit_clamp"],
                               float32_softmax=kwargs["float32_softmax"], subtract_max=kwargs["subtract_max"])
  reason = pallas_lib.supports(opts, bias=bias, mask=mask, query_seq_lengths=kwargs["query_seq_lengths"],
                               key_value_seq_lengths=kwargs["key_value_seq_lengths"],
                               local_window_size=kwargs["local_window_size"])
  if reason is not None:
    raise ValueError(f"implementation='pallas' does not support {reason}")
  return pallas_lib.pallas_attention(query, key, value, scale=kwargs["scale"], rule=kwargs["rule"],
                                     is_causal=kwargs["is_causal"], return_residual=kwargs["return_residual"],
                                     **blocks)


def _cudnn(query, key, value, bias, mask, opts: LogitOptions, batched, *, return_weights, **kwargs):
  """Dispatch to jax.nn's cuDNN flash attention where our options allow it."""
  reason = _cudnn_unsupported(opts, return_weights=return_weights)
  if reason is not None:
    raise ValueError(reason)
  out = jax.nn.dot_product_attention(query, key, value, bias, mask, scale=opts.scale, implementation="cudnn",
                                     **kwargs)
  if not batched:
    out = jax.tree.map(lambda x: x[0], out)
  return out
