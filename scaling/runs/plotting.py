"""PNG line plots for experiment results (matplotlib, Agg backend, no display needed)."""

from __future__ import annotations

import math
import os
from typing import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  pylint: disable=g-import-not-at-top
from matplotlib import ticker  # noqa: E402  pylint: disable=g-import-not-at-top
import numpy as np  # noqa: E402  pylint: disable=g-import-not-at-top

from scaling.runs import distributed  # noqa: E402


def line_plot(path: str | os.PathLike, series: Mapping[str, tuple[Sequence[float], Sequence[float]]], *,
              xlabel: str, ylabel: str, title: str = "", logx2: bool = False, logy: bool = False,
              errors: Mapping[str, Sequence[float]] | None = None, ax=None) -> None:
  """One labelled line per entry of ``series`` ({label: (x, y)}); saves to ``path`` unless ``ax`` is given.

  ``errors`` optionally gives a ±band per label (e.g. std over seeds).
  """
  own = ax is None
  if own:
    fig, ax = plt.subplots(figsize=(6 + (LEGEND_WIDTH if legend_outside(series) else 0), 4))
  for i, (label, (x, y)) in enumerate(series.items()):
    x, y = finite(x), finite(y)
    # Each line its own marker and dash pattern, the markers hollow, so a line lying on another stays visible.
    ax.plot(x, y, marker=MARKERS[i % len(MARKERS)], linestyle=LINESTYLES[i % len(LINESTYLES)],
            markersize=4 + 1.5 * (i % 3), fillstyle="none", label=label)
    if errors and label in errors:
      band = finite(errors[label])
      lo = [a - b for a, b in zip(y, band)]
      hi = [a + b for a, b in zip(y, band)]
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
  place_legend(ax, series)
  if own:
    save_figure(fig, path)


LEGEND_FONTSIZE = 8
SMALL_FONTSIZE = 7
"""The legends' font size in points, and the smallest size of any text in a figure (a crowded legend's)."""
LEGEND_INSIDE = 6
"""At most this many legend entries inside a panel; more go beside it, on the right, where they hide no data."""
LEGEND_WIDTH = 1.6
"""Inches a figure grows per column of panels when their legends go beside them."""


def legend_outside(labels) -> bool:
  """Whether a legend of ``labels`` (labels starting with "_" have no entry) goes beside its panel."""
  return sum(not str(label).startswith("_") for label in labels) > LEGEND_INSIDE


def place_legend(ax, labels, **kwargs) -> None:
  """The legend of ``ax`` at ``LEGEND_FONTSIZE``: inside at the best place, or beside the panel for more than
  ``LEGEND_INSIDE`` entries; none without entries. ``kwargs`` go to ``Axes.legend``."""
  if not any(not str(label).startswith("_") for label in labels):
    return
  kwargs.setdefault("fontsize", LEGEND_FONTSIZE)
  if legend_outside(labels):
    kwargs.update(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
  ax.legend(**kwargs)


def finite(values: Sequence[float | None]) -> list[float]:
  """``values`` as floats with None, NaN and ±inf as NaN (a gap in a line; never an axis limit)."""
  out = []
  for v in values:
    try:
      v = float(v)
    except (TypeError, ValueError):
      v = math.nan
    out.append(v if math.isfinite(v) else math.nan)
  return out


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
  """Plain-number labels on the log y axis of ``ax``, placed from the axis's final limits when it is drawn.

  Matplotlib labels a log axis at its decades, and within one decade at a few minor ticks only (a loss from 2.6
  to 4.2 gets "3×10⁰" and "4×10⁰"). Here ``LogTicks`` picks the ticks at draw time, so limits set after this call
  (a shared range set on every panel) are the ones labelled: under one decade, round numbers in the range; over
  more, the decades, or 1-3-10 / 1-2-5 steps where the decades leave fewer than two labels beside the data; every
  label a plain number.
  """
  axis = ax.yaxis
  axis.set_major_locator(LogTicks())
  axis.set_minor_locator(LogTicks(minor=True))
  axis.set_major_formatter(ticker.FuncFormatter(_plain))
  axis.set_minor_formatter(ticker.NullFormatter())


def _plain(value: float, _position=None) -> str:
  return f"{value:g}"


class LogTicks(ticker.Locator):
  """Ticks of a log axis chosen from the view limits of the moment they are asked for (at each draw).

  Major ticks: under one decade of view, about six round numbers (fewer where their labels would touch on the log
  scale); over one decade, the coarsest of decades (every k-th where they crowd), 1-3-10 and 1-2-5 that fits the
  axis's length and puts at least two labels inside the data's range, else the one with the most there. Where
  that leaves fewer than two labels inside the data's range (data spanning a fraction of a shared range), round
  numbers inside it are labelled instead of the neighbouring ticks they would touch. Minor ticks
  (``minor=True``): 2-9 times each decade where the labels are the decades (up to ``MINOR_DECADES``), else none.
  """

  MINOR_DECADES = 5
  """Minor ticks (2-9 times each decade) when the labels are the decades of at most this many decades."""

  MIN_GAP = 0.75
  """Labels at least this fraction of matplotlib's own tick spacing apart (its ``get_tick_space``: two font sizes)."""

  def __init__(self, minor: bool = False):
    self.minor = minor

  def __call__(self):
    vmin, vmax = self.axis.get_view_interval()
    return self.tick_values(vmin, vmax)

  def _space(self) -> int:
    """How many labels fit along the axis (matplotlib's estimate; 8 before the axis has a size)."""
    try:
      space = self.axis.get_tick_space()
    except (AttributeError, TypeError):  # a locator not attached to an axis
      space = 8
    return max(2, min(int(space), 12))

  def _data_range(self, lo: float, hi: float) -> tuple[float, float]:
    """The positive finite data range on the axis, within the view (the view when there is none)."""
    try:
      dlo, dhi = sorted(float(v) for v in self.axis.get_data_interval())
    except (AttributeError, TypeError, ValueError):
      return lo, hi
    dlo, dhi = max(dlo, lo), min(dhi, hi)
    if not (math.isfinite(dlo) and math.isfinite(dhi) and 0 < dlo <= dhi):
      return lo, hi
    return dlo, dhi

  def tick_values(self, vmin, vmax):
    lo, hi = sorted((float(vmin), float(vmax)))
    if lo <= 0 and self.axis is not None:  # as matplotlib's LogLocator: from the smallest positive data
      lo = float(self.axis.get_minpos())
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo < hi):  # nothing to label (no data drawn)
      return []
    decades = math.log10(hi / lo)
    min_gap = self.MIN_GAP * decades / self._space()  # in decades
    if decades < 1:
      return [] if self.minor else self._near_data(self._linear(lo, hi, min_gap), lo, hi, min_gap)
    majors = self._near_data(self._log_major(lo, hi, min_gap), lo, hi, min_gap)
    if not self.minor:
      return majors
    if decades > self.MINOR_DECADES or not all(math.log10(v).is_integer() for v in majors):
      return []  # the labels already lie between the decades (or minor ticks would crowd)
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    return [v for v in (float(f"{m}e{e}") for e in range(first, last + 1) for m in range(2, 10)) if lo <= v <= hi]

  def _linear(self, lo: float, hi: float, min_gap: float) -> list[float]:
    """About six round numbers in [lo, hi], fewer until neighbouring labels are ``min_gap`` decades apart."""
    for nbins in range(min(6, self._space()), 0, -1):
      ticks = [float(t) for t in ticker.MaxNLocator(nbins=nbins, steps=[1, 2, 2.5, 5, 10]).tick_values(lo, hi)
               if lo <= t <= hi and t > 0]
      if len(ticks) < 2 or min(np.diff(np.log10(ticks))) >= min_gap:
        break
    return ticks

  def _log_major(self, lo: float, hi: float, min_gap: float) -> list[float]:
    """The coarsest of decades, 1-3-10 and 1-2-5 that fits and labels the data twice (else labels it most)."""
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    stride = max(1, math.ceil(min_gap))
    candidates = [(stride, (1,))] + ([(1, (1, 3)), (1, (1, 2, 5))] if stride == 1 else [])
    dlo, dhi = self._data_range(lo, hi)
    fitting = []
    for step, subs in candidates:
      if step * min(np.diff(np.log10([*subs, 10]))) < min_gap and fitting:
        break
      ticks = [float(f"{m}e{e}") for e in range(first - first % step, last + 1, step) for m in subs]
      fitting.append([t for t in ticks if lo <= t <= hi])
      if sum(dlo <= t <= dhi for t in fitting[-1]) >= 2:
        return fitting[-1]
    return max(fitting, key=lambda ticks: sum(dlo <= t <= dhi for t in ticks))  # the first of the best

  def _near_data(self, ticks: list[float], lo: float, hi: float, min_gap: float) -> list[float]:
    """``ticks``, or where fewer than two lie inside the data's range, round numbers inside it in place of the
    ticks they would touch (as many as fit ``min_gap`` decades apart)."""
    dlo, dhi = self._data_range(lo, hi)
    if sum(dlo <= t <= dhi for t in ticks) >= 2 or dhi <= dlo:
      return ticks
    rounds = ticker.MaxNLocator(nbins=10, steps=[1, 2, 2.5, 5, 10]).tick_values(dlo, dhi)
    chosen: list[float] = []
    for t in (float(v) for v in rounds if dlo <= v <= dhi and v > 0):
      if not chosen or math.log10(t / chosen[-1]) >= min_gap:
        chosen.append(t)
    if len(chosen) <= sum(dlo <= t <= dhi for t in ticks):
      return ticks
    apart = lambda t: all(abs(math.log10(t / c)) >= min_gap for c in chosen)
    return sorted(chosen + [t for t in ticks if not dlo <= t <= dhi and apart(t)])


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
