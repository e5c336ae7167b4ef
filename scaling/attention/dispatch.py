"""The attention dispatcher: ``dot_product_attention``, a drop-in for ``jax.nn.dot_product_attention``.

Shapes follow jax.nn: query [B, T, N, H], key and value [B, S, K, H] with N a multiple of K (GQA), bias and mask
broadcastable to [B, N, T, S]. ``dot_product_attention`` checks the inputs, picks an implementation by a measured rule
(``select_implementation``) and runs it: dense (``scaling.attention.dense``, whose logits and weights the metrics
measure), blockwise (``scaling.attention.blockwise``), the Pallas kernel (``scaling.attention.pallas``) or jax.nn's
cuDNN kernel (here). The pieces they share (logit options, input checks, logit shaping, the softmax) live in
``scaling.attention.logits``.
"""

from __future__ import annotations

import warnings
from typing import Any, Sequence

import jax
import jax.numpy as jnp

from scaling.attention import autotune
from scaling.attention import blockwise as blockwise_lib
from scaling.attention import dense as dense_lib
from scaling.attention import logits as logits_lib
from scaling.attention import pallas as pallas_lib
from scaling.attention import rules as rules_lib
from scaling.attention.autotune import Choice
from scaling.attention.logits import LogitOptions
from scaling.base.validation import ConfigError

Array = jax.Array

IMPLEMENTATIONS = ("dense", "xla", "blockwise", "cudnn", "pallas")
AUTO = "auto"
"""``implementation=AUTO``: the path measured fastest for the case (``scaling.attention.autotune``); fixed rule as
fallback."""

# The rule's measurements: docs/benchmarks.md, "attention rule" (`experiments.benchmark --suite=attention_rule`).
BLOCKWISE_MIN_KV_LEN = 256
SINGLE_TILE_MAX_LOGITS = 2**20
SMALL_SINGLE_TILE_MAX_LOGITS = 2**19
BLOCKS = (128, 128)
LARGE_BLOCKS = (256, 512)
LARGE_BLOCKS_MIN_KV_LEN = 1024
STEP_CAP_MAX_KV_LEN = 2048
TILE_MAX_ELEMENTS = 2**17
MIN_BLOCKS = (64, 128)
# On GPU, cuDNN's fused kernel (jax.nn, implementation="cudnn") takes these input dtypes and head dims.
CUDNN_DTYPES = ("float16", "bfloat16")
CUDNN_MAX_HEAD_DIM = 128


def _cudnn_unsupported(opts: LogitOptions, *, return_weights: bool) -> str | None:
  """Why jax.nn's cuDNN kernel cannot compute these options (None when it can)."""
  if (opts.rule.has_prepare or not logits_lib.is_unit_scale(opts.weight_scale) or opts.logit_soft_cap is not None
      or opts.logit_clamp is not None or not opts.float32_softmax or not opts.subtract_max or return_weights):
    return ("implementation='cudnn' supports only plain scale rules without prepare, weight scale, soft cap, "
            "clamp, return_weights or the failure-demonstration switches")
  return None


def select_implementation(query_shape: tuple[int, ...], key_shape: tuple[int, ...], opts: LogitOptions, *,
                          dtype: Any = jnp.float32, return_weights: bool = False, has_bias: bool = False,
                          is_causal: bool = False, has_local_window: bool = False,
                          backend: str | None = None) -> Choice:
  """The exact implementation ``dot_product_attention(implementation=None)`` runs, by the measured rule.

  Args:
    query_shape, key_shape: [B, T, N, H] and [B, S, K, H] (or unbatched).
    opts, dtype: the resolved logit options (``logits.resolve_logit_options``) and the input dtype.
    return_weights, has_bias: whether the weights are requested (dense only), a bias is given (no automatic cuDNN).
    is_causal, has_local_window: whether a causal mask, a local window skips tiles (a window: no automatic cuDNN).
    backend: "cpu", "gpu" or "tpu"; None = ``jax.default_backend()``.

  Returns:
    A ``Choice`` ("dense", "blockwise" with its tiles, or "cudnn") and why: cuDNN on GPU in half precision with a
    plain scale; dense for options blockwise lacks; below S = ``BLOCKWISE_MIN_KV_LEN`` one T x S tile differentiated
    (dense alone: ``Choice.forward``) while B·N·T·S <= ``SMALL_SINGLE_TILE_MAX_LOGITS``, else dense; from there one
    T x S tile while B·N·T·S <= ``SINGLE_TILE_MAX_LOGITS``, else ``blockwise_blocks``' tiles for each pass. A causal
    mask with T < S counts only the first T keys, the only ones it shows.
  """
  backend = jax.default_backend() if backend is None else backend
  t, s, n, h = query_shape[-3], key_shape[-3], query_shape[-2], query_shape[-1]
  b = query_shape[0] if len(query_shape) == 4 else 1
  if (backend == "gpu" and jnp.dtype(dtype).name in CUDNN_DTYPES and h <= CUDNN_MAX_HEAD_DIM and h % 8 == 0
      and not has_bias and not has_local_window and _cudnn_unsupported(opts, return_weights=return_weights) is None):
    return Choice("cudnn", reason="GPU, half precision, plain scale: cuDNN's fused kernel")
  reason = blockwise_lib.blockwise_unsupported(opts, return_weights=return_weights)
  if reason is not None:
    return Choice("dense", reason=reason)
  if t < 1:
    return Choice("dense", reason="T = 0")
  kv_len, seen = s, ""
  if is_causal and t < s:  # query i sees keys j <= i only: tiles as if S were T (the key tiles past T are skipped)
    s, key_shape, seen = t, (*key_shape[:-3], t, *key_shape[-2:]), f" (causal: only the first T = {t} keys count)"
  if kv_len < BLOCKWISE_MIN_KV_LEN:
    if b * n * t * s <= SMALL_SINGLE_TILE_MAX_LOGITS:
      return Choice("blockwise", t, s,
                    reason=f"S = {kv_len} < {BLOCKWISE_MIN_KV_LEN} and B·N·T·S = {b * n * t * s} "
                    f"<= {SMALL_SINGLE_TILE_MAX_LOGITS}: one tile under differentiation{seen}",
                    forward=Choice("dense", reason=f"undifferentiated, S < {BLOCKWISE_MIN_KV_LEN}"))
    return Choice("dense", reason=f"S = {kv_len} < {BLOCKWISE_MIN_KV_LEN}: few tiles, dense is as fast")
  if b * n * t * s <= SINGLE_TILE_MAX_LOGITS:
    return Choice("blockwise", t, s, reason=f"B·N·T·S = {b * n * t * s} <= {SINGLE_TILE_MAX_LOGITS}: one tile{seen}")
  skips = is_causal or has_local_window
  blocks = blockwise_blocks(query_shape, key_shape, is_causal=skips)
  forward = blockwise_blocks(query_shape, key_shape, is_causal=skips, differentiated=False)
  return Choice("blockwise", *blocks, reason=f"S = {kv_len} >= {BLOCKWISE_MIN_KV_LEN}{seen}",
                forward=None if forward == blocks else Choice("blockwise", *forward, reason="undifferentiated"))


def split_forward(forward_fn: Any, differentiable_fn: Any, query: Array, key: Array, value: Array) -> Array:
  """``forward_fn(q, k, v)`` when not differentiated; ``differentiable_fn``'s value and gradients under differentiation.

  A ``jax.custom_vjp``: its undifferentiated evaluation is ``forward_fn`` (the path fastest forward alone: other tiles,
  or dense); its forward under ``jax.grad``/``jax.vjp`` is ``differentiable_fn``'s (blockwise, which saves what its
  backward needs), and so is its backward. The two agree up to float rounding. No ``jax.jvp``, as for blockwise.

  Args:
    forward_fn: attention of (q, k, v) by the path run alone, every other argument bound.
    differentiable_fn: the same attention by the path run under differentiation.
    query, key, value: [B, T, N, H], [B, S, K, H] and [B, S, K, H].

  Returns:
    The attention output [B, T, N, H].
  """
  @jax.custom_vjp
  def attend(q, k, v):
    return forward_fn(q, k, v)

  def attend_fwd(q, k, v):
    return jax.vjp(differentiable_fn, q, k, v)  # (output, its backward with its residuals)

  attend.defvjp(attend_fwd, lambda vjp, cotangent: vjp(cotangent))
  return attend(query, key, value)


def blockwise_blocks(query_shape: tuple[int, ...], key_shape: tuple[int, ...], *, is_causal: bool,
                     differentiated: bool = True) -> tuple[int, int]:
  """(block_q, block_k) of the measured rule, capped at T and S.

  Args:
    query_shape, key_shape: [B, T, N, H] and [B, S, K, H] (or unbatched).
    is_causal: whether a causal mask (or a local window) skips tiles.
    differentiated: the tiles for forward+backward (True) or for the forward pass alone.

  Returns:
    Causal without GQA and S below STEP_CAP_MAX_KV_LEN: the first of LARGE_BLOCKS (from S = LARGE_BLOCKS_MIN_KV_LEN)
    and BLOCKS whose B·N·bq·bk (capped at T and S), one step's tiles over the batch and heads, is at most T·S, the
    logits of one head; else MIN_BLOCKS under differentiation and BLOCKS for the forward pass alone. Otherwise
    LARGE_BLOCKS, halved (block_k to 256, block_q to 128, block_k to MIN_BLOCKS[1], block_q to MIN_BLOCKS[0]) until
    G·bq·bk, the tile of one key/value head with its GQA group G = N/K folded into the query rows, holds at most
    TILE_MAX_ELEMENTS.
  """
  q_len, kv_len = query_shape[-3], key_shape[-3]
  rows = max(1, query_shape[-2] // key_shape[-2])  # the GQA group G
  ungrouped_causal = is_causal and rows == 1  # with GQA the group's tile cap alone sizes the tiles, as unmasked
  start = BLOCKS if ungrouped_causal and kv_len < LARGE_BLOCKS_MIN_KV_LEN else LARGE_BLOCKS
  if ungrouped_causal and kv_len < STEP_CAP_MAX_KV_LEN:  # the step cap; G = 1, so every candidate holds the tile cap
    batch_heads = query_shape[-2] * (query_shape[0] if len(query_shape) == 4 else 1)  # B·N
    step = lambda tile: batch_heads * min(tile[0], q_len) * min(tile[1], kv_len)
    fits = [tile for tile in (start, BLOCKS) if step(tile) <= q_len * kv_len]
    block_q, block_k = fits[0] if fits else (MIN_BLOCKS if differentiated else BLOCKS)
  else:
    block_q, block_k = start
    for axis, floor in ((1, 256), (0, 128), (1, MIN_BLOCKS[1]), (0, MIN_BLOCKS[0])):
      while rows * block_q * block_k > TILE_MAX_ELEMENTS and (block_q, block_k)[axis] > floor:
        block_q, block_k = (block_q // 2, block_k) if axis == 0 else (block_q, block_k // 2)
  return min(block_q, q_len), min(block_k, kv_len)


def fixed_tiles(choice: Choice) -> list[tuple[int, int]]:
  """The (block_q, block_k) tiles a fixed-rule choice runs: its own and its forward's (none for dense)."""
  paths = (choice, choice.forward) if choice.forward is not None else (choice,)
  return [(c.block_q, c.block_k) for c in paths if c.implementation == "blockwise"]


def auto_choice(query_shape: Sequence[int], key_shape: Sequence[int], dtype: Any, opts: LogitOptions, *,
                is_causal: bool, local_window_size: int | tuple[int, int] | None, has_bias: bool, has_mask: bool,
                has_lengths: bool, return_weights: bool) -> Choice:
  """What ``dot_product_attention(implementation="auto")`` runs: the cached choice, else a fresh tuning's.

  On a miss ``autotune.tune_attention`` measures the case now (dense and blockwise at its candidate tiles and the fixed
  rule's, both passes) and stores the fastest. The fixed rule (``select_implementation``) decides unmeasured where
  there is nothing to tune: options blockwise lacks, S below ``BLOCKWISE_MIN_KV_LEN``, a bias, mask or lengths, or
  cuDNN. A cache entry that is malformed or whose tile does not fit T and S is warned about and the fixed rule used.

  Args:
    query_shape, key_shape: [B, T, N, H] and [B, S, K, H] (or unbatched).
    dtype, opts: the input dtype and the resolved logit options.
    is_causal, local_window_size: the masking (the window, or None).
    has_bias, has_mask, has_lengths, return_weights: whether a bias, mask or sequence lengths are given, weights asked.

  Returns:
    The ``Choice`` to run.
  """
  fixed = select_implementation(
      query_shape, key_shape, opts, dtype=dtype, return_weights=return_weights, has_bias=has_bias,
      is_causal=is_causal, has_local_window=local_window_size is not None)
  if (fixed.implementation == "cudnn" or has_bias or has_mask or has_lengths
      or blockwise_lib.blockwise_unsupported(opts, return_weights=return_weights) is not None
      or key_shape[-3] < BLOCKWISE_MIN_KV_LEN):
    return fixed
  key = autotune.cache_key(query_shape, key_shape, dtype, opts, is_causal=is_causal,
                           local_window_size=local_window_size)
  entry = autotune.load().get(key)
  if entry is None:
    return autotune.tune_attention(query_shape, key_shape, dtype, is_causal=is_causal, opts=opts,
                                   local_window_size=local_window_size, fixed_blocks=fixed_tiles(fixed)).choice
  choice = autotune.entry_choice(entry, query_shape, key_shape)
  if choice is None:
    warnings.warn(f"the attention autotune entry {key} in {autotune.cache_path()} is malformed or its tile does not "
                  f"fit T = {query_shape[-3]}, S = {key_shape[-3]} ({entry.get('choice')!r}); using the fixed rule")
    return fixed
  return choice


def dot_product_attention(query: Array, key: Array, value: Array, bias: Array | None = None,
                          mask: Array | None = None, *, scale: float | None = None,
                          rule: str | rules_lib.ScaleRule | None = None, is_causal: bool = False,
                          query_seq_lengths: Array | None = None, key_value_seq_lengths: Array | None = None,
                          local_window_size: int | tuple[int, int] | None = None,
                          logit_soft_cap: float | None = None, logit_clamp: float | None = None,
                          float32_softmax: bool = True, subtract_max: bool = True, implementation: str | None = None,
                          return_residual: bool = False, return_weights: bool = False) -> Array | tuple[Array, ...]:
  """Scaled dot-product attention, softmax(s·QKᵀ + bias)·V, with pluggable logit-scale rules.

  A drop-in for ``jax.nn.dot_product_attention`` (same layout and argument names); Vaswani et al. 2017, §3.2.1.
  B batch, T query length, S key length, N query heads, K key/value heads (N a multiple of K: GQA), H head dim.

  Args:
    query: [B, T, N, H] or [T, N, H].
    key: [B, S, K, H] or [S, K, H].
    value: same shape as key.
    bias: added to the logits after scaling; broadcastable to [B, N, T, S].
    mask: boolean, True = attend; broadcastable to [B, N, T, S].
    scale: a number s; the default (with ``rule=None``) is 1/√H as in jax.nn.
    rule: a logit-scale rule name (see ``scaling.available_rules()``) or a ``ScaleRule``; an alternative to ``scale``.
    is_causal: query i attends keys j <= i.
    query_seq_lengths: int [B]; queries at or past the length output 0.
    key_value_seq_lengths: int [B]; keys at or past the length are masked.
    local_window_size: (left, right) window, or one int for both.
    logit_soft_cap, logit_clamp: c > 0 replaces logits z by c·tanh(z/c) (Gemma 2), or clips them to [-c, c].
    float32_softmax: logits and softmax in float32 whatever the input dtype (default); False: in the input dtype, only
      to demonstrate low-precision failures.
    subtract_max: subtract the row maximum before exp (default). False exists only to demonstrate overflow.
    implementation: None runs the fastest exact path for the shapes, options and backend by the measured rule of
      ``select_implementation`` (dense, blockwise with its tiles, or cuDNN on GPU in half precision with a plain
      scale). Where the forward pass alone is faster with other tiles (``Choice.forward``), a call that is not
      differentiated runs those (``split_forward``; no bias, mask, lengths or residual), so its output then differs
      from the differentiated call's in float rounding only. ``"dense"`` (alias ``"xla"``) forces the dense code;
      ``"blockwise"`` forces ``scaling.attention.blockwise`` (default blocks); ``"pallas"`` the Pallas
      flash-attention kernel (``scaling.attention.pallas``; rules "prepare, then a plain scale", optionally causal,
      no bias, mask, lengths, window, cap or clamp); ``"cudnn"`` ``jax.nn.dot_product_attention(implementation=
      "cudnn")`` on GPU (a plain scale, no cap, clamp or weight scale). Forced implementations raise on options they
      lack. ``"auto"`` (opt-in) runs the path measured fastest for this case (``auto_choice``: the first call of a case
      times dense and blockwise at several tiles, also under jit, and ``scaling.attention.autotune`` remembers the
      fastest on disk); unlike None, its choice can differ between machines and runs.
    return_residual: also return the log-sum-exp of the masked logits [B, T, N] (as jax.nn; -inf where all masked).
    return_weights: also return the attention weights [B, N, T, S].

  Returns:
    Output [B, T, N, H] (fully masked query rows give 0), followed by the residual and/or weights when requested.
  """
  query, key, value, batched = logits_lib.check_qkv(query, key, value)
  logits_lib.check_attention_args(query.shape, key.shape, bias, mask, batched=batched, is_causal=is_causal,
                                  query_seq_lengths=query_seq_lengths, key_value_seq_lengths=key_value_seq_lengths,
                                  local_window_size=local_window_size)
  logits_lib.check_flags(return_residual=return_residual, return_weights=return_weights)
  opts = logits_lib.resolve_logit_options(query.shape[-1], scale=scale, rule=rule, logit_soft_cap=logit_soft_cap,
                                          logit_clamp=logit_clamp, float32_softmax=float32_softmax,
                                          subtract_max=subtract_max)
  if implementation is not None and implementation not in (*IMPLEMENTATIONS, AUTO):
    raise ConfigError(f"implementation must be None or one of {', '.join((*IMPLEMENTATIONS, AUTO))}, got "
                      f"{implementation!r}")
  blocks, choice = {}, None
  if implementation == AUTO:
    choice = auto_choice(
        query.shape, key.shape, query.dtype, opts, is_causal=is_causal, local_window_size=local_window_size,
        has_bias=bias is not None, has_mask=mask is not None, return_weights=return_weights,
        has_lengths=query_seq_lengths is not None or key_value_seq_lengths is not None)
  elif implementation is None:
    choice = select_implementation(query.shape, key.shape, opts, dtype=query.dtype, return_weights=return_weights,
                                   has_bias=bias is not None, is_causal=is_causal,
                                   has_local_window=local_window_size is not None)
  if implementation in (None, AUTO):
    implementation = choice.implementation
    blocks = {k: v for k, v in (("block_q", choice.block_q), ("block_k", choice.block_k)) if v is not None}
  mask_kwargs = dict(is_causal=is_causal, query_seq_lengths=query_seq_lengths,
                     key_value_seq_lengths=key_value_seq_lengths, local_window_size=local_window_size)
  # Undifferentiated, the choice's own forward runs where nothing else rides on the call: no bias, mask, lengths or
  # residual, and plain Python logit options (a traced scale or rule parameter may be what is differentiated). Below
  # S = BLOCKWISE_MIN_KV_LEN, where the rule's forward is dense, a call that cannot split runs dense.
  plain = (bias is None and mask is None and query_seq_lengths is None and key_value_seq_lengths is None
           and not return_residual and (rule is None or isinstance(rule, str))
           and all(x is None or isinstance(x, (int, float)) for x in (scale, logit_soft_cap, logit_clamp)))
  split = choice is not None and choice.forward is not None and implementation == "blockwise"
  if split and not plain and key.shape[-3] < BLOCKWISE_MIN_KV_LEN and choice.forward.implementation == "dense":
    implementation, split = "dense", False
  if implementation == "cudnn":
    out = _cudnn(query, key, value, bias, mask, opts, return_residual=return_residual, return_weights=return_weights,
                 **mask_kwargs)
  elif implementation == "pallas":
    out = _pallas(query, key, value, bias, mask, opts, return_residual=return_residual, return_weights=return_weights,
                  **mask_kwargs)
  else:
    if implementation == "blockwise":
      if return_weights:
        raise ConfigError("implementation='blockwise' does not return weights")
      blockwise_lib.check_softmax(float32_softmax, subtract_max)
      if split and plain:  # the inputs and options are checked above: the paths trust them
        out = split_forward(autotune.unchecked_path_function(choice.forward, opts, **mask_kwargs),
                            autotune.unchecked_path_function(choice, opts, **mask_kwargs), query, key, value)
      else:
        out = blockwise_lib.blockwise_attention_unchecked(query, key, value, bias, mask, opts,
                                                          return_residual=return_residual, **mask_kwargs, **blocks)
    else:
      out = dense_lib.dense_attention_unchecked(query, key, value, bias, mask, opts, return_residual=return_residual,
                                                return_weights=return_weights, **mask_kwargs)
  return out if batched else jax.tree.map(lambda x: x[0], out)


def _pallas(query, key, value, bias, mask, opts: LogitOptions, *, is_causal, return_residual, return_weights,
            **mask_kwargs):
  """The Pallas kernel (its default blocks) on batched inputs, where it covers the options."""
  if return_weights:
    raise ConfigError("implementation='pallas' does not return weights")
  reason = pallas_lib.supports(opts, bias=bias, mask=mask, **mask_kwargs)
  if reason is not None:
    raise ConfigError(f"implementation='pallas' does not support {reason}")
  return pallas_lib.pallas_attention_unchecked(query, key, value, opts, is_causal=is_causal,
                                               return_residual=return_residual)


def _cudnn(query, key, value, bias, mask, opts: LogitOptions, *, return_weights, **kwargs):
  """Dispatch to jax.nn's cuDNN flash attention where our options allow it."""
  reason = _cudnn_unsupported(opts, return_weights=return_weights)
  if reason is not None:
    raise ConfigError(reason)
  if jax.default_backend() != "gpu":
    raise ConfigError(f"implementation='cudnn' needs a GPU; the default backend is {jax.default_backend()!r}")
  return jax.nn.dot_product_attention(query, key, value, bias, mask, scale=opts.scale, implementation="cudnn",
                                      **kwargs)
