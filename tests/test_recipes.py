"""The recipes of docs/your_model.md (Equinox, Haiku, Hugging Face's Flax classes, overrides), run as the page shows
them. The docs test leaves these blocks to this file (scripts/run_doc_block.py finds them for both)."""

import pathlib
import textwrap

from absl.testing import absltest

import experiment_main

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "your_model.md"
RECIPES = ("equinox", "haiku", "hugging_face", "overrides")


def recipes() -> dict[str, str]:
  """{name: code} of the page's recipe blocks."""
  return experiment_main.load_script("run_doc_block").recipe_blocks(PAGE.read_text())


def hugging_face_flax_missing() -> str | None:
  """Why the Hugging Face recipe cannot run here, or None when transformers' Flax GPT-2 imports."""
  try:
    from transformers import FlaxGPT2LMHeadModel  # pylint: disable=g-import-not-at-top,unused-import
  except Exception as e:  # pylint: disable=broad-except  # ImportError, or transformers 5 having no Flax classes
    return (f"transformers' Flax classes are not importable ({type(e).__name__}: {str(e).splitlines()[0][:120]}); "
            "they are in transformers 4 (pip install 'transformers<5'), version 5 removed them")
  return None


class RecipesTest(absltest.TestCase):

  def run_recipe(self, name: str) -> dict:
    code = recipes()[name]
    namespace = {"__name__": "__recipe__"}
    exec(compile(code, f"<recipe {name!r} of docs/your_model.md>", "exec"), namespace)  # pylint: disable=exec-used
    return namespace

  def test_the_page_has_these_recipes_and_no_other(self):
    self.assertEqual(sorted(recipes()), sorted(RECIPES))

  def test_the_docs_test_leaves_the_recipes_to_this_file(self):
    script = experiment_main.load_script("run_doc_block")
    left = script.without_recipes(PAGE.read_text())
    self.assertEqual(script.recipe_blocks(left), {})
    for code in recipes().values():
      self.assertNotIn(code, left)

  def test_equinox(self):
    ns = self.run_recipe("equinox")
    self.assertEqual({v["parametrization"] for v in ns["check"].verdicts}, {"mup"})
    self.assertIn("layers/1", {v["layer"] for v in ns["check"].verdicts})

  def test_haiku(self):
    ns = self.run_recipe("haiku")
    self.assertIn("linear_1", {v["layer"] for v in ns["check"].verdicts})

  def test_hugging_face(self):
    missing = hugging_face_flax_missing()
    if missing:
      self.skipTest(missing)
    ns = self.run_recipe("hugging_face")
    self.assertIn("transformer/h/0/attn/c_attn", {v["layer"] for v in ns["check"].verdicts})

  def test_overrides(self):
    ns = self.run_recipe("overrides")
    self.assertEqual(ns["mup"].roles(64)["multi_head_attention/key/w"].kind, "attn_k")


class RunDocBlockTest(absltest.TestCase):
  """scripts/run_doc_block.py: the block before a section, run as is, its output and times into the section."""

  PAGE = textwrap.dedent("""\
      # A page

      ```python
      print("not this one")
      ```

      ```python
      import sys
      print("| a | b |")
      print("|---|---|")
      print("| 1 | 2 |")
      print("noise", file=sys.stderr)
      ```

      <!-- BEGIN generated: t -->
      old
      <!-- END generated: t -->

      after
      """)

  def setUp(self):
    super().setUp()
    self.script = experiment_main.load_script("run_doc_block")
    self.root = pathlib.Path(self.create_tempdir().full_path)
    self.page = self.root / "page.md"

  def test_the_output_and_times_land_in_the_section(self):
    self.page.write_text(self.PAGE)
    self.assertEqual(self.script.main(["run_doc_block.py", "t", "page.md"], root=self.root), 0)
    text = self.page.read_text()
    section = text.split("<!-- BEGIN generated: t -->\n")[1].split("<!-- END generated: t -->")[0]
    first, rest = section.split("\n", 1)
    self.assertRegex(first, r"^What it prints \(`python scripts/run_doc_block.py t page.md` ran it in \d+ s, \d+ s of "
                     r"CPU time, on \d+ CPU cores with jax [\w.]+\):$")
    self.assertEqual(rest, "\n| a | b |\n|---|---|\n| 1 | 2 |\n")
    self.assertEqual(text.split("<!-- BEGIN generated: t -->")[0], self.PAGE.split("<!-- BEGIN generated: t -->")[0])
    self.assertTrue(text.endswith("<!-- END generated: t -->\n\nafter\n"))

  def test_a_failing_block_leaves_the_page_as_it_was(self):
    self.page.write_text(self.PAGE.replace('print("| 1 | 2 |")', "raise ValueError('broken')"))
    before = self.page.read_text()
    self.assertEqual(self.script.main(["run_doc_block.py", "t", "page.md"], root=self.root), 1)
    self.assertEqual(self.page.read_text(), before)

  def test_bad_input_exits_2(self):
    self.page.write_text(self.PAGE)
    self.assertEqual(self.script.main(["run_doc_block.py"], root=self.root), 2)
    self.assertEqual(self.script.main(["run_doc_block.py", "no_such_section"], root=self.root), 2)
    self.assertEqual(self.script.main(["run_doc_block.py", "u", "page.md"], root=self.root), 2)
    self.page.write_text("<!-- BEGIN generated: t -->\n<!-- END generated: t -->\n")
    self.assertEqual(self.script.main(["run_doc_block.py", "t", "page.md"], root=self.root), 2)

  def test_recipes_are_found_by_name_and_left_out_of_the_rest(self):
    page = "a\n<!-- recipe: one -->\n```python\nx = 1\n```\n```python\ny = 2\n```\n"
    self.assertEqual(self.script.recipe_blocks(page), {"one": "x = 1\n"})
    self.assertEqual(self.script.without_recipes(page), "a\n\n```python\ny = 2\n```\n")
    with self.assertRaisesRegex(ValueError, "used twice: one"):
      self.script.recipe_blocks(page + page)


if __name__ == "__main__":
  absltest.main()
