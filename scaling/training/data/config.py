"""``DataConfig``: the data options every training study shares, and the one way a ``Dataset`` is built from them.

A ``DataConfig`` is validated when it is made (each option's range, and which options a task takes); ``make`` then
fills in the task's defaults and checks that the sizes fit it (``scaling.training.data.synthetic_tasks``) or that the text
file does (``scaling.training.data.text_corpus``), once, and builds the ``scaling.training.data.dataset.Dataset``, which trusts
them.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from scaling.base.config import option
from scaling.base.config import Options
from scaling.base.validation import ConfigError
from scaling.training.data import synthetic_tasks as tasks_lib
from scaling.training.data import text_corpus
from scaling.training.data.dataset import Dataset

DATASET_NAMES = ("recall", "induction", "text")


@dataclasses.dataclass(frozen=True)
class DataConfig(Options):
  """The data options every training study shares (``--task``, ``--text_file``, ``--seq_len``, ...)."""

  task: str | None = option(None, "Training data: recall, induction or text; default: text when --text_file is "
                            "given, else recall.", choices=DATASET_NAMES)
  text_file: str | None = option(None, "UTF-8 text file for character-level training (selects --task=text); "
                                 "'shakespeare' reads tiny Shakespeare, shipped with the package.")
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
    """The ``Dataset``: the synthetic task, or the text file read, encoded and split.

    Args:
      seed: the default seed of the dataset's ``batch`` and ``eval_batch`` (a 32-bit signed integer).

    Returns:
      A ``scaling.training.data.synthetic_tasks.RecallTask`` or ``InductionTask``, or a
      ``scaling.training.data.text_corpus.TextDataset``.

    Raises:
      ValueError: the seed, or sizes too small for the task (naming the task and seq_len); ``DataError`` (a
        ValueError naming the file) for a missing, directory, empty, binary or too short text file.
    """
    try:
      if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not -2**31 <= seed < 2**31:
        raise ConfigError(f"seed must be a 32-bit signed integer, got {seed!r}")
      sizes = dict(seq_len=self.seq_len, batch_size=self.batch_size, vocab_size=self.vocab_size, seed=int(seed))
      if self.name == "text":
        return text_corpus.load_text_dataset(self.text_file, **sizes)
      if self.name == "recall":
        return tasks_lib.recall_task(**sizes, num_pairs=self.num_pairs, num_queries=self.num_queries)
      return tasks_lib.induction_task(**sizes, prefix_len=self.prefix_len)
    except text_corpus.DataError:
      raise
    except ValueError as e:
      raise ConfigError(f"task={self.name!r} with seq_len={self.seq_len}: {e}",
                        fields=getattr(e, "fields", ())) from None
