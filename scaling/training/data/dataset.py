"""The data sources' common form: next-token batches drawn from explicit keys, and the ``Dataset`` base class.

Every data source yields batches in next-token language-modelling format, so one
loss serves them all::

    {"inputs":  int32   [B, T],   # tokens seen by the model
     "targets": int32   [B, T],   # the next token: sequence[t + 1] for inputs sequence[t]
     "weights": float32 [B, T]}   # 1 where the prediction is scored, 0 elsewhere

Each batch is drawn from a length-(T + 1) sequence s as inputs = s[:-1] and
targets = s[1:] (``lm_batch``). A loss is sum(weights · CE(logits, targets)) / sum(weights).

Randomness is explicit: batch ``step`` of seed ``s`` depends only on
(s, step) through the key ``fold_in(key(s), step)``; evaluation batch ``i``
uses ``fold_in(key(s), 2³² − 1 − i)``, a disjoint stream (``batch_key``).
``Dataset.batch`` and ``eval_batch`` are pure and jit-able in ``step`` and
``seed``, so training can ``vmap`` over seeds and ``scan`` over steps; datasets
are pytrees (text tokens are leaves) and can be passed into jitted functions.

The sources are ``scaling.training.data.synthetic_tasks`` (associative recall, induction copying) and
``scaling.training.data.text_corpus`` (character-level text); ``scaling.training.data.config.DataConfig`` builds one
from the options every training study shares.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from scaling.base.validation import ConfigError

Array = jax.Array
Batch = dict[str, Array]

TRAIN_STREAM = 0
EVAL_STREAM = 1


def batch_key(seed: int | Array, step: int | Array, stream: int | Array = TRAIN_STREAM) -> Array:
  """The PRNG key of batch ``step`` of ``seed``: fold_in(key(seed), step).

  Evaluation batch i uses fold_in(key(seed), 2³² − 1 − i), so the two streams
  never share a key while step + i < 2³².
  """
  step = jnp.asarray(step).astype(jnp.uint32)
  data = jnp.where(jnp.asarray(stream) == EVAL_STREAM, ~step, step)
  return jax.random.fold_in(jax.random.key(seed), data)


def lm_batch(sequences: Array, weights: Array) -> Batch:
  """Splits sequences [B, T + 1] into the batch dict, with weights [T] or [B, T]."""
  b, t1 = sequences.shape
  sequences = sequences.astype(jnp.int32)
  return {
      "inputs": sequences[:, :-1],
      "targets": sequences[:, 1:],
      "weights": jnp.broadcast_to(weights.astype(jnp.float32), (b, t1 - 1)),
  }


@struct.dataclass
class Dataset:
  """A data source: ``batch(step, seed)`` for training, ``eval_batch(i)`` for held-out data.

  Attributes:
    seq_len: T.
    batch_size: B.
    vocab_size: V, the model's vocabulary size.
    seed: the default seed of ``batch`` and ``eval_batch``.
  """

  name: ClassVar[str] = ""
  seq_len: int = struct.field(pytree_node=False)
  batch_size: int = struct.field(pytree_node=False)
  vocab_size: int = struct.field(pytree_node=False)
  seed: int = struct.field(pytree_node=False)

  def sample(self, key: Array, stream: Array) -> Batch:
    """The batch for a PRNG key; stream (possibly traced) is TRAIN_STREAM or EVAL_STREAM."""
    raise NotImplementedError

  def batch(self, step: int | Array, seed: int | Array | None = None) -> Batch:
    """Training batch ``step`` of ``seed`` (default ``self.seed``): pure, jit-able and vmappable in both."""
    return self._draw(step, seed, TRAIN_STREAM)

  def eval_batch(self, i: int | Array, seed: int | Array | None = None) -> Batch:
    """Held-out batch ``i``: an evaluation key stream (synthetic) or the validation split (text)."""
    return self._draw(i, seed, EVAL_STREAM)

  def _draw(self, step: int | Array, seed: int | Array | None, stream: int) -> Batch:
    """Calls the compiled sampler with int32 step and seed (one compilation per configuration)."""
    seed = self.seed if seed is None else seed
    if isinstance(step, (int, np.integer)) and not 0 <= step < 2**31:
      raise ConfigError(f"step must be in [0, 2**31), got {step}")
    # The default seed is not part of the compiled configuration.
    return _draw(self.replace(seed=0), jnp.asarray(step, jnp.int32), jnp.asarray(seed, jnp.int32),
                 jnp.asarray(stream, jnp.int32))

  @property
  def chance_accuracy(self) -> float | None:
    """Accuracy on the scored positions of the best context-free guess (None when undefined)."""
    return None


@jax.jit
def _draw(dataset: Dataset, step: Array, seed: Array, stream: Array) -> Batch:
  """Batch ``step`` of ``seed`` in ``stream``, compiled once per dataset configuration."""
  return dataset.sample(batch_key(seed, step, stream), stream)


def describe(dataset: Dataset) -> dict[str, Any]:
  """A JSON-ready summary of a dataset's configuration (for result files)."""
  out = {"name": dataset.name}
  for field in dataclasses.fields(dataset):
    value = getattr(dataset, field.name)
    if field.name == "tokens":
      out["num_tokens"] = int(value.shape[0])
    elif field.name != "chars":
      out[field.name] = value
  out["chance_accuracy"] = dataset.chance_accuracy
  return out
