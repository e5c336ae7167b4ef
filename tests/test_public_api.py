"""The top level of scaling: the names docs/architecture.md lists, grouped as there; nothing else; no study import.

The readers of the page and of ``__all__`` are tested on small sources written here, so each check can fail.
"""

from __future__ import annotations

import importlib
import pathlib
import re
import subprocess
import sys
import warnings

from absl.testing import absltest
from absl.testing import parameterized
import pytest

import scaling

ROOT = pathlib.Path(__file__).resolve().parents[1]
SECTION = re.compile(r"^## Public API\n(.*?)^## ", re.S | re.M)
DOC_GROUP = re.compile(r"^- \*\*(.+?)\*\*: (.*?)(?=^- |^\n|\Z)", re.S | re.M)


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


class PublicApiTest(parameterized.TestCase):

  def test_the_docs_list_is_the_init_groups_and_all(self):
    listed = doc_groups((ROOT / "docs" / "architecture.md").read_text())
    self.assertNotEmpty(listed)
    self.assertEqual(listed, init_groups((ROOT / "scaling" / "__init__.py").read_text()))
    self.assertEqual([n for _, names in listed for n in names], scaling.__all__)

  def test_the_top_level_is_its_29_names(self):
    self.assertLen(scaling.__all__, 29)
    self.assertLen(set(scaling.__all__), len(scaling.__all__))
    # Three of them are loaded on first use (__getattr__), so that ``import scaling`` loads no study nor flax.nnx.
    self.assertEqual(sorted(n for n in scaling.__all__ if n not in vars(scaling)),
                     ["ReadoutLinear", "coord_check", "transfer"])

  def test_every_name_imports_without_a_warning(self):
    with warnings.catch_warnings():
      warnings.simplefilter("error")
      for name in scaling.__all__:
        self.assertIsNotNone(getattr(importlib.import_module("scaling"), name), name)
    self.assertIs(scaling.coord_check, importlib.import_module("scaling.studies.coord_check.any_model").coord_check)
    self.assertIs(scaling.transfer, importlib.import_module("scaling.studies.transfer.any_model").transfer)

  @pytest.mark.slow  # a fresh interpreter's imports
  def test_import_scaling_imports_no_study_nor_flax_nnx_and_star_gives_all(self):
    code = ("import sys, warnings\nwarnings.simplefilter('error')\nimport scaling\n"
            "print(sorted(m for m in sys.modules if m.startswith('scaling.studies')))\n"
            "print('flax.nnx' in sys.modules)\n"
            "print(sorted(n for n in vars(scaling) if not n.startswith('_') and n not in scaling.__all__))\n"
            "ns = {}\nexec('from scaling import *', ns)\nprint(sorted(k for k in ns if not k.startswith('__')))\n"
            "print('flax.nnx' in sys.modules, issubclass(ns['ReadoutLinear'], sys.modules['flax.nnx'].Linear))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "PATH": ""}, check=False)
    self.assertEqual(proc.returncode, 0, proc.stderr)
    studies, nnx_at_import, others, star, nnx_after_star = proc.stdout.splitlines()
    self.assertEqual(studies, "[]")
    self.assertEqual(nnx_at_import, "False")  # flax.nnx (with IPython) costs every start-up about half a second
    self.assertEqual(others, "['attention', 'base', 'mup']")  # besides __all__, only the subpackages it imports from
    self.assertEqual(star, str(sorted(scaling.__all__)))
    self.assertEqual(nnx_after_star, "True True")  # ReadoutLinear, asked for, is flax.nnx's Linear

  def test_an_unknown_name_raises_attribute_error(self):
    with self.assertRaisesRegex(AttributeError, "has no attribute 'no_such_name'"):
      getattr(scaling, "no_such_name")

  @parameterized.parameters("Transformer", "ModelConfig", "run_training", "OptimizerConfig", "make_optimizer",
                            "DataConfig", "Parametrization", "UserParametrization", "row_entropy")
  def test_a_former_top_level_name_is_gone(self, name):
    # The harness and the internals are reached through their modules only (docs/architecture.md, "Public API").
    with self.assertRaisesRegex(AttributeError, f"module 'scaling' has no attribute '{name}'"):
      getattr(scaling, name)

if __name__ == "__main__":
  absltest.main()
