"""The op scales of a built-in model: u-μP's unit scales for the input's shape, none for other parametrizations.

``scaling.training.model.transformer.Transformer`` computes them once per call (``model_scales``) and hands each block its
``unit_scaling.BlockScales``.
"""

from __future__ import annotations

from scaling.base.validation import ConfigError
from scaling.mup import unit_scaling as unit
from scaling.mup import unit_scaling_covariance as covariance_lib
from scaling.training.model.config import ModelConfig

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


def model_scales(config: ModelConfig, batch: int, seq_len: int) -> unit.ModelScales:
  """``unit_scales`` under u-μP; otherwise no op scales (None per block and readout) and gradient scales 1."""
  if config.parametrization.unit_scaled:
    return unit_scales(config, batch, seq_len)
  return unit.ModelScales((None,) * config.depth, 1.0, 1.0, 1.0, None)
