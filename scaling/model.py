"""A small decoder-only transformer whose init, multipliers and logit scale come from a parametrization.

Every parameter is drawn as ``init_mean + init_std · N(0, 1)`` (so matrices are
``normal(init_std)``, zero when the std is 0, and norm gains start at 1) and
every layer's output is multiplied by ``LayerSpec.multiplier``, both taken from
``Parametrization.layer(kind, fan_in, fan_out, width)``; the attention logit
scale comes from ``Parametrization.attention_rule()`` unless a rule is given.
Parameter names follow the contract of ``scaling.parametrization.layer_kind``::

    embed/embedding [V, D]            pos_embed/embedding [T_max, D] (learned positions)
    block_{i}/ln_attn/scale [D]       block_{i}/attn/{query,key,value}/kernel [D, N*H | K*H]
    block_{i}/attn/out/kernel [N*H, D]
    block_{i}/attn/{query,key}_gain [H] (QK-norm only)
    block_{i}/ln_mlp/scale [D]        block_{i}/mlp/fc_in/kernel [D, F], fc_out/kernel [F, D]
    ln_final/scale [D] (pre-LN only)  readout/kernel [D, V]
    .../bias (with use_bias=True; never on the readout)

The forward pass returns the logits together with cheap per-layer measurements
taken from the very logits and weights the attention used (entropy, max logit,
max probability) and the RMS of the activations a μP coordinate check needs
(Yang et al. 2022, Tensor Programs V, §D.1).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from scaling import attention as attention_lib
from scaling import metrics as metrics_lib
from scaling import parametrization as param_lib
from scaling import rope as rope_lib
from scaling import rules as rules_lib

Array = jax.Array

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
POSITIONS = ("rope", "learned", "none")
ATTENTION_IMPLEMENTATIONS = ("dense", "blockwise")
NORMS = ("layer", "rms")
LAYER_AUX_KEYS = ("attn_entropy", "attn_max_prob", "attn_max_logit", "attn_logits_rms", "attn_max_lse",
                  "attn_out_rms", "mlp_out_rms")


def blockwise_available() -> bool:
  """Whether ``scaling.blockwise.blockwise_attention`` can be imported."""
  try:
    from scaling import blockwise  # pylint: disable=g-import-not-at-top
  except ImportError:
    return False
  return hasattr(blockwise, "blockwise_attention")


def _blockwise_fn():
  """``scaling.blockwise.blockwise_attention``, or a clear ImportError."""
  try:
    from scaling import blockwise  # pylint: disable=g-import-not-at-top
    return blockwise.blockwise_attention
  except (ImportError, AttributeError) as e:
    raise ImportError("attention='blockwise' needs scaling.blockwise.blockwise_attention, which is not "
                      f"available ({e}); use attention='dense'") from None


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Shape and parametrization of a decoder-only transformer.

  Attributes:
    vocab_size: V, number of tokens.
    width: D, the residual stream width.
    depth: number of blocks.
    num_heads: N, query heads.
    head_dim: H, the per-head dimension d_k (independent of the width).
    num_kv_heads: K, key/value heads (GQA); None = num_heads.
    mlp_ratio: hidden MLP width F = mlp_ratio * width (rounded).
    max_len: longest sequence the model accepts (the size of learned positions).
    rule: a logit-scale rule name from ``scaling.available_rules()``; None uses
      the parametrization's ``attention_rule()``.
    rule_options: ((name, value), ...) options for ``rule`` (e.g. (("tau", 2.0),)).
      With rule == "qk_norm" the query and key gains are learnable parameters.
    positions: "rope", "learned" or "none".
    pre_ln: True = pre-LN blocks with a final norm; False = post-LN blocks.
    norm: "layer" (LayerNorm without centring bias) or "rms" (RMSNorm).
    use_bias: add biases to every Dense and norm.
    parametrization: "sp", "ntk", "mup", "umup" (see scaling.parametrization).
    parametrization_options: ((name, value), ...) further options of the
      parametrization (e.g. (("attn_mult", 2.0),) for u-μP).
    base_width: the width at which the parametrization is tuned.
    base_head_dim: the head dim at which μP's α/d_k equals 1/√d_k.
    zero_query: zero-initialize W_q (an option of every parametrization).
    zero_readout: zero-initialize the readout (likewise).
    dtype: compute dtype "float32", "bfloat16" or "float16" (params stay float32;
      attention logits and softmax are float32).
    attention: "dense" (scaling.attention) or "blockwise" (scaling.blockwise).
    block_q: query tile length for blockwise attention.
    block_k: key tile length for blockwise attention.
    logit_soft_cap: c > 0 caps attention logits with c·tanh(z/c); None = off.
    causal: causal self-attention (a decoder); False only for ablations and tests.
    rope_base: RoPE frequency base.
  """

  vocab_size: int
  width: int = 64
  depth: int = 2
  num_heads: int = 4
  head_dim: int = 16
  num_kv_heads: int | None = None
  mlp_ratio: float = 4
  max_len: int = 256
  rule: str | None = None
  rule_options: tuple[tuple[str, Any], ...] = ()
  positions: str = "rope"
  pre_ln: bool = True
  norm: str = "layer"
  use_bias: bool = False
  parametrization: str = "sp"
  parametrization_options: tuple[tuple[str, Any], ...] = ()
  base_width: int = 64
  base_head_dim: int = 64
  zero_query: bool = False
  zero_readout: bool = False
  dtype: str = "float32"
  attention: str = "dense"
  block_q: int = 64
  block_k: int = 64
  logit_soft_cap: float | None = None
  causal: bool = True
  rope_base: float = 10000.0

  def __post_init__(self):
    for name in ("vocab_size", "width", "depth", "num_heads", "head_dim", "max_len", "base_width", "base_head_dim",
                 "block_q", "block_k"):
      v = getattr(self, name)
      if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if self.num_kv_heads is not None:
      if isinstance(self.num_kv_heads, bool) or not isinstance(self.num_kv_heads, int) or self.num_kv_heads <= 0:
        raise ValueError(f"num_kv_heads must be a positive integer or None, got {self.num_kv_heads!r}")
      if self.num_heads % self.num_kv_heads:
        raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")
    if not (isinstance(self.mlp_ratio, (int, float)) and math.isfinite(self.mlp_ratio) and self.mlp_ratio > 0):
      raise ValueError(f"mlp_ratio must be a positive number, got {self.mlp_ratio!r}")
    if self.mlp_hidden < 1:
      raise ValueError(f"mlp_ratio * width must be at least 1, got {self.mlp_ratio} * {self.width}")
    if self.positions not in POSITIONS:
      raise ValueError(f"positions must be one of {', '.join(POSITIONS)}; got {self.positions!r}")
    if self.positions == "rope" and self.head_dim % 2:
      raise ValueError(f"RoPE needs an even head_dim, got {self.head_dim}")
    if self.norm not in NORMS:
      raise ValueError(f"norm must be one of {', '.join(NORMS)}; got {self.norm!r}")
    if self.dtype not in DTYPES:
      raise ValueError(f"dtype must be one of {', '.join(DTYPES)}; got {self.dtype!r}")
    if self.attention not in ATTENTION_IMPLEMENTATIONS:
      raise ValueError(f"attention must be one of {', '.join(ATTENTION_IMPLEMENTATIONS)}; got {self.attention!r}")
    if self.logit_soft_cap is not None and not (math.isfinite(self.logit_soft_cap) and self.logit_soft_cap > 0):
      raise ValueError(f"logit_soft_cap must be a positive finite number or None, got {self.logit_soft_cap!r}")
    if not (math.isfinite(self.rope_base) and self.rope_base > 0):
      raise ValueError(f"rope_base must be positive, got {self.rope_base!r}")
    try:
      options = dict(self.rule_options)
    except (TypeError, ValueError):
      raise ValueError(f"rule_options must be a tuple of (name, value) pairs, got {self.rule_options!r}") from None
    if options and self.rule is None:
      raise ValueError("rule_options need an explicit rule")
    if self.rule is not None:
      if self.rule not in rules_lib.available_rules():
        raise ValueError(f"unknown logit-scale rule {self.rule!r}; known: {', '.join(rules_lib.available_rules())}")
      try:
        rules_lib.get_rule(self.rule, **options)
      except TypeError as e:
        raise ValueError(f"bad rule_options for rule {self.rule!r}: {e}") from None
    try:
      dict(self.parametrization_options)
    except (TypeError, ValueError):
      raise ValueError("parametrization_options must be a tuple of (name, value) pairs, got "
                       f"{self.parametrization_options!r}") from None
    self.make_parametrization()  # validates the name and its options
    if self.attention == "blockwise" and not blockwise_available():
      raise ValueError("attention='blockwise' needs scaling.blockwise.blockwise_attention, which is not available")

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

  def make_parametrization(self):
    """The ``scaling.parametrization.Parametrization`` this config names (ValueError if unknown)."""
    options = dict(self.parametrization_options)
    if self.zero_query:
      options["zero_query"] = True
    if self.zero_readout:
      options["zero_readout"] = True
    return param_lib.get_parametrization(self.parametrization, base_width=self.base_width,
                                         base_head_dim=self.base_head_dim, **options)

  def make_rule(self) -> rules_lib.ScaleRule:
    """The logit-scale rule: ``rule`` with its options, or the parametrization's rule."""
    if self.rule is None:
      return self.make_parametrization().attention_rule()
    return rules_lib.get_rule(self.rule, **dict(self.rule_options))


def _init(spec: param_lib.LayerSpec):
  """Initializer drawing init_mean + init_std · N(0, 1) (a constant when the std is 0)."""
  mean, std = float(spec.init_mean), float(spec.init_std)

  def init(key, shape, dtype=jnp.float32):
    x = std * jax.random.normal(key, shape, dtype) if std else jnp.zeros(shape, dtype)
    return x + mean if mean else x

  return init


def _spec(p: param_lib.Parametrization, kind: str, shape: tuple[int, ...], width: int) -> param_lib.LayerSpec:
  """The LayerSpec of a parameter of ``kind`` and ``shape``."""
  fan_in, fan_out = param_lib.fans(kind, shape)
  return p.layer(kind, fan_in, fan_out, width)


def _rms(x: Array) -> Array:
  """Root mean square of all entries, in float32."""
  x = x.astype(jnp.float32)
  return jnp.sqrt(jnp.mean(x * x))


def _scaled(x: Array, multiplier: float) -> Array:
  """x * multiplier, skipped when the multiplier is 1."""
  if multiplier == 1.0:
    return x
  return x * jnp.asarray(multiplier, x.dtype)


class ScaledDense(nn.Module):
  """y = A·(x @ W) [+ A_b·b]: W [fan_in, fan_out] and multiplier A of layer ``kind`` in the parametrization."""

  features: int
  kind: str
  parametrization: param_lib.Parametrization
  width: int
  use_bias: bool = False
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: Array) -> Array:
    """x [..., fan_in] -> [..., features] in ``dtype``."""
    shape = (x.shape[-1], self.features)
    spec = _spec(self.parametrization, self.kind, shape, self.width)
    kernel = self.param("kernel", _init(spec), shape, jnp.float32)
    y = _scaled(jnp.dot(x.astype(self.dtype), kernel.astype(self.dtype)), spec.multiplier)
    if self.use_bias:
      bspec = _spec(self.parametrization, "bias", (self.features,), self.width)
      bias = self.param("bias", _init(bspec), (self.features,), jnp.float32)
      y = y + _scaled(bias.astype(self.dtype), bspec.multiplier)
    return y


class ScaledEmbed(nn.Module):
  """Lookup A·E[ids] with E [num_embeddings, features] an "embedding" layer of the parametrization."""

  num_embeddings: int
  features: int
  parametrization: param_lib.Parametrization
  width: int
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, ids: Array) -> Array:
    """ids int [...] -> [..., features] in ``dtype``."""
    shape = (self.num_embeddings, self.features)
    spec = _spec(self.parametrization, "embedding", shape, self.width)
    table = self.param("embedding", _init(spec), shape, jnp.float32)
    return _scaled(jnp.take(table, ids, axis=0).astype(self.dtype), spec.multiplier)


class Norm(nn.Module):
  """LayerNorm or RMSNorm over the last axis (in float32) with gain ``scale`` (and ``bias`` if use_bias)."""

  kind: str
  parametrization: param_lib.Parametrization
  width: int
  use_bias: bool = False
  dtype: Any = jnp.float32
  eps: float = 1e-6

  @nn.compact
  def __call__(self, x: Array) -> Array:
    d = x.shape[-1]
    spec = _spec(self.parametrization, "norm", (d,), self.width)
    scale = self.param("scale", _init(spec), (d,), jnp.float32)
    norm = rules_lib.layer_norm if self.kind == "layer" else rules_lib.rms_norm
    y = norm(x.astype(jnp.float32), self.eps) * _scaled(scale, spec.multiplier)
    if self.use_bias:
      bspec = _spec(self.parametrization, "bias", (d,), self.width)
      bias = self.param("bias", _init(bspec), (d,), jnp.float32)
      y = y + _scaled(bias, bspec.multiplier)
    return y.astype(self.dtype)


def _max_lse(lse_bnt: Array) -> Array:
  """Largest finite log-sum-exp over rows (fully masked rows have -inf)."""
  lse = lse_bnt.astype(jnp.float32)
  return jnp.max(jnp.where(jnp.isfinite(lse), lse, -jnp.inf))


def attention_layer_metrics(logits: Array, weights: Array, mask: Array | None) -> dict[str, Array]:
  """Scalar metrics of one attention layer from the logits, weights and mask it used.

  Args:
    logits: [B, N, T, S] as returned by ``scaling.attention_with_aux``.
    weights: [B, N, T, S].
    mask: boolean visibility broadcastable to [B, N, T, S], or None.

  Returns:
    ``attn_entropy`` (nats) and ``attn_max_prob``: means over heads of
    ``scaling.metrics.weight_stats_per_head``; ``attn_max_logit``: the largest
    |logit| of any head (``logit_stats_per_head``'s absmax); ``attn_logits_rms``:
    RMS of all visible logits; ``attn_max_lse``: the largest row log-sum-exp.
  """
  lstats = metrics_lib.logit_stats_per_head(logits, mask)
  wstats = metrics_lib.weight_stats_per_head(weights, mask)
  z = logits.astype(jnp.float32)
  if mask is not None:
    z = jnp.where(mask, z, -jnp.inf)
  return {
      "attn_entropy": jnp.mean(wstats["entropy"]),
      "attn_max_prob": jnp.mean(wstats["max_prob"]),
      "attn_max_logit": jnp.max(lstats["absmax"]),
      "attn_logits_rms": jnp.sqrt(jnp.mean(lstats["var"] + lstats["mean"] ** 2)),
      "attn_max_lse": _max_lse(jax.nn.logsumexp(z, axis=-1)),
  }


class Attention(nn.Module):
  """Multi-head (GQA) self-attention through ``scaling.attention_with_aux`` or the blockwise path.

  RoPE rotates q and k before the rule's ``prepare`` step; for QK-norm with
  RMS normalization the order does not matter (a rotation keeps the RMS), only
  the learnable per-coordinate gains act on rotated coordinates.
  """

  config: ModelConfig
  parametrization: param_lib.Parametrization

  @nn.compact
  def __call__(self, x: Array) -> tuple[Array, dict[str, Array]]:
    """x [B, T, D] -> (output [B, T, D], scalar metrics)."""
    cfg, p = self.config, self.parametrization
    b, t, _ = x.shape
    n, k, h = cfg.num_heads, cfg.kv_heads, cfg.head_dim
    dense = lambda features, kind, name: ScaledDense(
        features, kind, p, cfg.width, cfg.use_bias, cfg.compute_dtype, name=name)
    q = dense(n * h, "attn_q", "query")(x).reshape(b, t, n, h)
    kk = dense(k * h, "attn_k", "key")(x).reshape(b, t, k, h)
    v = dense(k * h, "attn_v", "value")(x).reshape(b, t, k, h)
    if cfg.positions == "rope":
      q = rope_lib.apply_rope(q, base=cfg.rope_base)
      kk = rope_lib.apply_rope(kk, base=cfg.rope_base)
    rule = cfg.make_rule()
    if isinstance(rule, rules_lib.QKNorm):
      gspec = _spec(p, "norm", (h,), cfg.width)
      qg = self.param("query_gain", _init(gspec), (h,), jnp.float32)
      kg = self.param("key_gain", _init(gspec), (h,), jnp.float32)
      rule = rule.replace(query_gain=_scaled(qg, gspec.multiplier), key_gain=_scaled(kg, gspec.multiplier))
    if cfg.attention == "dense":
      out, logits, weights, mask = attention_lib.attention_with_aux(
          q, kk, v, rule=rule, is_causal=cfg.causal, logit_soft_cap=cfg.logit_soft_cap)
      aux = attention_layer_metrics(logits, weights, mask)
    else:
      out, lse = _blockwise_fn()(q, kk, v, rule=rule, is_causal=cfg.causal, logit_soft_cap=cfg.logit_soft_cap,
                                 block_q=cfg.block_q, block_k=cfg.block_k, return_residual=True)
      nan = jnp.full((), jnp.nan, jnp.float32)
      aux = {key: nan for key in ("attn_entropy", "attn_max_prob", "attn_max_logit", "attn_logits_rms")}
      aux["attn_max_lse"] = _max_lse(lse)
    out = dense(cfg.width, "attn_o", "out")(out.reshape(b, t, n * h).astype(cfg.compute_dtype))
    return out, aux


class Mlp(nn.Module):
  """fc_out(gelu(fc_in(x))), both "hidden" layers; F = mlp_ratio · width."""

  config: ModelConfig
  parametrization: param_lib.Parametrization

  @nn.compact
  def __call__(self, x: Array) -> Array:
    cfg, p = self.config, self.parametrization
    y = ScaledDense(cfg.mlp_hidden, "hidden", p, cfg.width, cfg.use_bias, cfg.compute_dtype, name="fc_in")(x)
    y = nn.gelu(y)
    return ScaledDense(cfg.width, "hidden", p, cfg.width, cfg.use_bias, cfg.compute_dtype, name="fc_out")(y)


class Block(nn.Module):
  """One transformer block: pre-LN x + f(LN(x)), or post-LN LN(x + f(x)) (Xiong et al. 2020)."""

  config: ModelConfig
  parametrization: param_lib.Parametrization

  @nn.compact
  def __call__(self, x: Array) -> tuple[Array, dict[str, Array]]:
    cfg, p = self.config, self.parametrization
    norm = lambda name: Norm(cfg.norm, p, cfg.width, cfg.use_bias, cfg.compute_dtype, name=name)
    attn = Attention(cfg, p, name="attn")
    mlp = Mlp(cfg, p, name="mlp")
    if cfg.pre_ln:
      a, aux = attn(norm("ln_attn")(x))
      x = x + a
      m = mlp(norm("ln_mlp")(x))
      x = x + m
    else:
      a, aux = attn(x)
      x = norm("ln_attn")(x + a)
      m = mlp(x)
      x = norm("ln_mlp")(x + m)
    return x, dict(aux, attn_out_rms=_rms(a), mlp_out_rms=_rms(m))


class Transformer(nn.Module):
  """Decoder-only transformer: tokens [B, T] -> (logits [B, T, V] in float32, aux).

  The GPT-style decoder of Vaswani et al. 2017 ("Attention Is All You Need")
  with pre-LN blocks by default (Xiong et al. 2020, "On Layer Normalization in
  the Transformer Architecture"), GELU MLPs, untied input and output
  embeddings, and no dropout.

  ``aux["layers"]`` is a dict of [depth] arrays, one entry per key of
  ``LAYER_AUX_KEYS``: ``attn_entropy``, ``attn_max_prob``, ``attn_max_logit``,
  ``attn_logits_rms``, ``attn_max_lse`` (see ``attention_layer_metrics``),
  ``attn_out_rms`` and ``mlp_out_rms`` (RMS of the attention and MLP branch
  outputs before the residual add). ``aux["embed_rms"]`` is the RMS of the
  first block's input and ``aux["readout_rms"]`` that of the logits. All come
  from the same forward pass as the logits. With attention="blockwise" the
  logits matrix is never formed, so entropy, max probability, max |logit| and
  logit RMS are NaN; ``attn_max_lse`` (from the blockwise log-sum-exp, an upper
  bound on the max logit within log S) is exact.
  """

  config: ModelConfig

  @nn.compact
  def __call__(self, tokens: Array, *, embedded: Array | None = None) -> tuple[Array, dict[str, Any]]:
    """Runs the model.

    Args:
      tokens: int [B, T] with T <= max_len.
      embedded: optional [B, T, D] replacing the token-embedding output (before
        positions are added), to differentiate with respect to the inputs.

    Returns:
      (logits [B, T, V] float32, aux).
    """
    cfg = self.config
    p = cfg.make_parametrization()
    if tokens.ndim != 2:
      raise ValueError(f"tokens must be [B, T], got shape {tokens.shape}")
    t = tokens.shape[1]
    if t > cfg.max_len:
      raise ValueError(f"sequence length {t} exceeds max_len {cfg.max_len}")
    dt = cfg.compute_dtype
    x = ScaledEmbed(cfg.vocab_size, cfg.width, p, cfg.width, dt, name="embed")(tokens)
    if embedded is not None:
      if embedded.shape != x.shape:
        raise ValueError(f"embedded must have shape {x.shape}, got {embedded.shape}")
      x = embedded.astype(dt)
    if cfg.positions == "learned":
      x = x + ScaledEmbed(cfg.max_len, cfg.width, p, cfg.width, dt, name="pos_embed")(jnp.arange(t))[None]
    embed_rms = _rms(x)
    layer_aux = []
    for i in range(cfg.depth):
      x, aux = Block(cfg, p, name=f"block_{i}")(x)
      layer_aux.append(aux)
    if cfg.pre_ln:
      x = Norm(cfg.norm, p, cfg.width, cfg.use_bias, dt, name="ln_final")(x)
    # No readout bias: its fan-out is the vocabulary, which the parametrization cannot tell from a width.
    logits = ScaledDense(cfg.vocab_size, "readout", p, cfg.width, False, dt, name="readout")(x)
    logits = logits.astype(jnp.float32)
    layers = {key: jnp.stack([a[key] for a in layer_aux]).astype(jnp.float32) for key in LAYER_AUX_KEYS}
    return logits, {"layers": layers, "embed_rms": embed_rms, "readout_rms": _rms(logits)}


def init_params(rng: Array, config: ModelConfig, seq_len: int | None = None) -> dict[str, Any]:
  """The ``params`` collection of ``Transformer(config)`` for a seed key (shapes do not depend on seq_len)."""
  t = min(config.max_len, 8) if seq_len is None else seq_len
  return Transformer(config).lazy_init(rng, jax.ShapeDtypeStruct((1, t), jnp.int32))["params"]


def count_params(params: Any) -> int:
  """Total number of parameters."""
  return sum(int(x.size) for x in jax.tree.leaves(params))
