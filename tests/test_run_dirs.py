"""Run directories: without --out_dir each configuration gets its own folder under runs/<experiment>/."""

import contextlib
import dataclasses
import hashlib
import io
import json
import os
import pathlib

from absl.testing import absltest
import chex

import experiment_main
from experiments import cli
from scaling.base import validation
from scaling.runs import results
from scaling.studies import sweep as sweep_lib
from scaling.studies import train as training


class RunNameTest(chex.TestCase):

  def test_same_options_same_name_changed_options_another(self):
    base = training.TrainConfig()
    name = results.run_name(base)
    self.assertEqual(results.run_name(training.TrainConfig()), name)
    self.assertRegex(name, r"^defaults-[0-9a-f]{8}$")
    wider = training.TrainConfig(width=128)
    self.assertRegex(results.run_name(wider), r"^width=128-[0-9a-f]{8}$")
    self.assertNotEqual(results.run_name(wider)[-8:], name[-8:])

  def test_output_only_options_keep_the_name(self):
    base = results.run_name(training.TrainConfig())
    output = training.TrainOutputConfig("elsewhere", overwrite=True, log_to=("tensorboard",))
    for config in (training.TrainConfig(print_every=7), training.TrainConfig(checkpoint_every=3),
                   training.TrainConfig(output=output)):
      self.assertEqual(results.run_name(config), base)

  def test_hash_is_of_the_options_written_out(self):
    config = training.TrainConfig(width=32)
    # The hash covers exactly the options run.json records: written out here from the dataclass by hand.
    options = dataclasses.asdict(config)
    for name in ("output", "cluster", "print_every", "checkpoint_every"):
      options.pop(name)
    options = json.loads(json.dumps(options))
    digest = hashlib.sha256(json.dumps(options, sort_keys=True).encode()).hexdigest()[:8]
    self.assertEqual(results.run_name(config), f"width=32-{digest}")


def _fake_run(config, out_dir):
  """A study that opens its run folder and counts its runs there (no training: the folder logic alone)."""
  results.open_run(out_dir, config, overwrite=config.output.overwrite, outputs=("count",))
  count = out_dir / "count"
  count.write_text(str(int(count.read_text()) + 1 if count.exists() else 1))


class RunDirectoryTest(chex.TestCase):

  def setUp(self):
    super().setUp()
    self.root = pathlib.Path(self.create_tempdir().full_path)
    cwd = os.getcwd()
    os.chdir(self.root)
    self.addCleanup(os.chdir, cwd)

  def _run(self, *args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
      code = cli.main(sweep_lib.SweepConfig, _fake_run, ["sweep", *args])
    return code, out.getvalue(), err.getvalue()

  def test_vary_resume_and_latest(self):
    runs = self.root / "runs" / "sweep"
    code, first, err = self._run("--d_k=2")
    self.assertEqual(code, 0, err)
    (one,) = [p for p in runs.iterdir() if p.name != results.LATEST]
    self.assertRegex(one.name, r"^d_k=2-[0-9a-f]{8}$")
    self.assertIn(f"run directory: runs/sweep/{one.name} (new)", first)
    self.assertEqual(json.loads((one / results.MANIFEST).read_text())["config"]["d_k"], [2])
    self.assertEqual(os.readlink(runs / results.LATEST), one.name)
    # The same options (and an output-only one): the same folder, resumed.
    code, again, err = self._run("--d_k=2", "--overwrite")
    self.assertEqual(code, 0, err)
    self.assertIn(f"run directory: runs/sweep/{one.name} (resuming", again)
    code, again, err = self._run("--d_k=2")
    self.assertEqual((one / "count").read_text(), "2")  # --overwrite started afresh there, then one more
    # A changed option: a new folder (no refusal, no --overwrite needed), and latest follows it.
    code, causal, err = self._run("--d_k=2", "--rules=sqrt,none", "--causal")
    self.assertEqual(code, 0, err)
    (two,) = {p.name for p in runs.iterdir()} - {one.name, results.LATEST}
    self.assertRegex(two, r"^d_k=2,rules=sqrt\+none,causal=True-[0-9a-f]{8}$")
    self.assertIn("(new)", causal)
    self.assertEqual(os.readlink(runs / results.LATEST), two)
    self.assertEqual((runs / two / "count").read_text(), "1")
    self.assertEqual((one / "count").read_text(), "2")
    # Bad input writes nothing: no new folder, latest unchanged.
    code, stdout, stderr = self._run("--d_k=2", "--seq_len=0")
    experiment_main.assert_one_line_error(self, code, stdout, stderr, "seq_len")
    self.assertCountEqual([p.name for p in runs.iterdir()], [one.name, two, results.LATEST])
    self.assertEqual(os.readlink(runs / results.LATEST), two)

  def test_a_run_that_writes_nothing_names_no_folder(self):
    def refused(config, out_dir):
      del out_dir
      raise validation.ConfigError(f"d_k={config.d_k} is refused by this study before it writes")

    def dry_run(config, out_dir):
      del config, out_dir
      print("the plan, and nothing written")

    for run, want_code in ((refused, 2), (dry_run, 0)):
      out, err = io.StringIO(), io.StringIO()
      with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(sweep_lib.SweepConfig, run, ["sweep", "--d_k=2"])
      self.assertEqual(code, want_code, err.getvalue())
      self.assertNotIn("run directory", out.getvalue() + err.getvalue())
      self.assertFalse((self.root / "runs").exists())

  def test_explicit_out_dir_keeps_one_folder_and_refuses_other_options(self):
    code, _, err = self._run("--d_k=2", "--out_dir=mine")
    self.assertEqual(code, 0, err)
    code, stdout, stderr = self._run("--d_k=4", "--out_dir=mine")
    experiment_main.assert_one_line_error(self, code, stdout, stderr, "--d_k=4 (was --d_k=2)")
    self.assertIn("--overwrite", stderr)
    self.assertFalse((self.root / "runs").exists())
    self.assertEqual((self.root / "mine" / "count").read_text(), "1")


if __name__ == "__main__":
  absltest.main()
