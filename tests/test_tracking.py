"""Tracking: --log_to=tensorboard,wandb get the numbers of metrics.jsonl; a missing package is one line."""

import importlib.util
import os
import pathlib
from unittest import mock

from absl.testing import absltest
import chex

import experiment_main
import tracker_files
from experiments import train
from scaling.runs import tracking

ROWS = [{"step": 0, "loss": 2.5, "accuracy": 0.25, "attn_entropy": [1.0, 0.5], "diverged": False, "grad_norm": None},
        {"step": 5, "loss": 1.5, "accuracy": 0.5, "attn_entropy": [0.75, None], "diverged": True, "grad_norm": 3.0}]
"""Two metrics.jsonl rows: scalars, a per-layer list, a boolean and nulls (non-finite values)."""

WANT = {  # the tags and values the trackers must get, written out by hand
    "loss": [(0, 2.5), (5, 1.5)],
    "accuracy": [(0, 0.25), (5, 0.5)],
    "attn_entropy/0": [(0, 1.0), (5, 0.75)],
    "attn_entropy/1": [(0, 0.5)],
    "diverged": [(0, 0.0), (5, 1.0)],
    "grad_norm": [(5, 3.0)],
}


def _have(package):
  return importlib.util.find_spec(package) is not None


class TrackingTest(chex.TestCase):

  def test_scalars_of_a_row(self):
    self.assertEqual(tracking.scalars(ROWS[1]), {"loss": 1.5, "accuracy": 0.5, "attn_entropy/0": 0.75,
                                                 "diverged": 1.0, "grad_norm": 3.0})

  @absltest.skipUnless(_have("tensorboardX"), "needs tensorboardX (pip install -e '.[tensorboard]')")
  def test_tensorboard_event_file_reads_back(self):
    out = pathlib.Path(self.create_tempdir().full_path)
    trackers = tracking.Trackers(["tensorboard"], out, "demo")
    for row in ROWS:
      trackers.log(row["step"], row)
    trackers.close()
    self.assertEqual(tracker_files.tensorboard_scalars(out / tracking.TENSORBOARD_DIR), WANT)

  @absltest.skipUnless(_have("wandb"), "needs wandb (pip install -e '.[wandb]')")
  def test_wandb_offline_history(self):
    out = pathlib.Path(self.create_tempdir().full_path)
    env = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(out), "WANDB_CONFIG_DIR": str(out),
           "WANDB_CACHE_DIR": str(out), "WANDB_DATA_DIR": str(out)}
    with mock.patch.dict(os.environ, env):
      trackers = tracking.Trackers(["wandb"], out, "width=16-0123abcd", {"width": 16})
      for row in ROWS:
        trackers.log(row["step"], row)
      trackers.close()
    history = tracker_files.wandb_history(out)
    got = {}
    for row in history:
      for tag, value in row.items():
        if tag != "_step":
          got.setdefault(tag, []).append((row["_step"], value))
    self.assertEqual(got, WANT)

  def test_missing_package_is_one_line(self):
    out = pathlib.Path(self.create_tempdir().full_path) / "run"
    real = importlib.util.find_spec
    missing = lambda name, *args: None if name == "wandb" else real(name, *args)
    with mock.patch.object(tracking.importlib.util, "find_spec", missing):
      code, stdout, stderr = experiment_main.run_main(train, log_to="tensorboard,wandb", out_dir=str(out))
    experiment_main.assert_one_line_error(self, code, stdout, stderr, "--log_to=wandb needs the wandb package",
                                          out_dir=out)
    self.assertIn("pip install wandb (or, in a clone of this repository, pip install -e '.[wandb]')", stderr)


if __name__ == "__main__":
  absltest.main()
