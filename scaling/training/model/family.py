"""``ModelFamily``: the model options every training study shares, transformers indexed by width.

A family turns a parametrization's name and a width into a ``scaling.training.model.config.ModelConfig``
(``ModelFamily.model_config``, the one place where model options become a model): the head layout at the width, the
base width and base head dim of the parametrization, and the names of the parametrization and the logit-scale rule
resolved to objects.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from scaling.attention import rules as rules_lib
from scaling.base.config import option
from scaling.base.config import Options
from scaling.base.validation import ConfigError
from scaling.mup import schemes as param_lib
from scaling.training.model import config as model_config_lib
from scaling.training.model.config import ModelConfig

DEFAULT_NUM_HEADS = 4
DEFAULT_RULE = "default"


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
  positions: str = option("rope", "Position encoding.", choices=model_config_lib.POSITIONS)
  pre_ln: bool = option(True, "Pre-LN blocks (false: post-LN).")
  rule: str = option(DEFAULT_RULE, "Attention logit-scale rule; 'default' = the parametrization's own.",
                     choices=lambda: (DEFAULT_RULE, *rules_lib.available_rules()))
  tau: float | None = option(None, "Temperature of --rule=temperature (default 1).", positive=True)
  qk_norm: str = option("rms", "Normalization of q and k under --rule=qk_norm: rms (RMSNorm) or layer (LayerNorm "
                        "without bias) over the head dim.", choices=model_config_lib.QK_NORMS)
  qk_norm_gains: bool = option(True, "Learnable per-coordinate gains of the normalized q and k under --rule=qk_norm "
                               "(layer kind norm); false: no gain parameters.")
  logit_soft_cap: float | None = option(None, "Attention logit soft cap c (c*tanh(z/c)); default: none.",
                                        positive=True)
  dtype: str = option("float32", "Compute dtype (parameters stay float32).", choices=tuple(model_config_lib.DTYPES))
  attention: str = option("dense", "Attention implementation: dense, blockwise, or auto (the path measured fastest "
                          "for the shape, remembered on disk); blockwise and auto log no entropy/max-logit metrics.",
                          choices=model_config_lib.ATTENTION_IMPLEMENTATIONS)
  block_size: int = option(64, "Query and key tile length of blockwise attention.", lower=1)
  zero_query: bool = option(False, "Zero-initialize W_q (muP option).")
  zero_readout: bool = option(False, "Zero-initialize the readout (muP option).")
  depth_alpha: float = option(0.0, "Depth scaling alpha: each residual branch x (depth/base_depth)^-alpha and "
                              "in-block Adam LRs x (depth/base_depth)^(alpha-1) (CompleteP); 0 = off, else in "
                              "[0.5, 1] (0.5: depth-muP, 1: CompleteP).", lower=0.0, upper=1.0)
  base_depth: int | None = option(None, "Depth at which the parametrization is tuned (depth scaling is 1 there); "
                                  "default: --depth (m_L = 1).", lower=1)
  scan_layers: bool = option(True, "Run the blocks as one jax.lax.scan over their stacked parameters (compile "
                             "time flat in depth); --scan_layers=false unrolls them. Both compute the same function; "
                             "checkpoints and returned parameters keep one block_{i} per block.")
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
