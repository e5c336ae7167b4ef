"""Training data: synthetic tasks that need sharp attention, and character-level text.

Every data source yields batches in next-token language-modelling format, so one
loss serves them all::

    {"inputs":  int32   [B, T],   # tokens seen by the model
     "targets": int32   [B, T],   # the next token: sequence[t + 1] for inputs sequence[t]
     "weights": float32 [B, T]}   # 1 where the prediction is scored, 0 elsewhere

Each batch is drawn from a length-(T + 1) sequence s as inputs = s[:-1] and
targets = s[1:]. A loss is sum(weights · CE(logits, targets)) / sum(weights).

Sources (``make_dataset(name, ...)``):

* ``"recall"``, associative recall (Ba et al. 2016, "Using Fast Weights to
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

* ``"induction"``, induction copying (Olsson et al. 2022, "In-context Learning
  and Induction Heads", §2). A random prefix x of length L repeated to fill the
  sequence: x x x...; the scored positions are those whose input lies in a
  repeat (t ≥ L), where the next token is fully determined by the earlier copy.
  The prefix has distinct tokens by default, so the earlier occurrence is
  unique. Chance: 1 / V for a context-free guess; copying a random token of
  the prefix scores 1 / L. Solved by an induction head: a previous-token head
  plus a head at position t attending sharply to position t - L + 1, the token
  after the earlier occurrence of the current token.

* ``"text"``, character-level language modelling on any UTF-8 text file: the
  vocabulary is the file's sorted set of characters; the last
  ``val_fraction`` of the file is held out; each batch is B random windows of
  T + 1 characters; all weights are 1.

Randomness is explicit: batch ``step`` of seed ``s`` depends only on
(s, step) through the key ``fold_in(key(s), step)``; evaluation batch ``i``
uses ``fold_in(key(s), 2³² − 1 − i)``, a disjoint stream (``batch_key``).
``Dataset.batch`` and ``eval_batch`` are pure and jit-able in ``step`` and
``seed``, so training can ``vmap`` over seeds and ``scan`` over steps; datasets
are pytrees (text tokens are leaves) and can be passed into jitted functions.
"""

from __future__ import annotations

import dataclasses
import math
import os
import stat
from typing import Any, ClassVar, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from scaling.training import resources
from scaling.base import validation
from scaling.base.config import option
from scaling.base.config import Options
from scaling.base.validation import check_positive_int
from scaling.base.validation import ConfigError

Array = jax.Array
Batch = dict[str, Array]

DATASET_NAMES = ("recall", "induction", "text")
TRAIN_STREAM = 0
EVAL_STREAM = 1
PAD_TOKEN = 0
DEFAULT_VAL_FRACTION = 0.1
TEXT_BYTES_PER_CHAR = 24
"""Peak host bytes per byte of a text file while it is loaded: the bytes, the decoded str (up to 4 bytes a
character), its UTF-32 copy, the int64 search indices and the int32 ids on the host and on the device."""
_MIN_DEFAULT_VOCAB = 64


class DataError(ConfigError):
  """A text file that cannot serve as data: missing, a directory, unreadable, empty, binary or too short."""


# ----------------------------------------------------------------------------
# Validation helpers.


def _default_vocab(min_vocab: int) -> int:
  """The smallest power of two ≥ max(64, min_vocab)."""
  return max(_MIN_DEFAULT_VOCAB, 1 << (min_vocab - 1).bit_length())


def batch_key(seed: int | Array, step: int | Array, stream: int | Array = TRAIN_STREAM) -> Array:
  """The PRNG key of batch ``step`` of ``seed``: fold_in(key(seed), step).

  Evaluation batch i uses fold_in(key(seed), 2³² − 1 − i), so the two streams
  never share a key while step + i < 2³².
  """
  step = jnp.asarray(step).astype(jnp.uint32)
  data = jnp.where(jnp.asarray(stream) == EVAL_STREAM, ~step, step)
  return jax.random.fold_in(jax.random.key(seed), data)


def _lm_batch(sequences: Array, weights: Array) -> Batch:
  """Splits sequences [B, T + 1] into the batch dict, with weights [T] or [B, T]."""
  b, t1 = sequences.shape
  sequences = sequences.astype(jnp.int32)
  return {
      "inputs": sequences[:, :-1],
      "targets": sequences[:, 1:],
      "weights": jnp.broadcast_to(weights.astype(jnp.float32), (b, t1 - 1)),
  }


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
  slots = (check_positive_int("seq_len", seq_len) + 1) // 2
  if num_pairs is None and num_queries is None:
    num_queries = max(1, slots // 2)
    if slots < 2:
      raise ConfigError(f"recall needs seq_len >= 3 (one pair and one query), got seq_len={seq_len}")
  if num_queries is None:
    num_queries = max(1, slots - check_positive_int("num_pairs", num_pairs))
  if num_pairs is None:
    num_pairs = max(1, slots - check_positive_int("num_queries", num_queries))
  return check_positive_int("num_pairs", num_pairs), check_positive_int("num_queries", num_queries)


def check_recall(seq_len: int, vocab_size: int, num_pairs: int, num_queries: int) -> None:
  """Raises ValueError unless a recall task of these sizes fits in seq_len and vocab_size."""
  for name, value in (("seq_len", seq_len), ("vocab_size", vocab_size),
                      ("num_pairs", num_pairs), ("num_queries", num_queries)):
    check_positive_int(name, value)
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
                 num_pairs: int, num_queries: int = 1) -> Batch:
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
    num_queries: Q, queries after the context.

  Returns:
    The batch dict; weights are 1 exactly at the Q positions 2P + 2j whose input
    is a query key (the target is its value).
  """
  check_recall(seq_len, vocab_size, num_pairs, num_queries)
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
  return _lm_batch(sequences, weights)


# ----------------------------------------------------------------------------
# Induction copying.


def induction_min_vocab(prefix_len: int, distinct: bool) -> int:
  """The smallest vocabulary for a prefix of prefix_len tokens (distinct or not)."""
  return max(prefix_len, 2) if distinct else 2


def check_induction(seq_len: int, vocab_size: int, prefix_len: int, distinct: bool) -> None:
  """Raises ValueError unless an induction task of these sizes fits in seq_len and vocab_size."""
  for name, value in (("seq_len", seq_len), ("vocab_size", vocab_size), ("prefix_len", prefix_len)):
    check_positive_int(name, value)
  if not isinstance(distinct, (bool, np.bool_)):
    raise ConfigError(f"distinct must be a bool, got {distinct!r}")
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
                    prefix_len: int, distinct: bool = True) -> Batch:
  """One batch of induction copying: a random prefix repeated, x x x ... (length T + 1).

  Args:
    key: a PRNG key.
    batch_size: B.
    seq_len: T, the model's input length.
    vocab_size: V; prefix tokens are uniform over 0..V-1.
    prefix_len: L, the period of the repeat.
    distinct: draw the prefix without replacement (so every token's earlier
      occurrence is unique); needs V ≥ L.

  Returns:
    The batch dict; weights are 1 at positions t ≥ L (inputs inside a repeat,
    whose next token equals the one L positions earlier).
  """
  check_induction(seq_len, vocab_size, prefix_len, distinct)
  if distinct:
    prefix = _distinct(jax.random.bits(key, (batch_size, vocab_size)), prefix_len)
  else:
    prefix = _below(jax.random.bits(key, (batch_size, prefix_len)), vocab_size)
  sequences = prefix[:, jnp.arange(seq_len + 1) % prefix_len]
  weights = jnp.arange(seq_len) >= prefix_len
  return _lm_batch(sequences, weights)


# ----------------------------------------------------------------------------
# Character-level text.


def load_text(path: str | os.PathLike) -> str:
  """Reads a non-empty UTF-8 text file, raising DataError (naming the file) on bad input.

  Refused: a missing path, a directory, anything that is not a regular file
  (a device such as /dev/zero, a pipe or a socket, which may never end), an
  unreadable file, a file too large for the memory available to hold it while
  it is encoded (``TEXT_BYTES_PER_CHAR`` bytes per byte of file), an empty
  file, and bytes that are not text (a NUL byte, or invalid UTF-8).
  """
  name = os.fspath(path)
  if not name:
    raise DataError("the text file path is empty")
  try:
    info = os.stat(name)
  except FileNotFoundError:
    raise DataError(f"text file {name!r} does not exist") from None
  except OSError as e:
    raise DataError(f"text file {name!r} cannot be read: {e.strerror or e}") from None
  if stat.S_ISDIR(info.st_mode):
    raise DataError(f"text file {name!r} is a directory, not a file")
  if not stat.S_ISREG(info.st_mode):
    raise DataError(f"text file {name!r} is not a regular file (a device, pipe or socket)")
  available = resources.host_available_bytes()
  if available is not None and info.st_size * TEXT_BYTES_PER_CHAR > available:
    raise DataError(f"text file {name!r} has {info.st_size:,} bytes; encoding it needs "
                    f"~{resources.gib(info.st_size * TEXT_BYTES_PER_CHAR)}, "
                    f"{resources.gib(available)} available")
  try:
    with open(name, "rb") as f:
      raw = f.read()
  except OSError as e:
    raise DataError(f"text file {name!r} cannot be read: {e.strerror or e}") from None
  if not raw:
    raise DataError(f"text file {name!r} is empty")
  nul = raw.find(b"\x00")
  if nul >= 0:
    raise DataError(f"text file {name!r} looks binary: NUL byte at offset {nul}")
  try:
    return raw.decode("utf-8")
  except UnicodeDecodeError as e:
    raise DataError(f"text file {name!r} is not valid UTF-8 (byte offset {e.start}); "
                    "is it binary?") from None


def build_vocab(text: str) -> tuple[str, ...]:
  """The sorted distinct characters of text (sorted by code point, so deterministic)."""
  return tuple(sorted(set(text)))


def encode(text: str, vocab: Sequence[str]) -> np.ndarray:
  """Characters → ids (their index in the sorted vocab), int32 [len(text)].

  Raises:
    ValueError: if text contains a character outside the vocabulary.
  """
  vocab = tuple(vocab)
  table = np.array([ord(c) for c in vocab], np.uint32)
  if len(table) > 1 and not np.all(table[1:] > table[:-1]):
    raise ConfigError("vocab must be sorted distinct single characters (use build_vocab)")
  codes = np.frombuffer(text.encode("utf-32-le"), np.uint32)
  ids = np.searchsorted(table, codes)
  if len(table):
    bad = (ids >= len(table)) | (table[np.minimum(ids, len(table) - 1)] != codes)
  else:
    bad = np.ones(codes.shape, bool)
  if np.any(bad):
    first = int(np.argmax(bad))
    raise ConfigError(f"character {text[first]!r} at index {first} is not in the vocabulary")
  return ids.astype(np.int32)


def decode(ids: Any, vocab: Sequence[str]) -> str:
  """Ids (any integer array or sequence, flattened) → the string of their characters."""
  vocab = tuple(vocab)
  flat = np.asarray(ids).reshape(-1)
  if flat.size and (flat.min() < 0 or flat.max() >= len(vocab)):
    raise ConfigError(f"ids must lie in [0, {len(vocab)}), got range [{flat.min()}, {flat.max()}]")
  return "".join(vocab[i] for i in flat.tolist())


def text_batch(key: Array, tokens: Array, *, batch_size: int, seq_len: int,
               lo: int | Array = 0, hi: int | Array | None = None) -> Batch:
  """B random windows of T + 1 consecutive tokens inside tokens[lo:hi].

  Args:
    key: a PRNG key.
    tokens: int [N], the encoded text.
    batch_size: B.
    seq_len: T.
    lo, hi: the span windows are drawn from (may be traced; default all of
      tokens); it must hold at least T + 1 tokens. Starts are uniform over
      lo .. hi - T - 1.

  Returns:
    The batch dict with all weights 1.
  """
  n = tokens.shape[0]
  if n < seq_len + 1:
    raise ConfigError(f"{n} tokens are too few for one window of seq_len+1 = {seq_len + 1}")
  hi = n if hi is None else hi
  starts = jax.random.randint(key, (batch_size, 1), lo, hi - seq_len)
  windows = jnp.asarray(tokens)[starts + jnp.arange(seq_len + 1)]
  return _lm_batch(windows, jnp.ones((seq_len,), jnp.float32))


# ----------------------------------------------------------------------------
# Datasets.


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


@struct.dataclass
class RecallTask(Dataset):
  """Multi-query associative recall (see ``recall_batch``)."""

  name: ClassVar[str] = "recall"
  num_pairs: int = struct.field(pytree_node=False, default=1)
  num_queries: int = struct.field(pytree_node=False, default=1)

  def sample(self, key: Array, stream: Array) -> Batch:
    del stream
    return recall_batch(key, batch_size=self.batch_size, seq_len=self.seq_len,
                        vocab_size=self.vocab_size, num_pairs=self.num_pairs,
                        num_queries=self.num_queries)

  @property
  def chance_accuracy(self) -> float:
    return 1.0 / recall_vocab_split(self.vocab_size)[1]


@struct.dataclass
class InductionTask(Dataset):
  """Induction copying of a repeated random prefix (see ``induction_batch``)."""

  name: ClassVar[str] = "induction"
  prefix_len: int = struct.field(pytree_node=False, default=2)
  distinct: bool = struct.field(pytree_node=False, default=True)

  def sample(self, key: Array, stream: Array) -> Batch:
    del stream
    return induction_batch(key, batch_size=self.batch_size, seq_len=self.seq_len,
                           vocab_size=self.vocab_size, prefix_len=self.prefix_len,
                           distinct=self.distinct)

  @property
  def chance_accuracy(self) -> float:
    return 1.0 / self.vocab_size


@struct.dataclass
class TextDataset(Dataset):
  """Character-level language modelling on a text file.

  Attributes:
    tokens: int32 [N], the whole encoded file.
    num_train: tokens[:num_train] is the training split, the rest (the last
      val_fraction of the file) the validation split; windows never cross.
    chars: the vocabulary, sorted distinct characters (id = index).
    path: the file it was read from.
  """

  name: ClassVar[str] = "text"
  tokens: Array = None
  num_train: int = struct.field(pytree_node=False, default=0)
  chars: tuple[str, ...] = struct.field(pytree_node=False, default=())
  path: str = struct.field(pytree_node=False, default="")

  @property
  def train_tokens(self) -> Array:
    """int32 [N_train], the training split."""
    return self.tokens[:self.num_train]

  @property
  def val_tokens(self) -> Array:
    """int32 [N_val], the validation split."""
    return self.tokens[self.num_train:]

  def sample(self, key: Array, stream: Array) -> Batch:
    is_eval = jnp.asarray(stream) == EVAL_STREAM
    lo = jnp.where(is_eval, self.num_train, 0)
    hi = jnp.where(is_eval, self.tokens.shape[0], self.num_train)
    return text_batch(key, self.tokens, batch_size=self.batch_size, seq_len=self.seq_len,
                      lo=lo, hi=hi)

  def encode(self, text: str) -> np.ndarray:
    """Characters → int32 ids."""
    return encode(text, self.chars)

  def decode(self, ids: Any) -> str:
    """Ids → characters."""
    return decode(ids, self.chars)


def _check_opts(name: str, opts: dict[str, Any], allowed: Sequence[str]) -> None:
  """Raises ValueError if opts holds keys not allowed for dataset ``name``."""
  extra = sorted(set(opts) - set(allowed))
  if extra:
    allowed_text = ", ".join(allowed) if allowed else "none"
    raise ConfigError(f"unknown option(s) {', '.join(extra)} for dataset {name!r} "
                     f"(allowed: {allowed_text})")


def load_text_dataset(text_file: str | os.PathLike, *, seq_len: int, batch_size: int,
                      vocab_size: int | None = None, seed: int = 0,
                      val_fraction: float = DEFAULT_VAL_FRACTION) -> TextDataset:
  """Reads, checks, encodes and splits a text file (see ``make_dataset``)."""
  seq_len = check_positive_int("seq_len", seq_len)
  batch_size = check_positive_int("batch_size", batch_size)
  if (isinstance(val_fraction, bool) or not isinstance(val_fraction, (int, float))
      or not 0.0 < val_fraction < 1.0):
    raise ConfigError(f"val_fraction must be a number in (0, 1), got {val_fraction!r}")
  name = os.fspath(text_file)
  text = load_text(name)
  chars = build_vocab(text)
  ids = encode(text, chars)
  n = len(ids)
  n_val = int(math.floor(n * val_fraction))
  n_train = n - n_val
  window = seq_len + 1
  if n < window:
    raise DataError(f"text file {name!r} is too short for one sequence: {n} characters, seq_len={seq_len} needs "
                    f"seq_len+1 = {window} (and as many again for the validation split)")
  if n_train < window or n_val < window:
    raise DataError(
        f"text file {name!r} is too short for seq_len={seq_len}: {n} characters give "
        f"{n_train} train and {n_val} validation (val_fraction={val_fraction}), "
        f"each split needs >= {window}")
  if vocab_size is None:
    vocab_size = len(chars)
  elif check_positive_int("vocab_size", vocab_size) < len(chars):
    raise ConfigError(f"vocab_size={vocab_size} is smaller than the {len(chars)} distinct "
                     f"characters of {name!r}")
  return TextDataset(seq_len=seq_len, batch_size=batch_size, vocab_size=int(vocab_size),
                     seed=seed, tokens=jnp.asarray(ids), num_train=n_train, chars=chars,
                     path=name)


def make_dataset(name: str = "recall", *, seq_len: int, batch_size: int,
                 vocab_size: int | None = None, text_file: str | os.PathLike | None = None,
                 seed: int = 0, **opts: Any) -> Dataset:
  """Builds a data source by name.

  Args:
    name: "recall", "induction" or "text" (text needs ``text_file``).
    seq_len: T, the model's input length.
    batch_size: B.
    vocab_size: V. For synthetic tasks, None picks the smallest power of two
      ≥ max(64, the task's minimum); for text, None means the file's number of
      characters (a larger V leaves ids unused).
    text_file: path of a UTF-8 text file (name="text" only).
    seed: the default seed of ``batch`` and ``eval_batch``.
    **opts: task options.
      recall: ``num_pairs`` and ``num_queries`` (default: ``recall_split``,
        the (T + 1) // 2 slots shared evenly between pairs and queries).
      induction: ``prefix_len`` (default (T + 1) // 2, one repeat) and
        ``distinct`` (default True).
      text: ``val_fraction`` (default 0.1, the end of the file).

  Returns:
    A ``Dataset``.

  Raises:
    ValueError: for an unknown name or option, non-positive sizes, a seq_len or
      vocab_size too small for the task; ``DataError`` (a ValueError naming the
      file) for a missing, directory, empty, binary or too short text file.
  """
  if name not in DATASET_NAMES:
    raise ConfigError(validation.unknown_choice("dataset", name, DATASET_NAMES))
  if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not -2**31 <= seed < 2**31:
    raise ConfigError(f"seed must be a 32-bit signed integer, got {seed!r}")
  seed = int(seed)
  if name == "text":
    if text_file is None:
      raise ConfigError("dataset 'text' needs text_file")
    _check_opts(name, opts, ("val_fraction",))
    return load_text_dataset(text_file, seq_len=seq_len, batch_size=batch_size,
                             vocab_size=vocab_size, seed=seed, **opts)
  if text_file is not None:
    raise ConfigError(f"text_file is only used by dataset 'text', not {name!r}")
  seq_len = check_positive_int("seq_len", seq_len)
  batch_size = check_positive_int("batch_size", batch_size)
  if vocab_size is not None:
    vocab_size = check_positive_int("vocab_size", vocab_size)
  if name == "recall":
    _check_opts(name, opts, ("num_pairs", "num_queries"))
    num_pairs, num_queries = recall_split(seq_len, opts.get("num_pairs"), opts.get("num_queries"))
    num_pairs = check_positive_int("num_pairs", num_pairs)
    if vocab_size is None:
      vocab_size = _default_vocab(recall_min_vocab(num_pairs))
    check_recall(seq_len, vocab_size, num_pairs, num_queries)
    return RecallTask(seq_len=seq_len, batch_size=batch_size, vocab_size=vocab_size, seed=seed,
                      num_pairs=num_pairs, num_queries=num_queries)
  _check_opts(name, opts, ("prefix_len", "distinct"))
  prefix_len = opts.get("prefix_len")
  if prefix_len is None:
    prefix_len = (seq_len + 1) // 2
  prefix_len = check_positive_int("prefix_len", prefix_len)
  distinct = opts.get("distinct", True)
  if vocab_size is None:
    vocab_size = _default_vocab(induction_min_vocab(prefix_len, bool(distinct)))
  check_induction(seq_len, vocab_size, prefix_len, distinct)
  return InductionTask(seq_len=seq_len, batch_size=batch_size, vocab_size=vocab_size, seed=seed,
                       prefix_len=prefix_len, distinct=bool(distinct))


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


@dataclasses.dataclass(frozen=True)
class DataConfig(Options):
  """The data options every training study shares (``--task``, ``--text_file``, ``--seq_len``, ...)."""

  task: str | None = option(None, "Training data: recall, induction or text; default: text when --text_file is "
                            "given, else recall.", choices=DATASET_NAMES)
  text_file: str | None = option(None, "UTF-8 text file for character-level training (selects --task=text).")
  seq_len: int = option(64, "Sequence length T.", lower=1)
  batch_size: int = option(16, "Sequences per batch.", lower=1)
  vocab_size: int | None = option(None, "Vocabulary size; default: the smallest power of two >= 64 that the "
                                  "synthetic task needs, or the text file's characters.", lower=1)
  num_pairs: int | None = option(None, "Recall: key-value pairs (default: half of the (T + 1) // 2 slots).",
                                 lower=1)
  num_queries: int | None = option(None, "Recall: queries per sequence (default: the slots the pairs leave).",
                                   lower=1)
  prefix_len: int | None = option(None, "Induction: period of the repeated prefix (default: (T + 1) // 2).",
                                  lower=2)

  def validate(self):
    if self.text_file is not None and self.task not in (None, "text"):
      raise ConfigError(f"text_file selects task='text', but task={self.task!r} was given")
    if self.text_file is None and self.task == "text":
      raise ConfigError("task='text' needs text_file", fields=("text_file",))
    name = self.name
    if name != "recall" and (self.num_pairs is not None or self.num_queries is not None):
      raise ConfigError("num_pairs and num_queries only apply to task='recall'", fields=("num_queries",))
    if name != "induction" and self.prefix_len is not None:
      raise ConfigError("prefix_len only applies to task='induction'")

  @property
  def name(self) -> str:
    """The task: ``task``, or text when a file is given, else recall."""
    if self.task is not None:
      return self.task
    return "text" if self.text_file is not None else "recall"

  def make(self, seed: int = 0) -> Dataset:
    """The ``Dataset`` (ValueError, or ``DataError`` naming the file, when the options do not fit)."""
    options = {"recall": {"num_pairs": self.num_pairs, "num_queries": self.num_queries},
               "induction": {"prefix_len": self.prefix_len}}.get(self.name, {})
    try:
      return make_dataset(self.name, seq_len=self.seq_len, batch_size=self.batch_size, vocab_size=self.vocab_size,
                          text_file=self.text_file, seed=seed, **{k: v for k, v in options.items() if v is not None})
    except DataError:
      raise
    except ValueError as e:
      raise ConfigError(f"task={self.name!r} with seq_len={self.seq_len}: {e}",
                        fields=getattr(e, "fields", ())) from None
