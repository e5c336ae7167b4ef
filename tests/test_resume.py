"""Interrupted runs: rows written group by group, a rerun computes only what is missing, run.json, checkpoints.

The kill tests start a study in a subprocess, kill it with SIGKILL (no cleanup of
any kind runs) once its first group of rows (or first checkpoint) is on disk and
a random moment more has passed, rerun it with the same flags, and compare the
result files byte for byte with those of an uninterrupted run.
"""

import dataclasses
import json
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
import jax
import numpy as np

import experiment_main
from experiments import claims
from experiments import coord_check
from experiments import sweep
from experiments import train
from scaling.runs import results
from scaling.studies import sweep as sweep_lib
from scaling.studies import train as train_lib
from scaling.studies.coord_check import study as coord_check_lib

ROOT = pathlib.Path(__file__).resolve().parents[1]
SWEEP = dict(d_k=[2, 4], rules=["sqrt", "none"], seq_len=4, batch=1, num_heads=1, num_seeds=1)
COORD = dict(parametrizations=["sp"], widths=[16, 32], steps=1, depth=1, num_heads=2, num_seeds=1, seq_len=8,
             batch_size=2)
# A quick claim, then one that takes a second or so: the kill most often lands between them.
CLAIMS = dict(ids=["scale_is_temperature", "head_dim_constant"], d_k=[64, 128], num_seeds=1, seq_len=8)
TRAIN = dict(width=16, depth=1, num_heads=2, seq_len=8, batch_size=2, eval_batches=1, steps=16, log_every=5,
             checkpoint_every=4)


def _lines(path):
  return pathlib.Path(path).read_text().splitlines()


def _start(module, out_dir, **flag_values):
  """The experiment's command line in a subprocess, with a compilation cache of its own (empty): programs that other
  runs of this test process compiled would let it finish before the kill lands."""
  cmd = [sys.executable, "-m", *experiment_main.argv(module, out_dir=str(out_dir), **flag_values)]
  cache = pathlib.Path(out_dir).with_name(pathlib.Path(out_dir).name + "-cache")
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg", "XDG_CACHE_HOME": str(cache)}
  return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _run_without_figures(module, figures, **flag_values):
  """``run_main`` of an uninterrupted reference run, ``figures`` (the study's function drawing its PNGs) skipped: only
  its rows and tables are compared (the resumed run still draws its own)."""
  with mock.patch.object(*figures, return_value=[]):
    return experiment_main.run_main(module, **flag_values)


def _kill_when(proc, ready, test, timeout=300.0):
  """SIGKILLs ``proc`` a random 0-0.3 s after ``ready()`` first holds; fails the test if it ended before."""
  deadline = time.monotonic() + timeout
  while not ready():
    if proc.poll() is not None:
      test.fail(f"the run ended (status {proc.returncode}) before it could be killed: {proc.stderr.read()[-2000:]}")
    if time.monotonic() > deadline:
      proc.kill()
      test.fail("timed out waiting for the run")
    time.sleep(0.02)
  time.sleep(random.uniform(0.0, 0.3))
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  proc.stderr.close()
  test.assertEqual(proc.returncode, -signal.SIGKILL)


def _complete_groups(path, size):
  """The number of whole groups of ``size`` complete lines in a partial file."""
  return len(results.read_complete_jsonl(path)[0]) // size


def _done_keys(path, size, key):
  """The keys of the whole groups of ``size`` complete lines in a file, in the order they were written."""
  rows, _ = results.read_complete_jsonl(path)
  return [key(rows[i]) for i in range(0, len(rows) // size * size, size)]


def _assert_each_measured_once(test, timings, key, keys, done):
  """No group was measured twice, and every group's wall time is in timings.jsonl but at most one.

  The one that may lack it is the last group the killed run wrote: a group's rows are written (and fsynced) before
  its wall time, so a kill can fall between the two writes. The rows themselves are never lost or measured again.
  """
  measured = [key(json.loads(line)) for line in _lines(timings)]
  test.assertEqual(len(measured), len(set(measured)), f"a group was measured twice: {measured}")
  test.assertLessEqual(set(measured), set(keys))
  test.assertLessEqual(set(keys) - set(measured), set(done[-1:]), f"measured {measured}; done before the kill {done}")


class GroupedRowsTest(chex.TestCase):

  def _plan(self):
    return [(("a", 1), 2), (("a", 2), 2), (("b", 1), 2)]

  @staticmethod
  def _key(row):
    return row["p"], row["w"]

  @staticmethod
  def _group(p, w):
    return [{"p": p, "w": w, "i": i, "x": 0.1 * i + w} for i in range(2)]

  def test_torn_line_and_half_group_are_redone(self):
    out = pathlib.Path(self.create_tempdir().full_path)
    stream = results.GroupedRows(out / "rows.jsonl", self._plan(), self._key)
    self.assertEqual(stream.missing(), [("a", 1), ("a", 2), ("b", 1)])
    stream.add(("a", 1), self._group("a", 1))
    stream.add(("a", 2), self._group("a", 2))
    partial = out / "rows.partial.jsonl"
    whole = partial.read_text()
    # A killed writer: the first row of the next group complete, its second torn in the middle.
    with open(partial, "a") as f:
      f.write(json.dumps(self._group("b", 1)[0]) + "\n" + json.dumps(self._group("b", 1)[1])[:9])
    stream = results.GroupedRows(out / "rows.jsonl", self._plan(), self._key)
    self.assertTrue(stream.torn)
    self.assertEqual(stream.dropped, 1)
    self.assertEqual(stream.missing(), [("b", 1)])
    self.assertEqual(partial.read_text(), whole)  # the torn line and the half group are gone from the file
    stream.add(("b", 1), self._group("b", 1))
    rows = stream.finish()
    expected = [r for k, _ in self._plan() for r in self._group(*k)]
    self.assertEqual(rows, expected)
    self.assertEqual([json.loads(line) for line in _lines(out / "rows.jsonl")], expected)
    self.assertFalse(partial.exists())

  def test_a_line_without_its_newline_is_torn(self):
    out = pathlib.Path(self.create_tempdir().full_path)
    (out / "rows.partial.jsonl").write_text("".join(json.dumps(r) + "\n" for r in self._group("a", 1))
                                            + json.dumps(self._group("a", 2)[0]))  # valid JSON, no newline
    rows, torn = results.read_complete_jsonl(out / "rows.partial.jsonl")
    self.assertTrue(torn)
    self.assertEqual(rows, self._group("a", 1))

  def test_a_finished_file_is_read_back_and_nothing_is_missing(self):
    out = pathlib.Path(self.create_tempdir().full_path)
    stream = results.GroupedRows(out / "rows.jsonl", self._plan(), self._key)
    for key, _ in self._plan():
      stream.add(key, self._group(*key))
    first = stream.finish()
    again = results.GroupedRows(out / "rows.jsonl", self._plan(), self._key)
    self.assertEqual(again.missing(), [])
    self.assertEqual(again.finish(), first)

  def test_a_wrong_group_is_refused(self):
    stream = results.GroupedRows(pathlib.Path(self.create_tempdir().full_path) / "r.jsonl", self._plan(), self._key)
    with self.assertRaisesRegex(ValueError, "2 rows"):
      stream.add(("a", 1), self._group("a", 1)[:1])
    with self.assertRaisesRegex(ValueError, "missing"):
      stream.finish()


class CheckpointTest(chex.TestCase):

  def test_round_trip_keeps_every_leaf_and_the_record(self):
    from scaling.training.loop import checkpoint  # pylint: disable=g-import-not-at-top
    from scaling.training.model.family import ModelFamily
    from scaling.training.optimizer import OptimizerConfig
    from scaling.training.loop import initialization as init_lib  # pylint: disable=g-import-not-at-top
    cfg = ModelFamily(depth=1, num_heads=2, base_width=16).model_config("sp", 16, vocab_size=8, max_len=4)
    opt = OptimizerConfig(steps=3)
    state = init_lib.make_init(cfg, opt)(3, 1e-2).replace(step=jax.numpy.asarray(7, jax.numpy.int32))
    state = state.replace(params=jax.tree.map(lambda x: x + 0.5, state.params))
    folder = pathlib.Path(self.create_tempdir().full_path) / "ckpt"
    saver = checkpoint.Checkpoints(folder)
    saver.save(state, seed=3, initial_loss=2.5)
    self.assertEqual(saver.latest_step(), 7)
    restored, record = saver.restore(init_lib.make_init(cfg, opt)(0, 1e-3), seed=3)
    chex.assert_trees_all_equal(restored, state)
    chex.assert_trees_all_equal_dtypes(restored, state)
    self.assertEqual(record, {"step": 7, "data_position": 7, "seed": 3, "initial_loss": 2.5})
    with self.assertRaisesRegex(ValueError, "seed 3, not 4"):
      saver.restore(state, seed=4)
    saver.close()


class CheckpointLayoutTest(parameterized.TestCase):
  """A checkpoint keeps one ``block_{i}`` per block: a scanned run's (blocks trained stacked) resumes unrolled and an
  unrolled run's resumes scanned, from the same values, and trains on as the uninterrupted run does."""

  @parameterized.named_parameters(("scanned_to_unrolled", True, False), ("unrolled_to_scanned", False, True))
  def test_resumes_in_the_other_layout(self, saved_scanned, resumed_scanned):
    from scaling.training.data.config import DataConfig  # pylint: disable=g-import-not-at-top
    from scaling.training.loop import checkpoint  # pylint: disable=g-import-not-at-top
    from scaling.training.loop import initialization as init_lib  # pylint: disable=g-import-not-at-top
    from scaling.training.loop import run as loop_lib  # pylint: disable=g-import-not-at-top
    from scaling.training.loop import sharded as sharded_lib  # pylint: disable=g-import-not-at-top
    from scaling.training.model import scanned_blocks  # pylint: disable=g-import-not-at-top
    from scaling.training.model.family import ModelFamily  # pylint: disable=g-import-not-at-top
    from scaling.training.optimizer import OptimizerConfig  # pylint: disable=g-import-not-at-top
    depth, seed, cut = 3, 5, 2
    data = DataConfig(seq_len=8, batch_size=2).make(seed)
    family = ModelFamily(depth=depth, num_heads=2, base_width=16, depth_alpha=0.5)
    self.assertTrue(family.scan_layers)  # the default
    config = family.model_config("mup", 16, vocab_size=data.vocab_size, max_len=8)
    configs = {True: config, False: dataclasses.replace(config, scan_layers=False)}
    opt = OptimizerConfig(steps=4, learning_rate=1e-2)
    folder = pathlib.Path(self.create_tempdir().full_path) / "ckpt"
    checkpoints = checkpoint.Checkpoints(folder, depth=depth)
    saved = {}

    def log(step, row):
      if step == 0:
        saved["initial_loss"] = row["loss"]

    def save(done, state):
      if done == cut:
        saved["state"] = jax.device_get(state)
        checkpoints.save(state, seed=seed, initial_loss=saved["initial_loss"])

    # The uninterrupted run from its init placed on the device as a restored state is (committed arrays): a layout's
    # runs, uninterrupted and resumed, then share one compiled step over the two cases.
    init = jax.device_put(init_lib.make_init(configs[saved_scanned], opt)(seed, opt.learning_rate), jax.devices()[0])
    whole = loop_lib.run_training(configs[saved_scanned], opt, data, loop_lib.Runs(seed=seed),
                                  loop_lib.RunOptions(callback=log, after_step=save, state=init))
    self.assertEqual(scanned_blocks.is_stacked(saved["state"].params, depth), saved_scanned)
    target = sharded_lib.make_run_init(configs[resumed_scanned], opt)(seed, opt.learning_rate)
    restored, record = checkpoints.restore(target, seed=seed)
    self.assertEqual((record["step"], record["initial_loss"]), (cut, saved["initial_loss"]))
    self.assertEqual(scanned_blocks.is_stacked(restored.params, depth), resumed_scanned)
    chex.assert_trees_all_equal_structs(restored, target)
    chex.assert_trees_all_equal_shapes_and_dtypes(restored, target)
    # The same values, leaf by leaf, in the per-block layout (parameters, Adam's moments, the multipliers).
    per_block = checkpoint.per_block_state(restored, depth)
    self.assertEqual({k for k in per_block.params if k.startswith("block_")}, {f"block_{i}" for i in range(depth)})
    chex.assert_trees_all_equal(per_block, checkpoint.per_block_state(saved["state"], depth))
    resumed = loop_lib.run_training(configs[resumed_scanned], opt, data, loop_lib.Runs(seed=seed),
                                    loop_lib.RunOptions(state=restored, initial_loss=record["initial_loss"]))
    self.assertEqual(int(resumed.state.step), int(whole.state.step))
    # Scanned and unrolled blocks compute the same function, in float32 rounded otherwise.
    chex.assert_trees_all_close(checkpoint.per_block_state(resumed.state, depth),
                                checkpoint.per_block_state(whole.state, depth), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(resumed.final_loss, whole.final_loss, rtol=1e-6)
    checkpoints.close()

  def test_a_checkpoint_saved_stacked_restores_unchanged(self):
    """The per-block layout on disk round-trips every leaf of a scanned model's state exactly (``per_block_state``
    and ``stacked_state`` are inverses, the per-parameter scalars kept once)."""
    from scaling.training.loop import checkpoint  # pylint: disable=g-import-not-at-top
    from scaling.training.loop import initialization as init_lib  # pylint: disable=g-import-not-at-top
    from scaling.training.model.family import ModelFamily  # pylint: disable=g-import-not-at-top
    from scaling.training.optimizer import OptimizerConfig  # pylint: disable=g-import-not-at-top
    config = ModelFamily(depth=3, num_heads=2, base_width=16).model_config("umup", 16, vocab_size=8, max_len=4)
    state = init_lib.make_init(config, OptimizerConfig(steps=3))(1, 1e-2)
    state = state.replace(params=jax.tree.map(lambda x: x + 0.5, state.params))
    per_block = checkpoint.per_block_state(state, 3)
    self.assertEqual({k for k in per_block.params if k.startswith("block_")}, {"block_0", "block_1", "block_2"})
    chex.assert_trees_all_equal(checkpoint.stacked_state(per_block, 3, state), state)
    folder = pathlib.Path(self.create_tempdir().full_path) / "ckpt"
    with self.assertRaisesRegex(ValueError, "depth"):
      checkpoint.Checkpoints(folder, depth=0)
    saver = checkpoint.Checkpoints(folder, depth=3)
    saver.save(state, seed=1, initial_loss=2.0)
    restored, _ = saver.restore(init_lib.make_init(config, OptimizerConfig(steps=3))(0, 1e-3), seed=1)
    chex.assert_trees_all_equal(restored, state)
    saver.close()


class ManifestTest(parameterized.TestCase):

  def test_same_options_resume_other_options_refused_unless_overwrite(self):
    out = pathlib.Path(self.create_tempdir().full_path) / "run"
    config = sweep_lib.SweepConfig(d_k=(4, 8), output=results.OutputConfig(str(out)))
    results.open_run(out, config, outputs=("results.jsonl",))
    (out / "results.partial.jsonl").write_text('{"d_k": 4}\n')
    # Another out_dir spelling, --overwrite and the output group do not count: this resumes, keeping the rows.
    results.open_run(out, sweep_lib.SweepConfig(d_k=(4, 8)), outputs=("results.jsonl",))
    self.assertTrue((out / "results.partial.jsonl").exists())
    other = sweep_lib.SweepConfig(d_k=(4, 16))
    with self.assertRaisesRegex(ValueError, r"d_k=\(4, 16\) \(was d_k=\(4, 8\)\).*or pass overwrite=True$"):
      results.open_run(out, other, outputs=("results.jsonl",))
    self.assertTrue((out / "results.partial.jsonl").exists())
    results.open_run(out, other, overwrite=True, outputs=("results.jsonl",))
    self.assertFalse((out / "results.partial.jsonl").exists())
    self.assertEqual(json.loads((out / results.MANIFEST).read_text())["config"]["d_k"], [4, 16])
    (out / "results.partial.jsonl").write_text('{"d_k": 4}\n')
    results.open_run(out, other, overwrite=True, outputs=("results.jsonl",))  # same options: afresh all the same
    self.assertFalse((out / "results.partial.jsonl").exists())

  def test_a_folder_without_manifest_is_not_trusted(self):
    out = pathlib.Path(self.create_tempdir().full_path)
    (out / "results.partial.jsonl").write_text('{"d_k": 4}\n')
    (out / "keep.txt").write_text("not ours")
    results.open_run(out, sweep_lib.SweepConfig(), outputs=("results.jsonl",))
    self.assertFalse((out / "results.partial.jsonl").exists())
    self.assertTrue((out / "keep.txt").exists())

  def test_cli_refuses_other_flags_with_one_line(self):
    out = pathlib.Path(self.create_tempdir().full_path) / "run"
    results.open_run(out, sweep_lib.SweepConfig(d_k=(2, 4)))
    code, stdout, stderr = experiment_main.run_main(sweep, d_k=[2, 8], out_dir=str(out))
    experiment_main.assert_one_line_error(self, code, stdout, stderr, "--d_k=2,8 (was --d_k=2,4)")
    self.assertEqual(sorted(p.name for p in out.iterdir()), [results.MANIFEST])


@pytest.mark.slow  # a training run in its own process, killed and resumed
class KillAndResumeTest(chex.TestCase):

  def _check_rows_without_timings(self, path):
    for row in results.read_jsonl(path):
      self.assertFalse({"seconds", "time", "wall_time"} & set(row), row)

  def test_sweep(self):
    tmp = pathlib.Path(self.create_tempdir().full_path)
    whole, cut = tmp / "whole", tmp / "cut"
    proc = _start(sweep, cut, **SWEEP)
    size = len(SWEEP["rules"])
    _kill_when(proc, lambda: _complete_groups(cut / "results.partial.jsonl", size) >= 1, self)
    done = _done_keys(cut / "results.partial.jsonl", size, lambda row: row["d_k"])
    code, _, err = _run_without_figures(sweep, (sweep_lib, "write_plots"), out_dir=str(whole), **SWEEP)
    self.assertEqual(code, 0, err)
    self.assertFalse((cut / "results.jsonl").exists())
    with open(cut / "results.partial.jsonl", "a") as f:  # and a torn line on top
      f.write('{"rule": "sqrt", "d_k": 4, "logit')
    code, stdout, err = experiment_main.run_main(sweep, out_dir=str(cut), **SWEEP)
    self.assertEqual(code, 0, err)
    self.assertIn("resuming: 1 of 2", stdout)
    self.assertIn(f"4 configurations (2 reused from {cut}", stdout)  # 2 rules at d_k 2 before the kill
    for name in ("results.jsonl", "results.csv"):
      self.assertEqual((cut / name).read_bytes(), (whole / name).read_bytes(), name)
    self.assertTrue((cut / "summary.png").exists())
    self.assertFalse((cut / "results.partial.jsonl").exists())
    # Each head dimension was computed once: d_k 2 before the kill, d_k 4 after it.
    self.assertEqual(done, [2])
    _assert_each_measured_once(self, cut / "timings.jsonl", lambda row: row["d_k"], [2, 4], done)
    self._check_rows_without_timings(cut / "results.jsonl")

  def test_coord_check(self):
    tmp = pathlib.Path(self.create_tempdir().full_path)
    whole, cut = tmp / "whole", tmp / "cut"
    proc = _start(coord_check, cut, **COORD)
    size = 5 * (COORD["steps"] + 1)  # embed, attention logits, attention output, MLP output, readout; steps 0..k
    _kill_when(proc, lambda: _complete_groups(cut / "results.partial.jsonl", size) >= 1, self)
    done = _done_keys(cut / "results.partial.jsonl", size, lambda row: row["width"])
    code, _, err = _run_without_figures(coord_check, (coord_check_lib, "write_figure"), out_dir=str(whole), **COORD)
    self.assertEqual(code, 0, err)
    self.assertLen(_lines(whole / "results.jsonl"), size * len(COORD["widths"]))
    code, stdout, err = experiment_main.run_main(coord_check, out_dir=str(cut), **COORD)
    self.assertEqual(code, 0, err)
    self.assertIn("resuming: 1 of 2", stdout)
    for name in ("results.jsonl", "slopes.jsonl", "slopes.csv"):
      self.assertEqual((cut / name).read_bytes(), (whole / name).read_bytes(), name)
    self.assertTrue((cut / "coord_check.png").exists())
    self.assertEqual(done, [16])
    _assert_each_measured_once(self, cut / "timings.jsonl", lambda row: row["width"], [16, 32], done)
    self._check_rows_without_timings(cut / "results.jsonl")

  def test_claims(self):
    tmp = pathlib.Path(self.create_tempdir().full_path)
    whole, cut = tmp / "whole", tmp / "cut"
    proc = _start(claims, cut, **CLAIMS)
    _kill_when(proc, lambda: _complete_groups(cut / "claims.partial.jsonl", 1) >= 1, self)
    code, _, err = experiment_main.run_main(claims, out_dir=str(whole), **CLAIMS)
    self.assertEqual(code, 0, err)
    self.assertLen(_lines(whole / "claims.jsonl"), 2)
    # What the killed run finished: its partial file, or, when the kill came after the rows were complete (the
    # partial file is then renamed to claims.jsonl), all of them.
    partial = cut / "claims.partial.jsonl"
    done = _done_keys(partial if partial.exists() else cut / "claims.jsonl", 1, lambda row: row["id"])
    code, stdout, err = experiment_main.run_main(claims, out_dir=str(cut), **CLAIMS)
    self.assertEqual(code, 0, err)
    if len(done) < 2:  # killed between the two claims (not after both)
      self.assertIn("resuming: 1 of 2", stdout)
    for name in ("claims.jsonl", "claims.md", "claims_readme.md"):
      self.assertEqual((cut / name).read_bytes(), (whole / name).read_bytes(), name)
    # Each claim was measured once: what was done before the kill is not measured again.
    _assert_each_measured_once(self, cut / "timings.jsonl", lambda row: row["id"], CLAIMS["ids"], done)
    self._check_rows_without_timings(cut / "claims.jsonl")

  def test_training_resumes_from_its_checkpoint(self):
    tmp = pathlib.Path(self.create_tempdir().full_path)
    whole, cut = tmp / "whole", tmp / "cut"
    proc = _start(train, cut, **TRAIN)

    def saved():
      folder = cut / "checkpoints"
      return folder.exists() and any(p.name.isdigit() for p in folder.iterdir())

    _kill_when(proc, saved, self)
    code, _, err = _run_without_figures(train, (train_lib, "write_plots"), out_dir=str(whole),
                                        **{**TRAIN, "checkpoint_every": 0})
    self.assertEqual(code, 0, err)
    self.assertFalse((whole / "checkpoints").exists())
    self.assertFalse((cut / "summary.json").exists())
    code, stdout, err = experiment_main.run_main(train, out_dir=str(cut), **TRAIN)
    self.assertEqual(code, 0, err)
    first = json.loads((cut / "timings.json").read_text())["resumed_from"]
    self.assertIn(f"resuming from the checkpoint after {first} steps", stdout)
    self.assertGreater(first, 0)
    self.assertEqual(first % TRAIN["checkpoint_every"], 0)
    # Same history (no step doubled or lost) and the same final and held-out losses, bit for bit.
    for name in ("metrics.jsonl", "summary.json"):
      self.assertEqual((cut / name).read_bytes(), (whole / name).read_bytes(), name)
    self.assertTrue((cut / "loss.png").exists())
    steps = [json.loads(line)["step"] for line in _lines(cut / "metrics.jsonl")]
    self.assertEqual(steps, sorted({*range(0, TRAIN["steps"], TRAIN["log_every"]), TRAIN["steps"] - 1}))
    self._check_rows_without_timings(cut / "metrics.jsonl")
    # A finished run is not trained again.
    code, stdout, _ = experiment_main.run_main(train, out_dir=str(cut), **TRAIN)
    self.assertEqual(code, 0)
    self.assertIn("nothing to train", stdout)


if __name__ == "__main__":
  absltest.main()
