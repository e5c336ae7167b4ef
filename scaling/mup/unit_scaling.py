"""Unit-scaled operations of u-μP: separate forward and backward scales through ``jax.custom_vjp``.

Unit scaling (Blake et al. 2023, "Unit Scaling"; u-μP, Blake et al. 2024, "u-μP: The Unit-Scaled Maximal
Update Parametrization", Table 2 and App. B) gives every operation a forward scale, chosen so that its output
has unit scale when its inputs do, and backward scales, chosen so that the gradients it returns have unit
scale when the incoming gradient does. The reference implementation is graphcore-research/unit-scaling
(``unit_scaling.functional``); this module re-derives its fixed, closed-form rules as pure JAX functions:

* ``scale(x, fwd, bwd)``: ``x · fwd`` forward, gradient × ``bwd`` backward (the building block;
  ``scale_fwd``/``scale_bwd`` of unit_scaling are ``scale(x, s, 1)`` and ``scale(x, 1, s)``);
* ``linear`` with ``unit_linear_scales``: ``(x @ w)/√fan_in`` with the weight gradient × 1/√batch and the
  input gradient × 1/√fan_in (constrained to the output scale, ``functional.linear``'s default) or × 1/√fan_out
  (unconstrained: the MLP's mirrored pair); ``readout_scales``: ``functional.linear_readout``'s 1/fan_in
  forward, unconstrained;
* ``attention_scale`` and ``attention``: dot-product attention with logits ``α/d_head`` whose output and q,
  k, v gradients are scaled by one scale, the inverse of the attention output's RMS for near-uniform
  attention, √(T / log T) (causal) or √T, log-interpolated towards 1 as α²/(4·d_head) grows
  (``functional.scaled_dot_product_attention``);
* ``residual_taus``, ``residual_split`` and ``residual_add``: u-μP's residual rule, ``(τ·f(x) + x)/√(1 + τ²)``
  with the τ of each branch such that every attention and MLP branch contributes equally and the sum of all
  branches as much as the embedding (``transformer_residual_scaling_rule``);
* ``cross_entropy``: the mean cross-entropy forward, the per-token gradient of the summed loss × V/√(V − 1)
  backward (unit-scale logit gradients);
* ``gelu``: GELU × 1/RMS(GELU(N(0, 1))) forward and backward;
* the embedding's and the norms' parameter-gradient scales √(V / lookups) and 1/√rows (``embedding_grad_scale``,
  ``norm_grad_scale``).

``paper_scales`` collects these for a whole model: one ``BlockScales`` per block and the scales of the
embedding, final norm and readout (``ModelScales``), the values the model computes with under
``umup_scales="paper"``. ``scaling.mup.unit_scaling_covariance`` corrects them for positions correlated at init.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from scaling.base.validation import ConfigError

Array = jax.Array

# GELU of a unit normal: output scale and gradient scale of unit_scaling.functional.gelu at mult = 1
# (logarithmic interpolation with weight 0.8 between 2 and √(2/(1 − 1/π)); the same scale both ways).
GELU_SCALE = math.exp(0.8 * math.log(math.sqrt(2 / (1 - 1 / math.pi))) + 0.2 * math.log(2.0))


@jax.custom_vjp
def scale(x: Array, fwd: Any, bwd: Any) -> Array:
  """``x · fwd`` in the forward pass; the incoming gradient × ``bwd`` in the backward pass.

  Args:
    x: any array.
    fwd: forward scale (a number or a scalar array).
    bwd: backward scale (a number or a scalar array).

  Returns:
    ``x * fwd`` in x's dtype; its VJP is ``g * bwd`` (no gradient to the scales).
  """
  return (x * fwd).astype(x.dtype)


def _scale_fwd(x, fwd, bwd):
  return scale(x, fwd, bwd), (fwd, bwd)


def _scale_bwd(res, g):
  fwd, bwd = res
  return (g * bwd).astype(g.dtype), jnp.zeros_like(fwd), jnp.zeros_like(bwd)


scale.defvjp(_scale_fwd, _scale_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4))
def linear(x: Array, w: Array, output_scale: float, grad_input_scale: float, grad_weight_scale: float) -> Array:
  """``(x @ w) · output_scale`` with the gradients of x and w scaled separately.

  Args:
    x: [..., fan_in].
    w: [fan_in, fan_out].
    output_scale: forward scale.
    grad_input_scale: the gradient of x is ``(g @ wᵀ) · grad_input_scale``.
    grad_weight_scale: the gradient of w is ``(xᵀ g) · grad_weight_scale``.

  Returns:
    [..., fan_out] in the dtype of x @ w.
  """
  return jnp.dot(x, w) * jnp.asarray(output_scale, jnp.result_type(x, w))


def _linear_fwd(x, w, output_scale, grad_input_scale, grad_weight_scale):
  return linear(x, w, output_scale, grad_input_scale, grad_weight_scale), (x, w)


def _linear_bwd(output_scale, grad_input_scale, grad_weight_scale, res, g):
  del output_scale
  x, w = res
  dx = jnp.dot(g, w.T) * jnp.asarray(grad_input_scale, g.dtype)
  dw = jnp.dot(x.reshape(-1, x.shape[-1]).T, g.reshape(-1, g.shape[-1])) * jnp.asarray(grad_weight_scale, g.dtype)
  return dx.astype(x.dtype), dw.astype(w.dtype)


linear.defvjp(_linear_fwd, _linear_bwd)


class LinearScales(NamedTuple):
  """The three scales of a unit-scaled linear layer (the arguments of ``linear`` after x and w)."""
  output: float
  grad_input: float
  grad_weight: float


def _check_sizes(**sizes: int) -> None:
  """ValueError naming the first argument that is not a positive integer."""
  for name, value in sizes.items():
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
      raise ConfigError(f"{name} must be a positive integer, got {value!r}")


def unit_linear_scales(fan_in: int, fan_out: int, batch: int, *, constrained: bool = True) -> LinearScales:
  """(output, grad-input, grad-weight) scales of a u-μP linear layer (``unit_scaling.functional.linear``).

  Args:
    fan_in: the weight's fan-in.
    fan_out: the weight's fan-out.
    batch: the number of rows the layer is applied to (all axes of x but the last).
    constrained: grad-input scale = output scale, so the gradient of x is the true gradient up to the
      constant of the layers before (unit_scaling's ``to_output_scale``, its default); False: 1/√fan_out
      (unit-scale gradients, ``constraint=None``, for layers used in mirrored pairs such as the MLP's).

  Returns:
    LinearScales(1/√fan_in, 1/√fan_in or 1/√fan_out, 1/√batch).
  """
  _check_sizes(fan_in=fan_in, fan_out=fan_out, batch=batch)
  output_scale = fan_in**-0.5
  grad_input_scale = output_scale if constrained else fan_out**-0.5
  return LinearScales(output_scale, grad_input_scale, batch**-0.5)


def readout_scales(fan_in: int, fan_out: int, batch: int) -> LinearScales:
  """The scales of u-μP's readout (``unit_scaling.functional.linear_readout``: scale powers (1, ½, ½), unconstrained).

  Args:
    fan_in: the readout's fan-in (the model width).
    fan_out: its fan-out (the vocabulary).
    batch: the number of rows (tokens) it is applied to.

  Returns:
    LinearScales(1/fan_in, 1/√fan_out, 1/√batch).
  """
  _check_sizes(fan_in=fan_in, fan_out=fan_out, batch=batch)
  return LinearScales(1.0 / fan_in, fan_out**-0.5, batch**-0.5)


def embedding_grad_scale(num_embeddings: int, lookups: int) -> float:
  """√(num_embeddings / lookups): the table's gradient scale (each row sums ≈ lookups / num_embeddings rows)."""
  _check_sizes(num_embeddings=num_embeddings, lookups=lookups)
  return (num_embeddings / lookups)**0.5


def norm_grad_scale(rows: int) -> float:
  """1/√rows: the gradient scale of a norm's gain and bias (``functional.layer_norm`` and ``rms_norm``)."""
  _check_sizes(rows=rows)
  return rows**-0.5


def gelu(x: Array) -> Array:
  """Unit-scaled GELU (tanh form): GELU(x) · GELU_SCALE, the same scale in both passes."""
  return jax.nn.gelu(x) * jnp.asarray(GELU_SCALE, x.dtype)


def attention_weight(head_dim: int, mult: float) -> float:
  """Log-interpolation weight of unit_scaling's attention rule: σ(log(mult²/(4·d_head))), 0 for flat attention."""
  return 1.0 / (1.0 + 4.0 * head_dim / mult**2)


def flat_attention_rms(seq_len: int, causal: bool = True) -> float:
  """RMS of a uniform attention's output over T independent unit values: √(log T / T) causal, √(1/T) not."""
  return math.sqrt((math.log(seq_len) if causal and seq_len > 1 else 1.0) / seq_len)


def interpolated_attention_scale(flat_rms: float, head_dim: int, mult: float = 1.0) -> float:
  """1/RMS of an attention's output: 1/flat_rms for flat attention, log-interpolated towards 1 (``attention_weight``)."""
  return flat_rms**-(1.0 - attention_weight(head_dim, mult))


def attention_scale(seq_len: int, head_dim: int, *, mult: float = 1.0, causal: bool = True) -> float:
  """The one scale of u-μP attention (``unit_scaling.functional.scaled_dot_product_attention``).

  Logits ``mult/d_head`` are small at init, so attention is near-uniform: a causal average over t + 1 values
  has RMS √(1/(t + 1)), about √(log T / T) over the sequence (√(1/T) without a mask). The scale is the
  inverse, log-interpolated towards 1 as mult²/(4·d_head) grows (sharper attention); it scales the output
  and the gradients of q, k and v alike.

  Args:
    seq_len: T, the number of keys.
    head_dim: d_head.
    mult: α_attn of the α/d_head logit scale.
    causal: whether the attention is causal.

  Returns:
    The scale (a Python float).
  """
  _check_sizes(seq_len=seq_len, head_dim=head_dim)
  return interpolated_attention_scale(flat_attention_rms(seq_len, causal), head_dim, mult)


class AttentionScales(NamedTuple):
  """The forward scale of an attention and the backward scales of its q, k and v (``attention``'s arguments)."""
  forward: float
  q_grad: float
  k_grad: float
  v_grad: float


def attention(attend: Callable[[Array, Array, Array], Array], q: Array, k: Array, v: Array, attn_scale: float,
              q_grad_scale: float | None = None, k_grad_scale: float | None = None,
              v_grad_scale: float | None = None) -> Array:
  """``attend(q, k, v) · attn_scale`` forward; the gradients of q, k and v × their own scales.

  Args:
    attend: the attention function (q, k, v) -> out, e.g. dense or blockwise attention with logits α/d_head.
    q, k, v: [B, T, N or K, H].
    attn_scale: the forward scale, ``attention_scale(...)``.
    q_grad_scale: the query-gradient scale; None = attn_scale (unit_scaling's single scale).
    k_grad_scale: the key-gradient scale; None = q_grad_scale.
    v_grad_scale: the value-gradient scale; None = attn_scale.

  Returns:
    The scaled attention output.
  """
  q_grad_scale = attn_scale if q_grad_scale is None else q_grad_scale
  k_grad_scale = q_grad_scale if k_grad_scale is None else k_grad_scale
  v_grad_scale = attn_scale if v_grad_scale is None else v_grad_scale
  q, k, v = scale(q, 1.0, q_grad_scale), scale(k, 1.0, k_grad_scale), scale(v, 1.0, v_grad_scale)
  return scale(attend(q, k, v), attn_scale, 1.0)


def residual_taus(depth: int, residual_mult: float = 1.0, residual_attn_ratio: float = 1.0) -> tuple[tuple[float, float], ...]:
  """τ of the attention and MLP branch of every block (u-μP, Appendix G; ``transformer_residual_scaling_rule``).

  With α_mlp = residual_mult · √(2/(1 + ratio²)) and α_attn = ratio · α_mlp, the i-th of the 2L branches gets
  τ_i = α_i / √(L + Σ_{j<i} α_j²): every attention branch contributes α_attn², every MLP branch α_mlp², and
  the embedding L, in the unnormalized sum that ``residual_add`` keeps at unit scale.

  Args:
    depth: L, the number of blocks.
    residual_mult: contribution of the branches relative to the embedding.
    residual_attn_ratio: contribution of the attention branches relative to the MLP branches.

  Returns:
    ((τ_attn, τ_mlp) of block 0, ..., of block L − 1).
  """
  alpha_mlp = residual_mult * math.sqrt(2.0 / (1.0 + residual_attn_ratio**2))
  alpha_attn = residual_attn_ratio * alpha_mlp
  taus, total = [], float(depth)
  for _ in range(depth):
    pair = []
    for alpha in (alpha_attn, alpha_mlp):
      pair.append(alpha / math.sqrt(total))
      total += alpha**2
    taus.append(tuple(pair))
  return tuple(taus)


def _residual_factors(tau: Any, dtype: Any) -> tuple[Any, Any]:
  """(τ/√(1 + τ²), 1/√(1 + τ²)): Python numbers for a number τ, else scalars of ``dtype`` (a traced τ, e.g. a
  scanned block's)."""
  if isinstance(tau, (int, float)):
    denom = math.sqrt(1.0 + tau * tau)
    return tau / denom, 1.0 / denom
  tau = jnp.asarray(tau, jnp.float32)
  denom = jnp.sqrt(1.0 + tau * tau)
  return (tau / denom).astype(dtype), (1.0 / denom).astype(dtype)


def residual_split(x: Array, tau: Any) -> tuple[Array, Array]:
  """(branch input, skip) of x: the identity forward; gradients × τ/√(1 + τ²) and × 1/√(1 + τ²) backward."""
  branch, skip = _residual_factors(tau, x.dtype)
  return scale(x, 1.0, branch), scale(x, 1.0, skip)


def residual_add(branch: Array, skip: Array, tau: Any) -> Array:
  """(τ·branch + skip)/√(1 + τ²) forward; the incoming gradient passes unscaled to both (scaled by the split)."""
  branch_factor, skip_factor = _residual_factors(tau, branch.dtype)
  return scale(branch, branch_factor, 1.0) + scale(skip, skip_factor, 1.0)


def cross_entropy(logits: Array, targets: Array, weights: Array) -> Array:
  """Weighted mean next-token cross-entropy with a unit-scaled backward pass.

  The forward value is sum(w·CE)/sum(w), the ordinary loss. The backward pass
  returns the gradient of the *summed* loss sum(w·CE) times V/√(V − 1): per
  token (softmax − one-hot)·w·V/√(V − 1), of RMS about 1 over the vocabulary
  at init (unit_scaling's ``cross_entropy``: ``reduction="sum"`` with
  ``scale_bwd(V/√(V − 1))`` and ``scale_fwd(1/batch)``).

  Args:
    logits: [..., V].
    targets: int [...].
    weights: [...], 1 where the prediction is scored.

  Returns:
    The scalar loss (float32).
  """
  v = logits.shape[-1]
  logits = scale(logits.astype(jnp.float32), 1.0, v / math.sqrt(v - 1) if v > 1 else 1.0)
  log_p = jax.nn.log_softmax(logits, axis=-1)
  ce = -jnp.take_along_axis(log_p, targets[..., None], axis=-1)[..., 0]
  weights = weights.astype(jnp.float32)
  total = jnp.maximum(jnp.sum(weights), 1e-8)
  return scale(jnp.sum(ce * weights), 1.0 / total, 1.0)


class BlockScales(NamedTuple):
  """Every scale u-μP gives the operations of one block (absolute values, the model applies them as they are).

  Attributes:
    tau_attn: τ of the attention branch (``residual_split``/``residual_add``).
    tau_mlp: τ of the MLP branch.
    attention: the attention's forward and q-, k-, v-gradient scales.
    query, key, value, out: the scales of the attention's projections.
    fc_in, fc_out: the scales of the MLP's layers.
    ln_attn, ln_mlp: the gradient scales of the gains (and biases) of the norms before the branches.
    attn_in_grad: factor of the gradient at the attention branch's input (the norm's output), undone at the
      norm's input, so the gradient of the residual stream stays the true one (1 under the paper's scales).
  """
  tau_attn: float
  tau_mlp: float
  attention: AttentionScales
  query: LinearScales
  key: LinearScales
  value: LinearScales
  out: LinearScales
  fc_in: LinearScales
  fc_out: LinearScales
  ln_attn: float
  ln_mlp: float
  attn_in_grad: float = 1.0


class ModelScales(NamedTuple):
  """The unit scales of a whole model: one ``BlockScales`` per block, and those outside the blocks.

  Attributes:
    blocks: per block.
    embedding: the token table's gradient scale.
    positions: the learned position table's gradient scale.
    ln_final: the gradient scale of the final norm's gain (and bias).
    readout: the readout's scales.
  """
  blocks: tuple[BlockScales, ...]
  embedding: float
  positions: float
  ln_final: float
  readout: LinearScales


@functools.lru_cache(maxsize=256)
def paper_scales(*, batch: int, seq_len: int, width: int, mlp_hidden: int, num_heads: int, kv_heads: int,
                 head_dim: int, vocab_size: int, max_len: int, depth: int, attn_mult: float = 1.0,
                 residual_mult: float = 1.0, residual_attn_ratio: float = 1.0, causal: bool = True) -> ModelScales:
  """u-μP's fixed scales for a decoder-only transformer, as the paper and unit_scaling define them.

  The attention's projections are constrained linears (q, k, v one fused ``Linear`` in unit_scaling's MHSA),
  the MLP's a mirrored unconstrained pair (its ``MLP``), the readout ``linear_readout``; one attention scale
  for the output and the q, k, v gradients; the τ rule; 1/√rows for the norms' gains; √(V / lookups) for the
  embedding tables.

  Args:
    batch: B, sequences per batch.
    seq_len: T.
    width: D.
    mlp_hidden: F.
    num_heads: N, query heads.
    kv_heads: K, key/value heads.
    head_dim: d_head.
    vocab_size: V.
    max_len: rows of the learned position table.
    depth: L, blocks.
    attn_mult: α_attn.
    residual_mult: the τ rule's branch contribution.
    residual_attn_ratio: the τ rule's attention/MLP ratio.
    causal: causal attention.

  Returns:
    A ``ModelScales`` of Python floats.
  """
  _check_sizes(batch=batch, seq_len=seq_len, width=width, mlp_hidden=mlp_hidden, num_heads=num_heads,
               kv_heads=kv_heads, head_dim=head_dim, vocab_size=vocab_size, max_len=max_len, depth=depth)
  rows = batch * seq_len
  s = attention_scale(seq_len, head_dim, mult=attn_mult, causal=causal)
  attention_scales = AttentionScales(s, s, s, s)
  q = unit_linear_scales(width, num_heads * head_dim, rows)
  kv = unit_linear_scales(width, kv_heads * head_dim, rows)
  out = unit_linear_scales(num_heads * head_dim, width, rows)
  fc_in = unit_linear_scales(width, mlp_hidden, rows, constrained=False)
  fc_out = unit_linear_scales(mlp_hidden, width, rows, constrained=False)
  gain = norm_grad_scale(rows)
  blocks = tuple(BlockScales(tau_attn, tau_mlp, attention_scales, q, kv, kv, out, fc_in, fc_out, gain, gain)
                 for tau_attn, tau_mlp in residual_taus(depth, residual_mult, residual_attn_ratio))
  return ModelScales(blocks, embedding_grad_scale(vocab_size, rows), embedding_grad_scale(max_len, seq_len), gain,
                     readout_scales(width, vocab_size, rows))
