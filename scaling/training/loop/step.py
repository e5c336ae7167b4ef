"""The jitted train step of a program, for a single run or over a grid's leading member axis, and a grid's batches.

A grid's members are vmapped all at once or a few at a time (``default_grid_chunk``: the measured rule below); the
learning rate lives in each member's state, so every member shares one compiled step.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax

from scaling.base import compilation
from scaling.training.optimizer import OptimizerConfig
from scaling.training.loop import programs as programs_lib
from scaling.training import sharding as sharding_lib
from scaling.training.loop import state as state_lib

Array = jax.Array
StepFn = Callable[[state_lib.TrainState, state_lib.Batch], tuple[state_lib.TrainState, dict[str, Array]]]
"""A train step: (state, batch) -> (new state, metrics)."""


# A grid's members vmapped all at once or a few at a time (``jax.lax.map`` over chunks of ``grid_chunk`` members,
# each chunk vmapped; one compiled body either way). Per-step time of a 16-member grid (8 learning rates x 2 seeds,
# depth 2, 2 heads, batch 8 x 32 tokens unless given; 2-core CPU, one device; best of 5 interleaved rounds of 30
# steps), ``Runs(chunk=c)`` over all at once's, and a loop of the 16 separate runs (each its own
# compiled step, as the train benchmark times it):
#
#   width (batch)   chunk 1  chunk 2  chunk 4  chunk 8  all 16 (ms)   loop of runs
#   32                 1.09     0.99     1.00     0.90     1.00 (37)        1.01
#   64                 0.80     0.73     0.82     0.83     1.00 (86)        0.87
#   64 (batch 32)      0.78     0.63     0.69     0.81     1.00 (238)       0.68
#   128                1.17     0.92     0.98     1.03     1.00 (175)       0.93
#
# Wider, all at once was the fastest: chunks of 2 took 1.12-1.15x its time at width 256 (411-428 ms), and with the
# chunks unrolled in one program every chunk size from 1 to 8 took 1.07-1.11x at width 192. So on one CPU device a
# grid of more than GRID_CHUNK members of a model up to GRID_CHUNK_MAX_WIDTH wide runs GRID_CHUNK members at a time;
# otherwise (several devices, which split the members between them, or an accelerator) all at once. Chunks change
# only the order of float rounding: a member's losses agree with all at once's to about 1e-6 relative.
GRID_CHUNK = 2
"""Members vmapped together per chunk of a small model's grid step on one CPU device (``default_grid_chunk``)."""
GRID_CHUNK_MAX_WIDTH = 128
"""The widest model whose grid runs in chunks of ``GRID_CHUNK`` by default."""


def default_grid_chunk(model_config: Any, members: int, *, backend: str | None = None,
                       devices: int = 1) -> int | None:
  """How many of a grid's ``members`` its step vmaps together by default (the measured rule above).

  Args:
    model_config: the model (a ``ModelConfig`` or a training program: anything with its ``width``).
    members: the grid's members (after padding to the device count).
    backend: "cpu", "gpu" or "tpu"; None = ``jax.default_backend()``.
    devices: the devices the members are split over.

  Returns:
    ``GRID_CHUNK`` on one CPU device for a model up to ``GRID_CHUNK_MAX_WIDTH`` wide with more members than that,
    else None (all at once); the ``chunk`` of ``make_train_step``.
  """
  backend = jax.default_backend() if backend is None else backend
  if backend == "cpu" and devices == 1 and model_config.width <= GRID_CHUNK_MAX_WIDTH and members > GRID_CHUNK:
    return GRID_CHUNK
  return None


def _chunked(step: StepFn, chunk: int | None) -> StepFn:
  """``step`` over a leading member axis: vmapped all at once, or ``chunk`` members at a time (``lax.map``)."""
  def grid_step(state, batch):
    members = jax.tree.leaves(state)[0].shape[0]
    if chunk is None or chunk >= members:
      return jax.vmap(step)(state, batch)
    return jax.lax.map(lambda member: step(*member), (state, batch), batch_size=chunk)
  return grid_step


def make_train_step(model_config: Any, opt_config: OptimizerConfig | None = None, *,
                    grid: bool = False, metrics: tuple[str, ...] | None = None, donate: bool = False,
                    chunk: int | None = None) -> StepFn:
  """The training step of a program (``transformer_step.train_step`` for the built-in model), jitted, vmapped over
  a leading grid axis when ``grid``.

  A grid's outputs keep the grid axis split over all devices (``scaling.training.sharding``).

  Args:
    model_config: the model (a ``ModelConfig``, with ``opt_config``) or a training program (``FunctionalProgram``).
    opt_config: the optimizer of a ``ModelConfig``.
    grid: vmap over a leading axis of (state, batch).
    metrics: the metrics the step returns (None: all; see ``transformer_step.train_step``).
    donate: the step takes over the buffers of the state it is given (``donate_argnums``): the new
      parameters and optimizer state are written in place, and the old state must not be used again.
    chunk: a grid's members vmapped together: None (or at least the members) all at once, else this many at a
      time (``jax.lax.map`` with ``batch_size``; see ``default_grid_chunk``).

  Returns:
    The jitted ``(state, batch) -> (new state, metrics)``; the same configs return the same function (cached,
    however the arguments are passed).
  """
  return _jitted_train_step(programs_lib.as_program(model_config, opt_config), grid, metrics, donate, chunk)


@functools.lru_cache(maxsize=64)
def _jitted_train_step(program: programs_lib.Program, grid: bool, metrics: tuple[str, ...] | None, donate: bool,
                       chunk: int | None) -> StepFn:
  """``make_train_step``'s function, cached by its arguments in one order."""
  fn = functools.partial(program.step, metrics=metrics)
  donated = (0,) if donate else ()
  if grid:
    return compilation.jit(_chunked(fn, chunk), out_shardings=sharding_lib.leading(), donate_argnums=donated)
  return compilation.jit(fn, donate_argnums=donated)


def clear_caches() -> None:
  """Forgets the jitted steps of ``make_train_step``: the next call builds and compiles them anew."""
  _jitted_train_step.cache_clear()


def grid_batches(dataset: Any, step: Any, seeds: Array) -> state_lib.Batch:
  """Batch ``step`` of each seed of a grid.

  Args:
    dataset: the batch source (``batch(step, seed)``).
    step: the step whose batch to draw.
    seeds: [M], one per member.

  Returns:
    {inputs, targets, weights} [M, B, T], split over the devices like ``seeds``.
  """
  return _grid_batches(sharding_lib.make_mesh())(dataset, step, seeds)


@functools.lru_cache(maxsize=4)
def _grid_batches(mesh: jax.sharding.Mesh) -> Callable[[Any, Any, Array], state_lib.Batch]:
  """The jitted ``grid_batches`` for ``mesh`` (compiled once per dataset config)."""
  return compilation.jit(lambda dataset, step, seeds: jax.vmap(lambda s: dataset.batch(step, s))(seeds),
                         out_shardings=sharding_lib.leading(mesh))
