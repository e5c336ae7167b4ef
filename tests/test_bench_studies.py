"""Benchmark suite `studies`: a smoke run (a tiny coordinate check cold and warm, the training run and the step compiled
at two depths), and its judgements on synthetic numbers whose answer is known both ways."""

import dataclasses
import json
import os
import pathlib
import tempfile
from unittest import mock

from absl.testing import absltest
import pytest
from absl.testing import parameterized

from experiments import cli
from scaling.base import compilation
from scaling.base import config as config_lib
from scaling.studies.claims import study as claims
from scaling.studies.coord_check import study as coord_check_lib
from benchmarks import studies


def _row(study, cache, wall, compile_s):
  return {"study": study, "cache": cache, "flags": [], "wall_s": wall, "compile_s": compile_s, "compute_s": 1.0,
          "rest_s": wall - compile_s - 1.0, "compiles": 3, "cache_hits": 0}


class JudgeTest(parameterized.TestCase):

  @parameterized.parameters(
      ("claims", 200.0, 60.0, True),     # within 240 s, 30% compilation
      ("claims", 200.0, 100.0, False),   # 50% compilation
      ("claims", 300.0, 60.0, False),    # too long
      ("coord_check", 59.0, 50.0, True),  # no share target
      ("coord_check", 61.0, 5.0, False),
      ("transfer", 500.0, 400.0, True))
  def test_cold_runs_are_judged_against_the_targets(self, study, wall, compile_s, met):
    self.assertIs(studies.judge(_row(study, "cold", wall, compile_s))["meets_target"], met)

  def test_warm_runs_are_not_judged(self):
    self.assertIsNone(studies.judge(_row("claims", "warm", 1e4, 1e4))["meets_target"])

  def test_depth_ratios(self):
    rows = [{"members": m, "layout": layout, "depth": d, "compile_s": s}
            for m, layout, d, s in ((1, "unrolled", 2, 2.0), (1, "unrolled", 12, 5.0),
                                    (1, "scanned", 2, 2.0), (1, "scanned", 12, 2.5))]
    ratios = studies.depth_ratios(rows, (2, 12))
    self.assertEqual([r["ratio"] for r in ratios], [2.5, 1.25])
    self.assertEqual([r["meets_target"] for r in ratios], [False, True])

  def test_train_depth_ratio(self):
    rows = [{"depth": 12, "compile_s": 7.0}, {"depth": 2, "compile_s": 5.0}]
    self.assertEqual(studies.train_depth_ratio(rows), {"ratio": 1.4, "meets_target": False})
    rows[0]["compile_s"] = 6.0
    self.assertTrue(studies.train_depth_ratio(rows)["meets_target"])

  def test_study_configs_are_the_commands_they_show(self):
    # The command each row shows (python -m experiments.<study> with the row's flags) builds the config timed.
    for bench in (studies.StudiesBenchConfig(), studies.QUICK):
      for study in studies.STUDIES:
        config = bench.config_of(study)
        self.assertEqual(cli.parse(type(config), ["prog", *config_lib.command_line(config)]), config)
    self.assertCountEqual(config_lib.command_line(studies.QUICK.coord_check),
                          ("--widths=16,32", "--steps=1", "--num_seeds=1", "--depth=1"))
    self.assertEqual(studies.StudiesBenchConfig().claims, cli.parse(claims.ClaimsConfig, ["prog", "--mode=quick"]))
    # The training run is timed on experiments.train's defaults (its depth replaced at each depth).
    self.assertEqual(config_lib.command_line(studies.StudiesBenchConfig().train), ())
    with self.assertRaisesRegex(ValueError, "study must be one of"):
      studies.QUICK.config_of("sweep")

  def test_level_environment(self):
    # The library's arm drops any level from XLA_FLAGS (the tests set one); XLA's arm sets its default.
    with mock.patch.dict(os.environ, {"XLA_FLAGS": "--xla_backend_optimization_level=0 --xla_foo=1"}):
      self.assertEqual(studies.level_environment(None)["XLA_FLAGS"], "--xla_foo=1")
      self.assertEqual(studies.level_environment(3)["XLA_FLAGS"], "--xla_foo=1 --xla_backend_optimization_level=3")

  def test_largest_difference(self):
    rows = [{"layer": "embed", "rms": 2.0, "seeds": [1.0, 4.0], "ok": True}]
    self.assertEqual(studies.largest_difference(rows, rows), 0.0)
    self.assertAlmostEqual(studies.largest_difference(rows, [{**rows[0], "seeds": [1.0, 5.0]}]), 0.2)
    self.assertEqual(studies.largest_difference(rows, [{**rows[0], "layer": "readout"}]), float("inf"))
    self.assertEqual(studies.largest_difference(rows, [{**rows[0], "ok": False}]), float("inf"))
    self.assertEqual(studies.largest_difference(rows, rows + rows), float("inf"))
    self.assertEqual(studies.largest_difference([float("nan")], [float("nan")]), 0.0)

  def test_bad_config(self):
    with self.assertRaisesRegex(ValueError, "depths"):
      studies.StudiesBenchConfig(depths=(2,))


# QUICK with a smaller coordinate check (one parametrization, shorter and fewer sequences): the cold and the warm run
# still compile, write and read back every program of a whole study.
SMOKE = dataclasses.replace(studies.QUICK, coord_check=config_lib.build(coord_check_lib.CoordCheckConfig, {
    "widths": (16, 32), "steps": 1, "num_seeds": 1, "depth": 1, "parametrizations": ("sp",), "seq_len": 8,
    "batch_size": 2}))


@pytest.mark.slow  # a benchmark suite's smoke run in fresh processes
class SmokeTest(absltest.TestCase):

  def test_quick_run(self):
    with tempfile.TemporaryDirectory() as tmp:
      out = pathlib.Path(tmp)
      summary = studies.run(SMOKE, out)
      data = json.loads((out / "studies.json").read_text())
      self.assertTrue((out / "studies.png").exists())
      cold, warm = data["studies"]
      self.assertEqual((cold["cache"], warm["cache"]), ("cold", "warm"))
      for run in (cold, warm):
        self.assertAlmostEqual(run["wall_s"], run["compile_s"] + run["compute_s"] + run["rest_s"], places=6)
      self.assertLess(cold["cache_hits"], cold["compiles"])  # a fresh cache: only what this run wrote itself
      # The warm run compiles nothing anew: every program it needs comes from the cache the cold run wrote.
      self.assertGreater(warm["compiles"], 0)
      self.assertEqual(warm["cache_hits"], warm["compiles"])
      self.assertLen(data["depth_ratios"], 4)
      # The training run at each depth, cold: a fresh cache, only what the run wrote itself read back.
      self.assertEqual([r["depth"] for r in data["train_depths"]], list(SMOKE.depths))
      for run in data["train_depths"]:
        self.assertLess(run["cache_hits"], run["compiles"])
        self.assertGreater(run["compile_s"], 0)
      self.assertAlmostEqual(data["train_depth_ratio"]["ratio"],
                             data["train_depths"][1]["compile_s"] / data["train_depths"][0]["compile_s"])
      # The coordinate check at the library's CPU level and at XLA's default: the same results up to rounding.
      self.assertEqual([(r["setting"], r["level"]) for r in data["levels"]],
                       [("library", compilation.CPU_BACKEND_OPTIMIZATION_LEVEL), ("XLA default", 3)])
      self.assertLess(data["levels"][0]["largest_difference"], 1e-4)
      self.assertIn("coord_check_cold_s", summary)
      markdown = (out / "studies.md").read_text()
      self.assertIn("| study | cache |", markdown)
      self.assertIn("scanned", markdown)
      self.assertIn("XLA's backend optimization level", markdown)


if __name__ == "__main__":
  absltest.main()
