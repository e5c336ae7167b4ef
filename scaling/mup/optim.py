"""Per-layer learning rates of a parametrization, as optax transformations.

The one way a parametrization meets a model is ``scaling.parametrize(roles, scheme)`` (``scaling.mup.roles`` infers
the roles; the built-in Transformer's come from ``scaling.training.model.transformer.parametrized``). Its ``optimizer`` builds Adam,
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

The learning rate of a parameter at step t is
``learning_rate(t) · schedule(t) · C`` where C is its LR multiplier. Weight
decay (AdamW's decoupled decay, SGD's L2 term) is added after the per-layer
scaling, so its per-step strength is ``lr_t · wd`` for every parameter at every
width, as in ``mup`` with ``decoupled_wd=False`` (see the weight-decay note in
``scaling.mup.schemes``).

The optimizer and schedule options every training study shares, and the one place where an optimizer is made from
options, are ``scaling.training.optimizer.OptimizerConfig``.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from scaling.mup import schemes as param_lib
from scaling.base import validation
from scaling.mup.adam_atan2 import scale_by_adam_atan2
from scaling.base.validation import check_positive_int
from scaling.base.validation import ConfigError

Schedule = Callable[[Any], Any]

DEFAULT_DECAY_KINDS = param_lib.MATRIX_KINDS
OPTIMIZERS = ("adam", "adamw", "sgd", "adam_atan2")
EPS_SCALINGS = ("none", "mup")


class ScaleByMultipliersState(NamedTuple):
  """State of ``scale_by_multipliers``: one float32 LR multiplier per parameter."""

  multipliers: Any


def scale_by_multipliers(multipliers_of: Callable[[Any], Any]) -> optax.GradientTransformation:
  """Multiplies each update by a per-parameter factor computed once from the parameters.

  ``multipliers_of(params)`` (called in ``init``, on the parameters or their shapes) returns a tree of Python floats
  with the structure of ``params``, kept in the state as float32 scalars; ``update`` is one multiply per leaf.

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
    return ScaleByMultipliersState(
        multipliers=jax.tree.map(lambda c: jnp.asarray(c, jnp.float32), multipliers_of(params)))

  def update_fn(updates, state, params=None):
    del params
    updates = jax.tree.map(lambda u, c: (u * c).astype(u.dtype), updates, state.multipliers)
    return updates, state

  return optax.GradientTransformation(init_fn, update_fn)


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


def warmup_cosine_schedule(peak: float, warmup: int, total: int, *, end_value: float = 0.0) -> Schedule:
  """Linear warmup from 0 to ``peak`` over ``warmup`` steps, then cosine decay to ``end_value``.

  Args:
    peak: the value reached at step ``warmup``. Use ``peak=1.0`` for a factor
      to pass as ``optimizer(..., schedule=...)`` (``RoleParametrization.optimizer``) with a separate (possibly
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
  """Adam, AdamW, SGD or Adam-atan2 around a per-parameter LR scaling (the chain of ``RoleParametrization.optimizer``).

  Args:
    name: "adam", "adamw", "sgd" or "adam_atan2".
    learning_rate: a non-negative float, a scalar array (may be traced), or an optax schedule.
    scale: the per-parameter LR scaling (``scale_by_multipliers``).
    decay: the weight-decay mask: a tree of bools or a function params -> tree of bools.
    eps_factors: None (one ε) or (factors_of, groups) of ``scale_by_adam_eps_factors`` (adam and adamw only).
    weight_decay: decoupled decay (adamw) or L2 term (sgd), added after ``scale``: per step lr · wd whatever the
      parameter's LR multiplier; 0 for adam and adam_atan2.
    schedule: None or step -> factor of the learning rate.
    b1, b2, eps: Adam's moment decays and epsilon (adam_atan2: b1 and b2 only).
    momentum, nesterov: SGD's momentum in [0, 1) and Nesterov's variant of it.

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

  Only meaningful when the optimizer was given a numeric learning rate: a
  schedule overwrites the stored value at every step.
  """
  hyperparams = getattr(state, "hyperparams", None)
  if not isinstance(hyperparams, dict) or "learning_rate" not in hyperparams:
    raise ConfigError("state has no injected learning_rate; build the optimizer with assemble_optimizer")
  old = hyperparams["learning_rate"]
  new = jnp.asarray(learning_rate, dtype=jnp.result_type(old))
  return state._replace(hyperparams={**hyperparams, "learning_rate": new})
