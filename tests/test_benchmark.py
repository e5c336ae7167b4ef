"""Smoke test of `python -m experiments.benchmark` on its quick sweep suite."""

import json
import pathlib

from absl.testing import absltest

from experiments import benchmark
import experiment_main


class BenchmarkMainTest(absltest.TestCase):

  def test_quick_sweep_suite(self):
    out = pathlib.Path(self.create_tempdir().full_path)
    code, stdout, _ = experiment_main.run_main(benchmark, suite=["sweep"], quick=True, out_dir=str(out))
    self.assertEqual(code, 0)
    self.assertIn("faster", stdout)
    data = json.loads((out / "sweep.json").read_text())
    self.assertGreater(data["speedup_cold"], 0)
    self.assertLess(data["max_rel_diff"], 1e-3)  # both methods compute the same numbers
    self.assertTrue((out / "sweep.png").exists())
    # The rerun: two processes sharing a fresh cache folder; the second adds nothing to it.
    first, second = data["rerun"]["runs"]
    self.assertGreater(first["cache_files"], 0)
    self.assertEqual(second["cache_files"], first["cache_files"])
    self.assertAlmostEqual(data["rerun"]["wall_ratio"], first["wall_s"] / second["wall_s"], places=6)
    self.assertIn(f"**{data['rerun']['wall_ratio']:.1f}× faster**", (out / "sweep.md").read_text())
    self.assertIn("sweep", json.loads((out / "summary.json").read_text()))


if __name__ == "__main__":
  absltest.main()
