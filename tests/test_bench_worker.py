"""The benchmarks' fresh process: a study run there, from a folder outside the checkout, is the experiment's run."""

import json
import os
import pathlib
import re
import subprocess
import sys

from absl.testing import absltest
import pytest

from scaling.base import config as config_lib
from scaling.runs import timesplit
from scaling.studies import sweep
from benchmarks import memory
from benchmarks import worker

ROOT = pathlib.Path(__file__).resolve().parents[1]
TINY = sweep.SweepConfig(d_k=(4,), rules=("sqrt", "qk_norm"), seq_len=(8,), batch=1, num_seeds=2)


def _without_experiments(folder: pathlib.Path) -> dict[str, str]:
  """``worker.environment()`` with a package named ``experiments`` that refuses to import first on PYTHONPATH."""
  (folder / "experiments").mkdir(parents=True)
  (folder / "experiments" / "__init__.py").write_text('raise ImportError("the library imported experiments")\n')
  env = worker.environment()
  env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(folder), env.get("PYTHONPATH")]))
  return env


@pytest.mark.slow  # a benchmark suite's smoke run in fresh processes
class WorkerTest(absltest.TestCase):

  def test_a_sweep_in_the_worker_is_the_experiments_sweep(self):
    tmp = pathlib.Path(self.create_tempdir().full_path)
    elsewhere = tmp / "elsewhere"  # no scaling/ here, and experiments refuses to import: only the library runs
    job = config_lib.from_dict(sweep.SweepConfig, {**config_lib.to_dict(TINY), "output": {"out_dir": str(tmp / "w")}})
    done = subprocess.run(worker.command("sweep", job, "none"), cwd=tmp, env=_without_experiments(elsewhere),
                          capture_output=True, text=True, timeout=300, check=False)
    self.assertEqual(done.returncode, 0, done.stderr[-2000:])
    self.assertIn("time split: wall", done.stderr)
    # The reference: the experiment's main on the command line of the same config.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    main = subprocess.run([sys.executable, "-m", "experiments.sweep", *config_lib.command_line(TINY),
                           "--compilation_cache_dir=none", f"--out_dir={tmp / 'e'}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    self.assertEqual(main.returncode, 0, main.stderr[-2000:])
    # The output folders' names and the seconds taken apart.
    same = lambda text: re.sub(r"\([\d.]+s\)", "(s)", text.replace(str(tmp / "e"), str(tmp / "w")))
    for name in ("results.jsonl", "config.json"):
      self.assertEqual((tmp / "w" / name).read_text(), same((tmp / "e" / name).read_text()), name)
    self.assertEqual(same(done.stdout), same(main.stdout))
    split = json.loads((tmp / "w" / timesplit.FILE).read_text())
    self.assertAlmostEqual(split["wall_s"], split["compile_s"] + split["compute_s"] + split["rest_s"], places=6)

  def test_memory_job_prints_one_json_row(self):
    config = memory.MemoryConfig(impl="dense", seq_len=16, num_heads=1, head_dim=4)
    tmp = pathlib.Path(self.create_tempdir().full_path)
    done = subprocess.run(worker.command("memory", config, "none"), cwd=tmp, env=_without_experiments(tmp / "blocked"),
                          capture_output=True, text=True, timeout=300, check=False)
    self.assertEqual(done.returncode, 0, done.stderr[-2000:])
    row = json.loads(done.stdout.strip().splitlines()[-1])
    self.assertEqual((row["impl"], row["seq_len"], row["status"]), ("dense", 16, "ok"))
    self.assertGreaterEqual(row["peak_rss_mib"], row["baseline_rss_mib"])

  def test_bad_jobs(self):
    with self.assertRaisesRegex(ValueError, "kind must be one of .* got 'sweeps' \\(did you mean 'sweep'\\?\\)"):
      worker.command("sweeps", TINY)
    with self.assertRaisesRegex(TypeError, "config of a memory job must be a MemoryConfig, got SweepConfig"):
      worker.command("memory", TINY)
    with self.assertRaisesRegex(ValueError, "usage"):
      worker.main(["worker"])


if __name__ == "__main__":
  absltest.main()
