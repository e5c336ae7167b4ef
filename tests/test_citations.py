"""Citation claims: the three verdicts, how a claim with parts gets its verdict, and how each verdict is rendered."""

import dataclasses
import itertools

from absl.testing import absltest

from scaling.studies.claims import citations as citation_claims
from scaling.studies.claims import table as claim_table
from scaling.studies.claims import verdicts
from scaling.base.validation import ConfigError

AGREES, DISAGREES, NOT_FOUND = verdicts.SOURCE_AGREES, verdicts.SOURCE_DISAGREES, verdicts.NOT_IN_PASSAGE
BY_ID = {c.id: c for c in citation_claims.CITATION_CLAIMS}


def _claim(verdict, full_text=False, parts=()):
  """A citation claim with the given verdict (the rest taken from a real row)."""
  return dataclasses.replace(BY_ID["cite_vaswani_motivation"], id=f"cite_{verdict.replace(' ', '_')}",
                             text=f"A claim whose source's verdict is {verdict}.", verdict=verdict,
                             full_text=full_text, parts=parts)


def _verdict_cell(table, claim):
  """The verdict cell of ``claim``'s row in a rendered table."""
  line = next(l for l in table.splitlines() if l.startswith(f"| {claim.text} |"))
  return line.split(" | ")[3]


class VocabularyTest(absltest.TestCase):

  def test_three_verdicts(self):
    self.assertEqual(verdicts.CITATION_VERDICTS,
                     ("source agrees", "source disagrees", "not found in the passage checked"))

  def test_parts_rule_against_a_ranking(self):
    # Independent formulation: rank agrees < not found < disagrees; a claim takes its worst part's verdict.
    rank = {AGREES: 0, NOT_FOUND: 1, DISAGREES: 2}
    reached = set()
    for n in (1, 2, 3):
      for combo in itertools.product(verdicts.CITATION_VERDICTS, repeat=n):
        got = verdicts.citation_verdict(combo)
        self.assertEqual(got, max(combo, key=rank.get), combo)
        reached.add(got)
    self.assertEqual(reached, set(verdicts.CITATION_VERDICTS))

  def test_bad_part_verdicts(self):
    for bad in ((), "source agrees", ("source agrees", "partly")):
      with self.assertRaises(ConfigError):
        verdicts.citation_verdict(bad)
    with self.assertRaisesRegex(ConfigError, "verdict: unknown 'partly'"):
      verdicts.CitationPart("x", "partly", "y")

  def test_a_claim_verdict_must_be_known_and_follow_its_parts(self):
    with self.assertRaisesRegex(ConfigError, "is not one of"):
      _claim("holds")
    parts = (verdicts.CitationPart("a", AGREES, "e"), verdicts.CitationPart("b", DISAGREES, "e"))
    with self.assertRaisesRegex(ConfigError, "does not follow from its parts"):
      _claim(AGREES, parts=parts)
    self.assertEqual(_claim(DISAGREES, parts=parts).verdict, DISAGREES)

  def test_not_found_needs_a_partial_reading(self):
    with self.assertRaisesRegex(ConfigError, "needs a partial reading"):
      _claim(NOT_FOUND, full_text=True)
    row = _claim(NOT_FOUND).evaluate(None)
    self.assertEqual(row["verdict"], NOT_FOUND)
    self.assertIn("Read in part; quoted verbatim", row["finding"])
    self.assertIn("Read in full; quoted verbatim", _claim(DISAGREES, full_text=True).evaluate(None)["finding"])


class RenderingTest(absltest.TestCase):

  def test_each_verdict_is_rendered_in_its_row(self):
    claims = [_claim(v) for v in verdicts.CITATION_VERDICTS]
    table = claim_table.markdown_table([c.evaluate(None) for c in claims])
    self.assertTrue(table.startswith(claim_table.CITATION_LEGEND + "\n\n"))
    for verdict in verdicts.CITATION_VERDICTS:
      self.assertIn(f"**{verdict}**", claim_table.CITATION_LEGEND)
    self.assertEqual([_verdict_cell(table, c) for c in claims], [f"**{v}**" for v in verdicts.CITATION_VERDICTS])
    self.assertIn(claim_table.CITATION_LEGEND, claim_table.readme_markdown(
        [claims[2].evaluate(None)], claim_table.Context()))

  def test_an_unknown_citation_verdict_is_refused(self):
    row = {**_claim(AGREES).evaluate(None), "verdict": "partly"}
    with self.assertRaisesRegex(ValueError, "citation verdict"):
      claim_table.markdown_table([row])

  def test_parts_are_rendered_with_their_verdicts(self):
    parts = (verdicts.CitationPart("the first half", DISAGREES, "The source says otherwise."),
             verdicts.CitationPart("the second half", AGREES, "The source says so."))
    row = _claim(DISAGREES, parts=parts).evaluate(None)
    self.assertIn("Part “the first half”: source disagrees. The source says otherwise. Part “the second half”: source "
                  "agrees. The source says so. Verdict of the claim: source disagrees", row["finding"])
    self.assertEqual([p["verdict"] for p in row["numbers"]["parts"]], [DISAGREES, AGREES])
    self.assertNotIn("Part “", _claim(DISAGREES).evaluate(None)["finding"])


class RowsTest(absltest.TestCase):

  def test_every_citation_names_what_was_read(self):
    for claim in citation_claims.CITATION_CLAIMS:
      self.assertTrue(claim.compared_with.strip(), claim.id)
      self.assertIn(claim.compared_with, claim.evaluate(None)["finding"], claim.id)
      # A row read in full says so in its own words; one read in part does not claim the full text.
      self.assertEqual("the full text" in claim.compared_with, claim.full_text, claim.id)

  def test_the_reviewed_citations_were_read_in_full(self):
    for claim_id in ("cite_vit_reference", "cite_xiong_ln_scaling", "cite_flashattention_overflow"):
      self.assertTrue(BY_ID[claim_id].full_text, claim_id)

  def test_both_halves_of_the_gpt3_claim_are_answered(self):
    claim = BY_ID["cite_gpt3_rmsnorm"]
    self.assertIn("other large models", claim.text)
    verdict_of = {p.text: p.verdict for p in claim.parts}
    self.assertEqual(verdict_of["GPT-3 uses RMSNorm rather than LayerNorm"], DISAGREES)
    self.assertEqual(verdict_of["other large models use RMSNorm"], AGREES)
    self.assertEqual(claim.verdict, verdicts.citation_verdict(list(verdict_of.values())))

  def test_parts_are_the_claims_words(self):
    for claim in citation_claims.CITATION_CLAIMS:
      for part in claim.parts:
        words = [w for w in part.text.replace(".", "").split() if len(w) > 3]
        missing = [w for w in words if w not in claim.text]
        self.assertLessEqual(len(missing), len(words) // 2, (claim.id, part.text, missing))


if __name__ == "__main__":
  absltest.main()
