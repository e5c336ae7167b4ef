"""The claims: every criterion can reach both verdicts, verdicts follow the measured statistic, the study writes its
files, and a tiny run measures every random-input claim."""

import dataclasses
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
from unittest import mock

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import claims as claims_experiment
from scaling.studies import device_time
from scaling.runs import results
from scaling.attention import rules
from scaling.studies.claims import table as claim_table
from scaling.studies.claims import study as claims
from scaling.studies.claims.random_input import attention_variants
from scaling.studies.claims.training import depth as depth_claims
from scaling.studies.claims.random_input import exp_overflow as exp_overflow_claims
from scaling.studies.claims.random_input import feature_scaling as feature_scaling_claims
from scaling.studies.claims.random_input import projection_init as projection_init_claims
from scaling.studies.claims.random_input import scale_order as scale_order_claims
from scaling.studies.claims.random_input import head_dim_and_retrieval as head_dim_and_retrieval_claims
from scaling.studies.claims.training import hard_selection as hard_selection_claims
from scaling.studies.claims.random_input import logit_variance as logit_variance_claims
from scaling.studies.claims.training import mup_transfer as mup_transfer_claims
from scaling.studies.claims.training import nan_and_gradient as nan_and_gradient_claims
from scaling.studies.claims.training import norms as norm_claims
from scaling.studies.claims.random_input import norms_and_temperature as norms_and_temperature_claims
from scaling.studies.claims.random_input import outlier_overflow as outlier_overflow_claims
from scaling.studies.claims.training import qk_correlation as qk_correlation_claims
from scaling.studies.claims.random_input import rope as rope_claims
from scaling.studies.claims.training import scale_rules as scale_rule_claims
from scaling.studies.claims.random_input import softmax_saturation as softmax_saturation_claims
from scaling.studies.claims.training import families as training_claims
from scaling.studies.claims.training import sizes as training_sizes
from scaling.studies.claims import verdicts
import experiment_main

RANDOM_IDS = [c.id for c in claims.RANDOM_INPUT_CLAIMS]
UNTRAINED_RANDOM_IDS = [c.id for c in claims.RANDOM_INPUT_CLAIMS if not c.training]
MEASURED = [c for c in claims.all_claims() if c.kind in (verdicts.MEASURED, verdicts.SUPPORTING)]
TINY = dict(mode="quick", d_k=[64, 128], num_seeds=2, seq_len=16)
TINY_COMMAND = "--d_k=64,128 --seq_len=16"  # num_seeds 2 is the quick mode's

# For each random-input claim, statistics that must give (holds, partly, does not hold); None where partly cannot
# happen. They spell out which side of each threshold supports the claim as written.
DECISIONS = {
    "variance_is_dk": (0.01, 0.1, 0.5),  # |Var/d_k − 1|
    "sqrt_normalizes": (0.01, 0.1, 0.5),  # |Var − 1| on unit-variance inputs
    "sqrt_adjusted_factor": (0.01, 0.1, 15.0),  # |Var − 1| with 1/(s²√d_k)
    "d64_std_8": (0.001, 0.1, 0.5),  # |std/8 − 1|
    "d64_magnitudes": (0.3, 0.05, 0.001),  # fraction of rows whose largest |z| reaches 24
    "d512_std": (0.002, 0.1, 0.3),  # |std/22.6 − 1|
    "d512_range": (2.0, 1.0, 0.0),  # parts that hold: most in [−68, 68], far beyond [−5, 5]
    "scaled_back_to_3": (0.997, 0.95, 0.5),  # fraction inside [−3, 3]
    "gpt_init_unit_variance": (0.01, 0.1, 0.5),  # largest |Var − 1| of q, k components over widths
    "unscaled_one_hot": (0.87, 0.3, 0.05),  # share of the distance to one-hot closed from the smallest to largest d_k
    "softmax_derivative_vanishes": (2.0, 1.0, 0.0),  # parts that hold: the identity, its vanishing as p_i → 1
    "gradients_vanish": (2.0, 1.0, 0.0),  # parts that hold: note 1 at d_k 64, note 2 at d_k 512
    "linear_uniform": (0.05, 0.3, 0.9),  # KL from uniform relative to 1/√d_k's
    "quadratic_uniform": (1e-4, 0.3, 0.9),
    "post_softmax_breaks": (0.75, 0.005, 1e-7),  # mean |row sum − 1|
    "sqrt_flatter_at_128": (2.0, 1.5, 0.0),  # parts that hold: the temperature falls, more uniform
    "temperature_needed_at_128": (1.0, 0.1, 0.0),  # |log2 τ| needed
    "fp16_exp_overflow": (3.0, 1.0, 0.0),  # dtypes (of float16, bfloat16, float32) that overflow
    "low_precision_nan_even_scaled": (5.0, 50.0, 600.0),  # smallest outlier factor with non-finite rows
    "nan_gradient_explosion": (2.0, 1.0, 0.0),  # parts that hold: softmax outputs NaN, gradients explode
    "divide_right_after_qk": (0.0, 0.0005, 0.2),  # non-finite rows dividing right after QKᵀ
    "clamp_before_scale": (0.0, 0.0005, 0.2),  # non-finite rows with the clamp
    "online_softmax_mitigates": (0.0, 0.5, 1.0),  # online / dense non-finite rows
    "fp32_or_clamp_solves": (2.0, 1.0, 0.0),  # remedies that solve it: FP32 (max-subtracted), the clamp
    "rope_changes_norms": (0.1, 0.005, 2e-7),  # relative norm change
    "rope_keeps_variance": (0.01, 0.1, 0.5),  # |Var with / without − 1|
    "rope_compatible_with_sqrt": (2.0, 0.5, 0.0),  # parts that hold: offset only, 1/√d_k at every offset
    "qk_norm_robust": (0.01, 0.3, 3.0),  # |Var − 1| under QK-norm
    "scale_is_temperature": (1e-7, 1e-4, 0.1),  # weights vs numpy
    "lower_temperature_focuses": (1.0, 0.7, 0.2),  # rows whose entropy falls at every halving of T
    "layernorm_not_enough": (1.0, 0.5, 0.0),  # exponent of Var ∝ d_k^a
    "rmsnorm_cheaper": (0.7, 0.97, 1.1),  # RMSNorm time / LayerNorm time
    "rmsnorm_stabilizes_gradients": (5.9, 0.5, 0.0),  # decades of gradient spread RMSNorm removes
    "head_dim_constant": (2.0, 1.0, 0.0),  # arms that hold: q, k independent, at the trained q-k alignment
    "retrieval_not_dominated": (0.91, 0.3, 0.0),  # attention mass scaling moves off the top keys
    "feature_scales_oscillate": (0.7, 0.2, 0.0),  # back-and-forth share, raw less standardized features
}


def _measuring(claim: verdicts.Claim, value: float, **numbers) -> verdicts.Claim:
  """``claim`` with a measurement that reports ``value`` as its statistic (and no standard error, where its
  criterion reads one); the statistics of its other readings (``Claim.beside``) are NaN, not measured."""
  spread = {f"{claim.criterion.statistic}_se": None} if claim.criterion.noise else {}
  others = {r.criterion.statistic: float("nan") for r in claim.beside}
  measure = lambda ctx: verdicts.Measurement({**others, claim.criterion.statistic: value, **spread, **numbers},
                                             f"measured {value}")
  return dataclasses.replace(claim, measure=measure)


class CriteriaTest(absltest.TestCase):

  def test_every_criterion_reaches_holds_and_fails(self):
    for claim in MEASURED:
      reached = {claim.criterion.verdict(p) for p in claim.criterion.probes()}
      self.assertContainsSubset({claims.HOLDS, claims.FAILS}, reached, f"{claim.id}: {claim.criterion.text}")

  def test_every_random_input_claim_has_decisions(self):
    self.assertCountEqual(DECISIONS, RANDOM_IDS)
    # The one random-input row that reads a trained model: its q-k alignment.
    self.assertEqual([c.id for c in claims.RANDOM_INPUT_CLAIMS if c.training], ["head_dim_constant"])
    ids = [c.id for c in claims.all_claims()]
    self.assertEqual(ids[:len(RANDOM_IDS)], RANDOM_IDS)
    self.assertLen(set(ids), len(ids))

  def test_claim_decides_from_its_statistic(self):
    ctx = claims.Context()
    for claim in claims.RANDOM_INPUT_CLAIMS:
      for value, verdict in zip(DECISIONS[claim.id], (claims.HOLDS, claims.PARTLY, claims.FAILS)):
        if value is None:
          continue
        row = _measuring(claim, value).evaluate(ctx)
        self.assertEqual(row["verdict"], verdict, f"{claim.id} at {value}")
        self.assertEqual((row["statistic"], row["value"]), (claim.criterion.statistic, value))

  def test_verdict_changes_when_the_statistic_crosses_a_threshold(self):
    ctx = claims.Context()
    for claim in claims.RANDOM_INPUT_CLAIMS:
      for _, threshold in (claim.criterion.holds, claim.criterion.fails):
        step = max(abs(threshold), 1e-6) * 1e-3
        below, above = (_measuring(claim, threshold + s).evaluate(ctx)["verdict"] for s in (-step, step))
        self.assertNotEqual(below, above, f"{claim.id} around {threshold}")

  def test_run_claims_uses_the_criterion_not_the_measurement(self):
    patched = tuple(_measuring(c, DECISIONS[c.id][2] if c.id == "gradients_vanish" else DECISIONS[c.id][0])
                    for c in claims.RANDOM_INPUT_CLAIMS)
    with mock.patch.object(claim_table, "RANDOM_INPUT_CLAIMS", patched):
      rows = claims.run_claims(claims.Context(mode="cpu_hour"), ("gradients_vanish", "rope_changes_norms"))
    self.assertEqual([(r["id"], r["verdict"]) for r in rows],
                     [("gradients_vanish", claims.FAILS), ("rope_changes_norms", claims.HOLDS)])
    self.assertEqual(rows[0]["command"], "python -m experiments.claims --mode=cpu_hour --ids=gradients_vanish")
    rope = next(c for c in claims.RANDOM_INPUT_CLAIMS if c.id == "rope_changes_norms")
    self.assertEqual(rows[1]["criterion"], rope.criterion.text)

  def test_timed_claims_are_measured_last_with_nothing_compiling_ahead(self):
    ctx = claims.Context()
    seen = []

    def recording(claim):
      def measure(c):
        seen.append((claim.id, c.planner._executor is None))  # pylint: disable=protected-access
        return verdicts.Measurement({claim.criterion.statistic: DECISIONS[claim.id][0],
                                     **({f"{claim.criterion.statistic}_se": None} if claim.criterion.noise else {})},
                                    "x")
      return dataclasses.replace(claim, measure=measure)

    patched = tuple(recording(c) for c in claims.RANDOM_INPUT_CLAIMS)
    ids = ("d64_std_8", "rmsnorm_cheaper", "head_dim_constant")
    ctx.planner.compile_ahead([])  # an executor, as a run that compiles ahead has one
    with mock.patch.object(claim_table, "RANDOM_INPUT_CLAIMS", patched):
      rows = claims.run_claims(ctx, ids)
    self.assertEqual(seen, [("d64_std_8", False), ("head_dim_constant", False), ("rmsnorm_cheaper", True)])
    self.assertEqual([r["id"] for r in rows], list(ids))  # table order
    self.assertEqual([c.id for c in claims.all_claims() if c.timed], ["rmsnorm_cheaper"])

  def test_timing_within_two_standard_errors_of_a_threshold_is_inconclusive(self):
    (claim,) = [c for c in claims.RANDOM_INPUT_CLAIMS if c.id == "rmsnorm_cheaper"]
    row = _measuring(claim, 0.9, rms_over_layer_time_se=0.05).evaluate(claims.Context())  # 0.95 within 0.1
    self.assertEqual(row["verdict"], verdicts.INCONCLUSIVE)
    self.assertIn("standard error over timing rounds", row["finding"])
    self.assertIn("over timing rounds", row["criterion"])
    row = _measuring(claim, 0.8, rms_over_layer_time_se=0.05).evaluate(claims.Context())
    self.assertEqual(row["verdict"], claims.HOLDS)

  def test_missing_statistic_is_an_error(self):
    claim = dataclasses.replace(claims.RANDOM_INPUT_CLAIMS[0],
                                measure=lambda ctx: verdicts.Measurement({"other": 1.0}, "x"))
    with self.assertRaisesRegex(KeyError, "lacks its statistic"):
      claim.evaluate(claims.Context())

  def test_unknown_id(self):
    with self.assertRaisesRegex(ValueError, "unknown claim"):
      claims.run_claims(claims.Context(), ("nope",))


# The claim ids of the notes, written out: the random-input claims, then the training claims, in table order.
EXPECTED_IDS = (
    "variance_is_dk", "sqrt_normalizes", "sqrt_adjusted_factor", "gpt_init_unit_variance", "d64_std_8",
    "d64_magnitudes", "d512_std", "d512_range", "scaled_back_to_3", "unscaled_one_hot", "softmax_derivative_vanishes",
    "gradients_vanish", "linear_uniform", "quadratic_uniform", "post_softmax_breaks", "sqrt_flatter_at_128",
    "temperature_needed_at_128", "fp16_exp_overflow", "low_precision_nan_even_scaled", "nan_gradient_explosion",
    "divide_right_after_qk", "clamp_before_scale", "online_softmax_mitigates", "fp32_or_clamp_solves",
    "rope_changes_norms", "rope_keeps_variance", "rope_compatible_with_sqrt", "qk_norm_robust", "scale_is_temperature",
    "lower_temperature_focuses", "layernorm_not_enough", "rmsnorm_cheaper", "rmsnorm_stabilizes_gradients",
    "head_dim_constant", "retrieval_not_dominated", "feature_scales_oscillate",
    "train_nan_within_100_steps", "train_grad_norm_below_1e-6", "train_attention_hard_selection",
    "train_depth6_converges_worse", "train_depth6_oscillates", "train_depth6_slow", "train_depth6_tiny_lr_clipping",
    "train_post_softmax_worse", "train_depth12_cannot_converge", "train_linear_less_expressive", "train_sqrt_optimal",
    "train_norms_dont_replace_scaling", "train_scaled_grads_stable", "train_qk_correlate", "train_mup_lr_transfer",
    "train_rmsnorm_on_par", "layernorm_covariate_shift", "vanishing_is_fundamental",
    "extreme_tokens_are_separators_and_ends",
    "cite_vaswani_motivation", "cite_gpt3_rmsnorm", "cite_t5_fixed_sqrt", "cite_vit_reference",
    "cite_xiong_ln_scaling", "cite_flashattention_overflow", "cite_roformer_rope_scaling", "cite_head_dim_64_or_128",
)
TRAINING_IDS = {i for i in EXPECTED_IDS if i.startswith("train_")}
CITATION_IDS = {i for i in EXPECTED_IDS if i.startswith("cite_")}
UNMEASURABLE_IDS = {"layernorm_covariate_shift", "vanishing_is_fundamental", "extreme_tokens_are_separators_and_ends"}
SUPPORTING_IDS = {"rope_compatible_with_sqrt", "train_qk_correlate"}


class ClaimListTest(absltest.TestCase):

  def test_table_holds_every_claim_once_in_order(self):
    ids = tuple(c.id for c in claims.all_claims())
    self.assertEqual(ids, EXPECTED_IDS)
    # head_dim_constant, a random-input row, reads the q-k alignment of trained models.
    self.assertEqual({c.id for c in claims.all_claims() if c.training}, TRAINING_IDS | {"head_dim_constant"})
    self.assertEqual({c.id for c in claims.all_claims() if c.kind == verdicts.CITATION}, CITATION_IDS)
    self.assertEqual({c.id for c in claims.all_claims() if c.kind == verdicts.NOT_MEASURABLE}, UNMEASURABLE_IDS)
    self.assertEqual({c.id for c in claims.all_claims() if c.kind == verdicts.SUPPORTING}, SUPPORTING_IDS)
    ids = set(EXPECTED_IDS)
    for claim in claims.all_claims():
      self.assertContainsSubset(set(claim.supports) if claim.kind == verdicts.SUPPORTING else set(), ids, claim.id)

  def test_every_claim_is_measured_by_its_own_function(self):
    names = [c.measure.__name__ for c in MEASURED]
    self.assertLen(set(names), len(names))
    homes = {True: (nan_and_gradient_claims, hard_selection_claims, depth_claims, scale_rule_claims,
                    qk_correlation_claims, mup_transfer_claims, norm_claims, head_dim_and_retrieval_claims),
             False: (logit_variance_claims, projection_init_claims, softmax_saturation_claims, exp_overflow_claims,
                     outlier_overflow_claims, scale_order_claims, rope_claims, norms_and_temperature_claims,
                     head_dim_and_retrieval_claims, feature_scaling_claims)}
    for claim in MEASURED:
      (home,) = [m for m in homes[claim.training] if m.__name__ == claim.measure.__module__]
      self.assertIs(getattr(home, claim.measure.__name__), claim.measure, claim.id)

  def test_config_accepts_exactly_the_table_ids(self):
    self.assertEqual(claims.ClaimsConfig(ids=("head_dim_constant", "train_qk_correlate")).ids,
                     ("head_dim_constant", "train_qk_correlate"))
    with self.assertRaisesRegex(ValueError, "ids must be one of the 63 listed below; got 'variance_is_dk_typo' "
                                "\\(did you mean 'variance_is_dk'\\?\\)\n  variance_is_dk, sqrt_normalizes, "):
      claims.ClaimsConfig(ids=("variance_is_dk_typo",))

  def test_duplicate_id_is_refused(self):
    dup = dataclasses.replace(claims.RANDOM_INPUT_CLAIMS[0], training=True, grids=lambda ctx: {})
    with mock.patch.object(training_claims, "TRAINING_CLAIMS", (dup,)):
      with self.assertRaisesRegex(ValueError, "variance_is_dk"):
        claims.all_claims()

  def test_training_claim_verdicts_from_written_numbers(self):
    by_id = {c.id: c for c in claims.all_claims()}
    # (claim, its statistic as measured, the verdict its criterion gives): thresholds of note 2 §4 and note 1 §4 ②.
    cases = (("train_nan_within_100_steps", 0.75, claims.HOLDS), ("train_nan_within_100_steps", 0.3, claims.PARTLY),
             ("train_nan_within_100_steps", 0.1, claims.FAILS), ("train_grad_norm_below_1e-6", -7.2, claims.HOLDS),
             ("train_grad_norm_below_1e-6", -5.0, claims.PARTLY), ("train_grad_norm_below_1e-6", -3.0, claims.FAILS),
             ("train_attention_hard_selection", 0.95, claims.HOLDS),
             ("train_attention_hard_selection", 0.7, claims.PARTLY),
             ("train_attention_hard_selection", 0.4, claims.FAILS),
             ("train_depth6_converges_worse", 0.05, claims.HOLDS), ("train_depth6_converges_worse", 0.01, claims.PARTLY),
             ("train_depth6_converges_worse", -0.01, claims.FAILS),
             ("train_depth6_oscillates", 3.0, claims.HOLDS), ("train_depth6_oscillates", 1.5, claims.PARTLY),
             ("train_depth6_oscillates", 0.9, claims.FAILS), ("train_depth6_slow", 4.0, claims.HOLDS),
             ("train_depth6_slow", 1.5, claims.PARTLY), ("train_depth6_slow", 1.0, claims.FAILS),
             ("train_depth6_tiny_lr_clipping", 1.0, claims.HOLDS), ("train_depth6_tiny_lr_clipping", 0.25, claims.PARTLY),
             ("train_depth6_tiny_lr_clipping", 0.0, claims.FAILS),
             ("train_post_softmax_worse", 0.03, claims.HOLDS), ("train_post_softmax_worse", 0.01, claims.PARTLY),
             ("train_post_softmax_worse", -0.01, claims.FAILS),
             ("train_depth12_cannot_converge", 0.8, claims.HOLDS), ("train_depth12_cannot_converge", 0.5, claims.PARTLY),
             ("train_depth12_cannot_converge", 0.2, claims.FAILS),
             ("train_linear_less_expressive", 0.1, claims.HOLDS), ("train_linear_less_expressive", 0.03, claims.PARTLY),
             ("train_linear_less_expressive", 0.0, claims.FAILS),
             ("train_sqrt_optimal", 2.0, claims.HOLDS), ("train_sqrt_optimal", 1.0, claims.PARTLY),
             ("train_sqrt_optimal", 0.0, claims.FAILS),
             ("train_norms_dont_replace_scaling", 0.05, claims.HOLDS),
             ("train_norms_dont_replace_scaling", 0.01, claims.PARTLY),
             ("train_norms_dont_replace_scaling", -0.02, claims.FAILS),
             ("train_scaled_grads_stable", 2.0, claims.HOLDS), ("train_scaled_grads_stable", 1.0, claims.PARTLY),
             ("train_scaled_grads_stable", 0.0, claims.FAILS),
             ("train_qk_correlate", 0.2, claims.HOLDS), ("train_qk_correlate", 0.05, claims.PARTLY),
             ("train_qk_correlate", 0.0, claims.FAILS), ("train_mup_lr_transfer", 0.05, claims.HOLDS),
             ("train_mup_lr_transfer", 0.3, claims.PARTLY),
             ("train_mup_lr_transfer", 0.6, claims.FAILS), ("train_mup_lr_transfer", None, claims.NOT_MEASURED),
             ("train_rmsnorm_on_par", 0.01, claims.HOLDS), ("train_rmsnorm_on_par", 0.03, claims.PARTLY),
             ("train_rmsnorm_on_par", 0.08, claims.FAILS))
    self.assertEqual({c for c, _, _ in cases}, TRAINING_IDS)
    for claim_id, value, verdict in cases:
      claim = by_id[claim_id]
      # No standard error (one seed) and no optimum at an edge: the thresholds alone decide; the other readings beside
      # the verdict are not measured here.
      extra = {r.criterion.statistic: None for r in claim.beside}
      for criterion in (claim.criterion, *(r.criterion for r in claim.beside)):
        extra.update({f"{criterion.statistic}_se": None, **({criterion.edge: False} if criterion.edge else {})})
      row = _measuring(claim, value, **extra).evaluate(claims.Context())
      self.assertEqual((row["id"], row["value"], row["verdict"]), (claim_id, value, verdict))
      self.assertEqual([b["verdict"] for b in row.get("beside", ())], [claims.NOT_MEASURED] * len(claim.beside))

  def test_relative_gap_criteria_read_as_written(self):
    by_id = {c.id: c.criterion for c in MEASURED}
    self.assertEqual(by_id["train_depth6_converges_worse"].text,
                     "(final loss unscaled − final loss 1/√d_k) / final loss 1/√d_k at depth 6, each at its best "
                     "learning rate, mean over seeds: holds if >= 0.02, does not hold if <= 0, partly otherwise; "
                     "inconclusive if a threshold lies within 2 standard errors (over seeds) of the value; "
                     "inconclusive if the optimum stays at the edge of the grid searched (widened up to its bound)")
    self.assertEqual(by_id["train_post_softmax_worse"].text,
                     "(final loss with softmax(q·k)·v/√d_k − final loss with softmax(q·k/√d_k)·v) / the latter at "
                     "depth 2, each at its best learning rate, mean over seeds: holds if >= 0.02, does not hold if <= 0, "
                     "partly otherwise; inconclusive if a threshold lies within 2 standard errors (over seeds) of the "
                     "value; inconclusive if the optimum stays at the edge of the grid searched (widened up to its "
                     "bound)")

  def test_readme_tables_split_random_and_training_claims(self):
    train = dataclasses.replace(claims.RANDOM_INPUT_CLAIMS[0], id="train_x", text="Training helps.", training=True,
                                grids=lambda ctx: {})
    rows = [{"id": i, "claim": t, "source": "note", "criterion": "c", "verdict": claims.HOLDS, "finding": "f | g",
             "command": f"python -m experiments.claims --mode=quick --ids={i}"}
            for i, t in ((RANDOM_IDS[0], "Random claim."), ("train_x", "Training helps."))]
    with mock.patch.object(claim_table, "all_claims", return_value=claims.RANDOM_INPUT_CLAIMS + (train,)):
      text = claims.readme_markdown(rows, claims.Context(text_file="shakespeare.txt"))
    random_part, training_part = text.split("Training claims")
    self.assertIn("Random-input claims (mode quick: d_k 16, 64, 128, 1024", random_part)
    self.assertIn("Random claim.", random_part)
    self.assertNotIn("Training helps.", random_part)
    self.assertIn("Training helps.", training_part)
    self.assertIn("shakespeare.txt", training_part)
    self.assertIn("f \\| g", text)
    self.assertIn("| `python -m experiments.claims --mode=quick --ids=train_x` |", training_part)


  def test_verdict_counts_count_every_verdict(self):
    rows = [{"verdict": v} for v in (claims.HOLDS, verdicts.INCONCLUSIVE, claims.HOLDS, verdicts.NOT_IN_PASSAGE,
                                     "not measurable", verdicts.INCONCLUSIVE_EDGE, claims.SOURCE_AGREES)]
    self.assertEqual(list(claims.verdict_counts(rows).items()),
                     [(claims.HOLDS, 2), (verdicts.INCONCLUSIVE, 1), (verdicts.INCONCLUSIVE_EDGE, 1),
                      (claims.SOURCE_AGREES, 1), (verdicts.NOT_IN_PASSAGE, 1), ("not measurable", 1)])
    self.assertEqual(sum(claims.verdict_counts(rows).values()), len(rows))
    self.assertEqual(claims.verdict_counts([]), {})

  def test_table_defines_inconclusive_verdicts_and_shows_the_other_reading(self):
    row = {"id": "train_x", "claim": "X.", "source": "note", "criterion": "c", "reason": "r",
           "verdict": verdicts.INCONCLUSIVE, "finding": "f", "command": "python -m experiments.claims --ids=train_x",
           "beside": [{"label": "another reading", "criterion": "c2", "reason": "r2"}]}
    table = claims.markdown_table([row])
    self.assertTrue(table.startswith(claim_table.INCONCLUSIVE_LEGEND + "\n\n"))
    self.assertIn(f"| c. Why: r. Beside, another reading: c2. Why: r2 | "
                  f"**{verdicts.INCONCLUSIVE}** |", table)
    self.assertNotIn(claim_table.INCONCLUSIVE_LEGEND, claims.markdown_table([{**row, "verdict": claims.HOLDS}]))


class ContextTest(absltest.TestCase):

  def test_modes(self):
    cpu, quick = claims.Context(mode="cpu_hour"), claims.Context(mode="quick")
    self.assertEqual((cpu.d_k, cpu.seq_len, cpu.num_seeds), ((16, 32, 64, 128, 256, 512, 1024), 128, 4))
    self.assertContainsSubset({64, 128}, quick.d_k)
    self.assertLess(quick.num_seeds * len(quick.d_k), cpu.num_seeds * len(cpu.d_k))
    self.assertEqual(claims.Context(mode="paper").seq_len, 256)  # the notes' sequences
    self.assertEqual(claims.ClaimsConfig().context().mode, "quick")
    with self.assertRaisesRegex(ValueError, "unknown mode"):
      claims.Context(mode="slow")

  def test_paper_mode_is_the_notes_setting(self):
    s = training_sizes.SIZES["paper"]
    self.assertEqual((s["head_dim"], s["width"], s["num_heads"], s["seq_len"]), (64, 512, 8, 256))
    self.assertEqual((s["depth_small"], s["depth_converge"], s["depth_diverge"]), (2, 6, 12))
    self.assertEqual((s["num_seeds"], set(s["steps"].values()), s["dtypes"]), (3, {2000}, ("float32", "bfloat16")))
    self.assertTrue(np.allclose(np.diff(s["log2_lrs"]), 1.0))  # octaves

  def test_command_reproduces_the_context(self):
    self.assertEqual(claims.command(claims.Context(mode="cpu_hour"), "x"),
                     "python -m experiments.claims --mode=cpu_hour --ids=x")
    ctx = claims.Context(mode="quick", d_k=(128, 64), num_seeds=1, seed=3, text_file="my text.txt")
    self.assertEqual(claims.command(ctx, "x"), "python -m experiments.claims --mode=quick --ids=x --d_k=64,128 "
                     "--num_seeds=1 --seed=3 --text_file='my text.txt'")

  def test_compute_dtype_reaches_the_grids_that_name_no_precision(self):
    ctx = claims.Context(mode="quick", text_file=None, compute_dtype="bfloat16")
    self.assertEqual(claims.command(ctx, "x"), "python -m experiments.claims --mode=quick --ids=x "
                     "--compute_dtype=bfloat16")
    self.assertEqual(claims.ClaimsConfig(compute_dtype="bfloat16").context().compute_dtype, "bfloat16")
    by_id = {c.id: c for c in claims.all_claims()}
    default = claims.Context(mode="quick")
    for claim_id in ("train_depth6_oscillates", "train_sqrt_optimal", "train_mup_lr_transfer"):
      self.assertEqual({s.model_config.dtype for s in by_id[claim_id].grids(ctx).values()}, {"bfloat16"}, claim_id)
      self.assertEqual({s.model_config.dtype for s in by_id[claim_id].grids(default).values()}, {"float32"})
    # The NaN claim's grids name their precisions: float32 for every depth, low precision beside it.
    nan_dtypes = {s.model_config.dtype for s in by_id["train_nan_within_100_steps"].grids(ctx).values()}
    self.assertEqual(nan_dtypes, {"float32", "bfloat16", "float16"})
    with self.assertRaisesRegex(ValueError, "compute_dtype"):
      claims.Context(compute_dtype="float16")

  def test_sqrt_flatter_needs_two_seeds_for_its_tolerance(self):
    claim = next(c for c in claims.RANDOM_INPUT_CLAIMS if c.id == "sqrt_flatter_at_128")
    sweep = {(rule, d): {"entropy_normalized": [0.9 + 0.01 * (d == 128)], "max_prob": [0.07], "logit_std": [d**0.5]}
             for rule in claims.SWEEP_RULES for d in (64, 128)}
    ctx = claims.Context(d_k=(64, 128), num_seeds=1)
    with mock.patch.object(ctx, "sweep", return_value={k: {m: np.asarray(v) for m, v in x.items()}
                                                         for k, x in sweep.items()}):
      row = claim.evaluate(ctx)
    self.assertEqual(row["verdict"], claims.NOT_MEASURED)
    self.assertIn("one seed", row["finding"])


class MeasureFunctionTest(absltest.TestCase):
  """The new measure functions against jax.jacobian, numpy and written-out answers."""

  def test_row_jacobian_norms_match_jax_jacobian(self):
    rng = np.random.default_rng(0)
    q, k = (rng.standard_normal((1, 3, 1, 4)).astype(np.float32) * 3 for _ in range(2))
    # Each side one compiled program (op by op, every operation would compile on its own).
    got = np.asarray(jax.jit(softmax_saturation_claims.row_jacobian_norms, static_argnums=2)(q, k, "none"))  # [B, N, T]
    z = np.einsum("btnh,bsnh->bnts", q, k)
    jacobian_norm = jax.jit(lambda row: jnp.linalg.norm(jax.jacobian(jax.nn.softmax)(row)))
    for t in range(3):
      self.assertAlmostEqual(float(got[0, 0, t]), float(jacobian_norm(jnp.asarray(z[0, 0, t]))), places=5)

  def test_clamped_attention_matches_numpy(self):
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((1, 4, 1, 8)).astype(np.float32) * 6 for _ in range(3))
    sqrt = rules.as_fixed_scale(rules.get_rule("sqrt"), 8)
    got = np.asarray(jax.jit(lambda q, k, v: attention_variants.clamped_attention(  # one program, not op by op
        q, k, v, rule=sqrt, clamp=10.0, subtract_max=True))(q, k, v))
    z = np.clip(np.einsum("btnh,bsnh->bnts", q, k).astype(np.float64), -10, 10) / np.sqrt(8)
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(got, np.einsum("bnts,bsnh->btnh", p, v), rtol=1e-4, atol=1e-5)

  def test_nonfinite_rows_and_smallest_factor(self):
    out = np.ones((1, 2, 2, 3), np.float32)
    out[0, 1, 0, 2] = np.nan
    self.assertEqual(float(attention_variants.nonfinite_rows(jnp.asarray(out))), 0.25)
    fractions = np.array([[0.0, 0.0, 0.1, 0.2], [0.0, 0.0, 0.0, 0.3]])  # [seeds, factors]
    self.assertEqual(outlier_overflow_claims.smallest_factor(fractions, (1.0, 2.0, 5.0, 9.0)), 5.0)
    self.assertIsNone(outlier_overflow_claims.smallest_factor(np.zeros((2, 4)), (1.0, 2.0, 5.0, 9.0)))

  def test_temperature_to_match(self):
    taus = (0.5, 1.0, 2.0)
    entropies = np.array([0.9, 0.8, 0.6])  # falling in τ
    self.assertAlmostEqual(softmax_saturation_claims.temperature_to_match(entropies, 0.8, taus), 1.0)
    self.assertAlmostEqual(softmax_saturation_claims.temperature_to_match(entropies, 0.7, taus), 2.0**0.5)
    self.assertTrue(np.isnan(softmax_saturation_claims.temperature_to_match(entropies, 0.95, taus)))


class CitationTest(absltest.TestCase):

  def test_citation_rows_are_checked_not_measured(self):
    for claim in claims.all_claims():
      if claim.kind != verdicts.CITATION:
        continue
      row = claim.evaluate(None)
      self.assertIn(row["verdict"], verdicts.CITATION_VERDICTS)
      self.assertIsNone(row["value"])
      self.assertTrue(row["criterion"].startswith("checked against the source (not measured)"))
      self.assertIn(claim.passage, row["finding"])
    table = claims.markdown_table([c.evaluate(None) for c in claims.all_claims() if c.kind == verdicts.CITATION])
    self.assertIn("| claim | source | checked against (not measured) | verdict | the source says |", table)
    self.assertNotIn("reproduce", table)

  def test_citation_rows_say_whether_the_passage_is_verbatim(self):
    for claim in claims.all_claims():
      if claim.kind != verdicts.CITATION:
        continue
      finding = claim.evaluate(None)["finding"]
      if claim.compared_with:
        self.assertIn(f"quoted verbatim (compared with {claim.compared_with}).", finding)
      else:
        self.assertIn(f"Quoted from {claim.reference}, not verified verbatim.", finding)
    plain = dataclasses.replace(next(c for c in claims.all_claims() if c.kind == verdicts.CITATION), compared_with="")
    self.assertTrue(plain.evaluate(None)["finding"].endswith("not verified verbatim."))

  def test_knife_edge_shows_the_margin(self):
    claim = next(c for c in claims.RANDOM_INPUT_CLAIMS if c.id == "variance_is_dk")  # holds < 0.05, fails > 0.2
    near, far = (_measuring(claim, v).evaluate(claims.Context()) for v in (0.055, 0.1))
    self.assertIn("Knife-edge: max_rel_dev = 0.055 is +0.005 from the threshold 0.05.", near["finding"])
    self.assertNotIn("Knife-edge", far["finding"])
    self.assertAlmostEqual(near["margin"]["distance"], 0.005)
    self.assertTrue(all(c.criterion.reason for c in MEASURED))

  def test_a_count_of_parts_on_a_threshold_is_no_knife_edge(self):
    claim = next(c for c in claims.RANDOM_INPUT_CLAIMS if c.id == "d512_range")  # two parts: holds > 1.5, fails < 0.5
    self.assertTrue(claim.criterion.discrete)
    row = _measuring(claim, 1.5).evaluate(claims.Context())
    self.assertEqual(row["verdict"], claims.PARTLY)
    self.assertNotIn("Knife-edge", row["finding"])


class TinyRunTest(absltest.TestCase):
  """``experiments.claims`` on every random-input claim at tiny sizes (one run shared by the tests)."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.out = pathlib.Path(tempfile.mkdtemp(dir=absltest.TEST_TMPDIR.value)) / "claims_tiny"  # fresh: never resumed
    cls.code, cls.stdout, cls.stderr = experiment_main.run_main(claims_experiment, ids=UNTRAINED_RANDOM_IDS,
                                                                out_dir=str(cls.out), **TINY)
    cls.rows = {r["id"]: r for r in results.read_jsonl(cls.out / "claims.jsonl")}

  def test_files_and_rows(self):
    self.assertEqual(self.code, 0, self.stderr)
    self.assertEqual(list(self.rows), UNTRAINED_RANDOM_IDS)
    for i, r in self.rows.items():
      self.assertContainsSubset({"id", "source", "claim", "criterion", "statistic", "value", "verdict", "finding",
                                 "numbers", "command"}, r)
      self.assertIn(r["verdict"], verdicts.VERDICTS, i)
      self.assertEqual(r["value"], r["numbers"][r["statistic"]])
      self.assertEqual(r["command"], f"python -m experiments.claims --mode=quick --ids={i} {TINY_COMMAND}")
      self.assertIn(f"reproduce: {r['command']}", self.stdout)
    config = json.loads((self.out / "config.json").read_text())
    self.assertEqual(config["sizes"]["d_k"], [64, 128])
    table = (self.out / "claims.md").read_text()
    self.assertIn("| claim | source | criterion | verdict | what we measured | reproduce |", table)
    # Header, rule and one row per claim (a legend of the inconclusive verdicts precedes it when one is reached); the
    # supporting measurements in a table of their own, with its header and rule.
    supporting = [i for i in UNTRAINED_RANDOM_IDS if i in SUPPORTING_IDS]
    self.assertLen([line for line in table.splitlines() if line.startswith("|")],
                   2 + len(UNTRAINED_RANDOM_IDS) + (2 if supporting else 0))
    self.assertIn("| measurement | why it is here | criterion | result | informs |", table)
    readme = (self.out / "claims_readme.md").read_text()
    self.assertIn("Random-input claims (mode quick: d_k 64, 128; 16 tokens", readme)
    self.assertNotIn("Training claims", readme)
    printed = " ".join(self.stdout.split())  # the criterion and finding are wrapped
    self.assertIn(f"criterion: {self.rows['variance_is_dk']['criterion']}", printed)
    self.assertIn(f"measured: {self.rows['variance_is_dk']['finding']}", printed)

  def test_exact_measurements(self):
    rows = self.rows
    self.assertEqual(rows["post_softmax_breaks"]["verdict"], claims.HOLDS)
    self.assertAlmostEqual(rows["post_softmax_breaks"]["numbers"]["row_sum"]["64"]["mean"], 0.125, places=4)
    self.assertAlmostEqual(rows["post_softmax_breaks"]["numbers"]["output_rms_over_unscaled_softmax"]["128"]["mean"],
                           128**-0.5, places=4)
    overflow = rows["fp16_exp_overflow"]
    self.assertEqual(overflow["numbers"]["overflows_in"], ["float16"])  # unscaled iid logits at d_k 64 stay < 88
    self.assertEqual((overflow["value"], overflow["verdict"]), (1.0, claims.PARTLY))
    for name, frac in overflow["numbers"]["nonfinite_fraction"].items():
      if "; max-subtracted; iid" in name:  # iid logits at d_k = 64 overflow nothing once the row max is subtracted
        self.assertEqual(frac["mean"], 0.0, name)
    self.assertLen(overflow["numbers"]["nonfinite_fraction"], 2 * 2 * 3 * (2 * 4 + 1))
    sweep = rows["low_precision_nan_even_scaled"]["numbers"]["smallest_nonfinite_factor"]
    self.assertIsNone(sweep["all in float32; max-subtracted"])  # float32 never overflows up to ×300
    self.assertEqual(rows["clamp_before_scale"]["verdict"], claims.HOLDS)  # the clamp leaves nothing to overflow
    readings = rows["fp32_or_clamp_solves"]["numbers"]["readings"]
    self.assertEqual(readings["FP32 without max-subtraction"]["part_verdicts"],
                     {"FP32": claims.FAILS, "clamp": claims.HOLDS})
    self.assertEqual(readings["FP32 with max-subtraction"]["part_verdicts"],
                     {"FP32": claims.HOLDS, "clamp": claims.HOLDS})
    self.assertEqual(rows["online_softmax_mitigates"]["verdict"], claims.FAILS)  # same accumulation: no mitigation
    self.assertAlmostEqual(rows["post_softmax_breaks"]["value"], 1 - 64**-0.5, places=4)  # rows sum to 1/√d_k
    self.assertEqual(rows["nan_gradient_explosion"]["numbers"]["inf_fraction"]["mean"], 0.0)  # NaN, not inf
    self.assertEqual(rows["d512_std"]["verdict"], claims.HOLDS)
    self.assertLess(rows["rope_keeps_variance"]["value"], 0.1)
    self.assertLess(rows["rope_changes_norms"]["value"], 1e-5)
    self.assertEqual(rows["rope_changes_norms"]["verdict"], claims.FAILS)
    self.assertEqual(rows["scale_is_temperature"]["verdict"], claims.HOLDS)
    self.assertEqual(rows["qk_norm_robust"]["verdict"], claims.HOLDS)
    self.assertEqual(rows["sqrt_normalizes"]["verdict"], claims.HOLDS)  # unit-variance inputs only
    adjusted = rows["sqrt_adjusted_factor"]["numbers"]
    ratio = adjusted["var_sqrt"]["std 2"]["64"]["mean"] / adjusted["var_adjusted"]["std 2"]["64"]["mean"]
    self.assertAlmostEqual(ratio, 2.0**4, delta=0.01)  # entry std 2: Var(q·k) grows by 2⁴, the factor 1/(2²√d_k)
    self.assertEqual(rows["quadratic_uniform"]["verdict"], claims.HOLDS)
    for r in rows.values():
      self.assertNotRegex(r["finding"], r"\bnan\b", r["id"])  # a formatted NaN number (the word NaN may appear)

  def test_a_claim_measured_alone_gives_the_same_numbers(self):
    ctx = claims.Context(mode="quick", d_k=(64, 128), num_seeds=2, seq_len=16)
    (alone,) = claims.run_claims(ctx, ("post_softmax_breaks",))
    self.assertEqual(json.loads(json.dumps(results.to_jsonable(alone))), self.rows["post_softmax_breaks"])


@pytest.mark.slow  # the shell script runs the claims in a process of its own
class DeviceScriptTest(absltest.TestCase):
  """scripts/device_claims.sh on a CPU: the paper-mode plan (--dry_run) and a tiny run that writes its tables."""

  def _script(self, *args):
    root = pathlib.Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), "JAX_PLATFORMS": "cpu", "PYTHON": sys.executable}
    return subprocess.run([str(root / "scripts" / "device_claims.sh"), *args], capture_output=True, text=True,
                          env=env, timeout=300, check=False)

  def _text(self, tmp: pathlib.Path) -> str:
    text = tmp / "t.txt"
    text.write_text("".join(np.random.default_rng(0).choice(list("abcdefgh \n"), 40000)))
    return str(text)

  def test_dry_run_plans_paper_8min_to_fit_8_minutes_and_writes_nothing(self):
    tmp = pathlib.Path(self.create_tempdir().full_path)
    out = tmp / "never"
    done = self._script(str(out), self._text(tmp), "--dry_run")
    self.assertEqual(done.returncode, 0, done.stderr)
    self.assertRegex(done.stdout, r"mode paper_8min: planned training: 12 grids \(\d+ distinct programs\), \d+ runs, .* min")
    minutes = re.search(r"on one NVIDIA H200 \(datasheet peak × 0.3, an assumed efficiency, not measured; [^)]*\): "
                        r"about ([\d.]+) min .* which fits 8 min",
                        done.stdout)
    self.assertIsNotNone(minutes, done.stdout)
    self.assertLess(float(minutes.group(1)), 8.0)
    self.assertFalse(out.exists())

  def test_tiny_run_writes_the_tables(self):
    tmp = pathlib.Path(self.create_tempdir().full_path)
    out = tmp / "tiny"
    done = self._script(str(out), self._text(tmp), "--mode=quick", "--d_k=64,128", "--seq_len=16",
                        "--ids=variance_is_dk,cite_t5_fixed_sqrt")
    self.assertEqual(done.returncode, 0, done.stderr)
    readme = (out / "claims_readme.md").read_text()
    self.assertIn("Random-input claims (mode quick", readme)
    self.assertIn("Citation claims (checked against the source", readme)
    self.assertIn(f"tables: {out}/claims_readme.md", done.stdout)


class AcceleratorPlanTest(absltest.TestCase):
  """The H200 time of the device script's claims, from datasheet peaks: arithmetic only, nothing trained."""

  def _script_ids(self) -> tuple[str, ...]:
    text = (pathlib.Path(__file__).resolve().parents[1] / "scripts" / "device_claims.sh").read_text()
    parts = re.findall(r"^ids=(?:\$ids,)?(\S+)$", text, re.M)
    return tuple(",".join(parts).split(","))

  def test_datasheet_peaks(self):
    self.assertEqual(device_time.accelerator_peak("NVIDIA H200", "bfloat16"), 989.5e12)  # 1,979 with sparsity / 2
    self.assertEqual(device_time.accelerator_peak("NVIDIA H100 80GB HBM3", "float32"), 494.5e12)  # as TF32
    self.assertEqual(device_time.accelerator_peak("NVIDIA H100 80GB HBM3", "float32", tf32=False), 67e12)
    self.assertEqual(device_time.accelerator_peak("NVIDIA A100-SXM4-80GB", "bfloat16"), 312e12)
    with self.assertRaisesRegex(ValueError, "device_kind"):
      device_time.accelerator_peak("TPU v4", "float32")

  def test_accelerator_seconds_closed_form(self):
    model = device_time.TimeModel(efficiency=0.5, compile_seconds=10.0, step_seconds=0.01, fixed_seconds=7.0)
    out = device_time.accelerator_seconds([(989.5e12, "bfloat16", 100), (494.5e12, "float32", 50)], "H200", model)
    self.assertEqual({k: round(v, 9) for k, v in out.items()},
                     {"compute": 4.0, "compile": 20.0, "steps": 1.5, "fixed": 7.0, "total": 32.5,
                      "compute_at_peak": 2.0})

  def test_device_script_fits_8_minutes_on_an_h200_and_paper_mode_does_not(self):
    ids = self._script_ids()
    self.assertLen(ids, 8)
    self.assertContainsSubset(ids, {c.id for c in training_claims.TRAINING_CLAIMS})
    short = claims.accelerator_plan(claims.Context(mode="paper_8min", text_file=None), ids, "NVIDIA H200")
    self.assertLess(short["total"], 8 * 60)
    self.assertEqual(short["fixed"], 0.0)  # training claims only
    full = claims.accelerator_plan(claims.Context(mode="paper", text_file=None), None, "NVIDIA H200")
    self.assertGreater(full["total"], 8 * 60)
    words = claims.describe_accelerator_plan(full)
    self.assertIn(f"its compute alone at the full datasheet peak would take {full['compute_at_peak'] / 60:.1f} min",
                  words)
    self.assertAlmostEqual(full["compute_at_peak"], full["compute"] * claims.DEVICE_TIME_MODEL.efficiency)

  def test_paper_8min_keeps_the_notes_model(self):
    s, paper = training_sizes.SIZES["paper_8min"], training_sizes.SIZES["paper"]
    for key in ("head_dim", "width", "num_heads", "seq_len", "batch_size", "num_seeds", "depth_small",
                "depth_converge", "depth_diverge"):
      self.assertEqual(s[key], paper[key], key)
    self.assertTrue(np.allclose(np.diff(s["log2_lrs"]), 1.0))  # octaves
    self.assertIn(round(np.log2(1e-3)), np.round(s["log2_lrs"]))  # around 1e-3
    self.assertGreaterEqual(min(s["steps"].values()), s["nan_window"])  # "within 100 steps" stays measurable


class MeasuredEfficiencyTest(absltest.TestCase):
  """The plan's efficiency from a train suite's train.json measured on the accelerator: its step FLOP/s over the
  datasheet peak."""

  @staticmethod
  def _train_json(kind="NVIDIA H200", flops_per_s=98.9e12):
    return {"device_kind": kind, "throughput": {"variants": {"every_metric": {"flops_per_s": flops_per_s}}}}

  def test_step_flops_over_the_datasheet_peak(self):
    # 98.9 TFLOP/s of float32 (TF32 on the tensor cores: 494.5 TFLOP/s dense) is a fifth of the peak.
    self.assertAlmostEqual(device_time.measured_efficiency(self._train_json(), "NVIDIA H200"), 98.9 / 494.5)

  def test_refused(self):
    for results, message in ((self._train_json("cpu"), "measured on 'cpu'"),
                             (self._train_json("NVIDIA A100-SXM4-80GB"), "not on 'NVIDIA H200'"),
                             (self._train_json(flops_per_s=600e12), "must lie in"),
                             (self._train_json(flops_per_s=0.0), "must lie in"),
                             ({"throughput": {}}, "not a train suite's")):
      with self.assertRaisesRegex(ValueError, message):
        device_time.measured_efficiency(results, "NVIDIA H200")

  def test_the_plan_states_compute_at_the_measured_efficiency(self):
    path = pathlib.Path(self.create_tempdir().full_path) / "train.json"
    path.write_text(json.dumps(self._train_json()))
    ctx = claims.Context(mode="paper", text_file=None)
    assumed, measured = claims.time_estimate(ctx), claims.time_estimate(ctx, efficiency_from=str(path))
    self.assertIn("an assumed efficiency, not measured", assumed)
    self.assertIn(f"datasheet peak × {98.9 / 494.5:.3g}, the training step's efficiency measured by {path}", measured)
    plan = claims.accelerator_plan(ctx, model=claims.device_time_model(str(path)))
    self.assertAlmostEqual(plan["compute"], plan["compute_at_peak"] * 494.5 / 98.9)
    self.assertIn(f"{plan['compute'] / 60:.1f} min of compute", measured)
    missing = path.with_name("missing.json")
    with self.assertRaisesRegex(claims.ConfigError, "device_efficiency_from: .*missing.json"):
      claims.time_estimate(ctx, efficiency_from=str(missing))


class ClaimsFlagsTest(absltest.TestCase):

  def test_memory_hint_names_num_seeds_only_where_the_training_grids_follow_it(self):
    training = tuple(sorted(TRAINING_IDS))
    for mode, follows in (("quick", True), ("paper", False), ("cpu_hour", False)):
      ctx = claims.Context(mode=mode, text_file=None)
      estimate = claims.memory_estimate(ctx, training)
      for part in estimate.parts:
        self.assertEqual("num_seeds" in part.flags, follows, mode)
        self.assertEqual("num_seeds" in part.hint, follows, mode)
    # Where the mode fixes them, --num_seeds leaves the training grids' seeds alone.
    paper = claims.Context(mode="paper", num_seeds=9, text_file=None)
    self.assertLen(training_sizes.seeds_of(paper), training_sizes.SIZES["paper"]["num_seeds"])

  def test_d_k_must_include_64_and_128(self):
    out = pathlib.Path(self.create_tempdir().full_path) / "never"
    code, stdout, err = experiment_main.run_main(claims_experiment, d_k=[16, 64], out_dir=str(out))
    experiment_main.assert_one_line_error(self, code, stdout, err, "--d_k must include 64 and 128", out)

  def test_unknown_mode_and_id(self):
    out = pathlib.Path(self.create_tempdir().full_path) / "never"
    for flags, needle in ((dict(mode="slow"), "--mode"), (dict(mode="full"), "--mode=full: 'full': must be one of quick, cpu_hour, paper")):
      code, stdout, err = experiment_main.run_main(claims_experiment, out_dir=str(out), **flags)
      experiment_main.assert_one_line_error(self, code, stdout, err, needle, out)
    # every id: the error line names the value once, the ids follow on wrapped, indented lines
    code, stdout, err = experiment_main.run_main(claims_experiment, out_dir=str(out), ids=["nope", "head_dim_constan"])
    self.assertEqual((code, stdout), (2, ""))
    first, *rest = err.strip().splitlines()
    self.assertEqual(first, "error: flag --ids=nope,head_dim_constan: 'nope': must be one of the "
                     f"{len(claims.all_claims())} listed below")
    self.assertGreater(len(rest), 3)
    for line in rest:
      self.assertTrue(line.startswith("  ") and len(line) <= 100, line)
    listed = ", ".join(line.strip() for line in rest).replace(",,", ",").split(", ")
    self.assertEqual(listed, [claim.id for claim in claims.all_claims()])
    self.assertFalse(out.exists())

  def test_missing_text_file(self):
    out = pathlib.Path(self.create_tempdir().full_path) / "never"
    code, stdout, err = experiment_main.run_main(claims_experiment, ids=["variance_is_dk"], out_dir=str(out),
                                                 text_file=str(out.parent / "missing.txt"))
    experiment_main.assert_one_line_error(self, code, stdout, err, "--text_file", out)


if __name__ == "__main__":
  absltest.main()
