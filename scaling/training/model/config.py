"""``ModelConfig``: one concrete decoder-only transformer of the built-in harness, and its checks.

Its ``parametrization`` and ``rule`` are objects (``scaling.mup.schemes.Parametrization``,
``scaling.attention.rules.ScaleRule``), resolved from names once, by ``scaling.training.model.family.ModelFamily``.
``at_width`` gives the same model at another width and ``logit_multiplier`` the α of a rule that is only a logit
factor; the model itself is ``scaling.training.model.transformer.Transformer``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax.numpy as jnp

from scaling.attention import rules as rules_lib
from scaling.base import validation
from scaling.base.validation import check_positive_int
from scaling.base.validation import ConfigError
from scaling.base.validation import ConfigTypeError
from scaling.mup import schemes as param_lib

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
POSITIONS = ("rope", "learned", "none")
EXPLICIT_ATTENTION = ("dense", "blockwise")
ATTENTION_IMPLEMENTATIONS = (*EXPLICIT_ATTENTION, "auto")
NORMS = ("layer", "rms")
QK_NORMS = ("rms", "layer")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Shape and parametrization of one decoder-only transformer.

  Attributes:
    vocab_size: V, number of tokens.
    width: D, the residual stream width.
    depth: number of blocks.
    num_heads: N, query heads.
    head_dim: H, the per-head dimension d_k (independent of the width).
    num_kv_heads: K, key/value heads (GQA); None = num_heads.
    mlp_ratio: hidden MLP width F = mlp_ratio * width (rounded).
    max_len: longest sequence the model accepts (the size of learned positions).
    parametrization: the scheme (init, multipliers, per-layer learning rates,
      depth scaling); the config stores it with its ``depth`` set to ``depth``.
    rule: the logit-scale rule; None = the parametrization's ``attention_rule()``.
      With a ``QKNorm`` rule the query and key gains are learnable parameters
      (kind "norm") unless ``qk_norm_gains`` is False.
    positions: "rope", "learned" or "none".
    pre_ln: True = pre-LN blocks with a final norm; False = post-LN blocks.
    norm: "layer" (LayerNorm without centring bias) or "rms" (RMSNorm).
    use_bias: add biases to every Dense and norm.
    dtype: compute dtype "float32", "bfloat16" or "float16" (params stay float32;
      attention logits and softmax are float32).
    attention: "dense" (scaling.attention.dispatch), "blockwise" (scaling.attention.blockwise) or
      "auto" (``dot_product_attention(implementation="auto")``: the path
      measured fastest for the shape, ``scaling.attention.autotune``; block_q and block_k unused).
    block_q: query tile length for blockwise attention.
    block_k: key tile length for blockwise attention.
    logit_soft_cap: c > 0 caps attention logits with c·tanh(z/c); None = off.
    causal: causal self-attention (a decoder); False only for ablations and tests.
    rope_base: RoPE frequency base.
    qk_norm_gains: with a ``QKNorm`` rule, learn per-coordinate gains [H] of the
      normalized q and k (``query_gain``, ``key_gain``); False: no gains, no such parameters.
    scan_layers: run consecutive blocks of equal shape and scales as one ``jax.lax.scan`` over their stacked
      parameters (compile time flat in depth; the default); False: the blocks unrolled. Both compute the same
      function. Blocks parametrized unlike each other run unrolled either way (``transformer.scans_blocks``). The
      model takes its parameters with one ``block_{i}`` per block (as ``init_params`` makes them) or stacked
      (``stack_blocks``: ``block_0`` holds every block's, [depth, ...]; the layout training keeps, so the
      optimizer too runs once over the stacked parameters; checkpoints and a grid's final parameters keep one
      ``block_{i}`` per block).
  """

  vocab_size: int
  width: int = 64
  depth: int = 2
  num_heads: int = 4
  head_dim: int = 16
  num_kv_heads: int | None = None
  mlp_ratio: float = 4
  max_len: int = 256
  parametrization: param_lib.Parametrization = param_lib.StandardParametrization()
  rule: rules_lib.ScaleRule | None = None
  positions: str = "rope"
  pre_ln: bool = True
  norm: str = "layer"
  use_bias: bool = False
  dtype: str = "float32"
  attention: str = "dense"
  block_q: int = 64
  block_k: int = 64
  logit_soft_cap: float | None = None
  causal: bool = True
  rope_base: float = 10000.0
  qk_norm_gains: bool = True
  scan_layers: bool = True

  def __post_init__(self):
    for name in ("vocab_size", "width", "depth", "num_heads", "head_dim", "max_len", "block_q", "block_k"):
      check_positive_int(name, getattr(self, name))
    for name in ("pre_ln", "use_bias", "causal", "qk_norm_gains", "scan_layers"):
      validation.check_bool(name, getattr(self, name))
    if self.num_kv_heads is not None:
      check_positive_int("num_kv_heads", self.num_kv_heads)
      if self.num_heads % self.num_kv_heads:
        raise ConfigError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")
    if not (isinstance(self.mlp_ratio, (int, float)) and math.isfinite(self.mlp_ratio) and self.mlp_ratio > 0):
      raise ConfigError(f"mlp_ratio must be a positive number, got {self.mlp_ratio!r}")
    if self.mlp_hidden < 1:
      raise ConfigError(f"mlp_ratio * width must be at least 1, got {self.mlp_ratio} * {self.width}")
    if self.positions not in POSITIONS:
      raise ConfigError(f"positions {validation.must_be_one_of(self.positions, POSITIONS)}")
    if self.positions == "rope" and self.head_dim % 2:
      raise ConfigError(f"RoPE needs an even head_dim, got {self.head_dim}")
    if self.norm not in NORMS:
      raise ConfigError(f"norm {validation.must_be_one_of(self.norm, NORMS)}")
    if self.dtype not in DTYPES:
      raise ConfigError(f"dtype {validation.must_be_one_of(self.dtype, DTYPES)}")
    if self.attention not in ATTENTION_IMPLEMENTATIONS:
      raise ConfigError(f"attention {validation.must_be_one_of(self.attention, ATTENTION_IMPLEMENTATIONS)}")
    if self.logit_soft_cap is not None and not (math.isfinite(self.logit_soft_cap) and self.logit_soft_cap > 0):
      raise ConfigError(f"logit_soft_cap must be a positive finite number or None, got {self.logit_soft_cap!r}")
    if not (math.isfinite(self.rope_base) and self.rope_base > 0):
      raise ConfigError(f"rope_base must be positive, got {self.rope_base!r}")
    if not isinstance(self.parametrization, param_lib.Parametrization):
      raise ConfigError(f"parametrization must be a Parametrization object (scaling.get_parametrization), "
                       f"got {self.parametrization!r}")
    if self.rule is not None and not isinstance(self.rule, rules_lib.ScaleRule):
      raise ConfigError(f"rule must be a ScaleRule object (scaling.get_rule) or None, got {self.rule!r}")
    # The parametrization's depth factors (residual multiplier, in-block LRs) use the model's depth.
    object.__setattr__(self, "parametrization", self.parametrization.with_depth(self.depth))

  @property
  def kv_heads(self) -> int:
    """K, the number of key/value heads."""
    return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

  @property
  def mlp_hidden(self) -> int:
    """F, the MLP hidden width."""
    return int(round(self.mlp_ratio * self.width))

  @property
  def compute_dtype(self):
    """The jnp compute dtype."""
    return DTYPES[self.dtype]

  @property
  def attention_rule(self) -> rules_lib.ScaleRule:
    """The logit-scale rule: ``rule``, or the parametrization's."""
    return self.parametrization.attention_rule() if self.rule is None else self.rule


def check_model_config(name: str, config: Any) -> None:
  """ConfigTypeError unless ``config`` is a ModelConfig."""
  if not isinstance(config, ModelConfig):
    raise ConfigTypeError(f"{name} must be a scaling.training.model.config.ModelConfig, got {type(config).__name__}")


def at_width(config: ModelConfig, width: int) -> ModelConfig:
  """The same model at ``width``: every width-like dimension scaled with it, the rest (vocabulary, depth,
  positions, options) kept.

  The MLP follows ``mlp_ratio``. When the attention width N·H equals the model width it follows it: by the number
  of heads when the head dim is the parametrization's base head dim (``ModelFamily`` with --head_dim), else by the
  head dim (a fixed number of heads); otherwise (N and H both fixed) it is kept. Only the ratio of each parameter's
  fans to the base model's matters for its width multiplier.
  """
  p = config.parametrization
  n, h, k = config.num_heads, config.head_dim, config.num_kv_heads
  if n * h == config.width and width != config.width:
    if h == p.base_head_dim and width % h == 0:
      n = width // h
    elif width % n == 0:
      h = width // n
    else:
      raise ConfigError(f"width {width}: {n} heads of dim {h} cannot follow the model width")
    k = None if k is None else math.gcd(n, k)
  return dataclasses.replace(config, width=width, num_heads=n, head_dim=h, num_kv_heads=k)


def logit_multiplier(config: ModelConfig) -> float | None:
  """The α with which the model's logit scale is α/d_head, when its rule is only a logit factor; else None.

  A rule without a ``prepare`` step and with weight scale 1 (none, sqrt, linear, quadratic, temperature, fixed)
  under dense attention and a parametrization that is not unit-scaled computes softmax(α/d_head · q·kᵀ)v;
  training then carries α in the training state (``scaling.training.loop.state.TrainState.attn_mult``), so the models of
  these rules compile to one program, read from the persistent compilation cache after the first (the attention's
  ``attn_mult``, ``scaling.training.model.blocks.Attention``).
  """
  rule = config.attention_rule
  if (rule.has_prepare or config.attention != "dense" or config.parametrization.unit_scaled
      or float(rule.weight_scale(config.head_dim)) != 1.0):
    return None
  return float(rule.logit_scale(config.head_dim)) * config.head_dim
