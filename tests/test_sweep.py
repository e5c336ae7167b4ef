"""The sweep's numbers against closed forms, and the vmapped sweep against one-at-a-time runs."""

import functools
import math

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from scaling.studies import sweep
from benchmarks import sweep as bench_sweep


def _rows(**kwargs):
  cfg = sweep.SweepConfig(**{"seq_len": 48, "batch": 2, "num_heads": 2, "num_seeds": 2, **kwargs})
  return {(r["rule"], r["d_k"]): r for r in sweep.run_sweep(cfg)}


# The input stds of the closed-form tests in one sweep: the stds are vmapped in each head dimension's one program and
# scale the same draws, so each std's rows are those of a sweep of that std alone.
SHARED_STDS = (1.0, 0.5, 3.0)


@functools.cache
def _shared_rows():
  """{qk_std: {(rule, d_k): row}} of one sweep read by several tests (rows are only read)."""
  cfg = sweep.SweepConfig(seq_len=48, batch=2, num_heads=2, num_seeds=2, d_k=(16, 128, 512),
                          rules=("none", "sqrt", "linear", "quadratic", "qk_norm"), qk_std=SHARED_STDS)
  rows = {}
  for r in sweep.run_sweep(cfg):
    rows.setdefault(r["qk_std"], {})[(r["rule"], r["d_k"])] = r
  return rows


class ClosedFormTest(parameterized.TestCase):

  def test_logit_variance(self):
    for qk_std in (1.0, 0.5):
      rows = _shared_rows()[qk_std]
      for d in (16, 128):
        # q·k of iid N(0, s²) entries: Var = d·s⁴; scaled by c the variance is c²·d·s⁴.
        expected = {"none": d * qk_std**4, "sqrt": qk_std**4, "linear": qk_std**4 / d, "quadratic": qk_std**4 / d**3}
        for rule, var in expected.items():
          with self.subTest(qk_std=qk_std, rule=rule, d_k=d):
            got = rows[(rule, d)]["logit_var"]["mean"]
            self.assertAlmostEqual(got / var, 1.0, delta=0.06, msg=f"{rule} d_k={d}")
            self.assertAlmostEqual(rows[(rule, d)]["logit_std"]["mean"] / math.sqrt(var), 1.0, delta=0.03)

  def test_entropy_small_logits(self):
    # For logits of small variance σ² per row, softmax entropy ≈ ln T − σ²/2.
    t = 64
    rows = _rows(d_k=(256,), rules=("linear", "sqrt"), qk_std=0.5, seq_len=t)
    for rule in ("linear", "sqrt"):
      sigma2 = rows[(rule, 256)]["logit_var"]["mean"]
      self.assertAlmostEqual(rows[(rule, 256)]["entropy"]["mean"], math.log(t) - sigma2 / 2, delta=0.1 * sigma2 + 1e-4)
    self.assertGreater(rows[("linear", 256)]["entropy"]["mean"], rows[("sqrt", 256)]["entropy"]["mean"])

  def test_unscaled_saturates_and_qk_norm_does_not(self):
    rows = _shared_rows()[3.0]
    self.assertGreater(rows[("none", 512)]["saturated_frac"]["mean"], rows[("none", 16)]["saturated_frac"]["mean"])
    self.assertGreater(rows[("none", 512)]["max_prob"]["mean"], 0.8)
    # QK-norm removes the input scale: logit variance ≈ 1 whatever qk_std and d_k.
    for d in (16, 512):
      self.assertAlmostEqual(rows[("qk_norm", d)]["logit_var"]["mean"], 1.0, delta=0.1)
      self.assertEqual(rows[("qk_norm", d)]["saturated_frac"]["mean"], 0.0)

  def test_vmapped_equals_one_at_a_time(self):
    cfg = sweep.SweepConfig(d_k=(8,), rules=("sqrt", "post_softmax", "qk_norm"), seq_len=16, batch=2,
                            num_seeds=2, causal=True)
    fast = sweep.run_sweep(cfg)
    slow = bench_sweep.run_one_at_a_time(cfg)
    fast = {(r["rule"], r["d_k"]): r for r in fast}
    for r in slow:
      for m in sweep.METRICS:
        np.testing.assert_allclose(fast[(r["rule"], r["d_k"])][m]["mean"], r[m]["mean"], rtol=2e-4, atol=1e-6,
                                   err_msg=f"{r['rule']} {r['d_k']} {m}")

  def test_width_mode_closed_forms(self):
    # SP: W ~ N(0, 1/width), so q = xW has unit-variance entries and Var(q·k) = d_k (1 after 1/√d_k).
    # μP's rule is α/d_k with α = √base_head_dim: at d_k = 64 it equals SP's 1/√d_k exactly (same draws),
    # at d_k = 16 its logit std is twice SP's.
    sp = _rows(d_k=(16, 64), rules=("param", "none"), parametrization="sp", width=128, seq_len=32)
    mup = _rows(d_k=(16, 64), rules=("param",), parametrization="mup", width=128, seq_len=32)
    for d in (16, 64):
      self.assertAlmostEqual(sp[("param", d)]["logit_var"]["mean"], 1.0, delta=0.12)
      self.assertAlmostEqual(sp[("none", d)]["logit_var"]["mean"] / d, 1.0, delta=0.12)
    for m in sweep.METRICS:
      np.testing.assert_allclose(mup[("param", 64)][m]["mean"], sp[("param", 64)][m]["mean"], rtol=1e-5)
    self.assertAlmostEqual(mup[("param", 16)]["logit_std"]["mean"] / sp[("param", 16)]["logit_std"]["mean"], 2.0,
                           delta=1e-3)
    # Zero-initialized queries: all logits 0, attention exactly uniform.
    zq = _rows(d_k=(16,), rules=("param",), parametrization="mup", width=64, zero_query=True, seq_len=16)
    self.assertEqual(zq[("param", 16)]["logit_absmax"]["mean"], 0.0)
    self.assertAlmostEqual(zq[("param", 16)]["entropy_normalized"]["mean"], 1.0, places=5)

  def test_blockwise_sweep_equals_dense(self):
    kwargs = dict(d_k=(8,), rules=("sqrt", "linear", "qk_norm"), seq_len=12, batch=1, num_seeds=2, causal=True)
    dense = _rows(**kwargs)
    blockwise = _rows(**kwargs, attention="blockwise", block_size=5)
    for key, row in dense.items():
      for m in sweep.METRICS:
        np.testing.assert_allclose(blockwise[key][m]["mean"], row[m]["mean"], rtol=2e-4, atol=1e-6,
                                   err_msg=f"{key} {m}")
    with self.assertRaisesRegex(ValueError, "blockwise"):
      sweep.SweepConfig(attention="blockwise", subtract_max=False)

  def test_deterministic(self):
    # The sweep of test_vmapped_equals_one_at_a_time (its compiled program), run twice; then another seed.
    kwargs = dict(d_k=(8,), rules=("sqrt", "post_softmax", "qk_norm"), seq_len=16, batch=2, num_seeds=2, causal=True)
    a = sweep.run_sweep(sweep.SweepConfig(**kwargs))
    b = sweep.run_sweep(sweep.SweepConfig(**kwargs))
    self.assertEqual(a, b)
    c = sweep.run_sweep(sweep.SweepConfig(**kwargs, seed=1))
    self.assertNotEqual(a[0]["entropy"], c[0]["entropy"])

  def test_config_validation(self):
    with self.assertRaisesRegex(ValueError, "rules must be one of"):
      sweep.SweepConfig(rules=("nope",))
    with self.assertRaisesRegex(ValueError, "qk_std"):
      sweep.SweepConfig(qk_std=float("inf"))
    with self.assertRaisesRegex(ValueError, "d_k"):
      sweep.SweepConfig(d_k=(0,))


if __name__ == "__main__":
  absltest.main()
