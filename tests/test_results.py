"""Result files, streamed rows, progress lines and tables."""

import io
import json
import pathlib
import subprocess
import time
from unittest import mock

from absl.testing import absltest

from scaling.runs import report
from scaling.runs import results


class RowStreamTest(absltest.TestCase):

  def test_rows_land_in_the_partial_file_then_move(self):
    out = pathlib.Path(self.create_tempdir().full_path)
    stream = results.RowStream(out / "rows.jsonl")
    stream.write({"a": 1, "x": float("nan")})
    stream.write({"a": 2})
    # Interrupted here: every finished row is already on disk.
    self.assertEqual([json.loads(line) for line in (out / "rows.partial.jsonl").read_text().splitlines()],
                     [{"a": 1, "x": None}, {"a": 2}])
    self.assertFalse((out / "rows.jsonl").exists())
    stream.close()
    self.assertFalse((out / "rows.partial.jsonl").exists())
    self.assertEqual(results.read_jsonl(out / "rows.jsonl"), [{"a": 1, "x": None}, {"a": 2}])

  def test_an_error_leaves_the_partial_file(self):
    out = pathlib.Path(self.create_tempdir().full_path)
    with self.assertRaises(RuntimeError):
      with results.RowStream(out / "rows.jsonl") as stream:
        stream.write({"a": 1})
        raise RuntimeError("killed")
    self.assertTrue((out / "rows.partial.jsonl").exists())
    self.assertFalse((out / "rows.jsonl").exists())

  def test_make_dir_names_the_option(self):
    blocker = pathlib.Path(self.create_tempdir().full_path) / "file"
    blocker.write_text("x")
    with self.assertRaisesRegex(ValueError, "^out_dir='.*/file/sub': cannot create directory"):
      results.make_dir(blocker / "sub")


class ReportTest(absltest.TestCase):

  def test_table_has_every_column_and_cell(self):
    text = report.table([{"rule": "sqrt", "x": 0.123456, "y": {"mean": 2.0, "std": 1.0}}, {"rule": "none"}],
                        ("rule", "x", "y"))
    lines = text.splitlines()
    for name in ("rule", "x", "y"):
      self.assertIn(name, lines[0])
    self.assertIn("0.1235", text)  # four significant digits
    self.assertIn("2", lines[2])   # a {"mean", "std"} cell shows its mean
    self.assertIn("none", lines[3])

  def test_progress_prints_a_line_per_update_off_a_terminal(self):
    buf = io.StringIO()
    with report.Progress(3, "demo", stream=buf, every_s=0.0) as progress:
      progress.update("first")
      progress.update("second")
    lines = buf.getvalue().strip().splitlines()
    self.assertLen(lines, 2)
    self.assertTrue(lines[0].startswith("demo [1/3] first"), lines[0])
    self.assertIn("left", lines[1])
    self.assertNotIn("\x1b", buf.getvalue())  # no terminal codes in a log

  def test_progress_lines_are_whole_and_paced_off_a_terminal(self):
    buf = io.StringIO()
    labels = [f"point {i} " + "x" * 150 for i in range(5)]  # longer than 80 columns
    with report.Progress(5, "demo", stream=buf, every_s=3600.0) as progress:
      for label in labels:
        progress.update(label)
    lines = buf.getvalue().splitlines()
    # The first and the last unit print; the three between fall within the pace; none is wrapped.
    self.assertLen(lines, 2)
    self.assertTrue(lines[0].startswith(f"demo [1/5] {labels[0]}  "), lines[0])
    self.assertTrue(lines[1].startswith(f"demo [5/5] {labels[4]}  "), lines[1])

  def test_progress_draws_a_bar_with_eta_on_a_terminal_and_nests(self):
    buf = io.StringIO()
    with report.Progress(2, "outer", stream=buf, terminal=True) as outer:
      with report.Progress(3, "inner", stream=buf, terminal=True) as inner:  # one display, two bars
        for _ in range(3):
          inner.update("step")
      outer.update("a")
      outer.update("b")
    text = buf.getvalue()
    self.assertIn("\x1b[", text)  # drawn in place with terminal codes
    for needle in ("outer", "inner", "eta", "2/2"):
      self.assertIn(needle, text)
    self.assertNotIn("[2/2]", text)  # not the lines printed off a terminal


class MarkdownTableTest(absltest.TestCase):

  def test_header_rule_and_escaped_cells(self):
    text = report.markdown_table(("a", "b"), [(1, "x|y"), ("two\nlines", 2.5)])
    self.assertEqual(text, "| a | b |\n|---|---|\n| 1 | x\\|y |\n| two lines | 2.5 |\n")


class GeneratedSectionTest(absltest.TestCase):

  def test_only_the_marked_section_changes(self):
    text = "intro\n<!-- BEGIN generated: t -->\nold | table\n<!-- END generated: t -->\noutro\n"
    new = report.replace_generated(text, "t", "| new |\n")
    self.assertEqual(new, "intro\n<!-- BEGIN generated: t -->\n| new |\n<!-- END generated: t -->\noutro\n")
    self.assertEqual(report.replace_generated(new, "t", "| new |"), new)  # idempotent

  def test_missing_or_repeated_markers_are_refused(self):
    with self.assertRaisesRegex(ValueError, "BEGIN generated: t"):
      report.replace_generated("no markers", "t", "x")
    twice = "<!-- BEGIN generated: t -->\n<!-- END generated: t -->\n" * 2
    with self.assertRaisesRegex(ValueError, "expected one"):
      report.replace_generated(twice, "t", "x")


class CodeVersionTest(absltest.TestCase):
  """What stamps a run's generated tables: the commit of the checkout the package is imported from, or its version."""

  ROOT = pathlib.Path(results.__file__).resolve().parents[1]

  def test_commit_of_the_checkout(self):
    try:
      head = subprocess.run(["git", "-C", str(self.ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
      self.skipTest("not a git checkout")
    version = results.code_version()
    self.assertRegex(version["code"], r"^commit [0-9a-f]{12}(\+changes)?$")
    self.assertTrue(head.startswith(version["code"].split()[1].removesuffix("+changes")))
    self.assertEqual(version["date"], time.strftime("%Y-%m-%d", time.gmtime()))

  def test_changed_pages_are_not_changed_code(self):
    repo = pathlib.Path(self.create_tempdir().full_path)
    git = lambda *args: subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)
    git("init", "-q")
    (repo / "code.py").write_text("x = 1\n")
    (repo / "docs").mkdir()
    (repo / "docs" / "page.md").write_text("old\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    self.assertRegex(results.code_version(repo)["code"], r"^commit [0-9a-f]{12}$")
    (repo / "docs" / "page.md").write_text("a generated table\n")
    self.assertRegex(results.code_version(repo)["code"], r"^commit [0-9a-f]{12}$")
    (repo / "code.py").write_text("x = 2\n")
    self.assertRegex(results.code_version(repo)["code"], r"^commit [0-9a-f]{12}\+changes$")

  def test_installed_version_without_git(self):
    with mock.patch.object(results.subprocess, "run", side_effect=OSError("no git")):
      self.assertRegex(results.code_version()["code"], r"^(version \S+|unknown version)$")

  def test_headline_states_the_run(self):
    rows = [{"id": "a", "claim": "c", "verdict": "holds", "criterion": "x", "statistic": "s", "value": 1.0}]
    text = report.claims_headline(rows, {"config": {"mode": "quick", "text_file": None}, "code": "commit abc",
                                         "date": "2026-01-02"})
    self.assertIn("run on commit abc, 2026-01-02", text)


if __name__ == "__main__":
  absltest.main()
