"""docs/architecture.md against the tree: its Layout lists exactly the package's folders and modules.

The Layout block lists one folder per line, its path from the repository root at the start of the line, followed by
its modules, one per line, two spaces in, each with what it holds (continued on lines indented further):

    scaling/mup/           what the folder holds
      schemes.py           what the module holds
                           (its description, continued)

Every module of a folder of scaling/ and of benchmarks/ (a package's __init__.py apart) has a line of its own in
its folder; the other folders (experiments/, examples/, scripts/) name each of their files somewhere in their lines;
and every file name the Layout mentions exists in the folder it is listed under. The reader is tested on a page and
a tree written here, so each check can fail.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pathlib
import re
import textwrap

from absl.testing import absltest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "architecture.md"
# Folders whose every module has a line of its own (with every package under them), and folders whose every file
# is named somewhere in their lines.
LISTED = ("scaling", "benchmarks")
NAMED = ("experiments", "examples", "scripts")
FILE_NAME = re.compile(r"(?<![\w./-])(\w+\.(?:py|sh))(?![\w.-])")


@dataclasses.dataclass
class Folder:
  """One folder of the Layout: its modules (lines of their own) and its text (every line under it)."""

  modules: list[str] = dataclasses.field(default_factory=list)
  text: str = ""


def layout(text: str) -> dict[str, Folder]:
  """Folder path (no trailing "/") -> its ``Folder``, from the code block under ``## Layout`` of a Markdown page.

  A folder's line starts with its path (ending in "/") at the first column; a module's line starts two spaces in
  with its file name; any other line continues the one before.
  """
  block = re.search(r"^## Layout\n.*?^```\n(.*?)^```$", text, re.S | re.M)
  if block is None:
    return {}
  folders: dict[str, Folder] = {}
  current = None
  for line in block.group(1).splitlines():
    folder = re.match(r"(\S+)/(?:\s|$)", line)
    module = re.match(r"  (\S+\.\w+)(?:\s|$)", line)
    if folder:
      current = folders.setdefault(folder.group(1), Folder())
    elif module and current is not None:
      current.modules.append(module.group(1))
    if current is not None:
      current.text += line + "\n"
  return folders


def module_names(text: str) -> list[tuple[str, list[str]]]:
  """(module, names) for each ``scaling.x`` (``A``, ``B``) of the "Public API" section of a Markdown page."""
  section = re.search(r"^## Public API\n(.*?)^## ", text, re.S | re.M)
  if section is None:
    return []
  pairs = re.findall(r"`(scaling(?:\.\w+)+)`\s+\(((?:`\w+`(?:,\s+)?)+)\)", section.group(1))
  return [(module, re.findall(r"`(\w+)`", names)) for module, names in pairs]


def packages(root: pathlib.Path, top: str) -> list[str]:
  """``top`` and every folder under it with an __init__.py, as paths from ``root``."""
  found = [top]
  found += sorted(p.parent.relative_to(root).as_posix() for p in (root / top).rglob("__init__.py")
                  if p.parent != root / top)
  return found


def problems(root: pathlib.Path, text: str) -> list[str]:
  """What the Layout of ``text`` gets wrong about the tree at ``root`` (empty when it is right)."""
  folders = layout(text)
  found = []
  for path, folder in folders.items():
    if not (root / path).is_dir():
      found.append(f"{path}/ is listed but is not a folder")
      continue
    for name in sorted(set(FILE_NAME.findall(folder.text))):
      if not (root / path / name).is_file():
        found.append(f"{path}/{name} is mentioned but does not exist")
  for top in LISTED:
    for path in packages(root, top):
      if path not in folders:
        found.append(f"{path}/ is not listed")
        continue
      modules = folders[path].modules
      files = sorted(p.name for p in (root / path).glob("*.py") if p.name != "__init__.py")
      found += [f"{path}/{name} has no line of its own" for name in files if name not in modules]
      found += [f"{path}/{name} is listed twice" for name in sorted(set(modules)) if modules.count(name) > 1]
  for top in NAMED:
    text_of = folders.get(top, Folder()).text
    for path in sorted((root / top).iterdir()):
      if path.is_file() and path.suffix in (".py", ".sh") and path.name != "__init__.py":
        if path.name not in FILE_NAME.findall(text_of):
          found.append(f"{top}/{path.name} is not named")
  return found


class ReaderTest(absltest.TestCase):
  """The reader on a page and a tree written here."""

  _PAGE = textwrap.dedent("""\
      # Page

      ## Layout

      ```
      scaling/               the library
      scaling/base/          the floor
        config.py            options (beside validation.py)
                             continued, still config.py's
      benchmarks/            the suites
        sweep.py             one suite
      experiments/           mains: train.py, run.sh
      ```

      ## Next

      ```
      scaling/other/
        nope.py
      ```
      """)

  def _tree(self, files: tuple[str, ...]) -> pathlib.Path:
    root = pathlib.Path(self.create_tempdir().full_path)
    for name in files:
      (root / name).parent.mkdir(parents=True, exist_ok=True)
      (root / name).write_text("")
    for top in LISTED + NAMED:
      (root / top).mkdir(exist_ok=True)
    return root

  def test_reads_the_modules_of_the_public_api(self):
    text = ("## Public API\n\n- **A**: `f`\n\nThe rest: `scaling.a.b` (`C`, `d`), `scaling.e` (`F`) and\n"
            "`scaling.g` (`h`,\n`i`); `scaling.studies` and `scaling.x` (not `y`).\n\n## Next\n\n`scaling.z` (`w`)\n")
    self.assertEqual(module_names(text), [("scaling.a.b", ["C", "d"]), ("scaling.e", ["F"]),
                                          ("scaling.g", ["h", "i"])])

  def test_reads_folders_and_their_modules(self):
    folders = layout(self._PAGE)
    self.assertEqual(list(folders), ["scaling", "scaling/base", "benchmarks", "experiments"])
    self.assertEqual(folders["scaling/base"].modules, ["config.py"])
    self.assertIn("continued, still config.py's", folders["scaling/base"].text)
    self.assertEqual(folders["experiments"].modules, [])
    self.assertEqual(layout("# Page\n"), {})

  def test_the_tree_written_as_listed_passes(self):
    root = self._tree(("scaling/__init__.py", "scaling/base/__init__.py", "scaling/base/config.py",
                       "scaling/base/validation.py", "benchmarks/sweep.py", "experiments/train.py",
                       "experiments/run.sh"))
    self.assertEqual(problems(root, self._PAGE.replace("options (beside", "options\n  validation.py  (beside")),
                     [])

  def test_each_check_fails(self):
    root = self._tree(("scaling/__init__.py", "scaling/base/__init__.py", "scaling/base/config.py",
                       "scaling/base/validation.py", "scaling/runs/__init__.py", "scaling/runs/results.py",
                       "benchmarks/sweep.py", "benchmarks/timing.py", "experiments/train.py", "experiments/run.sh",
                       "experiments/cli.py", "scripts/notes.txt"))
    page = self._PAGE.replace("  sweep.py             one suite", "  sweep.py  one suite\n  sweep.py  twice")
    self.assertEqual(problems(root, page), [
        "scaling/base/validation.py has no line of its own",  # mentioned in config.py's line only
        "scaling/runs/ is not listed",
        "benchmarks/timing.py has no line of its own",
        "benchmarks/sweep.py is listed twice",
        "experiments/cli.py is not named",
    ])
    (root / "experiments" / "train.py").unlink()
    self.assertIn("experiments/train.py is mentioned but does not exist", problems(root, page))
    self.assertIn("docs/ is listed but is not a folder", problems(root, page.replace("benchmarks/ ", "docs/ ")))


class LayoutTest(absltest.TestCase):
  """docs/architecture.md's Layout is the tree."""

  def test_the_layout_is_the_tree(self):
    found = problems(ROOT, PAGE.read_text())
    self.assertEqual(found, [], "\n".join(found))

  def test_the_public_api_names_live_where_it_says(self):
    listed = module_names(PAGE.read_text())
    self.assertGreaterEqual(len(listed), 8)
    for module, names in listed:
      for name in names:
        value = getattr(importlib.import_module(module), name, None)
        self.assertIsNotNone(value, f"{module} has no {name}")
        # Defined there, not imported from elsewhere (a function's or class's module says where it was defined).
        if inspect.isclass(value) or inspect.isfunction(value):
          self.assertEqual(value.__module__, module, f"{module}.{name}")

  def test_every_layer_is_in_the_layering(self):
    section = re.search(r"^## Layering\n(.*?)^## ", PAGE.read_text(), re.S | re.M).group(1)
    for path in packages(ROOT, "scaling")[1:]:
      self.assertIn(f"`{path.replace('/', '.')}`", section, path)

  def test_the_readme_points_to_it(self):
    readme = (ROOT / "README.md").read_text()
    self.assertIn("](docs/architecture.md#layout)", readme)
    self.assertNotIn("\n## Layout\n\n```", readme)


if __name__ == "__main__":
  absltest.main()
