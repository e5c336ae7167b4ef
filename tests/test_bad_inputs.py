"""Bad input to every experiment: one line ``error: ...``, a non-zero exit, no traceback, nothing written."""

import os
import pathlib
import subprocess
import sys
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized

import experiment_main
from experiments import attention_memory
from experiments import benchmark
from experiments import claims
from experiments import cli
from experiments import coord_check
from experiments import sweep
from experiments import train
from experiments import transfer
from scaling import resources

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Text files named in the table by placeholder; written once per test class.
FILES = {
    "{empty}": b"",
    "{short}": b"abcdefghij" * 2,  # 20 characters: less than one sequence of any study's default length
    "{binary}": b"\x7fELF\x02\x01\x01\x00" * 40,
    "{latin1}": "caf\u00e9 na\u00efve ".encode("latin-1") * 40,
}
HUGE = 1_000_000_000

CASES = (
    # sweep
    ("sweep_duplicate_d_k", sweep, dict(d_k="16,16"), "--d_k=16,16: '16' is given twice"),
    ("sweep_duplicate_rule", sweep, dict(rules="sqrt,sqrt"), "--rules"),
    ("sweep_empty_list", sweep, dict(d_k=""), "--d_k"),
    ("sweep_zero_seeds", sweep, dict(num_seeds=0), "--num_seeds"),
    ("sweep_huge_seed", sweep, dict(seed=2**31), "--seed"),
    ("sweep_unknown_dtype", sweep, dict(dtype="float64"), "--dtype"),
    ("sweep_nan_std", sweep, dict(qk_std="nan"), "--qk_std"),
    ("sweep_tau_without_rule", sweep, dict(tau=2.0), "--tau"),
    ("sweep_base_head_dim_unused", sweep, dict(base_head_dim=32, rules="sqrt"), "--base_head_dim"),
    ("sweep_dense_logits_too_big", sweep, dict(seq_len=2_000_000, d_k=1024), "--seq_len=2000000"),
    ("sweep_blockwise_too_big", sweep, dict(seq_len=2_000_000_000, d_k=16, attention="blockwise"),
     "blockwise attention logits"),
    ("sweep_huge_width", sweep, dict(parametrization="sp", width=HUGE, d_k=16), f"--width={HUGE}"),
    ("sweep_huge_seeds", sweep, dict(num_seeds=HUGE), f"--num_seeds={HUGE}"),
    # train
    ("train_huge_width", train, dict(width=HUGE, steps=1), f"--width={HUGE}"),
    ("train_huge_seq_len", train, dict(seq_len=HUGE), "dense attention logits"),
    ("train_huge_vocab", train, dict(vocab_size=100 * HUGE), "readout logits"),
    ("train_huge_depth", train, dict(depth=10 * HUGE), "--depth"),
    ("train_steps_overflow", train, dict(steps=2**31), "--steps"),
    ("train_lr_overflows_float32", train, dict(learning_rate=1e39), "--learning_rate"),
    ("train_divergence_below_1", train, dict(divergence_factor=0.5), "--divergence_factor"),
    ("train_end_factor_above_1", train, dict(end_factor=2.0, schedule="cosine"), "--end_factor"),
    ("train_text_directory", train, dict(text_file="{dir}"), "is a directory"),
    ("train_text_device", train, dict(text_file="/dev/zero"), "not a regular file"),
    ("train_text_missing", train, dict(text_file="{dir}/missing.txt"), "does not exist"),
    ("train_text_empty", train, dict(text_file="{empty}"), "is empty"),
    ("train_text_binary", train, dict(text_file="{binary}"), "binary"),
    ("train_text_not_utf8", train, dict(text_file="{latin1}"), "not valid UTF-8"),
    ("train_text_short", train, dict(text_file="{short}"), "too short for one sequence"),
    ("train_qk_norm_without_rule", train, dict(qk_norm="layer"), "--qk_norm only applies to --rule=qk_norm"),
    ("train_no_qk_gains_without_rule", train, dict(qk_norm_gains=False, rule="sqrt"), "--noqk_norm_gains only"),
    ("train_eps_scaling_with_atan2", train, dict(optimizer="adam_atan2", eps_scaling="mup"), "has no epsilon"),
    ("train_negative_z_loss", train, dict(z_loss=-0.1), "--z_loss"),
    # coord_check
    ("coord_one_width", coord_check, dict(widths="64"), "--widths"),
    ("coord_duplicate_width", coord_check, dict(widths="64,64"), "given twice"),
    ("coord_duplicate_parametrization", coord_check, dict(parametrizations="sp,sp"), "--parametrizations"),
    ("coord_huge_width", coord_check, dict(widths=f"64,{HUGE}"), f"--widths=64,{HUGE}"),
    ("coord_huge_seeds", coord_check, dict(num_seeds=HUGE), f"--num_seeds={HUGE}"),
    ("coord_text_short", coord_check, dict(text_file="{short}"), "too short for one sequence"),
    # transfer
    ("transfer_duplicate_lr", transfer, dict(log2_lrs="-3,-3.0"), "given twice"),
    ("transfer_huge_grid", transfer, dict(num_seeds=HUGE), f"--num_seeds={HUGE}"),
    ("transfer_huge_width", transfer, dict(widths=HUGE), f"--widths={HUGE}"),
    ("transfer_average_last", transfer, dict(average_last=1000, steps=10), "--average_last"),
    ("transfer_text_empty", transfer, dict(text_file="{empty}"), "is empty"),
    # options another axis does not use are refused when typed, even at their default values
    ("transfer_default_widths_on_depth_axis", transfer, dict(axis="depth", widths="32,64,128,256"),
     "--widths only applies to --axis=width"),
    ("transfer_default_depth_on_depth_axis", transfer, dict(axis="depth", depth=2), "--depth only applies"),
    ("transfer_default_rule_with_rules", transfer, dict(rules="sqrt,linear", rule="default"), "--rule does not apply"),
    ("coord_default_widths_on_depth_axis", coord_check, dict(axis="depth", widths="64,128,256,512,1024"),
     "--widths only applies to --axis=width"),
    # claims
    ("claims_duplicate_id", claims, dict(ids="variance_is_dk,variance_is_dk"), "--ids"),
    ("claims_duplicate_d_k", claims, dict(d_k="64,128,128"), "--d_k"),
    ("claims_huge_seq_len", claims, dict(seq_len=10_000_000), "--seq_len=10000000"),
    ("claims_huge_seeds", claims, dict(num_seeds=HUGE), f"--num_seeds={HUGE}"),
    ("claims_text_device", claims, dict(text_file="/dev/zero"), "not a regular file"),
    ("claims_text_short_for_training", claims, dict(text_file="{short}", ids="train_nan_within_100_steps"),
     "too short for one sequence"),
    ("claims_negative_seed", claims, dict(seed=-1), "--seed"),
    # benchmark and the attention-memory probe
    ("benchmark_duplicate_suite", benchmark, dict(suite="sweep,sweep"), "--suite"),
    ("benchmark_unknown_suite", benchmark, dict(suite="foo"), "--suite"),
    ("memory_fraction_above_1", attention_memory, dict(max_memory_fraction=2.0), "--max_memory_fraction"),
    ("memory_unknown_impl", attention_memory, dict(impl="foo"), "--impl"),
)


class BadInputTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.dir = pathlib.Path(absltest.get_default_test_tmpdir()) / "bad_inputs"
    cls.dir.mkdir(parents=True, exist_ok=True)
    cls.paths = {"{dir}": str(cls.dir)}
    for name, raw in FILES.items():
      path = cls.dir / (name.strip("{}") + ".txt")
      path.write_bytes(raw)
      cls.paths[name] = str(path)

  def _flags(self, flags):
    out = {}
    for name, value in flags.items():
      if isinstance(value, str):
        for placeholder, path in self.paths.items():
          value = value.replace(placeholder, path)
      out[name] = value
    return out

  @parameterized.named_parameters(*CASES)
  def test_refused_with_one_line(self, module, flags, needle):
    flags = self._flags(flags)
    out_dir = None
    if module is not attention_memory:
      out_dir = str(self.dir / f"out_{self._testMethodName}")
      flags["out_dir"] = out_dir
    code, stdout, stderr = experiment_main.run_main(module, **flags)
    experiment_main.assert_one_line_error(self, code, stdout, stderr, needle, out_dir)


class AllocationFailureTest(absltest.TestCase):

  def test_out_of_memory_in_xla_is_one_line_and_removes_new_files(self):
    # The estimate is told there is plenty of memory, so the sweep runs and XLA's allocation fails.
    out = pathlib.Path(self.create_tempdir().full_path) / "out"
    out.mkdir()
    (out / "kept.txt").write_text("from an earlier run")
    with mock.patch.object(resources, "available_bytes", lambda: (2**90, "")):
      code, stdout, stderr = experiment_main.run_main(sweep, seq_len=2_000_000, d_k=16, num_seeds=1, rules="sqrt",
                                                      batch=1, num_heads=1, out_dir=str(out))
    self.assertEqual(code, cli.OUT_OF_MEMORY, stderr)
    self.assertNotIn("Traceback", stderr)
    lines = stderr.strip().splitlines()
    self.assertLen(lines, 1, stderr)
    self.assertTrue(lines[0].startswith("error: out of memory: RESOURCE_EXHAUSTED"), lines[0])
    self.assertEqual(stdout, "")
    self.assertEqual(sorted(os.listdir(out)), ["kept.txt"])  # config.json and the partial rows are gone

  def test_memory_error_removes_a_new_out_dir(self):
    out = pathlib.Path(self.create_tempdir().full_path) / "new" / "out"

    def run(config, out_dir):
      out_dir.mkdir(parents=True)
      (out_dir / "rows.jsonl").write_text("{}\n")
      raise MemoryError()

    code, _, stderr = experiment_main.run_main(
        type("module", (), {"__name__": "prog", "main": staticmethod(
            lambda argv: cli.main(benchmark.BenchmarkConfig, run, argv))}), out_dir=str(out))
    self.assertEqual(code, cli.OUT_OF_MEMORY)
    self.assertLen(stderr.strip().splitlines(), 1, stderr)
    self.assertTrue(stderr.startswith("error: out of memory"), stderr)
    self.assertFalse(out.exists())

  def test_other_errors_are_not_swallowed(self):
    def run(config, out_dir):
      raise RuntimeError("a bug")

    with self.assertRaisesRegex(RuntimeError, "a bug"):
      cli.main(benchmark.BenchmarkConfig, run, ["prog", f"--out_dir={self.create_tempdir().full_path}"])

  def test_huge_width_is_refused_before_jax_aborts(self):
    # Before the estimate, XLA aborted the process (exit 134) on this width; a subprocess survives that.
    out = pathlib.Path(self.create_tempdir().full_path) / "out"
    proc = subprocess.run([sys.executable, "-m", "experiments.train", f"--width={HUGE}", "--steps=1",
                           f"--out_dir={out}"], cwd=ROOT, env={**os.environ, "JAX_PLATFORMS": "cpu"},
                          capture_output=True, text=True, timeout=120)
    experiment_main.assert_one_line_error(self, proc.returncode, proc.stdout, proc.stderr, f"--width={HUGE}",
                                          str(out))
    self.assertIn("optimizer state", proc.stderr)


if __name__ == "__main__":
  absltest.main()
