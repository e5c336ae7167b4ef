"""Per-layer learning rates of a parametrization, as optax transformations.

``scale_by_parametrization`` multiplies each parameter's update by the LR
multiplier (``LayerSpec.lr_adam`` or ``lr_sgd``) of its layer kind, read from
its path in the parameter tree (``scaling.parametrization.layer_kind``). It
composes with any optax optimizer placed before it::

    opt = optax.chain(optax.adam(1e-3), scale_by_parametrization("mup", width=256))

``make_optimizer`` builds Adam, AdamW or SGD that way, with the learning rate
injected into the optimizer state (``optax.inject_hyperparams``) so that it may
be a float, an optax schedule, or a traced value: a grid of learning rates can
be trained in one program by vmapping over it::

    def train(lr):
      opt = make_optimizer("adam", lr, "mup", width, schedule=warmup_cosine_schedule(1.0, 100, 1000))
      ...
    jax.vmap(train)(jnp.array([1e-3, 3e-3, 1e-2]))

The learning rate of a parameter at step t is
``learning_rate(t) · schedule(t) · C`` where C is its LR multiplier. Weight
decay (AdamW's decoupled decay, SGD's L2 term) is added after the per-layer
scaling, so its per-step strength is ``lr_t · wd`` for every parameter at every
width, as in ``mup`` with ``decoupled_wd=False`` (see the weight-decay note in
``scaling.parametrization``).
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import optax

from scaling import parametrization as param_lib
from scaling.validation import check_positive_int

Schedule = Callable[[Any], Any]

DEFAULT_DECAY_KINDS = param_lib.MATRIX_KINDS
OPTIMIZERS = ("adam", "adamw", "sgd")


class ScaleByParametrizationState(NamedTuple):
  """State of ``scale_by_parametrization``: one float32 LR multiplier per parameter."""

  multipliers: Any


def lr_multipliers(params: Any, parametrization: str | param_lib.Parametrization, width: int,
                   optimizer: str = "adam") -> Any:
  """The LR multiplier of every parameter (Python floats, structure of ``params``).

  Args:
    params: the ``params`` tree (arrays or anything with ``.shape``).
    parametrization: a Parametrization or a registered name.
    width: the model width.
    optimizer: "adam", "adamw" or "sgd".

  Returns:
    A pytree of floats with the structure of ``params``.
  """
  param_lib._optimizer_family(optimizer)  # pylint: disable=protected-access
  specs = param_lib.param_specs(params, parametrization, width)
  return jax.tree.map(lambda spec: spec.lr(optimizer), specs,
                      is_leaf=lambda x: isinstance(x, param_lib.LayerSpec))


def scale_by_parametrization(parametrization: str | param_lib.Parametrization, width: int,
                             optimizer: str = "adam") -> optax.GradientTransformation:
  """Multiplies each update by its parameter's LR multiplier under ``parametrization``.

  The multipliers are computed once, in ``init``, from the parameter paths and
  shapes, and kept in the state as float32 scalars; ``update`` is one multiply
  per leaf. Place it after the optimizer's direction (e.g. after
  ``optax.scale_by_adam``), before or after the global learning rate: all
  these scalings commute. Add weight decay after it, so that the decay is not
  rescaled (see ``make_optimizer``).

  Args:
    parametrization: a Parametrization or a registered name ("sp", "ntk",
      "mup", "umup"; default options).
    width: the model width (d_model).
    optimizer: "adam"/"adamw" (use ``LayerSpec.lr_adam``) or "sgd" (``lr_sgd``).

  Returns:
    An optax GradientTransformation.

  Raises:
    ValueError: unknown parametrization or optimizer, non-positive width, or
      (in ``init``) a parameter path with no known layer kind.
  """
  scheme = param_lib.resolve_parametrization(parametrization)
  width = check_positive_int("width", width)
  param_lib._optimizer_family(optimizer)  # pylint: disable=protected-access

  def init_fn(params):
    multipliers = lr_multipliers(params, scheme, width, optimizer)
    return ScaleByParametrizationState(
        multipliers=jax.tree.map(lambda c: jnp.asarray(c, jnp.float32), multipliers))

  def update_fn(updates, state, params=None):
    del params
    updates = jax.tree.map(lambda u, c: (u * c).astype(u.dtype), updates, state.multipliers)
    return updates, state

  return optax.GradientTransformation(init_fn, update_fn)


def decay_mask(params: Any, kinds: Sequence[str] = DEFAULT_DECAY_KINDS) -> Any:
  """True for parameters whose layer kind is in ``kinds`` (the weight-decay mask)."""
  kinds = tuple(kinds)
  return jax.tree_util.tree_map_with_path(
      lambda path, _: param_lib.layer_kind(param_lib.path_names(path)) in kinds, params)


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
      raise ValueError(f"{name} must be a finite non-negative number, got {value!r}")
  if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
    raise ValueError(f"warmup must be a non-negative integer, got {warmup!r}")
  if isinstance(total, bool) or not isinstance(total, int) or total <= 0:
    raise ValueError(f"total must be a positive integer, got {total!r}")
  if warmup >= total:
    raise ValueError(f"warmup ({warmup}) must be smaller than total ({total})")
  return optax.warmup_cosine_decay_schedule(
      init_value=0.0, peak_value=float(peak), warmup_steps=warmup, decay_steps=total, end_value=float(end_value))


def _check_unit_interval(name: str, value: float, *, closed_low: bool = True) -> None:
  """Raises ValueError unless ``value`` is a float in [0, 1) ((0, 1) if not closed_low)."""
  ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
  ok = ok and (value >= 0 if closed_low else value > 0) and value < 1
  if not ok:
    raise ValueError(f"{name} must be in [0, 1), got {value!r}")


def _check_learning_rate(learning_rate: Any) -> None:
  """Rejects negative or non-finite Python learning rates (arrays and schedules pass)."""
  if callable(learning_rate):
    return
  if isinstance(learning_rate, bool):
    raise ValueError(f"learning_rate must be a number, array or schedule, got {learning_rate!r}")
  if isinstance(learning_rate, (int, float)):
    if not math.isfinite(learning_rate) or learning_rate < 0:
      raise ValueError(f"learning_rate must be finite and non-negative, got {learning_rate!r}")
    return
  if not hasattr(learning_rate, "shape"):
    raise ValueError(f"learning_rate must be a number, array or schedule, got {type(learning_rate).__name__}")
  if jnp.ndim(learning_rate) != 0:
    raise ValueError(f"learning_rate must be a scalar, got shape {jnp.shape(learning_rate)}")


def make_optimizer(name: str, learning_rate: float | jax.Array | Schedule,
                   parametrization: str | param_lib.Parametrization, width: int, *,
                   weight_decay: float | jax.Array = 0.0, schedule: Schedule | None = None,
                   b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
                   momentum: float = 0.0, nesterov: bool = False,
                   decay_kinds: Sequence[str] = DEFAULT_DECAY_KINDS) -> optax.GradientTransformation:
  """Adam, AdamW or SGD with the per-layer learning rates of ``parametrization``.

  The update of a parameter with LR multiplier C (``LayerSpec.lr_adam`` for
  adam/adamw, ``lr_sgd`` for sgd) is

  * adam:  ``-lr_t · C · m̂/(√v̂ + eps)``;
  * adamw: ``-lr_t · (C · m̂/(√v̂ + eps) + wd · p)`` (decay only for ``decay_kinds``);
  * sgd:   ``-lr_t · trace(C · g + wd · p)`` (heavy-ball momentum when
    ``momentum > 0``; L2 decay only for ``decay_kinds``),

  with ``lr_t = learning_rate(t) · schedule(t)``. The decay is not multiplied
  by C: a decayed parameter shrinks by ``lr_t · wd`` per step whatever its layer
  and the width, which is what ``mup``'s optimizers do with
  ``decoupled_wd=False`` (they divide ``weight_decay`` by each LR factor) and
  what SP AdamW does at any width. The chain is ``scale_by_adam |
  scale_by_parametrization | add_decayed_weights | scale_by_schedule |
  scale_by_learning_rate`` (sgd: ``scale_by_parametrization |
  add_decayed_weights | trace | ...``) wrapped in ``optax.inject_hyperparams``:
  ``state.hyperparams["learning_rate"]`` (and ``["weight_decay"]`` for adamw
  and sgd) live in the state, so they can be traced, vmapped over or changed
  between steps (``set_learning_rate``).

  Args:
    name: "adam", "adamw" or "sgd".
    learning_rate: a non-negative float, a scalar array (may be traced), or an
      optax schedule (step -> learning rate).
    parametrization: a Parametrization or a registered name.
    width: the model width.
    weight_decay: decoupled decay coefficient (adamw) or L2 coefficient (sgd);
      must be 0 for adam.
    schedule: optional step -> factor multiplying the learning rate (e.g.
      ``warmup_cosine_schedule(1.0, warmup, total)``), applied inside the
      transformation so that a traced peak learning rate can share it.
    b1, b2, eps: Adam's moment decays and epsilon.
    momentum: SGD momentum in [0, 1) (0 = plain SGD).
    nesterov: Nesterov momentum for SGD.
    decay_kinds: layer kinds that are decayed (default: the matrices, not biases
      or norm gains).

  Returns:
    An optax GradientTransformation whose state is an
    ``optax.InjectHyperparamsState``.

  Raises:
    ValueError: unknown name, parametrization or kind, invalid hyperparameters,
      or weight decay with plain adam.
  """
  if name not in OPTIMIZERS:
    raise ValueError(f"unknown optimizer {name!r}; expected one of {', '.join(OPTIMIZERS)}")
  _check_learning_rate(learning_rate)
  if schedule is not None and not callable(schedule):
    raise ValueError(f"schedule must be a callable step -> factor, got {type(schedule).__name__}")
  if isinstance(weight_decay, (int, float)) and not isinstance(weight_decay, bool):
    if not math.isfinite(weight_decay) or weight_decay < 0:
      raise ValueError(f"weight_decay must be finite and non-negative, got {weight_decay!r}")
    if name == "adam" and weight_decay != 0:
      raise ValueError("adam takes no weight_decay; use 'adamw' for decoupled weight decay")
  elif name == "adam":
    raise ValueError("adam takes no weight_decay; use 'adamw' for decoupled weight decay")
  _check_unit_interval("b1", b1)
  _check_unit_interval("b2", b2)
  if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not math.isfinite(eps) or eps < 0:
    raise ValueError(f"eps must be finite and non-negative, got {eps!r}")
  _check_unit_interval("momentum", momentum)
  if nesterov and momentum == 0:
    raise ValueError("nesterov=True needs momentum > 0")
  decay_kinds = tuple(decay_kinds)
  for kind in decay_kinds:
    param_lib._check_kind(kind)  # pylint: disable=protected-access

  family = "sgd" if name == "sgd" else "adam"
  scale = scale_by_parametrization(parametrization, width, family)
  mask = lambda params: decay_mask(params, decay_kinds)

  def tail(learning_rate):
    parts = []
    if schedule is not None:
      parts.append(optax.scale_by_schedule(schedule))
    parts.append(optax.scale_by_learning_rate(learning_rate))
    return parts

  if name == "adam":
    def adam(learning_rate):
      return optax.chain(optax.scale_by_adam(b1=b1, b2=b2, eps=eps), scale, *tail(learning_rate))
    return optax.inject_hyperparams(adam)(learning_rate=learning_rate)

  if name == "adamw":
    def adamw(learning_rate, weight_decay):
      return optax.chain(optax.scale_by_adam(b1=b1, b2=b2, eps=eps), scale,
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
    raise ValueError("state has no injected learning_rate; build the optimizer with make_optimizer")
  old = hyperparams["learning_rate"]
  new = jnp.asarray(learning_rate, dtype=jnp.result_type(old))
  return state._replace(hyperparams={**hyperparams, "learning_rate": new})
