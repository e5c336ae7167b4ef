"""The random-input claims' criteria on synthetic cases whose answer is known both ways (holds and does not hold),
against closed forms, numpy and jax.nn references."""

import math
from unittest import mock

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from scaling.attention import dispatch as attention
from scaling.attention import dense as dense_lib
from scaling.runs import report
from scaling.attention import rope
from scaling.attention import rules as rules_lib
from scaling.studies.claims import study as claims
from scaling.studies.claims.random_input import attention_variants as variants
from scaling.studies.claims.random_input import exp_overflow
from scaling.studies.claims.random_input import head_dim_and_retrieval as head_dim
from scaling.studies.claims.random_input import logit_variance
from scaling.studies.claims.random_input import norms_and_temperature as norms
from scaling.studies.claims.random_input import outlier_overflow as outliers
from scaling.studies.claims import parts
from scaling.studies.claims.random_input import inputs
from scaling.studies.claims.random_input import rope as rope_claims
from scaling.studies.claims.random_input import softmax_saturation as saturation
from scaling.studies.claims import verdicts
from scaling.studies.claims.training import qk_correlation as qk_claims

HOLDS, PARTLY, FAILS = verdicts.HOLDS, verdicts.PARTLY, verdicts.FAILS
BY_ID = {c.id: c for c in claims.RANDOM_INPUT_CLAIMS}
TINY = dict(mode="quick", d_k=(64, 128), num_seeds=2, seq_len=16)


def _verdict(claim_id: str, value: float) -> str:
  """The verdict of ``claim_id``'s criterion for its statistic ``value``."""
  return BY_ID[claim_id].criterion.verdict(value)


def _normal(seed: int, shape: tuple[int, ...], std: float = 1.0) -> np.ndarray:
  return (std * np.random.default_rng(seed).standard_normal(shape)).astype(np.float32)


def _entropy(p: np.ndarray) -> np.ndarray:
  """Row entropies of a distribution [..., S] in numpy (0 log 0 = 0)."""
  return -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=-1)


def _softmax(z: np.ndarray) -> np.ndarray:
  e = np.exp(z - z.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


class PartsTest(absltest.TestCase):

  def test_a_claim_of_parts_holds_only_when_every_part_holds(self):
    claim_parts = (parts.Part("a", verdicts.Criterion("x", "x", holds=("<", 1.0), fails=(">", 2.0))),
                   parts.Part("b", verdicts.Criterion("y", "y", holds=(">", 5.0), fails=("<", 3.0))))
    criterion = parts.parts_criterion("score", "parts", claim_parts, reason="r")
    for values, score, verdict in (({"a": 0.5, "b": 6.0}, 2.0, HOLDS), ({"a": 1.5, "b": 6.0}, 1.5, PARTLY),
                                   ({"a": 3.0, "b": 6.0}, 1.0, PARTLY), ({"a": 1.5, "b": 2.0}, 0.5, PARTLY),
                                   ({"a": 3.0, "b": 2.0}, 0.0, FAILS)):
      got, by_part = parts.score_parts(claim_parts, values)
      self.assertEqual((got, criterion.verdict(got)), (score, verdict), values)
      self.assertEqual(set(by_part), {"a", "b"})
    nan, _ = parts.score_parts(claim_parts, {"a": float("nan"), "b": 6.0})
    self.assertEqual(criterion.verdict(nan), verdicts.NOT_MEASURED)
    self.assertIn("a: x: holds if < 1", criterion.text)
    with self.assertRaisesRegex(KeyError, "b"):
      parts.score_parts(claim_parts, {"a": 0.5})

  def test_headline_quotes_the_claims_thresholds_not_its_parts(self):
    claim = BY_ID["fp16_exp_overflow"]
    row = {"id": claim.id, "claim": claim.text, "verdict": PARTLY, "criterion": claim.criterion.text,
           "statistic": claim.criterion.statistic, "value": 1.0}
    text = report.claims_headline([row], {"config": {"mode": "quick", "text_file": None}})
    self.assertIn("  (`dtypes_overflowing` = 1; holds if > 2.5, does not hold if < 0.5)", text.splitlines())


class PostSoftmaxTest(absltest.TestCase):

  def test_rows_sum_to_one_over_sqrt_d_k_after_the_softmax_and_to_one_inside(self):
    d = 64
    q, k = _normal(0, (2, 16, 2, d)), _normal(1, (2, 16, 2, d))
    # Both rules in one compiled program (op by op, every operation would compile on its own).
    after, inside = (float(x) for x in jax.jit(lambda q, k: tuple(
        saturation.row_sum_deviation(dense_lib.attention_weights(q, k, rule=r)) for r in ("post_softmax", "sqrt")))(
            q, k))
    self.assertAlmostEqual(after, 1 - d**-0.5, places=5)  # every row sums to 1/√d_k
    self.assertLess(inside, 1e-5)
    self.assertEqual((_verdict("post_softmax_breaks", after), _verdict("post_softmax_breaks", inside)),
                     (HOLDS, FAILS))


class OverflowTest(absltest.TestCase):

  def test_overflow_in_every_dtype_or_in_none(self):
    d = 64
    overflow_fractions = jax.jit(exp_overflow.exp_overflow_fractions)  # jitted, as the claim runs it: once for both
    for std, expected, verdict in ((4.0, 3.0, HOLDS), (0.1, 0.0, FAILS)):
      q, k, v = (_normal(i, (1, 16, 1, d), std) for i in range(3))
      z = np.einsum("btnh,bsnh->bnts", q.astype(np.float64), k.astype(np.float64))
      with np.errstate(over="ignore"):  # the reference: float32's exp overflows where float64's exceeds its max
        f32 = np.mean(np.any(~np.isfinite(np.exp(z).astype(np.float32)), axis=-1))
      frac = {n: float(x) for n, x in overflow_fractions(q, k, v).items()}
      self.assertEqual(frac["float32"] > 0, f32 > 0)
      score, _ = parts.score_parts(exp_overflow.OVERFLOW_PARTS, frac)
      self.assertEqual((score, _verdict("fp16_exp_overflow", score)), (expected, verdict), frac)


class WorkingRangeTest(absltest.TestCase):

  def test_bound_of_a_known_curve(self):
    sigmas = (1.0, 2.0, 4.0, 8.0)
    self.assertAlmostEqual(logit_variance.working_range_bound(np.array([0.1, 0.3, 0.7, 0.9]), sigmas), 3 * 2**1.5)
    self.assertTrue(math.isnan(logit_variance.working_range_bound(np.array([0.1, 0.2, 0.3, 0.4]), sigmas)))

  def test_measured_bound_is_where_a_key_takes_half_the_row(self):
    ctx = claims.Context(**TINY)
    bound = float(np.mean(logit_variance._working_range(ctx)["bound"]))
    z = np.random.default_rng(5).standard_normal((4000, ctx.seq_len)) * bound / 3  # numpy, independent draws
    self.assertAlmostEqual(float(np.mean(np.max(_softmax(z), axis=-1))), logit_variance.DOMINANT_MAX_PROB, delta=0.03)

  def test_parts_both_ways(self):
    # Gaussian logits in numpy: the fractions inside [−68, 68] and outside [−5, 5] for stds √512, 1 and 100.
    rng = np.random.default_rng(7)
    for std, verdict, by_part in ((512**0.5, HOLDS, (HOLDS, HOLDS)), (1.0, PARTLY, (HOLDS, FAILS)),
                                  (100.0, PARTLY, (FAILS, HOLDS))):
      z = std * rng.standard_normal(200_000)
      values = {"most in [−68, 68]": float(np.mean(np.abs(z) <= 68)),
                "far beyond [−5, 5]": float(np.mean(np.abs(z) > 5))}
      score, verdicts_by_part = parts.score_parts(logit_variance.D512_PARTS, values)
      self.assertEqual((_verdict("d512_range", score), tuple(verdicts_by_part.values())), (verdict, by_part), std)
    reading = logit_variance.WORKING_RANGE_READING.criterion
    self.assertEqual((reading.verdict(abs(math.log2(6.0 / 5))), reading.verdict(abs(math.log2(20.0 / 5)))),
                     (HOLDS, FAILS))

  def test_measured_fractions_match_the_gaussian(self):
    ctx = claims.Context(**{**TINY, "d_k": (64, 128, 512)})
    row = BY_ID["d512_range"].evaluate(ctx)
    n = row["numbers"]
    self.assertAlmostEqual(n["frac_outside_5"], math.erfc(5 / (512**0.5 * 2**0.5)), delta=0.03)  # P(|z| > 5), σ = √512
    self.assertAlmostEqual(n["frac_within_68"], math.erf(68 / (512**0.5 * 2**0.5)), delta=0.01)
    self.assertAlmostEqual(n["three_sigma_half_width"], 3 * 512**0.5, delta=0.1 * 3 * 512**0.5)
    self.assertEqual(row["verdict"], HOLDS, row["finding"])
    self.assertEqual([b["statistic"] for b in row["beside"]], ["abs_log2_bound_over_5"])


class FlatterAt128Test(absltest.TestCase):

  def _row(self, std_128: float, entropy_128: list[float]) -> dict:
    """The claim's row on a d_k sweep of two seeds with these logit stds and entropies at d_k = 128."""
    sweep = {}
    for rule in claims.SWEEP_RULES:
      for d in (64, 128):
        sweep[(rule, d)] = {"entropy_normalized": np.array([0.90, 0.9002] if d == 64 else entropy_128),
                            "max_prob": np.array([0.07, 0.07]),
                            "logit_std": np.array([8.0, 8.0] if d == 64 else [std_128, std_128])}
    ctx = claims.Context(d_k=(64, 128), num_seeds=2)
    with mock.patch.object(ctx, "sweep", return_value=sweep):
      return BY_ID["sqrt_flatter_at_128"].evaluate(ctx)

  def test_both_ways(self):
    # Logits growing faster than √d_k lower the temperature relative to them; here entropy also rises (by fiat).
    row = self._row(std_128=1.2 * 128**0.5, entropy_128=[0.95, 0.9502])
    self.assertEqual((row["verdict"], row["numbers"]["effective_temperature_ratio"]), (HOLDS, round(1 / 1.2, 4)))
    row = self._row(std_128=128**0.5, entropy_128=[0.90, 0.9002])  # the iid case: nothing changes
    self.assertEqual(row["verdict"], FAILS)
    self.assertEqual(row["numbers"]["part_verdicts"], {"the temperature falls": FAILS, "more uniform": FAILS})


class Fp32OrClampTest(absltest.TestCase):

  def _sweep(self, fp32: float, fp32_alone: float, clamp: float) -> dict:
    """A synthetic outlier sweep (2 seeds × 3 factors) with failures only in float32 with (``fp32``) and without
    (``fp32_alone``) max-subtraction and in the clamp."""
    names = [outliers._sweep_name(t, how, sub)
             for t in variants.LOW_PRECISION for how in outliers.SWEEP_HOWS for sub in (False, True)]
    names += [outliers._sweep_name("float32", "float32", sub) for sub in (False, True)]
    sweep = {n: np.zeros((2, 3)) for n in names}
    sweep[outliers._sweep_name("float32", "float32", True)][:, -1] = fp32
    sweep[outliers._sweep_name("float32", "float32", False)][:, -1] = fp32_alone
    sweep[outliers._sweep_name("float16", "clamp", False)][:, -1] = clamp
    return sweep

  def test_verdict_reads_fp32_with_max_subtraction(self):
    criterion = outliers.SOLVES_CRITERION
    verdict = lambda sweep: {k: criterion.verdict(r["parts_solved"])
                             for k, r in outliers.fp32_or_clamp_parts(sweep).items()}
    with_max, without = outliers.WITH_MAX, outliers.WITHOUT_MAX
    self.assertEqual(verdict(self._sweep(0.0, 0.0, 0.0)), {with_max: HOLDS, without: HOLDS})
    self.assertEqual(verdict(self._sweep(0.0, 0.2, 0.0)), {with_max: HOLDS, without: PARTLY})  # needs max-subtraction
    self.assertEqual(verdict(self._sweep(0.0, 0.2, 0.2)), {with_max: PARTLY, without: FAILS})
    self.assertEqual(verdict(self._sweep(0.2, 0.2, 0.2)), {with_max: FAILS, without: FAILS})
    with self.assertRaisesRegex(ValueError, "float32"):
      outliers.fp32_or_clamp_parts({outliers._sweep_name("float16", "clamp", False): np.zeros((2, 3))})

  def test_float32_outliers_overflow_only_without_max_subtraction(self):
    d = 128
    q, k, v = (_normal(i, (1, 16, 1, d)) for i in range(3))

    @jax.jit  # one program for the outliers, both attentions, the reference and the counts
    def run(q, k, v):
      q, k = (inputs.with_outliers(x, 300.0) for x in (q, k))
      subtracted, plain = (attention.dot_product_attention(q, k, v, rule="sqrt", subtract_max=s, implementation="xla")
                           for s in (True, False))
      return q, k, subtracted, jax.nn.dot_product_attention(q, k, v), variants.nonfinite_rows(subtracted), \
          variants.nonfinite_rows(plain)

    q, k, subtracted, want, subtracted_rows, plain_rows = run(q, k, v)
    np.testing.assert_allclose(subtracted, want, rtol=1e-4, atol=1e-5)
    z = np.einsum("btnh,bsnh->bnts", np.asarray(q, np.float64), np.asarray(k, np.float64)) / d**0.5
    self.assertGreater(z.max(), 89)  # float32's exp overflows past 88.7: the reference says some row must break
    self.assertEqual((float(subtracted_rows) > 0, float(plain_rows) > 0), (False, True))


class NanGradientTest(absltest.TestCase):

  def _inputs(self, signs: tuple[float, float, float, float]):
    """q, k, v [1, 8, 1, 128] whose first and last tokens of q and k are ±u (u all ones), before the outliers."""
    q, k, v = (_normal(i, (1, 8, 1, 128)) for i in range(3))
    for x, (first, last) in ((q, signs[:2]), (k, signs[2:])):
      x[0, 0, 0], x[0, -1, 0] = first, last
    return jnp.asarray(q), jnp.asarray(k), jnp.asarray(v)

  def test_nan_output_follows_a_positive_overflow(self):
    f16_max = float(np.finfo(np.float16).max)
    run = jax.jit(outliers.nan_then_gradient, static_argnums=3)
    outlied = jax.jit(inputs.with_outliers)  # the reference's inputs: one program, not op by op
    # (signs of q_0, q_last, k_0, k_last): the outlier logits ±300²·128/√128 are far beyond float16's max; a row with
    # a +inf logit has a NaN softmax (inf − inf), a row with −inf only does not.
    for signs, share in (((1, 1, 1, 1), 1.0), ((1, -1, 1, 1), 0.5), ((1, 1, -1, -1), 0.0)):
      q, k, v = self._inputs(signs)
      got = {n: float(x) for n, x in run(q, k, v, 300.0).items()}
      z = np.einsum("btnh,bsnh->bnts", *(np.asarray(outlied(x, 300.0), np.float64) for x in (q, k)))
      over = np.any(np.abs(z) > f16_max, axis=-1)  # numpy: the rows whose logits leave float16's range
      positive = np.any(z > f16_max, axis=-1)
      self.assertAlmostEqual(got["overflowed_rows"], float(np.mean(over)), msg=signs)
      self.assertAlmostEqual(got["nan_rows_of_overflowed"], float(np.sum(over & positive) / np.sum(over)), msg=signs)
      self.assertAlmostEqual(got["nan_rows_of_overflowed"], share, msg=signs)
      self.assertEqual(got["inf"], 0.0, signs)  # the gradient turns NaN: nothing explodes
      self.assertEqual(got["exploded_share"], 0.0, signs)
      values = {"softmax outputs NaN": got["nan_rows_of_overflowed"], "gradients explode": got["exploded_share"]}
      self.assertEqual(_verdict("nan_gradient_explosion", parts.score_parts(outliers.NAN_PARTS, values)[0]),
                       {1.0: PARTLY, 0.5: PARTLY, 0.0: FAILS}[share], signs)
    plain = run(*self._inputs((1, 1, 1, 1)), 1.0)  # no outliers: nothing overflows, the share is not measured
    self.assertTrue(math.isnan(float(plain["nan_rows_of_overflowed"])))

  def test_parts_both_ways(self):
    for values, verdict in (((1.0, 0.9), HOLDS), ((1.0, 0.0), PARTLY), ((0.0, 0.0), FAILS)):
      score, _ = parts.score_parts(outliers.NAN_PARTS, dict(zip(("softmax outputs NaN", "gradients explode"), values)))
      self.assertEqual(_verdict("nan_gradient_explosion", score), verdict, values)


class OnlineSoftmaxTest(absltest.TestCase):

  def test_online_softmax_matches_jax_in_float32(self):
    q, k, v = (_normal(i, (2, 16, 2, 8), 2.0) for i in range(3))
    got, want = jax.jit(lambda q, k, v: (variants.online_softmax_attention(q, k, v, scale=8**-0.5, block=4),
                                         jax.nn.dot_product_attention(q, k, v)))(q, k, v)  # one program
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    with self.assertRaisesRegex(ValueError, "block"):
      variants.online_softmax_attention(q, k, v, scale=1.0, block=5)

  def test_same_accumulation_dtype_no_mitigation_across_dtypes_mitigation(self):
    d = 128
    q, k, v = (_normal(i, (4, 32, 2, d)) for i in range(3))

    # One program, as the claim's sweep runs them (eagerly, every op would compile on its own): the float16 inputs
    # with their outliers, then each attention's non-finite rows.
    @jax.jit
    def run(q, k, v):
      q, k = (inputs.with_outliers(x, 300.0).astype(jnp.float16) for x in (q, k))
      v = v.astype(jnp.float16)
      outs = (attention.dot_product_attention(q, k, v, rule="sqrt", float32_softmax=False),
              variants.online_softmax_attention(q, k, v, scale=d**-0.5, block=8),
              attention.dot_product_attention(q, k, v, rule="sqrt", implementation="blockwise"))
      return tuple(variants.nonfinite_rows(out) for out in outs)

    dense16, online16, online32 = (float(x) for x in run(q, k, v))
    self.assertGreater(dense16, 0)  # q·k of the two outlier tokens overflows float16
    self.assertEqual((_verdict("online_softmax_mitigates", online16 / dense16),
                      _verdict("online_softmax_mitigates", online32 / dense16)), (FAILS, HOLDS))

  def test_ratio_over_a_synthetic_sweep(self):
    sweep = {outliers._sweep_name(t, how, True): np.zeros((2, 3))
             for t in variants.LOW_PRECISION for how in outliers.SWEEP_HOWS}
    self.assertTrue(math.isnan(outliers.online_over_dense(sweep)["max_ratio"]))  # nothing to mitigate: not measured
    sweep[outliers._sweep_name("float16", "input", True)][:, -1] = 0.1
    self.assertEqual(outliers.online_over_dense(sweep)["max_ratio"], 0.0)
    sweep[outliers._sweep_name("float16", "online_low", True)][:, -1] = 0.1
    self.assertEqual(outliers.online_over_dense(sweep)["max_ratio"], 1.0)


class HeadDimConstantTest(absltest.TestCase):

  def test_a_verdict_per_arm(self):
    ctx = claims.Context(**TINY)
    criterion = BY_ID["head_dim_constant"].criterion
    for rho, verdict, by_arm in ((0.0, FAILS, (FAILS, FAILS)), (0.5, PARTLY, (FAILS, HOLDS))):
      m = head_dim.head_dim_measurement(ctx, rho, "given")
      self.assertEqual((criterion.verdict(m.numbers["parts_holding"]), tuple(m.numbers["part_verdicts"].values())),
                       (verdict, by_arm), m.finding)
      self.assertIn(f"ρ = {rho:.3g} (given)", m.finding)
    # With aligned q, k one head of d_k = width sees its own key at ρ√d_k: the row max grows with the width.
    grown = m.numbers["values"]["grown aligned row max"]
    self.assertGreater(grown[1024]["mean"], 0.5 * 1024**0.5 * 0.8)
    with self.assertRaisesRegex(ValueError, "rho"):
      head_dim.head_dim_measurement(ctx, 1.0, "given")

  def test_rho_comes_from_the_trained_q_k_grids(self):
    claim = BY_ID["head_dim_constant"]
    ctx = claims.Context(**TINY)
    grids = claim.grids(ctx)
    self.assertTrue(claim.training)
    self.assertEqual({rule for _, rule in grids}, {"sqrt"})
    self.assertEqual(grids, {key: spec for key, spec in qk_claims.qk_grids(ctx).items() if key[1] == "sqrt"})
    with self.assertRaisesRegex(ValueError, "rule"):
      qk_claims.qk_rule_grids(ctx, "nope")
    measured = {32: {"init": np.array([0.05, 0.06]), "final": np.array([0.3, 0.5])},
                64: {"init": np.array([0.04, 0.05]), "final": np.array([0.2, np.nan])}}
    with mock.patch.object(head_dim, "trained_qk_alignment", return_value=measured):
      row = claim.evaluate(ctx)
    self.assertAlmostEqual(row["numbers"]["qk_alignment"], np.mean([0.3, 0.5, 0.2]), places=3)  # the finite runs' mean
    self.assertIn("3 of 4 runs finite", row["finding"])


class LowerTemperatureTest(absltest.TestCase):

  def test_random_rows_focus_constant_rows_do_not(self):
    z = _normal(3, (4, 32, 64), 8.0)
    temps = tuple(f * 8.0 for f in norms.FOCUS_TEMPERATURES)
    falls = jax.jit(norms.entropy_falls_fraction, static_argnums=1)  # one program for both rows' shapes
    frac = float(falls(jnp.asarray(z), temps))
    ent = np.stack([_entropy(_softmax(z.astype(np.float64) / t)) for t in temps])
    self.assertAlmostEqual(frac, float(np.mean(np.all(np.diff(ent, axis=0) < 0, axis=0))))
    flat = float(falls(jnp.zeros((4, 32, 64)), temps))
    self.assertEqual((_verdict("lower_temperature_focuses", frac), _verdict("lower_temperature_focuses", flat)),
                     (HOLDS, FAILS))


class RmsNormFlowTest(absltest.TestCase):

  def test_gradient_norms_match_a_plain_loop(self):
    rng = np.random.default_rng(0)
    params = norms._stack_params(rng, 3)
    x = rng.standard_normal((2, 8, norms.STACK_WIDTH)).astype(np.float32)
    g = rng.standard_normal(x.shape).astype(np.float32)
    got = np.asarray(jax.jit(norms.residual_gradient_norms, static_argnums=3)(x, params, g, True))

    def out(x0):
      h = x0
      for i in range(3):
        p = {n: w[i] for n, w in params.items()}
        b, t, w_ = h.shape
        q, k, v = ((rules_lib.rms_norm(h) @ p[n]).reshape(b, t, -1, norms.STACK_HEAD_DIM) for n in ("wq", "wk", "wv"))
        h = h + jax.nn.dot_product_attention(q, k, v).reshape(b, t, w_) @ p["wo"]
        h = h + jax.nn.gelu(rules_lib.rms_norm(h) @ p["w1"]) @ p["w2"]
      return jnp.sum(h * g)

    self.assertLen(got, 4)
    want = jax.jit(lambda x: jnp.linalg.norm(jax.grad(out)(x)))(jnp.asarray(x))  # one program, not op by op
    self.assertAlmostEqual(got[0], float(want), delta=1e-3 * got[0])
    self.assertAlmostEqual(got[-1], float(np.linalg.norm(g)), places=3)

  def test_both_ways(self):
    # One seed: the stack's drift (over 5 decades removed, against a threshold of 1) is far from either threshold.
    ctx = claims.Context(**{**TINY, "num_seeds": 1})
    row = BY_ID["rmsnorm_stabilizes_gradients"].evaluate(ctx)
    self.assertEqual(row["verdict"], HOLDS, row["finding"])
    # No branch: the gradient passes every block unchanged, with or without, whatever the stack's size (a shorter
    # stack on fewer tokens computes it faster).
    with mock.patch.object(norms, "STACK_DEPTH", 3), mock.patch.object(norms, "STACK_TOKENS", 4):
      flat = norms._rmsnorm_flow(ctx, gain=0.0)
    self.assertEqual(flat["none"].shape, (1, 4))
    removed = float(np.mean(norms.decades(flat["none"]) - norms.decades(flat["rms"])))
    self.assertAlmostEqual(removed, 0.0, places=5)
    self.assertEqual(_verdict("rmsnorm_stabilizes_gradients", removed), FAILS)


class RopeCompatibleTest(absltest.TestCase):

  def test_rope_holds_a_position_dependent_scale_does_not(self):
    q, k = _normal(0, (2, 32, 2, 64)), _normal(1, (2, 32, 2, 64))
    names = [p.name for p in rope_claims.ROPE_PARTS]

    def verdict(rotate):
      # One compiled program per rotation, as the claim runs it (op by op, every operation would compile on its own).
      stats = jax.jit(lambda q, k: rope_claims.rope_offset_stats(q, k, rotate, rope_claims.ROPE_SHIFT,
                                                                 rope_claims.ROPE_OFFSET_BINS))
      s = stats(jnp.asarray(q), jnp.asarray(k))
      values = dict(zip(names, (float(s["relative_error"]), float(np.max(np.abs(np.asarray(s["offset_var"]) - 1))))))
      return _verdict("rope_compatible_with_sqrt", parts.score_parts(rope_claims.ROPE_PARTS, values)[0]), s

    held, s = verdict(rope.apply_rope)
    rotated = jax.jit(lambda q, k: (rope.apply_rope(q), rope.apply_rope(k)))(q, k)
    z = np.einsum("btnh,bsnh->bnts", *(np.asarray(x) for x in rotated)) / 8
    self.assertAlmostEqual(float(np.mean(s["offset_var"])), float(np.var(z)), delta=0.1)  # bins pool to the whole
    grown = lambda x, pos: x * (1.0 + jnp.asarray(pos, jnp.float32) / 32)[None, :, None, None]
    self.assertEqual((held, verdict(grown)[0]), (HOLDS, FAILS))


class RetrievalTest(absltest.TestCase):

  def test_top_mass_against_numpy_and_both_ways(self):
    q, k = _normal(0, (1, 4, 1, 128)), _normal(1, (1, 512, 1, 128))
    z = np.einsum("btnh,bsnh->bnts", q.astype(np.float64), k.astype(np.float64))
    # Both rules on q and on 0 · q in one compiled program (op by op, every operation would compile on its own).
    mass = jax.jit(lambda q, k: {(rule, c): head_dim.top_mass(c * q, k, rule, 5)
                                 for rule in ("none", "sqrt") for c in (1.0, 0.0)})(q, k)
    mass = {key: float(x) for key, x in mass.items()}
    for rule, factor in (("none", 1.0), ("sqrt", 128**-0.5)):
      want = np.mean(np.sum(np.sort(_softmax(factor * z), axis=-1)[..., -5:], axis=-1))
      self.assertAlmostEqual(mass[(rule, 1.0)], want, places=4)
    moved = mass[("none", 1.0)] - mass[("sqrt", 1.0)]
    still = mass[("none", 0.0)] - mass[("sqrt", 0.0)]  # uniform either way
    self.assertEqual((_verdict("retrieval_not_dominated", moved), _verdict("retrieval_not_dominated", still)),
                     (HOLDS, FAILS))

  def test_a_constant_scale_keeps_the_top_keys(self):
    q, k = _normal(0, (1, 6, 1, 64)), _normal(1, (1, 256, 1, 64))
    z = np.einsum("btnh,bsnh->bnts", q.astype(np.float64), k.astype(np.float64))
    top = lambda x: np.sort(np.argsort(-x, axis=-1)[..., :5], axis=-1)  # numpy's top 5 keys per query
    rules = ("sqrt", rules_lib.FixedScale(-1.0, 1.0))  # 1/√d_k, and a reversed ranking
    # Both rules in one compiled program (op by op, every operation would compile on its own).
    changed = [float(x) for x in jax.jit(lambda q, k: [head_dim.top_keys_changed(q, k, r, 5) for r in rules])(q, k)]
    for rule, got in zip(rules, changed):
      factor = 64**-0.5 if rule == "sqrt" else -1.0
      want = float(np.mean(np.any(top(z) != top(factor * z), axis=-1)))
      self.assertEqual(got, want)
    reading = BY_ID["retrieval_not_dominated"].beside[0].criterion
    self.assertEqual(tuple(reading.verdict(x) for x in changed), (FAILS, HOLDS))
    with self.assertRaisesRegex(ValueError, "top"):
      head_dim.top_keys_changed(q, k, "sqrt", 0)


if __name__ == "__main__":
  absltest.main()
