"""Character-level language modelling on a UTF-8 text file.

The vocabulary is the file's sorted set of characters (``build_vocab``, ``encode``, ``decode``); the last
``val_fraction`` of the file is held out; each batch is B random windows of T + 1 characters (``text_batch``); all
weights are 1. ``load_text`` refuses what cannot serve as text (``DataError``, naming the file) and
``load_text_dataset`` checks that the file fits the sizes ``scaling.training.data.config.DataConfig`` validated.
"""

from __future__ import annotations

import importlib.resources
import math
import os
import pathlib
import stat
from typing import Any, ClassVar, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from scaling.base.validation import ConfigError
from scaling.training.data import dataset as dataset_lib
from scaling.training import resources

Array = jax.Array

DEFAULT_VAL_FRACTION = 0.1
TEXT_BYTES_PER_CHAR = 24
"""Peak host bytes per byte of a text file while it is loaded: the bytes, the decoded str (up to 4 bytes a
character), its UTF-32 copy, the int64 search indices and the int32 ids on the host and on the device."""


CORPORA = {"shakespeare": "tinyshakespeare.txt"}
"""The corpora shipped with the package (``corpora/README.md``): a ``text_file`` equal to a name reads its file."""


class DataError(ConfigError):
  """A text file that cannot serve as data: missing, a directory, unreadable, empty, binary or too short."""


def corpus_path(text_file: str | os.PathLike) -> pathlib.Path:
  """The file a ``text_file`` value names: a shipped corpus for a name of ``CORPORA``, else the value as a path.

  Args:
    text_file: ``"shakespeare"`` (tiny Shakespeare, shipped with the package) or the path of a UTF-8 text file.

  Returns:
    The path to read (not checked: ``load_text`` refuses what cannot be read).
  """
  name = os.fspath(text_file)
  if name in CORPORA:
    with importlib.resources.as_file(
        importlib.resources.files("scaling.training.data") / "corpora" / CORPORA[name]) as path:
      return pathlib.Path(path)
  return pathlib.Path(name)


def load_text(path: str | os.PathLike) -> str:
  """Reads a non-empty UTF-8 text file, raising DataError (naming the file) on bad input.

  ``path`` is a name of ``CORPORA`` (a shipped corpus, ``corpus_path``) or the path of a file.

  Refused: a missing path, a directory, anything that is not a regular file
  (a device such as /dev/zero, a pipe or a socket, which may never end), an
  unreadable file, a file too large for the memory available to hold it while
  it is encoded (``TEXT_BYTES_PER_CHAR`` bytes per byte of file), an empty
  file, and bytes that are not text (a NUL byte, or invalid UTF-8).
  """
  name = os.fspath(path)
  if not name:
    raise DataError("the text file path is empty")
  if name in CORPORA:
    name = str(corpus_path(name))
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
               lo: int | Array = 0, hi: int | Array | None = None) -> dataset_lib.Batch:
  """B random windows of T + 1 consecutive tokens inside tokens[lo:hi].

  Args:
    key: a PRNG key.
    tokens: int [N], the encoded text.
    batch_size: B.
    seq_len: T.
    lo, hi: the span windows are drawn from (may be traced; default all of
      tokens); it must hold at least T + 1 tokens (``load_text_dataset`` checks
      that each split does). Starts are uniform over lo .. hi - T - 1.

  Returns:
    The batch dict with all weights 1.
  """
  hi = tokens.shape[0] if hi is None else hi
  starts = jax.random.randint(key, (batch_size, 1), lo, hi - seq_len)
  windows = jnp.asarray(tokens)[starts + jnp.arange(seq_len + 1)]
  return dataset_lib.lm_batch(windows, jnp.ones((seq_len,), jnp.float32))


@struct.dataclass
class TextDataset(dataset_lib.Dataset):
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

  def sample(self, key: Array, stream: Array) -> dataset_lib.Batch:
    is_eval = jnp.asarray(stream) == dataset_lib.EVAL_STREAM
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


def load_text_dataset(text_file: str | os.PathLike, *, seq_len: int, batch_size: int,
                      vocab_size: int | None = None, seed: int = 0,
                      val_fraction: float = DEFAULT_VAL_FRACTION) -> TextDataset:
  """Reads, checks, encodes and splits a text file: the ``TextDataset`` of ``DataConfig(text_file=...)``.

  Args:
    text_file: a shipped corpus's name (``CORPORA``: "shakespeare") or the path of a UTF-8 text file (``load_text``).
    seq_len, batch_size, seed: T, B and the default seed of the batches (positive, as ``DataConfig`` checked them).
    vocab_size: V, at least the file's number of characters (a larger V leaves ids unused); None: that number.
    val_fraction: the held-out end of the file, in (0, 1).

  Returns:
    The ``TextDataset``.

  Raises:
    DataError: a file that ``load_text`` refuses, or too short for one window of T + 1 characters in each split.
    ValueError: ``val_fraction`` outside (0, 1), or ``vocab_size`` below the file's number of characters.
  """
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
  elif vocab_size < len(chars):
    raise ConfigError(f"vocab_size={vocab_size} is smaller than the {len(chars)} distinct "
                     f"characters of {name!r}")
  return TextDataset(seq_len=seq_len, batch_size=batch_size, vocab_size=int(vocab_size),
                     seed=seed, tokens=jnp.asarray(ids), num_train=n_train, chars=chars,
                     path=name)
