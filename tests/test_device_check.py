"""scripts/device_check.py in its CPU dry run: every part runs, and its rows agree with what it measured."""

import json
import pathlib

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

import experiment_main

device_check = experiment_main.load_script("device_check")


class DeviceCheckTest(absltest.TestCase):

  def test_refuses_cpu_without_dry_run(self):
    if jax.default_backend() == "gpu":
      self.skipTest("a GPU is present")
    with self.assertRaisesRegex(ValueError, "not a GPU: run with --dry_run"):
      device_check.run(device_check.Options(out_dir=self.create_tempdir().full_path))

  def test_bad_shape(self):
    with self.assertRaisesRegex(ValueError, "K = 3 must divide the query heads N = 4"):
      device_check.Options(check_shape="1x8x4x3x8")
    with self.assertRaisesRegex(ValueError, "BxTxNxKxH"):
      device_check.Options(bench_shapes=("1x8x4",))

  def test_cudnn_path_is_the_rule_after_prepare(self):
    """The wrapper around cuDNN, with jax.nn's XLA path in its place, against a numpy oracle of qk_norm."""
    q, k, v = (np.asarray(jax.random.normal(key, (1, 6, 2, 8))) for key in jax.random.split(jax.random.key(0), 3))
    got = device_check.jax_nn_fn("qk_norm", "xla")(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), is_causal=True)
    unit = lambda x: x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6)
    z = np.einsum("btnh,bsnh->bnts", unit(q), unit(k)) / np.sqrt(8)  # RMS-normalized q, k; then 1/sqrt(d_k)
    z = np.where(np.tril(np.ones((6, 6), bool)), z, -np.inf)
    p = np.exp(z - z.max(-1, keepdims=True))
    want = np.einsum("bnts,bsnh->btnh", p / p.sum(-1, keepdims=True), v)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)

  def test_dry_run(self):
    out = pathlib.Path(self.create_tempdir().full_path)
    result = device_check.run(device_check.Options(out_dir=str(out), dry_run=True, rules=("qk_norm",)))
    saved = json.loads((out / "device_check.json").read_text())
    self.assertEqual(saved["exactness"], json.loads(json.dumps(result["exactness"])))
    rows = {(r["causal"], r["path"]): r for r in saved["exactness"]}
    self.assertEqual(set(rows), {(c, p) for c in (False, True) for p in ("pallas", "cudnn", "default")})
    for causal in (False, True):
      self.assertEqual(rows[(causal, "cudnn")]["status"], "skipped")
      for path in ("pallas", "default"):
        row = rows[(causal, path)]
        self.assertEqual(row["status"], "ok", row)
        self.assertEqual(row["worst"], max(row["relative_error"].values()))
        self.assertLess(row["worst"], 1e-5)
    self.assertEqual([r["impl"] for r in saved["attention"]], ["ours", "blockwise", "pallas", "jax_nn_xla"])
    for r in saved["attention"]:
      self.assertAlmostEqual(r["fraction_of_peak"], r["tflops"] * 1e12 / saved["matmul_peak_flops"]["float32"])
    self.assertGreater(saved["train"]["fraction_of_peak"], 0)
    text = (out / "device_check.md").read_text()
    self.assertIn("device: cpu (cpu, dry run)", text)
    self.assertIn("| float32 | qk_norm | causal | pallas |  | ok |", text)
    self.assertIn("of the float32 matmul peak", text)


if __name__ == "__main__":
  absltest.main()
