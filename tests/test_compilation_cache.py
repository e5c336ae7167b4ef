"""JAX's persistent compilation cache at the entry points: one option, off when asked, reused by a rerun."""

import dataclasses
import os
import pathlib
import re
import subprocess
import sys
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import pytest

from experiments import cli
from scaling.base import config as config_lib
from scaling.studies import process
from scaling.runs import results
from scaling.base.config import option
from scaling.studies.coord_check import study as coord_check
from scaling.studies import sweep
from scaling.studies import train as training
from scaling.studies.transfer import study as transfer

ROOT = pathlib.Path(__file__).resolve().parents[1]
STUDIES = (sweep.SweepConfig, training.TrainConfig, coord_check.CoordCheckConfig, transfer.TransferConfig)


@dataclasses.dataclass(frozen=True)
class _Tiny(config_lib.Options):
  scale: float = option(2.0, "A factor.")
  output: results.OutputConfig = option(results.OutputConfig("unused"), "Output.")


def _files(path: pathlib.Path) -> list[str]:
  return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file()) if path.exists() else []


class OptionTest(parameterized.TestCase):

  @parameterized.parameters(*STUDIES)
  def test_declared_once_and_given_to_every_entry_point(self, cls):
    declared = [s.name for s in config_lib.option_specs(cli.ProcessOptions)]
    self.assertEqual(declared.count("compilation_cache_dir"), 1)
    self.assertNotIn("compilation_cache_dir", [s.name for _, s in config_lib.flat_options(cls)])
    fv, _ = cli.define_flags(cls)
    self.assertIn("compilation_cache_dir", fv)
    _, process = cli.parse_with_process(cls, ["prog", "--compilation_cache_dir=/x/y"])
    self.assertEqual(process.compilation_cache_dir, "/x/y")

  @parameterized.parameters(("", None), ("none", None), ("None", None), ("/a/b", "/a/b"))
  def test_values(self, value, expected):
    got = process.compilation_cache_dir(value)
    self.assertEqual(None if got is None else str(got), expected)

  def test_default_is_under_xdg_cache_home(self):
    with mock.patch.dict(os.environ, {"XDG_CACHE_HOME": "/some/where"}):
      self.assertEqual(process.compilation_cache_dir(None), pathlib.Path("/some/where/scaling/jax"))
    with mock.patch.dict(os.environ, {"XDG_CACHE_HOME": "", "HOME": "/home/u"}):
      self.assertEqual(process.compilation_cache_dir(None), pathlib.Path("/home/u/.cache/scaling/jax"))


class InProcessTest(chex.TestCase):

  def _main(self, *args):
    seen = {}

    def run(config, out_dir):
      del out_dir
      seen["dir"] = jax.config.jax_compilation_cache_dir
      # A program no other test compiles (its constant is new), so it is compiled here and, with a cache, written.
      seen["value"] = float(jax.jit(lambda x: x * config.scale + 0.123456)(jnp.float32(1.0)))

    code = cli.main(_Tiny, run, ["prog", *args])
    return code, seen

  def test_off_creates_no_folder(self):
    home = pathlib.Path(self.create_tempdir().full_path)
    before = jax.config.jax_compilation_cache_dir
    with mock.patch.dict(os.environ, {"XDG_CACHE_HOME": str(home)}):
      for off in ("none", ""):
        code, seen = self._main(f"--compilation_cache_dir={off}", "--scale=3.5")
        self.assertEqual(code, 0)
        self.assertIsNone(seen["dir"])
        self.assertAlmostEqual(seen["value"], 3.5 + 0.123456, places=5)
    self.assertEqual(_files(home), [])
    self.assertEqual(jax.config.jax_compilation_cache_dir, before)

  def test_default_writes_under_xdg_cache_home_and_restores(self):
    home = pathlib.Path(self.create_tempdir().full_path)
    before = jax.config.jax_compilation_cache_dir
    with mock.patch.dict(os.environ, {"XDG_CACHE_HOME": str(home)}):
      code, seen = self._main("--scale=5.25")
    self.assertEqual(code, 0)
    self.assertEqual(seen["dir"], str(home / "scaling" / "jax"))
    self.assertNotEmpty(_files(home / "scaling" / "jax"))
    self.assertEqual(jax.config.jax_compilation_cache_dir, before)


@pytest.mark.slow  # two sweeps, each in a process of its own
class RerunTest(absltest.TestCase):

  def test_second_sweep_reads_every_program_from_the_cache(self):
    tmp = pathlib.Path(self.create_tempdir().full_path)
    cache = tmp / "cache"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "JAX_LOG_COMPILES": "1", "JAX_EXPLAIN_CACHE_MISSES": "1"}  # cache hits and misses logged as warnings
    # experiments.sweep's entry point with its figures left out: they compile no program, and drawing them is most of
    # a run's own time.
    script = ("import sys; from unittest import mock; from experiments import sweep; "
              "from scaling.studies import sweep as sweep_lib; "
              "mock.patch.object(sweep_lib, 'write_plots', return_value=[]).start(); sys.exit(sweep.main(sys.argv))")
    counts = []
    for i in range(2):
      proc = subprocess.run(
          [sys.executable, "-c", script, "--d_k=4", "--rules=sqrt", "--seq_len=8",
           "--batch=1", "--num_seeds=2", f"--compilation_cache_dir={cache}", f"--out_dir={tmp / f'run{i}'}"],
          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
      self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
      hits = len(re.findall("Persistent compilation cache hit", proc.stderr))
      misses = len(re.findall("PERSISTENT COMPILATION CACHE MISS", proc.stderr))
      counts.append((hits, misses, _files(cache)))
    (hits0, misses0, files0), (hits1, misses1, files1) = counts
    self.assertEqual(hits0, 0)
    self.assertGreaterEqual(misses0, 1)
    self.assertNotEmpty(files0)
    self.assertEqual(misses1, 0)  # the rerun compiles nothing ...
    self.assertEqual(hits1, misses0)  # ... and reads back every program the first run wrote
    self.assertEqual(files1, files0)
    self.assertEqual((tmp / "run0" / "results.jsonl").read_text(), (tmp / "run1" / "results.jsonl").read_text())


if __name__ == "__main__":
  absltest.main()
