"""The criteria's history read from the published page's git history, and the sizes printed beside training verdicts,
against pages and repositories written here by hand."""

import pathlib
import subprocess
import tempfile
import types

from absl.testing import absltest

from scaling.studies.claims import history
from scaling.studies.claims import table
from scaling.studies.grid import run as grid_run
from scaling.studies.claims.training import grid_sizes
from scaling.studies.claims.training.families import TRAINING_CLAIMS


def _page(run_commit: str, rows: list[tuple[str, str, str, str]]) -> str:
  """A page in the layout the claims tables have: a heading naming the run's commit, then (mode, id, criterion,
  verdict) rows."""
  lines = [f"Random-input claims (mode cpu_hour: d_k 16; run on commit {run_commit}, 2026-12-01):", "",
           "| claim | source | criterion | verdict | what we measured | reproduce |", "|---|---|---|---|---|---|"]
  for mode, claim_id, criterion, verdict in rows:
    lines.append(f"| A claim. | note 1 | {criterion}. Why: a reason \\| with a pipe | **{verdict}** | 1 \\| 2 | "
                 f"`python -m experiments.claims --mode={mode} --ids={claim_id} --text_file=shakespeare` |")
  return "\n".join(lines) + "\n\nCitation claims:\n\n| claim | source | checked against | verdict |\n|---|---|---|---|\n" \
      "| cited | note 2 | a paper | **source agrees** |\n"


class ParsePageTest(absltest.TestCase):

  def test_rows_by_mode_and_id_with_their_run(self):
    text = _page("abc1234", [("cpu_hour", "a", "x below 1: holds if < 1", "holds"),
                             ("full", "b", "y \\| z: holds if > 2", "partly")])
    parsed = history.parse_page(text, "p1", "2026-12-01")
    self.assertEqual(set(parsed), {("cpu_hour", "a"), ("cpu_hour", "b")})  # "full" is read as cpu_hour
    self.assertEqual(parsed[("cpu_hour", "a")],
                     history.Published("p1", "2026-12-01", "abc1234", "x below 1: holds if < 1", "holds"))
    self.assertEqual(parsed[("cpu_hour", "b")].criterion, "y | z: holds if > 2")
    self.assertEqual(parsed[("cpu_hour", "b")].verdict, "partly")

  def test_criterion_only_drops_reason_readings_and_history(self):
    self.assertEqual(history.criterion_only("c:  holds if < 1. Why: r. Beside, other: d"), "c: holds if < 1")
    self.assertEqual(history.criterion_only("c. Criterion history: unchanged"), "c")


class CriteriaHistoryTest(absltest.TestCase):

  VERSIONS = [("p1", "2026-12-01", _page("aaaa111", [("cpu_hour", "a", "old", "holds"), ("cpu_hour", "b", "same", "holds")])),
              ("p2", "2026-12-02", _page("bbbb222", [("cpu_hour", "a", "new", "partly"), ("cpu_hour", "b", "same", "holds")])),
              ("p3", "2026-12-03", _page("cccc333", [("cpu_hour", "a", "new", "partly"), ("cpu_hour", "b", "same", "holds"),
                                                ("quick", "c", "q", "holds")]))]

  def _rows(self, **criteria):
    return [{"id": i, "statistic": "s", "criterion": c} for i, c in criteria.items()]

  def test_changed_after_first_publication_is_marked(self):
    got = history.criteria_history(self._rows(a="new", b="same"), "cpu_hour", self.VERSIONS)
    self.assertTrue(got["a"]["changed_after_publication"])
    self.assertEqual(got["a"]["criterion_since"]["page_commit"], "p2")
    self.assertEqual((got["a"]["first_verdict"], got["a"]["first_criterion"]), ("holds", "old"))
    self.assertFalse(got["b"]["changed_after_publication"])
    self.assertEqual(got["b"]["criterion_since"]["page_commit"], "p1")
    text = history.history_text(got["a"])
    self.assertIn("unchanged since the page of commit p2 (2026-12-02; run on commit bbbb222)", text)
    self.assertIn("**changed after its verdict was first published**", text)
    self.assertIn("with verdict holds under: “old”", text)
    self.assertNotIn("changed after", history.history_text(got["b"]))
    self.assertTrue(got["a"]["thresholds_changed"])  # no thresholds to compare: never called unchanged

  def test_a_change_that_keeps_the_thresholds_says_so(self):
    versions = [("p1", "2026-12-01", _page("aaaa111", [("cpu_hour", "a", "x: holds if < 1, does not hold if > 2, "
                                                        "partly otherwise", "holds")]))]
    same = "x over seeds: holds if < 1, does not hold if > 2, partly otherwise; inconclusive if ..."
    moved = "x: holds if < 1.5, does not hold if > 2, partly otherwise"
    got = history.criteria_history(self._rows(a=same), "cpu_hour", versions)["a"]
    self.assertFalse(got["thresholds_changed"])
    self.assertIn("(its thresholds unchanged, first published in", history.history_text(got))
    got = history.criteria_history(self._rows(a=moved), "cpu_hour", versions)["a"]
    self.assertTrue(got["thresholds_changed"])
    self.assertNotIn("thresholds unchanged", history.history_text(got))
    self.assertEqual(history.thresholds("a: holds if >= 0.5, does not hold if < 0.1, partly otherwise; b: holds if "
                                        "> 1.5, does not hold if < 0.5, partly otherwise"),
                     ["holds if >= 0.5, does not hold if < 0.1", "holds if > 1.5, does not hold if < 0.5"])

  def test_a_criterion_changed_since_the_last_page_is_new(self):
    got = history.criteria_history(self._rows(a="newer", b="same"), "cpu_hour", self.VERSIONS)
    self.assertIsNone(got["a"]["criterion_since"])
    self.assertIn("changed since the last published page", history.history_text(got["a"]))

  def test_unpublished_mode_or_no_history(self):
    got = history.criteria_history(self._rows(c="q"), "cpu_hour", self.VERSIONS)
    self.assertIn("first published here", history.history_text(got["c"]))
    got = history.criteria_history(self._rows(c="q"), "quick", self.VERSIONS)
    self.assertEqual(got["c"]["criterion_since"]["page_commit"], "p3")
    got = history.criteria_history(self._rows(a="x"), "cpu_hour", None)
    self.assertIn("not available", history.history_text(got["a"]))
    cited = [{"id": "cite", "statistic": None, "criterion": "checked"}]
    self.assertEqual(history.criteria_history(cited, "cpu_hour", self.VERSIONS), {})

  def test_versions_from_a_git_repository(self):
    with tempfile.TemporaryDirectory() as d:
      git = lambda *a: subprocess.run(["git", "-C", d, *a], check=True, capture_output=True)
      git("init", "-q")
      git("config", "user.email", "a@b.c")
      git("config", "user.name", "a")
      page = pathlib.Path(d) / "docs" / "claims.md"
      page.parent.mkdir()
      for _, _, text in self.VERSIONS[:2]:
        page.write_text(text)
        git("add", "docs/claims.md")
        git("commit", "-q", "-m", "page")
      versions = history.page_versions(d)
      self.assertLen(versions, 2)
      self.assertEqual([t for _, _, t in versions], [t for _, _, t in self.VERSIONS[:2]])
      got = history.criteria_history(self._rows(a="new"), "cpu_hour", versions)
      self.assertEqual(got["a"]["criterion_since"]["page_commit"], versions[1][0])
      self.assertIsNone(history.page_versions(pathlib.Path(d) / "docs"))  # not the checkout's top
      self.assertIsNone(history.page_versions(tempfile.gettempdir()))

  def test_the_table_shows_the_history_in_the_criterion_cell(self):
    row = {"id": "a", "kind": "measured", "claim": "c", "source": "s", "criterion": "crit", "reason": "r",
           "verdict": "holds", "finding": "f", "command": "cmd",
           "criterion_history": history.criteria_history(self._rows(a="new"), "cpu_hour", self.VERSIONS)["a"]}
    self.assertIn("crit. Why: r. Criterion history: unchanged since the page of commit p2",
                  table.markdown_table([row]))


class GridSizesTest(absltest.TestCase):

  def test_sizes_of_each_training_claim_are_its_grids(self):
    ctx = types.SimpleNamespace(mode="test", seed=0, num_seeds=2, text_file=None, planner=grid_run.GridPlanner())
    for claim in TRAINING_CLAIMS:
      specs = list(claim.grids(ctx).values())
      sizes = grid_sizes.grid_sizes(specs)
      self.assertEqual(set(sizes["depth"]), {s.model_config.depth for s in specs}, claim.id)
      self.assertEqual(sizes["seeds"], max(len(s.seeds) for s in specs), claim.id)
      text = grid_sizes.sizes_text(sizes)
      self.assertIn(f"d_k {specs[0].model_config.head_dim}", text)
      self.assertIn(f"{specs[0].opt_config.steps} steps", text)

  def test_words(self):
    sizes = {"width": [64, 128], "head_dim": [32], "depth": [2, 6, 12], "steps": [300], "dtype": ["float32"],
             "seeds": 1, "swept": ["5 learning rates"]}
    self.assertEqual(grid_sizes.sizes_text(sizes),
                     "width 64 and 128, d_k 32, depth 2, 6 and 12, 300 steps, float32, 1 seed, 5 learning rates "
                     "(declared; a grid whose optimum sits at its edge is widened)")
    with self.assertRaisesRegex(ValueError, "at least one grid"):
      grid_sizes.grid_sizes([])
    with self.assertRaisesRegex(ValueError, "GridSpecs"):
      grid_sizes.grid_sizes([object()])

  def test_a_training_verdict_cell_states_its_sizes(self):
    row = {"id": "t", "kind": "measured", "claim": "c", "source": "s", "criterion": "crit", "verdict": "holds",
           "finding": "f", "command": "cmd", "sizes": {"width": [64], "head_dim": [32], "depth": [6], "steps": [300],
                                                      "dtype": ["float32"], "seeds": 3, "swept": ["5 learning rates"]}}
    self.assertIn("| **holds** at width 64, d_k 32, depth 6, 300 steps, float32, 3 seeds, 5 learning rates",
                  table.markdown_table([row]))


if __name__ == "__main__":
  absltest.main()
