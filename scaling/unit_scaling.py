"""Unit-scaled operations of u-μP: separate forward and backward scales through ``jax.custom_vjp``.

Unit scaling (Blake et al. 2023, "Unit Scaling"; u-μP, Blake et al. 2024) gives
every operation a forward scale, chosen so that its output has unit scale when
its inputs do, and backward scales, chosen so that the gradients it returns
have unit scale when the incoming gradient does. The reference implementation
is graphcore-research/unit-scaling (``unit_scaling.functional``); this module
re-derives its rules as pure JAX functions:

* ``scale(x, fwd, bwd)``: ``x · fwd`` forward, gradient × ``bwd`` backward (the
  building block; ``scale_fwd``/``scale_bwd`` of unit_scaling are
  ``scale(x, s, 1)`` and ``scale(x, 1, s)``);
* ``linear``: ``(x @ w) · s_out`` with input and weight gradients scaled by
  ``s_in`` and ``s_w`` (u-μP: 1/√fan_in, 1/√fan_out, 1/√batch; the readout's
  forward scale is μP's 1/fan_in);
* ``attention_scale`` and ``attention``: dot-product attention with logits
  ``α/d_head`` whose output and q/k/v gradients are scaled by the inverse of the
  attention output's expected RMS for near-uniform attention, √(T / log T)
  (causal) or √T;
* ``residual_taus``, ``residual_split`` and ``residual_add``: u-μP's residual
  rule, ``(τ·f(x) + x)/√(1 + τ²)`` with the τ of each branch such that every
  attention and MLP branch contributes equally and the sum of all branches as
  much as the embedding (unit_scaling's ``transformer_residual_scaling_rule``);
* ``cross_entropy``: the mean cross-entropy forward, the per-token gradient of
  the summed loss × V/√(V − 1) backward (unit-scale logit gradients);
* ``gelu``: GELU × 1/RMS(GELU(N(0, 1))) forward and backward.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp

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


def unit_linear_scales(fan_in: int, fan_out: int, batch: int, *, readout: bool = False,
                       constrained: bool = True) -> tuple[float, float, float]:
  """(output, grad-input, grad-weight) scales of a u-μP linear layer.

  Args:
    fan_in: the weight's fan-in.
    fan_out: the weight's fan-out.
    batch: the number of rows the layer is applied to (all axes of x but the last).
    readout: the output layer: forward scale 1/fan_in (μP's readout) instead of 1/√fan_in.
    constrained: grad-input scale = output scale, so the gradient of x is the true gradient up to the
      constant of the layers before (unit_scaling's ``to_output_scale``); False: 1/√fan_out (unit-scale
      gradients, for layers used in mirrored pairs such as the MLP's, or for the readout).

  Returns:
    (output_scale, grad_input_scale, grad_weight_scale).
  """
  output_scale = 1.0 / fan_in if readout else fan_in**-0.5
  grad_input_scale = output_scale if constrained else fan_out**-0.5
  return output_scale, grad_input_scale, batch**-0.5


def gelu(x: Array) -> Array:
  """Unit-scaled GELU (tanh form): GELU(x) · GELU_SCALE, the same scale in both passes."""
  return jax.nn.gelu(x) * jnp.asarray(GELU_SCALE, x.dtype)


def attention_scale(seq_len: int, head_dim: int, *, mult: float = 1.0, causal: bool = True) -> float:
  """The forward and q/k/v-gradient scale of u-μP attention (unit_scaling's ``scaled_dot_product_attention``).

  Logits ``mult/d_head`` are small at init, so attention is near-uniform: a causal average over t + 1 values
  has RMS √(1/(t + 1)), about √(log T / T) over the sequence (√(1/T) without a mask). The scale is the
  inverse, log-interpolated towards 1 as mult²/(4·d_head) grows (sharper attention).

  Args:
    seq_len: T, the number of keys.
    head_dim: d_head.
    mult: α_attn of the α/d_head logit scale.
    causal: whether the attention is causal.

  Returns:
    The scale (a Python float).
  """
  weight = 1.0 / (1.0 + 4.0 * head_dim / mult**2)
  lower = math.sqrt((math.log(seq_len) if causal and seq_len > 1 else 1.0) / seq_len)
  return 1.0 / math.exp(weight * math.log(1.0) + (1.0 - weight) * math.log(lower))


def attention(attend: Callable[[Array, Array, Array], Array], q: Array, k: Array, v: Array, attn_scale: float) -> Array:
  """``attend(q, k, v) · attn_scale`` forward; gradients of q, k, v × attn_scale backward.

  Args:
    attend: the attention function (q, k, v) -> out, e.g. dense or blockwise attention with logits α/d_head.
    q, k, v: [B, T, N or K, H].
    attn_scale: ``attention_scale(...)``.

  Returns:
    The scaled attention output.
  """
  q, k, v = (scale(t, 1.0, attn_scale) for t in (q, k, v))
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


def residual_split(x: Array, tau: float) -> tuple[Array, Array]:
  """(branch input, skip) of x: the identity forward; gradients × τ/√(1 + τ²) and × 1/√(1 + τ²) backward."""
  denom = math.sqrt(1.0 + tau * tau)
  return scale(x, 1.0, tau / denom), scale(x, 1.0, 1.0 / denom)


def residual_add(branch: Array, skip: Array, tau: float) -> Array:
  """(τ·branch + skip)/√(1 + τ²) forward; the incoming gradient passes unscaled to both (scaled by the split)."""
  denom = math.sqrt(1.0 + tau * tau)
  return scale(branch, tau / denom, 1.0) + scale(skip, 1.0 / denom, 1.0)


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
