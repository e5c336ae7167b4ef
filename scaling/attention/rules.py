"""Logit-scale rules: how attention turns q·k into softmax logits.

A rule decides three things, each a method that subclasses may override:

* ``prepare(query, key)``: transforms q and k before the dot product (identity
  except for QK-norm);
* ``logit_scale(head_dim)``: the factor s in softmax(s·QKᵀ);
* ``weight_scale(head_dim)``: a factor applied to the attention weights *after*
  the softmax (1 except for the ``post_softmax`` pitfall).

Rules are ``flax.struct`` dataclasses, so they are pytrees: a rule holding
arrays (the learnable QK-norm gains) can be passed through ``jax.jit``. A user
extends the set without touching the attention code::

    @struct.dataclass
    class Cubic(scaling.ScaleRule):
      def logit_scale(self, head_dim):
        return head_dim ** -3

    scaling.register_rule("cubic", Cubic)
    scaling.dot_product_attention(q, k, v, rule="cubic")
"""

from __future__ import annotations

import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
from flax import struct

from scaling.base import validation
from scaling.base.validation import ConfigError
from scaling.base.validation import ConfigTypeError

Array = jax.Array


def _checks_head_dim(method: Callable[[Any, int], Any]) -> Callable[[Any, int], Any]:
  """``method(self, head_dim)`` that first raises ConfigError unless head_dim is a positive integer."""
  if getattr(method, "checks_head_dim", False):
    return method

  def checked(self, head_dim):
    return method(self, validation.check_positive_int("head_dim", head_dim))

  checked.__name__, checked.__qualname__, checked.__doc__ = method.__name__, method.__qualname__, method.__doc__
  checked.checks_head_dim = True
  return checked


@struct.dataclass
class ScaleRule:
  """Base rule: identity prepare, logit scale 1, weight scale 1.

  Every subclass's ``logit_scale`` and ``weight_scale`` (the built-in rules' and users' alike) reject a head_dim
  that is not a positive integer with a ConfigError naming it, instead of dividing by zero.
  """

  def __init_subclass__(cls, **kwargs):
    super().__init_subclass__(**kwargs)
    for name in ("logit_scale", "weight_scale"):
      if name in cls.__dict__:
        setattr(cls, name, _checks_head_dim(cls.__dict__[name]))

  def prepare(self, query: Array, key: Array) -> tuple[Array, Array]:
    """Transforms query [..., H] and key [..., H] before the dot product."""
    return query, key

  @_checks_head_dim
  def logit_scale(self, head_dim: int) -> float:
    """The factor s in softmax(s·q·k) for head dimension ``head_dim``."""
    del head_dim
    return 1.0

  @_checks_head_dim
  def weight_scale(self, head_dim: int) -> float:
    """A factor applied to the attention weights after the softmax."""
    del head_dim
    return 1.0

  @property
  def has_prepare(self) -> bool:
    """Whether ``prepare`` is not the identity (such rules cannot be batched by scale)."""
    return type(self).prepare is not ScaleRule.prepare


@struct.dataclass
class NoScale(ScaleRule):
  """s = 1: raw dot products, the failure the notes warn about (Var(q·k) = d_k)."""


@struct.dataclass
class SqrtScale(ScaleRule):
  """s = 1/√d_k (Vaswani et al. 2017, "Attention Is All You Need", §3.2.1)."""

  def logit_scale(self, head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim)


@struct.dataclass
class LinearScale(ScaleRule):
  """s = α/d_k, the μP rule (Yang et al. 2022, Tensor Programs V, §4 and Table 3).

  Attributes:
    alpha: the numerator α. When ``None`` it is 1, unless ``base_head_dim`` is
      given, in which case α = √base_head_dim so that the rule equals ``sqrt``
      at the base head dimension (microsoft/mup uses 8/d for a base of 64).
    base_head_dim: optional base head dimension used to set α.
  """

  alpha: float | None = struct.field(pytree_node=False, default=None)
  base_head_dim: int | None = struct.field(pytree_node=False, default=None)

  def __post_init__(self):
    if self.alpha is not None and self.base_head_dim is not None:
      raise ConfigError("LinearScale takes alpha or base_head_dim, not both")
    if self.alpha is not None:
      validation.check_number("alpha", self.alpha, positive=True)
    if self.base_head_dim is not None:
      validation.check_number("base_head_dim", self.base_head_dim, positive=True)

  @property
  def effective_alpha(self) -> float:
    if self.alpha is not None:
      return float(self.alpha)
    if self.base_head_dim is not None:
      return math.sqrt(self.base_head_dim)
    return 1.0

  def logit_scale(self, head_dim: int) -> float:
    return self.effective_alpha / head_dim


@struct.dataclass
class QuadraticScale(ScaleRule):
  """s = 1/d_k²: a pitfall the notes list; attention goes uniform fast."""

  def logit_scale(self, head_dim: int) -> float:
    return 1.0 / head_dim**2


@struct.dataclass
class TemperatureScale(ScaleRule):
  """s = 1/τ for a given temperature τ > 0, independent of d_k."""

  tau: float = struct.field(pytree_node=False, default=1.0)

  def __post_init__(self):
    validation.check_number("temperature tau", self.tau, positive=True)

  def logit_scale(self, head_dim: int) -> float:
    del head_dim
    return 1.0 / self.tau


@struct.dataclass
class FixedScale(ScaleRule):
  """Given logit and weight factors, independent of d_k; the fields may be arrays.

  Every rule without a ``prepare`` step is equivalent to a ``FixedScale`` at a
  given head dim (see ``as_fixed_scale``); stacking them gives one pytree that
  ``jax.vmap`` can map over, so many rules share one compiled program.
  """

  logit: Any = 1.0
  weight: Any = 1.0

  def logit_scale(self, head_dim: int):
    del head_dim
    return self.logit

  def weight_scale(self, head_dim: int):
    del head_dim
    return self.weight


def as_fixed_scale(rule: ScaleRule, head_dim: int) -> FixedScale:
  """The FixedScale equal to ``rule`` at ``head_dim``; rules with a prepare step cannot be converted."""
  if rule.has_prepare:
    raise ConfigError(f"{type(rule).__name__} transforms q and k and has no FixedScale equivalent")
  return FixedScale(float(rule.logit_scale(head_dim)), float(rule.weight_scale(head_dim)))


def rms_norm(x: Array, eps: float = 1e-6) -> Array:
  """Divides x [..., H] by its root mean square over the last axis (in float32)."""
  x32 = x.astype(jnp.float32)
  out = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
  return out.astype(x.dtype)


def layer_norm(x: Array, eps: float = 1e-6) -> Array:
  """Centres x [..., H] and divides by its standard deviation over the last axis."""
  x32 = x.astype(jnp.float32)
  x32 = x32 - jnp.mean(x32, axis=-1, keepdims=True)
  out = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
  return out.astype(x.dtype)


@struct.dataclass
class QKNorm(ScaleRule):
  """Normalizes q and k over head_dim, then s = 1/√d_k.

  Dehghani et al. 2023 ("Scaling Vision Transformers to 22B Parameters") and
  Henry et al. 2020 ("Query-Key Normalization for Transformers"). After the norm
  every q and k has RMS 1 whatever the input scale, so the √d_k factor no longer
  rests on an iid unit-variance assumption.

  Attributes:
    norm: ``"rms"`` (RMSNorm) or ``"layer"`` (LayerNorm without bias).
    eps: added to the mean square.
    query_gain: optional learnable gain [H] (or broadcastable) multiplied into q
      after the norm; ``None`` means 1.
    key_gain: likewise for k.
  """

  norm: str = struct.field(pytree_node=False, default="rms")
  eps: float = struct.field(pytree_node=False, default=1e-6)
  query_gain: Array | None = None
  key_gain: Array | None = None

  def __post_init__(self):
    if self.norm not in ("rms", "layer"):
      raise ConfigError(f"QKNorm norm must be 'rms' or 'layer', got {self.norm!r}")

  def prepare(self, query: Array, key: Array) -> tuple[Array, Array]:
    fn = rms_norm if self.norm == "rms" else layer_norm
    query, key = fn(query, self.eps), fn(key, self.eps)
    if self.query_gain is not None:
      query = (query * self.query_gain).astype(query.dtype)
    if self.key_gain is not None:
      key = (key * self.key_gain).astype(key.dtype)
    return query, key

  def logit_scale(self, head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim)


@struct.dataclass
class PostSoftmaxScale(ScaleRule):
  """softmax(QKᵀ)/√d_k: the pitfall of scaling after the softmax, kept as an ablation.

  The logits are not scaled (so the softmax saturates exactly as with ``none``)
  and the weights no longer sum to one.
  """

  def weight_scale(self, head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim)


_REGISTRY: dict[str, Callable[..., ScaleRule]] = {}


def register_rule(name: str, factory: Callable[..., ScaleRule], *, overwrite: bool = False) -> None:
  """Registers ``factory`` (a ScaleRule subclass or function returning one) under ``name``."""
  if not name or not isinstance(name, str):
    raise ConfigError(f"rule name must be a non-empty string, got {name!r}")
  if not callable(factory):
    raise ConfigTypeError(f"factory must be a ScaleRule subclass or a function returning one, got {factory!r}")
  if name in _REGISTRY and not overwrite:
    raise ConfigError(f"rule {name!r} is already registered; pass overwrite=True to replace it")
  _REGISTRY[name] = factory


def available_rules() -> tuple[str, ...]:
  """Names of all registered rules, in registration order."""
  return tuple(_REGISTRY)


def get_rule(rule: str | ScaleRule, **kwargs: Any) -> ScaleRule:
  """Returns a rule object from a registered name (with options) or a rule object."""
  if isinstance(rule, ScaleRule):
    if kwargs:
      raise ConfigError("options can only be given with a rule name, not a rule object")
    return rule
  if not isinstance(rule, str):
    raise ConfigTypeError(f"rule must be a name or a ScaleRule, got {type(rule).__name__}")
  try:
    factory = _REGISTRY[rule]
  except KeyError:
    raise ConfigError(validation.unknown_choice("logit-scale rule", rule, tuple(_REGISTRY))) from None
  try:
    return factory(**kwargs)
  except ConfigError:  # an option the rule checked itself, named there
    raise
  except TypeError as e:
    raise ConfigError(f"bad options for rule {rule!r}: {e}") from None


for _name, _factory in (
    ("none", NoScale),
    ("sqrt", SqrtScale),
    ("linear", LinearScale),
    ("quadratic", QuadraticScale),
    ("temperature", TemperatureScale),
    ("qk_norm", QKNorm),
    ("post_softmax", PostSoftmaxScale),
):
  register_rule(_name, _factory)
