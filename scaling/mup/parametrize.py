"""A parametrization (SP, NTK, μP, u-μP) applied to any model from its inferred roles: the one place where a
scheme meets a model (the built-in Transformer's too, ``scaling.training.model.transformer.parametrized``).

``parametrize(roles, parametrization)`` (roles from ``scaling.infer_kinds``) gives, per parameter, the
abc-parametrization of ``scaling.mup.schemes``: the init (``init``: redraw every matrix as
``init_mean + B·N(0, 1)``; ``rescale``: keep the user's initializer, set its std to B;
``scaling.WidthParametrization``'s default keeps the model's own init and follows B's law from the base width), the
per-parameter specs a model built from ``scaling.mup.layers`` draws and applies (``layer``), the learning-rate
multipliers C as an optax transformation to chain after any optimizer (``scale_lr``) or a whole
Adam/AdamW/SGD/Adam-atan2 (``optimizer``, ε per the scheme), and the forward multipliers A.

Forward multipliers, by ``forward``:

* ``"fold"`` (default): every A is folded into init and learning rate by the abc-symmetry
  (Tensor Programs IV §3, Tensor Programs V): using w' = A·w, the init std becomes A·B, the SGD LR A²·C and the
  Adam LR A·C, with Adam's ε divided by A. The model is used as written. This is exact for SGD (with or
  without momentum) and for Adam-atan2 (scale-invariant, no ε); for Adam it is exact because ε is divided by A
  too (with one ε for every parameter it would be exact only up to ε).
* ``"readout"``: the readout's multiplier is applied by the model (``ReadoutDense``/``scaling.ReadoutLinear``, like
  mup's ``MuReadout``; ``multiplier(path)`` gives it); every other A is folded.
* ``"model"``: the model applies every A itself, e.g. built from ``scaling.mup.unit_scaling``'s ops (u-μP, whose
  multipliers are its ops' forward scales and whose backward scales the SGD column assumes).

A tied embedding (found from the computation, or ``infer_kinds(..., tied_embedding=path)``) is trained as the
embedding; its readout product is multiplied by ``tied_readout_multiplier`` (mup's ``MuSharedReadout``), which
``scaling.WidthParametrization`` applies to the traced loss itself (``scaling.mup.usage.scale_products``).

Attention: pass ``attention_fn()`` (``scaling.make_attention_fn`` with the scheme's rule, μP's α/d_head with
α = √base_head_dim: make the scheme with ``get_parametrization("mup", base_head_dim=<head dim of the base model>)``)
as the ``attention_fn`` of ``nn.MultiHeadDotProductAttention`` / ``nnx.MultiHeadAttention``; name the projections
with ``infer_kinds(..., overrides=scaling.FLAX_ATTENTION)`` when ``zero_query`` is wanted. Depth (CompleteP,
depth-μP): a scheme with ``depth_alpha``, ``base_depth`` and ``depth``; the user's blocks compute
``x + residual_multiplier · f(x)``, and the in-block parameters get the depth-corrected learning rates (the
matrices, and the biases and gains inside ``infer_kinds(..., blocks=...)``).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from scaling.attention import flax_adapter as flax_attention
from scaling.mup import optim
from scaling.mup import schemes as param_lib
from scaling.mup import roles as roles_lib
from scaling.base.validation import ConfigError
from scaling.base.validation import ConfigTypeError

FORWARD = ("fold", "readout", "model")
_HIDDEN_LIKE = ("hidden", "attn_q", "attn_k", "attn_v", "attn_o")


def fold(spec: param_lib.LayerSpec) -> param_lib.LayerSpec:
  """``spec`` with its forward multiplier A folded into init and LR: std A·B, mean A·μ, Adam A·C, SGD A²·C."""
  a = spec.multiplier
  return param_lib.LayerSpec(init_std=a * spec.init_std, multiplier=1.0, lr_adam=a * spec.lr_adam,
                             lr_sgd=a * a * spec.lr_sgd, init_mean=a * spec.init_mean)


class RoleParametrization:
  """A parametrization of a user's model: per-parameter specs from its roles (module docstring).

  Attributes:
    roles: the model's ``Roles``.
    parametrization: the scheme.
    forward: "fold", "readout" or "model" (which multipliers the model applies).
  """

  def __init__(self, roles: roles_lib.Roles, parametrization: param_lib.Parametrization, forward: str):
    self.roles = roles
    self.parametrization = parametrization
    self.forward = forward
    self._raw = {path: role.spec(parametrization) for path, role in roles.items()}

  def _folded(self, path: str) -> bool:
    if self.forward == "model":
      return False
    return self.forward == "fold" or self.roles[path].kind != "readout"

  def spec(self, path: str) -> param_lib.LayerSpec:
    """The LayerSpec of the parameter at ``path`` as trained (multiplier 1 where folded)."""
    raw = self._raw[self._check_path(path)]
    return fold(raw) if self._folded(path) else raw

  def layer(self, path: str, kind: str, shape: tuple[int, ...]) -> param_lib.LayerSpec:
    """The spec of the parameter a layer creates at ``path`` (the spec source of ``scaling.mup.layers``).

    The layer's kind and shape must be the role's: a model that builds itself from these specs (the built-in
    Transformer, ``forward="model"``) is the model the roles were inferred from.
    """
    role = self.roles[self._check_path(path)]
    if role.kind != kind or role.shape != tuple(shape):
      raise ConfigError(f"parameter {path!r}: the layer makes a {kind} {list(shape)}, its role is a {role.kind} "
                        f"{list(role.shape)}; infer the roles from the same model")
    return self.spec(path)

  def multiplier(self, path: str) -> float:
    """The forward multiplier the model applies to the parameter at ``path`` (1 where folded)."""
    return self.spec(path).multiplier

  @property
  def tied_readout_multiplier(self) -> float:
    """The multiplier of the logits ``x @ E.T`` of a tied embedding E (the readout's A at its fans and m)."""
    path = self.roles.tied_embedding
    if path is None:
      raise ConfigError("the model has no tied embedding (infer_kinds(..., tied_embedding=path))")
    role = self.roles[path]
    vocab, features = role.shape
    m = features / role.base_shape[1]
    return self.parametrization.layer_at("readout", features, vocab, m).multiplier

  def eps_factor(self, path: str, eps_scaling: str = "none") -> float:
    """The factor of Adam's ε for ``path``: the scheme's (``eps_scaling="mup"``) divided by a folded A."""
    role = self.roles[self._check_path(path)]
    factor = self.parametrization.eps_multiplier_at(role.kind, role.mult) if eps_scaling == "mup" else 1.0
    raw = self._raw[path]
    return factor / raw.multiplier if self._folded(path) and raw.multiplier else factor

  def eps_factors(self, params: Any, eps_scaling: str = "mup") -> Any:
    """The factor of Adam's ε of every parameter of ``params`` (``eps_factor``), same structure."""
    return self.roles.tree(params, lambda path, role, leaf: self.eps_factor(path, eps_scaling))

  def specs(self) -> Any:
    """The LayerSpec (as trained) of every parameter, a tree with the structure of the target's parameters."""
    return jax.tree.unflatten(jax.tree.structure(self.roles.kinds()), [self.spec(p) for p in self.roles])

  @property
  def residual_multiplier(self) -> float:
    """The multiplier of every residual branch, m_L^−α (CompleteP / depth-μP; 1 without depth scaling)."""
    return self.parametrization.residual_multiplier()

  def attention_fn(self, **options: Any) -> Callable[..., jax.Array]:
    """``scaling.make_attention_fn`` with the scheme's logit rule (μP: α/d_head), for Flax's attention modules."""
    return flax_attention.make_attention_fn(self.parametrization.attention_rule(), **options)

  def init(self, key: jax.Array, params: Any) -> Any:
    """``params`` with every matrix redrawn as init_mean + B·N(0, 1) (B as trained); biases, gains kept.

    Every scheme starts biases at 0 and gains at 1 (Flax's defaults), so those are kept as the model made them,
    as are the ``fixed`` parameters. Each matrix draws from ``jax.random.fold_in(key, i)``, i its index in
    ``roles``.

    Args:
      key: a PRNG key.
      params: the target model's parameters (a dict or an ``nnx.State``; same paths as the roles).

    Returns:
      The parameters, same structure and dtypes.
    """
    index = {path: i for i, path in enumerate(self.roles)}

    def draw(path, role, leaf):
      if role.kind not in param_lib.MATRIX_KINDS:
        return leaf
      spec = self.spec(path)
      noise = jax.random.normal(jax.random.fold_in(key, index[path]), leaf.shape, jnp.float32)
      return (spec.init_mean + spec.init_std * noise).astype(leaf.dtype)

    return self.roles.tree(params, draw)

  def rescale(self, params: Any) -> Any:
    """``params`` with every matrix scaled to its role's init std (its initializer's distribution kept).

    Each matrix w becomes ``init_mean + (w − mean(w)) · B / std(w)``, so a truncated-normal or orthogonal init
    keeps its shape with the std (B, as trained) the parametrization prescribes; a matrix with std 0 becomes its
    init_mean (zero_readout, zero_query), biases, gains and fixed parameters are kept.

    Args:
      params: the target model's parameters (a dict or an ``nnx.State``).

    Returns:
      The parameters, same structure and dtypes.
    """
    def scale(path, role, leaf):
      if role.kind not in param_lib.MATRIX_KINDS:
        return leaf
      spec = self.spec(path)
      w = leaf.astype(jnp.float32)
      centred = w - jnp.mean(w)
      std = jnp.std(w)
      ratio = jnp.where(std > 0, spec.init_std / jnp.where(std > 0, std, 1.0), 0.0)
      return (spec.init_mean + centred * ratio).astype(leaf.dtype)

    return self.roles.tree(params, scale)

  def lr_multipliers(self, params: Any, optimizer: str = "adam") -> Any:
    """The LR multiplier C (as trained) of every parameter of ``params``, same structure."""
    family = param_lib.optimizer_family(optimizer)
    specs = {path: self.spec(path) for path in self.roles}
    return self.roles.tree(params, lambda path, role, leaf: specs[path].lr(family))

  def scale_lr(self, optimizer: str = "adam") -> optax.GradientTransformation:
    """Each update × its parameter's LR multiplier, to chain after any optax optimizer of ``optimizer``'s family.

    ``optax.chain(optax.adam(lr), p.scale_lr("adam"))`` (or ``"sgd"`` after ``optax.sgd``). Weight decay inside
    the optimizer before it would be scaled too; ``optimizer`` adds it after.
    """
    param_lib.optimizer_family(optimizer)
    return optim.scale_by_multipliers(lambda params: self.lr_multipliers(params, optimizer))

  def optimizer(self, name: str, learning_rate: Any, *, eps_scaling: str = "none", weight_decay: Any = 0.0,
                schedule: Any = None, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, momentum: float = 0.0,
                nesterov: bool = False,
                decay_kinds: Sequence[str] = optim.DEFAULT_DECAY_KINDS) -> optax.GradientTransformation:
    """Adam, AdamW, SGD or Adam-atan2 with this parametrization's LRs (``scaling.mup.optim.assemble_optimizer``).

    Args:
      name: "adam", "adamw", "sgd" or "adam_atan2".
      learning_rate: a float, a scalar array (may be traced) or an optax schedule.
      eps_scaling: "none" (one ε, divided by each folded multiplier) or "mup" (× the scheme's
        ``eps_multiplier_at``: 1/m under μP, CompleteP's depth factor in the blocks).
      weight_decay, schedule, b1, b2, eps, momentum, nesterov: as in ``scaling.mup.optim.assemble_optimizer``.
      decay_kinds: the layer kinds that weight decay applies to (default: the matrices).

    Returns:
      An optax GradientTransformation (state ``optax.InjectHyperparamsState``).
    """
    optim.check_eps_scaling(name, eps_scaling)
    decay_kinds = tuple(param_lib.check_kind(kind) for kind in decay_kinds)
    factors = {path: self.eps_factor(path, eps_scaling) for path in self.roles}
    eps_factors = None
    if name in ("adam", "adamw") and set(factors.values()) != {1.0}:
      eps_factors = (lambda params: self.eps_factors(params, eps_scaling), factors.values())
    decay = lambda params: self.roles.tree(params, lambda path, role, leaf: role.kind in decay_kinds)
    scale = self.scale_lr("sgd" if name == "sgd" else "adam")
    return optim.assemble_optimizer(name, learning_rate, scale, decay, eps_factors=eps_factors,
                                    weight_decay=weight_decay, schedule=schedule, b1=b1, b2=b2, eps=eps,
                                    momentum=momentum, nesterov=nesterov)

  def _check_path(self, path: str) -> str:
    if path not in self.roles:
      raise ConfigError(f"no parameter {path!r}; parameters: {', '.join(self.roles)}")
    return path


def parametrize(roles: roles_lib.Roles, parametrization: str | param_lib.Parametrization = "mup", *,
                forward: str = "fold") -> RoleParametrization:
  """A parametrization of a user's model from its roles.

  Args:
    roles: from ``scaling.infer_kinds`` (base, delta and target shapes of the model).
    parametrization: a ``Parametrization`` or a scheme name ("sp", "ntk", "mup", "umup"); its ``base_width`` is
      not used (each parameter's m comes from its shapes), its options (``zero_query``, ``zero_readout``, depth)
      are.
    forward: "fold", "readout" or "model": which forward multipliers the model applies (module docstring).

  Returns:
    A ``RoleParametrization``.

  Raises:
    ValueError: unknown forward or scheme; u-μP without forward="model"; zero_query without attn_q roles; depth
      scaling with a hidden matrix outside the blocks.
  """
  roles = roles_lib.check_roles(roles)
  if isinstance(parametrization, str):
    parametrization = param_lib.get_parametrization(parametrization)
  if not isinstance(parametrization, param_lib.Parametrization):
    raise ConfigTypeError(f"parametrization must be a name or a Parametrization, got {parametrization!r}")
  if forward not in FORWARD:
    raise ConfigError(f"forward must be one of {', '.join(FORWARD)}; got {forward!r}")
  if parametrization.unit_scaled and forward != "model":
    raise ConfigError("u-μP's multipliers are the scales of its unit-scaled ops (forward and backward): build the "
                     "model from scaling.mup.unit_scaling's ops and pass forward='model'")
  kinds = [role.kind for role in roles.values()]
  if parametrization.zero_query and "attn_q" not in kinds:
    queries = [p for p, r in roles.items() if r.kind in _HIDDEN_LIKE and re.search(r"(^|[/._])(q|query|wq|q_proj)"
                                                                                      r"([/._]|$)", p)]
    example = (", ".join(f"{p!r}: 'attn_q'" for p in queries) if queries else
               "'*/query/kernel': 'attn_q'  (a glob of your query kernels' paths)")
    raise ConfigError("zero_query needs to know the query projections: infer_kinds(..., "
                     f"overrides=scaling.FLAX_ATTENTION) for Flax's attention, or overrides={{{example}}}")
  if parametrization.depth_alpha:
    outside = [p for p, r in roles.items() if r.kind in _HIDDEN_LIKE and not r.in_block]
    if outside:
      block = outside[0].split("/")[0]
      raise ConfigError(f"depth scaling: hidden matrix {outside[0]!r} is outside the blocks; depth scaling needs "
                       f"every hidden matrix in a residual block: name its block among them, "
                       f"infer_kinds(..., blocks=[..., {block + '*'!r}])")
  return RoleParametrization(roles, parametrization, forward)


class ReadoutDense(nn.Dense):
  """``flax.linen.Dense`` whose product is multiplied by ``multiplier``: y = A·(x @ W) + b (mup's ``MuReadout``).

  ``multiplier`` is ``RoleParametrization.multiplier(path)`` under ``forward="readout"`` (μP: 1/m).
  """

  multiplier: float = 1.0

  @nn.compact
  def __call__(self, inputs: jax.Array) -> jax.Array:
    """inputs [..., fan_in] -> [..., features]."""
    return super().__call__(inputs * jnp.asarray(self.multiplier, inputs.dtype))
