"""Width-dependent parametrizations as data: SP, NTK, μP and u-μP.

Every scheme is an abc-parametrization (Yang & Hu 2021, "Tensor Programs IV:
Feature Learning in Infinite-Width Neural Networks", §3): a weight is used as
``A · w`` with ``w ~ N(init_mean, B²)`` at init and trained with per-parameter
learning rate ``η · C``. For each layer kind a scheme gives

* ``init_std`` (B) and ``init_mean``: the model draws ``init_mean + B · N(0, 1)``;
* ``multiplier`` (A): the layer computes ``A · (x @ w)``;
* ``lr_adam`` and ``lr_sgd`` (C): the optimizer scales the update of ``w`` by C
  (``scaling.mup.parametrize.RoleParametrization.scale_lr``).

Notation: ``n_in``/``n_out`` are the layer's fan-in/fan-out (``scaling.mup.shapes.fans``), and
``m = width / base_width`` is the width multiplier. Multipliers written in m are
relative to the base model, so they equal 1 at ``width == base_width``; those
written in ``n_in``/``n_out`` are absolute. μP's relative factors assume every
width-like dimension (d_model, d_ff, heads·head_dim) grows by the same m.

Layer kinds (set by the layer that creates each parameter, ``scaling.mup.layers``, or inferred from shapes,
``scaling.mup.roles``): ``embedding`` (input weights, one-hot input), ``input`` (input weights of a Dense layer with a
dense input: fan-in fixed, fan-out a width), ``hidden`` (MLP matrices), ``attn_q``/``attn_k``/``attn_v``/``attn_o``
(attention projections), ``readout`` (output weights), ``bias`` (every bias), ``norm`` (LayerNorm/RMSNorm gains and
QK-norm gains) and ``fixed`` (a parameter no width touches, e.g. a bias over the vocabulary: SP's row, LR 1, in
every scheme).

SP (standard parametrization; PyTorch/Flax defaults with fan-in init):

=========  ==========  ====  ====  ===
kind       B           A     Adam  SGD
=========  ==========  ====  ====  ===
embedding  1           1     1     1
input      1/√n_in     1     1     1
hidden     1/√n_in     1     1     1
attn_*     1/√n_in     1     1     1
readout    1/√n_in     1     1     1
bias       0           1     1     1
norm       0 (mean 1)  1     1     1
fixed      1/√n_in     1     1     1
=========  ==========  ====  ====  ===

Attention logits: 1/√d_head (``SqrtScale``).

NTK (Jacot et al. 2018, "Neural Tangent Kernel", eq. 1; Tensor Programs IV,
§3, the "NTP" example: a_1 = 0, a_l = 1/2, b = 0, c = 0):

=========  ==========  ========  ======  ===
kind       B           A         Adam    SGD
=========  ==========  ========  ======  ===
embedding  1           1         1/√m    1
input      1           1/√n_in   1/√m    1
hidden     1           1/√n_in   1/m     1
attn_*     1           1/√n_in   1/m     1
readout    1           1/√n_in   1/√m    1
bias       0           1         1/√m    1
norm       0 (mean 1)  1         1/√m    1
fixed      1/√n_in     1         1       1
=========  ==========  ========  ======  ===

The embedding multiplier is 1 rather than 1/√V: its input is one-hot, so the
effective fan-in of a lookup is 1 (Jacot's first-layer 1/√n_0 assumes inputs
with O(1) coordinates, which is the ``input`` row). Biases start at 0 (Jacot's β·b with b ~ N(0, 1) is not
used). The SGD column is c = 0. NTK is defined for SGD; the Adam column is what
the same kernel regime requires of an entrywise-normalized update (Tensor
Programs IVb, Yang & Littwin 2023): every feature moves by Θ(n^{-1/2}) and the
output by Θ(1) per step. With an Adam update Φ of O(1) entries aligned with
its input, a hidden matrix changes its output by A·C·n, so A·C = n^{-3/2}
gives C ∝ 1/n; the readout needs A·C·n = O(1), C ∝ n^{-1/2}; vector-like
parameters (embedding rows, biases, gains) need C ∝ n^{-1/2}. The constants are
fixed to 1 at the base width.

μP (Yang et al. 2022, "Tensor Programs V", Table 8: the formulation of the
``mup`` package with ``MuReadout``, widths relative to a base model):

=========  ================  ====  ====  ===
kind       B                 A     Adam  SGD
=========  ================  ====  ====  ===
embedding  1                 1     1     m
input      1/√n_in           1     1     m
hidden     1/√n_in           1     1/m   1
attn_*     1/√n_in (q: 0)    1     1/m   1
readout    1/√n_base (or 0)  1/m   1     m
bias       0                 1     1     m
norm       0 (mean 1)        1     1     m
fixed      1/√n_in           1     1     1
=========  ================  ====  ====  ===

The ``input`` row is Table 8's input weights (init variance 1/fan_in, Adam LR 1, SGD LR fan_out, i.e. m
relative to the base; ``mup``'s vector-like parameters): n_in does not grow, so the init is SP's.

The readout's n_base = n_in / m is its fan-in in the base model: its init std
stays at the base width's fan-in value as the width grows (Table 8: init
variance constant in width, multiplier 1/fan_in; ``mup``'s ``MuReadout``:
``set_base_shapes`` rescales the fan-in init of ``nn.Linear`` by √m, and the
forward divides by m). The effective init A·B = √n_base / n_in ∝ 1/n_in is
Table 3's readout (std 1/fan_in, multiplier 1), so the logits start at
Θ(n^{-1/2}); the effective Adam step A·C ∝ 1/m and SGD step A²·C ∝ 1/m are
Table 3's output rules too.

Attention logits: α/d_head with α = √base_head_dim (``LinearScale(base_head_dim)``,
Tensor Programs V §4 / Table 3), equal to 1/√d_head at the base head dim. At
m = 1 every row equals SP, so an SP model tuned at the base width is the μP
proxy; the only deliberate differences are the options ``zero_query`` (W_q
starts at 0, as in TP5's Transformer experiments) and ``zero_readout`` (readout
starts at 0, the ``mup`` package's ``readout_zero_init``), and the attention rule when
d_head differs from ``base_head_dim``. In Table 3 form (every multiplier 1,
readout B = 1/n_in, Adam LR 1/n_in, SGD LR 1/n_in; input SGD LR n_out) the
effective quantities A·B, A·C (Adam) and A²·C (SGD) scale the same way, but the
model is not SP at the base width; Table 8 is used here for that reason.

u-μP (Blake et al. 2024, "u-μP: The Unit-Scaled Maximal Update
Parametrization", §4: the u-μP column of its ABC-multiplier table; reference
implementation graphcore-research/unit-scaling: ``functional.linear``,
``functional.linear_readout``, ``functional.scaled_dot_product_attention`` and
``optim.lr_scale_func_adam``):

=========  ==========  ========  ========  =====
kind       B           A         Adam      SGD
=========  ==========  ========  ========  =====
embedding  1           1         1/√n_out  1/√n_out
input      1           1/√n_in   1/√n_in   1/√n_in
hidden     1           1/√n_in   1/√n_in   1/√n_in
attn_*     1 (q: 0)    1/√n_in   1/√n_in   1/√n_in
readout    1 (or 0)    1/n_in    1         1
bias       0           1         1         1
norm       0 (mean 1)  1         1         1
fixed      1/√n_in     1         1         1
=========  ==========  ========  ========  =====

A Dense ``input`` layer is the library's ``Linear`` of mup_type "weight" (A = 1/√n_in makes its output
unit-scaled for unit inputs; Adam LR 1/√n_in, constant in width as μP requires of input weights).

The table is ``umup_scales="paper"``, the default. Under ``umup_scales="covariance"``
(this project's correction, ``scaling.mup.unit_scaling_covariance``) the readout is
unit-scaled like every other matrix: A = 1/√n_in makes the logits unit-scale at
init, where ``linear_readout``'s A = 1/n_in leaves them at 1/√n_in; its Adam and
SGD LR 1/√n_in keep A·C = 1/n_in, so an update moves the logits exactly as much
as under the paper's readout (μP's output rule, Tensor Programs V Table 3); the
two differ only in the function at init, a Gaussian process of unit scale there
instead of a vanishing one (Tensor Programs IV: a_{L+1} + b_{L+1} = 1/2 instead
of 1).

All u-μP factors are absolute (the paper drops base shapes), so ``width`` only
enters through the fans. The embedding Adam LR 1/√n_out (n_out = d_model) is the
paper's embedding rule (§4.4), a deliberate departure from μP's constant. The
Adam column is the paper's; in-block parameters further get × 1/√L
(``unit_scaling.optim.lr_scale_for_depth``). The model computes u-μP with the
unit-scaled operations of ``scaling.mup.unit_scaling`` (with the corrections of
``scaling.mup.unit_scaling_covariance`` under "covariance"), whose backward pass rescales
gradients to unit scale, so the SGD column equals the Adam column
(``lr_scale_func_sgd`` with an unconstrained readout). Attention logits:
α_attn/d_head (``LinearScale(alpha=attn_mult)``, default α_attn = 1 as in the
paper and in ``unit_scaling.functional.scaled_dot_product_attention``,
``scale=mult / d_head``).

Depth (CompleteP, Dey et al. 2025, Table 1): with ``depth_alpha`` α > 0 and
m_L = depth / base_depth, every residual branch is multiplied by m_L^−α
(``residual_multiplier``) and the in-block kinds (hidden, attn_*, norm, bias)
get Adam LR × m_L^(α−1) and SGD LR × m_L^(2α−1); Adam's ε factor
(``eps_multiplier``) is 1/m under μP, × m_L^−α in the blocks. The embedding,
readout and the final norm (kinds final_norm, final_bias) have no depth factor.

Weight decay: decoupled decay in optax's ``adamw`` (like ``torch.optim.AdamW``)
is multiplied by the learning rate, so with per-layer LR multipliers C the
naive chain would decay a parameter by ``lr · C · wd`` per step: hidden
matrices under μP would decay m times slower at width m. ``scaling.mup.optim``
instead adds the decay *after* the per-layer scaling, so every decayed
parameter shrinks by ``lr · wd`` per step, whatever its layer and the width.
This is what microsoft/mup's ``MuAdam``/``MuSGD`` do with
``decoupled_wd=False``: they divide each group's ``weight_decay`` by the
group's LR factor so that ``lr · wd`` is unchanged. The decay timescale
1/(lr · wd) then does not depend on width, and at m = 1 everything equals SP
AdamW. The ``unit_scaling`` library makes the
decay independent of the LR altogether (``independent_weight_decay=True``),
which is not implemented here. By default only matrices decay (biases and
gains do not).

A bias on the readout (fan-out = vocabulary, not width) needs SGD LR 1 in
μP/u-μP and Adam LR 1 in NTK, which the kind "bias" does not give, so the model
gives the readout no bias; the kind "fixed" (what ``scaling.mup.roles`` infers for a
parameter none of whose axes grows) gives it those rates in a user's model.
Likewise the QK-norm gains (``attn/query_gain``, size
d_head) are treated as width-like vectors; when d_head stays fixed as the width
grows, their SGD multipliers (m in μP, d_head in u-μP) should be 1. Their Adam
multipliers (1) are right either way.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from scaling.attention import rules
from scaling.base import validation
from scaling.base.validation import check_positive_int
from scaling.base.validation import ConfigError

LAYER_KINDS = ("embedding", "input", "hidden", "attn_q", "attn_k", "attn_v", "attn_o", "readout", "bias", "norm",
               "final_norm", "final_bias", "fixed")
MATRIX_KINDS = ("embedding", "input", "hidden", "attn_q", "attn_k", "attn_v", "attn_o", "readout")
VECTOR_KINDS = ("bias", "norm", "final_norm", "final_bias")
GAIN_KINDS = ("norm", "final_norm")
_HIDDEN_LIKE = ("hidden", "attn_q", "attn_k", "attn_v", "attn_o")
# Parameters inside the residual blocks: the ones depth scaling touches (CompleteP's "hidden" groups).
BLOCK_KINDS = ("hidden", "attn_q", "attn_k", "attn_v", "attn_o", "bias", "norm")
# Width rules of the kinds outside the blocks that are vectors like an in-block kind.
_WIDTH_KIND = {"final_norm": "norm", "final_bias": "bias"}
DEPTH_ALPHAS = "0 (off) or a number in [0.5, 1]"


def check_depth_alpha(value: Any) -> float:
  """Returns ``value`` as a float if it is 0 or in [0.5, 1], else raises ValueError."""
  ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
  if not ok or not (value == 0 or 0.5 <= value <= 1):
    raise ConfigError(f"depth_alpha must be {DEPTH_ALPHAS}, got {value!r}")
  return float(value)


@dataclasses.dataclass(frozen=True)
class LayerSpec:
  """Init, forward multiplier and LR multipliers of one parameter.

  Attributes:
    init_std: std of the normal init (0.0 = no random part).
    multiplier: forward multiplier; the layer computes ``multiplier * (x @ W)``.
    lr_adam: learning-rate multiplier for Adam-family optimizers (adam, adamw).
    lr_sgd: learning-rate multiplier for SGD.
    init_mean: mean of the init; the parameter starts at
      ``init_mean + init_std * N(0, 1)`` (1.0 for norm gains, else 0.0).
  """

  init_std: float
  multiplier: float
  lr_adam: float
  lr_sgd: float
  init_mean: float = 0.0

  def lr(self, optimizer: str) -> float:
    """The LR multiplier for ``optimizer`` ("adam", "adamw", "adam_atan2" or "sgd")."""
    return self.lr_adam if optimizer_family(optimizer) == "adam" else self.lr_sgd


def optimizer_family(optimizer: str) -> str:
  """Maps an optimizer name to "adam" or "sgd"."""
  if optimizer in ("adam", "adamw", "adam_atan2"):
    return "adam"
  if optimizer == "sgd":
    return "sgd"
  raise ConfigError(validation.unknown_choice("optimizer", optimizer, ("adam", "adamw", "adam_atan2", "sgd")))


def kind_group(kind: str) -> str:
  """The group of a layer kind as μP treats it: "input" (embedding, input: fan-in fixed), "hidden" (hidden and the
  attention projections: both fans grow), "readout", "vector" (biases and gains) or "fixed"."""
  kind = check_kind(kind)
  if kind in ("embedding", "input"):
    return "input"
  if kind in _HIDDEN_LIKE:
    return "hidden"
  if kind in VECTOR_KINDS:
    return "vector"
  return kind


def check_kind(kind: Any) -> str:
  """Returns ``kind`` if it is one of LAYER_KINDS, else raises ValueError."""
  if not isinstance(kind, str) or kind not in LAYER_KINDS:
    raise ConfigError(f"unknown layer kind {kind!r}; known: {', '.join(LAYER_KINDS)}")
  return kind


def _check_mult(m: Any) -> float:
  """Returns the width multiplier ``m`` as a float if it is finite and positive, else raises ValueError."""
  ok = isinstance(m, (int, float)) and not isinstance(m, bool) and math.isfinite(m) and m > 0
  if not ok:
    raise ConfigError(f"width multiplier m must be a finite positive number, got {m!r}")
  return float(m)


def _vector(lr_adam: float, lr_sgd: float, *, init_mean: float) -> LayerSpec:
  """A bias (init_mean 0) or gain (init_mean 1): no random init, multiplier 1."""
  return LayerSpec(init_std=0.0, multiplier=1.0, lr_adam=lr_adam, lr_sgd=lr_sgd, init_mean=init_mean)


@dataclasses.dataclass(frozen=True)
class Parametrization:
  """A width- and depth-dependent parametrization (abc-parametrization) as data.

  Attributes:
    name: the scheme's registry name ("sp", "ntk", "mup", "umup").
    base_width: width at which the scheme is tuned; m = width / base_width.
    base_head_dim: head dim at which μP's α/d_head equals 1/√d_head.
    zero_query: initialize W_q to zero (TP5's Transformer recipe); allowed in
      every scheme.
    zero_readout: initialize the readout to zero (``mup``'s
      ``readout_zero_init``); allowed in every scheme.
    depth_alpha: α of the depth scaling (CompleteP, Dey et al. 2025, Table 1):
      each residual branch is multiplied by m_L^−α with m_L = depth / base_depth,
      and the in-block parameters get Adam LR × m_L^(α−1). 0 turns depth scaling
      off (the residual stream is x + f(LN x)); otherwise α ∈ [0.5, 1]
      (0.5: depth-μP, Yang et al. 2023 and Bordelon et al. 2023; 1: CompleteP).
    base_depth: depth at which the scheme is tuned (m_L = 1 there).
    depth: the model's depth L (``ModelConfig`` sets it to its own); None = base_depth.
  """

  name: str = dataclasses.field(default="", init=False)
  base_width: int = 64
  base_head_dim: int = 64
  zero_query: bool = False
  zero_readout: bool = False
  depth_alpha: float = 0.0
  base_depth: int = 1
  depth: int | None = None

  def __post_init__(self):
    check_positive_int("base_width", self.base_width)
    check_positive_int("base_head_dim", self.base_head_dim)
    check_positive_int("base_depth", self.base_depth)
    if self.depth is not None:
      check_positive_int("depth", self.depth)
    check_depth_alpha(self.depth_alpha)
    for option in ("zero_query", "zero_readout"):
      if not isinstance(getattr(self, option), bool):
        raise ConfigError(f"{option} must be a bool, got {getattr(self, option)!r}")

  @property
  def unit_scaled(self) -> bool:
    """Whether the model computes with unit-scaled operations (``scaling.mup.unit_scaling``) under this scheme."""
    return False

  def width_mult(self, width: int) -> float:
    """The width multiplier m = width / base_width."""
    return check_positive_int("width", width) / self.base_width

  def depth_mult(self) -> float:
    """The depth multiplier m_L = depth / base_depth (1 when ``depth`` is None)."""
    return 1.0 if self.depth is None else self.depth / self.base_depth

  def with_depth(self, depth: int) -> Parametrization:
    """This scheme for a model of ``depth`` blocks."""
    return self if depth == self.depth else dataclasses.replace(self, depth=check_positive_int("depth", depth))

  def residual_multiplier(self) -> float:
    """The multiplier of every residual branch: m_L^−α (1 when depth scaling is off)."""
    if self.depth_alpha == 0:
      return 1.0
    return self.depth_mult() ** -self.depth_alpha

  def layer(self, kind: str, fan_in: int, fan_out: int, width: int) -> LayerSpec:
    """The LayerSpec of a parameter of ``kind`` with the given fans at ``width`` (and this scheme's depth).

    Args:
      kind: one of LAYER_KINDS.
      fan_in: the parameter's fan-in (see ``scaling.mup.shapes.fans``).
      fan_out: the parameter's fan-out.
      width: the model width (d_model); m = width / base_width.

    Returns:
      The parameter's LayerSpec (formulas in the module docstring).
    """
    return self.layer_at(kind, fan_in, fan_out, self.width_mult(width))

  def layer_at(self, kind: str, fan_in: int, fan_out: int, m: float) -> LayerSpec:
    """The LayerSpec of a parameter of ``kind`` with the given fans at width multiplier ``m`` (and this depth).

    ``layer`` with m given directly: a parameter's own multiplier (the ratio of its grown dimensions to the base
    model's, as ``scaling.mup.roles`` infers it) instead of one model width over ``base_width``.

    Args:
      kind: one of LAYER_KINDS.
      fan_in: the parameter's fan-in (see ``scaling.mup.shapes.fans``).
      fan_out: the parameter's fan-out.
      m: the width multiplier (1 at the base model).

    Returns:
      The parameter's LayerSpec (formulas in the module docstring).
    """
    kind = check_kind(kind)
    fan_in = check_positive_int("fan_in", fan_in)
    fan_out = check_positive_int("fan_out", fan_out)
    m = _check_mult(m)
    if kind == "fixed":
      return LayerSpec(init_std=fan_in**-0.5, multiplier=1.0, lr_adam=1.0, lr_sgd=1.0)
    spec = self._layer(_WIDTH_KIND.get(kind, kind), fan_in, fan_out, m)
    if (kind == "attn_q" and self.zero_query) or (kind == "readout" and self.zero_readout):
      spec = dataclasses.replace(spec, init_std=0.0)
    if kind in BLOCK_KINDS:
      adam, sgd = self._depth_lr(kind)
      if (adam, sgd) != (1.0, 1.0):
        spec = dataclasses.replace(spec, lr_adam=spec.lr_adam * adam, lr_sgd=spec.lr_sgd * sgd)
    return spec

  def eps_multiplier(self, kind: str, width: int) -> float:
    """The factor of Adam's ε for a parameter of ``kind`` (used when the optimizer scales ε).

    CompleteP (Dey et al. 2025, Table 1 and eq. 40; EleutherAI/nanoGPT-mup,
    completep branch): ε · (1/m) for every parameter under μP, times m_L^−α for
    the in-block ones. The width factor is μP's; other schemes keep the depth factor only.
    """
    return self.eps_multiplier_at(kind, self.width_mult(width))

  def eps_multiplier_at(self, kind: str, m: float) -> float:
    """``eps_multiplier`` at width multiplier ``m`` (a parameter's own, see ``layer_at``)."""
    kind = check_kind(kind)
    factor = self._eps_width(_check_mult(m))
    if kind in BLOCK_KINDS and self.depth_alpha:
      factor *= self.depth_mult() ** -self.depth_alpha
    return factor

  def _depth_lr(self, kind: str) -> tuple[float, float]:
    """(Adam, SGD) LR factors of an in-block parameter: m_L^(α−1) and m_L^(2α−1); (1, 1) when α = 0."""
    del kind
    if self.depth_alpha == 0:
      return 1.0, 1.0
    m_l = self.depth_mult()
    return m_l ** (self.depth_alpha - 1.0), m_l ** (2.0 * self.depth_alpha - 1.0)

  def _eps_width(self, m: float) -> float:
    """Width factor of Adam's ε (1 except under μP)."""
    del m
    return 1.0

  def attention_rule(self) -> rules.ScaleRule:
    """The attention logit-scale rule this scheme prescribes."""
    raise NotImplementedError(f"{type(self).__name__} does not define attention_rule")

  def _layer(self, kind: str, fan_in: int, fan_out: int, m: float) -> LayerSpec:
    """The scheme's formulas for validated arguments (m is the width multiplier)."""
    raise NotImplementedError(f"{type(self).__name__} does not define _layer")


@dataclasses.dataclass(frozen=True)
class StandardParametrization(Parametrization):
  """SP: fan-in init, all multipliers 1, one global LR; logits 1/√d_head.

  Matrices use std 1/√n_in (He/LeCun fan-in init, the PyTorch/Flax default for
  Dense kernels); embeddings std 1 (``torch.nn.Embedding``'s default, so the
  residual stream starts at unit scale); biases 0; norm gains 1. In Tensor
  Programs IV §3 terms: a = 0, b = 1/2, c = 0. Attention: Vaswani et al. 2017,
  §3.2.1.
  """

  name: str = dataclasses.field(default="sp", init=False)

  def attention_rule(self) -> rules.ScaleRule:
    return rules.SqrtScale()

  def _layer(self, kind: str, fan_in: int, fan_out: int, m: float) -> LayerSpec:
    del fan_out, m
    if kind == "embedding":
      return LayerSpec(init_std=1.0, multiplier=1.0, lr_adam=1.0, lr_sgd=1.0)
    if kind == "bias":
      return _vector(1.0, 1.0, init_mean=0.0)
    if kind == "norm":
      return _vector(1.0, 1.0, init_mean=1.0)
    return LayerSpec(init_std=fan_in**-0.5, multiplier=1.0, lr_adam=1.0, lr_sgd=1.0)


@dataclasses.dataclass(frozen=True)
class NTKParametrization(Parametrization):
  """NTK parametrization: unit init, forward multiplier 1/√n_in, constant SGD LR.

  Jacot et al. 2018 ("Neural Tangent Kernel", eq. 1) and Tensor Programs IV,
  §3 ("NTP": a_1 = 0, a_{l≥2} = 1/2, b = 0, c = 0). The Adam LR
  multipliers keep the same kernel regime for an entrywise-normalized update
  (derivation in the module docstring; Tensor Programs IVb, Yang & Littwin
  2023). Attention logits 1/√d_head.
  """

  name: str = dataclasses.field(default="ntk", init=False)

  def attention_rule(self) -> rules.ScaleRule:
    return rules.SqrtScale()

  def _layer(self, kind: str, fan_in: int, fan_out: int, m: float) -> LayerSpec:
    del fan_out
    if kind == "embedding":
      return LayerSpec(init_std=1.0, multiplier=1.0, lr_adam=m**-0.5, lr_sgd=1.0)
    if kind == "bias":
      return _vector(m**-0.5, 1.0, init_mean=0.0)
    if kind == "norm":
      return _vector(m**-0.5, 1.0, init_mean=1.0)
    if kind in ("readout", "input"):
      return LayerSpec(init_std=1.0, multiplier=fan_in**-0.5, lr_adam=m**-0.5, lr_sgd=1.0)
    return LayerSpec(init_std=1.0, multiplier=fan_in**-0.5, lr_adam=1.0 / m, lr_sgd=1.0)


@dataclasses.dataclass(frozen=True)
class MuParametrization(Parametrization):
  """μP as in Tensor Programs V, Table 8 (the ``mup`` package, ``MuReadout``).

  Relative to SP: readout multiplier 1/m with its init std held at the base
  width's 1/√n_base (n_base = n_in / m; ``MuReadout`` after ``set_base_shapes``),
  so its effective init is ∝ 1/n_in; hidden and attention matrices Adam
  LR 1/m (``MuAdam``, matrix-like); embedding, biases, gains and readout Adam
  LR 1 (vector-like); SGD LR m for vector-like parameters and 1 for hidden
  matrices (``MuSGD``). Attention logits α/d_head with α = √base_head_dim
  (TP5 §4 and Table 3). Equals SP at m = 1 except for the zero-init options and
  the attention rule at d_head != base_head_dim.
  """

  name: str = dataclasses.field(default="mup", init=False)

  def attention_rule(self) -> rules.ScaleRule:
    return rules.LinearScale(base_head_dim=self.base_head_dim)

  def _eps_width(self, m: float) -> float:
    return 1.0 / m

  def _layer(self, kind: str, fan_in: int, fan_out: int, m: float) -> LayerSpec:
    del fan_out
    if kind == "embedding":
      return LayerSpec(init_std=1.0, multiplier=1.0, lr_adam=1.0, lr_sgd=m)
    if kind == "bias":
      return _vector(1.0, m, init_mean=0.0)
    if kind == "norm":
      return _vector(1.0, m, init_mean=1.0)
    if kind == "readout":  # std of the base model's fan-in n_in / m; A·B = √(n_in / m) / n_in ∝ 1/n_in
      return LayerSpec(init_std=(fan_in / m) ** -0.5, multiplier=1.0 / m, lr_adam=1.0, lr_sgd=m)
    if kind == "input":  # Table 8's input weights: variance 1/fan_in, Adam LR 1, SGD LR fan_out (m)
      return LayerSpec(init_std=fan_in**-0.5, multiplier=1.0, lr_adam=1.0, lr_sgd=m)
    return LayerSpec(init_std=fan_in**-0.5, multiplier=1.0, lr_adam=1.0 / m, lr_sgd=1.0)


UMUP_SCALES = ("paper", "covariance")


@dataclasses.dataclass(frozen=True)
class UnitMuParametrization(Parametrization):
  """u-μP (Blake et al. 2024): unit init, fan-based multipliers, no base shapes.

  Forward multipliers 1/√n_in (hidden, attention), 1/n_in (readout, unit_scaling's
  ``linear_readout``); Adam LR 1/√n_in (hidden, attention), 1 (readout), 1/√n_out
  (embedding, the paper's §4.4 rule) and 1 (biases, gains): the u-μP column of the
  paper's §4 ABC-multiplier table and ``unit_scaling.optim.lr_scale_func_adam``. Under
  ``umup_scales="covariance"`` the readout is unit-scaled at init instead, A = 1/√n_in
  with Adam LR 1/√n_in (the same A·C = 1/n_in; module docstring). Every in-block
  parameter's LR is further × 1/√L (``lr_scale_for_depth``, L = the model's depth).
  The model computes with unit-scaled operations (``scaling.mup.unit_scaling``; corrected
  by ``scaling.mup.unit_scaling_covariance`` under "covariance"), whose backward pass
  rescales gradients to unit scale, so the SGD LRs equal the Adam ones
  (``lr_scale_func_sgd`` with an unconstrained readout). Attention logits α_attn/d_head.
  Residual branches are weighted by the τ rule (``scaling.mup.unit_scaling.residual_taus``),
  not by ``depth_alpha`` (which must stay 0).

  Attributes:
    attn_mult: α_attn, the numerator of the α_attn/d_head logit scale
      (the paper's default 1.0).
    residual_mult: ratio of the residual branches' contribution to the
      embedding's (the τ rule's ``residual_mult``, default 1).
    residual_attn_ratio: ratio of the attention branches' contribution to the
      MLP branches' (default 1).
    umup_scales: "paper" (the paper's fixed op scales) or "covariance" (this
      project's correction for positions correlated at init, ``UMUP_SCALES``).
  """

  name: str = dataclasses.field(default="umup", init=False)
  attn_mult: float = 1.0
  residual_mult: float = 1.0
  residual_attn_ratio: float = 1.0
  umup_scales: str = "paper"

  def __post_init__(self):
    super().__post_init__()
    for option in ("attn_mult", "residual_mult", "residual_attn_ratio"):
      value = getattr(self, option)
      if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{option} must be a finite positive number, got {value!r}")
    if self.umup_scales not in UMUP_SCALES:
      raise ConfigError(f"umup_scales {validation.must_be_one_of(self.umup_scales, UMUP_SCALES)}")
    if self.depth_alpha != 0:
      raise ConfigError("depth_alpha must be 0 under umup: u-μP weights its residual branches by its own τ rule")

  @property
  def unit_scaled(self) -> bool:
    return True

  def attention_rule(self) -> rules.ScaleRule:
    return rules.LinearScale(alpha=float(self.attn_mult))

  def _depth_lr(self, kind: str) -> tuple[float, float]:
    del kind
    factor = 1.0 if self.depth is None else self.depth**-0.5
    return factor, factor

  def _layer(self, kind: str, fan_in: int, fan_out: int, m: float) -> LayerSpec:
    del m
    if kind == "embedding":
      return LayerSpec(init_std=1.0, multiplier=1.0, lr_adam=fan_out**-0.5, lr_sgd=fan_out**-0.5)
    if kind == "bias":
      return _vector(1.0, 1.0, init_mean=0.0)
    if kind == "norm":
      return _vector(1.0, 1.0, init_mean=1.0)
    if kind == "readout" and self.umup_scales == "paper":  # linear_readout: A = 1/n_in, Adam LR 1
      return LayerSpec(init_std=1.0, multiplier=1.0 / fan_in, lr_adam=1.0, lr_sgd=1.0)
    # (covariance: the readout too, unit-scaled logits at init with A·C = 1/n_in as in the paper's)
    return LayerSpec(init_std=1.0, multiplier=fan_in**-0.5, lr_adam=fan_in**-0.5, lr_sgd=fan_in**-0.5)


_SCHEMES: dict[str, type[Parametrization]] = {
    "sp": StandardParametrization,
    "ntk": NTKParametrization,
    "mup": MuParametrization,
    "umup": UnitMuParametrization,
}


def available_parametrizations() -> tuple[str, ...]:
  """Names of the parametrizations ``get_parametrization`` accepts."""
  return tuple(_SCHEMES)


def _options_of(cls: type[Parametrization]) -> tuple[str, ...]:
  """Keyword options of a scheme other than the base shapes."""
  return tuple(f.name for f in dataclasses.fields(cls) if f.init and f.name not in ("base_width", "base_head_dim"))


def get_parametrization(name: str, *, base_width: int = 64, base_head_dim: int = 64, **options: Any) -> Parametrization:
  """Returns the parametrization registered under ``name``.

  Args:
    name: "sp", "ntk", "mup" or "umup".
    base_width: width at which the scheme is tuned (m = width / base_width).
    base_head_dim: head dim at which μP's α/d_head equals 1/√d_head.
    **options: ``zero_query`` and ``zero_readout`` (bools, every scheme);
      ``attn_mult`` (u-μP's α_attn, a positive float); ``umup_scales`` (u-μP's
      "paper" or "covariance" op scales).

  Returns:
    A frozen Parametrization.

  Raises:
    ValueError: unknown name or option, or an invalid value.
  """
  if not isinstance(name, str) or name not in _SCHEMES:
    raise ConfigError(validation.unknown_choice("parametrization", name, tuple(_SCHEMES)))
  cls = _SCHEMES[name]
  allowed = _options_of(cls)
  unknown = sorted(set(options) - set(allowed))
  if unknown:
    raise ConfigError(
        f"unknown option(s) {', '.join(unknown)} for parametrization {name!r}; allowed: {', '.join(allowed)}")
  return cls(base_width=base_width, base_head_dim=base_head_dim, **options)
