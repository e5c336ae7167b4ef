"""A claims run of training claims killed with SIGKILL in the middle resumes to byte-identical rows and tables.

The second claim trains a grid of its own and reuses one the first trained (one
context's cache): killed after the first claim's row is on disk, the rerun trains
that grid again and must write exactly what the uninterrupted run wrote, measuring
each claim once.
"""

import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import time

from absl.testing import absltest
import pytest
import chex

from scaling.runs import results

ROOT = pathlib.Path(__file__).resolve().parents[1]
IDS = ("train_nan_within_100_steps", "train_post_softmax_worse")
FLAGS = ["--mode=test", f"--ids={','.join(IDS)}"]


def _start(out_dir):
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg", "PYTHONPATH": str(ROOT)}
  return subprocess.Popen([sys.executable, "tests/claims_job.py", *FLAGS, f"--out_dir={out_dir}"], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow  # a claims run in its own process, killed and resumed
class ClaimsKillTest(chex.TestCase):

  def test_killed_after_the_first_training_claim_resumes_to_the_same_bytes(self):
    tmp = pathlib.Path(self.create_tempdir().full_path)
    whole, cut = tmp / "whole", tmp / "cut"
    killed = _start(cut)  # alone: the runs after it read the programs it compiled from the compilation cache
    partial = cut / "claims.partial.jsonl"
    deadline = time.monotonic() + 300
    timings = cut / "timings.jsonl"  # written just after the claim's row: both, so the kill lands in the second claim
    while len(results.read_complete_jsonl(partial)[0]) < 1 or len(results.read_complete_jsonl(timings)[0]) < 1:
      self.assertIsNone(killed.poll(), "the run ended before it could be killed")
      self.assertLess(time.monotonic(), deadline, "timed out waiting for the first claim")
      time.sleep(0.02)
    time.sleep(random.uniform(0.0, 0.05))  # in the second claim, which trains a grid of its own
    killed.send_signal(signal.SIGKILL)
    killed.communicate()
    self.assertEqual(killed.returncode, -signal.SIGKILL)
    reference = _start(whole)
    log = reference.communicate(timeout=300)[0]
    self.assertEqual(reference.returncode, 0, log[-3000:])
    done = [row["id"] for row in results.read_complete_jsonl(partial)[0]]
    self.assertFalse((cut / "claims.jsonl").exists())
    rerun = _start(cut)
    log = rerun.communicate(timeout=300)[0]
    self.assertEqual(rerun.returncode, 0, log[-3000:])
    if len(done) < len(IDS):
      self.assertIn(f"resuming: {len(done)} of {len(IDS)} claims", log)
    for name in ("claims.jsonl", "claims.md", "claims_readme.md"):
      self.assertEqual((cut / name).read_bytes(), (whole / name).read_bytes(), name)
    self.assertEqual([json.loads(line)["id"] for line in (cut / "claims.jsonl").read_text().splitlines()], list(IDS))
    # Each claim was measured once: the one finished before the kill was not measured again.
    timed = [json.loads(line)["id"] for line in (cut / "timings.jsonl").read_text().splitlines()]
    self.assertCountEqual(timed, IDS)


if __name__ == "__main__":
  absltest.main()
