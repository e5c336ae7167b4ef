"""The claims runner on a tiny context: every claim yields a verdict, and the exact ones come out right."""

import json
import pathlib

from absl.testing import absltest

from experiments import claims as claims_experiment
from scaling.studies import claims
import experiment_main


class ClaimsTest(absltest.TestCase):

  def test_exact_claims(self):
    ctx = claims.Context(d_k=(16,), seq_len=8, num_seeds=1)
    rows = {r["id"]: r for r in claims.run_claims(
        ctx, ("post_softmax_breaks", "fp16_exp_overflow", "rope_changes_norms", "scale_is_temperature"))}
    self.assertEqual(rows["post_softmax_breaks"]["verdict"], claims.HOLDS)
    self.assertAlmostEqual(rows["post_softmax_breaks"]["numbers"]["row_sum"], 0.125, places=4)
    self.assertEqual(rows["fp16_exp_overflow"]["numbers"]["nonfinite_with_max_subtraction"], 0.0)
    self.assertGreater(rows["fp16_exp_overflow"]["numbers"]["nonfinite_no_max_subtraction"], 0.5)
    self.assertLess(rows["rope_changes_norms"]["numbers"]["max_rel_norm_change"], 1e-5)
    self.assertEqual(rows["scale_is_temperature"]["verdict"], claims.HOLDS)

  def test_unknown_id(self):
    with self.assertRaisesRegex(ValueError, "unknown claim"):
      claims.run_claims(claims.Context(), ("nope",))

  def test_main_writes_files(self):
    out = pathlib.Path(self.create_tempdir().full_path)
    code, _, _ = experiment_main.run_main(claims_experiment, ids=["variance_is_dk", "sqrt_flatter_at_128"],
                                          d_k=[64, 128], num_seeds=1, seq_len=8, out_dir=str(out))
    self.assertEqual(code, 0)
    rows = [json.loads(line) for line in (out / "claims.jsonl").read_text().splitlines()]
    self.assertEqual([r["id"] for r in rows], ["variance_is_dk", "sqrt_flatter_at_128"])
    for r in rows:
      self.assertIn(r["verdict"], (claims.HOLDS, claims.PARTLY, claims.FAILS))
      self.assertTrue(r["finding"])
    self.assertIn("| claim |", (out / "claims.md").read_text())



class ClaimsFlagsTest(absltest.TestCase):

  def test_d_k_must_include_64_and_128(self):
    out = pathlib.Path(self.create_tempdir().full_path) / "never"
    code, _, err = experiment_main.run_main(claims_experiment, d_k=[16, 64], out_dir=str(out))
    self.assertEqual(code, 2)
    self.assertEqual(err.strip().splitlines(), ["error: --d_k must include 64 and 128 (two claims are about those "
                                                "head dims)"])
    self.assertFalse(out.exists())


if __name__ == "__main__":
  absltest.main()
