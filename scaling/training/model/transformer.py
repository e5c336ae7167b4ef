"""A decoder-only transformer whose init, multipliers and logit scale come from a parametrization.

``Transformer(config)`` is the model of a ``scaling.training.model.config.ModelConfig`` (made from options by
``scaling.training.model.family.ModelFamily``); its blocks are ``scaling.training.model.blocks``', run one by one or as
scans over stacked parameters (``scaling.training.model.scanned_blocks``). ``parametrized`` is the model's
parametrization through the one engine (``scaling.parametrize`` of its roles), from which its layers draw their init
and multipliers and the optimizer its per-parameter learning rates.

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

import functools
import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from scaling.base.validation import ConfigError
from scaling.base.validation import ConfigTypeError
from scaling.mup import layers
from scaling.mup import parametrize as parametrize_lib
from scaling.mup import roles as roles_lib
from scaling.training.model import blocks as blocks_lib
from scaling.training.model import config as model_config_lib
from scaling.training.model import param_draws as param_draws_lib
from scaling.training.model import scales as model_scales_lib
from scaling.training.model import scanned_blocks as scanned_blocks_lib
from scaling.training.model.config import ModelConfig

Array = jax.Array

LAYER_AUX_KEYS = (*blocks_lib.ATTENTION_METRICS, "attn_out_rms", "mlp_out_rms", "resid_rms")


class Transformer(nn.Module):
  """Decoder-only transformer: tokens [B, T] -> logits [B, T, V] in float32.

  The GPT-style decoder of Vaswani et al. 2017 ("Attention Is All You Need")
  with pre-LN blocks by default (Xiong et al. 2020, "On Layer Normalization in
  the Transformer Architecture"), GELU MLPs, untied input and output
  embeddings, and no dropout. Sows ``embed_rms`` (the first block's input) and
  ``readout_rms`` (the logits); ``apply_with_aux`` collects every sown value. ``attn_mult`` (optional, may be
  traced): every layer's logit scale is α/d_head with α = attn_mult (``blocks.Attention``). Under u-μP the unit
  scales of every op are computed once here for the input's shape (``model_scales.unit_scales``) and handed to each
  block.
  """

  config: ModelConfig
  attn_mult: Any = None
  specs: Any = None

  def __post_init__(self):
    model_config_lib.check_model_config("config", self.config)
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
    s = model_scales_lib.model_scales(cfg, b, t)
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
    if not self.is_initializing() and scans_blocks(cfg):
      x = scanned_blocks_lib.scanned_blocks(self, x, specs, s.blocks)
    else:
      for i in range(cfg.depth):
        x = blocks_lib.Block(cfg, specs, attn_mult=self.attn_mult, scales=s.blocks[i], name=f"block_{i}")(x)
    if cfg.pre_ln:
      x = layers.Norm(cfg.norm, specs, cfg.use_bias, dt, final=True, grad_scale=s.ln_final, name="ln_final")(x)
      x = layers.probe(self, "act_final", x)
    # No readout bias: its fan-out is the vocabulary, which the parametrization cannot tell from a width.
    logits = blocks_lib.dense_layer(cfg, specs, cfg.vocab_size, "readout", "readout", s.readout, use_bias=False)(x)
    logits = layers.probe(self, "act_logits", logits.astype(jnp.float32))
    layers.record(self, "readout_rms", layers.rms(logits))
    return logits


def gather_aux(sown: dict[str, Any], depth: int) -> dict[str, Any]:
  """The sown ``"metrics"`` collection as {"layers": {key: [depth]}, "embed_rms", "readout_rms"}."""
  per_block = [dict(sown[f"block_{i}"]["attn"], **{k: v for k, v in sown[f"block_{i}"].items() if k != "attn"})
               for i in range(depth)]
  return {"layers": {key: jnp.stack([b[key] for b in per_block]) for key in LAYER_AUX_KEYS},
          "embed_rms": sown["embed_rms"], "readout_rms": sown["readout_rms"]}


def apply_with_aux(model: Transformer, params: Any, tokens: Array, **kwargs: Any) -> tuple[Array, dict[str, Any]]:
  """(logits [B, T, V], aux): the forward pass and its per-layer measurements (``gather_aux``)."""
  if not isinstance(model, Transformer):
    raise ConfigTypeError(f"model must be a scaling.training.model.transformer.Transformer, got {type(model).__name__}")
  logits, state = model.apply({"params": params}, tokens, mutable=[layers.METRICS], **kwargs)
  return logits, gather_aux(state[layers.METRICS], model.config.depth)


def _init_boxed(rng: Array, config: ModelConfig, seq_len: int | None = None, specs: Any = None) -> Any:
  """The boxed ``params`` collection (values carry their layer kind)."""
  t = min(config.max_len, 8) if seq_len is None else seq_len
  return Transformer(config, specs=specs).init(rng, jnp.zeros((1, t), jnp.int32))["params"]


def init_params(rng: Array, config: ModelConfig, *, stacked: bool = False) -> dict[str, Any]:
  """The ``params`` of ``Transformer(config)`` for a seed key, as plain arrays.

  Those of ``Transformer(config).init(rng, tokens)["params"]`` unboxed, bit for bit, drawn one shape at a time
  (``param_draws``: a program that does not grow with depth).

  Args:
    rng: the key.
    config: the model.
    stacked: every block's parameters stacked under ``block_0`` (``scanned_blocks.stack_blocks``' layout, in which a
      scanned model trains) rather than one ``block_{i}`` per block.
  """
  return param_draws_lib.draw_params(rng, _draw_plan(config), depth=config.depth if stacked else 0)


@functools.lru_cache(maxsize=64)
def _draw_plan(config: ModelConfig) -> param_draws_lib.DrawPlan:
  return param_draws_lib.draw_plan(created_params(config), parametrized(config))


@functools.lru_cache(maxsize=64)
def _traced_shapes(config: ModelConfig) -> tuple[Any, tuple[tuple[str, str, tuple[int, ...]], ...]]:
  """(the boxed parameter shapes: ``jax.ShapeDtypeStruct`` in ``Kinded`` boxes, every parameter's (path, kind, shape)
  in the order the layers created it); nothing computed."""
  source = layers.ShapesOnly()
  boxed = jax.eval_shape(functools.partial(_init_boxed, config=config, specs=source), jax.random.PRNGKey(0))
  return boxed, tuple(source.created)


def _boxed_shapes(config: ModelConfig) -> Any:
  """The boxed parameter shapes (``jax.ShapeDtypeStruct`` in ``Kinded`` boxes); nothing computed."""
  return _traced_shapes(config)[0]


def created_params(config: ModelConfig) -> tuple[tuple[str, str, tuple[int, ...]], ...]:
  """Every parameter of ``Transformer(config)`` as (path, kind, shape), in the order its layers create it."""
  model_config_lib.check_model_config("config", config)
  return _traced_shapes(config)[1]


def _cached_kinds(config: ModelConfig) -> Any:
  return layers.param_kinds(_boxed_shapes(config))


@functools.lru_cache(maxsize=64)
def parametrized(config: ModelConfig) -> parametrize_lib.RoleParametrization:
  """The model's parametrization through the one engine: ``scaling.parametrize`` of its roles (``forward="model"``).

  The roles are inferred (``scaling.infer_kinds``) from the model's parameter shapes at the parametrization's base
  width (``at_width``), at a second width and at its own, each parameter keeping the kind its layer gave it
  (``layers.Kinded``); so every parameter's width multiplier is its own fan-in or fan-out over the base model's, as
  for any user's model. The layers draw their init and apply their forward multipliers from it
  (``RoleParametrization.layer``), and the optimizer's per-parameter learning rates come from it too.
  """
  model_config_lib.check_model_config("config", config)
  base = model_config_lib.at_width(config, config.parametrization.base_width)
  delta = config if config.width != base.width else model_config_lib.at_width(config, 2 * base.width)
  roles = roles_lib.infer_kinds(_boxed_shapes(base), _boxed_shapes(delta), _boxed_shapes(config))
  return parametrize_lib.parametrize(roles, config.parametrization, forward="model")


def scans_blocks(config: ModelConfig) -> bool:
  """Whether ``Transformer(config)`` runs its blocks as scans (``scanned_blocks``), and so whether training keeps the
  blocks' parameters stacked (``stack_blocks``; the optimizer updates each stacked leaf once, with the first block's
  specs).

  Args:
    config: the model.

  Returns:
    True for a model of several blocks with ``scan_layers`` whose blocks' parameters share their roles, specs and ε
    factors (every model the built-in parametrizations make); False otherwise: blocks parametrized unlike each other
    (a scan would give every block the first one's multipliers) run unrolled, the same function.
  """
  return bool(config.scan_layers and config.depth > 1 and _blocks_share_specs(config))


@functools.lru_cache(maxsize=64)
def _blocks_share_specs(config: ModelConfig) -> bool:
  """Whether every block's parameters have the roles, specs and ε factors of ``block_0``'s at the same path."""
  p = parametrized(config)
  for path in p.roles:
    head, _, rest = path.partition("/")
    if head.startswith("block_") and head != "block_0":
      first = f"block_0/{rest}"
      if (p.roles[path].kind != p.roles[first].kind or p.spec(path) != p.spec(first)
          or p.eps_factor(path, "mup") != p.eps_factor(first, "mup")):
        return False
  return True


def param_kinds(config: ModelConfig) -> Any:
  """The layer kind of every parameter, a tree of strings with the structure of ``init_params`` (no compute)."""
  model_config_lib.check_model_config("config", config)
  return jax.tree.map(lambda kind: kind, _cached_kinds(config))


def count_params(params: Any) -> int:
  """Total number of parameters."""
  return sum(math.prod(x.shape) for x in jax.tree.leaves(params))
