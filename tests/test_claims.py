"""The claims: every criterion can reach both verdicts, verdicts follow the measured statistic, the study writes its
files, and a tiny run measures every random-input claim."""

import dataclasses
import json
import pathlib
import tempfile
from unittest import mock

from absl.testing import absltest
import numpy as np

from experiments import claims as claims_experiment
from scaling import results
from scaling.studies import claim_table
from scaling.studies import claims
from scaling.studies import random_input_claims
from scaling.studies import training_claims
from scaling.studies import verdicts
import experiment_main

RANDOM_IDS = [c.id for c in claims.RANDOM_INPUT_CLAIMS]
TINY = dict(mode="quick", d_k=[64, 128], num_seeds=2, seq_len=16)
TINY_COMMAND = "--d_k=64,128 --seq_len=16"  # num_seeds 2 is the quick mode's

# For each random-input claim, statistics that must give (holds, partly, does not hold); None where partly cannot
# happen. They spell out which side of each threshold supports the claim as written.
DECISIONS = {
    "variance_is_dk": (0.01, 0.1, 0.5),  # |Var/d_k − 1|
    "sqrt_normalizes": (1.0, 0.75, 0.25),  # fraction of input conditions with variance within 5% of 1
    "d64_magnitudes": (0.05, 0.005, 1e-4),  # fraction of logits with |z| ≥ 24
    "unscaled_one_hot": (0.95, 0.7, 0.3),  # max probability at the largest d_k
    "gradients_vanish": (0.01, 0.5, 30.0),  # |dL/dq| unscaled / with 1/√d_k
    "linear_uniform": (0.05, 0.3, 0.9),  # KL from uniform relative to 1/√d_k's
    "quadratic_uniform": (1e-4, 0.3, 0.9),
    "post_softmax_breaks": (0.8, 0.1, 0.01),  # |output RMS ratio − 1|
    "sqrt_flatter_at_128": (0.05, 0.005, -0.003),  # entropy rise beyond twice its spread
    "fp16_exp_overflow": (1.0, 0.005, 0.0),  # non-finite fraction
    "low_precision_nan_even_scaled": (0.01, None, 0.0),
    "rope_changes_norms": (0.1, 0.005, 2e-7),  # relative norm change
    "qk_norm_robust": (0.01, 0.3, 3.0),  # |Var − 1| under QK-norm
    "scale_is_temperature": (1e-7, 1e-4, 0.1),  # weights vs numpy
    "layernorm_not_enough": (1.0, 0.5, 0.0),  # exponent of Var ∝ d_k^a
    "head_dim_constant": (0.01, 0.1, 0.5),  # relative spread of the logit std across widths
}


def _measuring(claim: verdicts.Claim, value: float, **numbers) -> verdicts.Claim:
  """``claim`` with a measurement that reports ``value`` as its statistic."""
  measure = lambda ctx: verdicts.Measurement({claim.criterion.statistic: value, **numbers}, f"measured {value}")
  return dataclasses.replace(claim, measure=measure)


class CriteriaTest(absltest.TestCase):

  def test_every_criterion_reaches_holds_and_fails(self):
    for claim in claims.all_claims():
      reached = {claim.criterion.verdict(p) for p in claim.criterion.probes()}
      self.assertContainsSubset({claims.HOLDS, claims.FAILS}, reached, f"{claim.id}: {claim.criterion.text}")

  def test_every_random_input_claim_has_decisions(self):
    self.assertCountEqual(DECISIONS, RANDOM_IDS)
    self.assertTrue(all(not c.training for c in claims.RANDOM_INPUT_CLAIMS))
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
      rows = claims.run_claims(claims.Context(mode="full"), ("gradients_vanish", "rope_changes_norms"))
    self.assertEqual([(r["id"], r["verdict"]) for r in rows],
                     [("gradients_vanish", claims.FAILS), ("rope_changes_norms", claims.HOLDS)])
    self.assertEqual(rows[0]["command"], "python -m experiments.claims --mode=full --ids=gradients_vanish")
    rope = next(c for c in claims.RANDOM_INPUT_CLAIMS if c.id == "rope_changes_norms")
    self.assertEqual(rows[1]["criterion"], rope.criterion.text)

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
    "variance_is_dk", "sqrt_normalizes", "d64_magnitudes", "unscaled_one_hot", "gradients_vanish", "linear_uniform",
    "quadratic_uniform", "post_softmax_breaks", "sqrt_flatter_at_128", "fp16_exp_overflow",
    "low_precision_nan_even_scaled", "rope_changes_norms", "qk_norm_robust", "scale_is_temperature",
    "layernorm_not_enough", "head_dim_constant",
    "train_nan_within_100_steps", "train_grad_norm_below_1e-6", "train_depth6_converges_worse",
    "train_post_softmax_worse", "train_depth12_diverges", "train_qk_correlate", "train_mup_lr_transfer",
)
TRAINING_IDS = {i for i in EXPECTED_IDS if i.startswith("train_")}


class ClaimListTest(absltest.TestCase):

  def test_table_holds_every_claim_once_in_order(self):
    ids = tuple(c.id for c in claims.all_claims())
    self.assertEqual(ids, EXPECTED_IDS)
    self.assertEqual({c.id for c in claims.all_claims() if c.training}, TRAINING_IDS)

  def test_every_claim_is_measured_by_its_own_function(self):
    names = [c.measure.__name__ for c in claims.all_claims()]
    self.assertLen(set(names), len(names))
    for claim in claims.all_claims():
      home = training_claims if claim.training else random_input_claims
      self.assertIs(getattr(home, claim.measure.__name__), claim.measure, claim.id)

  def test_config_accepts_exactly_the_table_ids(self):
    self.assertEqual(claims.ClaimsConfig(ids=("head_dim_constant", "train_qk_correlate")).ids,
                     ("head_dim_constant", "train_qk_correlate"))
    with self.assertRaisesRegex(ValueError, "ids must be one of the 23 listed below; got 'variance_is_dk_typo' "
                                "\\(did you mean 'variance_is_dk'\\?\\)\n  variance_is_dk, sqrt_normalizes, "):
      claims.ClaimsConfig(ids=("variance_is_dk_typo",))

  def test_duplicate_id_is_refused(self):
    dup = dataclasses.replace(claims.RANDOM_INPUT_CLAIMS[0], training=True)
    with mock.patch.object(training_claims, "TRAINING_CLAIMS", (dup,)):
      with self.assertRaisesRegex(ValueError, "variance_is_dk"):
        claims.all_claims()

  def test_training_claim_verdicts_from_written_numbers(self):
    by_id = {c.id: c for c in claims.all_claims()}
    # (claim, its statistic as measured, the verdict its criterion gives): thresholds of note 2 §4 and note 1 §4 ②.
    cases = (("train_nan_within_100_steps", 0.75, claims.HOLDS), ("train_nan_within_100_steps", 0.3, claims.PARTLY),
             ("train_nan_within_100_steps", 0.1, claims.FAILS), ("train_grad_norm_below_1e-6", -7.2, claims.HOLDS),
             ("train_grad_norm_below_1e-6", -3.0, claims.FAILS), ("train_depth6_converges_worse", 0.05, claims.HOLDS),
             ("train_depth6_converges_worse", 0.01, claims.PARTLY), ("train_post_softmax_worse", -0.01, claims.FAILS),
             ("train_depth12_diverges", 0.8, claims.HOLDS), ("train_depth12_diverges", 0.2, claims.FAILS),
             ("train_qk_correlate", 0.05, claims.PARTLY), ("train_mup_lr_transfer", 0.6, claims.HOLDS),
             ("train_mup_lr_transfer", 2.5, claims.FAILS), ("train_mup_lr_transfer", None, claims.NOT_MEASURED))
    for claim_id, value, verdict in cases:
      row = _measuring(by_id[claim_id], value).evaluate(claims.Context())
      self.assertEqual((row["id"], row["value"], row["verdict"]), (claim_id, value, verdict))

  def test_relative_gap_criteria_read_as_written(self):
    by_id = {c.id: c.criterion for c in claims.all_claims()}
    self.assertEqual(by_id["train_depth6_converges_worse"].text,
                     "(final loss unscaled − final loss 1/√d_k) / final loss 1/√d_k at depth 6, each at its best "
                     "learning rate, mean over seeds: holds if >= 0.02, does not hold if <= 0, partly otherwise")
    self.assertEqual(by_id["train_post_softmax_worse"].text,
                     "(final loss with softmax(q·k)·v/√d_k − final loss with softmax(q·k/√d_k)·v) / the latter at "
                     "depth 2, each at its best learning rate, mean over seeds: holds if >= 0.02, does not hold if <= 0, "
                     "partly otherwise")

  def test_readme_tables_split_random_and_training_claims(self):
    train = dataclasses.replace(claims.RANDOM_INPUT_CLAIMS[0], id="train_x", text="Training helps.", training=True)
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


class ContextTest(absltest.TestCase):

  def test_modes(self):
    full, quick = claims.Context(mode="full"), claims.Context(mode="quick")
    self.assertEqual((full.d_k, full.seq_len, full.num_seeds), ((16, 32, 64, 128, 256, 512, 1024), 128, 4))
    self.assertContainsSubset({64, 128}, quick.d_k)
    self.assertLess(quick.num_seeds * len(quick.d_k), full.num_seeds * len(full.d_k))
    self.assertEqual(claims.ClaimsConfig().context().mode, "quick")
    with self.assertRaisesRegex(ValueError, "unknown mode"):
      claims.Context(mode="slow")

  def test_command_reproduces_the_context(self):
    self.assertEqual(claims.command(claims.Context(mode="full"), "x"),
                     "python -m experiments.claims --mode=full --ids=x")
    ctx = claims.Context(mode="quick", d_k=(128, 64), num_seeds=1, seed=3, text_file="my text.txt")
    self.assertEqual(claims.command(ctx, "x"), "python -m experiments.claims --mode=quick --ids=x --d_k=64,128 "
                     "--num_seeds=1 --seed=3 --text_file='my text.txt'")

  def test_sqrt_flatter_needs_two_seeds_for_its_tolerance(self):
    claim = next(c for c in claims.RANDOM_INPUT_CLAIMS if c.id == "sqrt_flatter_at_128")
    sweep = {(rule, d): {"entropy_normalized": [0.9 + 0.01 * (d == 128)], "max_prob": [0.07]}
             for rule in claims.SWEEP_RULES for d in (64, 128)}
    ctx = claims.Context(d_k=(64, 128), num_seeds=1)
    with mock.patch.object(ctx, "sweep", return_value={k: {m: np.asarray(v) for m, v in x.items()}
                                                         for k, x in sweep.items()}):
      row = claim.evaluate(ctx)
    self.assertEqual(row["verdict"], claims.NOT_MEASURED)
    self.assertIn("one seed", row["finding"])


class TinyRunTest(absltest.TestCase):
  """``experiments.claims`` on every random-input claim at tiny sizes (one run shared by the tests)."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.out = pathlib.Path(tempfile.mkdtemp(dir=absltest.TEST_TMPDIR.value)) / "claims_tiny"  # fresh: never resumed
    cls.code, cls.stdout, cls.stderr = experiment_main.run_main(claims_experiment, ids=RANDOM_IDS,
                                                                out_dir=str(cls.out), **TINY)
    cls.rows = {r["id"]: r for r in results.read_jsonl(cls.out / "claims.jsonl")}

  def test_files_and_rows(self):
    self.assertEqual(self.code, 0, self.stderr)
    self.assertEqual(list(self.rows), RANDOM_IDS)
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
    self.assertLen(table.strip().splitlines(), 2 + len(RANDOM_IDS))
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
    self.assertGreater(overflow["value"], 0.5)
    self.assertEqual(overflow["verdict"], claims.HOLDS)
    for name, frac in overflow["numbers"]["nonfinite_fraction"].items():
      if "; max-subtracted; iid" in name:  # iid logits at d_k = 64 overflow nothing once the row max is subtracted
        self.assertEqual(frac["mean"], 0.0, name)
    self.assertLen(overflow["numbers"]["nonfinite_fraction"], 2 * 2 * 3 * (2 * 4 + 1))
    self.assertLess(rows["rope_changes_norms"]["value"], 1e-5)
    self.assertEqual(rows["rope_changes_norms"]["verdict"], claims.FAILS)
    self.assertEqual(rows["scale_is_temperature"]["verdict"], claims.HOLDS)
    self.assertEqual(rows["qk_norm_robust"]["verdict"], claims.HOLDS)
    unit = rows["sqrt_normalizes"]["numbers"]["within_5pct"]
    self.assertFalse(unit["iid q, k entries of std 2"])
    self.assertLessEqual(rows["sqrt_normalizes"]["value"], 0.5)
    self.assertEqual(rows["quadratic_uniform"]["verdict"], claims.HOLDS)
    for r in rows.values():
      self.assertNotIn("nan", r["finding"].lower(), r["id"])

  def test_a_claim_measured_alone_gives_the_same_numbers(self):
    ctx = claims.Context(mode="quick", d_k=(64, 128), num_seeds=2, seq_len=16)
    (alone,) = claims.run_claims(ctx, ("post_softmax_breaks",))
    self.assertEqual(json.loads(json.dumps(results.to_jsonable(alone))), self.rows["post_softmax_breaks"])


class ClaimsFlagsTest(absltest.TestCase):

  def test_d_k_must_include_64_and_128(self):
    out = pathlib.Path(self.create_tempdir().full_path) / "never"
    code, stdout, err = experiment_main.run_main(claims_experiment, d_k=[16, 64], out_dir=str(out))
    experiment_main.assert_one_line_error(self, code, stdout, err, "--d_k must include 64 and 128", out)

  def test_unknown_mode_and_id(self):
    out = pathlib.Path(self.create_tempdir().full_path) / "never"
    code, stdout, err = experiment_main.run_main(claims_experiment, out_dir=str(out), mode="slow")
    experiment_main.assert_one_line_error(self, code, stdout, err, "--mode", out)
    # 23 ids: the error line names the value once, the ids follow on wrapped, indented lines
    code, stdout, err = experiment_main.run_main(claims_experiment, out_dir=str(out), ids=["nope", "head_dim_constan"])
    self.assertEqual((code, stdout), (2, ""))
    first, *rest = err.strip().splitlines()
    self.assertEqual(first, "error: flag --ids=nope,head_dim_constan: 'nope': must be one of the 23 listed below")
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
