"""The attention implementations the benchmarks compare, their timed steps, inputs and FLOP counts.

* ``ours``: ``scaling.dot_product_attention`` as called by default
  (``implementation=None``: the measured rule of
  ``scaling.attention.dispatch.select_implementation`` picks dense or blockwise and
  the blocks);
* ``auto`` (not in ``IMPLEMENTATIONS``, timed by the attention suite as
  "ours (auto)"): the same with ``implementation="auto"`` (``scaling.attention.autotune``);
* ``dense``: the same with ``implementation="dense"`` (materializes [B, N, T, S]);
* ``blockwise``: ``scaling.attention.blockwise.blockwise_attention`` (online softmax);
* ``jax_nn``: ``jax.nn.dot_product_attention`` (XLA implementation);
* ``flax``: ``flax.linen.dot_product_attention`` with an explicit causal mask
  (with GQA, K < N, it is given key and value heads repeated N/K times: it
  has no GQA of its own).

Inputs: q [B, T, N, H], k and v [B, S, K, H] with T = S (K = N unless GQA).

FLOP counts: the forward pass counts 4·B·N·T·S·H (two matmuls), halved for
causal attention (only the visible half is useful work, whatever an
implementation actually computes); forward+backward counts 3.5 times that
(the backward's five matmuls, QKᵀ recomputed, are 2.5 forward passes; this is
the FlashAttention benchmarks' convention).
"""

from __future__ import annotations

from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from scaling.attention import dispatch as attention_lib
from scaling.attention import blockwise as blockwise_lib
from scaling.base.validation import ConfigError

IMPLEMENTATIONS = ("ours", "dense", "blockwise", "jax_nn", "flax")
AUTO = "auto"
MODES = ("fwd", "fwd+bwd")
# Blocks of the memory measurements. Measured on 2 CPU cores at T = 8192, d_k = 64, causal,
# forward+backward (ms): 128x128 2251, 256x256 2781, 256x512 2271, 512x512 2389, 1024x256 3048, 512x256 1941.
# The timings use the blocks of scaling.attention.dispatch.select_implementation instead.
BLOCK_Q = 512
BLOCK_K = 256
FWD_BWD_FLOP_FACTOR = 3.5


def attention_fn(impl: str, *, causal: bool, block_q: int = BLOCK_Q,
                 block_k: int = BLOCK_K) -> Callable[[jax.Array, jax.Array, jax.Array], jax.Array]:
  """The attention function of one implementation, all taking q, k, v as [B, T, N, H].

  Args:
    impl: one of ``IMPLEMENTATIONS``, or ``AUTO``.
    causal: causal masking.
    block_q: query block of ``blockwise``.
    block_k: key block of ``blockwise``.

  Returns:
    (q, k, v) -> output [B, T, N, H].
  """
  if impl == "ours":
    return lambda q, k, v: attention_lib.dot_product_attention(q, k, v, is_causal=causal)
  if impl == AUTO:
    return lambda q, k, v: attention_lib.dot_product_attention(q, k, v, is_causal=causal, implementation=AUTO)
  if impl == "dense":
    return lambda q, k, v: attention_lib.dot_product_attention(q, k, v, is_causal=causal, implementation="dense")
  if impl == "blockwise":
    return lambda q, k, v: blockwise_lib.blockwise_attention(q, k, v, is_causal=causal, block_q=block_q,
                                                             block_k=block_k)
  if impl == "jax_nn":
    return lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=causal)
  if impl == "flax":
    def flax_attention(q, k, v):
      t, s = q.shape[1], k.shape[1]
      k, v = (jnp.repeat(x, q.shape[2] // k.shape[2], axis=2) for x in (k, v))
      mask = jnp.tril(jnp.ones((t, s), bool))[None, None] if causal else None
      return nn.dot_product_attention(q, k, v, mask=mask, deterministic=True)
    return flax_attention
  raise ConfigError(f"unknown implementation impl={impl!r}; choose from {', '.join(IMPLEMENTATIONS)}")


def make_step(impl: str, mode: str, **kwargs) -> Callable[..., Any]:
  """The timed function of (q, k, v, ct): the forward output, or the loss ⟨out, ct⟩ with its gradients w.r.t. q, k, v.

  Args:
    impl: one of ``IMPLEMENTATIONS``.
    mode: one of ``MODES``.
    **kwargs: ``attention_fn``'s keyword arguments.

  Returns:
    The step function.
  """
  fn = attention_fn(impl, **kwargs)
  if mode == "fwd":
    return lambda q, k, v, ct: fn(q, k, v)
  if mode == "fwd+bwd":
    return jax.value_and_grad(lambda q, k, v, ct: jnp.vdot(fn(q, k, v), ct), argnums=(0, 1, 2))
  raise ConfigError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")


def make_inputs(batch: int, seq_len: int, num_heads: int, head_dim: int, seed: int = 0,
                num_kv_heads: int | None = None) -> tuple[jax.Array, ...]:
  """Random float32 q [B, T, N, H], k and v [B, T, K, H] and output cotangent [B, T, N, H] (K = N by default).

  The key folds in T and H as well as the seed.
  """
  kv_heads = num_heads if num_kv_heads is None else num_kv_heads
  if kv_heads < 1 or num_heads % kv_heads:
    raise ConfigError(f"num_kv_heads must divide num_heads = {num_heads}, got {num_kv_heads}")
  keys = jax.random.split(jax.random.fold_in(jax.random.PRNGKey(seed), seq_len * 1000 + head_dim), 4)
  heads = (num_heads, kv_heads, kv_heads, num_heads)
  return tuple(jax.random.normal(k, (batch, seq_len, n, head_dim), jnp.float32) for k, n in zip(keys, heads))


def attention_flops(batch: int, seq_len: int, num_heads: int, head_dim: int, *, causal: bool, mode: str) -> float:
  """Useful FLOPs: 4·B·N·T·S·H forward, halved when causal, times 3.5 for forward+backward.

  Args:
    batch: B.
    seq_len: T (= S).
    num_heads: N.
    head_dim: H.
    causal: causal masking (halves the count).
    mode: one of ``MODES``.

  Returns:
    The FLOP count.
  """
  if mode not in MODES:
    raise ConfigError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
  flops = 4.0 * batch * num_heads * seq_len * seq_len * head_dim
  if causal:
    flops /= 2
  return flops * (FWD_BWD_FLOP_FACTOR if mode == "fwd+bwd" else 1.0)
