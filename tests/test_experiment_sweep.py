"""Smoke test of `python -m experiments.sweep` and its rejection of bad flags."""

import contextlib
import io
import json
import os
import pathlib
import subprocess
import sys
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import pytest

import experiment_main
from experiments import cli
from experiments import sweep
from scaling.studies import sweep as sweep_lib
ROOT = pathlib.Path(__file__).resolve().parents[1]


class SweepMainTest(absltest.TestCase):

  @pytest.mark.slow  # a command line in a process of its own
  def test_main_writes_results(self):
    tmp = pathlib.Path(self.create_tempdir().full_path)
    out = tmp / "sweep"
    # A real command line, as a user types it (a flagfile, in a process of its own), and everything it writes.
    flagfile = tmp / "sweep.flags"
    flagfile.write_text(f"--d_k=4,8\n--rules=sqrt,qk_norm,temperature\n--seq_len=8\n--batch=1\n--num_seeds=2\n"
                        f"--causal\n--out_dir={out}\n")
    ok = subprocess.run([sys.executable, "-m", "experiments.sweep", f"--flagfile={flagfile}"], capture_output=True,
                        text=True, cwd=ROOT, env={**os.environ, "JAX_PLATFORMS": "cpu"}, timeout=300)
    self.assertEqual(ok.returncode, 0, ok.stderr)
    self.assertIn("qk_norm", ok.stdout)
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    self.assertLen(rows, 6)
    for r in rows:
      for key in ("rule", "d_k", "seq_len", "dtype"):
        self.assertIn(key, r)
      for m in ("logit_var", "logit_std", "logit_absmax", "entropy", "entropy_normalized", "max_prob",
                "saturated_frac", "softmax_jacobian_norm", "grad_norm_q", "grad_norm_k", "grad_norm_v",
                "grad_norm_logits"):
        self.assertEqual(set(r[m]), {"mean", "std"}, m)
    header = (out / "results.csv").read_text().splitlines()[0].split(",")
    self.assertIn("entropy_mean", header)
    self.assertEqual(json.loads((out / "config.json").read_text())["config"]["d_k"], [4, 8])
    for metric, _, _ in sweep_lib.PLOTS:
      self.assertTrue((out / f"{metric}.png").stat().st_size > 1000)
    self.assertFalse((out / "results.partial.jsonl").exists())
    # summary.md: one Markdown row per (rule, metric), one column per d_k, the numbers of results.jsonl.
    summary = (out / "summary.md").read_text().splitlines()
    self.assertIn("T = 8, 2 heads, batch 1, 2 seeds", summary[0])
    table = [[c.strip() for c in line.strip("|").split("|")] for line in summary if line.startswith("|")]
    self.assertEqual(table[0], ["rule", "metric", "d_k = 4", "d_k = 8"])
    self.assertLen(table[2:], 3 * len(sweep_lib.SUMMARY_METRICS))
    cell = {(r[0], r[1]): r[2:] for r in table[2:]}
    by = {(r["rule"], r["d_k"]): r for r in rows}
    for rule in ("sqrt", "qk_norm", "temperature"):
      for d, text in zip((4, 8), cell[(rule, "logit std")]):
        self.assertAlmostEqual(float(text), by[(rule, d)]["logit_std"]["mean"], delta=1e-3 * abs(float(text)))


  def test_width_mode(self):
    out = pathlib.Path(self.create_tempdir().full_path) / "width"
    code, _, _ = experiment_main.run_main(sweep, d_k=[4], parametrization=["sp", "mup"], width=[16, 32], seq_len=8,
                                          batch=1, num_seeds=1, out_dir=str(out))
    self.assertEqual(code, 0)
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    self.assertLen(rows, 4)
    self.assertEqual({(r["parametrization"], r["width"], r["rule"]) for r in rows},
                     {(p, w, "param") for p in ("sp", "mup") for w in (16, 32)})

  def test_width_mode_flag_errors(self):
    for kwargs, text in (({"parametrization": ["mup"]}, "go together"), ({"zero_query": True}, "zero_query"),
                         ({"rules": ["param"]}, "needs --parametrization")):
      code, _, err = experiment_main.run_main(sweep, d_k=[4], num_seeds=1, out_dir=self.create_tempdir().full_path,
                                              **kwargs)
      self.assertEqual(code, 2)
      self.assertIn(text, err)


class BadFlagsTest(parameterized.TestCase):

  @parameterized.parameters(
      ("--d_k=0", "--d_k"), ("--d_k=16,,32", "--d_k"), ("--d_k=abc", "--d_k"), ("--d_k=-4", "--d_k"),
      ("--rules=sqrt,cube", "--rules"), ("--rules=", "--rules"), ("--dtype=int8", "--dtype"),
      ("--qk_std=nan", "--qk_std"), ("--qk_std=-1", "--qk_std"), ("--qk_std=inf", "--qk_std"),
      ("--num_seeds=0", "--num_seeds"), ("--seq_len=x", "--seq_len"), ("--batch=-1", "--batch"),
      ("--attention=sparse", "--attention"), ("--block_size=0", "--block_size"), ("--bogus=1", "bogus"),
  )
  def test_parse_errors_are_one_line(self, arg, name):
    with self.assertRaises(cli.UsageError) as ctx:
      cli.parse(sweep_lib.SweepConfig, ["sweep", arg])
    lines = [f"error: {ctx.exception}"]
    self.assertLen(lines, 1)
    self.assertTrue(lines[0].startswith("error:"), lines[0])
    self.assertIn(name, lines[0])

  def test_unwritable_out_dir(self):
    blocker = pathlib.Path(self.create_tempdir().full_path) / "file"
    blocker.write_text("x")
    code, _, err = experiment_main.run_main(sweep, out_dir=str(blocker / "sub"), d_k=[4], num_seeds=1)
    self.assertEqual(code, 2)
    self.assertIn("--out_dir", err)

  def test_cli_end_to_end(self):
    with tempfile.TemporaryDirectory() as tmp:
      out = pathlib.Path(tmp) / "o"
      # The refusals and the help, through main's argv in this process (each subprocess costs seconds of imports;
      # test_main_writes_results runs the real command line).
      errors = []
      for argv in (["--d_k=8,0"], ["positional"]):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
          self.assertEqual(sweep.main(["sweep", *argv, f"--out_dir={out}"]), 2)
        errors.append(err.getvalue().strip().splitlines())
        self.assertFalse(out.exists())
      self.assertEqual(errors[0], ["error: flag --d_k=8,0: '0': must be at least 1, got 0"])
      self.assertLen(errors[1], 1)
      self.assertStartsWith(errors[1][0], "error: ")
      usage = io.StringIO()
      with contextlib.redirect_stdout(usage):
        self.assertEqual(sweep.main(["sweep", "--help"]), 0)
      self.assertIn("--d_k", usage.getvalue())

if __name__ == "__main__":
  absltest.main()
