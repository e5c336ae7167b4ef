"""Smoke tests of `python -m experiments.train`: outputs, divergence, interruption and rejection of bad flags."""

import contextlib
import importlib.util
import io
import json
import os
import pathlib
import subprocess
import sys
from unittest import mock

from absl.testing import absltest
import numpy as np
import pytest

import experiment_main
import tracker_files
from experiments import train
from scaling.training.loop import run as loop_lib

ROOT = pathlib.Path(__file__).resolve().parents[1]
TRACK = {"log_to": "tensorboard"} if importlib.util.find_spec("tensorboardX") else {}
"""The tiny run also writes TensorBoard event files where tensorboardX is installed (the test extra has it)."""
TINY = dict(width=16, depth=1, num_heads=2, seq_len=12, batch_size=4, eval_batches=1)


def _run_main(**flag_values):
  code, out, err = experiment_main.run_main(train, **flag_values)
  assert code == 0, (code, err)
  return out


def _rows(path):
  return [json.loads(line) for line in path.read_text().splitlines()]


class MainTest(absltest.TestCase):

  def test_tiny_run_writes_everything(self):
    out = pathlib.Path(self.create_tempdir().full_path) / "run"
    # The stability options ride along: z-loss, QK-norm with LayerNorm and no gains, Adam-atan2.
    with mock.patch.dict(os.environ, {"FORCE_COLOR": "1"}):  # rich draws as on a terminal: a progress bar
      code, stdout, stderr = experiment_main.run_main(
          train, **TINY, steps=6, log_every=2, print_every=3, out_dir=str(out), z_loss=0.01, rule="qk_norm",
          qk_norm="layer", qk_norm_gains=False, optimizer="adam_atan2", **TRACK)
    self.assertEqual(code, 0, stderr)
    self.assertIn("\x1b[", stderr)  # the bar, drawn in place, with the step and loss, its count and ETA
    self.assertRegex(stderr, r"train step 5 +loss")
    self.assertIn("6/6", stderr)
    self.assertIn("eta", stderr)
    printed = stdout + stderr  # the step lines still print (above the bar)
    self.assertIn("step      3/6", printed)
    self.assertIn("steps/s", printed)
    config = json.loads((out / "config.json").read_text())
    self.assertEqual(config["config"]["width"], 16)
    self.assertEqual(config["model"]["width"], 16)
    self.assertEqual(config["model"]["head_dim"], 8)
    self.assertEqual(config["dataset"]["name"], "recall")
    rows = _rows(out / "metrics.jsonl")
    self.assertEqual([r["step"] for r in rows], [0, 2, 4, 5])
    if TRACK:  # the TensorBoard event file holds the numbers of metrics.jsonl, read back by a reader of our own
      events = tracker_files.tensorboard_scalars(out / "tensorboard")
      self.assertEqual(events["loss"], [(r["step"], np.float32(r["loss"])) for r in rows])
      self.assertEqual(events["attn_entropy/0"], [(r["step"], np.float32(r["attn_entropy"][0])) for r in rows])
      self.assertEqual(len(events), sum(len(v) if isinstance(v, list) else 1 for k, v in rows[0].items()
                                        if k != "step" and v is not None))
    for key in ("step", "loss", "accuracy", "grad_norm", "layer_grad_norm", "attn_entropy", "attn_max_logit",
                "learning_rate", "log_z_mean", "log_z_max", "z_loss"):
      self.assertIn(key, rows[0])
    for row in rows:  # log Z of the readout: its mean below its max; the z-loss is 0.01 · mean((log Z)²) > 0
      self.assertLessEqual(row["log_z_mean"], row["log_z_max"])
      self.assertGreater(row["z_loss"], 0.01 * row["log_z_mean"] ** 2 * 0.999)
    self.assertEqual((config["config"]["optim"]["optimizer"], config["model"]["qk_norm_gains"],
                      config["model"]["rule"]["norm"]), ("adam_atan2", False, "layer"))
    self.assertLen(rows[0]["layer_grad_norm"], 1)
    self.assertLen(rows[0]["attn_entropy"], 1)
    summary = json.loads((out / "summary.json").read_text())
    self.assertEqual(summary["status"], "completed")
    self.assertIsNone(summary["divergence_step"])
    self.assertEqual(summary["steps_run"], 6)
    for key in ("final_loss", "eval_loss", "eval_accuracy"):
      self.assertIsInstance(summary[key], float, key)
    timings = json.loads((out / "timings.json").read_text())  # wall times apart from the results
    for key in ("wall_time", "steps_per_sec"):
      self.assertIsInstance(timings[key], float, key)
      self.assertNotIn(key, summary)
    self.assertNotIn("time", rows[0])
    self.assertEqual([json.loads(line)["step"] for line in (out / "timings.jsonl").read_text().splitlines()],
                     [0, 2, 4, 5])
    for name in ("loss.png", "grad_norm.png", "attention.png"):
      self.assertGreater((out / name).stat().st_size, 1000, name)

  def test_divergence_on_text(self):
    tmp = pathlib.Path(self.create_tempdir().full_path)
    text = tmp / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 20)
    out = tmp / "run"
    printed = _run_main(**TINY, text_file=str(text), learning_rate=1e3, steps=30, log_every=10, out_dir=str(out))
    self.assertIn("diverged at step", printed)
    summary = json.loads((out / "summary.json").read_text())
    self.assertEqual(summary["status"], "diverged")
    step = summary["divergence_step"]
    self.assertIsInstance(step, int)
    self.assertEqual(summary["steps_run"], step + 1)
    rows = _rows(out / "metrics.jsonl")
    self.assertEqual(rows[-1]["step"], step)  # the diverging step is always logged
    self.assertEqual(json.loads((out / "config.json").read_text())["dataset"]["name"], "text")
    self.assertTrue((out / "loss.png").exists())
    # Evaluated on the last finite state, so the held-out loss is a number, not NaN.
    self.assertIsInstance(summary["eval_loss"], float)

  def test_interrupt_keeps_log_and_plots(self):
    out = pathlib.Path(self.create_tempdir().full_path) / "run"
    metrics = {"loss": 2.0, "accuracy": 0.1, "grad_norm": 1.0, "layer_grad_norm": [1.0], "attn_entropy": [1.5],
               "attn_max_logit": [3.0], "learning_rate": 1e-3}

    def interrupted(model, opt_config, dataset, runs, options):
      del model, opt_config, dataset, runs
      options.callback(0, metrics)
      raise KeyboardInterrupt

    real = loop_lib.run_training
    loop_lib.run_training = interrupted
    try:
      code, _, _ = experiment_main.run_main(train, **TINY, steps=5, out_dir=str(out))
    finally:
      loop_lib.run_training = real
    self.assertEqual(code, 130)
    self.assertEqual(json.loads((out / "summary.json").read_text())["status"], "interrupted")
    self.assertEqual([r["step"] for r in _rows(out / "metrics.jsonl")], [0])
    self.assertTrue((out / "attention.png").exists())

  def test_cross_flag_errors_write_nothing(self):
    tmp = pathlib.Path(self.create_tempdir().full_path)
    text = tmp / "t.txt"
    text.write_text("abc" * 100)
    for kwargs, needle in (({"task": "text"}, "--text_file"),
                           ({"task": "induction", "num_pairs": 2}, "--num_pairs"),
                           ({"width": 30}, "--width"),
                           ({"head_dim": 7}, "--head_dim"),
                           ({"num_kv_heads": 3, "num_heads": 4}, "--num_kv_heads"),
                           ({"weight_decay": 0.1}, "--weight_decay"),
                           ({"seq_len": 2}, "--seq_len"),
                           ({"warmup_steps": 10, "steps": 5}, "--warmup_steps")):
      out = tmp / "never"
      code, _, err = experiment_main.run_main(train, out_dir=str(out), **kwargs)
      self.assertEqual(code, 2, kwargs)
      lines = err.strip().splitlines()
      self.assertLen(lines, 1, kwargs)
      self.assertTrue(lines[0].startswith("error:"), lines[0])
      self.assertIn(needle, lines[0])
      self.assertFalse(out.exists(), kwargs)


class CommandLineTest(absltest.TestCase):

  @pytest.mark.slow  # command lines in processes of their own
  def test_bad_flags_exit_2_with_one_line(self):
    tmp = pathlib.Path(self.create_tempdir().full_path)
    empty = tmp / "empty.txt"
    empty.write_text("")
    binary = tmp / "binary.bin"
    binary.write_bytes(b"\x7fELF\x00\x01\x02" * 10)
    short = tmp / "short.txt"
    short.write_text("hello")
    cases = (
        (["--width=0"], "--width"),
        (["--parametrization=foo"], "--parametrization"),
        (["--rule=foo"], "--rule"),
        (["--learning_rate=-1"], "--learning_rate"),
        (["--text_file=/nonexistent/file.txt"], "--text_file"),
        ([f"--text_file={empty}"], "--text_file"),
        ([f"--text_file={binary}"], "--text_file"),
        ([f"--text_file={short}"], "--text_file"),
        (["--width=30"], "--width"),
    )
    # Each through main's argv in this process (a subprocess costs seconds of imports)...
    for i, (args, flag) in enumerate(cases):
      out = tmp / f"out{i}"
      stdout, stderr = io.StringIO(), io.StringIO()
      with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = train.main(["experiments.train", *args, f"--out_dir={out}"])
      with self.subTest(args=args):
        experiment_main.assert_one_line_error(self, code, stdout.getvalue(), stderr.getvalue(), flag, out)
    # ... and one as a user types it, read in the study itself: nothing else on stderr, the status the shell sees.
    out = tmp / "out_process"
    proc = subprocess.run([sys.executable, "-m", "experiments.train", f"--text_file={binary}", f"--out_dir={out}"],
                          cwd=ROOT, env={**os.environ, "JAX_PLATFORMS": "cpu"}, capture_output=True, text=True,
                          timeout=300)
    experiment_main.assert_one_line_error(self, proc.returncode, proc.stdout, proc.stderr, "--text_file", out)


if __name__ == "__main__":
  absltest.main()
