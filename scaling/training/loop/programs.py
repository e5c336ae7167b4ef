"""What the training loop trains: a program per kind of model, each giving its initial state and its step.

``TransformerProgram`` is the built-in Transformer (a ``ModelConfig``) with its optimizer (``optimizer_for``);
``FunctionalProgram`` is any other model (a ``scaling.mup.user_model.FunctionalModel``) with an optimizer factory.
``as_program`` turns what a caller passes into one of them, once, at the boundary.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import optax

from scaling.attention import rules as rules_lib
from scaling.base.validation import ConfigError
from scaling.base.validation import ConfigTypeError
from scaling.mup import optim as optim_lib
from scaling.mup import user_model
from scaling.training.optimizer import OptimizerConfig
from scaling.training.model import transformer as model_lib
from scaling.training.model.config import ModelConfig
from scaling.training.model import config as model_config_lib
from scaling.training.loop import state as state_lib
from scaling.training.loop import transformer_step

Array = jax.Array


@functools.lru_cache(maxsize=64)
def optimizer_for(model_config: ModelConfig,
                  opt_config: OptimizerConfig) -> optax.GradientTransformation:
  """The optimizer of a model.

  Args:
    model_config: the built-in Transformer.
    opt_config: the optimizer, its schedule and hyperparameters.

  Returns:
    ``opt_config.build`` with the model's parametrization (``model.parametrized``); the same configs return the same
    transformation (cached).
  """
  return opt_config.build(model_lib.parametrized(model_config))


@dataclasses.dataclass(frozen=True)
class TransformerProgram:
  """What ``run_training`` trains for a ``ModelConfig``: the built-in Transformer and its optimizer.

  A program gives ``init_state(seed, learning_rate)``, ``step(state, batch, metrics)`` and the ``width`` (the grid's
  chunking rule); ``FunctionalProgram`` is the same for any other model.
  """

  model_config: ModelConfig
  opt_config: OptimizerConfig
  logit_alpha: float | None = dataclasses.field(default=None, compare=False)
  """The α of a model whose rule ``as_program`` replaced by the shared one (its state carries α in ``attn_mult``):
  not part of the program's identity, so the models of every such rule share one compiled step."""
  takes_attn_mults = True
  """A grid's members may each carry their own α of the attention logit scale (``TrainState.attn_mult``)."""

  @property
  def width(self) -> int:
    return self.model_config.width

  def check_dataset(self, dataset: Any) -> None:
    """ConfigTypeError unless ``dataset`` is a ``scaling.training.data.dataset.Dataset``; ConfigError if its tokens do not
    fit the model's vocabulary."""
    if not all(hasattr(dataset, a) for a in ("batch", "vocab_size")):
      raise ConfigTypeError(f"dataset must be a scaling.training.data.dataset.Dataset (DataConfig.make), "
                            f"got {type(dataset).__name__}")
    if dataset.vocab_size > self.model_config.vocab_size:
      raise ConfigError(f"dataset vocab_size {dataset.vocab_size} exceeds the model's {self.model_config.vocab_size}")

  def init_state(self, seed: Any, learning_rate: Any) -> state_lib.TrainState:
    """The state without the values ``with_constants`` adds (so the init program is the same for every rule)."""
    return self.state_from_params(transformer_params(self.model_config, seed), learning_rate)

  def state_from_params(self, params: Any, learning_rate: Any) -> state_lib.TrainState:
    """The state of freshly initialized ``params`` (``init_state`` after the parameters are drawn)."""
    opt_state = optimizer_for(self.model_config, self.opt_config).init(params)
    return state_lib.TrainState(step=jnp.zeros((), jnp.int32), params=params,
                                opt_state=optim_lib.set_learning_rate(opt_state, learning_rate))

  def with_constants(self, state: state_lib.TrainState) -> state_lib.TrainState:
    """The state with the model's α in ``attn_mult`` (one per member; ``logit_alpha``, else
    ``model.logit_multiplier``), added outside the compiled init; as it is for a model without one."""
    alpha = model_config_lib.logit_multiplier(self.model_config) if self.logit_alpha is None else self.logit_alpha
    if alpha is None:
      return state
    return state.replace(attn_mult=jnp.zeros_like(state.step, jnp.float32) + jnp.float32(alpha))

  def step(self, state: state_lib.TrainState, batch: state_lib.Batch,
           metrics: Sequence[str] | None = None) -> tuple[state_lib.TrainState, dict[str, Array]]:
    if self.logit_alpha is not None and state.attn_mult is None:
      raise ConfigError("the state has no attn_mult, but this model's logit scale is carried there (a rule that is "
                        "only a logit factor); make the state with make_init or init_train_state")
    return transformer_step.train_step(state, batch, model=model_lib.Transformer(self.model_config),
                                       optimizer=optimizer_for(self.model_config, self.opt_config),
                                       opt_config=self.opt_config, metrics=metrics)


def transformer_params(model_config: ModelConfig, seed: Any) -> Any:
  """The parameters of ``model_config`` from ``PRNGKey(seed)``, stacked where the model trains them stacked."""
  return model_lib.init_params(jax.random.PRNGKey(seed), model_config, stacked=model_lib.scans_blocks(model_config))


class FunctionalProgram:
  """What ``run_training`` trains for any model: a ``scaling.mup.user_model.FunctionalModel`` and an optimizer factory.

  Member i starts from ``fm.init(PRNGKey(seed_i))`` and trains with ``optimizer(width, param_shapes,
  learning_rate_i)`` (the rate kept in the state, traced: one program serves every rate). Its metrics at step t
  (measured at the parameters after t updates, on batch t): ``loss``, ``grad_norm``, ``update_norm``,
  ``learning_rate``, and with ``record_outputs`` (the coordinate check) ``rms/<module>`` and ``delta_rms/<module>``,
  the RMS of every module's output and of its change since initialization (the same batch through the initial
  parameters).
  """

  takes_attn_mults = False
  """The model's attention, if any, is its own: no α in the state."""
  logit_alpha = None
  """No logit scale carried in the state (as ``TransformerProgram.logit_alpha``)."""

  def __init__(self, model: Any, optimizer: Callable[[int, Any, Any], optax.GradientTransformation], *,
               record_outputs: bool = False):
    if not all(hasattr(model, a) for a in ("init", "loss", "captured", "width")):
      raise ConfigTypeError(f"model must be a scaling.mup.user_model.FunctionalModel, got {type(model).__name__}")
    if not callable(optimizer):
      raise ConfigTypeError(f"optimizer must be a function optimizer(width, params, learning_rate), got {optimizer!r}")
    self.model = model
    self.optimizer = optimizer
    self.record_outputs = bool(record_outputs)
    self.shapes = user_model.abstract_params(model)

  @property
  def width(self) -> int:
    return self.model.width

  def check_dataset(self, dataset: Any) -> None:
    """ConfigTypeError unless ``dataset`` has ``batch(step, seed)``."""
    if not hasattr(dataset, "batch"):
      raise ConfigTypeError(f"dataset must be a batch source with batch(step, seed) (scaling.mup.user_model.Batches, "
                            f"a scaling.training.data.dataset.Dataset), got {type(dataset).__name__}")

  def _tx(self, learning_rate: Any) -> optax.GradientTransformation:
    tx = self.optimizer(self.model.width, self.shapes, learning_rate)
    if not isinstance(tx, optax.GradientTransformation):
      raise ConfigTypeError(f"optimizer(width, params, learning_rate) must return an optax.GradientTransformation, "
                            f"got {type(tx).__name__}")
    return tx

  def with_constants(self, state: state_lib.TrainState) -> state_lib.TrainState:
    return state

  def init_state(self, seed: Any, learning_rate: Any) -> state_lib.TrainState:
    params, model_state = self.model.init(jax.random.PRNGKey(seed))
    learning_rate = jnp.asarray(learning_rate, jnp.float32)
    return state_lib.TrainState(step=jnp.zeros((), jnp.int32), params=params,
                                opt_state=self._tx(learning_rate).init(params), learning_rate=learning_rate,
                                model_state=model_state, initial_params=params if self.record_outputs else None)

  def step(self, state: state_lib.TrainState, batch: Any,
           metrics: Sequence[str] | None = None) -> tuple[state_lib.TrainState, dict[str, Array]]:
    fm = self.model
    values = {}
    if self.record_outputs:
      (loss, outs), grads = jax.value_and_grad(fm.captured, has_aux=True)(state.params, state.model_state, batch)
      _, outs0 = fm.captured(state.initial_params, state.model_state, batch)
      values.update({f"rms/{k}": _rms(v) for k, v in outs.items()})
      values.update({f"delta_rms/{k}": _rms(v - outs0[k]) for k, v in outs.items()})
    else:
      loss, grads = jax.value_and_grad(fm.loss)(state.params, state.model_state, batch)
    updates, opt_state = self._tx(state.learning_rate).update(grads, state.opt_state, state.params)
    values.update(loss=jnp.asarray(loss, jnp.float32), grad_norm=optax.tree.norm(grads),
                  update_norm=optax.tree.norm(updates), learning_rate=state.learning_rate)
    values = state_lib.select_metrics(values, metrics)
    return state.replace(step=state.step + 1, params=optax.apply_updates(state.params, updates),
                         opt_state=opt_state), values


def _rms(x: Array) -> Array:
  x = jnp.asarray(x, jnp.float32)
  return jnp.sqrt(jnp.mean(jnp.square(x)))


Program = TransformerProgram | FunctionalProgram


SHARED_RULE = rules_lib.FixedScale()
"""The rule of every program whose model's rule is only a logit factor (``model.logit_multiplier``): its α/d_head
comes from the state, so these models compile one step program between them."""


def as_program(model: Any, opt_config: OptimizerConfig | None = None) -> Program:
  """The program that trains ``model``.

  A model whose rule is only a logit factor (none, sqrt, linear, temperature, ...; ``model.logit_multiplier``) gets
  ``SHARED_RULE`` in the program and its α in ``logit_alpha`` (the state's ``attn_mult``): the same function, one
  compiled program for all such rules.

  Args:
    model: a ``ModelConfig`` (the built-in Transformer) or a program (``TransformerProgram``, ``FunctionalProgram``).
    opt_config: the optimizer of a ``ModelConfig``.

  Returns:
    ``model`` if it is a program, else the ``TransformerProgram`` of the ``ModelConfig`` and ``opt_config``.
  """
  if isinstance(model, (TransformerProgram, FunctionalProgram)):
    return model
  if isinstance(model, ModelConfig):
    if not isinstance(opt_config, OptimizerConfig):
      raise ConfigTypeError(f"opt_config must be a OptimizerConfig, got {type(opt_config).__name__}")
    alpha = model_config_lib.logit_multiplier(model)
    if alpha is None:
      return TransformerProgram(model, opt_config)
    return TransformerProgram(dataclasses.replace(model, rule=SHARED_RULE), opt_config, logit_alpha=alpha)
  raise ConfigTypeError(f"model must be a scaling.training.model.config.ModelConfig or a training program "
                        f"(TransformerProgram, FunctionalProgram), got {type(model).__name__}")
