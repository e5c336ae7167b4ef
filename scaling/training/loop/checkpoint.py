"""Training checkpoints through orbax-checkpoint: the train state, the data position and the RNG of a run.

A checkpoint after n updates holds the ``TrainState`` (params, optimizer state
and the step n), the run's data key and a small JSON record. The data needs no
state of its own: batch t of a run is drawn from ``batch_key(seed, t)``
(``scaling.training.data``), so the step is the data position, the next batch to draw
is batch n, and the key ``jax.random.key(seed)`` is the whole RNG (the
initialization, ``PRNGKey(seed)``, is not needed again). The JSON record keeps
what the loop needs beyond the state: the step-0 loss that divergence is
judged against.

A checkpoint keeps one ``block_{i}`` per block, whatever layout the run trained in: a scanned model trains its blocks'
parameters stacked (``scaling.training.model.scanned_blocks.stack_blocks``), and ``Checkpoints`` given the model's
depth saves them unstacked, in the parameters and in every tree of the optimizer state keyed like them (Adam's
moments, the per-parameter multipliers), and stacks them back when the state it restores into is stacked. So a run
with ``--scan_layers=false`` resumes from a scanned run's checkpoint, and the other way round.

Orbax writes each checkpoint into a temporary folder and renames it when
complete, so a run killed while saving leaves the previous checkpoint intact.
In a job of several processes (``--distributed``) every process writes its
shards of a checkpoint and process 0 renames the folder once all are written
(orbax's barriers); which checkpoint a rerun resumes from is process 0's choice
(``latest_step``), the same on every process even when one saw a save the
others did not finish.
"""

from __future__ import annotations

import functools
import pathlib
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from scaling.base import compilation
from scaling.runs import distributed
from scaling.base import validation
from scaling.base.validation import ConfigError
from scaling.training.model import scanned_blocks


def _key_data(seed: int) -> np.ndarray:
  """The raw uint32 data of the run's data key ``jax.random.key(seed)``, as a host array (the same on every
  process, so that a multi-process job saves it once)."""
  return np.asarray(jax.random.key_data(jax.random.key(seed)))


def _keyed_like(keys: set[str]):
  """Whether a node of a state is a dict with exactly ``keys`` (a tree keyed like the parameters)."""
  return lambda node: isinstance(node, dict) and set(node) == keys


def per_block_state(state: Any, depth: int) -> Any:
  """``state`` with one ``block_{i}`` per block (``scanned_blocks.unstack_blocks``) in its parameters and in every
  tree keyed like them (the optimizer's moments and per-parameter values); as given if its parameters are not stacked.

  Args:
    state: a ``TrainState`` of a model of ``depth`` blocks; its leaves may be arrays or ``jax.ShapeDtypeStruct``.
    depth: the model's number of blocks.

  Returns:
    The state in the layout of the model's unrolled blocks.
  """
  if not scanned_blocks.is_stacked(state.params, depth):
    return state
  like = _keyed_like(set(state.params))
  return jax.tree.map(lambda node: scanned_blocks.unstack_blocks(node, depth) if like(node) else node, state,
                      is_leaf=like)


def stacked_state(state: Any, depth: int, target: Any) -> Any:
  """``state`` (one ``block_{i}`` per block) in the stacked layout of ``target`` (``scanned_blocks.stack_blocks``):
  the inverse of ``per_block_state``.

  Args:
    state: a ``TrainState`` with one ``block_{i}`` per block.
    depth: the model's number of blocks.
    target: the same state stacked (arrays or ``jax.ShapeDtypeStruct``): a leaf it holds without the depth axis (a
      value every block shares, as the optimizer's per-parameter multipliers) takes ``block_0``'s.

  Returns:
    ``state`` stacked as ``target`` is.
  """
  like = _keyed_like(set(state.params))
  stacked = jax.tree.map(lambda node: scanned_blocks.stack_blocks(node, depth) if like(node) else node, state,
                         is_leaf=like)
  return jax.tree.map(lambda x, t: x if x.ndim == len(t.shape) else x[0], stacked, target)


_per_block_state = jax.jit(per_block_state, static_argnums=1)
"""``per_block_state`` as one compiled program (a multi-process job's arrays are sliced where they lie)."""


class Checkpoints:
  """The checkpoints of one training run in ``directory`` (the newest ``max_to_keep`` are kept).

  Saving is synchronous, so a checkpoint is complete on disk when ``save`` returns. Given the model's ``depth``, a
  state whose blocks train stacked is saved with one ``block_{i}`` per block (``per_block_state``) and restored
  stacked into a stacked target, so checkpoints of scanned and unrolled runs are interchangeable.

  Args:
    directory: the folder of the checkpoints.
    max_to_keep: how many of the newest checkpoints are kept.
    depth: the model's number of blocks; None: states are saved and restored in the layout they have (for models
      without stacked blocks).
  """

  def __init__(self, directory: str | pathlib.Path, max_to_keep: int = 2, *, depth: int | None = None):
    if depth is not None:
      validation.check_positive_int("depth", depth)
    self.depth = depth
    options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, enable_async_checkpointing=False,
                                           cleanup_tmp_directories=True)
    self.manager = ocp.CheckpointManager(pathlib.Path(directory).absolute(), options=options)

  def latest_step(self) -> int | None:
    """The number of updates of the newest complete checkpoint, or None; in a job of several processes, the one
    process 0 finds (``scaling.runs.distributed.agree``), so that every process restores the same step."""
    step = self.manager.latest_step()
    step = distributed.agree(-1 if step is None else step)
    return None if step < 0 else step

  def save(self, state: Any, *, seed: int, initial_loss: float) -> None:
    """Saves ``state`` (a ``scaling.training.loop.state.TrainState``) at its step, with the data key and the step-0 loss.

    Args:
      state: the train state after ``state.step`` updates.
      seed: the run's seed (the data key is ``jax.random.key(seed)``; the data position is the step).
      initial_loss: the loss of step 0.
    """
    step = int(state.step)
    meta = {"step": step, "data_position": step, "seed": int(seed), "initial_loss": float(initial_loss)}
    if self._stacked(state):
      state = _per_block_state(state, self.depth)
    tree = {"train_state": state, "data_key": _key_data(seed)}
    self.manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(tree), meta=ocp.args.JsonSave(meta)))
    self.manager.wait_until_finished()

  def restore(self, target: Any, *, seed: int, step: int | None = None) -> tuple[Any, dict[str, Any]]:
    """Restores the checkpoint at ``step`` (default: the newest) into the structure, dtypes and shardings of ``target``.

    Args:
      target: a train state of the same model and optimizer (e.g. a fresh one), its blocks stacked or not.
      seed: the run's seed; a checkpoint whose data key differs is refused.
      step: which checkpoint.

    Returns:
      (state, record): the restored ``TrainState`` and the JSON record (step, data_position, seed, initial_loss).

    Raises:
      ValueError: no checkpoint, or one made with another seed.
    """
    step = self.latest_step() if step is None else step
    if step is None:
      raise ConfigError(f"no checkpoint in {self.manager.directory}")
    like = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), target)
    stacked = self._stacked(target)
    abstract = {"train_state": per_block_state(like, self.depth) if stacked else like, "data_key": _key_data(seed)}
    out = self.manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract),
                                                             meta=ocp.args.JsonRestore()))
    key = np.asarray(out["state"]["data_key"])
    if out["meta"]["seed"] != seed or not np.array_equal(key, np.asarray(_key_data(seed))):
      raise ConfigError(f"the checkpoint at step {step} was made with seed {out['meta']['seed']}, not {seed}")
    state = out["state"]["train_state"]
    if stacked:
      stack = compilation.jit(functools.partial(stacked_state, depth=self.depth, target=like),
                              out_shardings=jax.tree.map(lambda x: x.sharding, like))
      state = stack(state)
    return state, dict(out["meta"])

  def _stacked(self, state: Any) -> bool:
    """Whether ``state``'s blocks are stacked (``scanned_blocks.is_stacked``) for this run's depth."""
    return self.depth is not None and scanned_blocks.is_stacked(state.params, self.depth)

  def close(self) -> None:
    """Waits for pending writes and releases the manager."""
    self.manager.close()
