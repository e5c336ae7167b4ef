"""The μP coordinate check: slope fit against closed forms, SP vs μP slopes on a tiny model, the experiment."""

import dataclasses
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import chex
from hypothesis import given
from hypothesis import strategies as st
import jax
import numpy as np
import pytest

import experiment_main
from experiments import coord_check as coord_exp
from scaling.training.data.config import DataConfig
from scaling.training.model import transformer as model_lib
from scaling.training.model.family import ModelFamily
from scaling.training.optimizer import OptimizerConfig
from scaling.runs import results
from scaling.training.loop import step as step_lib
from scaling.base.config import Seeds
from scaling.studies.coord_check import layers as coord_layers
from scaling.studies.coord_check import slopes as coord_slopes
from scaling.studies.coord_check import study as coord_check
from scaling.studies.grid import points as grid_lib

ROOT = pathlib.Path(__file__).resolve().parents[1]

# One tiny configuration shared by the library test and the experiment's smoke test (compiled once).
WIDTHS = (16, 64)
STEPS = 2
LR = 0.03
TASK = dict(seq_len=8, batch_size=4)
FAMILY = ModelFamily(depth=1, num_heads=2)
FLAGS_TINY = dict(widths=list(WIDTHS), steps=STEPS, depth=1, num_heads=2, learning_rate=LR, num_seeds=2, **TASK)
# 64 distinct characters, the recall task's default vocabulary: the model trained on the text file has the shapes
# of FLAGS_TINY's on the recall task, and reuses its compiled programs.
TEXT = ("".join(f"line {i}: to be, or not to be, that is the question.\n" for i in range(40))
        + "pack my box with five dozen liquor jugs\nABCDEFGHIJKLMNOPQRSTUVW\n")


def _tempdir(test) -> pathlib.Path:
  path = pathlib.Path(tempfile.mkdtemp())
  test.addCleanup(shutil.rmtree, path, ignore_errors=True)
  return path


def _config(**kw):
  base = dict(grid=grid_lib.WidthGrid(widths=WIDTHS), seeds=Seeds(num_seeds=2), data=DataConfig(**TASK),
              model=FAMILY, optim=OptimizerConfig(steps=STEPS, learning_rate=LR))
  base.update(kw)
  return coord_check.CoordCheckConfig(**base)


class FitSlopeTest(parameterized.TestCase):

  @given(st.floats(-2.0, 2.0), st.floats(1e-3, 1e3),
         st.lists(st.integers(1, 14), min_size=2, max_size=6, unique=True))
  def test_power_law_gives_its_exponent(self, a, c, log2_widths):
    widths = [2**k for k in log2_widths]
    slope, intercept = coord_slopes.fit_slope(widths, [c * w**a for w in widths])
    self.assertAlmostEqual(slope, a, places=6)
    self.assertAlmostEqual(intercept, np.log2(c), places=5)

  def test_least_squares_of_noisy_points(self):
    # Three points off a line: the slope is the least-squares one, (sum dx dy) / (sum dx^2) in log2.
    widths, values = [2, 4, 8], [1.0, 4.0, 8.0]  # log2: (1, 0), (2, 2), (3, 3)
    slope, intercept = coord_slopes.fit_slope(widths, values)
    self.assertAlmostEqual(slope, 1.5)
    self.assertAlmostEqual(intercept, 5 / 3 - 1.5 * 2)

  @parameterized.parameters(([16], [1.0]), ([16, 16], [1.0, 2.0]), ([16, 32], [0.0, 1.0]),
                            ([16, 32], [float("nan"), 1.0]), ([16, 32], [-1.0, 1.0]))
  def test_undefined_slopes_are_nan(self, widths, values):
    self.assertTrue(all(np.isnan(coord_slopes.fit_slope(widths, values))))

  def test_slopes_group_rows(self):
    rows = []
    for name, a in (("sp", 0.5), ("mup", 0.0)):
      for width in (8, 16, 32):
        for step in (0, 1):
          rows.append({"parametrization": name, "width": width, "step": step, "layer": "readout",
                       "rms": 3.0 * width**(a * step)})
          rows.append({"parametrization": name, "width": width, "step": step, "layer": "embed",
                       "rms": 0.0 if step == 0 else 1.0})
    got = {(s["parametrization"], s["layer"], s["step"]): s for s in coord_slopes.slopes(rows)}
    self.assertLen(got, 8)
    self.assertAlmostEqual(got[("sp", "readout", 1)]["slope"], 0.5)
    self.assertAlmostEqual(got[("mup", "readout", 1)]["slope"], 0.0)
    self.assertAlmostEqual(got[("sp", "readout", 0)]["intercept"], np.log2(3.0))
    self.assertIsNone(got[("sp", "embed", 0)]["slope"])  # RMS 0: log undefined
    self.assertEqual(got[("sp", "embed", 1)]["widths"], [8, 16, 32])

  def test_rms_by_layer_names_and_values(self):
    depth = 2
    metrics = {"embed_rms": np.array([1.0]), "readout_rms": np.array([2.0])}
    for j, key in enumerate(("attn_logits_rms", "attn_out_rms", "mlp_out_rms")):
      metrics[key] = np.array([[10.0 * j + i for i in range(depth)]])
    got = coord_layers.rms_by_layer(metrics, depth)
    self.assertEqual(list(got), ["embed", "block_0/attn_logits", "block_0/attn_out", "block_0/mlp_out",
                                 "block_1/attn_logits", "block_1/attn_out", "block_1/mlp_out", "readout"])
    self.assertEqual(got["block_1/attn_out"][0], 11.0)
    self.assertEqual(got["block_0/mlp_out"][0], 20.0)
    self.assertEqual(got["readout"][0], 2.0)


class CoordCheckTest(chex.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.dataset = DataConfig(**TASK).make(0)
    cls.config = _config()
    cls.rows = coord_check.run_coord_check(cls.config, cls.dataset)
    cls.slope = {(s["parametrization"], s["layer"], s["step"]): s["slope"] for s in coord_slopes.slopes(cls.rows)}

  def test_rows(self):
    layers = coord_layers.layer_names(1)
    self.assertLen(self.rows, 2 * len(WIDTHS) * (STEPS + 1) * len(layers))
    for r in self.rows:
      self.assertContainsSubset({"parametrization", "width", "step", "layer", "rms"}, set(r))
      self.assertLen(r["rms_seeds"], 2)
      self.assertAlmostEqual(r["rms"], np.mean(r["rms_seeds"]))
      self.assertGreater(r["rms"], 0)

  def test_step0_is_the_forward_pass_at_init(self):
    # Independent of the vmapped grid: the model's own forward on the fixed batch with PRNGKey(seed) params.
    width = WIDTHS[-1]
    cfg = FAMILY.with_base_width(WIDTHS).model_config("mup", width, vocab_size=self.dataset.vocab_size,
                                                      max_len=TASK["seq_len"])
    forward = jax.jit(lambda seed, tokens: model_lib.apply_with_aux(
        model_lib.Transformer(cfg), model_lib.init_params(jax.random.PRNGKey(seed), cfg), tokens)[1])
    for seed in (0, 1):
      aux = forward(seed, self.dataset.batch(0, seed)["inputs"])
      got = {r["layer"]: r["rms_seeds"][seed] for r in self.rows
             if r["parametrization"] == "mup" and r["width"] == width and r["step"] == 0}
      np.testing.assert_allclose(got["readout"], aux["readout_rms"], rtol=1e-5)
      np.testing.assert_allclose(got["embed"], aux["embed_rms"], rtol=1e-5)
      np.testing.assert_allclose(got["block_0/attn_logits"], aux["layers"]["attn_logits_rms"][0], rtol=1e-5)
      np.testing.assert_allclose(got["block_0/mlp_out"], aux["layers"]["mlp_out_rms"][0], rtol=1e-5)

  def test_sp_is_width_independent_at_init_and_grows_after_training(self):
    for layer in coord_layers.layer_names(1):
      self.assertLess(abs(self.slope[("sp", layer, 0)]), 0.15, layer)
    for layer in ("block_0/attn_logits", "block_0/attn_out", "block_0/mlp_out"):
      self.assertGreater(self.slope[("sp", layer, STEPS)], 0.3, layer)

  def test_mup_never_grows_with_width(self):
    for layer in coord_layers.layer_names(1):
      for step in range(STEPS + 1):
        self.assertLess(self.slope[("mup", layer, step)], 0.15, (layer, step))

  def test_mup_init_closed_forms(self):
    # Readout: effective init std ∝ 1/width (TP5 Table 3's 1/fan_in) on O(1) inputs -> RMS ∝ width^-1/2.
    self.assertAlmostEqual(self.slope[("mup", "readout", 0)], -0.5, delta=0.1)
    # Attention logits: α/d_head on independent q, k with d_head ∝ width -> RMS ∝ width^-1/2.
    self.assertAlmostEqual(self.slope[("mup", "block_0/attn_logits", 0)], -0.5, delta=0.1)

  def test_readout_slope_after_training_sp_above_mup(self):
    self.assertGreater(self.slope[("sp", "readout", STEPS)] - self.slope[("mup", "readout", STEPS)], 0.5)

  def test_each_width_compiles_one_step(self):
    # Steps 0..k need k + 1 training steps; the seeds of a width are one vmapped grid.
    opt = dataclasses.replace(self.config.optim, steps=STEPS + 1)
    for width in WIDTHS:
      cfg = self.config.family.model_config("sp", width, vocab_size=self.dataset.vocab_size,
                                            max_len=TASK["seq_len"])
      step = step_lib.make_train_step(cfg, opt, grid=True, donate=True)  # the step run_training uses
      self.assertEqual(step._cache_size(), 1)  # pylint: disable=protected-access

  def test_coord_data_is_the_grid_of_seeds(self):
    data = coord_check.coord_data(self.config, {"parametrization": "sp", "width": WIDTHS[0]}, self.dataset)
    chex.assert_shape(data["loss"], (STEPS + 1, 2))
    self.assertEqual(list(data["rms"]), list(coord_layers.layer_names(1)))
    for values in data["rms"].values():
      chex.assert_shape(values, (STEPS + 1, 2))
    # With a fixed batch, both seeds see their own batch 0 at every step.
    self.assertNotEqual(data["loss"][0, 0], data["loss"][0, 1])

  def test_bad_configs(self):
    for make, text in ((lambda: grid_lib.WidthGrid(widths=()), "empty"),
                       (lambda: grid_lib.WidthGrid(widths=(0,)), "width"),
                       (lambda: OptimizerConfig(steps=0), "steps"),
                       (lambda: OptimizerConfig(learning_rate=0.0), "learning_rate"),
                       (lambda: grid_lib.WidthGrid(parametrizations=("xp",)), "xp"),
                       (lambda: OptimizerConfig(optimizer="lion"), "lion"),
                       (lambda: Seeds(num_seeds=0), "num_seeds"),
                       (lambda: _config(fixed_batch=1), "fixed_batch"),
                       (lambda: _config(grid=(16, 32)), "grid")):
      with self.assertRaisesRegex(ValueError, text):
        make()
    self.assertEqual(_config().steps, STEPS)
    self.assertEqual(_config().family.base_width, WIDTHS[0])


class ExperimentTest(parameterized.TestCase):

  def test_main_writes_files(self):
    out, stdout, rows = experiment_main.run_study(self, coord_exp, FLAGS_TINY)
    self.assertIn("block_0/attn_logits", stdout)
    self.assertLen(rows, 2 * 2 * 3 * 5)
    self.assertEqual({(r["parametrization"], r["width"]) for r in rows}, {("sp", 16), ("sp", 64), ("mup", 16),
                                                                         ("mup", 64)})
    for r in rows:
      self.assertContainsSubset({"parametrization", "width", "step", "layer", "rms"}, set(r))
    slopes = results.read_jsonl(out / "slopes.jsonl")
    self.assertLen(slopes, 2 * 3 * 5)
    for s in slopes:
      self.assertContainsSubset({"parametrization", "layer", "step", "slope"}, set(s))
    header = (out / "slopes.csv").read_text().splitlines()[0].split(",")
    self.assertEqual(header[:4], ["parametrization", "layer", "step", "slope"])
    self.assertGreater((out / "coord_check.png").stat().st_size, 1000)
    config = json.loads((out / "config.json").read_text())
    self.assertEqual(config["config"]["grid"]["widths"], [16, 64])
    self.assertEqual(config["config"]["optim"]["steps"], STEPS)
    self.assertEqual(config["dataset"]["name"], "recall")
    self.assertFalse((out / "results.partial.jsonl").exists())

  def test_text_file_alone_selects_the_text_task(self):
    stdout, out = experiment_main.assert_runs_on_text_file_alone(
        self, coord_exp, FLAGS_TINY, TEXT, str(_tempdir(self)), parametrizations=["mup"])
    self.assertIn("block_0/attn_logits", stdout)
    rows = results.read_jsonl(pathlib.Path(out) / "results.jsonl")
    self.assertLen(rows, len(WIDTHS) * (STEPS + 1) * 5)
    self.assertTrue(all(r["rms"] > 0 for r in rows))

  @parameterized.parameters(
      ("--widths=0", "--widths"), ("--widths=16,x", "--widths"), ("--parametrizations=sp,xp", "--parametrizations"),
      ("--learning_rate=0", "--learning_rate"), ("--learning_rate=-1", "--learning_rate"),
      ("--learning_rate=nan", "--learning_rate"), ("--steps=0", "--steps"), ("--num_seeds=0", "--num_seeds"),
      ("--optimizer=lion", "--optimizer"), ("--depth=0", "--depth"), ("--seq_len=0", "--seq_len"),
      ("--batch_size=-2", "--batch_size"), ("--task=images", "--task"), ("--num_heads=0", "--num_heads"),
      ("--no_such_flag=1", "no_such_flag"),
  )
  def test_parse_errors_are_one_line(self, arg, name):
    flag, value = arg[2:].split("=", 1)
    out = _tempdir(self) / "never"
    code, stdout, stderr = experiment_main.run_main(coord_exp, out_dir=str(out), **{flag: value})
    experiment_main.assert_one_line_error(self, code, stdout, stderr, name, out)

  def _text_file(self, content: bytes | None) -> str:
    path = _tempdir(self) / "data.txt"
    if content is not None:
      path.write_bytes(content)
    return str(path)

  @parameterized.named_parameters(
      ("width_not_divisible", dict(widths=[16, 17]), "width 17 is not divisible into --num_heads=2"),
      ("head_dim_does_not_divide", dict(num_heads=None, head_dim=6), "--head_dim=6"),
      ("base_width_not_divisible", dict(base_width=9), "--base_width"),
      ("text_without_file", dict(task="text"), "--text_file"),
      ("recall_with_text_file", dict(task="recall", text_file="x.txt"), "--text_file"),
      ("seq_len_too_short_for_recall", dict(seq_len=2), "--seq_len"),
      ("missing_file", dict(text_file=None), "does not exist"),
      ("empty_file", dict(text_file=b""), "empty"),
      ("binary_file", dict(text_file=b"ab\x00\x01cd" * 10), "binary"),
      ("short_file", dict(text_file=b"abc"), "too short"),
      ("momentum_without_sgd", dict(momentum=0.9), "--momentum"),
  )
  def test_bad_input_fails_before_writing(self, kw, text):
    kw = dict(kw)
    if "text_file" in kw and not isinstance(kw["text_file"], str):
      content = kw.pop("text_file")
      kw["text_file"] = self._text_file(content) if content is not None else "/nonexistent/data.txt"
    out = _tempdir(self) / "never"
    code, stdout, stderr = experiment_main.run_with(coord_exp, FLAGS_TINY, out, **kw)
    experiment_main.assert_one_line_error(self, code, stdout, stderr, text, out)

  @pytest.mark.slow  # the command line in a process of its own
  def test_cli_end_to_end(self):
    out = _tempdir(self) / "o"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    bad = subprocess.run([sys.executable, "-m", "experiments.coord_check", "--widths=16,30", f"--out_dir={out}"],
                         capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    self.assertEqual(bad.returncode, 2)
    self.assertNotIn("Traceback", bad.stderr)
    lines = bad.stderr.strip().splitlines()
    self.assertLen(lines, 1, bad.stderr)
    self.assertTrue(lines[0].startswith("error: "), lines[0])
    self.assertIn("width 30 is not divisible into --num_heads=4 heads", lines[0])
    self.assertFalse(out.exists())
    # --help lists the options derived from the config declarations, and exits 0.
    ok = subprocess.run([sys.executable, "-m", "experiments.coord_check", "--help"], capture_output=True, text=True,
                        cwd=ROOT, env=env, timeout=120)
    self.assertEqual(ok.returncode, 0, ok.stderr)
    for flag in ("--widths", "--parametrizations", "--[no]fixed_batch", "--text_file", "--steps", "--num_seeds"):
      self.assertIn(flag, ok.stdout)


if __name__ == "__main__":
  absltest.main()


class SlopeMarkdownTest(absltest.TestCase):

  def test_table_of_known_slopes(self):
    rows = [{"parametrization": "mup", "depth_alpha": a, "layer": "resid_final", "step": t, "slope": v}
            for a, values in ((0.0, (0.5, None)), (1.0, (-0.125, 0.0))) for t, v in enumerate(values)]
    text = coord_slopes.slope_markdown(rows, 1, "Heading:")
    self.assertEqual(text.splitlines(), [
        "Heading:", "",
        "| parametrization | α | layer | step 0 | step 1 |",
        "|---|---|---|---|---|",
        "| mup | 0 | resid_final | +0.50 | – |",
        "| mup | 1 | resid_final | -0.12 | +0.00 |",
        "",
        "- mup α=0: largest slope at step 0 +0.50 (resid_final, step 0).",
        "- mup α=1: largest slope at step 0 -0.12 (resid_final, step 0); largest slope after step 0 +0.00 "
        "(resid_final, step 1).",
    ])

  def test_largest_slope_per_parametrization(self):
    slopes = {("sp", "a", 0): 0.0, ("sp", "b", 0): 0.25, ("sp", "a", 1): 1.5, ("sp", "b", 1): -2.0,
              ("mup", "a", 0): -1.0, ("mup", "b", 0): -0.5, ("mup", "a", 1): 0.125, ("mup", "b", 1): None}
    rows = [{"parametrization": p, "layer": l, "step": t, "slope": v} for (p, l, t), v in slopes.items()]
    lines = coord_slopes.slope_markdown(rows, 1, "H").splitlines()
    self.assertEqual(lines[-2:], [
        "- sp: largest slope at step 0 +0.25 (b, step 0); largest slope after step 0 +1.50 (a, step 1).",
        "- mup: largest slope at step 0 -0.50 (b, step 0); largest slope after step 0 +0.12 (a, step 1)."])
