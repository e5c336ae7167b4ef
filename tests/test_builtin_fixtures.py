"""The built-in Transformer's training numbers and study tables equal those recorded before the one-engine change.

The fixtures (tests/fixtures/builtin_*.json) were written by the code before the built-in model went through
``scaling.parametrize``: per case (scheme, model and optimizer options) the losses and RMS metrics of a grid of
learning rates × seeds over 4 steps, the coordinate-check rows and slopes and the transfer rows of tiny studies.
"""

import dataclasses
import json
import pathlib

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from scaling.training.data.config import DataConfig
from scaling.training.model.family import ModelFamily
from scaling.training.optimizer import OptimizerConfig
from scaling.training.loop import run as loop_lib
from scaling.base.config import Seeds
from scaling.studies.coord_check import slopes as coord_slopes
from scaling.studies.coord_check import study as coord_check
from scaling.studies.grid import points as grid_lib
from scaling.studies.transfer import study as transfer

FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures"
TRAINING = json.loads((FIXTURES / "builtin_training.json").read_text())
STUDIES = json.loads((FIXTURES / "builtin_studies.json").read_text())
# The cases replayed (each compiles its own step; the others are in the fixture for a longer check).
REPLAYED = ("ntk", "mup_zero_bias_learned", "mup_depth", "mup_qknorm", "mup_heads_grow", "mup_sgd", "umup",
            "mup_adamw")
RTOL = 2e-5


def _close(test, got, want, what):
  np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=RTOL, atol=1e-6,
                             err_msg=what)


class TrainingFixtureTest(parameterized.TestCase):

  @parameterized.parameters(*REPLAYED)
  def test_training_numbers_unchanged(self, name):
    case = TRAINING[name]["case"]
    data = DataConfig(seq_len=8, batch_size=4).make(0)
    family = ModelFamily(**{**dict(depth=2, num_heads=2, base_width=16), **case["family"]})
    cfg = family.model_config(case["scheme"], 32, vocab_size=data.vocab_size, max_len=data.seq_len)
    if case.get("use_bias"):
      cfg = dataclasses.replace(cfg, use_bias=True)
    opt = OptimizerConfig(steps=4, learning_rate=1e-2, **case["opt"])
    want = TRAINING[name]["records"]["32"]
    runs = loop_lib.Runs(seed=[0, 1, 0, 1], learning_rates=[1e-2, 1e-2, 3e-3, 3e-3])
    res = loop_lib.run_training(cfg, opt, data, runs,
                                loop_lib.RunOptions(record=tuple(want), stop_on_divergence=False))
    for key, values in want.items():
      _close(self, res.records[key], values, f"{name}: {key}")


class StudyFixtureTest(absltest.TestCase):

  def test_coord_check_rows_and_slopes_unchanged(self):
    # The fixture's widths are 16, 32, 64. A width's rows do not depend on the other widths (the base width is
    # 16 either way), and the least-squares slope over log2 widths equally spaced gives the middle one zero weight
    # (half the difference of the ends), so the rows at 16 and 64 reproduce every recorded slope; width 32 of the
    # same family is replayed by the transfer rows below.
    task = DataConfig(seq_len=8, batch_size=4)
    cfg = coord_check.CoordCheckConfig(
        grid=grid_lib.WidthGrid(parametrizations=("sp", "mup"), widths=(16, 64)), seeds=Seeds(num_seeds=2),
        data=task, model=ModelFamily(depth=1, num_heads=2),
        optim=OptimizerConfig(steps=2, learning_rate=0.03))
    rows = coord_check.run_coord_check(cfg, task.make(0))
    want = [r for r in STUDIES["coord_rows"] if r["width"] in (16, 64)]
    self.assertEqual([(r["parametrization"], r["width"], r["step"], r["layer"]) for r in rows],
                     [(r["parametrization"], r["width"], r["step"], r["layer"]) for r in want])
    _close(self, [r["rms_seeds"] for r in rows], [r["rms_seeds"] for r in want], "rms")
    slopes = coord_slopes.slopes(rows)
    _close(self, [s["slope"] for s in slopes], [s["slope"] for s in STUDIES["coord_slopes"]], "slopes")

  def test_transfer_rows_unchanged(self):
    task = DataConfig(seq_len=8, batch_size=4)
    cfg = transfer.TransferConfig(
        grid=grid_lib.WidthGrid(parametrizations=("sp", "mup"), widths=(16, 32)), log2_lrs=(-9.0, -6.0, -3.0),
        seeds=Seeds(num_seeds=2), data=task, model=ModelFamily(depth=1, num_heads=2, base_width=16),
        optim=OptimizerConfig(steps=6, schedule="cosine", warmup_steps=2, end_factor=0.1))
    rows = [row for point in cfg.grid.points(cfg.model) for row in transfer.run_point(cfg, point, task.make(0))]
    want = STUDIES["transfer_rows"]
    self.assertEqual(len(rows), len(want))
    for got, old in zip(rows, want):
      self.assertEqual({k: got[k] for k in ("parametrization", "width", "log2_lr")},
                       {k: old[k] for k in ("parametrization", "width", "log2_lr")})
      _close(self, [x if x is not None else np.nan for x in got["final_loss_seeds"]],
             [x if x is not None else np.nan for x in old["final_loss_seeds"]], "final loss")


if __name__ == "__main__":
  absltest.main()
