"""Benchmark suite `train` on quick sizes, and its FLOP count against a hand count."""

import contextlib
import io as std_io
import json
import pathlib
import shutil
import tempfile
from unittest import mock

from absl.testing import absltest
import pytest
import jax

from scaling.training.model import transformer as model_lib
from scaling.training.model.config import ModelConfig
from scaling.training.loop import step as step_lib
from benchmarks import profile
from benchmarks import train as bench_train


class ProfileCategoryTest(absltest.TestCase):

  def test_categories_of_xla_names(self):
    for name, want in (("ynn_fusion.52", "matmul"), ("dot.3", "matmul"), ("onednn_fusion", "matmul"),
                       ("copy_bitcast_fusion.2", "layout"), ("transpose_copy_fusion", "layout"),
                       ("multiply_tanh_fusion", "other"), ("add_concatenate_fusion.3", "other")):
      self.assertEqual(profile.category(name), want, name)


  def test_loops_are_not_counted_twice(self):
    """A loop's own trace event spans its body's ops: only the body's matmuls count."""
    x = jax.numpy.ones((64, 64))
    fn = jax.jit(lambda x: jax.lax.fori_loop(0, 3, lambda i, y: jax.numpy.tanh(y @ x), x)).lower(x).compile()
    jax.block_until_ready(fn(x))
    with tempfile.TemporaryDirectory() as trace_dir:
      prof = profile.profile_ops(fn, (x,), 2, trace_dir, top=20)
    names = [row["op"].split("/")[-1] for row in prof["top_ops"]]
    self.assertNotIn("while", names)
    self.assertGreater(prof["categories"]["matmul"]["ms_per_call"], 0)

class FlopsTest(absltest.TestCase):

  def test_flops_by_hand(self):
    cfg = ModelConfig(vocab_size=11, width=8, depth=2, num_heads=2, head_dim=4, mlp_ratio=4,
                                max_len=16, positions="learned")
    params = jax.eval_shape(lambda: model_lib.init_params(jax.random.PRNGKey(0), cfg))
    # Per block: q, k, v, out 4·8·8, MLP 2·8·32, two norm gains 2·8; final norm 8; readout 8·11.
    # The embedding tables (11·8 tokens, 16·8 positions) take part in no matmul.
    matmul = 2 * (4 * 64 + 2 * 256 + 16) + 8 + 88
    self.assertEqual(bench_train.matmul_params(params), matmul)
    self.assertEqual(model_lib.count_params(params), matmul + 88 + 128)
    flops = bench_train.flops_per_step(cfg, params, batch_size=3, seq_len=5)
    self.assertEqual(flops["dense"], 6 * matmul * 15)
    self.assertEqual(flops["attention"], 12 * 2 * 3 * 25 * 2 * 4)
    self.assertEqual(flops["total"], flops["dense"] + flops["attention"])


@pytest.mark.slow  # a benchmark suite's smoke run in fresh processes
class QuickSuiteTest(absltest.TestCase):

  def test_quick_run(self):
    out = pathlib.Path(tempfile.mkdtemp())
    self.addCleanup(shutil.rmtree, out, ignore_errors=True)
    buf = std_io.StringIO()
    # One member per chunk, so that the grid's default (chunks) and all members at once are both timed.
    with contextlib.redirect_stdout(buf), mock.patch.object(step_lib, "GRID_CHUNK", 1):
      summary = bench_train.run(bench_train.QUICK, out)
    self.assertIn("faster", buf.getvalue())
    # The throughput table has a fraction-of-peak column (a narrow console may truncate the header with '…').
    self.assertIn("fraction_of_peak", buf.getvalue())
    data = json.loads((out / "train.json").read_text())
    self.assertGreater(data["matmul_peak_flops_per_s"], 0)
    self.assertEqual(data["device_kind"], jax.devices()[0].device_kind)  # what a plan's measured efficiency checks
    thr = data["throughput"]
    self.assertGreater(thr["steps_per_s"], 0)
    self.assertAlmostEqual(thr["flops_per_s"], thr["flops_per_step"]["total"] * thr["steps_per_s"], delta=1.0)
    self.assertGreater(thr["fraction_of_peak"], 0)
    # The peak is the best of the rounds that time it between the steps; each round's fraction is its own ratio.
    rounds = thr["rounds"]
    self.assertLen(rounds, bench_train.QUICK.timed_rounds)
    self.assertEqual(data["matmul_peak_flops_per_s"], max(r["peak_flops_per_s"] for r in rounds))
    for name, v in thr["variants"].items():
      self.assertEqual(v["step_s"], min(r["step_s"][name] for r in rounds))
      fractions = sorted(thr["flops_per_step"]["total"] / r["step_s"][name] / r["peak_flops_per_s"] for r in rounds)
      self.assertAlmostEqual(v["median_round_fraction"], (fractions[0] + fractions[-1]) / 2)  # two rounds
    for v in (thr, *thr["variants"].values()):
      self.assertAlmostEqual(v["fraction_of_peak"], v["flops_per_s"] / data["matmul_peak_flops_per_s"])
    self.assertEqual(set(data["timings"]), {"vmapped", "vmapped_all_at_once", "one_at_a_time"})
    self.assertEqual(data["grid"]["chunk"], 1)
    for timing in data["timings"].values():
      self.assertGreater(timing["cold_s"], 0)
      self.assertGreater(timing["warm_s"], 0)
    self.assertLess(data["max_rel_diff"], 1e-4)  # both methods train the same runs
    self.assertEqual(data["grid"]["runs"], len(bench_train.QUICK.grid_log2_lrs) * len(bench_train.QUICK.grid_seeds))
    self.assertEqual(data["grid"]["steps"], bench_train.QUICK.grid_steps)
    self.assertEqual(summary["speedup_cold"], data["speedup_cold"])
    # Both step variants timed; the per-step ratio of the grid is that of the warm wall times.
    self.assertEqual(set(thr["variants"]), {"every_metric", "loss_only_donated"})
    for v in thr["variants"].values():
      self.assertAlmostEqual(v["steps_per_s"] * v["step_s"], 1.0, places=6)
    timings = data["timings"]
    self.assertAlmostEqual(data["per_step"]["loop_over_vmapped"],
                           timings["one_at_a_time"]["warm_s"] / timings["vmapped"]["warm_s"], places=6)
    self.assertAlmostEqual(data["per_step"]["loop_over_all_at_once"],
                           timings["one_at_a_time"]["warm_s"] / timings["vmapped_all_at_once"]["warm_s"], places=6)
    markdown = (out / "train.md").read_text()
    self.assertIn("| train step | steps/s | GFLOP/s | fraction of peak |", markdown)
    self.assertIn(f"{thr['variants']['every_metric']['fraction_of_peak']:.2f}", markdown)
    self.assertIn(f"**{data['per_step']['loop_over_vmapped']:.2f}×**", markdown)
    self.assertIn("| vmapped grid in chunks of 1 (default) |", markdown)
    self.assertIn(f"{data['per_step']['loop_over_all_at_once']:.2f}× the time of the grid vmapped all at once",
                  markdown)
    self.assertTrue((out / "train.png").stat().st_size > 1000)
    prof = data["profile"]
    self.assertEqual(set(prof["categories"]), {"matmul", "layout", "other"})
    self.assertAlmostEqual(sum(c["share"] for c in prof["categories"].values()), 1.0, places=6)
    self.assertAlmostEqual(sum(c["ms_per_call"] for c in prof["categories"].values()), prof["op_ms_per_call"],
                           places=6)
    self.assertGreater(prof["categories"]["matmul"]["ms_per_call"], 0)  # the model's dense layers are dots
    top = [r["ms_per_call"] for r in prof["top_ops"]]
    self.assertEqual(top, sorted(top, reverse=True))
    for r in prof["top_ops"]:
      self.assertAlmostEqual(r["share"], r["ms_per_call"] / prof["op_ms_per_call"], places=6)
      self.assertLessEqual(r["ms_per_call"], prof["categories"][r["category"]]["ms_per_call"] + 1e-9)
    self.assertIn(f"matmul {prof['categories']['matmul']['share']:.0%}", markdown)
    self.assertGreater(prof["wall_ms_per_call"], 0)
    self.assertIn(f"in {prof['wall_ms_per_call']:.3g} ms of wall time", markdown)


if __name__ == "__main__":
  absltest.main()
