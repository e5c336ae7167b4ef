"""Flash attention as a Pallas kernel (forward), with the blockwise backward as its custom VJP.

``pallas_attention`` computes what ``scaling.dot_product_attention`` computes
for logit-scale rules of the form "prepare q and k, then a plain scale" (sqrt,
linear, quadratic, temperature, none, fixed, qk_norm; a rule's weight scale is
applied to the output), optionally causal, without bias, user mask, sequence
lengths, window, soft cap or clamp.

Forward: one Pallas program per (batch, head, query block) holds its block of
queries, walks the key blocks with an online softmax (running maximum m, sum
l, float32 accumulator; Dao 2023, "FlashAttention-2", Algorithm 1), skips the
key blocks past the causal diagonal, and writes the output and the log-sum-exp.
Keys and values of a head are read through GQA's head mapping (query head n
uses key/value head n // G), without repeating them.

Backward: a ``jax.custom_vjp`` whose backward is the blockwise backward of
``scaling.attention.blockwise`` (FlashAttention-2, Algorithm 2, in pure JAX), fed with
the kernel's output and log-sum-exp; gradients w.r.t. q and k flow on through
``rule.prepare`` (the QK-norm gains included).

Where it runs: compiled on GPU (Triton lowering of ``pallas_call``); on other
backends, or with ``interpret=True``, ``pallas_call`` runs the same kernel in
interpret mode (slow; for tests). On CPU use ``blockwise_attention`` for speed.
"""

from __future__ import annotations

import functools

import jax
from jax import lax
from jax.experimental import pallas as pl
import jax.numpy as jnp

from scaling.attention import logits as logits_lib
from scaling.attention import blockwise as blockwise_lib
from scaling.attention import rules as rules_lib
from scaling.base.validation import ConfigError

Array = jax.Array

_F32 = jnp.float32
_MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)


def _flash_kernel(q_ref, k_ref, v_ref, o_ref, lse_ref, *, scale: float, causal: bool, block_q: int, block_k: int,
                  kv_len: int, num_k_blocks: int):
  """One query block of one head: q [bq, H], k and v [Sp, H] -> o [bq, H], lse [bq]."""
  i = pl.program_id(2)
  q = q_ref[...]
  rows = i * block_q + lax.broadcasted_iota(jnp.int32, (block_q, block_k), 0)
  padded = num_k_blocks * block_k > kv_len

  def body(j, carry):
    m, l, acc = carry
    k = k_ref[pl.ds(j * block_k, block_k), :]
    v = v_ref[pl.ds(j * block_k, block_k), :]
    s = lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=_F32) * scale
    if causal or padded:
      cols = j * block_k + lax.broadcasted_iota(jnp.int32, (block_q, block_k), 1)
      visible = cols < kv_len
      if causal:
        visible = jnp.logical_and(visible, cols <= rows)
      s = jnp.where(visible, s, _MASK_VALUE)
    m_new = jnp.maximum(m, jnp.max(s, axis=1))
    p = jnp.exp(s - m_new[:, None])
    alpha = jnp.exp(m - m_new)
    l = alpha * l + jnp.sum(p, axis=1)
    pv = lax.dot_general(p.astype(v.dtype), v, (((1,), (0,)), ((), ())), preferred_element_type=_F32)
    return m_new, l, alpha[:, None] * acc + pv

  hi = num_k_blocks
  if causal:  # key blocks starting past the last query row of this block are invisible
    hi = jnp.minimum(num_k_blocks, ((i + 1) * block_q + block_k - 1) // block_k)
  init = (jnp.full((block_q,), -jnp.inf, _F32), jnp.zeros((block_q,), _F32),
          jnp.zeros((block_q, q.shape[-1]), _F32))
  # Key block 0 holds key 0, which every query row sees: after it, m is finite and l > 0.
  m, l, acc = lax.fori_loop(0, hi, body, init)
  o_ref[...] = (acc / l[:, None]).astype(o_ref.dtype)
  lse_ref[...] = m + jnp.log(l)


def _pad_seq(x: Array, length: int) -> Array:
  """Zero-pads axis 1 of [B, T, N, H] to ``length``."""
  return jnp.pad(x, ((0, 0), (0, length - x.shape[1]), (0, 0), (0, 0)))


def _forward(plan: blockwise_lib.Plan, interpret: bool, q: Array, k: Array, v: Array) -> tuple[Array, Array]:
  """The kernel over the grid (B, N, query blocks). Returns out [B, T, N, H] and lse [B, T, N]."""
  b, t, n, h = q.shape
  bq, bk, g = plan.block_q, plan.block_k, plan.groups
  tp, sp = plan.num_q_blocks * bq, plan.num_k_blocks * bk
  kernel = functools.partial(_flash_kernel, scale=float(plan.opts.scale), causal=plan.is_causal, block_q=bq,
                             block_k=bk, kv_len=plan.kv_len, num_k_blocks=plan.num_k_blocks)
  sq = pl.Squeezed()
  out, lse = pl.pallas_call(
      kernel,
      grid=(b, n, plan.num_q_blocks),
      in_specs=[pl.BlockSpec((sq, bq, sq, h), lambda bi, ni, i: (bi, i, ni, 0)),
                pl.BlockSpec((sq, sp, sq, h), lambda bi, ni, i: (bi, 0, ni // g, 0)),
                pl.BlockSpec((sq, sp, sq, h), lambda bi, ni, i: (bi, 0, ni // g, 0))],
      out_specs=[pl.BlockSpec((sq, bq, sq, h), lambda bi, ni, i: (bi, i, ni, 0)),
                 pl.BlockSpec((sq, sq, bq), lambda bi, ni, i: (bi, ni, i))],
      out_shape=[jax.ShapeDtypeStruct((b, tp, n, h), v.dtype), jax.ShapeDtypeStruct((b, n, tp), _F32)],
      interpret=interpret,
      name="flash_attention_forward",
  )(_pad_seq(q, tp), _pad_seq(k, sp), _pad_seq(v, sp))
  return out[:, :t], jnp.swapaxes(lse, 1, 2)[:, :t]


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _flash(plan, interpret, q, k, v):
  """Pallas forward with the blockwise backward; q, k already prepared by the rule."""
  return _forward(plan, interpret, q, k, v)


def _flash_fwd(plan, interpret, q, k, v):
  out, lse = _forward(plan, interpret, q, k, v)
  return (out, lse), (q, k, v, out, lse)


def _flash_bwd(plan, interpret, residuals, cotangents):
  """The blockwise backward (FlashAttention-2, Algorithm 2) on the kernel's output and log-sum-exp."""
  del interpret
  q, k, v, out, lse = residuals
  d_out, _ = cotangents  # the log-sum-exp is returned under stop_gradient
  blocked_lse = blockwise_lib.blocks_q(lse[..., None], plan)[..., 0]
  blocked = (blockwise_lib.blocks_q(q, plan), blockwise_lib.blocks_kv(k, plan), blockwise_lib.blocks_kv(v, plan),
             None, None, None, None, blockwise_lib.blocks_q(out, plan), blocked_lse)
  dq, dk, dv, *_ = blockwise_lib.attention_core_bwd(plan, blocked, (blockwise_lib.blocks_q(d_out, plan), None))
  return blockwise_lib.unblocks_q(dq, plan), blockwise_lib.unblocks_kv(dk, plan), blockwise_lib.unblocks_kv(dv, plan)


_flash.defvjp(_flash_fwd, _flash_bwd)


def supports(opts: logits_lib.LogitOptions, *, bias=None, mask=None, query_seq_lengths=None,
             key_value_seq_lengths=None, local_window_size=None) -> str | None:
  """None when the Pallas kernel covers these options, else the reason it does not."""
  if not isinstance(opts.scale, float) or not isinstance(opts.weight_scale, float):
    return "a traced (vmapped) scale"
  if opts.logit_soft_cap is not None or opts.logit_clamp is not None:
    return "a soft cap or clamp"
  if not opts.float32_softmax or not opts.subtract_max:
    return "float32_softmax=False or subtract_max=False"
  for name, x in (("bias", bias), ("mask", mask), ("query_seq_lengths", query_seq_lengths),
                  ("key_value_seq_lengths", key_value_seq_lengths), ("local_window_size", local_window_size)):
    if x is not None:
      return f"a {name}"
  return None


def pallas_attention(query: Array, key: Array, value: Array, *, scale: float | None = None,
                     rule: str | rules_lib.ScaleRule | None = None, is_causal: bool = False, block_q: int = 128,
                     block_k: int = 128, return_residual: bool = False,
                     interpret: bool | None = None) -> Array | tuple[Array, Array]:
  """Flash attention softmax(s·prepare(Q)prepare(K)ᵀ)·V through a Pallas kernel, differentiable.

  Args:
    query: [B, T, N, H] or [T, N, H].
    key: [B, S, K, H] or [S, K, H], N a multiple of K (GQA).
    value: same shape as key.
    scale: a number s; the default (with ``rule=None``) is 1/√H.
    rule: a logit-scale rule name or ``ScaleRule`` (its ``prepare`` runs
      before the kernel, its weight scale multiplies the output).
    is_causal: query i attends keys j <= i; key blocks past the diagonal are
      not visited.
    block_q: query rows per program (capped at T; T is padded to a multiple).
    block_k: key columns per loop step (capped at S; S is padded and the
      padding masked).
    return_residual: also return the log-sum-exp [B, T, N] (stop_gradient).
    interpret: run ``pallas_call`` in interpret mode; None = interpret unless
      the default backend is a GPU.

  Returns:
    Output [B, T, N, H] in the value dtype, and the log-sum-exp when
    ``return_residual``.
  """
  query, key, value, batched = logits_lib.check_qkv(query, key, value)
  logits_lib.check_attention_args(query.shape, key.shape, batched=batched, is_causal=is_causal)
  opts = logits_lib.resolve_logit_options(query.shape[-1], scale=scale, rule=rule, logit_soft_cap=None,
                                          logit_clamp=None, float32_softmax=True, subtract_max=True)
  reason = supports(opts)
  if reason is not None:
    raise ConfigError(f"pallas attention does not support {reason}")
  out = pallas_attention_unchecked(query, key, value, opts, is_causal=is_causal, block_q=block_q, block_k=block_k,
                                   return_residual=return_residual, interpret=interpret)
  return out if batched else jax.tree.map(lambda x: x[0], out)


def pallas_attention_unchecked(query: Array, key: Array, value: Array, opts: logits_lib.LogitOptions, *,
                               is_causal: bool = False, block_q: int = 128, block_k: int = 128,
                               return_residual: bool = False,
                               interpret: bool | None = None) -> Array | tuple[Array, Array]:
  """``pallas_attention`` of checked 4-D inputs and resolved options that ``supports`` (the dispatcher's call)."""
  if interpret is None:
    interpret = jax.default_backend() != "gpu"
  plan = blockwise_lib.make_plan(query.shape, key.shape, opts, block_q=block_q, block_k=block_k,
                                 is_causal=is_causal, window=None)
  q, k = opts.rule.prepare(query, key)
  out, lse = _flash(plan, bool(interpret), q, k, value)
  if opts.weight_scale != 1.0:
    out = out * jnp.asarray(opts.weight_scale, out.dtype)
  if not return_residual:
    return out
  return out, lax.stop_gradient(lse)
