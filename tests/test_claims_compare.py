"""Two claims runs side by side (``scaling.studies.claims.compare`` and ``scripts/compare_claims.py``), on rows
written here."""

import math
import pathlib
import subprocess
import sys
import tempfile

from absl.testing import absltest
import pytest

from scaling.runs import results
from scaling.studies.claims import compare

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _row(claim_id, value, verdict, statistic="s"):
  return {"id": claim_id, "statistic": statistic, "value": value, "verdict": verdict}


class CompareTest(absltest.TestCase):

  A = [_row("a", 2.0, "holds"), _row("b", 0.0, "partly"), _row("c", 1.0, "holds"),
       {"id": "cite", "statistic": None, "value": None, "verdict": "source agrees"}]
  B = [_row("c", 1.5, "does not hold"), _row("a", 1.0, "holds"), _row("b", 0.5, "partly"),
       {"id": "cite", "statistic": None, "value": None, "verdict": "source agrees"}]

  def test_entries_in_run_a_order_with_differences(self):
    got = compare.compare_rows(self.A, self.B, {"a": 10.0, "b": 5.0, "c": 1.0}, {"a": 30.0, "b": 5.0})
    self.assertEqual([e["id"] for e in got], ["a", "b", "c"])
    a, b, c = got
    self.assertEqual((a["difference"], a["relative"], a["same_verdict"]), (-1.0, 0.5, True))
    self.assertTrue(math.isnan(b["relative"]))  # a = 0: no relative change
    self.assertFalse(c["same_verdict"])
    self.assertTrue(math.isnan(c["seconds_b"]))
    text = compare.comparison_markdown(got, "float32", "bfloat16")
    self.assertIn("| `c` | `s` | 1 | 1.5 | +0.5 | 0.5 | holds | **does not hold** | 1.0 | n/a |", text)
    self.assertIn("3 claims compared: 1 verdicts differ (c); median relative change of the statistic 0.5; seconds "
                  "over these claims 16 (float32) and 35 (bfloat16) (2.19×).", text)

  def test_a_statistic_renamed_between_runs_is_not_compared(self):
    with self.assertRaisesRegex(ValueError, "share no claim"):
      compare.compare_rows([_row("a", 1.0, "holds")], [_row("a", 1.0, "holds", statistic="t")])
    self.assertEqual(compare.seconds_by_claim([{"id": "a", "seconds": 1}, {"id": "a", "seconds": 2}]), {"a": 2.0})

  @pytest.mark.slow  # the script in a process of its own
  def test_script(self):
    with tempfile.TemporaryDirectory() as d:
      runs = [pathlib.Path(d) / name for name in ("f32", "bf16")]
      for run, rows in zip(runs, (self.A, self.B)):
        run.mkdir()
        results.write_jsonl(run / "claims.jsonl", rows)
        results.write_jsonl(run / "timings.jsonl", [{"id": r["id"], "seconds": 1.0} for r in rows])
        results.write_json(run / "config.json", {"code": f"commit {run.name}", "date": "2026-12-05",
                                                 "config": {"mode": "quick"}, "sizes": {"hardware": "cpu"}})
      out = pathlib.Path(d) / "out.md"
      done = subprocess.run([sys.executable, str(ROOT / "scripts" / "compare_claims.py"), *map(str, runs),
                             "float32", "bfloat16", str(out)], capture_output=True, text=True, cwd=ROOT)
      self.assertEqual(done.returncode, 0, done.stderr)
      self.assertIn("| claim | statistic | float32 | bfloat16 |", out.read_text())
      self.assertIn("The float32 run against the bfloat16 run: float32 run on commit f32, 2026-12-05 (mode quick, "
                    "hardware cpu) and bfloat16 run on commit bf16", out.read_text())
      bad = subprocess.run([sys.executable, str(ROOT / "scripts" / "compare_claims.py"), "x"], capture_output=True,
                           text=True, cwd=ROOT)
      self.assertEqual(bad.returncode, 2)
      self.assertIn("usage:", bad.stderr)


if __name__ == "__main__":
  absltest.main()
