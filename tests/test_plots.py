"""Figures: log axes labelled with numbers, overlapping curves told apart, optima at the grid edge marked."""

import math
import pathlib
from unittest import mock

from absl.testing import absltest
import chex

from scaling.runs import plotting
from scaling.studies import train as training
from scaling.studies.transfer import report as transfer_report


def _capture(test):
  """Patches ``plotting.save_figure`` to keep the figures instead of saving them; returns {path name: figure}."""
  figures = {}

  def keep(fig, path):
    figures[pathlib.Path(path).name] = fig

  patcher = mock.patch.object(plotting, "save_figure", keep)
  patcher.start()
  test.addCleanup(patcher.stop)
  test.addCleanup(lambda: [plotting.plt.close(f) for f in figures.values()])
  return figures


def _labels_in_view(ax):
  """(position, text) of the labelled y ticks inside the axis limits, after drawing."""
  ax.figure.canvas.draw()
  lo, hi = ax.get_ylim()
  return [(t.get_position()[1], t.get_text()) for t in ax.yaxis.get_ticklabels(which="both")
          if t.get_text() and lo <= t.get_position()[1] <= hi]


class PlotTest(chex.TestCase):

  def test_log2_ticks_are_plain_text(self):
    cases = {16.0: "16", 1024.0: "1024", 1.0: "1", 2.0 ** -10: "2⁻¹⁰", 2.0 ** 20: "2²⁰", 0.375: "0.375", 3.0: "3"}
    for value, text in cases.items():
      self.assertEqual(plotting.power_of_two_label(value), text, value)
    fig, ax = plotting.grid_figure(1, 1)
    plotting.line_plot(None, {"a": ([16, 64, 256], [1.0, 2.0, 3.0])}, xlabel="d_k", ylabel="y", logx2=True,
                       ax=ax[0][0])
    fig.canvas.draw()
    shown = [t.get_text() for t in ax[0][0].get_xticklabels() if t.get_text()]
    self.assertIn("64", shown)
    self.assertFalse([t for t in shown if "$" in t], shown)  # no math text to parse
    plotting.save_figure(fig, pathlib.Path(self.create_tempdir()) / "x.png")

  def test_loss_png_log_axis_has_number_labels(self):
    figures = _capture(self)
    losses = [4.2, 3.9, 3.6, 3.4, 3.2, 3.05, 2.95, 2.9]  # less than a decade, as a short run's loss
    rows = [{"step": 10 * i, "loss": loss, "grad_norm": 1.0 + i, "layer_grad_norm": [1.0], "attn_entropy": [0.5],
             "attn_max_logit": [2.0]} for i, loss in enumerate(losses)]
    training.write_plots(pathlib.Path("/nonexistent"), rows, depth=1)
    (ax,) = figures["loss.png"].axes
    self.assertEqual(ax.get_yscale(), "log")
    labels = _labels_in_view(ax)
    self.assertGreaterEqual(len(labels), 4, labels)  # not just "3×10⁰" and "4×10⁰"
    for position, text in labels:
      self.assertTrue(math.isclose(float(text), position, rel_tol=1e-6), (text, position))  # plain numbers

  def test_overlapping_curves_stay_distinguishable(self):
    fig, axes = plotting.grid_figure(1, 1)
    self.addCleanup(plotting.plt.close, fig)
    same = ([16, 64, 256], [1.0, 1.0, 1.0])  # e.g. sqrt and qk_norm with equal values: one line on the other
    plotting.line_plot(None, {"sqrt": same, "qk_norm": same, "linear": same}, xlabel="d_k", ylabel="y",
                       ax=axes[0][0])
    lines = axes[0][0].get_lines()
    self.assertLen({line.get_marker() for line in lines}, 3)
    self.assertLen({line.get_linestyle() for line in lines}, 3)
    self.assertTrue(all(line.get_fillstyle() == "none" for line in lines))  # hollow: a marker below shows

  def test_transfer_png_marks_an_optimum_at_the_grid_edge(self):
    figures = _capture(self)
    lrs = (-10.0, -9.0, -8.0)
    losses = {64: (3.0, 2.0, 2.5), 128: (3.0, 2.8, 2.6)}  # width 64: inside the grid; width 128: at its edge
    rows = [{"parametrization": "mup", "width": w, "log2_lr": lr, "final_loss": y, "initial_loss": 4.0}
            for w, ys in losses.items() for lr, y in zip(lrs, ys)]
    optima = [{"parametrization": "mup", "width": 64, "log2_lr": -9.0, "final_loss": 2.0, "at_edge": False},
              {"parametrization": "mup", "width": 128, "log2_lr": -8.0, "final_loss": 2.6, "at_edge": True}]
    transfer_report.write_figure("transfer.png", rows, optima)
    ax = figures["transfer.png"].axes[0]
    stars = {tuple(line.get_xydata()[0]): line for line in ax.get_lines() if line.get_marker() == "*"}
    self.assertCountEqual(stars, [(-9.0, 2.0), (-8.0, 2.6)])
    self.assertNotEqual(stars[(-9.0, 2.0)].get_markerfacecolor(), "none")  # inside: filled
    self.assertEqual(stars[(-8.0, 2.6)].get_markerfacecolor(), "none")     # at the edge: hollow and labelled
    texts = [(t.get_text(), tuple(t.xy)) for t in ax.texts]
    self.assertEqual(texts, [("at grid edge", (-8.0, 2.6))])


if __name__ == "__main__":
  absltest.main()
