"""Smoke test of the attention benchmark suite on its quick configuration."""

import contextlib
import io as std_io
import json
import pathlib
import re
import statistics

from absl.testing import absltest
import pytest

from scaling.attention import dispatch as attention_lib
from scaling.attention import logits as logits_lib
from scaling.attention import autotune
from benchmarks import attention
from benchmarks import implementations


def _rule(b, t, n, k, h, causal=True):
  """What the dispatcher's fixed rule runs for the case (T = S), by name."""
  opts = logits_lib.resolve_logit_options(h, scale=None, rule=None, logit_soft_cap=None, logit_clamp=None,
                                          float32_softmax=True, subtract_max=True)
  return attention_lib.select_implementation((b, t, n, h), (b, t, k, h), opts, is_causal=causal)


@pytest.mark.slow  # a benchmark suite's smoke run in fresh processes
class AttentionBenchTest(absltest.TestCase):

  def test_flop_count(self):
    self.assertEqual(implementations.attention_flops(2, 16, 3, 8, causal=False, mode="fwd"), 4 * 2 * 3 * 16 * 16 * 8)
    self.assertEqual(implementations.attention_flops(2, 16, 3, 8, causal=True, mode="fwd+bwd"),
                     3.5 * 4 * 2 * 3 * 16 * 16 * 8 / 2)

  def test_timing_noise(self):
    case = dict(batch=1, seq_len=8, num_heads=2, num_kv_heads=2, head_dim=4, causal=True, mode="fwd")
    rows = [dict(case, impl="ours", chosen="blockwise 128x128", ms=10.0),
            dict(case, impl="blockwise", blocks="128x128", ms=12.0),
            dict(case, impl="dense", ms=20.0),
            dict(case, impl="ours (auto)", chosen="dense", ms=25.0),
            dict(case, impl="jax_nn", ms=10.0), dict(case, impl="flax", ms=10.0),
            dict(case, impl="blockwise 64x128", ms=None, status="pruned"),
            dict(case, mode="fwd+bwd", impl="blockwise 64x128", ms=30.0),
            # A choice with a forward of its own runs that alone and its own path under differentiation.
            dict(case, mode="fwd+bwd", impl="ours", chosen="blockwise 64x128, forward dense", ms=10.0),
            dict(case, seq_len=16, impl="ours", chosen="blockwise 64x128, forward dense", ms=5.0),
            dict(case, seq_len=16, impl="dense", ms=4.0),
            dict(case, seq_len=32, impl="ours", chosen="blockwise 64x128, forward blockwise 128x256", ms=6.0),
            dict(case, seq_len=32, impl="blockwise 128x256", ms=3.0)]
    noise = attention.timing_noise(rows)
    self.assertEqual(sorted((r["path"], r["seq_len"], r["spread"]) for r in noise["spreads"]),
                     [("blockwise 128x128", 8, 1.2), ("blockwise 128x256", 32, 2.0), ("blockwise 64x128", 8, 3.0),
                      ("dense", 8, 1.25), ("dense", 16, 1.25)])
    self.assertAlmostEqual(noise["median"], 1.25)
    self.assertEqual(noise["max"], 3.0)
    self.assertEqual(attention.timing_noise(rows[4:6]), {"spreads": [], "median": None, "max": None})

  def test_pruned_tiles(self):
    warm = {"dense": ("dense", 1.0), "blockwise": ("blockwise", 2.0), "blockwise 64x128": ("blockwise", 1.49),
            "blockwise 128x128": ("blockwise", 1.51), "ours": ("ours", 9.0), "jax_nn": ("jax_nn", 0.1),
            "ours (auto)": ("auto", 9.0)}
    pruned = attention._pruned(warm)
    # Only extra tiles go, measured against dense and blockwise (not jax.nn or ours); the rule's own blockwise row
    # is always timed.
    self.assertEqual(set(pruned), {"blockwise 128x128"})
    self.assertIn("1510 ms", pruned["blockwise 128x128"])
    self.assertEqual(attention._pruned({"jax_nn": ("jax_nn", 1.0), "blockwise 64x128": ("blockwise", 9.0)}), {})

  def test_peak_wording(self):
    # A run's results since the peak is timed per case, and an older run's with one peak for the whole suite.
    per_case = {"size": 8, "per_case": True, "gflops": 150.0, "min_gflops": 120.4, "max_gflops": 180.6}
    self.assertEqual(attention._peak_text(per_case), "the float32 matmul peak timed in the same interleaved rounds as "
                                                     "the case (120–181 GFLOP/s across cases, median 150)")
    self.assertEqual(attention._peak_text({"size": 8, "gflops": 184.7, "before_gflops": 184.7}),
                     "the 185 GFLOP/s float32 matmul peak measured in the same run")
    self.assertIn("no case was timed", attention._peak_text({**per_case, "gflops": None}))

  def test_quick_run_writes_every_measurement(self):
    out = pathlib.Path(self.create_tempdir().full_path)
    buf = std_io.StringIO()
    with contextlib.redirect_stdout(buf):
      result = attention.run(attention.QUICK, out)
    printed = buf.getvalue()
    self.assertIn("ratio_to_jax_nn", printed)
    gqa = autotune.choice_name(_rule(2, 256, 4, 1, 32))  # the QUICK GQA case's path, as the rule picks it
    gqa_tile = "blockwise {}x{}".format(*attention_lib.fixed_tiles(_rule(2, 256, 4, 1, 32))[0])
    self.assertRegex(printed, rf"B2 T256 N4/K1 d32 causal fwd\+bwd: ours \({re.escape(gqa)}\) [0-9.]+ "
                              r"ms; best forced "
                              rf"\((dense|{gqa_tile}|blockwise 64x128)\) [0-9.]+ ms, ours / best [0-9.]+; "
                              r"ours / jax.nn [0-9.]+")
    self.assertIn("matmul peak", printed)
    data = json.loads((out / "attention.json").read_text())
    for key in ("config", "machine", "flop_convention", "timings", "table", "memory", "long_run", "targets",
                "wall_s", "load_average"):
      self.assertIn(key, data)
    self.assertEqual(set(result), set(data))
    case_peaks = {}  # one peak per case, timed with it, shared by its rows
    for r in data["timings"]:
      if r["status"] == "ok":
        case_peaks.setdefault(tuple(r[k] for k in attention.CASE_KEYS), set()).add(r["peak_gflops"])
    self.assertLen(case_peaks, 4)
    self.assertTrue(all(len(p) == 1 for p in case_peaks.values()), case_peaks)
    case_peaks = [p for (p,) in case_peaks.values()]
    self.assertEqual(data["machine"]["matmul_peak"]["min_gflops"], min(case_peaks))
    self.assertEqual(data["machine"]["matmul_peak"]["max_gflops"], max(case_peaks))
    self.assertEqual(data["machine"]["matmul_peak"]["gflops"], statistics.median(case_peaks))
    # The one forced tile may be pruned after its warm-up (when it took over 1.5x the fastest forced one's).
    pruned = [r for r in data["timings"] if r["status"] == "pruned"]
    self.assertTrue(all(r["impl"] == "blockwise 64x128" and "warm-up" in r["reason"] for r in pruned), pruned)
    cells = {(r["batch"], r["seq_len"], r["num_kv_heads"], r["causal"], r["mode"], r["impl"])
             for r in data["timings"]}
    impls = (*implementations.IMPLEMENTATIONS, "blockwise 64x128")  # and the one forced tile of QUICK
    shapes = ((1, 256, 4), (2, 256, 1))  # (B, T, K): the grid, then the GQA case (N = 4)
    self.assertEqual(cells, {(*shape, True, m, i) for shape in shapes for m in implementations.MODES for i in impls}
                     | {(*shape, True, "fwd+bwd", "ours (auto)") for shape in shapes})  # QUICK times causal only
    chosen = {(r["batch"], r["seq_len"], r["causal"]): r["chosen"] for r in data["timings"] if r["impl"] == "ours"}
    # The suite records the path the dispatcher's rule picks for each case.
    self.assertEqual(chosen, {(1, 256, True): autotune.choice_name(_rule(1, 256, 4, 4, 32)), (2, 256, True): gqa})
    for r in data["timings"]:
      if r["impl"] == "ours":
        forced = [o["ms"] for o in data["timings"] if o["impl"] in ("dense", "blockwise", "blockwise 64x128")
                  and all(o[k] == r[k] for k in ("batch", "seq_len", "num_kv_heads", "causal", "mode"))
                  and o["status"] == "ok"]
        self.assertBetween(len(forced), 2, 3)
        self.assertAlmostEqual(r["best_forced_ms"], min(forced))
        self.assertAlmostEqual(r["ratio_to_best_forced"], r["ms"] / min(forced))
    self.assertEqual(attention.markdown_from_results(data), (out / "attention.md").read_text())
    table = (out / "attention.md").read_text().splitlines()
    self.assertTrue(table[0].startswith("| B | T | N | K | d_k | mask | pass | ours ms (ratio) | ours runs | best "
                                        "forced (ours / it) | auto ms (ratio) | auto runs (auto / best) |"), table[0])
    self.assertLen([line for line in table if line.startswith("| 1 | 256 | 4 | 4 |")], 2)  # 2 passes
    self.assertLen([line for line in table if line.startswith("| 2 | 256 | 4 | 1 |")], 2)
    (line,) = [line for line in table
               if line.startswith("- default path within 1.1x of the fastest forced configuration: met in ")]
    missed = [r for r in data["targets"]["default_within_1.1x_of_best_forced"]["per_size"] if not r["met"]]
    self.assertEqual(line.count(", best "), len(missed))  # each miss listed with the path that won
    self.assertEqual(line.count(", its own path)"), sum(r["picked_best"] for r in missed))
    peak = data["machine"]["matmul_peak"]
    self.assertIn(f"float32 matmul peak timed in the same interleaved rounds as the case ({peak['min_gflops']:.0f}–"
                  f"{peak['max_gflops']:.0f} GFLOP/s across cases, median {peak['gflops']:.0f}) (1-minute load "
                  f"average ", "\n".join(table))
    self.assertTrue(any(line.startswith("- default path at least as fast as jax.nn: met in ") for line in table))
    # Causal at T = 256 the rule runs the forced blockwise row's program under differentiation and the dense
    # row's alone: measured spreads.
    self.assertTrue(any(line.startswith("- timing noise: the same compiled path timed as two rows of one case")
                        for line in table))
    self.assertIn("- memory, forward+backward, blockwise at T = 2048, 1 head(s), d_k 32: peak RSS grows by", table[-2])
    self.assertEqual(table[-1], f"- the suite took {data['wall_s'] / 60:.0f} min (calls predicted over 8 s skipped)")
    for row in data["timings"]:
      if row["status"] == "pruned":
        continue
      self.assertLen(row["times_s"], 2)
      self.assertEqual(row["ms"], min(row["times_s"]) * 1e3)  # the fastest call
      self.assertGreaterEqual(row["median_ms"], row["ms"])
      self.assertGreater(row["ms"], 0)
      self.assertGreater(row["gflops"], 0)
      self.assertGreater(row["peak_gflops"], 0)
      self.assertAlmostEqual(row["fraction_of_peak"], row["gflops"] / row["peak_gflops"])  # the case's own peak
      self.assertIn("ratio_to_jax_nn", row)
    self.assertEqual({(r["impl"], r["seq_len"]) for r in data["memory"]}, {("dense", 1024), ("blockwise", 1024)})
    for row in data["memory"] + [data["long_run"]]:
      self.assertEqual(row["status"], "ok", row)
      self.assertGreaterEqual(row["peak_rss_mib"], row["baseline_rss_mib"])
      self.assertGreater(row["xla_planned_mib"], 0)
    self.assertEqual(data["long_run"]["seq_len"], 2048)
    self.assertTrue(data["targets"]["blockwise_long_sequence_runs"]["met"])
    self.assertLen(data["targets"]["default_at_least_as_fast_as_jax_nn"]["per_size"], 4)
    self.assertLen(data["targets"]["default_within_1.1x_of_best_forced"]["per_size"], 4)
    self.assertLen(data["targets"]["auto_within_1.1x_of_best_forced"]["per_size"], 2)
    # The autotune measured each case once, by itself, among dense, 64x128 and the fixed rule's tiles, in the
    # run's own cache (QUICK times auto in the forward+backward pass only; the tuning times both passes).
    auto = [r for r in data["timings"] if r["impl"] == "ours (auto)"]
    self.assertEqual([r["tuned"] for r in auto], [True] * 2)
    self.assertTrue(all(r["tune_s"] > 0 for r in auto))
    cases = {"q1x256x4x32": (1, 256, 4, 4, 32), "q2x256x4x32": (2, 256, 4, 1, 32)}  # cache key: its query shape
    candidates = {name: {"dense", "blockwise 64x128", *("blockwise {}x{}".format(*tile)
                                                        for tile in attention_lib.fixed_tiles(_rule(*case)))}
                  for name, case in cases.items()}
    self.assertTrue({part for r in auto for part in r["chosen"].split(", forward ")}
                    <= set.union(*candidates.values()))
    tuned = json.loads((out / "attention_autotune.json").read_text())
    self.assertLen(tuned, 2)
    for key, entry in tuned.items():
      (paths,) = [paths for name, paths in candidates.items() if name in key]
      self.assertEqual(set(entry["ms"]), paths)
      if entry["choice"]["implementation"] == "blockwise":
        self.assertEqual(set(entry["forward_ms"]), paths)
    self.assertTrue(any(line.startswith('- implementation="auto" within 1.1x of the fastest forced configuration: ')
                        for line in table))
    self.assertGreater((out / "attention.png").stat().st_size, 1000)


if __name__ == "__main__":
  absltest.main()
