"""README.md and docs/: generated sections where the map says, working snippets, links that resolve."""

import contextlib
import io
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap

from absl.testing import absltest
import pytest

from scaling.runs import report

import experiment_main

ROOT = pathlib.Path(__file__).resolve().parents[1]
MARKER = re.compile(r"<!-- (BEGIN|END) generated: ([^ ]+) -->")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


def doc_files(root: pathlib.Path = ROOT) -> list[pathlib.Path]:
  """README.md and every docs/*.md."""
  return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def markers(text: str) -> list[tuple[str, str]]:
  """(BEGIN|END, name) of every marker in ``text``, in order."""
  return MARKER.findall(text)


def slug(heading: str) -> str:
  """GitHub's anchor of a Markdown heading."""
  return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: pathlib.Path) -> set[str]:
  """The anchors of a Markdown file's headings (outside code blocks)."""
  text = re.sub(r"^```.*?^```$", "", path.read_text(), flags=re.S | re.M)
  return {slug(m) for m in re.findall(r"^#+ (.*)$", text, flags=re.M)}


def load_update_readme():
  """scripts/update_readme.py as a module."""
  return experiment_main.load_script("update_readme")


class GeneratedSectionsTest(absltest.TestCase):

  def test_every_section_of_the_map_is_once_in_its_file_and_nowhere_else(self):
    texts = {p.relative_to(ROOT).as_posix(): p.read_text() for p in doc_files()}
    for name, where in report.GENERATED_SECTIONS.items():
      self.assertIn(where, texts, f"section {name!r}: {where} is not README.md or a docs page")
      for path, text in texts.items():
        found = [kind for kind, n in markers(text) if n == name]
        expected = ["BEGIN", "END"] if path == where else []
        self.assertEqual(found, expected, f"section {name!r} in {path}")

  def test_every_marker_in_the_docs_is_in_the_map(self):
    for path in doc_files():
      for kind, name in markers(path.read_text()):
        self.assertIn(name, report.GENERATED_SECTIONS, f"{path.name}: {kind} marker of unmapped section {name!r}")

  def test_no_line_of_prose_is_over_200_characters(self):
    for path in doc_files():
      inside = False
      for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith("<!-- BEGIN generated:"):
          inside = True
        elif line.startswith("<!-- END generated:"):
          inside = False
        elif not inside:
          self.assertLessEqual(len(line), 200, f"{path.name}:{number}")

  def test_readme_starts_with_the_install_and_test_commands(self):
    first_block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    lines = first_block.splitlines()
    self.assertTrue(lines[0].startswith("pip install -e . && python -m experiments.sweep"))
    self.assertTrue(lines[1].startswith('pip install -e ".[test]" && pytest -q'))
    self.assertIn("pytest -q", (ROOT / ".ci" / "run").read_text())

  def test_every_page_starts_with_a_command(self):
    for path in sorted((ROOT / "docs").glob("*.md")):
      lines = path.read_text().splitlines()
      self.assertTrue(lines[0].startswith("# "), path.name)
      self.assertEqual(lines[2], "```bash", f"{path.name}: the regenerating command comes right after the title")


class LinksTest(absltest.TestCase):

  def test_every_relative_link_points_to_an_existing_file_and_heading(self):
    for path in doc_files():
      text = re.sub(r"^```.*?^```$", "", path.read_text(), flags=re.S | re.M)
      for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
          continue
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        self.assertTrue(resolved.is_file(), f"{path.name}: link {target!r} -> {resolved} does not exist")
        if anchor and resolved.suffix == ".md":
          self.assertIn(anchor, anchors(resolved), f"{path.name}: link {target!r}: no such heading")

  def test_every_docs_page_is_linked_from_the_readme(self):
    readme = (ROOT / "README.md").read_text()
    for path in sorted((ROOT / "docs").glob("*.md")):
      self.assertIn(f"](docs/{path.name})", readme, path.name)

  def test_the_link_check_sees_a_broken_link(self):
    self.assertEqual(LINK.findall("see [a](docs/nope.md#x) and ![b](c.png)"), ["docs/nope.md#x", "c.png"])
    self.assertEqual(slug("u-μP: unit scale and learning-rate transfer"), "u-μp-unit-scale-and-learning-rate-transfer")


def python_blocks() -> tuple[list[str], list[str]]:
  """(short, examples): the ```python blocks of README.md and docs/ but the recipes (a block right after
  "<!-- recipe: NAME -->" runs in tests/test_recipes.py, which skips the one whose library is missing), split into
  the examples whose printed output and run time the page shows (``scripts/run_doc_block.py NAME`` fills the
  generated section after them: whole studies, run in the slow group) and the rest."""
  run_doc_block = experiment_main.load_script("run_doc_block")
  short, examples = [], []
  for path in doc_files():
    text = path.read_text()
    shown = [name for kind, name in markers(text)
             if kind == "BEGIN" and f"`python scripts/run_doc_block.py {name}`" in text]
    example_code = {run_doc_block.block_before(text, name) for name in shown}
    for code in PYTHON_BLOCK.findall(run_doc_block.without_recipes(text)):
      (examples if code in example_code else short).append(code)
  return short, examples


def run_blocks(test: absltest.TestCase, blocks: list[str]) -> None:
  """Runs ``blocks`` one after another in a fresh interpreter in an empty folder, as a reader would; fails with
  every block's traceback."""
  driver = textwrap.dedent("""
      import json, sys, traceback
      failures = []
      for i, code in enumerate(json.load(sys.stdin)):
        try:
          exec(compile(code, f"<python block {i} of README.md and docs/>", "exec"), {"__name__": "__readme__"})
        except Exception:
          failures.append(traceback.format_exc())
      sys.stderr.write("\\n".join(failures))
      sys.exit(1 if failures else 0)
      """)
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
  with tempfile.TemporaryDirectory() as tmp:
    done = subprocess.run([sys.executable, "-c", driver], input=json.dumps(blocks), capture_output=True, text=True,
                          cwd=tmp, env=env, timeout=900, check=False)
  test.assertEqual(done.returncode, 0, done.stderr)


@pytest.mark.slow  # the blocks run in a Python process of their own, as a reader runs them
class ReadmeSnippetsTest(absltest.TestCase):

  def test_every_short_python_block_of_the_readme_and_the_docs_runs(self):
    self.assertGreaterEqual(len(PYTHON_BLOCK.findall((ROOT / "README.md").read_text())), 4)
    short, examples = python_blocks()
    self.assertNotEmpty(examples)  # the first example of docs/your_model.md shows its output
    run_blocks(self, short)


@pytest.mark.slow
class ExampleBlocksTest(absltest.TestCase):

  def test_every_example_whose_output_a_page_shows_runs(self):
    _, examples = python_blocks()
    self.assertNotEmpty(examples)
    run_blocks(self, examples)


class UpdateReadmeTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.root = pathlib.Path(self.create_tempdir().full_path)
    shutil.copy(ROOT / "README.md", self.root / "README.md")
    shutil.copytree(ROOT / "docs", self.root / "docs", ignore=shutil.ignore_patterns("*.png"))
    self.before = {p.relative_to(self.root): p.read_bytes() for p in self.root.rglob("*.md")}
    self.script = load_update_readme()

  def _source(self, text: str) -> str:
    path = self.root / "new.txt"
    path.write_text(text)
    return str(path)

  @pytest.mark.slow  # the script in a process of its own
  def test_unknown_name_exits_2_with_one_line(self):
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "update_readme.py"), "no_such_section",
                           self._source("x")], capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    self.assertEqual(done.returncode, 2)
    self.assertEqual(len(done.stderr.splitlines()), 1, done.stderr)
    self.assertIn("no_such_section", done.stderr)
    self.assertEqual(done.stdout, "")

  def test_usage_error_exits_2(self):
    self.assertEqual(self.script.main(["update_readme.py", "claims"], root=self.root), 2)

  def test_content_lands_in_the_section_of_its_file_and_nothing_else_changes(self):
    name, where = "coord_check_depth", pathlib.Path("docs/coord_check.md")
    self.assertEqual(self.script.main(["update_readme.py", name, self._source("| new | table |\n")], root=self.root), 0)
    after = {p.relative_to(self.root): p.read_bytes() for p in self.root.rglob("*.md")}
    self.assertEqual({p for p in after if after[p] != self.before.get(p)}, {where})
    old, new = self.before[where].decode(), after[where].decode()
    begin, end = f"<!-- BEGIN generated: {name} -->", f"<!-- END generated: {name} -->"
    self.assertEqual(new.split(begin)[0], old.split(begin)[0])
    self.assertEqual(new.split(end)[1], old.split(end)[1])
    self.assertEqual(new.split(begin)[1].split(end)[0], "\n| new | table |\n")

  def test_readme_section_lands_in_the_readme(self):
    self.assertEqual(self.script.main(["update_readme.py", "headline", self._source("- counted\n")], root=self.root), 0)
    text = (self.root / "README.md").read_text()
    self.assertIn("<!-- BEGIN generated: headline -->\n- counted\n<!-- END generated: headline -->", text)

  def test_explicit_target(self):
    other = self.root / "other.md"
    other.write_text("a\n<!-- BEGIN generated: t -->\nold\n<!-- END generated: t -->\nb\n")
    self.assertEqual(self.script.main(["update_readme.py", "t", self._source("new"), str(other)], root=self.root), 0)
    self.assertEqual(other.read_text(), "a\n<!-- BEGIN generated: t -->\nnew\n<!-- END generated: t -->\nb\n")
    after = {p.relative_to(self.root): p.read_bytes() for p in self.root.rglob("*.md") if p != other}
    self.assertEqual(after, self.before)

  def test_relative_target(self):
    other = self.root / "other.md"
    other.write_text("<!-- BEGIN generated: t -->\nold\n<!-- END generated: t -->\n")
    cwd = os.getcwd()
    os.chdir(self.root)
    self.addCleanup(os.chdir, cwd)
    self.assertEqual(self.script.main(["update_readme.py", "t", self._source("new"), "other.md"], root=self.root), 0)
    self.assertEqual(other.read_text(), "<!-- BEGIN generated: t -->\nnew\n<!-- END generated: t -->\n")

  def test_missing_source_exits_2(self):
    self.assertEqual(self.script.main(["update_readme.py", "claims", str(self.root / "absent.md")], root=self.root), 2)
    after = {p.relative_to(self.root): p.read_bytes() for p in self.root.rglob("*.md")}
    self.assertEqual(after, self.before)

  def test_update_generated_rejects_bad_input(self):
    with self.assertRaisesRegex(ValueError, "unknown generated section 'nope'"):
      report.update_generated(self.root, "nope", "x")
    with self.assertRaisesRegex(TypeError, "name"):
      report.update_generated(self.root, None, "x")
    with self.assertRaisesRegex(TypeError, "content"):
      report.update_generated(self.root, "claims", None)


def _row(claim_id: str, verdict: str, value: float, claim: str = "A claim.") -> dict:
  return {"id": claim_id, "claim": claim, "verdict": verdict, "statistic": "stat", "value": value,
          "criterion": "the statistic in words: holds if < 0.05, does not hold if > 0.2, partly otherwise"}


class HeadlineTest(absltest.TestCase):

  ROWS = [_row("variance_is_dk", "holds", 0.00512, "Var(q·k) = d_k."),
          _row("gradients_vanish", "does not hold", 35.7, "Gradients vanish."),
          _row("d64_magnitudes", "partly", 0.0033),
          _row("train_mup_lr_transfer", "holds", 0.43, "μP transfers."),
          _row("not_a_headline_claim", "holds", 1.0)]
  CONFIG = {"config": {"mode": "full", "text_file": "data/t.txt"}, "sizes": {}}

  def test_counts_and_one_line_answers(self):
    text = report.claims_headline(self.ROWS, self.CONFIG)
    lines = text.splitlines()
    self.assertEqual(lines[0], "5 claims of the notes measured by `python -m experiments.claims` (mode full, training "
                     "claims on text file `data/t.txt`); verdicts: holds **3**, does not hold **1**, partly **1**.")
    self.assertIn("Criterion: a claim's verdict is its declared criterion", lines[1])
    answers = [l for l in lines if l.startswith("- ")]
    self.assertEqual(answers, ["- **holds**: Var(q·k) = d_k.", "- **does not hold**: Gradients vanish.",
                               "- **holds**: μP transfers."])
    self.assertIn("  (`stat` = 0.00512; holds if < 0.05, does not hold if > 0.2)", lines)
    self.assertIn("  (`stat` = 35.7; holds if < 0.05, does not hold if > 0.2)", lines)
    self.assertTrue(all(len(l) <= 200 for l in lines))

  def test_training_criteria_quoted_in_short_with_their_inconclusive_clauses(self):
    from scaling.studies.claims import verdicts  # pylint: disable=g-import-not-at-top
    criterion = verdicts.Criterion("stat", "the statistic at the best rate", (">", 0.8), ("<", 0.2), noise=True,
                                   edge="at_edge")
    row = {**_row("variance_is_dk", "holds", 0.9), "criterion": criterion.text}
    lines = report.claims_headline([row], self.CONFIG).splitlines()
    self.assertIn("  (`stat` = 0.9; holds if > 0.8, does not hold if < 0.2; inconclusive within 2 standard errors; "
                  "inconclusive at a grid edge)", lines)
    plain = {**row, "criterion": verdicts.Criterion("stat", "the statistic", ("<", 1.0), (">", 2.0), noise=True).text}
    self.assertIn("  (`stat` = 0.9; holds if < 1, does not hold if > 2; inconclusive within 2 standard errors)",
                  report.claims_headline([plain], self.CONFIG).splitlines())

  def test_citations_and_supporting_measurements_counted_apart_from_measured_claims(self):
    cited = {**_row("cite_x", "source contradicts", float("nan")), "kind": "checked against the source"}
    supporting = {**_row("train_x", "holds", 0.5), "kind": "supporting measurement"}
    text = report.claims_headline([*self.ROWS, cited, supporting], self.CONFIG)
    self.assertIn("5 claims of the notes measured", text)
    self.assertIn("partly **1**; 1 supporting measurements (no claim of the notes) beside them; 1 factual citations "
                  "checked against their sources: source contradicts **1**.", text)

  def test_synthetic_task_and_not_measured(self):
    rows = [_row("variance_is_dk", "not measured", float("nan"))]
    text = report.claims_headline(rows, {"config": {"mode": "quick", "text_file": None}})
    self.assertIn("(mode quick, training claims on the built-in synthetic task); verdicts: not measured **1**.", text)
    self.assertIn("(`stat` = NaN;", text)

  def test_rejects_bad_input(self):
    with self.assertRaisesRegex(ValueError, "rows"):
      report.claims_headline([], self.CONFIG)
    with self.assertRaisesRegex(ValueError, "rows: a row lacks verdict"):
      report.claims_headline([{k: v for k, v in self.ROWS[0].items() if k != "verdict"}], self.CONFIG)
    with self.assertRaisesRegex(ValueError, "has no verdict"):
      report.claims_headline([_row("x", "", 1.0)], self.CONFIG)
    with self.assertRaisesRegex(ValueError, "config"):
      report.claims_headline(self.ROWS, {"mode": "full"})

  @pytest.mark.slow  # the script in a process of its own
  def test_headline_script_reads_a_claims_folder(self):
    folder = pathlib.Path(self.create_tempdir().full_path)
    (folder / "claims.jsonl").write_text("".join(json.dumps(r) + "\n" for r in self.ROWS))
    (folder / "config.json").write_text(json.dumps(self.CONFIG))
    out = folder / "headline.md"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "headline.py"), str(folder), str(out)],
                          capture_output=True, text=True, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    self.assertEqual(done.returncode, 0, done.stderr)
    self.assertIn("verdicts: holds **3**, does not hold **1**, partly **1**.", out.read_text())
    # A missing folder: the script's main in this process (the command's exit code is main's, as run above).
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
      code = experiment_main.load_script("headline").main(["headline.py", str(folder / "no"), str(out)])
    self.assertEqual((code, len(stderr.getvalue().splitlines()), stdout.getvalue()), (2, 1, ""))


if __name__ == "__main__":
  absltest.main()
