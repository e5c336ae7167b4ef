"""The initial training state of a program: jitted inits of a single run or of a grid's members.

One compiled init of a single member serves every grid size (on one device a grid's members are initialized one by
one and stacked), and a model's parameters come from one program shared by every optimizer.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from scaling.base import compilation
from scaling.training.optimizer import OptimizerConfig
from scaling.training.model.config import ModelConfig
from scaling.training.loop import programs as programs_lib
from scaling.training import sharding as sharding_lib
from scaling.training.loop import state as state_lib

InitFn = Callable[[Any, Any], state_lib.TrainState]
"""An init: (seed, learning_rate) -> TrainState (of [M] seeds and rates for a grid)."""


def init_train_state(seed: Any, model_config: ModelConfig, opt_config: OptimizerConfig,
                     learning_rate: Any = None) -> state_lib.TrainState:
  """The initial state of one run of the built-in Transformer, not jitted (``make_init`` is).

  Args:
    seed: the parameters are drawn from ``PRNGKey(seed)``.
    model_config: the model.
    opt_config: its optimizer.
    learning_rate: the peak learning rate in the optimizer state; None: ``opt_config.learning_rate``.

  Returns:
    The parameters and the optimizer state; a rule that is only a logit factor puts its α in ``attn_mult``
    (``model.logit_multiplier``: one program for such rules).
  """
  program = programs_lib.as_program(model_config, opt_config)
  lr = opt_config.learning_rate if learning_rate is None else learning_rate
  return program.with_constants(program.init_state(seed, lr))


def make_init(model_config: Any, opt_config: OptimizerConfig | None = None, *,
              grid: bool = False) -> InitFn:
  """The jitted init of a program.

  Args:
    model_config: a ``ModelConfig`` (with ``opt_config``) or a training program (``scaling.training.loop.programs``).
    opt_config: the optimizer of a ``ModelConfig``.
    grid: initialize [M] members from [M] seeds and learning rates.

  Returns:
    (seed, learning_rate) -> TrainState (cached per program).
  """
  program = programs_lib.as_program(model_config, opt_config)
  return _make_init(program, grid, program.logit_alpha)


@functools.lru_cache(maxsize=64)
def member_init(program: programs_lib.Program) -> InitFn:
  """The init of one member, without the values of ``with_constants`` (shared by every α of a program).

  The built-in Transformer's parameters come from one jitted program per model (``_params_init``: the same for every
  optimizer, so grids that differ only in their optimizer share it) and its optimizer state from the optimizer's init
  run op by op (zeros and counters: nothing worth a program of its own); any other program's init is one jitted
  program.

  Args:
    program: the training program.

  Returns:
    (seed, learning_rate) -> TrainState, whose ``lower(seed, learning_rate)`` lowers the one program either way.
  """
  if isinstance(program, programs_lib.TransformerProgram):
    params = _params_init(program.model_config)
    init = lambda seed, learning_rate: program.state_from_params(params(seed), learning_rate)
    init.lower = lambda seed, learning_rate: params.lower(seed)  # its one program, lowered (as jax.jit's ``lower``)
    return init
  return compilation.jit(program.init_state)


@functools.lru_cache(maxsize=64)
def _params_init(model_config: ModelConfig) -> Callable[[Any], Any]:
  """The jitted seed -> parameters of a model (``programs.transformer_params``)."""
  return compilation.jit(functools.partial(programs_lib.transformer_params, model_config))


@functools.lru_cache(maxsize=64)
def _make_init(program: programs_lib.Program, grid: bool, alpha: float | None) -> InitFn:
  """One compiled init of a single member; on one device a grid's members are initialized one by one and stacked.

  So one init program serves every grid size, and (with the values of ``with_constants`` added outside it) every
  model of the same parameters: the persistent compilation cache then serves all of them. The members' states are
  those of the same init vmapped (the same draws).
  """
  del alpha  # part of the cache key only: ``program.with_constants`` adds it
  single = member_init(program)
  if not grid:
    return lambda seed, learning_rate: program.with_constants(single(seed, learning_rate))
  if jax.device_count() > 1:  # members split over devices (and hosts): one vmapped program lays them out
    vmapped = compilation.jit(jax.vmap(program.init_state), out_shardings=sharding_lib.leading())
    return lambda seeds, learning_rates: program.with_constants(vmapped(seeds, learning_rates))

  def init(seeds: Any, learning_rates: Any) -> state_lib.TrainState:
    if not any(isinstance(x, jax.core.Tracer) for x in (seeds, learning_rates)):  # host scalars: one program
      seeds, learning_rates = np.asarray(seeds, np.int32), np.asarray(learning_rates, np.float32)
    states = [single(seed, lr) for seed, lr in zip(seeds, learning_rates)]
    if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(states)):  # traced (eval_shape, jit)
      stacked = jax.tree.map(lambda *leaves: jnp.stack(leaves), *states)
    else:  # stacked on the host: no compiled stack per grid size
      stacked = jax.tree.map(lambda *leaves: np.stack(leaves), *jax.device_get(states))
    return program.with_constants(jax.device_put(stacked, sharding_lib.leading()))

  return init


def clear_caches() -> None:
  """Forgets the inits of ``make_init`` and ``member_init``: the next call builds and compiles them anew."""
  for cached in (_make_init, member_init, _params_init):
    cached.cache_clear()
