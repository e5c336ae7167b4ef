"""The claims not measurable here: their rows, their table and how the README headline counts them."""

from absl.testing import absltest

from scaling.runs import report
from scaling.studies.claims import table as claim_table
from scaling.studies.claims import study as claims
from scaling.studies.claims import unmeasurable as unmeasurable_claims
from scaling.studies.claims import verdicts


class UnmeasurableTest(absltest.TestCase):

  def test_rows_have_no_statistic_and_name_measured_rows(self):
    measured = {c.id for c in claims.all_claims() if c.kind == verdicts.MEASURED}
    for claim in unmeasurable_claims.UNMEASURABLE_CLAIMS:
      row = claim.evaluate(None)
      self.assertEqual((row["kind"], row["verdict"]), (verdicts.NOT_MEASURABLE, verdicts.NOT_MEASURABLE))
      self.assertEqual((row["statistic"], row["value"], row["margin"]), (None, None, None))
      self.assertIn(claim.why, row["finding"])
      self.assertTrue(row["criterion"].startswith("none declared (not measurable here): settling it would need "))
      self.assertTrue(claim.related)
      self.assertContainsSubset(claim.related, measured)  # the rows it points to exist and are measured

  def test_table_and_readme_put_them_apart(self):
    rows = [{**c.evaluate(None), "command": f"python -m experiments.claims --mode=quick --ids={c.id}"}
            for c in unmeasurable_claims.UNMEASURABLE_CLAIMS]
    table = claims.markdown_table(rows)
    self.assertIn("| claim | source | settling it would need | why not here | verdict |", table)
    self.assertNotIn("| claim | source | criterion |", table)
    self.assertLen(table.strip().splitlines(), 2 + len(rows))
    readme = claim_table.readme_markdown(rows, claims.Context())
    self.assertTrue(readme.startswith("Claims not measurable here"))

  def test_headline_counts_them_apart_from_citations(self):
    rows = [{"id": "x", "claim": "X.", "verdict": verdicts.HOLDS, "criterion": "c: holds if < 1, does not hold if > 2, "
             "partly otherwise", "statistic": "s", "value": 0.5, "kind": verdicts.MEASURED},
            {**unmeasurable_claims.UNMEASURABLE_CLAIMS[0].evaluate(None)}]
    text = report.claims_headline(rows, {"config": {"mode": "quick", "text_file": None}})
    self.assertIn("verdicts: holds **1**; 1 claims not measurable here.", text)
    self.assertNotIn("citations", text)


if __name__ == "__main__":
  absltest.main()
