"""Training checkpoints through orbax-checkpoint: the train state, the data position and the RNG of a run.

A checkpoint after n updates holds the ``TrainState`` (params, optimizer state
and the step n), the run's data key and a small JSON record. The data needs no
state of its own: batch t of a run is drawn from ``batch_key(seed, t)``
(``scaling.training.data``), so the step is the data position, the next batch to draw
is batch n, and the key ``jax.random.key(seed)`` is the whole RNG (the
initialization, ``PRNGKey(seed)``, is not needed again). The JSON record keeps
what the loop needs beyond the state: the step-0 loss that divergence is
judged against.

Orbax writes each checkpoint into a temporary folder and renames it when
complete, so a run killed while saving leaves the previous checkpoint intact.
In a job of several processes (``--distributed``) every process writes its
shards of a checkpoint and process 0 renames the folder once all are written
(orbax's barriers); which checkpoint a rerun resumes from is process 0's choice
(``latest_step``), the same on every process even when one saw a save the
others did not finish.
"""

from __future__ import annotations

import pathlib
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from scaling.runs import distributed
from scaling.base.validation import ConfigError


def _key_data(seed: int) -> np.ndarray:
  """The raw uint32 data of the run's data key ``jax.random.key(seed)``, as a host array (the same on every
  process, so that a multi-process job saves it once)."""
  return np.asarray(jax.random.key_data(jax.random.key(seed)))


class Checkpoints:
  """The checkpoints of one training run in ``directory`` (the newest ``max_to_keep`` are kept).

  Saving is synchronous, so a checkpoint is complete on disk when ``save`` returns.
  """

  def __init__(self, directory: str | pathlib.Path, max_to_keep: int = 2):
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
    tree = {"train_state": state, "data_key": _key_data(seed)}
    self.manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(tree), meta=ocp.args.JsonSave(meta)))
    self.manager.wait_until_finished()

  def restore(self, target: Any, *, seed: int, step: int | None = None) -> tuple[Any, dict[str, Any]]:
    """Restores the checkpoint at ``step`` (default: the newest) into the structure and dtypes of ``target``.

    Args:
      target: a train state of the same model and optimizer (e.g. a fresh one).
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
    abstract = {"train_state": jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
                                            target),
                "data_key": _key_data(seed)}
    out = self.manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract),
                                                             meta=ocp.args.JsonRestore()))
    key = np.asarray(out["state"]["data_key"])
    if out["meta"]["seed"] != seed or not np.array_equal(key, np.asarray(_key_data(seed))):
      raise ConfigError(f"the checkpoint at step {step} was made with seed {out['meta']['seed']}, not {seed}")
    return out["state"]["train_state"], dict(out["meta"])

  def close(self) -> None:
    """Waits for pending writes and releases the manager."""
    self.manager.close()
