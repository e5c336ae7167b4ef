"""One writer per run folder (scaling.runs.run_lock), a torn last line reported, and the safe points of a signal."""

import contextlib
import io
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys

from absl.testing import absltest
import chex

from experiments import cli
from scaling.runs import interrupt
from scaling.runs import results
from scaling.runs import run_lock
from scaling.studies import sweep as sweep_lib


def _dead_pid() -> int:
  """The pid of a process that has ended (and been reaped)."""
  proc = subprocess.Popen([sys.executable, "-c", "pass"])
  proc.wait()
  return proc.pid


def _write_lock(folder: pathlib.Path, pid: int, host: str | None = None) -> None:
  (folder / run_lock.LOCK).write_text(json.dumps({"pid": pid, "host": host or socket.gethostname(),
                                                  "started": "2026-12-05 08:00:00"}))


class RunLockTest(chex.TestCase):

  def setUp(self):
    super().setUp()
    self.folder = pathlib.Path(self.create_tempdir().full_path)
    self.addCleanup(run_lock.release, self.folder)

  def test_a_live_holder_refuses_a_second_writer_naming_it(self):
    _write_lock(self.folder, os.getppid())  # the process that started this one: alive
    with self.assertRaisesRegex(run_lock.RunLocked, rf"pid {os.getppid()} on host {socket.gethostname()}, started "
                                                    "2026-12-05 08:00:00"):
      run_lock.acquire(self.folder)
    self.assertEqual(json.loads((self.folder / run_lock.LOCK).read_text())["pid"], os.getppid())  # left alone

  def test_a_holder_on_another_host_cannot_be_checked_and_is_respected(self):
    _write_lock(self.folder, _dead_pid(), host="another-host.example")
    with self.assertRaisesRegex(run_lock.RunLocked, "on host another-host.example"):
      run_lock.acquire(self.folder)

  def test_a_stale_lock_is_taken_over_with_a_line(self):
    pid = _dead_pid()
    _write_lock(self.folder, pid)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
      run_lock.acquire(self.folder)
    self.assertIn(f"took over the stale lock of pid {pid}", err.getvalue())
    self.assertEqual(json.loads((self.folder / run_lock.LOCK).read_text())["pid"], os.getpid())
    run_lock.release(self.folder)
    self.assertFalse((self.folder / run_lock.LOCK).exists())

  def test_an_unreadable_lock_is_stale(self):
    (self.folder / run_lock.LOCK).write_text('{"pid": 12')  # torn while it was written
    with contextlib.redirect_stderr(io.StringIO()):
      run_lock.acquire(self.folder)
    self.assertEqual(json.loads((self.folder / run_lock.LOCK).read_text())["pid"], os.getpid())

  def test_the_holder_may_open_its_folder_again(self):
    run_lock.acquire(self.folder)
    run_lock.acquire(self.folder)
    run_lock.release(self.folder)
    self.assertFalse((self.folder / run_lock.LOCK).exists())

  def test_the_command_line_refuses_a_second_writer_with_one_line(self):
    _write_lock(self.folder, os.getppid())
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
      code = cli.main(sweep_lib.SweepConfig, sweep_lib.run, ["sweep", f"--out_dir={self.folder}", "--d_k=2"])
    self.assertEqual(code, 2)
    (line,) = err.getvalue().strip().splitlines()
    self.assertRegex(line, rf"^error: .*being written by another run \(pid {os.getppid()} on host")
    self.assertFalse((self.folder / "results.jsonl").exists())


class TornLineTest(chex.TestCase):

  def test_a_torn_line_is_dropped_and_reported(self):
    out = pathlib.Path(self.create_tempdir().full_path)
    rows = [{"k": 1, "x": 0.5}, {"k": 2, "x": 1.5}]
    partial = out / "rows.partial.jsonl"
    partial.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"k": 3, "x"')
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
      grouped = results.GroupedRows(out / "rows.jsonl", [(k, 1) for k in (1, 2, 3)], lambda row: row["k"])
    self.assertIn(f"{partial}: dropped its torn last line", err.getvalue())
    self.assertEqual(grouped.rows(), rows)
    self.assertEqual(grouped.missing(), [3])
    # The streamed form (training metrics) keeps the whole rows it is told to and reports the torn one too.
    partial.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"k": 3')
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
      stream = results.RowStream(out / "rows.jsonl", keep=lambda row: True)
    self.assertIn("dropped its torn last line", err.getvalue())
    self.assertEqual(stream.rows, rows)
    self.assertEqual(results.read_complete_jsonl(partial), (rows, False))


class SafePointTest(chex.TestCase):

  def test_a_signal_stops_at_the_next_written_group_and_a_second_at_once(self):
    out = pathlib.Path(self.create_tempdir().full_path)
    grouped = results.GroupedRows(out / "rows.jsonl", [(k, 1) for k in range(3)], lambda row: row["k"])
    err = io.StringIO()
    with contextlib.redirect_stderr(err), interrupt.stop_at_safe_points():
      grouped.add(0, [{"k": 0}])
      os.kill(os.getpid(), signal.SIGTERM)  # handled: only a request
      self.assertEqual(interrupt.requested(), signal.SIGTERM)
      with self.assertRaises(interrupt.Interrupted) as stopped:
        grouped.add(1, [{"k": 1}])  # written, then the stop
      self.assertEqual(stopped.exception.exit_status, 143)
      with self.assertRaises(interrupt.Interrupted):
        os.kill(os.getpid(), signal.SIGINT)  # the second signal: at once
    self.assertIn("SIGTERM: stopping once what is running now is written", err.getvalue())
    self.assertEqual(results.read_complete_jsonl(out / "rows.partial.jsonl")[0], [{"k": 0}, {"k": 1}])
    self.assertIsNone(interrupt.requested())  # outside the block: no request, the usual handlers
    self.assertIs(signal.getsignal(signal.SIGTERM), signal.SIG_DFL)


if __name__ == "__main__":
  absltest.main()
