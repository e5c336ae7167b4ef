"""Experiment tracking beside metrics.jsonl: TensorBoard event files and Weights & Biases runs.

Both are optional extras (``pip install -e ".[tensorboard]"``, ``".[wandb]"``): the
TensorBoard writer is ``tensorboardX`` (no TensorFlow), W&B is ``wandb`` and follows
its own environment (``WANDB_MODE=offline`` writes the run under the output folder
without a network). Each tracker gets exactly the numbers of a metrics.jsonl row:
its scalars under their names and each per-layer list as ``name/<layer>``; a value
that is null in the row (non-finite) is left out, as is the step (the x axis).
"""

from __future__ import annotations

import importlib.util
import math
import os
import pathlib
from typing import Any, Mapping, Sequence

from scaling.base.validation import ConfigError

TRACKERS = {"tensorboard": "tensorboardX", "wandb": "wandb"}
"""Tracker name (a value of --log_to) -> the package it needs (the extra of the same name installs it)."""

TENSORBOARD_DIR = "tensorboard"
"""The folder under the output folder that holds the TensorBoard event files."""


def check_available(names: Sequence[str]) -> None:
  """Raises ValueError (one line naming log_to and the install command) if a tracker's package is missing.

  Args:
    names: tracker names (keys of ``TRACKERS``).
  """
  for name in names:
    if name not in TRACKERS:
      raise ConfigError(f"log_to: unknown tracker {name!r}; known: {', '.join(TRACKERS)}")
    if importlib.util.find_spec(TRACKERS[name]) is None:
      raise ConfigError(f"log_to={name!r} needs the {TRACKERS[name]} package: pip install {TRACKERS[name]} (or, "
                        f"in a clone of this repository, pip install -e '.[{name}]')")


def scalars(row: Mapping[str, Any]) -> dict[str, float]:
  """The numbers of a metrics row by tag: scalars as they are, lists as ``key/<index>``; nulls and ``step`` left out.

  Args:
    row: one row of metrics.jsonl.

  Returns:
    {tag: value} with booleans as 0/1.
  """
  out: dict[str, float] = {}
  for key, value in row.items():
    if key == "step":
      continue
    items = enumerate(value) if isinstance(value, (list, tuple)) else [(None, value)]
    for i, v in items:
      if isinstance(v, bool):
        v = float(v)
      if isinstance(v, (int, float)) and math.isfinite(v):
        out[key if i is None else f"{key}/{i}"] = float(v)
  return out


class Trackers:
  """The trackers of one run: ``log(step, row)`` sends a metrics row to each, ``close()`` flushes them.

  Args:
    names: tracker names (--log_to); empty: nothing is tracked.
    out_dir: the run's output folder (TensorBoard writes into ``out_dir/tensorboard``, W&B into ``out_dir``).
    run_name: the run's name for W&B (also its id, so a resumed run continues the same W&B run).
    config: the run's options, recorded by W&B.
  """

  def __init__(self, names: Sequence[str], out_dir: str | os.PathLike, run_name: str,
               config: Mapping[str, Any] | None = None):
    check_available(names)
    self._tensorboard = self._wandb = None
    out_dir = pathlib.Path(out_dir)
    if "tensorboard" in names:
      from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top  (an optional extra)

      self._tensorboard = SummaryWriter(logdir=str(out_dir / TENSORBOARD_DIR))
    if "wandb" in names:
      import wandb  # pylint: disable=g-import-not-at-top  (an optional extra)

      self._wandb = wandb.init(project=os.environ.get("WANDB_PROJECT", "scaling"), name=run_name,
                               id=run_name.replace("=", "-").replace(",", "_")[-64:], resume="allow",
                               dir=str(out_dir), config=dict(config or {}), reinit="create_new")

  def log(self, step: int, row: Mapping[str, Any]) -> None:
    """Sends the numbers of one metrics row (``scalars(row)``) at ``step``."""
    values = scalars(row)
    if self._tensorboard is not None:
      for tag, value in values.items():
        self._tensorboard.add_scalar(tag, value, global_step=step)
    if self._wandb is not None:
      self._wandb.log(values, step=step)

  def close(self) -> None:
    """Flushes and closes every tracker."""
    if self._tensorboard is not None:
      self._tensorboard.close()
      self._tensorboard = None
    if self._wandb is not None:
      self._wandb.finish()
      self._wandb = None
