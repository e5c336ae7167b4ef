"""Benchmark suite `tests`: pytest's summary read back from real pytest runs, and a smoke run on one small file."""

import json
import pathlib
import subprocess
import sys
import tempfile
import textwrap

from absl.testing import absltest
import pytest

from benchmarks import pytest_time
from experiments import benchmark
from scaling.base.validation import ConfigError

_TESTS = textwrap.dedent("""
    import pytest

    def test_one():
      assert True

    def test_two():
      assert True

    def test_fails():
      assert False

    @pytest.mark.skip(reason="left out")
    def test_skipped():
      pass
""")


class ParseSummaryTest(absltest.TestCase):

  @pytest.mark.slow  # pytest in a process of its own
  def test_counts_of_a_real_pytest_run(self):
    # The reference is pytest itself: a file of two passing tests, one failing and one skipped.
    with tempfile.TemporaryDirectory() as tmp:
      (pathlib.Path(tmp) / "test_sample.py").write_text(_TESTS)
      done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
                             "test_sample.py"], cwd=tmp, capture_output=True, text=True, check=False)
    parsed = pytest_time.parse_summary(done.stdout)
    self.assertEqual({k: parsed[k] for k in ("passed", "failed", "skipped", "errors")},
                     {"passed": 2, "failed": 1, "skipped": 1, "errors": 0})
    self.assertGreater(parsed["pytest_s"], 0.0)

  def test_subtests_and_deselected_are_not_tests_passed(self):
    parsed = pytest_time.parse_summary("....\n12 passed, 3 deselected, 145 subtests passed in 61.20s (0:01:01)\n")
    self.assertEqual((parsed["passed"], parsed["deselected"], parsed["pytest_s"]), (12, 3, 61.2))

  def test_no_summary_line(self):
    with self.assertRaisesRegex(ValueError, "no pytest summary line"):
      pytest_time.parse_summary("ImportError: something broke\n")


class SuiteTest(absltest.TestCase):

  @pytest.mark.slow  # the suite's smoke run: pytest in a fresh process
  def test_quick_run_times_one_file_and_writes_the_readme_line(self):
    with tempfile.TemporaryDirectory() as tmp:
      out = pathlib.Path(tmp)
      summary = pytest_time.run(pytest_time.QUICK, out)
      data = json.loads((out / "tests.json").read_text())
      markdown = (out / "tests.md").read_text()
      log = (out / "pytest_default.log").read_text()
    (row,) = data["groups"]
    self.assertEqual(pytest_time.parse_summary(log)["passed"], row["passed"])  # the whole output, summary included
    self.assertEqual((row["group"], row["returncode"], row["failed"]), ("default", 0, 0))
    self.assertGreater(row["passed"], 0)
    self.assertGreaterEqual(row["wall_s"], row["pytest_s"])  # the process's wall time holds pytest's own
    self.assertIsNone(row["meets_target"])  # a subset of the suite is not judged against the whole suite's target
    self.assertIsNone(summary["targets_met"])
    self.assertIn("`pytest -q tests/test_architecture.py` (the default group: ", markdown)
    self.assertIn(f"on {data['cores']} CPU cores", markdown)

  def test_the_whole_suite_is_judged_and_left_out_of_a_plain_benchmark(self):
    row = {"group": "default", "command": "pytest -q", "wall_s": 250.0, "load_average": 0.1, "passed": 10,
           "failed": 0, "errors": 0, "skipped": 0, "meets_target": 250.0 <= pytest_time.TARGET_S}
    self.assertIn("target ≤ 300 s on two cores: met", pytest_time.readme_markdown({"cores": 2, "groups": [row]}))
    self.assertNotIn("tests", benchmark.DEFAULT_SUITES)
    self.assertEqual(benchmark.BenchmarkConfig(suite=("tests",), quick=True).suite_config("tests"), pytest_time.QUICK)

  def test_bad_group(self):
    with self.assertRaisesRegex(ConfigError, "group must be one of"):
      pytest_time.time_group("fast")
    with self.assertRaisesRegex(ValueError, "groups"):
      pytest_time.TestsBenchConfig(groups=("fast",))


if __name__ == "__main__":
  absltest.main()
