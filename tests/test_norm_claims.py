"""scaling.studies.claims.training.norms: the on-par criterion on known gaps both ways, and the measurement on tiny sizes."""

import dataclasses
import math
import types

from absl.testing import absltest
import numpy as np

from scaling.studies.grid import run as grid_run
from scaling.studies.claims.training import norms as norm_claims
from scaling.studies.claims.training import loss_curves
from scaling.studies.claims.training import scale_rules as scale_rule_claims
from scaling.studies.claims.training import grids as training_grids
from scaling.studies.claims.training import sizes as training_sizes
from scaling.studies.claims import verdicts

CLAIM = norm_claims.NORM_CLAIMS[0]
TEST_CTX = types.SimpleNamespace(mode="test", seed=0, num_seeds=2, text_file=None, planner=grid_run.GridPlanner())


class OnParTest(absltest.TestCase):

  def test_gap_known_both_ways(self):
    layer = np.array([2.0, 2.2, 2.4])
    for rms, verdict in ((layer * 1.005, verdicts.HOLDS), (layer * 1.1, verdicts.FAILS),
                         (layer * np.array([1.0, 1.015, 0.985]), verdicts.PARTLY)):
      got = norm_claims.on_par_gap(layer, rms)
      gaps = (rms - layer) / layer
      self.assertAlmostEqual(got["max_abs_gap_within_noise"], abs(gaps.mean()) + 2 * gaps.std(ddof=1))
      self.assertEqual(CLAIM.criterion.verdict(got["max_abs_gap_within_noise"]), verdict, str(rms))

  def test_one_seed_has_no_noise_bound(self):
    got = norm_claims.on_par_gap(np.array([2.0]), np.array([2.0]))
    self.assertTrue(math.isnan(got["max_abs_gap_within_noise"]))
    self.assertEqual(CLAIM.criterion.verdict(got["max_abs_gap_within_noise"]), verdicts.NOT_MEASURED)
    with self.assertRaisesRegex(ValueError, "same seeds"):
      norm_claims.on_par_gap(np.array([2.0, 2.0]), np.array([2.0]))

  def test_every_criterion_reaches_holds_and_fails(self):
    for claim in norm_claims.NORM_CLAIMS:
      self.assertTrue(claim.training)
      reached = {claim.criterion.verdict(p) for p in claim.criterion.probes()}
      self.assertContainsSubset({verdicts.HOLDS, verdicts.FAILS}, reached, claim.id)


class MeasurementTest(absltest.TestCase):

  def test_tiny_run_compares_the_two_norms_at_their_best_learning_rates(self):
    row = CLAIM.evaluate(TEST_CTX)
    self.assertIn(row["verdict"], verdicts.VERDICTS)
    numbers = row["numbers"]
    self.assertEqual(numbers["depth"], training_sizes.SIZES["test"]["depth_small"])
    finals = {}
    runs = training_grids.trained(TEST_CTX, scale_rule_claims.norm_grids(TEST_CTX))
    declared = [r for r in TEST_CTX.planner.runs if not r.spec.label.endswith("widened")]
    self.assertEqual(len(declared), 4)  # the grids of the claim that the norms do not replace the scale
    for norm in norm_claims.NORMS:
      run = runs[(norm, "sqrt")]
      self.assertEqual(run.model_config.norm, norm)
      # Its rows and those of any widening of it (a best rate at the grid's edge), pooled by hand.
      grids = [r for r in TEST_CTX.planner.runs
               if dataclasses.replace(r.spec, log2_lrs=run.log2_lrs, label=run.spec.label) == run.spec]
      rates = [x for g in grids for x in g.log2_lrs]
      final = np.concatenate([g.by_lr(loss_curves.final_losses(g.records["loss"], numbers["final_loss_mean_of_last"]))
                              for g in grids])
      finals[norm] = final[loss_curves.best_index(final)]
      self.assertEqual(numbers[norm]["best_learning_rate"], f"{2.0 ** rates[loss_curves.best_index(final)]:.3g}")
    want = norm_claims.on_par_gap(finals["layer"], finals["rms"])["max_abs_gap_within_noise"]
    self.assertAlmostEqual(row["value"], want, places=3)
    self.assertIn("RMSNorm blocks against", row["finding"])


if __name__ == "__main__":
  absltest.main()
