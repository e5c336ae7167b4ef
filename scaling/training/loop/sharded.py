"""A single run laid out on several devices: its batch split over them, its state replicated or sharded (FSDP).

``make_sharded_run`` gives the init, the batches and the step of such a run (each compiled once per layout);
``make_run_init`` the init of a single run on whatever devices there are, laid out as the training loop lays it out.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp

from scaling.base import compilation
from scaling.training.optimizer import OptimizerConfig
from scaling.training.loop import initialization as init_lib
from scaling.training.loop import programs as programs_lib
from scaling.training import sharding as sharding_lib


def _sharded_init(program: programs_lib.Program, mesh: jax.sharding.Mesh,
                  shard_params: bool) -> tuple[init_lib.InitFn, Any]:
  """``_sharded_init_of`` of a program, keyed by its α."""
  return _sharded_init_of(program, mesh, shard_params, program.logit_alpha)


@functools.lru_cache(maxsize=16)
def _sharded_init_of(program: programs_lib.Program, mesh: jax.sharding.Mesh, shard_params: bool,
                     alpha: float | None) -> tuple[init_lib.InitFn, Any]:
  """(init, state sharding) of a single run laid out on ``mesh``: the state replicated, or with ``shard_params``
  every array split along its largest axis that divides the device count (FSDP: moments follow their parameters);
  ``alpha`` keys the cache (``program.with_constants`` adds it inside the program)."""
  del alpha
  init_state = lambda seed, learning_rate: program.with_constants(program.init_state(seed, learning_rate))
  state_shapes = jax.eval_shape(init_state, 0, jnp.float32(1.0))
  if shard_params:
    state_sharding = sharding_lib.fsdp_shardings(state_shapes, mesh)
  else:
    state_sharding = jax.tree.map(lambda _: sharding_lib.replicated(mesh), state_shapes)
  return compilation.jit(init_state, out_shardings=state_sharding), state_sharding


def make_sharded_run(program: programs_lib.Program, batch: Any, mesh: jax.sharding.Mesh,
                     shard_params: bool) -> tuple[Callable, Callable, Callable]:
  """(init, batch_of, step) of a single run laid out on ``mesh`` (each part cached).

  The batch's leading axes are split over the mesh (replicated where they do not divide the device count); the
  state as ``_sharded_init`` lays it out.

  Args:
    program: the training program.
    batch: the shapes of one batch (a tree of ``jax.ShapeDtypeStruct``, e.g. ``jax.eval_shape`` of
      ``dataset.batch``).
    mesh: the devices.
    shard_params: FSDP instead of replicated parameters.

  Returns:
    ``init(seed, learning_rate)`` -> TrainState, ``batch_of(dataset, step, seed)`` -> Batch and the jitted train
    step, each producing arrays with these layouts.
  """
  init, state_sharding = _sharded_init(program, mesh, shard_params)
  leaves, treedef = jax.tree.flatten(batch)
  batch_of, step = _sharded_step(program, mesh, shard_params, treedef, tuple(tuple(x.shape) for x in leaves))
  return init, batch_of, step


@functools.lru_cache(maxsize=16)
def _sharded_step(program: programs_lib.Program, mesh: jax.sharding.Mesh, shard_params: bool, treedef: Any,
                  shapes: tuple[tuple[int, ...], ...]) -> tuple[Callable, Callable]:
  """(batch_of, step) of ``make_sharded_run`` for one batch layout."""
  _, state_sharding = _sharded_init(program, mesh, shard_params)
  batch_sharding = jax.tree.unflatten(
      treedef, [jax.sharding.NamedSharding(mesh, sharding_lib.batch_spec(shape, mesh.size)) for shape in shapes])
  batch_of = compilation.jit(lambda ds, t, seed: ds.batch(t, seed), out_shardings=batch_sharding)
  step = compilation.jit(program.step, in_shardings=(state_sharding, batch_sharding),
                         out_shardings=(state_sharding, sharding_lib.replicated(mesh)))
  return batch_of, step


def clear_caches() -> None:
  """Forgets the inits and steps of ``make_sharded_run``: the next call builds and compiles them anew."""
  for cached in (_sharded_init_of, _sharded_step):
    cached.cache_clear()


def make_run_init(model_config: Any, opt_config: OptimizerConfig | None = None, *,
                  shard_params: bool = False) -> init_lib.InitFn:
  """The init of a single run, laid out on the devices as ``scaling.training.loop.run.run_training`` lays it out (so a
  checkpoint restored into its shape continues on the same layout, on one process or several).

  Args:
    model_config: a ``ModelConfig`` (with ``opt_config``) or a training program.
    opt_config: the optimizer of a ``ModelConfig``.
    shard_params: the run's ``RunOptions.shard_params``.

  Returns:
    (seed, learning_rate) -> TrainState.
  """
  program = programs_lib.as_program(model_config, opt_config)
  mesh = sharding_lib.make_mesh()
  if mesh.size > 1 or shard_params:
    return _sharded_init(program, mesh, shard_params)[0]
  return init_lib.make_init(program)
