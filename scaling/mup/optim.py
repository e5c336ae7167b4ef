"""Per-layer learning rates of a parametrization, as optax transformations.

The one way a parametrization meets a model is ``scaling.parametrize(roles, scheme)`` (``scaling.mup.roles`` infers
the roles; the built-in Transformer's come from ``scaling.training.model.parametrized``). Its ``optimizer`` builds Adam,
AdamW, SGD or Adam-atan2 from the pieces here: ``scale_by_multipliers`` multiplies each parameter's update by its
LR multiplier (``LayerSpec.lr_adam`` or ``lr_sgd``), ``scale_by_adam_eps_factors`` gives each its Adam ε, and
``assemble_optimizer`` chains them with the learning rate injected into the optimizer state
(``optax.inject_hyperparams``), so that it may be a float, an optax schedule, or a traced value: a grid of
learning rates is trained in one program by vmapping over it::

    p = scaling.parametrize(roles, "mup")
    def train(lr):
      opt = p.optimizer("adam", lr, schedule=warmup_cosine_schedule(1.0, 100, 1000))
      ...
    jax.vmap(train)(jnp.array([1e-3, 3e-3, 1e-2]))

``make_optimizer(name, lr, parametrization, width, kinds)``, ``scale_by_parametrization``, ``lr_multipliers`` and
``scale_by_adam_scaled_eps`` (one global width and a tree of kinds, ``parametrization.specs_at_width``) remain for
one release, with a ``DeprecationWarning``.

The learning rate of a parameter at step t is
``learning_rate(t) · schedule(t) · C`` where C is its LR multiplier. Weight
decay (AdamW's decoupled decay, SGD's L2 term) is added after the per-layer
scaling, so its per-step strength is ``lr_t · wd`` for every parameter at every
width, as in ``mup`` with ``decoupled_wd=False`` (see the weight-decay note in
``scaling.mup.schemes``).

``OptimizerConfig`` declares the optimizer and schedule options every training
study shares and builds the optimizer (``OptimizerConfig.build``): the one
place where an optimizer is made from options.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any, Callable, Iterable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import optax

from scaling.mup import schemes as param_lib
from scaling.base import validation
from scaling.mup.adam_atan2 import scale_by_adam_atan2
from scaling.base.config import option
from scaling.base.config import Options
from scaling.base.validation import check_positive_int
from scaling.base.validation import ConfigError

Schedule = Callable[[Any], Any]

DEFAULT_DECAY_KINDS = param_lib.MATRIX_KINDS
OPTIMIZERS = ("adam", "adamw", "sgd", "adam_atan2")
EPS_SCALINGS = ("none", "mup")
SCHEDULES = ("constant", "cosine")


class ScaleByParametrizationState(NamedTuple):
  """State of ``scale_by_parametrization``: one float32 LR multiplier per parameter."""

  multipliers: Any


def _deprecated(old: str, new: str) -> None:
  warnings.warn(f"{old} is deprecated and will be removed in the next release; use {new}", DeprecationWarning,
                stacklevel=3)


def _specs_of(parametrization: param_lib.Parametrization, width: int, kinds: Any) -> Callable[[Any], Any]:
  """params -> the LayerSpec of every parameter at one global width (``param_lib.specs_at_width``)."""
  if not isinstance(parametrization, param_lib.Parametrization):
    raise ConfigError(f"parametrization must be a Parametrization object, got {parametrization!r}")
  width = check_positive_int("width", width)
  return lambda params: param_lib.specs_at_width(params, kinds, parametrization, width)


def _lr_of(specs: Any, optimizer: str) -> Any:
  return jax.tree.map(lambda spec: spec.lr(optimizer), specs, is_leaf=lambda x: isinstance(x, param_lib.LayerSpec))


def lr_multipliers(params: Any, kinds: Any, parametrization: param_lib.Parametrization, width: int,
                   optimizer: str = "adam") -> Any:
  """The LR multiplier of every parameter at one global width (deprecated: ``RoleParametrization.lr_multipliers``)."""
  _deprecated("scaling.mup.optim.lr_multipliers(params, kinds, parametrization, width)",
              "scaling.parametrize(roles, parametrization).lr_multipliers(params, optimizer)")
  param_lib.optimizer_family(optimizer)
  return _lr_of(_specs_of(parametrization, width, kinds)(params), optimizer)


def scale_by_parametrization(parametrization: param_lib.Parametrization, width: int, kinds: Any,
                             optimizer: str = "adam") -> optax.GradientTransformation:
  """Each update × its LR multiplier at one global width (deprecated: ``RoleParametrization.scale_lr``)."""
  _deprecated("scaling.mup.optim.scale_by_parametrization(parametrization, width, kinds)",
              "scaling.parametrize(roles, parametrization).scale_lr(optimizer)")
  specs_of = _specs_of(parametrization, width, kinds)
  param_lib.optimizer_family(optimizer)
  return scale_by_multipliers(lambda params: _lr_of(specs_of(params), optimizer))


def scale_by_multipliers(multipliers_of: Callable[[Any], Any]) -> optax.GradientTransformation:
  """Multiplies each update by a per-parameter factor computed once from the parameters.

  The generic form of ``scale_by_parametrization``: ``multipliers_of(params)`` (called in ``init``, on the
  parameters or their shapes) returns a tree of Python floats with the structure of ``params``, kept in the
  state as float32 scalars; ``update`` is one multiply per leaf.

  Args:
    multipliers_of: params -> a tree of floats with the structure of params (e.g.
      ``scaling.mup.parametrize.RoleParametrization.lr_multipliers``).

  Returns:
    An optax GradientTransformation.
  """
  if not callable(multipliers_of):
    raise validation.ConfigTypeError(
        f"multipliers_of must be a function params -> tree of floats, got {multipliers_of!r}")

  def init_fn(params):
    return ScaleByParametrizationState(
        multipliers=jax.tree.map(lambda c: jnp.asarray(c, jnp.float32), multipliers_of(params)))

  def update_fn(updates, state, params=None):
    del params
    updates = jax.tree.map(lambda u, c: (u * c).astype(u.dtype), updates, state.multipliers)
    return updates, state

  return optax.GradientTransformation(init_fn, update_fn)


def scale_by_adam_scaled_eps(parametrization: param_lib.Parametrization, width: int, kinds: Any, *,
                             b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> optax.GradientTransformation:
  """``optax.scale_by_adam`` with ε = eps · ``eps_multiplier(kind, width)`` per parameter (deprecated:
  ``RoleParametrization.optimizer(..., eps_scaling="mup")``)."""
  _deprecated("scaling.mup.optim.scale_by_adam_scaled_eps(parametrization, width, kinds)",
              "scaling.parametrize(roles, parametrization).optimizer('adam', lr, eps_scaling='mup')")
  return scale_by_adam_eps_factors(*_eps_by_kind(parametrization, width, kinds), b1=b1, b2=b2, eps=eps)


def _eps_by_kind(parametrization: param_lib.Parametrization, width: int,
                 kinds: Any) -> tuple[Callable[[Any], Any], Iterable[float]]:
  """(params -> ε factors, the distinct factors) at one global width: ``eps_multiplier`` of each kind."""
  factors = {kind: parametrization.eps_multiplier(kind, width) for kind in set(jax.tree.leaves(kinds))}
  return (lambda params: jax.tree.map(lambda kind: factors[kind], kinds)), factors.values()


def scale_by_adam_eps_factors(factors_of: Callable[[Any], Any], groups: Iterable[float], *, b1: float = 0.9,
                              b2: float = 0.999, eps: float = 1e-8) -> optax.GradientTransformation:
  """``optax.scale_by_adam`` whose ε is eps · f for a parameter of factor f (``optax.partition`` by factor).

  Args:
    factors_of: params -> a tree of floats (each parameter's factor f) with the structure of params.
    groups: every value ``factors_of`` may return (one ``scale_by_adam`` per distinct value).
    b1, b2, eps: Adam's moment decays and base epsilon.

  Returns:
    An optax GradientTransformation.
  """
  groups = sorted(set(float(f) for f in groups))
  label = lambda f: f"eps_{groups.index(float(f))}"
  transforms = {label(f): optax.scale_by_adam(b1=b1, b2=b2, eps=eps * f) for f in groups}
  return optax.partition(transforms, lambda params: jax.tree.map(label, factors_of(params)))


def decay_mask(kinds: Any, decay_kinds: Sequence[str] = DEFAULT_DECAY_KINDS) -> Any:
  """True for parameters whose layer kind is in ``decay_kinds`` (the weight-decay mask)."""
  decay_kinds = tuple(decay_kinds)
  return jax.tree.map(lambda kind: kind in decay_kinds, kinds)


def warmup_cosine_schedule(peak: float, warmup: int, total: int, *, end_value: float = 0.0) -> Schedule:
  """Linear warmup from 0 to ``peak`` over ``warmup`` steps, then cosine decay to ``end_value``.

  Args:
    peak: the value reached at step ``warmup``. Use ``peak=1.0`` for a factor
      to pass as ``make_optimizer(..., schedule=...)`` with a separate (possibly
      traced) learning rate.
    warmup: number of warmup steps (0 = start at ``peak``).
    total: total number of steps, warmup included; the value is ``end_value``
      from step ``total`` on.
    end_value: final value.

  Returns:
    An optax schedule (step -> value).
  """
  for name, value in (("peak", peak), ("end_value", end_value)):
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
      raise ConfigError(f"{name} must be a finite non-negative number, got {value!r}")
  if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
    raise ConfigError(f"warmup must be a non-negative integer, got {warmup!r}")
  total = check_positive_int("total", total)
  if warmup >= total:
    raise ConfigError(f"warmup ({warmup}) must be smaller than total ({total})")
  return optax.warmup_cosine_decay_schedule(
      init_value=0.0, peak_value=float(peak), warmup_steps=warmup, decay_steps=total, end_value=float(end_value))


def _check_unit_interval(name: str, value: float, *, closed_low: bool = True) -> None:
  """Raises ValueError unless ``value`` is a float in [0, 1) ((0, 1) if not closed_low)."""
  ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
  ok = ok and (value >= 0 if closed_low else value > 0) and value < 1
  if not ok:
    raise ConfigError(f"{name} must be in [0, 1), got {value!r}")


def _check_learning_rate(learning_rate: Any) -> None:
  """Rejects negative or non-finite Python learning rates (arrays and schedules pass)."""
  if callable(learning_rate):
    return
  if isinstance(learning_rate, bool):
    raise ConfigError(f"learning_rate must be a number, array or schedule, got {learning_rate!r}")
  if isinstance(learning_rate, (int, float)):
    if not math.isfinite(learning_rate) or learning_rate < 0:
      raise ConfigError(f"learning_rate must be finite and non-negative, got {learning_rate!r}")
    return
  if not hasattr(learning_rate, "shape"):
    raise ConfigError(f"learning_rate must be a number, array or schedule, got {type(learning_rate).__name__}")
  if jnp.ndim(learning_rate) != 0:
    raise ConfigError(f"learning_rate must be a scalar, got shape {jnp.shape(learning_rate)}")


def make_optimizer(name: str, learning_rate: float | jax.Array | Schedule,
                   parametrization: param_lib.Parametrization, width: int, kinds: Any, *,
                   weight_decay: float | jax.Array = 0.0, schedule: Schedule | None = None,
                   b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
                   momentum: float = 0.0, nesterov: bool = False,
                   decay_kinds: Sequence[str] = DEFAULT_DECAY_KINDS,
                   eps_scaling: str = "none") -> optax.GradientTransformation:
  """Adam, AdamW, SGD or Adam-atan2 at one global width from a tree of kinds (deprecated).

  Kept for one release: ``scaling.parametrize(roles, parametrization).optimizer(name, learning_rate, ...)`` is the
  one path (the roles of one global width are ``scaling.mup.roles.from_kinds(params, kinds, width / base_width)``);
  here each parameter's spec is ``parametrization.specs_at_width``'s; every argument means what it means there
  (``RoleParametrization.optimizer``).
  """
  _deprecated("scaling.mup.optim.make_optimizer(name, lr, parametrization, width, kinds)",
              "scaling.parametrize(roles, parametrization).optimizer(name, lr)")
  check_eps_scaling(name, eps_scaling)
  decay_kinds = tuple(param_lib.check_kind(kind) for kind in decay_kinds)
  specs_of = _specs_of(parametrization, width, kinds)
  family = "sgd" if name == "sgd" else "adam"
  scale = scale_by_multipliers(lambda params: _lr_of(specs_of(params), family))
  eps_factors = _eps_by_kind(parametrization, width, kinds) if eps_scaling == "mup" else None
  return assemble_optimizer(name, learning_rate, scale, decay_mask(kinds, decay_kinds), eps_factors=eps_factors,
                            weight_decay=weight_decay, schedule=schedule, b1=b1, b2=b2, eps=eps, momentum=momentum,
                            nesterov=nesterov)


def check_eps_scaling(name: str, eps_scaling: str) -> None:
  """ConfigError unless ``name`` is an optimizer and ``eps_scaling`` one of ``EPS_SCALINGS`` that it can take."""
  if name not in OPTIMIZERS:
    raise ConfigError(validation.unknown_choice("optimizer", name, OPTIMIZERS))
  if eps_scaling not in EPS_SCALINGS:
    raise ConfigError(f"eps_scaling {validation.must_be_one_of(eps_scaling, EPS_SCALINGS)}")
  if eps_scaling != "none" and name in ("sgd", "adam_atan2"):
    raise ConfigError(f"eps_scaling applies to adam and adamw only; {name} has no epsilon")


def assemble_optimizer(name: str, learning_rate: float | jax.Array | Schedule, scale: optax.GradientTransformation,
                       decay: Any, *, eps_factors: tuple[Callable[[Any], Any], Iterable[float]] | None = None,
                       weight_decay: float | jax.Array = 0.0, schedule: Schedule | None = None,
                       b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
                       momentum: float = 0.0, nesterov: bool = False) -> optax.GradientTransformation:
  """Adam, AdamW, SGD or Adam-atan2 around a per-parameter LR scaling (the chain of ``make_optimizer``).

  Args:
    name: "adam", "adamw", "sgd" or "adam_atan2".
    learning_rate: a non-negative float, a scalar array (may be traced), or an optax schedule.
    scale: the per-parameter LR scaling (``scale_by_parametrization`` or ``scale_by_multipliers``).
    decay: the weight-decay mask: a tree of bools or a function params -> tree of bools.
    eps_factors: None (one ε) or (factors_of, groups) of ``scale_by_adam_eps_factors`` (adam and adamw only).
    weight_decay, schedule, b1, b2, eps, momentum, nesterov: as in ``make_optimizer``.

  Returns:
    An optax GradientTransformation whose state is an ``optax.InjectHyperparamsState``.

  Raises:
    ValueError: unknown name, invalid hyperparameters, weight decay with adam or adam_atan2, or ε factors with an
      optimizer without ε.
  """
  if name not in OPTIMIZERS:
    raise ConfigError(validation.unknown_choice("optimizer", name, OPTIMIZERS))
  validation.check_bool("nesterov", nesterov)
  _check_learning_rate(learning_rate)
  if schedule is not None and not callable(schedule):
    raise ConfigError(f"schedule must be a callable step -> factor, got {type(schedule).__name__}")
  if isinstance(weight_decay, (int, float)) and not isinstance(weight_decay, bool):
    if not math.isfinite(weight_decay) or weight_decay < 0:
      raise ConfigError(f"weight_decay must be finite and non-negative, got {weight_decay!r}")
    if name in ("adam", "adam_atan2") and weight_decay != 0:
      raise ConfigError(f"{name} takes no weight_decay; use 'adamw' for decoupled weight decay")
  elif name in ("adam", "adam_atan2"):
    raise ConfigError(f"{name} takes no weight_decay; use 'adamw' for decoupled weight decay")
  if eps_factors is not None and name in ("sgd", "adam_atan2"):
    raise ConfigError(f"per-parameter epsilon applies to adam and adamw only; {name} has no epsilon")
  _check_unit_interval("b1", b1)
  _check_unit_interval("b2", b2)
  if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not math.isfinite(eps) or eps < 0:
    raise ConfigError(f"eps must be finite and non-negative, got {eps!r}")
  _check_unit_interval("momentum", momentum)
  if nesterov and momentum == 0:
    raise ConfigError("nesterov=True needs momentum > 0")
  mask = decay

  def tail(learning_rate):
    parts = []
    if schedule is not None:
      parts.append(optax.scale_by_schedule(schedule))
    parts.append(optax.scale_by_learning_rate(learning_rate))
    return parts

  if name == "adam_atan2":
    direction = scale_by_adam_atan2(b1=b1, b2=b2)
  elif eps_factors is not None:
    direction = scale_by_adam_eps_factors(*eps_factors, b1=b1, b2=b2, eps=eps)
  else:
    direction = optax.scale_by_adam(b1=b1, b2=b2, eps=eps)

  if name in ("adam", "adam_atan2"):
    def adam(learning_rate):
      return optax.chain(direction, scale, *tail(learning_rate))
    return optax.inject_hyperparams(adam)(learning_rate=learning_rate)

  if name == "adamw":
    def adamw(learning_rate, weight_decay):
      return optax.chain(direction, scale,
                         optax.add_decayed_weights(weight_decay, mask), *tail(learning_rate))
    return optax.inject_hyperparams(adamw)(learning_rate=learning_rate, weight_decay=weight_decay)

  def sgd(learning_rate, weight_decay):
    parts = [scale, optax.add_decayed_weights(weight_decay, mask)]
    if momentum > 0:
      parts.append(optax.trace(decay=momentum, nesterov=nesterov))
    return optax.chain(*parts, *tail(learning_rate))
  return optax.inject_hyperparams(sgd)(learning_rate=learning_rate, weight_decay=weight_decay)


def set_learning_rate(state: optax.InjectHyperparamsState, learning_rate: Any) -> optax.InjectHyperparamsState:
  """Returns ``state`` with its injected learning rate replaced by ``learning_rate``.

  Only meaningful when ``make_optimizer`` was given a numeric learning rate: a
  schedule overwrites the stored value at every step.
  """
  hyperparams = getattr(state, "hyperparams", None)
  if not isinstance(hyperparams, dict) or "learning_rate" not in hyperparams:
    raise ConfigError("state has no injected learning_rate; build the optimizer with make_optimizer")
  old = hyperparams["learning_rate"]
  new = jnp.asarray(learning_rate, dtype=jnp.result_type(old))
  return state._replace(hyperparams={**hyperparams, "learning_rate": new})


FLOAT32_MAX = 3.4028234663852886e38  # the largest finite float32; learning rates live in float32 optimizer state


@dataclasses.dataclass(frozen=True)
class OptimizerConfig(Options):
  """The optimizer, schedule and loss options every training study shares; ``build`` makes the optimizer.

  The learning rate of step t is ``learning_rate · schedule(t) · C`` with C the
  parameter's LR multiplier: "constant" is a linear warmup over
  ``warmup_steps`` then 1; "cosine" is a linear warmup then a cosine decay to
  ``end_factor`` at ``steps`` (``warmup_cosine_schedule``). ``z_loss`` adds
  c · mean((log Z)²) of the readout to the loss (``scaling.training.train.z_loss``).
  """

  optimizer: str = option("adam", "Optimizer (adam_atan2: Adam with a*atan2(m, b*sqrt(v)) in place of "
                          "m/(sqrt(v)+eps), Everett et al. 2024).", choices=OPTIMIZERS)
  learning_rate: float = option(3e-3, "Global (peak) learning rate.", positive=True)
  weight_decay: float = option(0.0, "Weight decay (adamw: decoupled; sgd: L2), per step lr * wd whatever the "
                               "layer and width.", lower=0.0)
  momentum: float = option(0.0, "SGD momentum in [0, 1).", lower=0.0, upper=1.0, upper_exclusive=True)
  steps: int = option(600, "Training steps.", lower=1, upper=2**31 - 1)
  schedule: str = option("constant", "Learning-rate schedule: constant (after the warmup) or cosine (warmup, then "
                         "cosine decay to --end_factor).", choices=SCHEDULES)
  warmup_steps: int | None = option(None, "Linear warmup steps (default: steps // 10 with --schedule=cosine, else 0).",
                                    lower=0)
  end_factor: float = option(0.0, "Final learning rate of the cosine schedule, as a fraction of the peak.", lower=0.0,
                             upper=1.0)
  eps_scaling: str = option("none", "Adam's epsilon: none = one epsilon for every parameter; mup = scaled with "
                            "width and depth as muP/CompleteP prescribe (1/m under muP, x (depth/base_depth)^-alpha "
                            "inside the blocks).", choices=EPS_SCALINGS)
  z_loss: float = option(0.0, "Coefficient c of the z-loss c * mean((log Z)^2) added to the loss, log Z the "
                         "logsumexp of the output logits (PaLM; Wortsman et al. 2023); 0 = off.", lower=0.0)

  def validate(self):
    if self.optimizer in ("adam", "adam_atan2") and self.weight_decay:
      raise ConfigError("weight_decay needs optimizer='adamw' or optimizer='sgd'")
    if self.momentum and self.optimizer != "sgd":
      raise ConfigError("momentum only applies to optimizer='sgd'")
    if self.eps_scaling != "none" and self.optimizer in ("sgd", "adam_atan2"):
      raise ConfigError(f"eps_scaling only applies to optimizer='adam' or optimizer='adamw' "
                        f"(optimizer={self.optimizer!r} has no epsilon)")
    if self.learning_rate > FLOAT32_MAX:
      raise ConfigError(f"learning_rate={self.learning_rate:g} overflows float32 (at most {FLOAT32_MAX:.3g})")
    if self.warmup >= self.steps and (self.warmup or self.schedule == "cosine"):
      raise ConfigError(f"warmup_steps={self.warmup} must be smaller than steps={self.steps}")

  @property
  def warmup(self) -> int:
    """The warmup length: ``warmup_steps``, or its default."""
    if self.warmup_steps is not None:
      return self.warmup_steps
    return self.steps // 10 if self.schedule == "cosine" else 0

  def schedule_fn(self) -> Schedule | None:
    """step -> factor of the learning rate, or None for a constant rate without warmup."""
    if self.schedule == "cosine":
      return warmup_cosine_schedule(1.0, self.warmup, self.steps, end_value=self.end_factor)
    if self.warmup:
      return optax.linear_schedule(0.0, 1.0, self.warmup)
    return None

  def build(self, parametrized: Any, learning_rate: float | None = None) -> optax.GradientTransformation:
    """The optimizer for a model (``learning_rate`` replaces the configured one; it can also be set in the state).

    Args:
      parametrized: the model's ``scaling.mup.parametrize.RoleParametrization`` (``scaling.parametrize`` of its
        roles; the built-in Transformer's is ``scaling.training.model.parametrized(config)``).
      learning_rate: replaces the configured learning rate (a float or a traced scalar).
    """
    if not hasattr(parametrized, "optimizer") or not hasattr(parametrized, "roles"):
      raise validation.ConfigTypeError(f"parametrized must be the RoleParametrization that scaling.parametrize "
                                       f"returns, got {type(parametrized).__name__}")
    kwargs = {} if self.optimizer in ("adam", "adam_atan2") else {"weight_decay": self.weight_decay}
    if self.optimizer == "sgd":
      kwargs["momentum"] = self.momentum
    lr = self.learning_rate if learning_rate is None else learning_rate
    return parametrized.optimizer(self.optimizer, lr, eps_scaling=self.eps_scaling, schedule=self.schedule_fn(),
                                  **kwargs)

  def applied_learning_rate(self, base: Any, step: Any) -> Any:
    """The learning rate applied at ``step`` (before per-layer multipliers) for a base rate ``base``."""
    schedule = self.schedule_fn()
    return base if schedule is None else base * schedule(step)
