"""Smoke test of `python -m experiments.benchmark` on its quick sweep suite."""

import contextlib
import io as std_io
import json
import pathlib

from absl.testing import absltest
from absl.testing import flagsaver

from experiments import benchmark


class BenchmarkMainTest(absltest.TestCase):

  def test_quick_sweep_suite(self):
    out = pathlib.Path(self.create_tempdir().full_path)
    buf = std_io.StringIO()
    with flagsaver.flagsaver(suite=["sweep"], quick=True, out_dir=str(out)), contextlib.redirect_stdout(buf):
      benchmark.main(["benchmark"])
    self.assertIn("faster", buf.getvalue())
    data = json.loads((out / "sweep.json").read_text())
    self.assertGreater(data["speedup_cold"], 0)
    self.assertLess(data["max_rel_diff"], 1e-3)  # both methods compute the same numbers
    self.assertTrue((out / "sweep.png").exists())
    self.assertIn("sweep", json.loads((out / "summary.json").read_text()))


if __name__ == "__main__":
  absltest.main()
