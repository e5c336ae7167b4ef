"""PNG line plots for experiment results (matplotlib, Agg backend, no display needed)."""

from __future__ import annotations

import os
from typing import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  pylint: disable=g-import-not-at-top

from scaling import distributed  # noqa: E402


def line_plot(path: str | os.PathLike, series: Mapping[str, tuple[Sequence[float], Sequence[float]]], *,
              xlabel: str, ylabel: str, title: str = "", logx2: bool = False, logy: bool = False,
              errors: Mapping[str, Sequence[float]] | None = None, ax=None) -> None:
  """One labelled line per entry of ``series`` ({label: (x, y)}); saves to ``path`` unless ``ax`` is given.

  ``errors`` optionally gives a ±band per label (e.g. std over seeds).
  """
  own = ax is None
  if own:
    fig, ax = plt.subplots(figsize=(6, 4))
  for label, (x, y) in series.items():
    ax.plot(x, y, marker="o", markersize=3, label=label)
    if errors and label in errors:
      lo = [a - b for a, b in zip(y, errors[label])]
      hi = [a + b for a, b in zip(y, errors[label])]
      ax.fill_between(x, lo, hi, alpha=0.2)
  if logx2:
    ax.set_xscale("log", base=2)
  if logy:
    ax.set_yscale("log")
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  if title:
    ax.set_title(title)
  ax.grid(True, alpha=0.3)
  ax.legend(fontsize=8)
  if own:
    save_figure(fig, path)


def grid_figure(nrows: int, ncols: int, *, width: float = 4.0, height: float = 3.2):
  """A figure with an nrows × ncols grid of axes (always 2-D), for multi-panel plots."""
  fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False)
  return fig, axes


def save_figure(fig, path: str | os.PathLike) -> None:
  """Saves (on the writing process, ``scaling.distributed.is_writer``) and closes a figure made by ``grid_figure``."""
  if distributed.is_writer():
    fig.tight_layout()
    fig.savefig(path, dpi=120)
  plt.close(fig)
