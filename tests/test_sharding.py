"""Devices and hosts: padding helpers against numpy, and runs on 4 devices and on 2 processes against 1 device."""

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile

import chex
from absl.testing import absltest
import pytest
from absl.testing import parameterized
import numpy as np

from experiments import cli
from scaling.base import config as config_lib
from scaling.runs import distributed
from scaling.training import sharding
from scaling.studies.claims import study as claims
from scaling.studies.coord_check import study as coord_check
from scaling.studies import sweep as sweep_lib
from scaling.studies import train as training
from scaling.studies.transfer import study as transfer

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import multidevice_job  # noqa: E402  pylint: disable=g-import-not-at-top

METRIC_TOL = dict(rtol=1e-5, atol=1e-6)


def _env(devices: int | None = None) -> dict[str, str]:
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
  # The session's compile flags (conftest) without any device count; the job's own count, if given.
  flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if "xla_force_host_platform_device_count" not in f]
  if devices is not None:
    flags.append(f"--xla_force_host_platform_device_count={devices}")
  env["XLA_FLAGS"] = " ".join(flags)
  return env


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def _split(rows):
  """(axis values, metric values) of sweep rows, each flattened in row order."""
  keys = [{k: v for k, v in r.items() if not isinstance(v, dict)} for r in rows]
  values = np.asarray([[r[m][s] for m in sweep_lib.METRICS for s in ("mean", "std")] for r in rows], np.float64)
  return keys, values


class PaddingTest(parameterized.TestCase):

  @parameterized.parameters((1, 4, 4), (3, 4, 4), (4, 4, 4), (5, 4, 8), (7, 1, 7))
  def test_pad_unpad(self, n, multiple, size):
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    (px, py), got_n = sharding.pad((x, np.arange(n)), multiple)
    self.assertEqual(got_n, n)
    expected = np.concatenate([x, np.tile(x[-1:], (size - n, 1))])  # the last entry repeated
    np.testing.assert_array_equal(px, expected)
    np.testing.assert_array_equal(py, list(range(n)) + [n - 1] * (size - n))
    np.testing.assert_array_equal(sharding.unpad(px, n), x)

  def test_pad_rejects_mismatched_leaves(self):
    with self.assertRaisesRegex(ValueError, "leading length"):
      sharding.pad((np.zeros(3), np.zeros(4)), 2)

  @parameterized.parameters(((16, 64), 4, (None, "data")), ((64, 16), 4, ("data", None)), ((6, 10), 4, ()),
                            ((12, 6), 4, ("data", None)), ((), 4, ()), ((16, 64), 1, ()))
  def test_fsdp_spec(self, shape, size, expected):
    self.assertEqual(tuple(sharding.fsdp_spec(shape, size)), expected)

  def test_shard_and_gather_on_one_process(self):
    x = np.arange(6.0)
    placed, n = sharding.shard(x)
    chex.assert_shape(placed, (sharding.padded_size(6),))
    np.testing.assert_array_equal(sharding.unpad(sharding.to_host(placed), n), x)


class DistributedConfigTest(absltest.TestCase):

  def test_flags(self):
    config = cli.parse(sweep_lib.SweepConfig, ["sweep", "--distributed", "--coordinator_address=localhost:1",
                                                "--num_processes=2", "--process_id=1"])
    self.assertEqual(config.cluster, distributed.DistributedConfig(True, "localhost:1", 2, 1))
    for args, needle in ((["--num_processes=2"], "--num_processes needs --distributed"),
                         (["--distributed", "--num_processes=2", "--process_id=2"], "--process_id must be below")):
      with self.assertRaisesRegex(cli.UsageError, needle):
        cli.parse(sweep_lib.SweepConfig, ["sweep", *args])
    self.assertTrue(distributed.is_writer())

  def test_every_computing_experiment_has_the_flags(self):
    expected = {"distributed", "coordinator_address", "num_processes", "process_id"}
    for cls in (sweep_lib.SweepConfig, training.TrainConfig, transfer.TransferConfig, coord_check.CoordCheckConfig,
                claims.ClaimsConfig):
      self.assertLessEqual(expected, {spec.name for _, spec in config_lib.flat_options(cls)}, cls.__name__)
      self.assertTrue(cli.parse(cls, ["prog", "--distributed"]).cluster.distributed, cls.__name__)


@pytest.mark.slow  # the studies on several devices, each in its own process
class SeveralDevicesTest(absltest.TestCase):
  """One job on 1 device (the reference) and on 4 devices, and the sweep as 2 processes of 1 device each."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = tempfile.TemporaryDirectory()
    tmp = pathlib.Path(cls.tmp.name)
    job = str(ROOT / "tests" / "multidevice_job.py")
    port = _free_port()
    flags = [f"--{k}={','.join(map(str, v)) if isinstance(v, tuple) else v}" for k, v in multidevice_job.SWEEP.items()]
    procs = {n: subprocess.Popen([sys.executable, job, str(tmp / f"{n}.json")], env=_env(n), cwd=ROOT,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for n in (1, 4)}
    procs.update({f"p{i}": subprocess.Popen(
        [sys.executable, "-m", "experiments.sweep", *flags, "--distributed", f"--coordinator_address=localhost:{port}",
         "--num_processes=2", f"--process_id={i}", f"--out_dir={tmp / f'p{i}'}"],
        env=_env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in (0, 1)})
    cls.logs = {k: p.communicate(timeout=600)[0] for k, p in procs.items()}
    cls.codes = {k: p.returncode for k, p in procs.items()}
    cls.out = {n: json.loads((tmp / f"{n}.json").read_text()) for n in (1, 4) if cls.codes[n] == 0}

  @classmethod
  def tearDownClass(cls):
    cls.tmp.cleanup()
    super().tearDownClass()

  def _jobs(self):
    for n in (1, 4):
      self.assertEqual(self.codes[n], 0, self.logs[n][-3000:])
    return self.out[1], self.out[4]

  def test_sweep_rows_agree(self):
    one, four = self._jobs()
    self.assertEqual((one["devices"], four["devices"]), (1, 4))
    keys1, values1 = _split(one["sweep"])
    keys4, values4 = _split(four["sweep"])
    self.assertEqual(keys4, keys1)
    self.assertLen(keys1, 4)  # 2 qk_std x 2 rules
    np.testing.assert_allclose(values4, values1, **METRIC_TOL)

  def test_grid_agrees_and_drops_padding(self):
    one, four = self._jobs()
    chex.assert_shape(np.asarray(four["grid_loss"]), (3, 3))  # 3 steps x 3 members (padded to 4 on 4 devices)
    np.testing.assert_allclose(four["grid_loss"], one["grid_loss"], **METRIC_TOL)
    np.testing.assert_allclose(four["grid_final_loss"], one["grid_final_loss"], **METRIC_TOL)
    self.assertEqual(set(four["grid_members"]), {3})
    self.assertEqual(set(four["grid_state_devices"]), {4})  # the members were spread over the 4 devices
    self.assertNotEqual(one["grid_loss"][2][0], one["grid_loss"][2][2])  # the members really differ

  def test_a_users_model_through_the_same_loop(self):
    one, four = self._jobs()
    np.testing.assert_allclose(four["user_grid_loss"], one["user_grid_loss"], **METRIC_TOL)
    self.assertEqual(set(four["user_grid_state_devices"]), {4})  # the members were spread over the 4 devices
    np.testing.assert_allclose(four["user_single_loss"], one["user_single_loss"], **METRIC_TOL)

  def test_training_run_agrees_replicated_and_fsdp(self):
    one, four = self._jobs()
    for shard_params in (False, True):
      np.testing.assert_allclose(four[f"single_loss_{shard_params}"], one[f"single_loss_{shard_params}"],
                                 **METRIC_TOL)
    self.assertEqual(four["single_specs_False"], [[]])  # replicated parameters
    self.assertIn([None, "data"], four["single_specs_True"])  # FSDP: parameters split over the devices
    self.assertEqual(one["single_specs_True"], [[]])

  def test_two_processes_match_one(self):
    one, _ = self._jobs()
    for i in (0, 1):
      self.assertEqual(self.codes[f"p{i}"], 0, self.logs[f"p{i}"][-3000:])
    tmp = pathlib.Path(self.tmp.name)
    self.assertFalse((tmp / "p1").exists())  # only process 0 writes
    rows = [json.loads(line) for line in (tmp / "p0" / "results.jsonl").read_text().splitlines()]
    keys, values = _split(rows)
    keys1, values1 = _split(one["sweep"])
    self.assertEqual(keys, keys1)
    np.testing.assert_allclose(values, values1, **METRIC_TOL)


@pytest.mark.slow  # two processes sharing a checkpoint, one killed mid-save
class TwoProcessCheckpointTest(absltest.TestCase):
  """A training run of 2 processes saves orbax checkpoints into its shared --out_dir; one process killed in the
  middle of a save, both are rerun and resume from the last complete checkpoint, ending as an uninterrupted run."""

  # Two blocks, trained stacked (scanned, the default): each checkpoint unstacks them, the resumed run stacks them back
  # onto its devices.
  FLAGS = ["--width=16", "--depth=2", "--num_heads=2", "--seq_len=8", "--batch_size=2", "--steps=12", "--log_every=2",
           "--checkpoint_every=4"]

  def _start(self, out, kill_at=None):
    port = _free_port()
    procs = []
    for i in (0, 1):
      flags = [*self.FLAGS, "--distributed", f"--coordinator_address=localhost:{port}", "--num_processes=2",
               f"--process_id={i}", f"--out_dir={out}"]
      main = ["-m", "experiments.train"] if kill_at is None or i == 0 else ["tests/kill_mid_save.py", str(kill_at)]
      procs.append(subprocess.Popen([sys.executable, *main, *flags], env=_env(), cwd=ROOT, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True))
    return procs

  def _run(self, out):
    procs = self._start(out)
    logs = [p.communicate(timeout=600)[0] for p in procs]
    for p, log in zip(procs, logs):
      self.assertEqual(p.returncode, 0, log[-3000:])
    return logs

  def test_kill_one_process_mid_save_and_resume_both(self):
    tmp = pathlib.Path(self.create_tempdir().full_path)
    whole, cut = tmp / "whole", tmp / "cut"
    self._run(whole)
    self.assertEqual(sorted(p.name for p in (whole / "checkpoints").iterdir()), ["4", "8"])
    # Process 1 dies (SIGKILL) while the checkpoint after 8 steps is being written; then the job is killed.
    procs = self._start(cut, kill_at=8)
    log1 = procs[1].communicate(timeout=600)[0]
    self.assertEqual(procs[1].returncode, -signal.SIGKILL, log1[-3000:])
    try:
      procs[0].wait(timeout=5)
    except subprocess.TimeoutExpired:  # waiting for its peer at a barrier, as a job would until its scheduler ends it
      procs[0].send_signal(signal.SIGKILL)
    procs[0].communicate()
    self.assertFalse((cut / "checkpoints" / "8").exists())  # the interrupted save left no checkpoint
    self.assertFalse((cut / "summary.json").exists())
    logs = self._run(cut)
    for log in logs:
      self.assertIn("resuming from the checkpoint after 4 steps", log)
    self.assertEqual(sorted(p.name for p in (cut / "checkpoints").iterdir()), ["4", "8"])  # no temporary folder
    for name in ("metrics.jsonl", "summary.json"):
      self.assertEqual((cut / name).read_bytes(), (whole / name).read_bytes(), name)
    self.assertEqual(json.loads((cut / "summary.json").read_text())["status"], "completed")


if __name__ == "__main__":
  absltest.main()
