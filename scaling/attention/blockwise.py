"""Blockwise (online-softmax) attention: the dense result in O(T) memory, forward and backward.

``blockwise_attention`` computes exactly what ``scaling.dot_product_attention``
computes (same layout, options, logit-scale rules and masking conventions) but
never holds a [T, S] matrix: queries are cut into blocks of ``block_q`` rows
and, for each query block, key blocks of ``block_k`` columns are visited in
turn while a running maximum m, running sum l and a rescaled float32
accumulator are kept (Milakov & Gimelshein 2018, "Online normalizer
calculation for softmax"; Dao 2023, "FlashAttention-2", Algorithm 1). The
backward pass is a ``jax.custom_vjp`` that keeps only q, k, v, bias, mask, the
output and the log-sum-exp, and recomputes each tile of probabilities
(FlashAttention-2, Algorithm 2: D = rowsum(dO·O), dS = P·(dP − D)), so training
memory grows like T·block instead of T·S.

Exactness: every tile goes through the same pieces as the dense path
(``rule.prepare`` once on q and k, ``shape_logits`` for scale, bias, soft cap
and clamp, ``masking.tile_mask`` for the visibility of a tile, the rule's
weight scale on the output), so outputs and gradients agree with the dense
path to float32 rounding. Logits, softmax statistics and accumulators are
float32 whatever the input dtype. Key blocks that the causal mask, the local
window or the sequence lengths hide completely are not visited (the inner loop
runs from the first to the last key block that can be visible), which halves
the work of causal attention; tiles that the causal mask or the window leave
wholly visible (all but the diagonal's) skip building and applying a mask. Any T and S work: both are padded up to block
multiples and the padding is masked.

The bias, when given, receives a gradient (accumulated tile by tile, so it
costs memory of the bias's own size; a bias broadcast over some axes gets the
correspondingly summed gradient). Masks and sequence lengths get none.

Where it runs: this module is pure JAX (``lax.scan`` over query blocks,
``lax.fori_loop``s with data-dependent bounds over key blocks), so it runs on
CPU, GPU and TPU alike, with every logit-scale rule.
``scaling.dot_product_attention`` runs it by default from S = 256 on (the
rule measured in ``scaling.attention.dispatch``). On GPU the fused cuDNN kernel is
reached through ``implementation="cudnn"`` (chosen by default in half
precision when the rule is a plain scale), and a Pallas flash-attention kernel
through ``implementation="pallas"`` (``scaling.attention.pallas``).

The Pallas kernel's backward is this module's: for it the plan (``Plan``,
``make_plan``), the blocked layouts (``blocks_q``, ``blocks_kv`` and their
inverses ``unblocks_q``, ``unblocks_kv``) and the backward pass
(``attention_core_bwd``) are public.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from scaling.attention import logits as logits_lib
from scaling.attention import masking as masking_lib
from scaling.attention import rules as rules_lib
from scaling.base.validation import ConfigError

Array = jax.Array

_F32 = jnp.float32


@dataclasses.dataclass(frozen=True)
class Plan:
  """Static shapes and options of one blockwise call (hashable: a custom_vjp static argument)."""

  batch: int
  q_len: int
  kv_len: int
  num_kv_heads: int
  groups: int
  block_q: int
  block_k: int
  num_q_blocks: int
  num_k_blocks: int
  is_causal: bool
  window: tuple[int, int] | None
  opts: logits_lib.LogitOptions  # rule replaced by the base rule: only scale, cap and clamp are used here.

  @property
  def num_heads(self) -> int:
    return self.num_kv_heads * self.groups

  @property
  def kv_padded(self) -> bool:
    return self.num_k_blocks * self.block_k > self.kv_len


def make_plan(query_shape: tuple[int, ...], key_shape: tuple[int, ...], opts: logits_lib.LogitOptions, *,
              block_q: int, block_k: int, is_causal: bool, window: tuple[int, int] | None) -> Plan:
  """The plan of one call on batched inputs, the blocks capped at T and S.

  Args:
    query_shape: [B, T, N, H].
    key_shape: [B, S, K, H].
    opts: the resolved logit options (their rule is replaced by the base rule: ``prepare`` runs before blocking).
    block_q: query rows per block.
    block_k: key columns per block.
    is_causal: whether query i attends only keys j <= i.
    window: the (left, right) local window, or None.

  Returns:
    The ``Plan`` (T and S padded up to whole blocks).
  """
  b, t, n, _ = query_shape
  s, kh = key_shape[1], key_shape[2]
  bq, bk = min(block_q, t), min(block_k, s)
  return Plan(batch=b, q_len=t, kv_len=s, num_kv_heads=kh, groups=n // kh, block_q=bq, block_k=bk,
              num_q_blocks=-(-t // bq), num_k_blocks=-(-s // bk), is_causal=bool(is_causal), window=window,
              opts=dataclasses.replace(opts, rule=rules_lib.ScaleRule()))


def blockwise_unsupported(opts: logits_lib.LogitOptions, *, return_weights: bool) -> str | None:
  """Why the blockwise path cannot compute these options (None when it can).

  Args:
    opts: the resolved logit options (``scaling.attention.logits.resolve_logit_options``).
    return_weights: whether the [T, S] weights are requested.

  Returns:
    The reason, or None.
  """
  if not opts.float32_softmax or not opts.subtract_max:
    return "float32_softmax=False or subtract_max=False (dense only)"
  if return_weights:
    return "return_weights needs the full [T, S] weights"
  if not isinstance(opts.scale, float) or not isinstance(opts.weight_scale, float):
    return "a traced (vmapped) scale"
  return None


def blocks_q(x: Array, plan: Plan) -> Array:
  """[B, T, N, H] -> [nq, B, K, G, bq, H], padding T with zeros."""
  b, t, _, h = x.shape
  x = jnp.pad(x, ((0, 0), (0, plan.num_q_blocks * plan.block_q - t), (0, 0), (0, 0)))
  x = x.reshape(b, plan.num_q_blocks, plan.block_q, plan.num_kv_heads, plan.groups, h)
  return x.transpose(1, 0, 3, 4, 2, 5)


def unblocks_q(x: Array, plan: Plan) -> Array:
  """[nq, B, K, G, bq, ...] -> [B, T, N, ...], dropping the padding."""
  rest = x.shape[5:]
  x = jnp.moveaxis(x, 4, 1)  # [nq, bq, B, K, G, ...]
  x = x.reshape(plan.num_q_blocks * plan.block_q, plan.batch, plan.num_heads, *rest)
  return jnp.moveaxis(x, 0, 1)[:, :plan.q_len]


def blocks_kv(x: Array, plan: Plan) -> Array:
  """[B, S, K, H] -> [nk, B, K, bk, H], padding S with zeros."""
  b, s, k, h = x.shape
  x = jnp.pad(x, ((0, 0), (0, plan.num_k_blocks * plan.block_k - s), (0, 0), (0, 0)))
  x = x.reshape(b, plan.num_k_blocks, plan.block_k, k, h)
  return x.transpose(1, 0, 3, 2, 4)


def unblocks_kv(x: Array, plan: Plan) -> Array:
  """[nk, B, K, bk, H] -> [B, S, K, H], dropping the padding."""
  nk, b, k, bk, h = x.shape
  return x.transpose(1, 0, 3, 2, 4).reshape(b, nk * bk, k, h)[:, :plan.kv_len]


def _pad_ts(x: Array, plan: Plan, value) -> Array:
  """Pads the T and S axes of a [B|1, N|1, T|1, S|1] array (those not broadcast) to block multiples."""
  pad_t = plan.num_q_blocks * plan.block_q - plan.q_len if x.shape[2] > 1 else 0
  pad_s = plan.num_k_blocks * plan.block_k - plan.kv_len if x.shape[3] > 1 else 0
  if not pad_t and not pad_s:
    return x
  return jnp.pad(x, ((0, 0), (0, 0), (0, pad_t), (0, pad_s)), constant_values=value)


def _tile_starts_sizes(x: Array, plan: Plan, i, j):
  """Start indices and sizes of tile (i, j) of a padded [B|1, N|1, Tp|1, Sp|1] array."""
  b, n, t, s = x.shape
  zero = jnp.zeros((), jnp.int32)
  starts = (zero, zero, i * plan.block_q if t > 1 else zero, j * plan.block_k if s > 1 else zero)
  sizes = (b, n, plan.block_q if t > 1 else 1, plan.block_k if s > 1 else 1)
  return starts, sizes


def _tile(x: Array | None, plan: Plan, i, j) -> Array | None:
  """Tile (i, j) of a padded [B|1, N|1, Tp|1, Sp|1] array, broadcast axes kept at size 1."""
  if x is None:
    return None
  starts, sizes = _tile_starts_sizes(x, plan, i, j)
  return lax.dynamic_slice(x, starts, sizes)


def _add_tile(acc: Array, update: Array, plan: Plan, i, j) -> Array:
  """Adds ``update`` into tile (i, j) of the padded accumulator ``acc``."""
  starts, sizes = _tile_starts_sizes(acc, plan, i, j)
  return lax.dynamic_update_slice(acc, lax.dynamic_slice(acc, starts, sizes) + update, starts)


def _tile_visibility(plan: Plan, mask: Array | None, q_lens: Array | None, kv_lens: Array | None,
                     i, j) -> Array | None:
  """Boolean visibility of tile (i, j), grouped [B|1, K|1, G|1, bq, bk], or None when all visible."""
  vis = masking_lib.tile_mask(
      plan.batch, plan.num_heads, plan.block_q, plan.block_k, q_offset=i * plan.block_q, kv_offset=j * plan.block_k,
      kv_len=plan.kv_len if plan.kv_padded else None, mask=_tile(mask, plan, i, j), is_causal=plan.is_causal,
      query_seq_lengths=q_lens, key_value_seq_lengths=kv_lens, local_window_size=plan.window)
  return masking_lib.group_heads(vis, plan.num_kv_heads, plan.groups)


def _grouped_bias_tile(plan: Plan, bias: Array | None, i, j) -> Array | None:
  """Tile (i, j) of the padded bias, grouped [B|1, K|1, G|1, bq|1, bk|1], or None without a bias."""
  return masking_lib.group_heads(_tile(bias, plan, i, j), plan.num_kv_heads, plan.groups)


def _key_block_range(plan: Plan, i, q_lens: Array | None, kv_lens: Array | None):
  """[lo, hi): the key blocks that query block i can see at all (causal, window, sequence lengths)."""
  bq, bk = plan.block_q, plan.block_k
  lo, hi = 0, plan.num_k_blocks
  q_first = i * bq
  q_last = jnp.minimum(q_first + bq - 1, plan.q_len - 1)
  if plan.is_causal:
    hi = jnp.minimum(hi, q_last // bk + 1)
  if plan.window is not None:
    left, right = plan.window
    lo = jnp.maximum(lo, jnp.maximum(q_first - left, 0) // bk)
    hi = jnp.minimum(hi, jnp.floor_divide(q_last + right, bk) + 1)
  if kv_lens is not None:
    hi = jnp.minimum(hi, (jnp.max(kv_lens) + bk - 1) // bk)
  if q_lens is not None:
    hi = jnp.where(q_first < jnp.max(q_lens), hi, lo)
  if not isinstance(hi, int):
    hi = jnp.maximum(hi, lo)
  return lo, hi


def _unmasked_block_range(plan: Plan, i, lo, hi, has_mask: bool):
  """[full_lo, full_hi) within [lo, hi): key blocks whose tile with query block i is visible everywhere.

  Those tiles skip building and applying a visibility mask. Only the causal mask and the local window are
  structural; a user mask or sequence lengths make every tile masked, and a padded last key block is masked.
  """
  if has_mask:
    return lo, lo
  bq, bk = plan.block_q, plan.block_k
  q_min, q_max = i * bq, i * bq + bq - 1
  full_lo, full_hi = lo, hi
  if plan.is_causal:  # last key of the tile <= first query
    full_hi = jnp.minimum(full_hi, (q_min + 1) // bk)
  if plan.window is not None:  # q_max - left <= first key and last key <= q_min + right
    left, right = plan.window
    full_lo = jnp.maximum(full_lo, -((left - q_max) // bk))
    full_hi = jnp.minimum(full_hi, (q_min + right + 1) // bk)
  if plan.kv_padded:
    full_hi = jnp.minimum(full_hi, plan.num_k_blocks - 1)
  full_lo = jnp.clip(full_lo, lo, hi)
  full_hi = jnp.clip(full_hi, full_lo, hi)
  return full_lo, full_hi


def _visit_key_blocks(plan: Plan, i, lo, hi, has_mask: bool, body, init):
  """Runs ``body(j, carry, masked)`` over key blocks [lo, hi): masked edges, the unmasked interior without a mask."""
  full_lo, full_hi = _unmasked_block_range(plan, i, lo, hi, has_mask)
  masked = lambda j, c: body(j, c, True)
  carry = lax.fori_loop(lo, full_lo, masked, init)
  carry = lax.fori_loop(full_lo, full_hi, lambda j, c: body(j, c, False), carry)
  return lax.fori_loop(full_hi, hi, masked, carry)


def _raw_logits(q_i: Array, k_j: Array) -> Array:
  """q_i [B, K, G, bq, H] · k_j [B, K, bk, H] -> [B, K, G, bq, bk] in float32."""
  return jnp.einsum("bkgqh,bksh->bkgqs", q_i, k_j, preferred_element_type=_F32)


def _forward(plan: Plan, qb, kb, vb, bias, mask, q_lens, kv_lens):
  """Online-softmax forward. Returns (out [nq, B, K, G, bq, H], lse [nq, B, K, G, bq], tile count)."""
  b, kh, g, bq, h = qb.shape[1:]
  stat_shape = (b, kh, g, bq)
  has_mask = mask is not None or q_lens is not None or kv_lens is not None

  def query_block(args):
    i, q_i = args
    lo, hi = _key_block_range(plan, i, q_lens, kv_lens)

    def key_block(j, carry, masked):
      m, l, acc, count = carry
      s = logits_lib.shape_logits(_raw_logits(q_i, kb[j]), _grouped_bias_tile(plan, bias, i, j), plan.opts)
      vis = _tile_visibility(plan, mask, q_lens, kv_lens, i, j) if masked else None
      if vis is not None:
        s = jnp.where(vis, s, -jnp.inf)
      m_new = jnp.maximum(m, jnp.max(s, axis=-1))
      shift = jnp.where(jnp.isfinite(m_new), m_new, 0.0)
      p = jnp.exp(s - shift[..., None])
      alpha = jnp.exp(m - shift)
      l = alpha * l + jnp.sum(p, axis=-1)
      pv = jnp.einsum("bkgqs,bksh->bkgqh", p.astype(vb.dtype), vb[j], preferred_element_type=_F32)
      return m_new, l, alpha[..., None] * acc + pv, count + 1

    init = (jnp.full(stat_shape, -jnp.inf, _F32), jnp.zeros(stat_shape, _F32),
            jnp.zeros((*stat_shape, h), _F32), jnp.zeros((), jnp.int32))
    m, l, acc, count = _visit_key_blocks(plan, i, lo, hi, has_mask, key_block, init)
    seen = l > 0
    out = acc / jnp.where(seen, l, 1.0)[..., None]
    lse = jnp.where(seen, m + jnp.log(jnp.where(seen, l, 1.0)), -jnp.inf)
    return out.astype(vb.dtype), lse, count

  out, lse, counts = lax.map(query_block, (jnp.arange(plan.num_q_blocks, dtype=jnp.int32), qb))
  return out, lse, jnp.sum(counts)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _attention_core(plan: Plan, qb, kb, vb, bias, mask, q_lens, kv_lens):
  """Blocked attention with a memory-efficient backward; returns (out, lse) in blocked layout."""
  out, lse, _ = _forward(plan, qb, kb, vb, bias, mask, q_lens, kv_lens)
  return out, lse


def _attention_core_fwd(plan: Plan, qb, kb, vb, bias, mask, q_lens, kv_lens):
  out, lse, _ = _forward(plan, qb, kb, vb, bias, mask, q_lens, kv_lens)
  return (out, lse), (qb, kb, vb, bias, mask, q_lens, kv_lens, out, lse)


def attention_core_bwd(plan: Plan, residuals, cotangents):
  """FlashAttention-2 backward: recompute P per tile; dV += PᵀdO, dS = P(dP − D), dQ += dS·K, dK += dSᵀQ.

  Args:
    plan: the call's ``Plan``.
    residuals: ``(qb, kb, vb, bias, mask, q_lens, kv_lens, out, lse)`` in the blocked layouts (``blocks_q`` for
      q, out and lse; ``blocks_kv`` for k and v), q and k already prepared by the rule; bias, mask and the
      lengths padded as ``blockwise_attention`` pads them, or None.
    cotangents: ``(d_out, _)``, d_out blocked like out (the log-sum-exp gets no cotangent).

  Returns:
    The cotangents of ``residuals[:7]``: dq, dk, dv blocked, dbias (or None), and None for mask and lengths.
  """
  qb, kb, vb, bias, mask, q_lens, kv_lens, out, lse = residuals
  d_out, _ = cotangents  # the log-sum-exp is returned under stop_gradient
  d_out = d_out.astype(vb.dtype)
  delta = jnp.sum(d_out.astype(_F32) * out.astype(_F32), axis=-1)  # D, [nq, B, K, G, bq]
  dtype = qb.dtype
  has_mask = mask is not None or q_lens is not None or kv_lens is not None

  def query_block(carry, xs):
    i, q_i, do_i, lse_i, delta_i = xs
    lse_i = jnp.where(jnp.isfinite(lse_i), lse_i, 0.0)[..., None]
    lo, hi = _key_block_range(plan, i, q_lens, kv_lens)

    def key_block(j, c, masked):
      dq_i, dk, dv, dbias = c
      k_j, v_j = kb[j], vb[j]
      shape = lambda raw, bias_tile: logits_lib.shape_logits(raw, bias_tile, plan.opts)
      bias_tile = _grouped_bias_tile(plan, bias, i, j)
      if bias_tile is None:
        s, shape_vjp = jax.vjp(lambda raw: shape(raw, None), _raw_logits(q_i, k_j))
      else:
        s, shape_vjp = jax.vjp(shape, _raw_logits(q_i, k_j), bias_tile)
      p = jnp.exp(s - lse_i)
      vis = _tile_visibility(plan, mask, q_lens, kv_lens, i, j) if masked else None
      if vis is not None:
        p = jnp.where(vis, p, 0.0)
      dv = dv.at[j].add(jnp.einsum("bkgqh,bkgqs->bkhs", do_i, p.astype(dtype), preferred_element_type=_F32))
      dp = jnp.einsum("bkgqh,bksh->bkgqs", do_i, v_j, preferred_element_type=_F32)
      ds = p * (dp - delta_i[..., None])
      grads = shape_vjp(ds)
      ds_raw = grads[0].astype(dtype)
      dq_i = dq_i + jnp.einsum("bkgqs,bksh->bkgqh", ds_raw, k_j, preferred_element_type=_F32)
      dk = dk.at[j].add(jnp.einsum("bkgqh,bkgqs->bkhs", q_i, ds_raw, preferred_element_type=_F32))
      if bias is not None:
        dbias = _add_tile(dbias, masking_lib.ungroup_heads(grads[1]), plan, i, j)
      return dq_i, dk, dv, dbias

    dk, dv, dbias = carry
    dq_i, dk, dv, dbias = _visit_key_blocks(plan, i, lo, hi, has_mask, key_block,
                                            (jnp.zeros(q_i.shape, _F32), dk, dv, dbias))
    return (dk, dv, dbias), dq_i

  # dK and dV accumulate transposed, [nk, B, K, H, bk]: dKᵀ += Qᵀ·dS and dVᵀ += dOᵀ·P contract the [G·bq, bk]
  # tiles over their rows as they lie, so XLA transposes the small [G·bq, H] tiles of q and dO rather than copying
  # each [G·bq, bk] tile of dS and P into another layout (on CPU that copy was the largest op of
  # ``python -m experiments.benchmark --suite=attention_profile``).
  kv_t_shape = (*kb.shape[:-2], kb.shape[-1], kb.shape[-2])
  init = (jnp.zeros(kv_t_shape, _F32), jnp.zeros(kv_t_shape, _F32),
          None if bias is None else jnp.zeros(bias.shape, _F32))
  xs = (jnp.arange(plan.num_q_blocks, dtype=jnp.int32), qb, d_out, lse, delta)
  (dk, dv, dbias), dq = lax.scan(query_block, init, xs)
  dk, dv = jnp.swapaxes(dk, -1, -2), jnp.swapaxes(dv, -1, -2)
  dbias = None if bias is None else dbias.astype(bias.dtype)
  return dq.astype(qb.dtype), dk.astype(kb.dtype), dv.astype(vb.dtype), dbias, None, None, None


_attention_core.defvjp(_attention_core_fwd, attention_core_bwd)


def check_softmax(float32_softmax: Any, subtract_max: Any) -> None:
  """ConfigError unless the softmax options are blockwise's own: float32, with the running maximum subtracted."""
  if not float32_softmax or not subtract_max:
    raise ConfigError("blockwise attention always computes the softmax in float32 and subtracts the running "
                      "maximum; float32_softmax=False and subtract_max=False exist only on the dense path")


def check_blocks(block_q: Any, block_k: Any) -> None:
  """ConfigError unless both tile sizes are positive integers."""
  for name, v in (("block_q", block_q), ("block_k", block_k)):
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
      raise ConfigError(f"{name} must be a positive integer, got {v!r}")


def _check(query, key, value, bias=None, mask=None, *, block_q=128, block_k=128, scale=None, rule=None,
           is_causal=False, query_seq_lengths=None, key_value_seq_lengths=None, local_window_size=None,
           logit_soft_cap=None, logit_clamp=None, float32_softmax=True, subtract_max=True):
  """Validates the arguments of a blockwise call: (query, key, value 4-D, batched, the resolved options)."""
  check_softmax(float32_softmax, subtract_max)
  check_blocks(block_q, block_k)
  return logits_lib.check_inputs(query, key, value, bias, mask, scale=scale, rule=rule, is_causal=is_causal,
                                 query_seq_lengths=query_seq_lengths, key_value_seq_lengths=key_value_seq_lengths,
                                 local_window_size=local_window_size, logit_soft_cap=logit_soft_cap,
                                 logit_clamp=logit_clamp, float32_softmax=True, subtract_max=True)


def _prepare(query, key, value, bias, mask, opts: logits_lib.LogitOptions, *, block_q, block_k, is_causal=False,
             query_seq_lengths=None, key_value_seq_lengths=None, local_window_size=None):
  """The plan and the blocked, padded operands of checked 4-D inputs."""
  b, t, n, _ = query.shape
  plan = make_plan(query.shape, key.shape, opts, block_q=block_q, block_k=block_k, is_causal=is_causal,
                   window=masking_lib.window_bounds(local_window_size))
  if bias is not None:
    bias = _pad_ts(masking_lib.ensure_4d(bias, "bias").astype(_F32), plan, 0.0)
  mask = masking_lib.ensure_bool_mask(mask)
  if mask is not None:
    mask = _pad_ts(mask, plan, False)
  lens = [None if x is None else jnp.asarray(x).reshape(b).astype(jnp.int32)
          for x in (query_seq_lengths, key_value_seq_lengths)]
  query, key = opts.rule.prepare(query, key)
  operands = (blocks_q(query, plan), blocks_kv(key, plan), blocks_kv(value, plan), bias, mask, *lens)
  return plan, operands


def blockwise_attention(query: Array, key: Array, value: Array, bias: Array | None = None, mask: Array | None = None, *,
                        block_q: int = 128, block_k: int = 128, scale: float | None = None,
                        rule: str | rules_lib.ScaleRule | None = None, is_causal: bool = False,
                        query_seq_lengths: Array | None = None, key_value_seq_lengths: Array | None = None,
                        local_window_size: int | tuple[int, int] | None = None, logit_soft_cap: float | None = None,
                        logit_clamp: float | None = None, float32_softmax: bool = True, subtract_max: bool = True,
                        return_residual: bool = False) -> Array | tuple[Array, Array]:
  """Attention softmax(s·QKᵀ + bias)·V computed block by block in O(T) memory, with an O(T) backward.

  Same result as ``scaling.dot_product_attention`` (online softmax: Milakov &
  Gimelshein 2018; blocking and backward: Dao 2023, "FlashAttention-2"). B
  batch, T query length, S key length, N query heads, K key/value heads (N a
  multiple of K: GQA, without repeating K and V), H head dim.

  Args:
    query, key, value, bias, mask, scale, rule, query_seq_lengths,
      key_value_seq_lengths, logit_soft_cap, logit_clamp: as for
      ``scaling.dot_product_attention``; the bias (each axis 1 or full) also
      receives a gradient, and ``rule.prepare`` is applied once to q and k.
    block_q: query rows per block (capped at T); T need not be a multiple.
    block_k: key columns per block (capped at S); S need not be a multiple.
      ``scaling.dot_product_attention`` picks the blocks by the rule measured
      in ``scaling.attention.dispatch`` (``BLOCKS``).
    is_causal: query i attends keys j <= i; key blocks past the diagonal are
      skipped.
    local_window_size: (left, right) window, or one int for both; key blocks
      outside the window are skipped.
    float32_softmax: must be True (the statistics are always float32).
    subtract_max: must be True (the running maximum is always subtracted).
    return_residual: also return the log-sum-exp of the masked logits
      [B, T, N] (-inf for fully masked rows), under stop_gradient.

  Returns:
    Output [B, T, N, H] in the value dtype (fully masked query rows give 0),
    and the log-sum-exp when ``return_residual``.

  Raises:
    ValueError: on inconsistent shapes or options, including
      ``float32_softmax=False`` or ``subtract_max=False``.
  """
  mask_kwargs = dict(is_causal=is_causal, query_seq_lengths=query_seq_lengths,
                     key_value_seq_lengths=key_value_seq_lengths, local_window_size=local_window_size)
  query, key, value, batched, opts = _check(
      query, key, value, bias, mask, block_q=block_q, block_k=block_k, scale=scale, rule=rule,
      logit_soft_cap=logit_soft_cap, logit_clamp=logit_clamp, float32_softmax=float32_softmax,
      subtract_max=subtract_max, **mask_kwargs)
  out = blockwise_attention_unchecked(query, key, value, bias, mask, opts, block_q=block_q, block_k=block_k,
                                      return_residual=return_residual, **mask_kwargs)
  return out if batched else jax.tree.map(lambda x: x[0], out)


def blockwise_attention_unchecked(query: Array, key: Array, value: Array, bias: Array | None, mask: Array | None,
                                  opts: logits_lib.LogitOptions, *, block_q: int = 128, block_k: int = 128,
                                  return_residual: bool = False, **mask_kwargs: Any) -> Array | tuple[Array, Array]:
  """``blockwise_attention`` of checked 4-D inputs and resolved options (``scaling.attention.logits.check_inputs``).

  Args:
    query, key, value: [B, T, N, H], [B, S, K, H], [B, S, K, H], checked.
    bias, mask: checked, or None.
    opts: the resolved logit options (float32 softmax with max-subtraction).
    block_q, block_k: positive tile sizes.
    return_residual: as ``blockwise_attention``.
    **mask_kwargs: is_causal, query_seq_lengths, key_value_seq_lengths, local_window_size (checked).

  Returns:
    What ``blockwise_attention`` returns for batched inputs.
  """
  plan, operands = _prepare(query, key, value, bias, mask, opts, block_q=block_q, block_k=block_k, **mask_kwargs)
  out, lse = _attention_core(plan, *operands)
  out = unblocks_q(out, plan)
  if opts.weight_scale != 1.0:
    out = out * jnp.asarray(opts.weight_scale, out.dtype)
  if not return_residual:
    return out
  return out, lax.stop_gradient(unblocks_q(lse, plan))


def blockwise_tile_count(query: Array, key: Array, value: Array, bias: Array | None = None,
                         mask: Array | None = None, **kwargs) -> Array:
  """Number of (query block, key block) tiles the forward pass of ``blockwise_attention`` visits.

  Runs the real forward loop and counts its iterations, so it shows which
  blocks causal masking, windows and sequence lengths skip: causal T = S with
  n blocks visits n(n+1)/2 of the n² tiles. Takes the arguments of
  ``blockwise_attention`` (except ``return_residual``).
  """
  query, key, value, _, opts = _check(query, key, value, bias, mask, **kwargs)
  block_q, block_k = kwargs.get("block_q", 128), kwargs.get("block_k", 128)
  mask_kwargs = {k: v for k, v in kwargs.items() if k in logits_lib.MASK_ARGS}
  plan, operands = _prepare(query, key, value, bias, mask, opts, block_q=block_q, block_k=block_k, **mask_kwargs)
  return _forward(plan, *operands)[2]
