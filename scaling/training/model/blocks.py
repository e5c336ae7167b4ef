"""The blocks of the built-in Transformer: self-attention, the MLP and the residual block around them.

Each takes the model (``ModelConfig``), its layers' spec source (the parametrization, ``scaling.mup.layers``), an
optional traced logit multiplier and, under u-μP, the block's unit scales. The attention sows the
``ATTENTION_METRICS`` of the logits and weights it used, the block the RMS of its branches and of its output.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from scaling.attention import blockwise as blockwise_lib
from scaling.attention import dense as dense_lib
from scaling.attention import dispatch as attention_lib
from scaling.attention import metrics as metrics_lib
from scaling.attention import rope as rope_lib
from scaling.attention import rules as rules_lib
from scaling.mup import layers
from scaling.mup import unit_scaling as unit
from scaling.training.model.config import ModelConfig

Array = jax.Array

ATTENTION_METRICS = ("attn_entropy", "attn_max_prob", "attn_max_logit", "attn_logits_rms", "attn_max_lse")


def _linear_scales(scales: unit.BlockScales | None, name: str) -> unit.LinearScales | None:
  """The scales of the block's linear ``name`` (None without unit scaling)."""
  return None if scales is None else getattr(scales, name)


def _unit_norm(norm: Callable[[Array], Array], x: Array, grad_factor: float,
               probe: Callable[[Array], Array]) -> Array:
  """probe(norm(x)) with the probed output gradient × grad_factor, undone at the norm's input.

  The gradient of x stays the true one; the norm's gain (and bias) sees the gradient × grad_factor.
  """
  if grad_factor == 1.0:
    return probe(norm(x))
  return unit.scale(probe(norm(unit.scale(x, 1.0, 1.0 / grad_factor))), 1.0, grad_factor)


def dense_layer(cfg: ModelConfig, specs: Any, features: int, kind: str, name: str, scales: unit.LinearScales | None,
           use_bias: bool | None = None) -> nn.Module:
  """The model's dense layer: ``layers.UnitDense`` with u-μP's scales, else ``layers.ScaledDense``."""
  use_bias = cfg.use_bias if use_bias is None else use_bias
  if scales is not None:
    return layers.UnitDense(features, kind, specs, use_bias, cfg.compute_dtype, scales=scales, name=name)
  return layers.ScaledDense(features, kind, specs, use_bias, cfg.compute_dtype, name=name)


class BlockPart(nn.Module):
  """The fields of a block and of its attention: the model, its layers' spec source, α_attn and the block's unit
  scales."""

  config: ModelConfig
  specs: Any = None
  attn_mult: Any = None
  scales: unit.BlockScales | None = None


class Attention(BlockPart):
  """Multi-head (GQA) self-attention through ``scaling.attention_with_aux`` or the blockwise path.

  RoPE rotates q and k before the rule's ``prepare`` step; for QK-norm with
  RMS normalization the order does not matter (a rotation keeps the RMS), only
  the learnable per-coordinate gains act on rotated coordinates; LayerNorm's
  centring acts on the rotated vector. Sows the
  ``ATTENTION_METRICS`` of the logits and weights it used (NaN for those the
  blockwise path never forms). ``attn_mult``, when given (a value that may be traced, e.g. vmapped over a grid),
  replaces the rule by the ``linear`` rule's α/d_head with α = attn_mult. ``scales`` (u-μP): the block's unit
  scales; the projections and the attention then compute with them (``unit_scaling.attention``).
  """

  @nn.compact
  def __call__(self, x: Array) -> Array:
    """x [B, T, D] -> [B, T, D]."""
    cfg = self.config
    specs = self.specs
    b, t, _ = x.shape
    n, k, h = cfg.num_heads, cfg.kv_heads, cfg.head_dim
    s = self.scales
    projections = ((n * h, "attn_q", "query"), (k * h, "attn_k", "key"), (k * h, "attn_v", "value"))
    if s is None or s.query == s.key == s.value:
      # One matmul for q, k and v; parameters, kinds and multipliers stay those of three layers.
      kernels = [layers.DenseKernel(f, kind, specs, cfg.use_bias, name=name)(x.shape[-1])
                 for f, kind, name in projections]
      q, kk, v = (layers.fused_dense(x, kernels, cfg.compute_dtype) if s is None
                  else layers.unit_fused_dense(x, kernels, s.query, cfg.compute_dtype))
    else:  # projections of different backward scales
      q, kk, v = (dense_layer(cfg, specs, f, kind, name, _linear_scales(s, name))(x) for f, kind, name in projections)
    q, kk, v = q.reshape(b, t, n, h), kk.reshape(b, t, k, h), v.reshape(b, t, k, h)
    self.sow("intermediates", "q_projected", q)  # before RoPE and any QK-norm (kept only when asked for)
    self.sow("intermediates", "k_projected", kk)
    if cfg.positions == "rope":
      q = rope_lib.apply_rope(q, base=cfg.rope_base)
      kk = rope_lib.apply_rope(kk, base=cfg.rope_base)
    q, kk, v = (layers.probe(self, name, y) for name, y in (("act_q", q), ("act_k", kk), ("act_v", v)))
    rule = cfg.attention_rule
    if isinstance(rule, rules_lib.QKNorm) and cfg.qk_norm_gains:
      qg, mult = layers.kind_param(self, "query_gain", "norm", (h,), specs)
      kg, _ = layers.kind_param(self, "key_gain", "norm", (h,), specs)
      rule = rule.replace(query_gain=layers.scaled(qg, mult), key_gain=layers.scaled(kg, mult))
    if self.attn_mult is not None:
      rule = rules_lib.FixedScale(logit=jnp.asarray(self.attn_mult, jnp.float32) / h)
    stats = {}

    def attend(q, kk, v):
      if cfg.attention == "dense":
        out, logits, weights, mask = dense_lib.attention_with_aux(
            q, kk, v, rule=rule, is_causal=cfg.causal, logit_soft_cap=cfg.logit_soft_cap)
        stats.update(metrics_lib.attention_layer_metrics(logits, weights, mask))
        return out
      if cfg.attention == "auto":
        out, lse = attention_lib.dot_product_attention(
            q, kk, v, rule=rule, is_causal=cfg.causal, logit_soft_cap=cfg.logit_soft_cap, implementation="auto",
            return_residual=True)
      else:
        out, lse = blockwise_lib.blockwise_attention(
            q, kk, v, rule=rule, is_causal=cfg.causal, logit_soft_cap=cfg.logit_soft_cap, block_q=cfg.block_q,
            block_k=cfg.block_k, return_residual=True)
      stats.update({key: jnp.full((), jnp.nan, jnp.float32) for key in ATTENTION_METRICS})
      stats["attn_max_lse"] = metrics_lib.max_lse(lse)
      return out

    out = attend(q, kk, v) if s is None else unit.attention(attend, q, kk, v, *s.attention)
    for key, value in stats.items():
      layers.record(self, key, value)
    out = layers.probe(self, "act_ctx", out.reshape(b, t, n * h).astype(cfg.compute_dtype))
    return dense_layer(cfg, specs, cfg.width, "attn_o", "out", _linear_scales(s, "out"))(out)


class Mlp(nn.Module):
  """fc_out(gelu(fc_in(x))), both "hidden" layers; F = mlp_ratio · width (u-μP: its scales, the unit-scaled GELU)."""

  config: ModelConfig
  specs: Any = None
  scales: unit.BlockScales | None = None

  @nn.compact
  def __call__(self, x: Array) -> Array:
    cfg = self.config
    s = self.scales
    hidden = dense_layer(cfg, self.specs, cfg.mlp_hidden, "hidden", "fc_in", _linear_scales(s, "fc_in"))(x)
    hidden = layers.probe(self, "act_hidden", nn.gelu(hidden) if s is None else unit.gelu(hidden))
    return dense_layer(cfg, self.specs, cfg.width, "hidden", "fc_out", _linear_scales(s, "fc_out"))(hidden)


class Block(BlockPart):
  """One transformer block: pre-LN x + s·f(LN(x)), or post-LN LN(x + s·f(x)) (Xiong et al. 2020).

  s is the parametrization's residual multiplier m_L^−α (1 without depth scaling). Under u-μP (``scales``, the
  block's ``unit_scaling.BlockScales``) the residual rule is u-μP's: (τ·f(x) + x)/√(1 + τ²) with the block's τ,
  the branch gradient scaled by τ/√(1 + τ²) and the skip's by 1/√(1 + τ²) in the backward pass.
  Activations are marked with ``layers.probe`` (``act_*``: sown into "activations", perturbable).

  Sows ``attn_out_rms`` and ``mlp_out_rms``, the RMS of the branch outputs f(·) (before the multiplier s and
  the residual add), and ``resid_rms``, the RMS of the block's output (the residual stream after the block).
  """

  @nn.compact
  def __call__(self, x: Array) -> Array:
    cfg = self.config
    s = self.scales
    norm = lambda name, grad_scale: layers.Norm(cfg.norm, self.specs, cfg.use_bias, cfg.compute_dtype,
                                                grad_scale=grad_scale, name=name)
    attn = Attention(cfg, self.specs, attn_mult=self.attn_mult, scales=s, name="attn")
    mlp = Mlp(cfg, self.specs, scales=s, name="mlp")
    if s is not None:
      taus = (s.tau_attn, s.tau_mlp)
      split = lambda x, i: unit.residual_split(x, taus[i])
      add = lambda f, skip, i: unit.residual_add(f, skip, taus[i])
      ln_attn, ln_mlp, grad_a = norm("ln_attn", s.ln_attn), norm("ln_mlp", s.ln_mlp), s.attn_in_grad
    else:
      branch = cfg.parametrization.residual_multiplier()
      split = lambda x, i: (x, x)
      add = lambda f, skip, i: skip + layers.scaled(f, branch)
      ln_attn, ln_mlp, grad_a = norm("ln_attn", 1.0), norm("ln_mlp", 1.0), 1.0
    probe = lambda name, y: layers.probe(self, name, y)
    if cfg.pre_ln:
      r, skip = split(x, 0)
      a = probe("act_attn_out", attn(_unit_norm(ln_attn, r, grad_a, functools.partial(probe, "act_attn_in"))))
      x = probe("act_attn_resid", add(a, skip, 0))
      r, skip = split(x, 1)
      m = probe("act_mlp_out", mlp(probe("act_mlp_in", ln_mlp(r))))
      x = add(m, skip, 1)
    else:
      r, skip = split(x, 0)
      a = probe("act_attn_out", attn(probe("act_attn_in", r)))
      x = probe("act_attn_resid", ln_attn(add(a, skip, 0)))
      r, skip = split(x, 1)
      m = probe("act_mlp_out", mlp(probe("act_mlp_in", r)))
      x = ln_mlp(add(m, skip, 1))
    layers.record(self, "attn_out_rms", layers.rms(a))
    layers.record(self, "mlp_out_rms", layers.rms(m))
    layers.record(self, "resid_rms", layers.rms(x))
    return probe("act_out", x)
