"""Depth as the axis of the coordinate check and of the learning-rate transfer: rows, slopes, multipliers, flags."""

import dataclasses
import json
import pathlib
import shutil
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import numpy as np

import experiment_main
from experiments import coord_check as coord_exp
from experiments import transfer as transfer_exp
from scaling.training.data.config import DataConfig
from scaling.mup import layers as layers_lib
from scaling.training.model import transformer as model_lib
from scaling.training.model.family import ModelFamily
from scaling.training.optimizer import OptimizerConfig
from scaling.runs import results
from scaling.base.config import Seeds
from scaling.studies.coord_check import layers as coord_layers
from scaling.studies.coord_check import slopes as coord_slopes
from scaling.studies.coord_check import study as coord_check
from scaling.studies.grid import points as grid_lib
from scaling.studies.grid import run as grid_run
from scaling.studies.grid import optimum as optimum_lib
from scaling.studies.transfer import study as transfer

# One tiny configuration shared by the coordinate check (library and experiment) and the transfer experiment: the
# same models, optimizer and number of vmapped members (6 seeds; 3 learning rates x 2 seeds), so each (alpha, depth)
# compiles one program for the whole file.
DEPTHS = (1, 2)
ALPHAS = (0.0, 1.0)
WIDTH = 16
STEPS = 2
SEEDS = 6
LR = OptimizerConfig().learning_rate  # the transfer study's (hidden) learning rate
TASK = dict(seq_len=8, batch_size=4)
FAMILY = ModelFamily(num_heads=2)
COORD_FLAGS = dict(axis="depth", depths=list(DEPTHS), width=WIDTH, depth_alphas=list(ALPHAS), parametrizations=["sp"],
                   steps=STEPS, num_heads=2, learning_rate=LR, num_seeds=SEEDS, **TASK)
LOG2_LRS = (-9.0, -6.0, -3.0)
TRANSFER_FLAGS = dict(axis="depth", depths=list(DEPTHS), width=WIDTH, depth_alphas=list(ALPHAS),
                      parametrizations=["sp"], log2_lrs=list(LOG2_LRS), num_seeds=SEEDS // len(LOG2_LRS),
                      steps=STEPS + 1, num_heads=2, schedule="constant", end_factor=0.0, **TASK)


def _tempdir(test) -> pathlib.Path:
  path = pathlib.Path(tempfile.mkdtemp())
  test.addCleanup(shutil.rmtree, path, ignore_errors=True)
  return path


def _grid(**kw):
  base = dict(parametrizations=("sp",), axis="depth", depths=DEPTHS, width=WIDTH, depth_alphas=ALPHAS)
  if kw.get("axis") == "width":  # the width axis refuses the depth options: give only the one under test
    base.update(depths=None, width=None, depth_alphas=None)
  base.update(kw)
  return grid_lib.WidthGrid(**base)


class GridTest(parameterized.TestCase):

  def test_points_and_families(self):
    grid = _grid(parametrizations=("sp", "mup"), depths=(2, 8), depth_alphas=(0.5, 1.0))
    points = grid.points(FAMILY)
    self.assertEqual([(p["parametrization"], p["depth_alpha"], p["depth"]) for p in points],
                     [("sp", 0.5, 2), ("sp", 0.5, 8), ("sp", 1.0, 2), ("sp", 1.0, 8), ("mup", 0.5, 2), ("mup", 0.5, 8),
                      ("mup", 1.0, 2), ("mup", 1.0, 8)])
    self.assertTrue(all(p["width"] == WIDTH for p in points))
    dataset = DataConfig(**TASK).make(0)
    cfg = grid.model_config(FAMILY, points[3], dataset)  # sp, alpha 1, depth 8; base depth = the smallest depth
    self.assertEqual((cfg.depth, cfg.width), (8, WIDTH))
    self.assertAlmostEqual(cfg.parametrization.residual_multiplier(), (8 / 2)**-1.0)
    # Without --depth_alphas the model's own alpha is the only one; the width axis keeps its two-field points.
    self.assertEqual(_grid(depth_alphas=None).alphas(ModelFamily(depth_alpha=0.5)), (0.5,))
    self.assertEqual(grid_lib.WidthGrid(widths=(8, 16)).points(FAMILY),
                     [{"parametrization": "sp", "width": 8}, {"parametrization": "sp", "width": 16},
                      {"parametrization": "mup", "width": 8}, {"parametrization": "mup", "width": 16}])

  @parameterized.parameters((dict(axis="width", width=32), "^width only applies to axis='depth'"),
                            (dict(axis="width", depths=(2, 4)),
                             r"^depths only applies to axis='depth' \(axis='width' varies widths at depth\)$"),
                            (dict(axis="width", depth_alphas=(0.5,)), "^depth_alphas only applies"),
                            (dict(depth_alphas=(0.3,)), "^depth_alphas: "), (dict(depth_alphas=(1.5,)), "depth_alphas"),
                            (dict(depths=(0, 2)), "depths"), (dict(axis="height"), "axis"))
  def test_bad_grids(self, kw, text):
    with self.assertRaisesRegex(ValueError, text):
      _grid(**kw)

  def test_group_keys_hold_the_point(self):
    depth_row = {"parametrization": "mup", "depth_alpha": 0.5, "width": 64, "depth": 8, "step": 0, "layer": "embed"}
    self.assertEqual(grid_lib.group_key(depth_row), ("mup", 0.5, 64, 8))
    self.assertEqual(grid_lib.group_key({"parametrization": "sp", "width": 32, "log2_lr": -3.0}), ("sp", 32))

  def test_find_optimum_groups_by_alpha_and_depth(self):
    losses = {(0.0, 2): (3.0, 1.0, 2.0), (0.0, 4): (1.0, 2.0, 3.0), (1.0, 2): (3.0, 2.0, 1.0), (1.0, 4): (2.0, 1.5, 2.0)}
    rows = [{"parametrization": "sp", "depth_alpha": a, "width": 16, "depth": d, "log2_lr": x, "final_loss": y}
            for (a, d), ys in losses.items() for x, y in zip(LOG2_LRS, ys)]
    got = {(o["depth_alpha"], o["depth"]): o for o in optimum_lib.find_optimum(rows)}
    self.assertEqual(set(got), set(losses))
    for key, ys in losses.items():
      self.assertEqual(got[key]["log2_lr"], LOG2_LRS[ys.index(min(ys))])
      self.assertEqual((got[key]["parametrization"], got[key]["width"]), ("sp", 16))
    self.assertAlmostEqual(got[(1.0, 4)]["log2_lr_interp"], -6.0)  # symmetric neighbours: the vertex is the middle
    # Rows with only parametrization and width (as the training claims pass them) keep their two-field optimum.
    plain = optimum_lib.find_optimum([{"parametrization": "sp", "width": 8, "log2_lr": x, "final_loss": y}
                                   for x, y in zip(LOG2_LRS, (2.0, 1.0, 3.0))])
    self.assertEqual(set(plain[0]) & {"depth", "depth_alpha"}, set())
    self.assertEqual(plain[0]["log2_lr"], -6.0)

  def test_memory_estimate_covers_the_deepest_point(self):
    config = transfer.TransferConfig(grid=_grid(depths=(1, 3)), log2_lrs=LOG2_LRS, seeds=Seeds(num_seeds=2),
                                     data=DataConfig(**TASK), model=FAMILY,
                                     optim=OptimizerConfig(steps=3))
    estimate = grid_run.memory_estimate(config, DataConfig(**TASK).make(0))
    self.assertIn("depth=3", estimate.where)
    self.assertIn("depths", estimate.parts[0].flags)


class DepthCoordCheckTest(chex.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.dataset = DataConfig(**TASK).make(0)
    cls.config = coord_check.CoordCheckConfig(
        grid=_grid(), seeds=Seeds(num_seeds=SEEDS), data=DataConfig(**TASK), model=FAMILY,
        optim=OptimizerConfig(steps=STEPS, learning_rate=LR))
    cls.rows = coord_check.run_coord_check(cls.config, cls.dataset)
    cls.rms = {(r["depth_alpha"], r["depth"], r["layer"], r["step"]): r for r in cls.rows}

  def test_rows(self):
    self.assertLen(self.rows, len(ALPHAS) * len(DEPTHS) * len(coord_layers.DEPTH_LAYERS) * (STEPS + 1))
    for r in self.rows:
      self.assertEqual((r["parametrization"], r["width"]), ("sp", WIDTH))
      self.assertIn(r["depth"], DEPTHS)
      self.assertIn(r["depth_alpha"], ALPHAS)
      self.assertIn(r["layer"], coord_layers.DEPTH_LAYERS)
      self.assertLen(r["rms_seeds"], SEEDS)
      self.assertAlmostEqual(r["rms"], np.mean(r["rms_seeds"]))
      self.assertGreater(r["rms"], 0)

  def test_slopes_against_depth_are_numpy_fits(self):
    slope_rows = coord_slopes.slopes(self.rows)
    self.assertLen(slope_rows, len(ALPHAS) * len(coord_layers.DEPTH_LAYERS) * (STEPS + 1))
    for s in slope_rows:
      self.assertEqual(s["depths"], list(DEPTHS))
      x = np.log2(DEPTHS)
      y = np.log2([self.rms[(s["depth_alpha"], d, s["layer"], s["step"])]["rms"] for d in DEPTHS])
      slope, intercept = np.polyfit(x, y, 1)
      self.assertAlmostEqual(s["slope"], slope, places=6)
      self.assertAlmostEqual(s["intercept"], intercept, places=6)

  def test_branch_multiplier_scales_the_branch_output(self):
    deep = DEPTHS[-1]
    for layer in ("attn_out_mean", "mlp_out_mean"):
      # At the base depth the multiplier is 1: alpha changes nothing (same init, same update).
      for step in range(STEPS + 1):
        self.assertAlmostEqual(self.rms[(1.0, 1, layer, step)]["rms"], self.rms[(0.0, 1, layer, step)]["rms"],
                               places=5)
      # At depth L (base depth 1) alpha = 1 adds each branch x 1/L: roughly 1/L of alpha = 0's branch output.
      ratio = self.rms[(1.0, deep, layer, 0)]["rms"] / self.rms[(0.0, deep, layer, 0)]["rms"]
      self.assertBetween(ratio, 0.6 / deep, 1.3 / deep)

  def test_step0_is_the_forward_pass_at_init(self):
    # Reference: the model's own forward at init with every module's output captured, reduced here in numpy.
    deep = DEPTHS[-1]
    cfg = _grid().model_config(FAMILY, {"parametrization": "sp", "depth_alpha": 1.0, "width": WIDTH, "depth": deep},
                               self.dataset)
    # The blocks unrolled, so that flax captures every submodule's output (the study's model scans them).
    cfg = dataclasses.replace(cfg, scan_layers=False)
    model = model_lib.Transformer(cfg)
    forward = jax.jit(lambda seed, tokens: model.apply(
        {"params": model_lib.init_params(jax.random.PRNGKey(seed), cfg)}, tokens, capture_intermediates=True,
        mutable=["intermediates", layers_lib.METRICS])[1]["intermediates"])
    for seed in (0, SEEDS - 1):
      inter = forward(seed, self.dataset.batch(0, seed)["inputs"])
      rms = lambda x: np.sqrt(np.mean(np.asarray(x, np.float64)**2))
      multiplier = (deep / DEPTHS[0])**-1.0
      want = {"attn_out_mean": np.mean([multiplier * rms(inter[f"block_{i}"]["attn"]["out"]["__call__"][0])
                                        for i in range(deep)]),
              "mlp_out_mean": np.mean([multiplier * rms(inter[f"block_{i}"]["mlp"]["__call__"][0])
                                       for i in range(deep)]),
              "resid_final": rms(inter[f"block_{deep - 1}"]["__call__"][0])}
      for layer, value in want.items():
        np.testing.assert_allclose(self.rms[(1.0, deep, layer, 0)]["rms_seeds"][seed], value, rtol=1e-4,
                                   err_msg=layer)

  def test_experiment_writes_depth_files(self):
    out = _tempdir(self) / "cc"
    code, stdout, stderr = experiment_main.run_with(coord_exp, COORD_FLAGS, out)
    self.assertEqual(code, 0, stderr)
    self.assertIn("resid_final", stdout)
    self.assertIn("against log2 depth", stdout)
    rows = results.read_jsonl(out / "results.jsonl")
    self.assertEqual(sorted(json.dumps(r, sort_keys=True) for r in rows),
                     sorted(json.dumps(r, sort_keys=True) for r in self.rows))
    slopes = results.read_jsonl(out / "slopes.jsonl")
    self.assertEqual({(s["depth_alpha"], s["layer"]) for s in slopes},
                     {(a, layer) for a in ALPHAS for layer in coord_layers.DEPTH_LAYERS})
    self.assertGreater((out / "coord_check.png").stat().st_size, 1000)
    timings = results.read_jsonl(out / "timings.jsonl")
    self.assertEqual({(t["depth_alpha"], t["depth"]) for t in timings}, {(a, d) for a in ALPHAS for d in DEPTHS})
    # Rerun into the same folder: every (alpha, depth) group is found complete, nothing trains again.
    code, stdout, stderr = experiment_main.run_with(coord_exp, COORD_FLAGS, out)
    self.assertEqual(code, 0, stderr)
    self.assertIn(f"resuming: {len(ALPHAS) * len(DEPTHS)} of {len(ALPHAS) * len(DEPTHS)} depths", stdout)


class DepthTransferTest(chex.TestCase):

  def test_optimum_per_alpha_and_depth(self):
    out, stdout, rows = experiment_main.run_study(self, transfer_exp, TRANSFER_FLAGS)
    self.assertIn("optimal learning rate per depth", stdout)
    self.assertLen(rows, len(ALPHAS) * len(DEPTHS) * len(LOG2_LRS))
    optimum = results.read_jsonl(out / "optimum.jsonl")
    self.assertEqual([(o["depth_alpha"], o["depth"]) for o in optimum], [(a, d) for a in ALPHAS for d in DEPTHS])
    for o in optimum:
      self.assertEqual((o["parametrization"], o["width"]), ("sp", WIDTH))
      mine = [r for r in rows if (r["depth_alpha"], r["depth"]) == (o["depth_alpha"], o["depth"])]
      losses = [np.inf if r["final_loss"] is None else r["final_loss"] for r in mine]
      self.assertEqual(o["log2_lr"], mine[int(np.argmin(losses))]["log2_lr"])
    self.assertGreater((out / "transfer.png").stat().st_size, 1000)


class FlagTest(parameterized.TestCase):

  @parameterized.product(
      module=(coord_exp, transfer_exp),
      case=((dict(axis="width", width=32), "--width"), (dict(axis="width", depths=[2, 4]), "--depths"),
            (dict(depth_alphas=[0, 0.3]), "--depth_alphas"), (dict(depth_alphas=[2]), "--depth_alphas"),
            (dict(widths=[16, 32]), "--widths"), (dict(depth=3), "--depth only"),
            (dict(parametrizations=["umup"], depth_alphas=[0, 1]), "umup")))
  def test_refused_before_writing(self, module, case):
    kw, text = case
    base = COORD_FLAGS if module is coord_exp else TRANSFER_FLAGS
    out = _tempdir(self) / "never"
    code, stdout, stderr = experiment_main.run_with(module, base, out, **kw)
    experiment_main.assert_one_line_error(self, code, stdout, stderr, text, out)

  def test_coord_check_needs_two_depths(self):
    out = _tempdir(self) / "never"
    code, stdout, stderr = experiment_main.run_with(coord_exp, COORD_FLAGS, out, depths=[4])
    experiment_main.assert_one_line_error(self, code, stdout, stderr, "two depths", out)


if __name__ == "__main__":
  absltest.main()
