"""Learning-rate sensitivity, logit rules as a grid axis, the traced attention multiplier, the batch and steps axes."""

import dataclasses
import json
import pathlib
import shutil
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import chex
import numpy as np

import experiment_main
from experiments import coord_check as coord_exp
from experiments import transfer as transfer_exp
from scaling.training.data.config import DataConfig
from scaling.training.model.family import ModelFamily
from scaling.training.optimizer import OptimizerConfig
from scaling.attention import rules as rules_lib
from scaling.training.loop import run as loop_lib
from scaling.training.loop import step as step_lib
from scaling.studies.grid import optimum as optimum_lib
from scaling.studies.transfer import report as transfer_report

TASK = dict(seq_len=8, batch_size=2)
FAMILY = ModelFamily(depth=1, num_heads=2, base_width=16)
# The smallest experiment: one width, 2 learning rates, 1 seed, 2 steps (every test below compiles a few programs).
FLAGS = dict(widths=[16], depth=1, num_heads=2, base_width=16, log2_lrs=[-8.0, -4.0], num_seeds=1, steps=2,
             schedule="constant", parametrizations=["mup"], **TASK)


def _tempdir(test) -> pathlib.Path:
  path = pathlib.Path(tempfile.mkdtemp())
  test.addCleanup(shutil.rmtree, path, ignore_errors=True)
  return path


def _jsonl(path):
  return [json.loads(line) for line in pathlib.Path(path).read_text().splitlines()]


class SensitivityTest(parameterized.TestCase):

  def test_closed_form_with_a_diverged_entry(self):
    # loss(x) = 1 + 0.1 x² at x = -4 .. 2, initial loss 2; the last entry diverged (NaN, counted at 2).
    # min(loss, 2) = 2.0, 1.9, 1.4, 1.1, 1.0, 1.1, 2.0 -> mean 10.5 / 7 = 1.5; best 1.0: sensitivity 0.5.
    losses = [1.0 + 0.1 * x * x for x in range(-4, 2)] + [float("nan")]
    self.assertAlmostEqual(optimum_lib.lr_sensitivity(losses, 2.0), 0.5, places=12)
    self.assertAlmostEqual(optimum_lib.lr_sensitivity(losses[:-1] + [None], 2.0), 0.5, places=12)

  @parameterized.parameters(([1.5, 1.5, 1.5], 3.0, 0.0),  # flat: every learning rate is as good as the best
                            ([1.0, np.inf, 5.0], 3.0, (1.0 + 3.0 + 3.0) / 3 - 1.0),  # inf diverged, 5 capped at 3
                            ([4.0, 5.0], 3.0, 0.0),  # nothing beats the initial loss: every capped loss is 3
                            ([None, None], 3.0, None), ([1.0, 2.0], float("nan"), None))
  def test_edge_cases(self, losses, initial, want):
    got = optimum_lib.lr_sensitivity(losses, initial)
    if want is None:
      self.assertIsNone(got)
    else:
      self.assertAlmostEqual(got, want, places=12)

  def test_per_point_and_per_seed(self):
    # One point, 3 learning rates x 2 seeds; seed 1 diverges at the largest rate.
    # Seed 0: losses 2, 1, 1.5, init 4: mean 1.5 - 1 = 0.5. Seed 1: 3, 1, None -> 3, 1, 4 (init 4): 8/3 - 1 = 5/3.
    # Seed-mean curve (diverged seed at its initial loss): 2.5, 1, 2.75 -> mean 6.25/3 - 1 = 13/12.
    rows = [{"parametrization": "mup", "rule": "none", "width": 32, "log2_lr": x, "final_loss_seeds": seeds,
             "initial_loss_seeds": [4.0, 4.0]}
            for x, seeds in ((-6.0, [2.0, 3.0]), (-4.0, [1.5, None]), (-5.0, [1.0, 1.0]))]
    (row,) = optimum_lib.sensitivity_rows(rows)
    self.assertEqual((row["parametrization"], row["rule"], row["width"]), ("mup", "none", 32))
    np.testing.assert_allclose(row["sensitivity_seeds"], [0.5, 5.0 / 3.0])
    self.assertAlmostEqual(row["sensitivity_mean"], (0.5 + 5.0 / 3.0) / 2)
    self.assertAlmostEqual(row["sensitivity_std"], (5.0 / 3.0 - 0.5) / 2)
    self.assertAlmostEqual(row["sensitivity"], 13.0 / 12.0)

  def test_sensitivity_markdown_names_the_lowest(self):
    rows = [{"parametrization": "mup", "rule": r, "width": w, "sensitivity_mean": m, "sensitivity_std": 0.01}
            for r, w, m in (("none", 32, 0.3), ("none", 64, 0.5), ("qk_norm", 32, 0.2), ("qk_norm", 64, 0.1))]
    text = transfer_report.sensitivity_markdown(rows, "H:")
    self.assertIn("| mup | none | 0.300 ± 0.010 | 0.500 ± 0.010 |", text)
    self.assertIn("width 64: lowest sensitivity mup, rule=qk_norm (0.100 ± 0.010)", text)
    self.assertIn("lowest at every width: yes (mup, rule=qk_norm)", text)


class TracedAttentionMultiplierTest(chex.TestCase):

  def test_traced_multiplier_equals_the_configured_rule(self):
    dataset = DataConfig(**TASK).make(0)
    cfg = FAMILY.model_config("mup", 16, vocab_size=dataset.vocab_size, max_len=TASK["seq_len"])
    opt = OptimizerConfig(steps=3, learning_rate=2.0**-5)
    alphas = np.array([0.5, 4.0], np.float32)
    grid = loop_lib.run_training(cfg, opt, dataset, loop_lib.Runs(seed=[0, 0], attn_mults=alphas),
                                 loop_lib.RunOptions(record=("loss",), stop_on_divergence=False))
    step = step_lib.make_train_step(cfg, opt, grid=True, donate=True)  # the step run_training uses
    self.assertEqual(step._cache_size(), 1)  # pylint: disable=protected-access
    # Reference: an independent run with the linear rule's α set in the model config (static); the other member
    # (another α, same seed) trains differently.
    static = dataclasses.replace(cfg, rule=rules_lib.get_rule("linear", alpha=float(alphas[1])))
    single = loop_lib.run_training(static, opt, dataset, loop_lib.Runs(seed=0), loop_lib.RunOptions(record=("loss",)))
    np.testing.assert_allclose(grid.records["loss"][:, 1], single.records["loss"], rtol=2e-5, atol=2e-6)
    self.assertGreater(abs(grid.records["loss"][-1, 0] - grid.records["loss"][-1, 1]), 1e-4)


class ExperimentTest(parameterized.TestCase):

  def test_rules_axis_and_sensitivity_files(self):
    out = _tempdir(self) / "rules"
    code, stdout, stderr = experiment_main.run_with(transfer_exp, FLAGS, out, rules=["none", "qk_norm"])
    self.assertEqual(code, 0, stderr)
    rows = _jsonl(out / "results.jsonl")
    self.assertEqual([(r["rule"], r["log2_lr"]) for r in rows],
                     [(r, x) for r in ("none", "qk_norm") for x in (-8.0, -4.0)])
    optimum = _jsonl(out / "optimum.jsonl")
    self.assertEqual([o["rule"] for o in optimum], ["none", "qk_norm"])
    for o in optimum:
      mine = [r for r in rows if r["rule"] == o["rule"]]
      initial = mine[0]["initial_loss_seeds"][0]
      ys = [min(r["final_loss_seeds"][0], initial) for r in mine]
      self.assertAlmostEqual(o["sensitivity_seeds"][0], np.mean(ys) - min(ys), places=6)
      self.assertEqual(o["sensitivity_std"], 0.0)
    self.assertIn("rule=qk_norm", (out / "sensitivity.md").read_text())
    self.assertGreater((out / "sensitivity.png").stat().st_size, 1000)
    self.assertIn("sensitivity_mean", stdout)

  def test_attn_mult_grid(self):
    out = _tempdir(self) / "attn"
    code, stdout, stderr = experiment_main.run_with(transfer_exp, FLAGS, out, grid="attn_mult",
                                                    log2_attn_mults=[-1.0, 2.0], fixed_log2_lr=-5.0)
    self.assertEqual(code, 0, stderr)
    self.assertIn("optimal attention multiplier per width", stdout)
    rows = _jsonl(out / "results.jsonl")
    self.assertEqual([(r["parametrization"], r["log2_attn_mult"], r["log2_lr"]) for r in rows],
                     [("mup", a, -5.0) for a in (-1.0, 2.0)])
    optimum = _jsonl(out / "optimum.jsonl")
    for o in optimum:
      mine = {r["log2_attn_mult"]: r["final_loss"] for r in rows if r["parametrization"] == o["parametrization"]}
      self.assertEqual(o["log2_attn_mult"], min(mine, key=mine.get))
      self.assertNotIn("sensitivity", o)
    self.assertFalse((out / "sensitivity.md").exists())

  @parameterized.parameters(("batch", dict(batch_sizes=[2, 4]), "batch_size", (2, 4)),
                            ("steps", dict(step_counts=[2, 3]), "steps", (2, 3)))
  def test_batch_and_steps_axes(self, axis, kw, field, values):
    out = _tempdir(self) / axis
    code, _, stderr = experiment_main.run_with(transfer_exp, FLAGS, out, axis=axis, width=16, widths=None, **kw)
    self.assertEqual(code, 0, stderr)
    rows = _jsonl(out / "results.jsonl")
    self.assertEqual([(r[field], r["log2_lr"]) for r in rows], [(v, x) for v in values for x in (-8.0, -4.0)])
    self.assertTrue(all(r["width"] == 16 for r in rows))
    optimum = _jsonl(out / "optimum.jsonl")
    self.assertEqual([o[field] for o in optimum], list(values))
    self.assertEqual([r["steps"] for r in rows], [v if axis == "steps" else 2 for v in values for _ in range(2)])
    if axis == "batch":  # Reference: the last point's own single run at its batch size, final loss = last loss.
      dataset = DataConfig(**{**TASK, "batch_size": values[-1]}).make(0)
      cfg = FAMILY.model_config("mup", 16, vocab_size=dataset.vocab_size, max_len=TASK["seq_len"])
      single = loop_lib.run_training(cfg, OptimizerConfig(steps=2, learning_rate=2.0**-4), dataset,
                                     loop_lib.Runs(seed=0))
      self.assertAlmostEqual(rows[-1]["final_loss"], single.final_loss, places=4)

  @parameterized.parameters((transfer_exp, dict(batch_sizes=[2, 4]), "--batch_sizes"),
                            (transfer_exp, dict(axis="steps", width=16, widths=None), "--step_counts"),
                            (transfer_exp, dict(grid="attn_mult", rules=["sqrt"]), "--grid=attn_mult"),
                            (transfer_exp, dict(rules=["sqrt", "nope"]), "rules"),
                            (coord_exp, dict(rules=["sqrt"]), "--rules"))
  def test_refused_before_writing(self, module, kw, text):
    base = FLAGS if module is transfer_exp else dict(widths=[16, 32], depth=1, num_heads=2, steps=1, **TASK)
    out = _tempdir(self) / "never"
    code, stdout, stderr = experiment_main.run_with(module, base, out, **kw)
    experiment_main.assert_one_line_error(self, code, stdout, stderr, text, out)



class WidthComparisonTest(absltest.TestCase):

  def _rows(self, wide_seeds):
    narrow = [{"width": 64, "log2_lr": -6.0, "final_loss": 2.0, "final_loss_seeds": [1.9, 2.1]},
              {"width": 64, "log2_lr": -5.0, "final_loss": 2.5, "final_loss_seeds": [2.5, 2.5]}]
    return narrow + [{"width": 128, "log2_lr": -7.0, "final_loss": float(np.mean(wide_seeds)),
                      "final_loss_seeds": wide_seeds}]

  def test_known_differences_and_verdicts(self):
    # Standard error of the difference: sqrt(0.02/2 + var(wide)/2); narrow seeds 1.9, 2.1 have sample variance 0.02.
    runs = [("a", self._rows([2.1, 2.3])), ("b", self._rows([2.5, 2.7]))]
    text = transfer_report.width_comparison_markdown(runs, "H")
    lines = text.splitlines()
    self.assertIn("| a | 64 | -6 | 2.000 ± 0.100 | 1.900, 2.100 |", lines)
    self.assertIn("| a | 128 | -7 | 2.200 ± 0.100 | 2.100, 2.300 |", lines)
    self.assertEqual(lines[-2], "- a: width 128 − width 64 = +0.2000 (standard error 0.1414): the wider model is not "
                                "worse.")
    self.assertEqual(lines[-1], "- b: width 128 − width 64 = +0.6000 (standard error 0.1414): the wider model is "
                                "worse.")


if __name__ == "__main__":
  absltest.main()
