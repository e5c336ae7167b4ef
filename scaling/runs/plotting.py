"""PNG line plots for experiment results (matplotlib, Agg backend, no display needed)."""

from __future__ import annotations

import math
import os
from typing import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  pylint: disable=g-import-not-at-top
from matplotlib import ticker  # noqa: E402  pylint: disable=g-import-not-at-top

from scaling.runs import distributed  # noqa: E402


def line_plot(path: str | os.PathLike, series: Mapping[str, tuple[Sequence[float], Sequence[float]]], *,
              xlabel: str, ylabel: str, title: str = "", logx2: bool = False, logy: bool = False,
              errors: Mapping[str, Sequence[float]] | None = None, ax=None) -> None:
  """One labelled line per entry of ``series`` ({label: (x, y)}); saves to ``path`` unless ``ax`` is given.

  ``errors`` optionally gives a ±band per label (e.g. std over seeds).
  """
  own = ax is None
  if own:
    fig, ax = plt.subplots(figsize=(6, 4))
  for i, (label, (x, y)) in enumerate(series.items()):
    # Each line its own marker and dash pattern, the markers hollow, so a line lying on another stays visible.
    ax.plot(x, y, marker=MARKERS[i % len(MARKERS)], linestyle=LINESTYLES[i % len(LINESTYLES)],
            markersize=4 + 1.5 * (i % 3), fillstyle="none", label=label)
    if errors and label in errors:
      lo = [a - b for a, b in zip(y, errors[label])]
      hi = [a + b for a, b in zip(y, errors[label])]
      ax.fill_between(x, lo, hi, alpha=0.2)
  if logx2:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(power_of_two_label))
  if logy:
    ax.set_yscale("log")
    label_log_y(ax)
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  if title:
    ax.set_title(title)
  ax.grid(True, alpha=0.3)
  ax.legend(fontsize=8)
  if own:
    save_figure(fig, path)


MARKERS = ("o", "s", "^", "v", "D", "x", "+", "P")
LINESTYLES = ("-", "--", "-.", ":")
"""The markers and dash patterns of a figure's lines, in order (8 and 4: 8 lines differ in both)."""


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def power_of_two_label(value: float, _position=None) -> str:
  """A tick of a log2 axis in plain text: a whole number below 10⁵ as itself ("64"), another power of two as "2⁻¹⁰"
  (Unicode superscripts: matplotlib's default log labels are math text, parsed for every tick of every figure)."""
  if 1 <= value < 1e5 and float(value).is_integer():
    return f"{int(value)}"
  exponent = math.log2(value) if value > 0 else math.nan
  if math.isfinite(exponent) and exponent.is_integer():
    return "2" + str(int(exponent)).translate(_SUPERSCRIPT)
  return f"{value:g}"


def label_log_y(ax) -> None:
  """Plain-number labels on the log y axis of ``ax``: under one decade of data, about six evenly spaced round values.

  Matplotlib labels a log axis at its decades, and within one decade at a few minor ticks only (a loss from 2.6
  to 4.2 gets "3×10⁰" and "4×10⁰"); here the ticks of a narrow range are round numbers in the range, labelled as
  numbers, and a wider range keeps the decades with plain labels.
  """
  axis = ax.yaxis
  lo, hi = sorted(ax.get_ylim())
  if lo > 0 and hi / lo < 10:
    axis.set_major_locator(ticker.MaxNLocator(nbins=6))
    axis.set_minor_locator(ticker.NullLocator())
    axis.set_minor_formatter(ticker.NullFormatter())
  axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))


def grid_figure(nrows: int, ncols: int, *, width: float = 4.0, height: float = 3.2):
  """A figure with an nrows × ncols grid of axes (always 2-D), for multi-panel plots."""
  fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False)
  return fig, axes


def save_figure(fig, path: str | os.PathLike) -> None:
  """Saves (on the writing process, ``scaling.runs.distributed.is_writer``) and closes a figure made by ``grid_figure``."""
  if distributed.is_writer():
    fig.tight_layout()
    fig.savefig(path, dpi=120)
  plt.close(fig)
