"""The top level of scaling: the names docs/architecture.md lists, grouped as there; moved names warn; no study import.

The project's own code is read with ``ast`` for uses of moved top-level names, so that nothing here depends on the
one-release aliases; the readers are tested on small sources written here, so each check can fail.
"""

from __future__ import annotations

import ast
import importlib
import pathlib
import re
import subprocess
import sys
import warnings

from absl.testing import absltest
from absl.testing import parameterized

import scaling

ROOT = pathlib.Path(__file__).resolve().parents[1]
SECTION = re.compile(r"^## Public API\n(.*?)^## ", re.S | re.M)
DOC_GROUP = re.compile(r"^- \*\*(.+?)\*\*: (.*?)(?=^- |^\n|\Z)", re.S | re.M)
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)
MOVED = dict(scaling._MOVED)  # pylint: disable=protected-access


def doc_groups(text: str) -> list[tuple[str, list[str]]]:
  """(group, names) of each bullet of the "Public API" section of a Markdown page, in order."""
  section = SECTION.search(text)
  if section is None:
    return []
  return [(name, re.findall(r"`(\w+)`", body)) for name, body in DOC_GROUP.findall(section.group(1))]


def init_groups(source: str) -> list[tuple[str, list[str]]]:
  """(group, names) of each ``# group`` comment inside the ``__all__ = [...]`` of a module's source, in order."""
  body = re.search(r"^__all__ = \[\n(.*?)^\]", source, re.S | re.M)
  if body is None:
    return []
  groups = []
  for line in body.group(1).splitlines():
    comment = re.match(r"\s*# (.+)$", line)
    if comment:
      groups.append((comment.group(1), []))
    elif groups:
      groups[-1][1].extend(re.findall(r"\"(\w+)\"", line))
  return groups


def moved_uses(source: str, moved: set[str], filename: str = "<source>") -> list[str]:
  """Where ``source`` reaches a moved name through the top level: ``scaling.name`` or ``from scaling import name``."""
  tree = ast.parse(source, filename=filename)
  bound = set()  # local names bound to the package itself
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      bound |= {a.asname or a.name for a in node.names if a.name == "scaling"}
  uses = []  # (line, column, text), sorted at the end: ast.walk goes breadth first
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.module == "scaling" and not node.level:
      uses += [(node.lineno, node.col_offset, f"from scaling import {a.name}") for a in node.names if a.name in moved]
    elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound
          and node.attr in moved):
      uses.append((node.lineno, node.col_offset, f"{node.value.id}.{node.attr}"))
  return [f"{filename}:{line}: {text}" for line, _, text in sorted(uses)]


def project_sources() -> list[tuple[str, str]]:
  """(name, Python source) of every .py file of the project and every Python block of README.md and docs/."""
  sources = []
  for folder in ("scaling", "experiments", "examples", "scripts", "tests"):
    sources += [(p.relative_to(ROOT).as_posix(), p.read_text()) for p in sorted((ROOT / folder).rglob("*.py"))]
  for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
    blocks = PYTHON_BLOCK.findall(page.read_text())
    sources += [(f"{page.relative_to(ROOT).as_posix()} block {i}", b) for i, b in enumerate(blocks)]
  return sources


class ReadersTest(absltest.TestCase):
  """The readers on sources written here."""

  def test_doc_groups(self):
    text = ("# Page\n\n## Public API\n\nSome words with `not_a_name`:\n\n- **A**: `f`, `g`,\n  `h`\n- **B c**: `K`\n\n"
            "After `x`.\n\n## Next\n\n- **Z**: `z`\n")
    self.assertEqual(doc_groups(text), [("A", ["f", "g", "h"]), ("B c", ["K"])])
    self.assertEqual(doc_groups("# Page\n\n## Other\n"), [])

  def test_init_groups(self):
    source = '__all__ = [\n    # A\n    "f", "g",\n    "h",\n    # B c\n    "K",\n]\n'
    self.assertEqual(init_groups(source), [("A", ["f", "g", "h"]), ("B c", ["K"])])

  def test_moved_uses(self):
    source = ("import scaling\nimport scaling as sc\nfrom scaling import model\nfrom scaling import Old, New\n"
              "scaling.Old(); sc.Old; scaling.New; model.Old; scaling.training.model.Old\n")
    self.assertEqual(moved_uses(source, {"Old"}),
                     ["<source>:4: from scaling import Old", "<source>:5: scaling.Old", "<source>:5: sc.Old"])


class PublicApiTest(parameterized.TestCase):

  def test_the_docs_list_is_the_init_groups_and_all(self):
    listed = doc_groups((ROOT / "docs" / "architecture.md").read_text())
    self.assertNotEmpty(listed)
    self.assertEqual(listed, init_groups((ROOT / "scaling" / "__init__.py").read_text()))
    self.assertEqual([n for _, names in listed for n in names], scaling.__all__)

  def test_the_top_level_is_small_and_without_duplicates(self):
    self.assertLessEqual(len(scaling.__all__), 30)
    self.assertLen(set(scaling.__all__), len(scaling.__all__))
    self.assertEmpty(set(scaling.__all__) & set(MOVED))

  def test_every_name_imports_without_a_warning(self):
    with warnings.catch_warnings():
      warnings.simplefilter("error")
      for name in scaling.__all__:
        self.assertIsNotNone(getattr(importlib.import_module("scaling"), name), name)
    self.assertIs(scaling.coord_check, importlib.import_module("scaling.studies.coord_check.study").coord_check)
    self.assertIs(scaling.transfer, importlib.import_module("scaling.studies.transfer.study").transfer)

  def test_import_scaling_imports_no_study_nor_flax_nnx_and_star_gives_all(self):
    code = ("import sys, warnings\nwarnings.simplefilter('error')\nimport scaling\n"
            "print(sorted(m for m in sys.modules if m.startswith('scaling.studies')))\n"
            "print('flax.nnx' in sys.modules)\n"
            "ns = {}\nexec('from scaling import *', ns)\nprint(sorted(k for k in ns if not k.startswith('__')))\n"
            "print('flax.nnx' in sys.modules, issubclass(ns['ReadoutLinear'], sys.modules['flax.nnx'].Linear))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "PATH": ""}, check=False)
    self.assertEqual(proc.returncode, 0, proc.stderr)
    studies, nnx_at_import, star, nnx_after_star = proc.stdout.splitlines()
    self.assertEqual(studies, "[]")
    self.assertEqual(nnx_at_import, "False")  # flax.nnx (with IPython) costs every start-up about half a second
    self.assertEqual(star, str(sorted(scaling.__all__)))
    self.assertEqual(nnx_after_star, "True True")  # ReadoutLinear, asked for, is flax.nnx's Linear

  @parameterized.parameters(*sorted(MOVED))
  def test_a_moved_name_warns_and_is_its_module_name(self, name):
    with self.assertWarnsRegex(DeprecationWarning, rf"scaling\.{name} .*; use {re.escape(MOVED[name])}\.{name}$"):
      value = getattr(scaling, name)
    self.assertIs(value, getattr(importlib.import_module(MOVED[name]), name))

  def test_an_unknown_name_raises_attribute_error(self):
    with self.assertRaisesRegex(AttributeError, "has no attribute 'no_such_name'"):
      getattr(scaling, "no_such_name")

  def test_nothing_in_the_project_uses_a_moved_top_level_name(self):
    uses = [u for name, source in project_sources() for u in moved_uses(source, set(MOVED), name)]
    self.assertEqual(uses, [], "\n".join(uses))


if __name__ == "__main__":
  absltest.main()
