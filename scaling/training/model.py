"""A decoder-only transformer whose init, multipliers and logit scale come from a parametrization.

``ModelConfig`` is one concrete model; its ``parametrization`` and ``rule`` are
objects (``scaling.mup.schemes.Parametrization``, ``scaling.attention.rules.ScaleRule``),
resolved from names once, by ``ModelFamily.model_config``. ``ModelFamily`` is the
model option group every training study shares: models indexed by width, with
the head layout, base width and base head dim derived from it.

Parameters are made by the layers of ``scaling.mup.layers`` and carry their layer
kind (``param_kinds``); the tree is::

    embed/embedding [V, D]            pos_embed/embedding [T_max, D] (learned positions)
    block_{i}/ln_attn/scale [D]       block_{i}/attn/{query,key,value}/kernel [D, N*H | K*H]
    block_{i}/attn/out/kernel [N*H, D]
    block_{i}/attn/{query,key}_gain [H] (QK-norm with gains only)
    block_{i}/ln_mlp/scale [D]        block_{i}/mlp/fc_in/kernel [D, F], fc_out/kernel [F, D]
    ln_final/scale [D] (pre-LN only)  readout/kernel [D, V]
    .../bias (with use_bias=True; never on the readout)

Per-layer measurements are sown into the ``"metrics"`` collection from the very
logits and weights the attention used (entropy, max logit, max probability) and
the RMS of the activations a μP coordinate check needs (Yang et al. 2022,
Tensor Programs V, §D.1); ``apply_with_aux`` runs the model and gathers them.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from scaling.attention import dispatch as attention_lib
from scaling.attention import blockwise as blockwise_lib
from scaling.mup import layers
from scaling.attention import metrics as metrics_lib
from scaling.mup import schemes as param_lib
from scaling.attention import rope as rope_lib
from scaling.attention import rules as rules_lib
from scaling.mup import unit_scaling as unit
from scaling.mup import unit_scaling_covariance as covariance_lib
from scaling.mup import roles as roles_lib
from scaling.mup import parametrize as parametrize_lib
from scaling.base import validation
from scaling.base.config import option
from scaling.base.config import Options
from scaling.base.validation import check_positive_int
from scaling.base.validation import ConfigError
from scaling.base.validation import ConfigTypeError

Array = jax.Array

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
POSITIONS = ("rope", "learned", "none")
EXPLICIT_ATTENTION = ("dense", "blockwise")
ATTENTION_IMPLEMENTATIONS = (*EXPLICIT_ATTENTION, "auto")
NORMS = ("layer", "rms")
QK_NORMS = ("rms", "layer")
ATTENTION_METRICS = ("attn_entropy", "attn_max_prob", "attn_max_logit", "attn_logits_rms", "attn_max_lse")
LAYER_AUX_KEYS = (*ATTENTION_METRICS, "attn_out_rms", "mlp_out_rms", "resid_rms")
DEFAULT_NUM_HEADS = 4
DEFAULT_RULE = "default"


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
      parameters (compile time flat in depth); False: the blocks unrolled. Both compute the same function. The
      model takes its parameters with one ``block_{i}`` per block (as ``init_params`` makes them) or stacked
      (``stack_blocks``: ``block_0`` holds every block's, [depth, ...]; the layout training keeps, so the
      optimizer too runs once over the stacked parameters).
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
  scan_layers: bool = False

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


@dataclasses.dataclass(frozen=True)
class ModelFamily(Options):
  """The model options every training study shares: transformers indexed by width.

  Either the number of heads is fixed and the head dimension grows
  (H = D / num_heads), or the head dimension is fixed and the number of heads
  grows (N = D / head_dim); neither given: ``DEFAULT_NUM_HEADS`` heads; both: N
  and H fixed. The MLP width is mlp_ratio · D. μP's relative factors (Tensor
  Programs V, Table 8) assume every width-like dimension scales by the same
  m = D / base_width. The base head dim, at which μP's α/d_head equals
  1/√d_head, is derived: the head dim of the model at the base width.
  """

  depth: int = option(2, "Transformer blocks.", lower=1)
  num_heads: int | None = option(None, f"Query heads; the head dim is width / num_heads (default "
                                 f"{DEFAULT_NUM_HEADS} when --head_dim is not given).", lower=1)
  head_dim: int | None = option(None, "Head dim d_k; with --num_heads unset, the number of heads is width / head_dim.",
                                lower=1)
  num_kv_heads: int | None = option(None, "Key/value heads (GQA); default: --num_heads.", lower=1)
  base_width: int | None = option(None, "Width at which the parametrization is tuned (muP = SP there); default: the "
                                  "smallest width of the run.", lower=1)
  mlp_ratio: float = option(4.0, "MLP hidden width / model width.", positive=True)
  positions: str = option("rope", "Position encoding.", choices=POSITIONS)
  pre_ln: bool = option(True, "Pre-LN blocks (false: post-LN).")
  rule: str = option(DEFAULT_RULE, "Attention logit-scale rule; 'default' = the parametrization's own.",
                     choices=lambda: (DEFAULT_RULE, *rules_lib.available_rules()))
  tau: float | None = option(None, "Temperature of --rule=temperature (default 1).", positive=True)
  qk_norm: str = option("rms", "Normalization of q and k under --rule=qk_norm: rms (RMSNorm) or layer (LayerNorm "
                        "without bias) over the head dim.", choices=QK_NORMS)
  qk_norm_gains: bool = option(True, "Learnable per-coordinate gains of the normalized q and k under --rule=qk_norm "
                               "(layer kind norm); false: no gain parameters.")
  logit_soft_cap: float | None = option(None, "Attention logit soft cap c (c*tanh(z/c)); default: none.",
                                        positive=True)
  dtype: str = option("float32", "Compute dtype (parameters stay float32).", choices=tuple(DTYPES))
  attention: str = option("dense", "Attention implementation: dense, blockwise, or auto (the path measured fastest "
                          "for the shape, remembered on disk); blockwise and auto log no entropy/max-logit metrics.",
                          choices=ATTENTION_IMPLEMENTATIONS)
  block_size: int = option(64, "Query and key tile length of blockwise attention.", lower=1)
  zero_query: bool = option(False, "Zero-initialize W_q (muP option).")
  zero_readout: bool = option(False, "Zero-initialize the readout (muP option).")
  depth_alpha: float = option(0.0, "Depth scaling alpha: each residual branch x (depth/base_depth)^-alpha and "
                              "in-block Adam LRs x (depth/base_depth)^(alpha-1) (CompleteP); 0 = off, else in "
                              "[0.5, 1] (0.5: depth-muP, 1: CompleteP).", lower=0.0, upper=1.0)
  base_depth: int | None = option(None, "Depth at which the parametrization is tuned (depth scaling is 1 there); "
                                  "default: --depth (m_L = 1).", lower=1)
  scan_layers: bool = option(False, "Run the blocks as one jax.lax.scan over their stacked parameters (the "
                             "parameter tree keeps one block_{i} per block; same function as unrolled).")
  umup_scales: str = option("paper", "u-muP's op scales: paper (the fixed closed forms of Blake et al. 2024 and "
                            "graphcore-research/unit-scaling) or covariance (this project's correction for positions "
                            "correlated at init; scales change with T). Only umup reads it.",
                            choices=param_lib.UMUP_SCALES)

  def validate(self):
    param_lib.check_depth_alpha(self.depth_alpha)
    if self.tau is not None and self.rule != "temperature":
      raise ConfigError("tau only applies to rule='temperature'")
    changed = [f"{name}={value!r}" for name, value, on in (("qk_norm", self.qk_norm, self.qk_norm != "rms"),
                                                            ("qk_norm_gains", False, not self.qk_norm_gains)) if on]
    if changed and self.rule != "qk_norm":
      raise ConfigError(f"{' and '.join(changed)} only appl{'ies' if len(changed) == 1 else 'y'} to rule='qk_norm'")
    heads = DEFAULT_NUM_HEADS if self.num_heads is None else self.num_heads
    if self.num_kv_heads is not None and self.head_dim is None and heads % self.num_kv_heads:
      raise ConfigError(f"num_heads={heads} must be a multiple of num_kv_heads={self.num_kv_heads}")

  def heads(self, width: int) -> tuple[int, int]:
    """(num_heads N, head_dim H) at ``width`` (ValueError naming the options when the width does not divide)."""
    if self.num_heads is not None and self.head_dim is not None:
      return self.num_heads, self.head_dim
    if self.head_dim is not None:
      if width % self.head_dim:
        raise ConfigError(f"width {width} is not a multiple of head_dim={self.head_dim}")
      return width // self.head_dim, self.head_dim
    n = DEFAULT_NUM_HEADS if self.num_heads is None else self.num_heads
    if width % n:
      raise ConfigError(f"width {width} is not divisible into num_heads={n} heads; pass head_dim or num_heads",
                        fields=("head_dim", "num_heads"))
    return n, width // n

  def with_base_width(self, widths: Sequence[int]) -> ModelFamily:
    """This family with base_width = min(widths) if it was not given."""
    if self.base_width is not None:
      return self
    return dataclasses.replace(self, base_width=min(widths))

  def with_base_depth(self, depths: Sequence[int]) -> ModelFamily:
    """This family with base_depth = min(depths) if it was not given (for runs over several depths)."""
    if self.base_depth is not None:
      return self
    return dataclasses.replace(self, base_depth=min(depths))

  @property
  def base_head_dim(self) -> int:
    """The head dim at the base width (where μP's α/d_head equals 1/√d_head)."""
    if self.base_width is None:
      raise ConfigError("base_width is not set (use with_base_width)")
    try:
      return self.heads(self.base_width)[1]
    except ValueError as e:
      raise ConfigError(f"base_width={self.base_width}: {e}", fields=getattr(e, "fields", ())) from None

  def parametrization(self, name: str, depth: int | None = None) -> param_lib.Parametrization:
    """The named parametrization at this family's base width, base head dim and base depth, for ``depth`` blocks."""
    depth = self.depth if depth is None else depth
    depth_options = {}
    if self.depth_alpha:
      depth_options = dict(depth_alpha=self.depth_alpha, base_depth=self.base_depth or depth)
    if name == "umup":
      depth_options["umup_scales"] = self.umup_scales
    return param_lib.get_parametrization(name, base_width=self.base_width, base_head_dim=self.base_head_dim,
                                         zero_query=self.zero_query, zero_readout=self.zero_readout, depth=depth,
                                         **depth_options)

  def make_rule(self) -> rules_lib.ScaleRule | None:
    """The explicit logit-scale rule, or None for the parametrization's own."""
    if self.rule == DEFAULT_RULE:
      return None
    if self.rule == "temperature":
      return rules_lib.get_rule("temperature", tau=1.0 if self.tau is None else self.tau)
    if self.rule == "qk_norm":
      return rules_lib.get_rule("qk_norm", norm=self.qk_norm)
    return rules_lib.get_rule(self.rule)

  def model_config(self, parametrization: str, width: int, *, vocab_size: int, max_len: int,
                   **overrides: Any) -> ModelConfig:
    """The ``ModelConfig`` of this family at ``width``: names resolved to objects here, once.

    Raises:
      ValueError: the width or base width does not fit the head layout, or the
        model rejects the configuration (messages name the option).
    """
    num_heads, head_dim = self.heads(width)
    depth = overrides.get("depth", self.depth)
    fields = dict(vocab_size=vocab_size, width=width, depth=depth, num_heads=num_heads, head_dim=head_dim,
                  num_kv_heads=self.num_kv_heads, mlp_ratio=self.mlp_ratio, max_len=max_len,
                  parametrization=self.parametrization(parametrization, depth), rule=self.make_rule(),
                  positions=self.positions, pre_ln=self.pre_ln, dtype=self.dtype, attention=self.attention,
                  block_q=self.block_size, block_k=self.block_size, logit_soft_cap=self.logit_soft_cap,
                  qk_norm_gains=self.qk_norm_gains, scan_layers=self.scan_layers)
    fields.update(overrides)
    try:
      return ModelConfig(**fields)
    except ValueError as e:
      raise ConfigError(f"width {width} (num_heads={num_heads}, head_dim={head_dim}): {e}",
                        fields=getattr(e, "fields", ())) from None

  def check(self, parametrizations: Sequence[str], widths: Sequence[int], *, vocab_size: int, max_len: int) -> None:
    """Raises ValueError (naming the width) unless every (parametrization, width) gives a valid model."""
    self.base_head_dim  # pylint: disable=pointless-statement
    for width in widths:
      for name in parametrizations:
        try:
          self.model_config(name, width, vocab_size=vocab_size, max_len=max_len)
        except ValueError as e:
          raise ConfigError(e if f"width {width}" in str(e) else f"width {width}: {e}") from None


def unit_scales(config: ModelConfig, batch: int, seq_len: int) -> unit.ModelScales:
  """The unit scales of a u-μP model on [batch, seq_len] inputs, as its parametrization's ``umup_scales`` says.

  Args:
    config: a model whose parametrization is unit-scaled (u-μP).
    batch: B.
    seq_len: T.

  Returns:
    ``unit_scaling.paper_scales`` ("paper": the paper's fixed closed forms) or
    ``unit_scaling_covariance.covariance_scales`` ("covariance": corrected for positions correlated at init).
  """
  p = config.parametrization
  if not p.unit_scaled:
    raise ConfigError(f"unit scales need a unit-scaled parametrization (umup), got {p.name!r}")
  shape = dict(batch=batch, seq_len=seq_len, width=config.width, mlp_hidden=config.mlp_hidden,
               num_heads=config.num_heads, kv_heads=config.kv_heads, head_dim=config.head_dim,
               vocab_size=config.vocab_size, max_len=config.max_len, depth=config.depth, attn_mult=p.attn_mult,
               residual_mult=p.residual_mult, residual_attn_ratio=p.residual_attn_ratio, causal=config.causal)
  if p.umup_scales == "paper":
    return unit.paper_scales(**shape)
  return covariance_lib.covariance_scales(**shape, pre_ln=config.pre_ln,
                                          learned_positions=config.positions == "learned",
                                          rope_base=config.rope_base if config.positions == "rope" else None)


def _model_scales(config: ModelConfig, batch: int, seq_len: int) -> unit.ModelScales:
  """``unit_scales`` under u-μP; otherwise no op scales (None per block and readout) and gradient scales 1."""
  if config.parametrization.unit_scaled:
    return unit_scales(config, batch, seq_len)
  return unit.ModelScales((None,) * config.depth, 1.0, 1.0, 1.0, None)


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


def _dense(cfg: ModelConfig, specs: Any, features: int, kind: str, name: str, scales: unit.LinearScales | None,
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
      q, kk, v = (_dense(cfg, specs, f, kind, name, _linear_scales(s, name))(x) for f, kind, name in projections)
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
        out, logits, weights, mask = attention_lib.attention_with_aux(
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
    return _dense(cfg, specs, cfg.width, "attn_o", "out", _linear_scales(s, "out"))(out)


class Mlp(nn.Module):
  """fc_out(gelu(fc_in(x))), both "hidden" layers; F = mlp_ratio · width (u-μP: its scales, the unit-scaled GELU)."""

  config: ModelConfig
  specs: Any = None
  scales: unit.BlockScales | None = None

  @nn.compact
  def __call__(self, x: Array) -> Array:
    cfg = self.config
    s = self.scales
    hidden = _dense(cfg, self.specs, cfg.mlp_hidden, "hidden", "fc_in", _linear_scales(s, "fc_in"))(x)
    hidden = layers.probe(self, "act_hidden", nn.gelu(hidden) if s is None else unit.gelu(hidden))
    return _dense(cfg, self.specs, cfg.width, "hidden", "fc_out", _linear_scales(s, "fc_out"))(hidden)


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


class Transformer(nn.Module):
  """Decoder-only transformer: tokens [B, T] -> logits [B, T, V] in float32.

  The GPT-style decoder of Vaswani et al. 2017 ("Attention Is All You Need")
  with pre-LN blocks by default (Xiong et al. 2020, "On Layer Normalization in
  the Transformer Architecture"), GELU MLPs, untied input and output
  embeddings, and no dropout. Sows ``embed_rms`` (the first block's input) and
  ``readout_rms`` (the logits); ``apply_with_aux`` collects every sown value. ``attn_mult`` (optional, may be
  traced): every layer's logit scale is α/d_head with α = attn_mult (``Attention``). Under u-μP the unit scales
  of every op are computed once here for the input's shape (``unit_scales``) and handed to each block.
  """

  config: ModelConfig
  attn_mult: Any = None
  specs: Any = None

  def __post_init__(self):
    check_model_config("config", self.config)
    super().__post_init__()

  @nn.compact
  def __call__(self, tokens: Array, *, embedded: Array | None = None) -> Array:
    """Runs the model.

    Args:
      tokens: int [B, T] with T <= max_len.
      embedded: optional [B, T, D] replacing the token-embedding output (before
        positions are added), to differentiate with respect to the inputs.

    Returns:
      logits [B, T, V] float32.
    """
    cfg = self.config
    specs = parametrized(cfg) if self.specs is None else self.specs
    if tokens.ndim != 2:
      raise ConfigError(f"tokens must be [B, T], got shape {tokens.shape}")
    if not jnp.issubdtype(tokens.dtype, jnp.integer):
      raise ConfigTypeError(f"tokens must be integer ids, got dtype {tokens.dtype}")
    b, t = tokens.shape
    if t > cfg.max_len:
      raise ConfigError(f"sequence length {t} exceeds max_len {cfg.max_len}")
    dt = cfg.compute_dtype
    s = _model_scales(cfg, b, t)
    x = layers.ScaledEmbed(cfg.vocab_size, cfg.width, specs, dt, grad_scale=s.embedding, name="embed")(tokens)
    if embedded is not None:
      if embedded.shape != x.shape:
        raise ConfigError(f"embedded must have shape {x.shape}, got {embedded.shape}")
      x = embedded.astype(dt)
    if cfg.positions == "learned":
      x = x + layers.ScaledEmbed(cfg.max_len, cfg.width, specs, dt, grad_scale=s.positions,
                                 name="pos_embed")(jnp.arange(t))[None]
    layers.record(self, "embed_rms", layers.rms(x))
    x = layers.probe(self, "act_embed", x)
    if cfg.scan_layers and not self.is_initializing():
      x = _scanned_blocks(self, x, specs, s.blocks)
    else:
      for i in range(cfg.depth):
        x = Block(cfg, specs, attn_mult=self.attn_mult, scales=s.blocks[i], name=f"block_{i}")(x)
    if cfg.pre_ln:
      x = layers.Norm(cfg.norm, specs, cfg.use_bias, dt, final=True, grad_scale=s.ln_final, name="ln_final")(x)
      x = layers.probe(self, "act_final", x)
    # No readout bias: its fan-out is the vocabulary, which the parametrization cannot tell from a width.
    logits = _dense(cfg, specs, cfg.vocab_size, "readout", "readout", s.readout, use_bias=False)(x)
    logits = layers.probe(self, "act_logits", logits.astype(jnp.float32))
    layers.record(self, "readout_rms", layers.rms(logits))
    return logits


def _without_taus(scales: unit.BlockScales | None) -> unit.BlockScales | None:
  """A block's scales but for its τ: what consecutive blocks must share to run in one scan."""
  return None if scales is None else scales._replace(tau_attn=0.0, tau_mlp=0.0)


def scan_groups(block_scales: Sequence[unit.BlockScales | None]) -> list[list[int]]:
  """The blocks in runs of consecutive blocks whose scales agree but for τ (one run for every non-u-μP model)."""
  groups: list[list[int]] = []
  for i, scales in enumerate(block_scales):
    if groups and _without_taus(block_scales[groups[-1][0]]) == _without_taus(scales):
      groups[-1].append(i)
    else:
      groups.append([i])
  return groups


class _ScannedBlock(nn.Module):
  """One block of a scanned run as its own program: the ``Block`` named ``block_name`` (so its layers find their
  specs by the same paths), its τ given as values."""

  config: ModelConfig
  specs: Any
  attn_mult: Any
  scales: unit.BlockScales | None
  block_name: str

  @nn.compact
  def __call__(self, x: Array, taus: Array | None) -> Array:
    scales = self.scales if taus is None else self.scales._replace(tau_attn=taus[0], tau_mlp=taus[1])
    return Block(self.config, self.specs, attn_mult=self.attn_mult, scales=scales, name=self.block_name)(x)


class _Sown(nn.Module):
  """Puts a scanned block's outputs (metrics, activations, intermediates) where the unrolled block sows them."""

  @nn.compact
  def __call__(self, collection: str, values: dict[str, Any]) -> None:
    for name, value in values.items():
      self.put_variable(collection, name, value)


_SCANNED_INPUTS = ("params", layers.PERTURBATIONS)
_SCANNED_OUTPUTS = (layers.METRICS, layers.ACTIVATIONS, "intermediates")


def _scanned_blocks(module: Transformer, x: Array, specs: Any, block_scales: Sequence[Any]) -> Array:
  """The blocks applied to x [B, T, D], each run of ``scan_groups`` as one ``jax.lax.scan`` over its blocks' stacked
  parameters (and perturbations); every output collection the caller made mutable is unstacked into ``block_{i}``."""
  cfg = module.config
  variables = module.variables
  stacked = is_stacked(variables.get("params", {}), cfg.depth)
  mutable = [c for c in _SCANNED_OUTPUTS if module.is_mutable_collection(c)]
  for group in scan_groups(block_scales):
    names = [f"block_{i}" for i in group]
    if len(group) == 1 and not stacked:
      x = Block(cfg, specs, attn_mult=module.attn_mult, scales=block_scales[group[0]], name=names[0])(x)
      continue
    given = [c for c in _SCANNED_INPUTS if c in variables and names[0] in variables[c]]
    inputs = {c: jax.tree.map(lambda *leaves: jnp.stack(leaves), *(layers.unbox(variables[c][n]) for n in names))
              for c in given if not (c == "params" and stacked)}
    if stacked:  # this run's slice of the stacked parameters (all of them for a single run)
      first, last = group[0], group[-1] + 1
      inputs["params"] = jax.tree.map(lambda a: a if (first, last) == (0, cfg.depth) else a[first:last],
                                      layers.unbox(variables["params"]["block_0"]))
    scales = block_scales[group[0]]
    taus = None if scales is None else jnp.asarray([[block_scales[i].tau_attn, block_scales[i].tau_mlp]
                                                     for i in group], jnp.float32)
    block = _ScannedBlock(cfg, specs, module.attn_mult, _without_taus(scales), names[0])

    def body(y, xs, block=block, name=names[0]):
      block_inputs, block_taus = xs
      block_variables = {c: {name: tree} for c, tree in block_inputs.items()}
      if not mutable:
        return block.apply(block_variables, y, block_taus), {}
      y, state = block.apply(block_variables, y, block_taus, mutable=mutable)
      return y, {c: state[c][name] for c in mutable if name in state.get(c, {})}

    x, outputs = jax.lax.scan(body, x, (inputs, taus))
    for j, name in enumerate(names):
      sown = _Sown(name=name)
      for collection, tree in outputs.items():
        sown(collection, jax.tree.map(lambda a, j=j: a[j], tree))
  return x


def is_stacked(params: Any, depth: int) -> bool:
  """Whether ``params`` hold the blocks stacked (``stack_blocks``) rather than one ``block_{i}`` per block."""
  return depth > 1 and "block_0" in params and "block_1" not in params


def stack_blocks(params: Any, depth: int) -> dict[str, Any]:
  """The parameters with every block's stacked under ``block_0`` (leaves [depth, ...]); as given if already so.

  The layout a scanned model (``scan_layers``) trains in: its scan reads them as they are, and the optimizer
  updates each stacked leaf once (the blocks' parameters share their specs, so their multipliers broadcast).
  """
  if depth == 1 or is_stacked(params, depth):
    return dict(params)
  names = [f"block_{i}" for i in range(depth)]
  rest = {k: v for k, v in params.items() if k not in names}
  return {**rest, "block_0": jax.tree.map(lambda *leaves: jnp.stack(leaves), *(params[n] for n in names))}


def unstack_blocks(params: Any, depth: int, *, leading: int = 0) -> dict[str, Any]:
  """The parameters with one ``block_{i}`` per block (the inverse of ``stack_blocks``); as given if not stacked.
  ``leading``: axes before the depth axis (1 for a grid's members [M, depth, ...])."""
  if not is_stacked(params, depth):
    return dict(params)
  rest = {k: v for k, v in params.items() if k != "block_0"}
  at = lambda i: (slice(None),) * leading + (i,)
  return {**rest, **{f"block_{i}": jax.tree.map(lambda a, i=i: a[at(i)], params["block_0"]) for i in range(depth)}}


def gather_aux(sown: dict[str, Any], depth: int) -> dict[str, Any]:
  """The sown ``"metrics"`` collection as {"layers": {key: [depth]}, "embed_rms", "readout_rms"}."""
  per_block = [dict(sown[f"block_{i}"]["attn"], **{k: v for k, v in sown[f"block_{i}"].items() if k != "attn"})
               for i in range(depth)]
  return {"layers": {key: jnp.stack([b[key] for b in per_block]) for key in LAYER_AUX_KEYS},
          "embed_rms": sown["embed_rms"], "readout_rms": sown["readout_rms"]}


def apply_with_aux(model: Transformer, params: Any, tokens: Array, **kwargs: Any) -> tuple[Array, dict[str, Any]]:
  """(logits [B, T, V], aux): the forward pass and its per-layer measurements (``gather_aux``)."""
  if not isinstance(model, Transformer):
    raise ConfigTypeError(f"model must be a scaling.training.model.Transformer, got {type(model).__name__}")
  logits, state = model.apply({"params": params}, tokens, mutable=[layers.METRICS], **kwargs)
  return logits, gather_aux(state[layers.METRICS], model.config.depth)


def _init_boxed(rng: Array, config: ModelConfig, seq_len: int | None = None, specs: Any = None) -> Any:
  """The boxed ``params`` collection (values carry their layer kind)."""
  t = min(config.max_len, 8) if seq_len is None else seq_len
  return Transformer(config, specs=specs).init(rng, jnp.zeros((1, t), jnp.int32))["params"]


def init_params(rng: Array, config: ModelConfig) -> dict[str, Any]:
  """The ``params`` of ``Transformer(config)`` for a seed key, as plain arrays."""
  return layers.unbox(_init_boxed(rng, config))


@functools.lru_cache(maxsize=64)
def _boxed_shapes(config: ModelConfig) -> Any:
  """The boxed parameter shapes (``jax.ShapeDtypeStruct`` in ``Kinded`` boxes); nothing computed."""
  return jax.eval_shape(functools.partial(_init_boxed, config=config, specs=layers.SHAPES_ONLY),
                        jax.random.PRNGKey(0))


def _cached_kinds(config: ModelConfig) -> Any:
  return layers.param_kinds(_boxed_shapes(config))


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


@functools.lru_cache(maxsize=64)
def parametrized(config: ModelConfig) -> parametrize_lib.RoleParametrization:
  """The model's parametrization through the one engine: ``scaling.parametrize`` of its roles (``forward="model"``).

  The roles are inferred (``scaling.infer_kinds``) from the model's parameter shapes at the parametrization's base
  width (``at_width``), at a second width and at its own, each parameter keeping the kind its layer gave it
  (``layers.Kinded``); so every parameter's width multiplier is its own fan-in or fan-out over the base model's, as
  for any user's model. The layers draw their init and apply their forward multipliers from it
  (``RoleParametrization.layer``), and the optimizer's per-parameter learning rates come from it too.
  """
  check_model_config("config", config)
  base = at_width(config, config.parametrization.base_width)
  delta = config if config.width != base.width else at_width(config, 2 * base.width)
  roles = roles_lib.infer_kinds(_boxed_shapes(base), _boxed_shapes(delta), _boxed_shapes(config))
  return parametrize_lib.parametrize(roles, config.parametrization, forward="model")


def trains_stacked(config: ModelConfig) -> bool:
  """Whether training keeps the blocks' parameters stacked (``stack_blocks``): a scanned model of several blocks.

  Raises ConfigError if its blocks' parameters do not share their roles, specs and ε factors (the optimizer then
  updates each stacked leaf with the first block's)."""
  if not (config.scan_layers and config.depth > 1):
    return False
  _check_blocks_share_specs(config)
  return True


@functools.lru_cache(maxsize=64)
def _check_blocks_share_specs(config: ModelConfig) -> None:
  p = parametrized(config)
  for path in p.roles:
    head, _, rest = path.partition("/")
    if head.startswith("block_") and head != "block_0":
      first = f"block_0/{rest}"
      if (p.roles[path].kind != p.roles[first].kind or p.spec(path) != p.spec(first)
          or p.eps_factor(path, "mup") != p.eps_factor(first, "mup")):
        raise ConfigError(f"scan_layers: parameter {path!r} is parametrized unlike {first!r} (kind, init, "
                          "multipliers, learning rate or ε); its blocks cannot train stacked")


def logit_multiplier(config: ModelConfig) -> float | None:
  """The α with which the model's logit scale is α/d_head, when its rule is only a logit factor; else None.

  A rule without a ``prepare`` step and with weight scale 1 (none, sqrt, linear, quadratic, temperature, fixed)
  under dense attention and a parametrization that is not unit-scaled computes softmax(α/d_head · q·kᵀ)v;
  ``scaling.training.train`` then carries α in the training state (``TrainState.attn_mult``), so the models of these rules
  compile to one program, read from the persistent compilation cache after the first (Attention's ``attn_mult``).
  """
  rule = config.attention_rule
  if (rule.has_prepare or config.attention != "dense" or config.parametrization.unit_scaled
      or float(rule.weight_scale(config.head_dim)) != 1.0):
    return None
  return float(rule.logit_scale(config.head_dim)) * config.head_dim


def check_model_config(name: str, config: Any) -> None:
  """ConfigTypeError unless ``config`` is a ModelConfig."""
  if not isinstance(config, ModelConfig):
    raise ConfigTypeError(f"{name} must be a scaling.training.model.ModelConfig, got {type(config).__name__}")


def param_kinds(config: ModelConfig) -> Any:
  """The layer kind of every parameter, a tree of strings with the structure of ``init_params`` (no compute)."""
  check_model_config("config", config)
  return jax.tree.map(lambda kind: kind, _cached_kinds(config))


def count_params(params: Any) -> int:
  """Total number of parameters."""
  return sum(math.prod(x.shape) for x in jax.tree.leaves(params))


def rms_at_init(config: ModelConfig, seq_len: int, seed: int = 0) -> dict[str, float]:
  """RMS of every probed activation, of the gradient arriving at it and of every weight gradient at initialization.

  One sequence of random tokens through a freshly initialized model; the loss is u-μP's unit-scaled
  cross-entropy (``unit_scaling.cross_entropy``), whose backward pass gives the logits a unit-scale gradient
  (Blake et al. 2024, "u-μP", §4: every tensor of a unit-scaled model should start at RMS ≈ 1).

  Args:
    config: the model (any parametrization; u-μP is the one meant to give unit scale).
    seq_len: T.
    seed: the key of the initialization and of the tokens.

  Returns:
    {"activation/NAME" | "gradient/NAME" | "weight gradient/NAME": RMS}, NAME the probe or parameter path.
  """
  model = Transformer(config)
  init_key, data_key = jax.random.split(jax.random.PRNGKey(seed))
  tokens = jax.random.randint(data_key, (1, seq_len + 1), 0, config.vocab_size)
  variables = model.init(init_key, tokens[:, :-1])
  params, zeros = layers.unbox(variables["params"]), variables[layers.PERTURBATIONS]

  def loss(params, perturbations):
    logits, state = model.apply({"params": params, layers.PERTURBATIONS: perturbations}, tokens[:, :-1],
                                mutable=[layers.ACTIVATIONS])
    return unit.cross_entropy(logits, tokens[:, 1:], jnp.ones((1, seq_len))), state[layers.ACTIVATIONS]

  def rms_trees(params, perturbations):
    (_, acts), (grads, act_grads) = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(params, perturbations)
    rms = lambda x: jnp.sqrt(jnp.mean(jnp.square(x.astype(jnp.float32))))
    return [jax.tree.map(rms, tree) for tree in (acts, act_grads, grads)]

  trees = jax.device_get(jax.jit(rms_trees)(params, zeros))
  out = {}
  for prefix, tree in zip(("activation", "gradient", "weight gradient"), trees):
    for path, x in jax.tree_util.tree_leaves_with_path(tree):
      name = "/".join(n for n in param_lib.path_names(path) if not n.isdigit())
      out[f"{prefix}/{name}"] = float(x)
  return out
