"""Citation claims: the four verdicts, how a claim with parts gets its verdict, and how each verdict is rendered."""

import dataclasses
import itertools
import re

from absl.testing import absltest

from scaling.studies.claims import citations as citation_claims
from scaling.studies.claims import study as claims
from scaling.studies.claims import table as claim_table
from scaling.studies.claims import verdicts
from scaling.base.validation import ConfigError

AGREES, CONTRADICTS = verdicts.SOURCE_AGREES, verdicts.SOURCE_CONTRADICTS
NOT_STATED, NOT_FOUND = verdicts.NOT_STATED, verdicts.NOT_IN_PASSAGE
BY_ID = {c.id: c for c in citation_claims.CITATION_CLAIMS}


def _claim(verdict, full_text=None, parts=()):
  """A citation claim with the given verdict (the rest taken from a real row); read in full only where the verdict
  needs it (``NOT_STATED``) unless ``full_text`` says otherwise."""
  full_text = verdict == NOT_STATED if full_text is None else full_text
  return dataclasses.replace(BY_ID["cite_vaswani_motivation"], id=f"cite_{verdict.replace(' ', '_')}",
                             text=f"A claim whose source's verdict is {verdict}.", verdict=verdict,
                             full_text=full_text, parts=parts)


def _verdict_cell(table, claim):
  """The verdict cell of ``claim``'s row in a rendered table."""
  line = next(l for l in table.splitlines() if l.startswith(f"| {claim.text} |"))
  return line.split(" | ")[3]


def _parts(*verdict_list):
  return tuple(verdicts.CitationPart(f"part {i}", v, "e") for i, v in enumerate(verdict_list))


class VocabularyTest(absltest.TestCase):

  def test_four_verdicts(self):
    self.assertEqual(verdicts.CITATION_VERDICTS, ("source agrees", "source contradicts", "not stated in the source",
                                                  "not found in the passage checked"))

  def test_parts_rule_against_a_ranking(self):
    # Independent formulation: rank agrees < not found in the passage < not stated < contradicts; a claim takes its
    # worst part's verdict.
    rank = {AGREES: 0, NOT_FOUND: 1, NOT_STATED: 2, CONTRADICTS: 3}
    reached = set()
    for n in (1, 2, 3):
      for combo in itertools.product(verdicts.CITATION_VERDICTS, repeat=n):
        got = verdicts.citation_verdict(combo)
        self.assertEqual(got, max(combo, key=rank.get), combo)
        reached.add(got)
    self.assertEqual(reached, set(verdicts.CITATION_VERDICTS))

  def test_parts_rule_by_hand(self):
    for combo, expected in (((AGREES, AGREES), AGREES), ((AGREES, NOT_STATED), NOT_STATED),
                            ((AGREES, NOT_FOUND), NOT_FOUND), ((NOT_FOUND, NOT_STATED), NOT_STATED),
                            ((NOT_STATED, CONTRADICTS), CONTRADICTS), ((AGREES, CONTRADICTS), CONTRADICTS),
                            ((NOT_STATED,), NOT_STATED), ((NOT_FOUND, NOT_FOUND), NOT_FOUND)):
      self.assertEqual(verdicts.citation_verdict(combo), expected, combo)

  def test_silence_never_makes_a_contradiction(self):
    for n in (1, 2, 3):
      for combo in itertools.product((AGREES, NOT_STATED, NOT_FOUND), repeat=n):
        self.assertNotEqual(verdicts.citation_verdict(combo), CONTRADICTS, combo)

  def test_bad_part_verdicts(self):
    for bad in ((), "source agrees", ("source agrees", "partly"), ("source disagrees",)):
      with self.assertRaises(ConfigError):
        verdicts.citation_verdict(bad)
    with self.assertRaisesRegex(ConfigError, "verdict: unknown 'partly'"):
      verdicts.CitationPart("x", "partly", "y")

  def test_a_claim_verdict_must_be_known_and_follow_its_parts(self):
    with self.assertRaisesRegex(ConfigError, "is not one of"):
      _claim("holds")
    with self.assertRaisesRegex(ConfigError, "is not one of"):
      _claim("source disagrees")
    with self.assertRaisesRegex(ConfigError, "does not follow from its parts"):
      _claim(AGREES, parts=_parts(AGREES, CONTRADICTS))
    with self.assertRaisesRegex(ConfigError, "does not follow from its parts"):
      _claim(CONTRADICTS, full_text=True, parts=_parts(AGREES, NOT_STATED))
    self.assertEqual(_claim(CONTRADICTS, parts=_parts(AGREES, CONTRADICTS)).verdict, CONTRADICTS)
    self.assertEqual(_claim(NOT_STATED, parts=_parts(AGREES, NOT_STATED)).verdict, NOT_STATED)

  def test_not_found_needs_a_partial_reading(self):
    with self.assertRaisesRegex(ConfigError, "needs a partial reading"):
      _claim(NOT_FOUND, full_text=True)
    row = _claim(NOT_FOUND).evaluate(None)
    self.assertEqual(row["verdict"], NOT_FOUND)
    self.assertIn("Read in part; quoted verbatim", row["finding"])
    self.assertIn("Read in full; quoted verbatim", _claim(CONTRADICTS, full_text=True).evaluate(None)["finding"])

  def test_not_stated_needs_the_full_text(self):
    with self.assertRaisesRegex(ConfigError, "needs the full text read"):
      _claim(NOT_STATED, full_text=False)
    row = _claim(NOT_STATED).evaluate(None)
    self.assertEqual(row["verdict"], NOT_STATED)
    self.assertIn("Read in full; quoted verbatim", row["finding"])


class RenderingTest(absltest.TestCase):

  def test_each_verdict_is_rendered_in_its_row(self):
    claims_ = [_claim(v) for v in verdicts.CITATION_VERDICTS]
    table = claim_table.markdown_table([c.evaluate(None) for c in claims_])
    self.assertTrue(table.startswith(claim_table.CITATION_LEGEND + "\n\n"))
    for verdict in verdicts.CITATION_VERDICTS:
      self.assertIn(f"**{verdict}**", claim_table.CITATION_LEGEND)
    self.assertEqual([_verdict_cell(table, c) for c in claims_], [f"**{v}**" for v in verdicts.CITATION_VERDICTS])
    self.assertIn(claim_table.CITATION_LEGEND, claim_table.readme_markdown(
        [claims_[2].evaluate(None)], claim_table.Context()))

  def test_an_unknown_citation_verdict_is_refused(self):
    for bad in ("partly", "source disagrees"):
      row = {**_claim(AGREES).evaluate(None), "verdict": bad}
      with self.assertRaisesRegex(ValueError, "citation verdict"):
        claim_table.markdown_table([row])

  def test_parts_are_rendered_with_their_verdicts(self):
    parts = (verdicts.CitationPart("the first half", CONTRADICTS, "The source says otherwise."),
             verdicts.CitationPart("the second half", NOT_STATED, "The source is silent."))
    row = _claim(CONTRADICTS, full_text=True, parts=parts).evaluate(None)
    self.assertIn("Part “the first half”: source contradicts. The source says otherwise. Part “the second half”: not "
                  "stated in the source. The source is silent. Verdict of the claim: source contradicts",
                  row["finding"])
    self.assertEqual([p["verdict"] for p in row["numbers"]["parts"]], [CONTRADICTS, NOT_STATED])
    self.assertNotIn("Part “", _claim(CONTRADICTS).evaluate(None)["finding"])


class RowsTest(absltest.TestCase):

  def test_every_citation_names_what_was_read(self):
    for claim in citation_claims.CITATION_CLAIMS:
      self.assertTrue(claim.compared_with.strip(), claim.id)
      self.assertIn(claim.compared_with, claim.evaluate(None)["finding"], claim.id)
      # A row read in full says so in its own words; one read in part does not claim the full text.
      self.assertEqual("the full text" in claim.compared_with, claim.full_text, claim.id)

  def test_the_reviewed_citations_were_read_in_full(self):
    for claim_id in ("cite_vit_reference", "cite_xiong_ln_scaling", "cite_flashattention_overflow",
                     "cite_roformer_rope_scaling"):
      self.assertTrue(BY_ID[claim_id].full_text, claim_id)

  def test_silence_is_judged_not_stated(self):
    # Where the whole source is silent on what the note credits it with, the verdict is "not stated", not
    # "contradicts"; a contradiction stands only where the source says otherwise.
    part_of = lambda claim_id: {p.text: p.verdict for p in BY_ID[claim_id].parts}
    self.assertEqual(BY_ID["cite_xiong_ln_scaling"].verdict, NOT_STATED)
    self.assertEqual(part_of("cite_flashattention_overflow"), {
        "FlashAttention is an online-softmax implementation": AGREES,
        "that solves overflow in low precision": NOT_STATED})
    self.assertEqual(BY_ID["cite_flashattention_overflow"].verdict, NOT_STATED)
    self.assertEqual(part_of("cite_vit_reference"), {
        "by Dosovitskiy et al.": CONTRADICTS,
        "discusses the effect of the scaling factor on ViT's training stability": NOT_STATED})
    self.assertEqual(BY_ID["cite_vit_reference"].verdict, CONTRADICTS)  # decided by the authorship part
    self.assertIn("authorship part decides", BY_ID["cite_vit_reference"].check)
    self.assertEqual(BY_ID["cite_t5_fixed_sqrt"].verdict, CONTRADICTS)
    self.assertEqual(part_of("cite_t5_fixed_sqrt")["Many models (such as T5) keep the fixed √d_k"], CONTRADICTS)

  def test_evidence_of_silence_is_never_a_contradiction(self):
    for claim in citation_claims.CITATION_CLAIMS:
      for part in claim.parts:
        if part.evidence.startswith("Silent"):
          self.assertIn(part.verdict, (NOT_STATED, NOT_FOUND), (claim.id, part.text))
      if claim.check.startswith("Silent"):
        self.assertIn(claim.verdict, (NOT_STATED, NOT_FOUND), claim.id)

  def test_both_halves_of_the_gpt3_claim_are_answered(self):
    claim = BY_ID["cite_gpt3_rmsnorm"]
    self.assertIn("other large models", claim.text)
    verdict_of = {p.text: p.verdict for p in claim.parts}
    self.assertEqual(verdict_of["GPT-3 uses RMSNorm rather than LayerNorm"], CONTRADICTS)
    self.assertEqual(verdict_of["other large models use RMSNorm"], AGREES)
    self.assertEqual(claim.verdict, verdicts.citation_verdict(list(verdict_of.values())))

  def test_roformer_is_informed_by_a_supporting_measurement(self):
    cited = BY_ID["cite_roformer_rope_scaling"]
    self.assertEqual(cited.verdict, NOT_STATED)
    self.assertEqual([p.verdict for p in cited.parts], [AGREES, NOT_STATED])
    measured = {c.id: c for c in claims.all_claims()}["rope_compatible_with_sqrt"]
    self.assertEqual(measured.kind, verdicts.SUPPORTING)
    self.assertEqual(measured.supports, ("cite_roformer_rope_scaling",))
    self.assertNotIn("RoFormer's", measured.text)  # our statement, not the note's words

  def test_every_supported_id_exists(self):
    ids = {c.id for c in claims.all_claims()}
    for claim in claims.all_claims():
      self.assertContainsSubset(getattr(claim, "supports", ()), ids, claim.id)

  def test_head_dim_row_against_the_quoted_gpt3_table(self):
    # The GPT-3 rows of the passage, re-read independently: n_params, n_layers, d_model, n_heads, d_head.
    claim = BY_ID["cite_head_dim_64_or_128"]
    rows = [tuple(int(x) for x in m.groups()) for m in
            re.finditer(r"\d[\d.]*[MB] (\d+) (\d+) (\d+) (\d+)(?= …|$)", claim.passage)]
    self.assertLen(rows, 8)
    d_model, d_head = [r[1] for r in rows], [r[3] for r in rows]
    self.assertEqual(sorted(d_model), d_model)  # the table runs from the smallest model to the largest
    self.assertEqual((d_head[0], d_head[-1]), (64, 128))  # d_head doubles from the smallest to the largest
    self.assertEqual(sum(d == h * k for _, d, h, k in rows), 6)  # XL and 13B, as printed, break d = h·d_head
    self.assertEqual(sum(k in (64, 128) for k in d_head), 6)
    verdict_of = {p.text: p.verdict for p in claim.parts}
    self.assertEqual(verdict_of["d_k = 64 or 128"], AGREES)
    self.assertEqual(verdict_of["d_k is typically kept constant while d = h·d_k grows with the head count h"],
                     CONTRADICTS)
    self.assertEqual(claim.verdict, CONTRADICTS)
    self.assertFalse(claim.full_text)

  def test_parts_are_the_claims_words(self):
    for claim in citation_claims.CITATION_CLAIMS:
      for part in claim.parts:
        words = [w for w in part.text.replace(".", "").split() if len(w) > 3]
        missing = [w for w in words if w not in claim.text]
        self.assertLessEqual(len(missing), len(words) // 2, (claim.id, part.text, missing))


if __name__ == "__main__":
  absltest.main()
