"""Synthetic tasks that need sharp attention: associative recall and induction copying.

* ``RecallTask``, associative recall (Ba et al. 2016, "Using Fast Weights to
  Attend to the Recent Past"; the multi-query form of Arora et al. 2023,
  "Zoology", §3). A sequence of P key-value pairs with distinct keys, then Q
  queries, each a key of the context followed by its value::

      k1 v1 k2 v2 ... kP vP  q1 a1 ... qQ aQ  [pad ...]

  Only the answers are scored (weight 1 at the positions whose input is a query
  key). Token 0 is padding, tokens 1..P_k are keys and the rest are values
  (P_k = (V - 1) // 2). Chance: a context-free guess that knows only which
  tokens are values scores 1 / num_values; copying a random value of the
  context scores about 1 / P. Solving it needs two sharp attention steps: a
  previous-token head that writes each key into the position of its value, and
  a head at the query that attends to the one value (among P) whose preceding
  key matches the query, and copies it.

* ``InductionTask``, induction copying (Olsson et al. 2022, "In-context Learning
  and Induction Heads", §2). A random prefix x of length L repeated to fill the
  sequence: x x x...; the scored positions are those whose input lies in a
  repeat (t ≥ L), where the next token is fully determined by the earlier copy.
  The prefix has distinct tokens by default, so the earlier occurrence is
  unique. Chance: 1 / V for a context-free guess; copying a random token of
  the prefix scores 1 / L. Solved by an induction head: a previous-token head
  plus a head at position t attending sharply to position t - L + 1, the token
  after the earlier occurrence of the current token.

``recall_task`` and ``induction_task`` fill in the defaults of the sizes that
``scaling.training.data.config.DataConfig`` validated and check that they fit the
task, once; the tasks and their samplers (``recall_batch``, ``induction_batch``)
trust them.
"""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp
from flax import struct

from scaling.base.validation import ConfigError
from scaling.training.data import dataset as dataset_lib

Array = jax.Array

PAD_TOKEN = 0
_MIN_DEFAULT_VOCAB = 64


def default_vocab(min_vocab: int) -> int:
  """The smallest power of two ≥ max(64, min_vocab): a task's vocabulary when none is given."""
  return max(_MIN_DEFAULT_VOCAB, 1 << (min_vocab - 1).bit_length())


def _distinct(bits: Array, k: int) -> Array:
  """k distinct values of 0..n-1 per row of random bits [rows, n]: the first k of a random order.

  The order sorts the 32 random bits of each value (ties, of probability below
  n²/2³³ per row, keep index order).
  """
  return jnp.argsort(bits, axis=1)[:, :k].astype(jnp.int32)


def _below(bits: Array, n: int | Array) -> Array:
  """Random bits → integers uniform on 0..n-1 up to a relative bias below n/2³², int32."""
  return (bits % jnp.asarray(n, jnp.uint32)).astype(jnp.int32)


# ----------------------------------------------------------------------------
# Associative recall.


def recall_vocab_split(vocab_size: int) -> tuple[int, int]:
  """(num_keys, num_values) for a recall vocabulary: token 0 pads, keys 1..num_keys, values after."""
  num_keys = (vocab_size - 1) // 2
  return num_keys, vocab_size - 1 - num_keys


def recall_min_vocab(num_pairs: int) -> int:
  """The smallest vocabulary with num_pairs distinct keys and at least two values."""
  return max(2 * num_pairs + 1, 5)


def recall_split(seq_len: int, num_pairs: int | None, num_queries: int | None) -> tuple[int, int]:
  """(num_pairs, num_queries): the (T + 1) // 2 slots of a sequence, split evenly, or the slots the given one leaves.

  ``check_recall`` then tells whether they fit.
  """
  slots = (seq_len + 1) // 2
  if num_pairs is None and num_queries is None:
    num_queries = max(1, slots // 2)
    if slots < 2:
      raise ConfigError(f"recall needs seq_len >= 3 (one pair and one query), got seq_len={seq_len}")
  if num_queries is None:
    num_queries = max(1, slots - num_pairs)
  if num_pairs is None:
    num_pairs = max(1, slots - num_queries)
  return num_pairs, num_queries


def check_recall(seq_len: int, vocab_size: int, num_pairs: int, num_queries: int) -> None:
  """Raises ValueError unless a recall task of these (positive) sizes fits in seq_len and vocab_size."""
  needed = 2 * (num_pairs + num_queries) - 1
  if seq_len < needed:
    raise ConfigError(
        f"recall with num_pairs={num_pairs} and num_queries={num_queries} needs "
        f"seq_len >= 2*(num_pairs+num_queries)-1 = {needed}, got seq_len={seq_len}")
  if vocab_size < recall_min_vocab(num_pairs):
    raise ConfigError(
        f"recall with num_pairs={num_pairs} needs vocab_size >= {recall_min_vocab(num_pairs)} "
        f"(pad + {num_pairs} distinct keys + values), got vocab_size={vocab_size}")


def recall_batch(key: Array, *, batch_size: int, seq_len: int, vocab_size: int,
                 num_pairs: int, num_queries: int = 1) -> dataset_lib.Batch:
  """One batch of multi-query associative recall.

  Sequence layout (length T + 1, T = seq_len):
  ``k1 v1 ... kP vP q1 a1 ... qQ aQ`` followed by padding (token 0). Keys are
  distinct within a sequence and uniform over the key tokens; values are
  uniform over the value tokens (repeats allowed); each query is a uniformly
  chosen key of the context and its answer that key's value.

  Args:
    key: a PRNG key.
    batch_size: B.
    seq_len: T, the model's input length.
    vocab_size: V (see ``recall_vocab_split``).
    num_pairs: P, key-value pairs in the context.
    num_queries: Q, queries after the context (sizes that ``check_recall`` accepts).

  Returns:
    The batch dict; weights are 1 exactly at the Q positions 2P + 2j whose input
    is a query key (the target is its value).
  """
  num_keys, num_values = recall_vocab_split(vocab_size)
  # One draw of random bits (a single threefry call keeps compilation fast).
  bits = jax.random.bits(key, (batch_size, num_keys + num_pairs + num_queries))
  keys = 1 + _distinct(bits[:, :num_keys], num_pairs)
  values = 1 + num_keys + _below(bits[:, num_keys:num_keys + num_pairs], num_values)
  which = _below(bits[:, num_keys + num_pairs:], num_pairs)
  queries = jnp.take_along_axis(keys, which, axis=1)
  answers = jnp.take_along_axis(values, which, axis=1)
  context = jnp.stack([keys, values], axis=-1).reshape(batch_size, 2 * num_pairs)
  questions = jnp.stack([queries, answers], axis=-1).reshape(batch_size, 2 * num_queries)
  pad = jnp.full((batch_size, seq_len + 1 - 2 * (num_pairs + num_queries)), PAD_TOKEN)
  sequences = jnp.concatenate([context, questions, pad.astype(context.dtype)], axis=1)
  positions = jnp.arange(seq_len)
  query_pos = positions - 2 * num_pairs
  weights = (query_pos >= 0) & (query_pos < 2 * num_queries) & (query_pos % 2 == 0)
  return dataset_lib.lm_batch(sequences, weights)


# ----------------------------------------------------------------------------
# Induction copying.


def induction_min_vocab(prefix_len: int, distinct: bool) -> int:
  """The smallest vocabulary for a prefix of prefix_len tokens (distinct or not)."""
  return max(prefix_len, 2) if distinct else 2


def check_induction(seq_len: int, vocab_size: int, prefix_len: int, distinct: bool) -> None:
  """Raises ValueError unless an induction task of these (positive) sizes fits in seq_len and vocab_size."""
  if prefix_len < 2:
    raise ConfigError(f"induction needs prefix_len >= 2, got prefix_len={prefix_len}")
  if seq_len < prefix_len + 1:
    raise ConfigError(
        f"induction with prefix_len={prefix_len} needs seq_len >= prefix_len+1 = {prefix_len + 1} "
        f"(at least one scored position in the repeat), got seq_len={seq_len}")
  needed = induction_min_vocab(prefix_len, distinct)
  if vocab_size < needed:
    why = f"{prefix_len} distinct prefix tokens" if distinct else "two tokens"
    raise ConfigError(f"induction with prefix_len={prefix_len} and distinct={bool(distinct)} needs "
                      f"vocab_size >= {needed} ({why}), got vocab_size={vocab_size}")


def induction_batch(key: Array, *, batch_size: int, seq_len: int, vocab_size: int,
                    prefix_len: int, distinct: bool = True) -> dataset_lib.Batch:
  """One batch of induction copying: a random prefix repeated, x x x ... (length T + 1).

  Args:
    key: a PRNG key.
    batch_size: B.
    seq_len: T, the model's input length.
    vocab_size: V; prefix tokens are uniform over 0..V-1.
    prefix_len: L, the period of the repeat.
    distinct: draw the prefix without replacement (so every token's earlier
      occurrence is unique); needs V ≥ L (sizes that ``check_induction`` accepts).

  Returns:
    The batch dict; weights are 1 at positions t ≥ L (inputs inside a repeat,
    whose next token equals the one L positions earlier).
  """
  if distinct:
    prefix = _distinct(jax.random.bits(key, (batch_size, vocab_size)), prefix_len)
  else:
    prefix = _below(jax.random.bits(key, (batch_size, prefix_len)), vocab_size)
  sequences = prefix[:, jnp.arange(seq_len + 1) % prefix_len]
  weights = jnp.arange(seq_len) >= prefix_len
  return dataset_lib.lm_batch(sequences, weights)


# ----------------------------------------------------------------------------
# The tasks.


@struct.dataclass
class RecallTask(dataset_lib.Dataset):
  """Multi-query associative recall (see ``recall_batch``)."""

  name: ClassVar[str] = "recall"
  num_pairs: int = struct.field(pytree_node=False, default=1)
  num_queries: int = struct.field(pytree_node=False, default=1)

  def sample(self, key: Array, stream: Array) -> dataset_lib.Batch:
    del stream
    return recall_batch(key, batch_size=self.batch_size, seq_len=self.seq_len,
                        vocab_size=self.vocab_size, num_pairs=self.num_pairs,
                        num_queries=self.num_queries)

  @property
  def chance_accuracy(self) -> float:
    return 1.0 / recall_vocab_split(self.vocab_size)[1]


@struct.dataclass
class InductionTask(dataset_lib.Dataset):
  """Induction copying of a repeated random prefix (see ``induction_batch``)."""

  name: ClassVar[str] = "induction"
  prefix_len: int = struct.field(pytree_node=False, default=2)
  distinct: bool = struct.field(pytree_node=False, default=True)

  def sample(self, key: Array, stream: Array) -> dataset_lib.Batch:
    del stream
    return induction_batch(key, batch_size=self.batch_size, seq_len=self.seq_len,
                           vocab_size=self.vocab_size, prefix_len=self.prefix_len,
                           distinct=self.distinct)

  @property
  def chance_accuracy(self) -> float:
    return 1.0 / self.vocab_size


def recall_task(*, seq_len: int, batch_size: int, vocab_size: int | None, seed: int, num_pairs: int | None = None,
                num_queries: int | None = None) -> RecallTask:
  """The recall task of these positive sizes, its defaults filled in, once checked to fit (``check_recall``).

  Args:
    seq_len, batch_size, seed: T, B and the default seed of the batches.
    vocab_size: V; None: ``default_vocab`` of the task's minimum.
    num_pairs, num_queries: P and Q; None: ``recall_split``'s (the (T + 1) // 2 slots shared evenly).

  Returns:
    The ``RecallTask``.
  """
  num_pairs, num_queries = recall_split(seq_len, num_pairs, num_queries)
  if vocab_size is None:
    vocab_size = default_vocab(recall_min_vocab(num_pairs))
  check_recall(seq_len, vocab_size, num_pairs, num_queries)
  return RecallTask(seq_len=seq_len, batch_size=batch_size, vocab_size=vocab_size, seed=seed,
                    num_pairs=num_pairs, num_queries=num_queries)


def induction_task(*, seq_len: int, batch_size: int, vocab_size: int | None, seed: int, prefix_len: int | None = None,
                   distinct: bool = True) -> InductionTask:
  """The induction task of these positive sizes, its defaults filled in, once checked to fit (``check_induction``).

  Args:
    seq_len, batch_size, seed: T, B and the default seed of the batches.
    vocab_size: V; None: ``default_vocab`` of the task's minimum.
    prefix_len: L; None: (T + 1) // 2, one repeat.
    distinct: draw the prefix without replacement.

  Returns:
    The ``InductionTask``.
  """
  if prefix_len is None:
    prefix_len = (seq_len + 1) // 2
  if vocab_size is None:
    vocab_size = default_vocab(induction_min_vocab(prefix_len, distinct))
  check_induction(seq_len, vocab_size, prefix_len, distinct)
  return InductionTask(seq_len=seq_len, batch_size=batch_size, vocab_size=vocab_size, seed=seed,
                       prefix_len=prefix_len, distinct=distinct)
