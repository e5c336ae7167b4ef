"""The random-input rows settled by closed forms and small synthetic problems (the softmax derivative, the GPT-style
init, the order of QKᵀ and the division in low precision, the feature-scaling analogy, √128) and the criteria of
``unscaled_one_hot`` and ``gradients_vanish``: against numpy, finite differences, jax.grad and written-out answers, and
each criterion both ways."""

import math
from unittest import mock

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from scaling.base.validation import ConfigError
from scaling.studies.claims import parts
from scaling.studies.claims import study as claims
from scaling.studies.claims import verdicts
from scaling.studies.claims.random_input import feature_scaling
from scaling.studies.claims.random_input import inputs
from scaling.studies.claims import table as claim_table
from scaling.studies.claims.random_input import projection_init
from scaling.studies.claims.random_input import scale_order
from scaling.studies.claims.random_input import softmax_saturation as saturation

HOLDS, PARTLY, FAILS = verdicts.HOLDS, verdicts.PARTLY, verdicts.FAILS
BY_ID = {c.id: c for c in claims.RANDOM_INPUT_CLAIMS}
TINY = dict(mode="quick", d_k=(64, 128), num_seeds=2, seq_len=16)


def _softmax(z: np.ndarray) -> np.ndarray:
  e = np.exp(z - z.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def _normal(seed: int, shape: tuple[int, ...], std: float = 1.0) -> np.ndarray:
  return (std * np.random.default_rng(seed).standard_normal(shape)).astype(np.float32)


# The Jacobian's diagonal in one compiled program, as the claim runs it (op by op, every operation of the jacobian
# would compile on its own).
_jacobian_diagonal = jax.jit(saturation.softmax_jacobian_diagonal)


class PlacementTest(absltest.TestCase):

  def test_new_rows_sit_beside_their_family(self):
    ids = [c.id for c in claims.RANDOM_INPUT_CLAIMS]
    for before, new, after in (("sqrt_adjusted_factor", "gpt_init_unit_variance", "d64_std_8"),
                               ("unscaled_one_hot", "softmax_derivative_vanishes", "gradients_vanish"),
                               ("nan_gradient_explosion", "divide_right_after_qk", "clamp_before_scale")):
      i = ids.index(new)
      self.assertEqual((ids[i - 1], ids[i + 1]), (before, after))
    self.assertEqual(ids[ids.index("retrieval_not_dominated") + 1], "feature_scales_oscillate")

  def test_insert_after(self):
    rows = tuple(mock.Mock(id=i) for i in "abc")
    new = (mock.Mock(id="x"),)
    self.assertEqual([c.id for c in claim_table.insert_after(rows, "b", new)], ["a", "b", "x", "c"])
    with self.assertRaisesRegex(ConfigError, "no claim 'z'"):
      claim_table.insert_after(rows, "z", new)


class CriteriaReachBothWaysTest(absltest.TestCase):

  def test_every_criterion_and_reading_of_these_rows(self):
    ids = ("gpt_init_unit_variance", "unscaled_one_hot", "softmax_derivative_vanishes", "gradients_vanish",
           "sqrt_flatter_at_128", "divide_right_after_qk", "feature_scales_oscillate")
    for claim_id in ids:
      claim = BY_ID[claim_id]
      for criterion in (claim.criterion, *(r.criterion for r in claim.beside)):
        reached = {criterion.verdict(p) for p in criterion.probes()}
        self.assertContainsSubset({HOLDS, FAILS}, reached, f"{claim_id}: {criterion.text}")
        self.assertTrue(criterion.reason, f"{claim_id}: {criterion.statistic} gives no reason")
    for part in (*saturation.DERIVATIVE_PARTS, *saturation.VANISH_PARTS):
      self.assertContainsSubset({HOLDS, FAILS}, {part.criterion.verdict(p) for p in part.criterion.probes()},
                                part.name)


class SoftmaxDerivativeTest(absltest.TestCase):

  def test_jacobian_diagonal_against_finite_differences(self):
    z = np.random.default_rng(0).standard_normal((3, 8)) * 3
    p, diag = _jacobian_diagonal(jnp.asarray(z, jnp.float32))
    h = 1e-5  # central differences in float64
    fd = np.stack([(_softmax(z + h * np.eye(8)[i]) - _softmax(z - h * np.eye(8)[i]))[:, i] / (2 * h)
                   for i in range(8)], axis=-1)
    np.testing.assert_allclose(np.asarray(diag), fd, atol=2e-6)
    np.testing.assert_allclose(np.asarray(p), _softmax(z), atol=1e-6)
    with self.assertRaisesRegex(ConfigError, "rows, keys"):
      saturation.softmax_jacobian_diagonal(jnp.zeros((2, 3, 4)))

  def test_gap_rows_closed_form(self):
    z = saturation.gap_logits((0.0, 3.0), 5)
    p = _softmax(z.astype(np.float64))[:, 0]
    np.testing.assert_allclose(p, [0.2, math.exp(3) / (math.exp(3) + 4)], rtol=1e-12)
    with self.assertRaisesRegex(ConfigError, "keys"):
      saturation.gap_logits((1.0,), 1)

  def test_both_ways(self):
    row = BY_ID["softmax_derivative_vanishes"].evaluate(claims.Context(**TINY))
    self.assertEqual(row["verdict"], HOLDS, row["finding"])
    gaps = saturation.DERIVATIVE_GAPS
    want = np.exp(gaps[-1]) / (np.exp(gaps[-1]) + 15)  # 16 keys, closed form
    self.assertAlmostEqual(row["numbers"]["p_by_gap"][f"{gaps[-1]:g}"], want, places=6)
    # A wrong identity (∂p_i/∂z_i = p_i) is off by p_i², and a derivative that stays at its peak does not vanish.
    p, diag = _jacobian_diagonal(jnp.asarray(_normal(1, (4, 16), 8.0)))
    wrong = float(np.max(np.abs(np.asarray(diag) - np.asarray(p))))
    score, by_part = parts.score_parts(saturation.DERIVATIVE_PARTS, {"∂p_i/∂z_i = p_i(1 − p_i)": wrong,
                                                                     "vanishes as p_i → 1": 1.0})
    self.assertEqual((by_part, BY_ID["softmax_derivative_vanishes"].criterion.verdict(score)),
                     ({"∂p_i/∂z_i = p_i(1 − p_i)": FAILS, "vanishes as p_i → 1": FAILS}, FAILS))


class UnscaledOneHotTest(absltest.TestCase):

  def _row(self, max_prob: dict[int, list[float]]) -> dict:
    """The claim's row on a d_k sweep with these per-seed mean max probabilities of unscaled attention."""
    dims = tuple(sorted(max_prob))
    seeds = len(next(iter(max_prob.values())))
    sweep = {(rule, d): {"max_prob": np.asarray(max_prob[d] if rule == "none" else [0.07] * seeds),
                         "saturated_frac": np.zeros(seeds)} for rule in claims.SWEEP_RULES for d in dims}
    ctx = claims.Context(d_k=dims, num_seeds=seeds)
    with mock.patch.object(ctx, "sweep", return_value=sweep):
      return BY_ID["unscaled_one_hot"].evaluate(ctx)

  def test_gap_closed_closed_form(self):
    np.testing.assert_allclose(saturation.gap_to_one_closed(np.array([0.5, 0.6]), np.array([0.9, 0.6])), [0.8, 0.0])
    with self.assertRaisesRegex(ConfigError, "low < 1"):
      saturation.gap_to_one_closed(np.array([1.0]), np.array([1.0]))

  def test_trend_both_ways_and_noise(self):
    row = self._row({16: [0.5, 0.52], 64: [0.75, 0.76], 128: [0.84, 0.85], 1024: [0.95, 0.95]})
    self.assertEqual(row["verdict"], HOLDS, row["finding"])
    self.assertAlmostEqual(row["value"], np.mean([1 - 0.05 / 0.5, 1 - 0.05 / 0.48]), places=4)
    self.assertEqual([b["verdict"] for b in row["beside"]], [HOLDS, PARTLY])  # rising everywhere; 0.75 is no level
    flat = self._row({16: [0.3, 0.31], 64: [0.3, 0.31], 128: [0.31, 0.3], 1024: [0.31, 0.31]})
    self.assertEqual(flat["verdict"], FAILS, flat["finding"])
    noisy = self._row({16: [0.2, 0.6], 64: [0.3, 0.6], 128: [0.4, 0.7], 1024: [0.4, 0.9]})  # 0.25 ± 0.5
    self.assertEqual(noisy["verdict"], verdicts.INCONCLUSIVE, noisy["finding"])

  def test_one_seed_states_it(self):
    row = self._row({64: [0.75], 128: [0.95]})  # closes 80% of the distance to 1
    self.assertEqual(row["verdict"], HOLDS)  # no standard error: the thresholds alone decide
    self.assertIn("one seed", row["finding"])
    self.assertEqual(row["beside"][0]["verdict"], verdicts.NOT_MEASURED)


class GradientsVanishTest(absltest.TestCase):

  def test_each_note_at_its_own_d_k(self):
    row = BY_ID["gradients_vanish"].evaluate(claims.Context(**{**TINY, "num_seeds": 1}))
    numbers = row["numbers"]
    self.assertIn(512, numbers["vanished_row_fraction"])  # computed although the context's d_k lack it
    self.assertEqual(numbers["vanished_row_fraction_at_512"], numbers["vanished_row_fraction"][512]["mean"])
    by_part = {p.name: p.criterion.verdict(numbers[p.criterion.statistic]) for p in saturation.VANISH_PARTS}
    self.assertEqual(numbers["part_verdicts"], by_part)
    self.assertIn("note 2 at d_k = 512", row["finding"])

  def test_parts_both_ways(self):
    criterion = BY_ID["gradients_vanish"].criterion
    for at_64, at_512, verdict in ((0.6, 0.7, HOLDS), (0.05, 0.6, PARTLY), (0.05, 0.05, FAILS)):
      score, _ = parts.score_parts(saturation.VANISH_PARTS, {"note 1 at d_k = 64": at_64,
                                                              "note 2 at d_k = 512": at_512})
      self.assertEqual(criterion.verdict(score), verdict, (at_64, at_512))


class SqrtArithmeticTest(absltest.TestCase):

  def test_reading_beside_the_flatter_claim(self):
    self.assertAlmostEqual(saturation.sqrt_arithmetic_error(), abs(128**0.5 - 11.3), places=12)
    (reading,) = BY_ID["sqrt_flatter_at_128"].beside
    self.assertEqual(reading.criterion.verdict(saturation.sqrt_arithmetic_error()), HOLDS)
    self.assertEqual(reading.criterion.verdict(saturation.sqrt_arithmetic_error({128: 11.0, 64: 8.0})), FAILS)
    with self.assertRaisesRegex(ConfigError, "at least one"):
      saturation.sqrt_arithmetic_error({})


class ProjectionInitTest(absltest.TestCase):

  def test_component_variances_against_numpy(self):
    x, w = _normal(0, (2, 8, 32)), _normal(1, (32, 6), 32**-0.5)
    want = np.var(x.reshape(-1, 32).astype(np.float64) @ w.astype(np.float64), axis=0)
    np.testing.assert_allclose(np.asarray(projection_init.component_variances(jnp.asarray(x), jnp.asarray(w))), want,
                               rtol=1e-5)
    with self.assertRaisesRegex(ConfigError, "fan-in"):
      projection_init.component_variances(jnp.asarray(x), jnp.asarray(w[:5]))

  def test_closed_form_and_both_ways(self):
    # Closed form: tokens of mean 0 and variance 1 over the width d and W entries of variance 1/d give
    # E Var(q_i) = Σ_j x_j² / d = 1. Numpy, independent draws.
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4096, 128))
    x = (x - x.mean(-1, keepdims=True)) / x.std(-1, keepdims=True)
    q = x @ (rng.standard_normal((128, 256)) / math.sqrt(128))
    self.assertAlmostEqual(float(np.mean(np.var(q, axis=0))), 1.0, delta=0.03)
    ctx = claims.Context(**{**TINY, "num_seeds": 1})
    row = BY_ID["gpt_init_unit_variance"].evaluate(ctx)
    self.assertEqual(row["verdict"], HOLDS, row["finding"])
    doubled = lambda rng, width, fan_out: [2 * w for w in inputs.sp_weights(rng, width, fan_out)]  # std 2/√d
    with mock.patch.object(projection_init, "sp_weights", doubled):
      row = BY_ID["gpt_init_unit_variance"].evaluate(claims.Context(**{**TINY, "num_seeds": 1}))
    self.assertEqual(row["verdict"], FAILS, row["finding"])
    self.assertAlmostEqual(row["numbers"]["var_q"][64]["mean"], 4.0, delta=0.4)


class ScaleOrderTest(absltest.TestCase):

  def test_orders_match_jax_in_float32(self):
    q, k, v = (jnp.asarray(_normal(i, (2, 16, 2, 32), 2.0)) for i in range(3))
    # Every order and the reference in one compiled program (op by op, every operation would compile on its own).
    want, got = jax.jit(lambda q, k, v: (jax.nn.dot_product_attention(q, k, v), {
        order: scale_order.ordered_attention(q, k, v, order) for order in scale_order.ORDERS}))(q, k, v)
    for order in scale_order.ORDERS:
      np.testing.assert_allclose(got[order], want, rtol=2e-5, atol=2e-6, err_msg=order)
    with self.assertRaisesRegex(ConfigError, "order"):
      scale_order.ordered_attention(q, k, v, "never")

  def test_float16_overflow_where_numpy_says_q_k_exceeds_its_range(self):
    d = 128
    q, k, v = (_normal(i, (2, 32, 2, d)) for i in range(3))
    q, k = (np.asarray(x) for x in jax.jit(lambda q, k: tuple(inputs.with_outliers(x, 200.0) for x in (q, k)))(q, k))
    z = np.einsum("btnh,bsnh->bnts", q.astype(np.float64), k.astype(np.float64))
    peak = np.transpose(np.max(z, axis=-1), (0, 2, 1))  # [B, T, N]: each row's largest q·k, float64
    lq, lk, lv = (jnp.asarray(x, jnp.float16) for x in (q, k, v))
    # Every order in one compiled program.
    rows = {o: np.asarray(r) for o, r in jax.jit(lambda q, k, v: {
        o: scale_order.ordered_attention(q, k, v, o) for o in scale_order.ORDERS})(lq, lk, lv).items()}
    bad = {o: np.any(~np.isfinite(r.astype(np.float32)), axis=-1) for o, r in rows.items()}
    top = float(np.finfo(np.float16).max)
    for order in (scale_order.IMMEDIATE, scale_order.LATE):  # q·k itself overflows float16, whenever it is divided
      self.assertTrue(np.all(bad[order][peak > 1.1 * top]), order)
      self.assertFalse(np.any(bad[order][peak < 0.9 * top]), order)
    self.assertGreater(np.sum(peak > 1.1 * top), 0)
    scaled_peak = peak / math.sqrt(d)  # q divided first: its product is √d_k smaller
    self.assertFalse(np.any(bad[scale_order.Q_FIRST][scaled_peak < 0.9 * top]))
    self.assertLess(np.sum(bad[scale_order.Q_FIRST]), np.sum(bad[scale_order.IMMEDIATE]))

  def test_row_errors_against_numpy(self):
    out, ref = _normal(0, (1, 4, 1, 3)), _normal(1, (1, 4, 1, 3))
    out[0, 1, 0, 2] = np.nan
    err = np.max(np.abs(out - ref), axis=-1)
    row_errors = jax.jit(scale_order.row_errors)  # a program per shape, not one per operation
    self.assertAlmostEqual(float(row_errors(jnp.asarray(out), jnp.asarray(ref))), float(np.nanmean(err)), places=6)
    self.assertTrue(math.isnan(float(row_errors(np.full((1, 2, 1, 3), np.nan, np.float32), jnp.asarray(ref[:, :2])))))

  def test_statistics_and_verdicts_both_ways(self):
    def sweep(immediate, q_first, late):
      fr = {scale_order.IMMEDIATE: immediate, scale_order.Q_FIRST: q_first, scale_order.LATE: late}
      return {(t, o): {"nonfinite": np.asarray([[0.0, x], [0.0, x]])} for t in ("float16", "bfloat16")
              for o in scale_order.ORDERS for x in (fr[o],)}

    claim = BY_ID["divide_right_after_qk"]
    late_reading, q_reading = (r.criterion for r in claim.beside)
    got = scale_order.order_statistics(sweep(0.0, 0.0, 0.2))
    self.assertEqual((claim.criterion.verdict(got["max_nonfinite_immediate"]),
                      late_reading.verdict(got["late_minus_immediate"]),
                      q_reading.verdict(got["q_first_minus_immediate"])), (HOLDS, HOLDS, HOLDS))
    got = scale_order.order_statistics(sweep(0.1, 0.2, 0.1))
    self.assertEqual(got, {"max_nonfinite_immediate": 0.1, "late_minus_immediate": 0.0,
                           "q_first_minus_immediate": 0.1})
    self.assertEqual((claim.criterion.verdict(got["max_nonfinite_immediate"]),
                      late_reading.verdict(got["late_minus_immediate"]),
                      q_reading.verdict(got["q_first_minus_immediate"])), (FAILS, FAILS, FAILS))
    with self.assertRaisesRegex(ConfigError, "lacks"):
      scale_order.order_statistics({("float16", scale_order.IMMEDIATE): {"nonfinite": np.zeros((1, 1))}})


class FeatureScalingTest(absltest.TestCase):

  def test_gradient_descent_steps_by_jax_grad(self):
    x, y = feature_scaling.logistic_data(np.random.default_rng(0), (1.0, 3.0), 64)
    weights, losses = feature_scaling.gradient_descent(x, y, (0.1, 0.5), 2)
    loss = lambda w: jnp.mean(jnp.logaddexp(0.0, x @ w) - y * (x @ w))
    with jax.enable_x64(True):
      grad, value = jax.jit(jax.grad(loss)), jax.jit(loss)  # one program each, not one per operation
      for i, lr in enumerate((0.1, 0.5)):
        w = jnp.zeros(2, jnp.float64)
        for t in range(2):
          w = w - lr * grad(w)
          np.testing.assert_allclose(weights[t + 1, i], np.asarray(w), rtol=1e-10)
        self.assertAlmostEqual(losses[-1, i], float(value(w)), places=10)
      w_opt, best = feature_scaling.optimum(x, y)
      np.testing.assert_allclose(np.asarray(grad(jnp.asarray(w_opt))), 0.0, atol=1e-10)
    self.assertLessEqual(best, float(np.min(losses)))

  def test_path_measures_written_out(self):
    path = np.array([[0.0, 0.0], [1.0, 2.0], [0.0, 3.0], [1.0, 4.0]])
    np.testing.assert_allclose(feature_scaling.back_and_forth(path), [1 - 1 / 3, 0.0])
    np.testing.assert_allclose(feature_scaling.sign_changes(path, 2), [1.0, 0.0])
    np.testing.assert_allclose(feature_scaling.back_and_forth(np.zeros((3, 1))), [0.0])
    losses = np.array([[1.0, 1.0, 1.0], [0.8, 2.0, 0.5], [0.6, np.inf, 0.7]])
    self.assertEqual(feature_scaling.best_stable(losses), 0)  # run 1 diverged, run 2 ends higher
    self.assertIsNone(feature_scaling.best_stable(np.array([[1.0], [2.0]])))
    self.assertEqual((feature_scaling.steps_to(losses[:, 0], 0.7), feature_scaling.steps_to(losses[:, 0], 0.1)),
                     (2, None))

  def test_both_ways(self):
    ctx = claims.Context(**TINY)
    row = BY_ID["feature_scales_oscillate"].evaluate(ctx)
    self.assertEqual(row["verdict"], HOLDS, row["finding"])
    self.assertIn("not attention", row["finding"])
    with mock.patch.object(feature_scaling, "FEATURE_SCALES", (1.0, 1.0)):  # one scale: nothing to normalize
      row = BY_ID["feature_scales_oscillate"].evaluate(claims.Context(**TINY))
    self.assertEqual(row["verdict"], FAILS, row["finding"])
    with self.assertRaisesRegex(ConfigError, "positive"):
      feature_scaling.logistic_data(np.random.default_rng(0), (1.0, 0.0))
    with mock.patch.object(feature_scaling, "LEARNING_RATES", (2.0**-18, 2.0**-17, 2.0**-16)):  # all too small
      with self.assertRaisesRegex(RuntimeError, "not inside the grid"):
        BY_ID["feature_scales_oscillate"].evaluate(claims.Context(**TINY))


if __name__ == "__main__":
  absltest.main()
