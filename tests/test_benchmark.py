"""Smoke test of `python -m experiments.benchmark` on its quick sweep suite."""

import json
import pathlib

from absl.testing import absltest
import pytest

from experiments import benchmark
from experiments import cli
import experiment_main
from scaling.attention import dispatch as attention_lib
from benchmarks import attention
from benchmarks import attention_rule
from benchmarks import sweep
from benchmarks import train


@pytest.mark.slow  # a benchmark suite's smoke run in fresh processes
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

  def test_quick_attention_profile_suite(self):
    out = pathlib.Path(self.create_tempdir().full_path)
    code, _, _ = experiment_main.run_main(benchmark, suite=["attention_profile"], quick=True, out_dir=str(out))
    self.assertEqual(code, 0)
    data = json.loads((out / "attention_profile.json").read_text())
    (case,) = data["cases"]
    # B1 T256 N2 d32 causal forward+backward: 4·B·N·T²·H, halved by the mask, ×3.5 (written out, not imported)
    flops = 4 * 1 * 2 * 256 * 256 * 32 / 2 * 3.5
    self.assertAlmostEqual(case["gflops"], flops / (case["ms"] / 1e3) / 1e9, places=6)
    self.assertAlmostEqual(case["fraction_of_peak"], case["gflops"] / data["peak"]["gflops"], places=6)
    blocks = "{}x{}".format(*attention_lib.blockwise_blocks((1, 256, 2, 32), (1, 256, 1, 32), is_causal=True))
    self.assertEqual(case["blocks"], blocks)  # the default path's tiles for this case, as the rule picks them
    shares = [c["share"] for c in case["profile"]["categories"].values()]
    self.assertAlmostEqual(sum(shares), 1.0, places=6)
    self.assertGreater(case["profile"]["categories"]["matmul"]["share"], 0)
    table = (out / "attention_profile.md").read_text()
    self.assertIn(f"| 1 | 256 | 2 | 1 | 32 | causal | {blocks} | {case['ms']:.4g} | {case['fraction_of_peak']:.2f} |",
                  table)



class RerunBoundTest(absltest.TestCase):

  def test_the_time_outside_the_sweep_bounds_the_whole_process_speedup(self):
    # First run 20 s; the second 8 s of which 5 s in the sweep: 3 s outside it, so at most 20 / 3 faster.
    rerun = {"runs": [{"wall_s": 20.0, "in_run_s": 16.0}, {"wall_s": 8.0, "in_run_s": 5.0}]}
    text = sweep.outside_run_bound(rerun)
    self.assertIn("3.0 s are spent outside the sweep", text)
    self.assertIn(f"at most {20 / 3:.1f}× faster", text)


class BenchmarkFlagsTest(absltest.TestCase):

  def test_suites_and_their_configs(self):
    config = cli.parse(benchmark.BenchmarkConfig, ["prog"])
    self.assertEqual(config.suite, ("sweep", "attention", "train", "attention_profile"))
    self.assertEqual(config.suite_config("sweep"), sweep.SweepBenchConfig())
    self.assertEqual(config.suite_config("train"), train.TrainBenchConfig())
    self.assertEqual(config.suite_config("attention").seq_lens, (512, 2048, 8192))
    quick = cli.parse(benchmark.BenchmarkConfig, ["prog", "--quick"])
    self.assertEqual(quick.suite_config("attention"), attention.QUICK)
    self.assertEqual(quick.suite_config("train").grid_steps, 5)
    self.assertEqual(quick.suite_config("sweep").sweep.d_k, (8,))
    self.assertEqual(quick.suite_config("attention_rule"), attention_rule.QUICK)
    self.assertEqual(config.suite_config("attention_rule"), attention_rule.AttentionRuleConfig())

  def test_attention_rule_tables_from_flags(self):
    config = cli.parse(benchmark.BenchmarkConfig, ["prog", "--suite=attention_rule", "--rule_tables=small,gqa",
                                                   "--rule_max_gflop=20", "--rule_repeats=2"])
    sizes = config.suite_config("attention_rule")
    self.assertEqual((sizes.rule_tables, sizes.rule_max_gflop, sizes.rule_repeats), (("small", "gqa"), 20.0, 2))

  def test_attention_sizes_from_flags(self):
    config = cli.parse(benchmark.BenchmarkConfig, ["prog", "--suite=attention", "--seq_lens=128,256",
                                                   "--head_dims=16", "--repeats=2", "--max_call_s=1.5"])
    sizes = config.suite_config("attention")
    self.assertEqual((sizes.seq_lens, sizes.head_dims, sizes.repeats, sizes.max_call_s), ((128, 256), (16,), 2, 1.5))
    self.assertEqual(sizes.memory_seq_lens, (4096, 16384))  # no flag: the suite's default

  def test_attention_sizes_without_the_attention_suite_are_refused(self):
    for flags, needle in ((dict(suite=["sweep"], seq_lens=[128]), "--seq_lens sizes the attention suite, but --suite"),
                          (dict(quick=True, repeats=2), "--repeats sizes the attention suite, but --quick"),
                          (dict(suite=["attention"], repeats=0), "--repeats"),
                          (dict(memory_seq_lens=[128]), "unknown flag --memory_seq_lens"),
                          (dict(suite=["attention"], rule_tables=["small"]),
                           "--rule_tables sizes the attention_rule suite, but --suite"),
                          (dict(suite=["attention_rule"], rule_tables=["nope"]), "rule_tables must name tables")):
      out = self.create_tempdir().full_path + "/out"
      code, stdout, stderr = experiment_main.run_main(benchmark, out_dir=out, **flags)
      experiment_main.assert_one_line_error(self, code, stdout, stderr, needle, out)

if __name__ == "__main__":
  absltest.main()
