"""Smoke test of `python -m experiments.stability` on a tiny configuration: the files it writes, and bad flags."""

import json
import math
import pathlib

from absl.testing import absltest

import experiment_main
from experiments import stability

TEXT = "to be or not to be, that is the question: whether 'tis nobler in the mind to suffer\n" * 8
TINY = dict(width=16, base_width=8, depth=1, num_heads=2, seq_len=12, batch_size=4, steps=6, final_window=2,
            learning_rates=[1e-3, 3e-2], log_z_learning_rate=1e-2, z_loss=1e-2)


class StabilityMainTest(absltest.TestCase):

  def _text_file(self) -> str:
    return self.create_tempfile("data.txt", content=TEXT).full_path

  def test_tiny_run_writes_results_and_tables(self):
    out = pathlib.Path(self.create_tempdir().full_path) / "stability"
    code, stdout, stderr = experiment_main.run_main(stability, **TINY, text_file=self._text_file(), out_dir=str(out))
    self.assertEqual(code, 0, stderr)
    self.assertIn(f"wrote results.json and stability.md to {out}", stdout)
    self.assertEqual(sorted(p.name for p in out.iterdir()), ["results.json", "run.json", "runs.jsonl", "stability.md",
                                                               "time_split.json"])
    results = json.loads((out / "results.json").read_text())
    self.assertEqual(set(results), {"config", "trained", "log_z", "optimizers"})
    self.assertEqual(results["config"]["width"], 16)
    self.assertEqual(results["config"]["optim"]["steps"], 6)
    self.assertEqual(results["trained"], "mup, width 16 (base 8), depth 1, 6 steps, batch 4 x 12 of text")
    self.assertEqual([row["z_loss"] for row in results["log_z"]], [0.0, 1e-2])
    for row in results["log_z"]:
      self.assertLessEqual(row["log_z_mean_end"], row["log_z_max_end"])
      self.assertTrue(math.isfinite(row["loss_end"]))
    self.assertEqual([row["optimizer"] for row in results["optimizers"]],
                     ["adam", "adam, eps_scaling=mup", "adam_atan2"])
    for row in results["optimizers"]:
      self.assertEqual(set(row), {"optimizer", "0.001", "0.03", "diverged_at"})
      self.assertLen(row["diverged_at"], 2)
    # A character-level model starts near log(vocab) nats; six steps cannot take the loss below zero.
    vocab = len(set(TEXT))
    for row in results["optimizers"]:
      for lr in ("0.001", "0.03"):
        self.assertBetween(row[lr], 0.0, 2 * math.log(vocab) + 1)
    table = (out / "stability.md").read_text()
    self.assertIn("Trained: mup, width 16 (base 8), depth 1, 6 steps, batch 4 x 12 of text; loss = cross-entropy "
                  "(nats), mean over the last 2 steps.", table)
    self.assertIn("log Z of the readout, Adam at learning rate 0.01:", table)
    self.assertIn("| z-loss c | mean log Z, step 0 | mean log Z, last 2 steps | max log Z, last 2 steps | final loss |",
                  table)
    self.assertIn("| optimizer | lr 0.001 | lr 0.03 |", table)
    adam = results["optimizers"][0]
    self.assertIn(f"| adam | {adam['0.001']:.3f} | {adam['0.03']:.3f} |", table)
    self.assertIn(f"| 0.01 | {results['log_z'][1]['log_z_mean_start']:.3f} |", table)

  def test_bad_flags_write_nothing(self):
    text = self._text_file()
    for flags, needle in ((dict(final_window=9), "--final_window=9 exceeds --steps=6"),
                          (dict(eps_scaling="mup"), "unknown flag --eps_scaling"),
                          (dict(learning_rates=[0.0]), "--learning_rates")):
      out = self.create_tempdir().full_path + "/out"
      code, stdout, stderr = experiment_main.run_main(stability, **{**TINY, **flags}, text_file=text, out_dir=out)
      experiment_main.assert_one_line_error(self, code, stdout, stderr, needle, out)


if __name__ == "__main__":
  absltest.main()
