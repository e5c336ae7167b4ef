"""The claims not measurable here: their rows, their table and how the README headline counts them, and the premises
that keep the extreme-token claim out of reach (no pretrained weights, character vocabularies, short sequences)."""

import pathlib
import re

from absl.testing import absltest

import scaling
from scaling.runs import report
from scaling.studies.claims import table as claim_table
from scaling.studies.claims import study as claims
from scaling.studies.claims import unmeasurable as unmeasurable_claims
from scaling.studies.claims import verdicts
from scaling.studies.claims.context import MODES
from scaling.studies.claims.training.sizes import SIZES
from scaling.training.data import text_corpus

BY_ID = {c.id: c for c in unmeasurable_claims.UNMEASURABLE_CLAIMS}
WEIGHT_SUFFIXES = {".safetensors", ".bin", ".ckpt", ".pt", ".pth", ".npz", ".npy", ".h5", ".msgpack", ".onnx",
                   ".gguf", ".pkl"}


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


class ExtremeTokensTest(absltest.TestCase):
  """note 2 §2.3's extreme tokens (separators, the ends of long sequences): why no row here can measure them."""

  def test_row_names_what_it_would_need_and_the_outlier_rows(self):
    claim = BY_ID["extreme_tokens_are_separators_and_ends"]
    self.assertEqual(claim.source, "note 2 §2.3")
    for words in ("pretrained language model", "separator tokens", "first and last positions", "per layer, head and "
                  "token position"):
      self.assertIn(words, claim.would_need)
    self.assertEqual(claim.related, ("low_precision_nan_even_scaled", "nan_gradient_explosion", "clamp_before_scale",
                                     "online_softmax_mitigates"))
    row = claim.evaluate(None)
    self.assertEqual(row["verdict"], verdicts.NOT_MEASURABLE)
    self.assertIn("low_precision_nan_even_scaled", row["finding"])

  def test_no_pretrained_weights_ship_or_load(self):
    package = pathlib.Path(scaling.__file__).parent
    weights = [p for p in package.rglob("*") if p.suffix in WEIGHT_SUFFIXES]
    self.assertEqual(weights, [])
    loading = re.compile(r"from_pretrained\(|^\s*(import|from) (transformers|huggingface_hub)\b|hf_hub_download",
                         re.MULTILINE)
    loaders = [p for p in package.rglob("*.py") if loading.search(p.read_text(encoding="utf-8"))]
    self.assertEqual(loaders, [])
    self.assertTrue(loading.search("model = GPT2LMHeadModel.from_pretrained(name)"))  # the pattern can find one

  def test_sequences_are_at_most_256_and_the_vocabulary_is_characters(self):
    self.assertLessEqual(max(size["seq_len"] for size in SIZES.values()), 256)
    self.assertLessEqual(max(mode["seq_len"] for mode in MODES.values()), 256)
    self.assertIn("at most 256 characters", BY_ID["extreme_tokens_are_separators_and_ends"].why)
    text = text_corpus.load_text(text_corpus.corpus_path("shakespeare"))
    vocab = text_corpus.build_vocab(text)
    self.assertEqual({len(v) for v in vocab}, {1})  # single characters: no [SEP]-like token exists
    self.assertLess(len(vocab), 128)


if __name__ == "__main__":
  absltest.main()
