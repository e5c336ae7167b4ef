"""Every figure the project draws, read back from matplotlib: tick labels beside the data, legible text, no overlap.

Each figure-writing function is drawn from small synthetic rows of the structure it is given in a run (no
training), through the real ``plotting.save_figure`` into a temporary folder (``pyplot.close`` is patched to keep
the figure), and then checked on the drawn figure:

- every visible axis with data has at least two labelled major ticks inside the data's range on that axis (the
  range clipped to the view; on a log axis compared in log space), and every major tick in view has a non-empty
  label;
- a panel's tick labels do not overlap each other;
- every text is at least ``MIN_FONTSIZE`` points (legends included), lies inside the figure, and a panel's
  title, axis labels, tick labels and legend do not run into another panel.

``coord_check.png``'s regression case: SP rows from 0.3 to 200 and μP rows from 0.3 to 1.5, every panel on one
shared y range set after the panel was drawn. The labels used to be chosen from the panel's own narrow range
before the shared one was set, which left 40, 80, ..., 200 jammed at the top of the μP panels.
"""

import itertools
import math
import pathlib
import re
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import chex
import matplotlib
from matplotlib import patches as mpatches
from matplotlib import text as mtext
import numpy as np

from benchmarks import attention as bench_attention
from benchmarks import studies as bench_studies
from benchmarks import sweep as bench_sweep
from benchmarks import train as bench_train
from scaling.runs import plotting
from scaling.studies import sweep as sweep_lib
from scaling.studies import train as train_lib
from scaling.studies.coord_check import slopes as coord_slopes
from scaling.studies.coord_check import verdicts as coord_verdicts
from scaling.studies.transfer import report as transfer_report

ROOT = pathlib.Path(__file__).resolve().parents[1]
MIN_FONTSIZE = 7.0
TOLERANCE_PX = 1.0
LABEL_GAP_PX = 2.0
"""Tick labels of one axis at least this far apart (display pixels at the figure's own dpi)."""


# --------------------------------------------------------------------------------------------------------------
# Reading a drawn figure back.


def _data_range(ax, axis: str) -> tuple[float, float] | None:
  """The range of the data drawn on ``ax`` along ``axis`` ("x" or "y"), clipped to the view; None without data.

  Data: the finite points of the lines (positive ones on a log axis) and the extent of the bars.
  """
  log = (ax.get_xscale() if axis == "x" else ax.get_yscale()) == "log"
  column = 0 if axis == "x" else 1
  values = []
  for line in ax.get_lines():
    if line.get_visible():
      values.extend(np.asarray(line.get_xydata(), float).reshape(-1, 2)[:, column].tolist())
  for patch in ax.patches:
    if isinstance(patch, mpatches.Rectangle) and patch.get_visible():
      x, y, w, h = patch.get_x(), patch.get_y(), patch.get_width(), patch.get_height()
      values.extend([x, x + w] if axis == "x" else [y, y + h])
  values = [v for v in values if math.isfinite(v) and (v > 0 or not log)]
  if not values:
    return None
  view = sorted(ax.get_xlim() if axis == "x" else ax.get_ylim())
  lo, hi = max(min(values), view[0]), min(max(values), view[1])
  return (lo, hi) if lo <= hi else None


def _inside(value: float, lo: float, hi: float, log: bool) -> bool:
  """``lo <= value <= hi`` up to rounding (in log space on a log axis)."""
  if log:
    if value <= 0:
      return False
    value, lo, hi = math.log10(value), math.log10(lo), math.log10(hi)
  slack = 1e-9 * max(abs(hi - lo), abs(hi), 1e-300)
  return lo - slack <= value <= hi + slack


def _major_ticks(ax, axis: str) -> list[tuple[float, str, mtext.Text]]:
  """(position, label text, label) of the major ticks inside the view of ``ax``'s ``axis``."""
  ax_axis = ax.xaxis if axis == "x" else ax.yaxis
  log = ax_axis.get_scale() == "log"
  lo, hi = sorted(ax_axis.get_view_interval())
  locs = list(ax_axis.get_majorticklocs())
  ticks = ax_axis.get_major_ticks(len(locs))
  return [(float(loc), tick.label1.get_text(), tick.label1) for loc, tick in zip(locs, ticks)
          if _inside(loc, lo, hi, log)]


def _has_data(ax) -> bool:
  return _data_range(ax, "x") is not None and _data_range(ax, "y") is not None


def _overlap(a, b, tolerance: float = TOLERANCE_PX) -> bool:
  """Whether two display boxes overlap by more than ``tolerance`` pixels in both directions (a negative
  tolerance: whether they come closer than that)."""
  return min(a.x1, b.x1) - max(a.x0, b.x0) > tolerance and min(a.y1, b.y1) - max(a.y0, b.y0) > tolerance


def _tick_labels(ax, axis: str, *, in_view: bool) -> list[mtext.Text]:
  """The labels of ``ax``'s ticks on ``axis`` (major and minor), those inside the view only with ``in_view``."""
  ax_axis = ax.xaxis if axis == "x" else ax.yaxis
  log = ax_axis.get_scale() == "log"
  lo, hi = sorted(ax_axis.get_view_interval())
  labels = []
  for locs, ticks in ((ax_axis.get_majorticklocs(), ax_axis.get_major_ticks),
                      (ax_axis.get_minorticklocs(), ax_axis.get_minor_ticks)):
    for loc, tick in zip(locs, ticks(len(locs))):
      if not in_view or _inside(float(loc), lo, hi, log):
        labels += [tick.label1, tick.label2]
  return labels


def _texts(fig) -> list[mtext.Text]:
  """The drawn, non-empty texts of ``fig`` (titles, labels, tick labels in view, legends, annotations)."""
  shown = lambda t: t.get_visible() and t.get_text().strip() and (t.axes is None or t.axes.get_visible())
  panels = [ax for ax in fig.axes if ax.get_visible()]
  every_tick = {id(t) for ax in fig.axes for a in "xy" for t in _tick_labels(ax, a, in_view=False)}
  ticks = [t for ax in panels for a in "xy" for t in _tick_labels(ax, a, in_view=True)]
  return [t for t in fig.findobj(mtext.Text) if id(t) not in every_tick and shown(t)] + [t for t in ticks
                                                                                        if shown(t)]


def problems(fig) -> list[str]:
  """What makes a drawn figure hard to read (empty when nothing does)."""
  fig.draw_without_rendering()  # lays every text out as drawing does, without painting pixels
  renderer = fig.canvas.get_renderer()
  found = []
  panels = [ax for ax in fig.axes if ax.get_visible()]
  for n, ax in enumerate(panels):
    name = f"panel {n} ({ax.get_title()!r})"
    if not _has_data(ax):
      continue
    for axis in ("x", "y"):
      log = (ax.get_xscale() if axis == "x" else ax.get_yscale()) == "log"
      lo, hi = _data_range(ax, axis)
      ticks = _major_ticks(ax, axis)
      empty = [pos for pos, text, _ in ticks if not text.strip()]
      if empty:
        found.append(f"{name}: major {axis} ticks in view without a label at {empty}")
      near = [text for pos, text, _ in ticks if text.strip() and _inside(pos, lo, hi, log)]
      if len(near) < 2:
        found.append(f"{name}: {len(near)} labelled {axis} tick(s) {near} inside the data's range "
                     f"[{lo:.3g}, {hi:.3g}] (labels: {[t for _, t, _ in ticks]})")
      boxes = [(text, label.get_window_extent(renderer)) for _, text, label in ticks if text.strip()]
      for (t1, b1), (t2, b2) in itertools.combinations(boxes, 2):
        if _overlap(b1, b2, -LABEL_GAP_PX):
          found.append(f"{name}: {axis} tick labels {t1!r} and {t2!r} overlap or touch")
    legend = ax.get_legend()
    if legend is not None:
      small = [(t.get_text(), t.get_fontsize()) for t in legend.get_texts() if t.get_fontsize() < MIN_FONTSIZE]
      if small:
        found.append(f"{name}: legend text below {MIN_FONTSIZE} pt: {small[:3]}")
  for t in _texts(fig):
    if t.get_fontsize() < MIN_FONTSIZE:
      found.append(f"text {t.get_text()!r} is {t.get_fontsize()} pt")
    box = t.get_window_extent(renderer)
    frame = fig.bbox
    if (box.x0 < frame.x0 - TOLERANCE_PX or box.x1 > frame.x1 + TOLERANCE_PX or box.y0 < frame.y0 - TOLERANCE_PX
        or box.y1 > frame.y1 + TOLERANCE_PX):
      found.append(f"text {t.get_text()!r} runs out of the figure ({box.x0:.0f}..{box.x1:.0f} x "
                   f"{box.y0:.0f}..{box.y1:.0f} in {frame.width:.0f} x {frame.height:.0f})")
  for ax in panels:
    own = [ax.title, ax.xaxis.label, ax.yaxis.label, *_tick_labels(ax, "x", in_view=True),
           *_tick_labels(ax, "y", in_view=True)]
    own = [(t.get_text(), t.get_window_extent(renderer)) for t in own if t.get_visible() and t.get_text().strip()]
    if ax.get_legend() is not None:
      box = ax.get_legend().get_window_extent(renderer)
      own.append(("legend", box))
      if (box.x0 < fig.bbox.x0 - TOLERANCE_PX or box.x1 > fig.bbox.x1 + TOLERANCE_PX
          or box.y0 < fig.bbox.y0 - TOLERANCE_PX or box.y1 > fig.bbox.y1 + TOLERANCE_PX):
        found.append(f"the legend of panel {ax.get_title()!r} runs out of the figure")
    for other in panels:
      for text, box in own if other is not ax else ():
        if _overlap(box, other.bbox):
          found.append(f"{text!r} of panel {ax.get_title()!r} runs into panel {other.get_title()!r}")
  return found


class FigureTestCase(chex.TestCase):
  """Keeps the figures that go through ``plotting.save_figure`` and checks them.

  ``save_figure`` runs as in a study (its layout included); ``Figure.savefig`` only records the file's name
  (encoding the PNG is the slow part, and what it would show is the figure checked here), and ``pyplot.close``
  keeps the figure for the checks (closed when the test ends).
  """

  def setUp(self):
    super().setUp()
    self.out = pathlib.Path(self.create_tempdir().full_path)
    self.saved: list[tuple[str, matplotlib.figure.Figure]] = []
    kept = set()
    close = plotting.plt.close

    def savefig(fig, path, **_):
      self.saved.append((pathlib.Path(path).name, fig))

    def keep(fig=None):
      if isinstance(fig, matplotlib.figure.Figure):
        kept.add(fig)
      else:
        close(fig)

    for patcher in (mock.patch.object(matplotlib.figure.Figure, "savefig", savefig),
                    mock.patch.object(plotting.plt, "close", keep)):
      patcher.start()
      self.addCleanup(patcher.stop)
    self.addCleanup(lambda: [close(f) for f in kept | {f for _, f in self.saved}])

  def assertReadable(self, fig, what: str = ""):
    found = problems(fig)
    self.assertEmpty(found, f"{what}: " + "\n".join(found))

  def drawn(self) -> list:
    """The figures saved since the test began, in order."""
    self.assertNotEmpty(self.saved, "no figure was saved")
    return [fig for _, fig in self.saved]


# --------------------------------------------------------------------------------------------------------------
# The log y axis itself.


class LogAxisTest(FigureTestCase):

  @parameterized.named_parameters(
      ("narrow_loss", [4.2, 3.9, 3.5, 3.2, 2.95, 2.9], None),
      ("just_under_a_decade", [0.11, 0.2, 0.5, 1.05], None),
      ("three_decades", [0.3, 2.0, 20.0, 200.0], None),
      ("twelve_decades", [1e-6, 1e-2, 1e2, 1e6], None),
      ("narrow_data_in_a_wide_range_set_later", [0.3, 0.6, 1.0, 1.5], (0.23, 260.0)),
      ("narrow_range_set_later", [0.3, 30.0, 200.0], (0.9, 1.6)),
  )
  def test_labels_beside_the_data(self, ys, ylim):
    fig, axes = plotting.grid_figure(1, 1)
    ax = axes[0][0]
    plotting.line_plot(None, {"a": (list(range(len(ys))), ys)}, xlabel="step", ylabel="y", logy=True, ax=ax)
    if ylim is not None:
      ax.set_ylim(*ylim)  # after the labels were set up, as a shared range is
    plotting.save_figure(fig, self.out / "a.png")
    self.assertEqual(ax.get_yscale(), "log")
    self.assertReadable(fig)
    for position, text, _ in _major_ticks(ax, "y"):
      self.assertNotIn("$", text)  # plain numbers, no math text
      self.assertTrue(math.isclose(float(text), position, rel_tol=1e-6), (text, position))

  def test_non_finite_values_are_gaps(self):
    fig, axes = plotting.grid_figure(1, 1)
    plotting.line_plot(None, {"a": ([1, 2, 3, 4, 5], [1.0, None, math.inf, math.nan, 10.0]),
                              "b": ([1, 2, 3, 4, 5], [2.0, 3.0, -math.inf, 5.0, 6.0])},
                       xlabel="x", ylabel="y", logy=True, errors={"a": [0.1, None, 0.1, 0.1, math.inf]},
                       ax=axes[0][0])
    plotting.save_figure(fig, self.out / "a.png")
    self.assertTrue(all(map(math.isfinite, axes[0][0].get_ylim())))
    self.assertReadable(fig)


# --------------------------------------------------------------------------------------------------------------
# coord_check.png (the study and any model's check).


LAYERS = ("embed", "block_0/attn_logits", "block_0/mlp_out", "readout")
WIDTHS = (64, 128, 256, 512, 1024)


def coord_rows(spans, axis="width", values=WIDTHS, alphas=(None,)):
  """Rows as ``slopes.coord_rows`` makes them. ``spans``: {parametrization: [(smallest, largest rms) per step]};
  in each panel every layer starts at the smallest value at the first width, the last layer ends at the largest
  value, the others below it."""
  rows = []
  for name, per_step in spans.items():
    for alpha, (step, (lo, hi)), (n, layer) in itertools.product(alphas, enumerate(per_step), enumerate(LAYERS)):
      for i, x in enumerate(values):
        rms = lo * (hi / lo) ** (i / (len(values) - 1) * (n + 1) / len(LAYERS))
        row = {"parametrization": name, axis: x, "step": step, "layer": layer, "rms": rms, "rms_std": 0.01 * rms,
               "rms_seeds": [rms * 0.99, rms * 1.01]}
        if alpha is not None:
          row["depth_alpha"] = alpha
        rows.append(row)
  return rows


SP_AND_MUP = {"sp": [(0.3, 1.5), (0.3, 200.0)], "mup": [(0.3, 1.5), (0.3, 1.5)]}
"""The user report's coord_check.png: SP's step 0 and every μP panel from 0.3 to 1.5, SP after updates to 200."""


class CoordCheckFigureTest(FigureTestCase):

  def test_shared_range_of_sp_and_mup(self):
    """The user report's shape: SP up to 200, μP and SP's step 0 from 0.3 to 1.5, one y range in every panel."""
    rows = coord_rows(SP_AND_MUP)
    coord_slopes.write_figure(self.out / "coord_check.png", rows, coord_slopes.slopes(rows))
    (fig,) = self.drawn()
    self.assertLen(fig.axes, 4)
    self.assertLen({ax.get_ylim() for ax in fig.axes}, 1)  # still one shared range
    self.assertTrue(all(ax.get_yscale() == "log" for ax in fig.axes))
    self.assertReadable(fig, "coord_check.png")
    for ax in (fig.axes[0], fig.axes[2], fig.axes[3]):  # the panels from 0.3 to 1.5
      labels = [text for pos, text, _ in _major_ticks(ax, "y") if 0.3 <= pos <= 1.5]
      self.assertGreaterEqual(len(labels), 2, (ax.get_title(), labels))
    self.assertIn("(+", fig.axes[1].get_legend().get_texts()[-1].get_text())  # slopes in the legend

  def test_depth_axis(self):
    rows = coord_rows({"mup": [(0.5, 3.0)] * 2}, axis="depth", values=(2, 4, 8, 16), alphas=(0.5, 1.0))
    coord_slopes.write_figure(self.out / "coord_check_depth.png", rows, coord_slopes.slopes(rows))
    (fig,) = self.drawn()
    self.assertLen(fig.axes, 4)
    self.assertEqual(fig.axes[2].get_title(), "mup, α=1, step 0")
    self.assertReadable(fig, "coord_check_depth.png")

  def test_a_layer_keeps_its_style_when_missing_from_a_panel(self):
    rows = [r for r in coord_rows({"mup": [(0.3, 1.5)] * 2}) if not (r["layer"] == LAYERS[0] and r["step"] == 0)]
    coord_slopes.write_figure(self.out / "c.png", rows, coord_slopes.slopes(rows))
    first, second = self.drawn()[0].axes
    style = lambda ax, n: next((line.get_color(), line.get_marker()) for line in ax.get_lines()
                               if line.get_label().startswith(LAYERS[n]))
    for n in range(1, len(LAYERS)):
      self.assertEqual(style(first, n), style(second, n), LAYERS[n])

  @parameterized.named_parameters(("slopes", "slopes", False), ("any_model", "result", False),
                                  ("any_model_delta", "result", True))
  def test_unmeasurable_rows(self, draw, delta):
    """RMS values of inf, NaN, None or 0 (diverged, not measurable) are left out of the figure."""
    rows = coord_rows({"sp": [(0.3, 1.5), (0.3, 200.0)], "mup": [(0.3, 1.5)] * 2})
    for r in rows:
      r["delta_rms"] = 0.0 if r["step"] == 0 else r["rms"] / 2
      r["delta_rms_seeds"] = [v / 2 for v in r["rms_seeds"]]
    bad = {(LAYERS[1], 64): math.inf, (LAYERS[1], 128): math.nan, (LAYERS[2], 256): None, (LAYERS[2], 1024): 0.0}
    for r in rows:
      value = bad.get((r["layer"], r["width"]), "ok")
      if value != "ok" or (r["layer"] == LAYERS[2] and r["parametrization"] == "mup"):  # never measurable in μP
        value = math.inf if value == "ok" else value
        r["rms"] = r["delta_rms"] = value
        r["rms_seeds"] = r["delta_rms_seeds"] = [value] * 2
    if draw == "slopes":
      coord_slopes.write_figure(self.out / "cc.png", rows, coord_slopes.slopes(rows))
    else:
      coord_verdicts.from_rows(rows, 1).write_figure(self.out / "cc.png", delta=delta)
    self.assertEqual([name for name, _ in self.saved], ["cc.png"])
    (fig,) = self.drawn()
    self.assertLen(fig.axes, 2 if delta else 4)
    for ax in fig.axes:
      self.assertTrue(all(map(math.isfinite, ax.get_ylim())))
      for line in ax.get_lines():
        ys = line.get_ydata()
        self.assertTrue(all(math.isfinite(y) and y > 0 for y in ys), (line.get_label(), ys))
    self.assertReadable(fig, "any model's coord_check.png")

  def test_nothing_measurable(self):
    rows = coord_rows({"mup": [(0.3, 1.5)] * 2})
    for r in rows:
      r["rms"] = math.nan
    coord_slopes.write_figure(self.out / "c.png", rows, coord_slopes.slopes(rows))  # no exception
    self.assertLen(self.drawn()[0].axes, 2)


# --------------------------------------------------------------------------------------------------------------
# The training run's figures, the sweep's, transfer's.


class TrainFigureTest(FigureTestCase):

  def test_loss_grad_norm_attention(self):
    n, first, last = 12, 4.2, 2.9  # less than a decade of loss, as a short run's
    rows = [{"step": 10 * i, "loss": first * (last / first) ** (i / (n - 1)), "grad_norm": 1.0 + i,
             "layer_grad_norm": [0.5 + 0.1 * i, 0.3 + 0.2 * i], "attn_entropy": [2.0 - 0.05 * i, 1.5 - 0.1 * i],
             "attn_max_logit": [1.0 + 0.5 * i, 2.0 + i]} for i in range(n)]
    rows[3]["loss"] = math.nan  # a logged non-finite value is a gap
    rows[4]["layer_grad_norm"] = None
    names = train_lib.write_plots(self.out, rows, depth=2)
    self.assertEqual(names, ["loss.png", "grad_norm.png", "attention.png"])
    figures = self.drawn()
    self.assertLen(figures, 3)
    for name, fig in zip(names, figures):
      self.assertReadable(fig, name)
    self.assertEqual(figures[0].axes[0].get_yscale(), "log")


def sweep_rows(width_mode: bool):
  """Rows as ``sweep.run_sweep`` makes them: one per (rule[, parametrization, width]) and d_k, each metric
  {"mean", "std"} over seeds."""
  rows = []
  metrics = {m for m, _, _ in sweep_lib.PLOTS} | set(sweep_lib.TABLE_COLUMNS[2:])
  points = [("mup", 64), ("mup", 256), ("sp", 64)] if width_mode else [(None, None)]
  for (name, width), rule, d_k in itertools.product(points, ("none", "sqrt", "linear"), (16, 32, 64, 128, 256)):
    grow = {"none": d_k ** 0.5, "sqrt": 1.0, "linear": d_k ** -0.5}[rule] * (width or 64) / 64
    row = {"rule": rule, "d_k": d_k, "seq_len": 128, "dtype": "float32", "causal": False, "attention": "dense",
           "qk_std": 1.0}
    if width_mode:
      row.update(parametrization=name, width=width, base_width=64, zero_query=False)
    for m in metrics:
      mean = {"entropy_normalized": 1 / (1 + 0.3 * grow), "max_prob": 0.05 + 0.9 * grow / (1 + grow)}.get(m, grow)
      row[m] = {"mean": mean, "std": 0.05 * mean}
    rows.append(row)
  return rows


class SweepFigureTest(FigureTestCase):

  def test_every_plot_and_the_summary(self):
    # Width mode (the most lines: rule × parametrization × width); the summary's four metrics, on linear and log
    # axes (the other metrics' PNGs are drawn by the same call).
    plots = tuple(p for p in sweep_lib.PLOTS if p[0] in sweep_lib.SUMMARY_PANELS)
    self.assertEqual({p[2] for p in plots}, {False, True})
    with mock.patch.object(sweep_lib, "PLOTS", plots):
      names = sweep_lib.write_plots(self.out, sweep_rows(width_mode=True))
    self.assertEqual([name for name, _ in self.saved], names)
    self.assertEqual(names[-1], "summary.png")
    for name, fig in self.saved:
      self.assertReadable(fig, name)


def transfer_rows(panels, widths=(32, 64, 128), lrs=(-10.0, -9.0, -8.0, -7.0, -6.0, -5.0)):
  """Rows and optimum rows as ``scaling.studies.transfer.study`` makes them: final loss per (panel key, width,
  log2 lr); each panel a dict of curve fields; a diverged point has final_loss None."""
  rows, optima = [], []
  for key, width in itertools.product(panels, widths):
    best = -8.0 + 0.2 * math.log2(width / 32)
    for lr in lrs:
      loss = 2.0 + 0.08 * (lr - best) ** 2 - 0.05 * math.log2(width / 32)
      rows.append({**key, "width": width, "log2_lr": lr, "final_loss": None if lr == lrs[-1] and width == 128
                   else loss, "initial_loss": 4.2, "final_loss_seeds": [loss, loss]})
    inside = [r for r in rows[-len(lrs):] if r["final_loss"] is not None]
    top = min(inside, key=lambda r: r["final_loss"])
    optima.append({**key, "width": width, "log2_lr": top["log2_lr"], "log2_lr_interp": top["log2_lr"],
                   "final_loss": top["final_loss"], "at_edge": top["log2_lr"] in (lrs[0], lrs[-1]),
                   "sensitivity_mean": 0.1 + 0.01 * width / 32 + 0.02 * len(optima) % 3, "sensitivity_std": 0.005})
  return rows, optima


class TransferFigureTest(FigureTestCase):

  @parameterized.named_parameters(
      ("width", [{"parametrization": "sp"}, {"parametrization": "mup"}]),
      ("rules", [{"parametrization": "mup", "rule": r} for r in ("none", "sqrt", "linear", "qk_norm", "temp")]),
  )
  def test_transfer_and_sensitivity(self, panels):
    rows, optima = transfer_rows(panels)
    transfer_report.write_figure(self.out / "transfer.png", rows, optima)
    transfer_report.write_sensitivity_figure(self.out / "sensitivity.png", optima)
    transfer, sensitivity = self.drawn()
    self.assertLen([ax for ax in transfer.axes if ax.get_visible()], len(panels))
    self.assertReadable(transfer, "transfer.png")
    self.assertReadable(sensitivity, "sensitivity.png")

  def test_depth_axis(self):
    panels = [{"parametrization": "mup", "depth_alpha": a} for a in (0.5, 1.0)]
    rows, optima = transfer_rows(panels)
    rows = [{**{k: v for k, v in r.items() if k != "width"}, "width": 64, "depth": r["width"] // 16} for r in rows]
    optima = [{**{k: v for k, v in o.items() if k != "width"}, "width": 64, "depth": o["width"] // 16}
              for o in optima]
    keys = ("parametrization", "depth_alpha", "width", "depth")
    transfer_report.write_figure(self.out / "transfer_depth.png", rows, optima, keys=keys)
    transfer_report.write_sensitivity_figure(self.out / "sensitivity.png", optima, keys=keys)
    for fig in self.drawn():
      self.assertReadable(fig, "transfer across depth")


# --------------------------------------------------------------------------------------------------------------
# The benchmark suites' figures.


class BenchmarkFigureTest(FigureTestCase):

  def test_attention(self):
    config = bench_attention.AttentionBenchConfig()
    timings = [{"impl": impl, "head_dim": h, "mode": mode, "seq_len": t, "causal": True, "batch": config.batch,
                "num_heads": config.num_heads, "num_kv_heads": config.num_heads,
                "ms": 0.01 * (i + 1) * (t / 512) ** 1.6 * h / 64}
               for i, impl in enumerate(bench_attention.IMPLEMENTATIONS) for h in config.head_dims
               for mode in bench_attention.MODES for t in (512, 2048, 8192)]
    timings[0]["ms"] = None  # a case that was skipped
    bench_attention._plot(self.out / "attention.png", timings, config)
    (fig,) = self.drawn()
    self.assertReadable(fig, "attention.png")

  def test_studies(self):
    studies = [{"study": s, "cache": c, "compile_s": 10.0 * (i + 1) / (3 if c == "warm" else 1),
                "compute_s": 20.0 + 5 * i, "rest_s": 3.0, "wall_s": 0.0}
               for i, s in enumerate(bench_studies.STUDIES) for c in ("cold", "warm")]
    bench_studies._figure(studies, self.out / "studies.png")
    (fig,) = self.drawn()
    self.assertReadable(fig, "studies.png")

  def test_train(self):
    thr = {"flops_per_s": 4.2e9, "steps_per_s": 1.7, "fraction_of_peak": 0.12}
    names = ("one_at_a_time", "vmapped", "vmapped_all_at_once", "loop_shared_compile")
    grid = {"timings": {n: {"cold_s": 30.0 / (i + 1), "warm_s": 12.0 / (i + 1)} for i, n in enumerate(names)},
            "grid": {"runs": 24}, "speedup_cold": 3.4, "speedup_warm": 2.1}
    bench_train._figure(self.out / "train.png", 35e9, thr, grid)
    (fig,) = self.drawn()
    self.assertReadable(fig, "train.png")

  def test_sweep(self):
    rows = [{"method": "vmapped", "cold_s": 4.1, "warm_s": 0.6}, {"method": "one_at_a_time", "cold_s": 14.0,
                                                                   "warm_s": 1.3}]
    bench_sweep._figure(rows, 3.4, 2.1, self.out / "sweep.png")
    (fig,) = self.drawn()
    self.assertReadable(fig, "benchmarks' sweep.png")


# --------------------------------------------------------------------------------------------------------------
# The checks themselves, and the figure code's sources.


class ChecksTest(FigureTestCase):
  """The checks fail on the faults they look for."""

  def test_labels_away_from_the_data_fail(self):
    fig, axes = plotting.grid_figure(1, 1)
    ax = axes[0][0]
    ax.plot([1, 2, 3], [0.3, 0.8, 1.5])
    ax.set_yscale("log")
    ax.set_ylim(0.23, 260)
    ax.yaxis.set_major_locator(matplotlib.ticker.FixedLocator([40, 80, 120, 160, 200]))  # the old labels
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    self.assertTrue(any("inside the data's range" in p for p in problems(fig)), problems(fig))
    self.assertTrue(any("overlap" in p for p in problems(fig)), problems(fig))
    plotting.plt.close(fig)

  def test_small_legend_and_long_title_fail(self):
    fig, axes = plotting.grid_figure(1, 1)
    plotting.line_plot(None, {"a": ([1, 2, 3], [1, 2, 3])}, xlabel="x", ylabel="y", ax=axes[0][0],
                       title="a title much too long for the width of a single small panel of four inches")
    axes[0][0].legend(fontsize=5)
    plotting.save_figure(fig, self.out / "a.png")
    found = problems(fig)
    self.assertTrue(any("legend text below" in p for p in found), found)
    self.assertTrue(any("runs out of the figure" in p for p in found), found)


FIGURE_SOURCES = ("scaling", "benchmarks")


class SourceTest(absltest.TestCase):

  def test_no_font_below_the_minimum(self):
    small = []
    for folder in FIGURE_SOURCES:
      for path in sorted((ROOT / folder).rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
          for size in re.findall(r"fontsize\s*=\s*([0-9.]+)", line):
            if float(size) < MIN_FONTSIZE:
              small.append(f"{path.relative_to(ROOT)}:{number}: fontsize={size}")
    self.assertEmpty(small)


if __name__ == "__main__":
  absltest.main()
