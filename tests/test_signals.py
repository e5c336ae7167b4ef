"""Ctrl-C and SIGTERM: every experiment stops at a safe point, says how to resume, and the rerun finishes the same.

Each test starts an experiment in a subprocess of its own process group and sends a signal to the group (SIGINT as a
terminal's Ctrl-C does, or SIGTERM) a random moment after its first results are on disk; the sweep is stopped twice,
by SIGINT then SIGTERM. Then it reruns it to the end. Each stopped run must exit 130 (SIGINT) or 143 (SIGTERM) with the resume line and no native
crash, and the final result files must equal, byte for byte, those of an uninterrupted run.
"""

import contextlib
import os
import pathlib
import random
import signal
import subprocess
import sys
import time
from unittest import mock

from absl.testing import absltest
import pytest
from absl.testing import parameterized
import chex

import experiment_main
from experiments import claims
from experiments import coord_check
from experiments import stability
from experiments import sweep
from experiments import train
from experiments import transfer
from scaling.runs import results
from scaling.studies import sweep as sweep_lib
from scaling.studies import train as train_lib
from scaling.studies.coord_check import study as coord_check_lib
from scaling.studies.transfer import study as transfer_lib

ROOT = pathlib.Path(__file__).resolve().parents[1]
TEXT = "the quick brown fox jumps over the lazy dog. " * 40

# Each experiment on a tiny configuration with several units of results (the safe points), the files to compare, and
# the functions drawing its figures (skipped in the uninterrupted reference run: only results are compared). A run
# stops at the safe point after the one the signal came in: the signal lands in a grid's second point, and the resumed
# run computes the other parametrization's points (at two widths each: they share their programs with the first's).
# The sweep, stopped twice, needs five head dimensions for the same.
CASES = {
    "sweep": (sweep, dict(d_k=[2, 4, 8, 16, 32], rules=["sqrt", "none"], seq_len=4, batch=1, num_heads=1,
                          num_seeds=1), "results.partial.jsonl", ("results.jsonl", "results.csv"),
              ((sweep_lib, "write_plots"),)),
    "coord_check": (coord_check, dict(parametrizations=["sp", "mup"], widths=[16, 32], steps=1, depth=1,
                                      num_heads=2, num_seeds=1, seq_len=8, batch_size=2),
                    "results.partial.jsonl", ("results.jsonl", "slopes.jsonl"), ((coord_check_lib, "write_figure"),)),
    "transfer": (transfer, dict(parametrizations=["sp", "mup"], widths=[16, 32], log2_lrs=[-6, -4], steps=2,
                                depth=1, num_heads=2, num_seeds=1, seq_len=8, batch_size=2),
                 "results.partial.jsonl", ("results.jsonl", "optimum.jsonl"),
                 ((transfer_lib, "write_figure"), (transfer_lib, "write_sensitivity_figure"))),
    "claims": (claims, dict(ids=["variance_is_dk", "scale_is_temperature", "linear_uniform"],
                            d_k=[64, 128], num_seeds=1, seq_len=8), "claims.partial.jsonl", ("claims.jsonl",), ()),
    # A safe point every logged step; 200 steps train for a second or more after the first one, several times the
    # most the signal waits, and save one checkpoint.
    "train": (train, dict(width=16, depth=1, num_heads=2, seq_len=8, batch_size=2, eval_batches=1, steps=200,
                          log_every=10, checkpoint_every=100), "metrics.partial.jsonl", ("metrics.jsonl",),
              ((train_lib, "write_plots"),)),
    "stability": (stability, dict(width=16, base_width=8, depth=1, num_heads=2, seq_len=12, batch_size=4, steps=6,
                                  final_window=2, learning_rates=[1e-3, 3e-2], log_z_learning_rate=1e-2, z_loss=1e-2),
                  "runs.partial.jsonl", ("runs.jsonl", "stability.md"), ()),
}


SIGNALS = {name: (signal.SIGINT, signal.SIGTERM) if name == "sweep" else
           (signal.SIGINT,) if i % 2 else (signal.SIGTERM,) for i, name in enumerate(CASES)}
"""The signals each experiment gets, one after the other: the handler is the entry points' one (``experiments.cli``),
so each signal is sent to half of them and both to the sweep; what differs by experiment, its safe points and its
resume, each one goes through."""


def _command(module, out_dir, flags):
  return [sys.executable, "-m", *experiment_main.argv(module, out_dir=str(out_dir), **flags)]


def _stop_when_started(test, module, out_dir, flags, partial, sig, rng):
  """Runs the experiment; sends ``sig`` to its process group a random moment after it adds a row to ``partial``.

  Returns:
    (exit status, stderr), or None when the run ended before it could be stopped.
  """
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg", "PYTHONPATH": str(ROOT)}
  before = len(results.read_complete_jsonl(out_dir / partial)[0])  # what an earlier stopped run left
  proc = subprocess.Popen(_command(module, out_dir, flags), cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, start_new_session=True)
  deadline = time.monotonic() + 300
  while len(results.read_complete_jsonl(out_dir / partial)[0]) <= before:
    if proc.poll() is not None:
      return proc.returncode, proc.stderr.read()
    if time.monotonic() > deadline:
      os.killpg(proc.pid, signal.SIGKILL)
      test.fail("timed out waiting for the run's first results")
    time.sleep(0.02)
  time.sleep(rng.uniform(0.0, 0.2))
  os.killpg(proc.pid, sig)
  _, err = proc.communicate(timeout=300)
  return proc.returncode, err


@pytest.mark.slow  # an experiment in its own process, stopped by a signal and resumed
class SignalTest(parameterized.TestCase):

  @parameterized.named_parameters(*((name, name) for name in CASES))
  def test_stopped_then_finished_equals_an_uninterrupted_run(self, name):
    module, flags, partial, compared, figures = CASES[name]
    if name == "stability":
      flags = {**flags, "text_file": self.create_tempfile("data.txt", content=TEXT).full_path}
    tmp = pathlib.Path(self.create_tempdir().full_path)
    whole, cut = tmp / "whole", tmp / "cut"
    rng = random.Random(name)
    stops = 0
    for sig in SIGNALS[name]:
      code, err = _stop_when_started(self, module, cut, flags, partial, sig, rng)
      self.assertNotIn("Fatal Python error", err)
      if code == 0 or (code == -sig and (cut / compared[0]).exists()):
        # It finished before the signal came, or while it exited, after its handler was gone: nothing to stop. A
        # signal that lands in the interpreter's exit interrupts an atexit callback (JAX's), which Python reports as
        # "Exception ignored in atexit callback" with its traceback; nothing of the run's may precede it.
        self.assertNotIn("Traceback", err.split("Exception ignored in atexit callback")[0])
        break
      self.assertNotIn("Traceback", err)
      self.assertEqual(code, 128 + sig, err[-2000:])
      self.assertIn(f"interrupted ({signal.Signals(sig).name}): what finished is in {cut}; to resume, run the same "
                    "command again: python -m experiments.", err)
      stops += 1
    if not stops:
      self.skipTest(f"{name} finished before the signal could stop it")
    code, _, err = experiment_main.run_main(module, out_dir=str(cut), **flags)
    self.assertEqual(code, 0, err)
    with contextlib.ExitStack() as stack:
      for figure in figures:
        stack.enter_context(mock.patch.object(*figure, return_value=[]))
      code, _, err = experiment_main.run_main(module, out_dir=str(whole), **flags)
    self.assertEqual(code, 0, err)
    for file in compared:
      self.assertEqual((cut / file).read_bytes(), (whole / file).read_bytes(), file)
    self.assertFalse((cut / ".lock").exists())


if __name__ == "__main__":
  absltest.main()
