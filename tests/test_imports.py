"""The structure of scaling/: its subpackages are layers, each importing only from itself and those before it.

Checked here: the order of the subpackages (``scaling.base`` < ``runs`` < ``attention`` < ``mup`` < ``training`` <
``studies``); the finer layers inside ``scaling.attention``; the studies apart from each other (only ``claims``
imports ``claims``; ``grid`` imports no other study); nothing in scaling/ imports the project's mains
(``benchmarks``, ``experiments``, ...); no import cycle; no private name of another module; no name reached through a
module that only imports it (a name is imported from the module that defines it); a docstring in every subpackage's
``__init__.py``; no library file over 700 lines. docs/architecture.md ("Layering") says the same in words.

The walker parses every module with ``ast`` (imports inside functions included) and is itself tested on small
packages written here, one of them circular, so that each check can fail.
"""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import subprocess
import sys
import textwrap

from absl.testing import absltest

import scaling

ROOT = pathlib.Path(scaling.__file__).resolve().parents[1]

# The subpackages of scaling from the bottom up: a module may import only from its own subpackage and earlier ones.
ORDER = ("base", "runs", "attention", "mup", "training", "studies")
# The project's folders beside scaling/ that hold Python mains and tools: scaling/ imports none of them.
MAINS = ("benchmarks", "experiments", "scripts", "examples")
TESTS = "tests"
# The modules of scaling.attention from the bottom up. A module may import only modules of strictly lower layers
# (those of one layer sit side by side and do not import each other).
ATTENTION_LAYERS = (
    ("rules", "masking", "rope"),
    ("logits",),
    ("dense", "blockwise"),
    ("pallas", "autotune"),
    ("dispatch", "metrics"),
    ("flax_adapter",),
)
# Inside scaling.studies, (importers, forbidden): no module under the first imports one under the second, except
# from inside the second itself. Only claims imports claims (claims may import every other study); grid, the engine
# of the others, imports none of them.
STUDIES_APART = (
    ("scaling.studies", "scaling.studies.claims"),
    ("scaling.studies.grid", "scaling.studies.coord_check"),
    ("scaling.studies.grid", "scaling.studies.transfer"),
)
MAX_LINES = 700


@dataclasses.dataclass
class ModuleImports:
  """What one module imports, the names it takes from other modules, and where it uses their private names.

  Attributes:
    imports: the package modules it imports (their enclosing packages included).
    outside: the top-level names of the modules outside the package it imports.
    defines: the names its top level binds other than by an import (functions, classes, assignments).
    taken: (line, module, name) for each name it takes from a package module other than a submodule
      (``from m import name``, ``m_lib.name``).
    private_uses: where it reaches another module's private name.
  """

  imports: set[str] = dataclasses.field(default_factory=set)
  outside: set[str] = dataclasses.field(default_factory=set)
  defines: set[str] = dataclasses.field(default_factory=set)
  taken: list[tuple[int, str, str]] = dataclasses.field(default_factory=list)
  private_uses: list[str] = dataclasses.field(default_factory=list)


def package_modules(root: pathlib.Path, package: str) -> dict[str, pathlib.Path]:
  """Dotted module name -> source file for every module under ``root/package`` (a package's name for __init__)."""
  modules = {}
  for path in sorted((root / package).rglob("*.py")):
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
      parts = parts[:-1]
    modules[".".join(parts)] = path
  return modules


def _is_private(name: str) -> bool:
  """A leading underscore, dunders excepted."""
  return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _is_dunder(name: str) -> bool:
  return name.startswith("__") and name.endswith("__")


def _ancestors(name: str) -> list[str]:
  """Enclosing packages of a dotted name, outermost first: a.b.c -> [a, a.b]."""
  parts = name.split(".")
  return [".".join(parts[:i]) for i in range(1, len(parts))]


def _under(name: str, prefix: str) -> bool:
  """Whether the dotted name is ``prefix`` or inside it."""
  return name == prefix or name.startswith(prefix + ".")


def _absolute(module: str | None, level: int, importer: str, is_package: bool) -> str:
  """The absolute name of ``from <level dots><module> import ...`` written in ``importer``."""
  if not level:
    return module or ""
  base = importer.split(".") if is_package else importer.split(".")[:-1]
  base = base[:len(base) - (level - 1)]
  return ".".join(base + ([module] if module else []))


def _attribute_chain(node: ast.Attribute) -> tuple[str, list[str]] | None:
  """``a.b.c`` -> ("a", ["b", "c"]); None when the chain does not start at a plain name."""
  attrs = []
  while isinstance(node, ast.Attribute):
    attrs.append(node.attr)
    node = node.value
  if not isinstance(node, ast.Name):
    return None
  return node.id, attrs[::-1]


def _top_level_definitions(tree: ast.Module) -> set[str]:
  """The names a module's top level binds other than by an import (inside if/try/with/for blocks too)."""
  names = set()
  pending = list(tree.body)
  while pending:
    node = pending.pop()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
      names.add(node.name)
      continue
    targets = []
    if isinstance(node, ast.Assign):
      targets = node.targets
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
      targets = [node.target]
    elif isinstance(node, (ast.For, ast.AsyncFor)):
      targets = [node.target]
    elif isinstance(node, (ast.With, ast.AsyncWith)):
      targets = [item.optional_vars for item in node.items if item.optional_vars is not None]
    for target in targets:
      names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    for field in ("body", "orelse", "finalbody"):
      pending.extend(getattr(node, field, []) if not isinstance(node, ast.ClassDef) else [])
    for handler in getattr(node, "handlers", []):
      pending.extend(handler.body)
  return names


def module_imports(name: str, path: pathlib.Path, modules: dict[str, pathlib.Path], package: str) -> ModuleImports:
  """The package modules that ``name`` imports (anywhere in the file), the names it takes from them, and its uses
  of other modules' private names.

  Importing a module also runs its enclosing packages, so they count as imported too, except the importer's own
  (already running) unless a name other than a submodule is taken from one (``from pkg import f`` inside a module
  of pkg needs pkg's __init__ to have defined f: a real cycle). A private name is one with a leading underscore
  reached as ``from pkg.x import _y`` or as an attribute of a name bound to a package module (``x_lib._y``,
  ``pkg.x._y``); attributes of other objects (a NamedTuple's ``_replace``) are not module names and are left alone.
  ``name`` may also be a module outside the package (``benchmarks.x``): then only its uses of the package are read.
  """
  in_package = lambda m: _under(m, package)
  is_package = path.name == "__init__.py"
  own = set(_ancestors(name)) | {name}
  tree = ast.parse(path.read_text(), filename=str(path))
  result = ModuleImports(defines=_top_level_definitions(tree))
  bound: dict[str, str] = {}  # local name -> package module it refers to

  def add(target: str) -> None:
    for m in _ancestors(target) + [target]:
      if m in modules and m not in own:
        result.imports.add(m)

  def private(lineno: int, text: str) -> None:
    result.private_uses.append(f"{path.name}:{lineno}: {text}")

  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for alias in node.names:
        if not in_package(alias.name):
          result.outside.add(alias.name.split(".")[0])
          continue
        add(alias.name)
        if alias.asname:
          bound[alias.asname] = alias.name
        else:
          bound[alias.name.split(".")[0]] = alias.name.split(".")[0]
    elif isinstance(node, ast.ImportFrom):
      source = _absolute(node.module, node.level, name, is_package)
      if not in_package(source):
        result.outside.add(source.split(".")[0])
        continue
      add(source)
      for alias in node.names:
        full = f"{source}.{alias.name}"
        if full in modules:
          add(full)
          bound[alias.asname or alias.name] = full
        else:
          if source in modules and source != name:
            result.imports.add(source)
            result.taken.append((node.lineno, source, alias.name))
          if _is_private(alias.name) and source != name:
            private(node.lineno, f"from {source} import {alias.name}")
  for node in ast.walk(tree):
    if not isinstance(node, ast.Attribute):
      continue
    chain = _attribute_chain(node)
    if chain is None or chain[0] not in bound:
      continue
    root_name, attrs = chain
    current = bound[root_name]
    for i, attr in enumerate(attrs):
      if f"{current}.{attr}" in modules:
        current = f"{current}.{attr}"
        continue
      if current != name:
        result.taken.append((node.lineno, current, attr))
        if _is_private(attr):
          private(node.lineno, f"{'.'.join([root_name] + attrs[:i + 1])} ({current}.{attr})")
      break
  result.taken = sorted(set(result.taken))
  result.private_uses = sorted(set(result.private_uses))
  return result


def import_graph(root: pathlib.Path, package: str) -> dict[str, ModuleImports]:
  """``module_imports`` of every module of the package."""
  modules = package_modules(root, package)
  return {name: module_imports(name, path, modules, package) for name, path in modules.items()}


def users_of(root: pathlib.Path, package: str, folders: tuple[str, ...]) -> dict[str, ModuleImports]:
  """``module_imports`` (uses of ``package``) of every module under the other ``folders`` of ``root``."""
  modules = package_modules(root, package)
  users = {}
  for folder in folders:
    for name, path in package_modules(root, folder).items():
      users[name] = module_imports(name, path, modules, package)
  return users


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
  """One import cycle [a, b, ..., a] of the graph (module -> modules it imports), or None when there is none."""
  state: dict[str, str] = {}  # "active" while on the current path, "done" once fully explored
  path: list[str] = []

  def visit(node: str) -> list[str] | None:
    state[node] = "active"
    path.append(node)
    for nxt in sorted(graph.get(node, ())):
      if state.get(nxt) == "active":
        return path[path.index(nxt):] + [nxt]
      if nxt not in state:
        found = visit(nxt)
        if found:
          return found
    path.pop()
    state[node] = "done"
    return None

  for node in sorted(graph):
    if node not in state:
      found = visit(node)
      if found:
        return found
  return None


def order_violations(graph: dict[str, ModuleImports], package: str, order: tuple[str, ...]) -> list[str]:
  """Imports by a module of one subpackage of a module of a later subpackage; modules in none of them."""
  rank = {f"{package}.{sub}": i for i, sub in enumerate(order)}

  def subpackage(module: str) -> str | None:
    return next((s for s in rank if _under(module, s)), None)

  problems = []
  for name in sorted(graph):
    if name == package:
      continue
    own = subpackage(name)
    if own is None:
      problems.append(f"{name} is in none of the subpackages {', '.join(order)}")
      continue
    for target in sorted(graph[name].imports):
      where = subpackage(target)
      if where is not None and rank[where] > rank[own]:
        problems.append(f"{name} imports {target}: {own} comes before {where}")
  return problems


def forbidden_imports(graph: dict[str, ModuleImports], rules: tuple[tuple[str, str], ...]) -> list[str]:
  """Imports that break a rule (importers, forbidden): a module under ``importers`` imports one under ``forbidden``,
  itself not under ``forbidden``."""
  problems = []
  for importers, forbidden in rules:
    for name in sorted(graph):
      if not _under(name, importers) or _under(name, forbidden):
        continue
      problems += [f"{name} imports {target}" for target in sorted(graph[name].imports) if _under(target, forbidden)]
  return problems


def layer_violations(graph: dict[str, ModuleImports], package: str,
                     layers: tuple[tuple[str, ...], ...]) -> list[str]:
  """Imports by a module of the package of a module of the package not in a strictly lower layer; modules of the
  package in no layer (its own __init__ aside). Imports from outside the package are not looked at."""
  level = {f"{package}.{m}": i for i, layer in enumerate(layers) for m in layer}
  problems = [f"{name} is a module of {package} in no layer" for name in sorted(graph)
              if _under(name, package) and name != package and name not in level]
  for name in sorted(level):
    if name not in graph:
      problems.append(f"{name} is not a module of the package")
      continue
    for target in sorted(graph[name].imports):
      if target in level and level[target] >= level[name]:
        problems.append(f"{name} (layer {level[name]}) imports {target} (layer {level[target]}): not downward")
  return problems


def through_uses(graph: dict[str, ModuleImports], users: dict[str, ModuleImports]) -> list[str]:
  """Where a module takes a name from a module that only imports it (a package's __init__ aside, and dunders)."""
  packages = {p for m in graph for p in _ancestors(m)}
  problems = []
  for name, imports in sorted({**graph, **users}.items()):
    for line, source, taken in imports.taken:
      if source in packages or source not in graph or _is_dunder(taken):
        continue
      if taken not in graph[source].defines:
        problems.append(f"{name}:{line}: {taken} through {source}")
  return problems


def _write_package(root: pathlib.Path, package: str, files: dict[str, str]) -> None:
  """Writes ``files`` (module name, "/" for subpackages -> source) as the package ``root/package``."""
  (root / package).mkdir()
  (root / package / "__init__.py").write_text("")
  for module, source in files.items():
    path = root / package / f"{module}.py"
    for parent in reversed(path.relative_to(root / package).parents[:-1]):
      if not (root / package / parent).exists():
        (root / package / parent).mkdir()
        (root / package / parent / "__init__.py").write_text("")
    path.write_text(textwrap.dedent(source))


class WalkerTest(absltest.TestCase):
  """The walker on small packages written here, so that each check is seen to fail."""

  def _graph(self, files: dict[str, str]) -> tuple[pathlib.Path, dict[str, ModuleImports]]:
    root = pathlib.Path(self.create_tempdir().full_path)
    _write_package(root, "toy", files)
    return root, import_graph(root, "toy")

  def test_finds_a_cycle_through_an_import_inside_a_function(self):
    _, graph = self._graph({
        "a": "from toy import b\n",
        "b": "import math\n\ndef f():\n  from toy import a\n  return a.g()\n",
        "c": "from toy import a\nfrom toy.a import g\n",
    })
    self.assertEqual(graph["toy.b"].imports, {"toy.a"})
    self.assertEqual(graph["toy.c"].imports, {"toy.a"})
    self.assertEqual(find_cycle({m: g.imports for m, g in graph.items()}), ["toy.a", "toy.b", "toy.a"])

  def test_no_cycle_in_a_layered_package(self):
    _, graph = self._graph({"a": "x = 1\n", "b": "from toy import a\n", "c": "import toy.a\nimport toy.b\n"})
    self.assertEqual(graph["toy.c"].imports, {"toy.a", "toy.b"})
    self.assertIsNone(find_cycle({m: g.imports for m, g in graph.items()}))
    self.assertEqual(layer_violations(graph, "toy", (("a",), ("b",), ("c",))), [])

  def test_flags_private_names_of_other_modules_only(self):
    _, graph = self._graph({
        "a": "_secret = 1\n\ndef g():\n  return _secret\n",
        "b": """\
            import collections
            import toy
            import toy.a as a_lib
            from toy import a
            from toy.a import _secret
            from toy.a import g

            def f(state):
              state = state._replace(x=1)  # a NamedTuple method, not a module's private name
              p = collections.namedtuple("P", "x")(1)._asdict()
              return a_lib._secret, a._other, toy.a._third, a.__name__, g, p
            """,
    })
    uses = graph["toy.b"].private_uses
    self.assertLen(uses, 4, uses)
    for text in ("from toy.a import _secret", "a_lib._secret", "a._other", "toy.a._third"):
      self.assertTrue(any(text in u for u in uses), (text, uses))
    self.assertEqual(graph["toy.a"].private_uses, [])

  def test_flags_upward_and_sideways_imports(self):
    _, graph = self._graph({"a": "from toy import b\n", "b": "x = 1\n", "c": "from toy import d\n", "d": "x = 1\n",
                            "e": "from toy import other\n", "other": "x = 1\n"})
    problems = layer_violations(graph, "toy", (("a",), ("b",), ("c", "d"), ("e",)))
    self.assertLen(problems, 3, problems)
    self.assertIn("toy.a (layer 0) imports toy.b (layer 1): not downward", problems)
    self.assertIn("toy.c (layer 2) imports toy.d (layer 2): not downward", problems)
    self.assertIn("toy.other is a module of toy in no layer", problems)

  def test_flags_an_import_of_a_later_subpackage(self):
    _, graph = self._graph({
        "low/a": "import json\n",
        "low/b": "from toy.low import a\n\ndef f():\n  from toy.high import c  # inside a function: counted too\n",
        "high/c": "from toy.low import a\nfrom toy import low\n",
        "stray": "x = 1\n",
    })
    problems = order_violations(graph, "toy", ("low", "high"))
    self.assertEqual(problems, ["toy.low.b imports toy.high: toy.low comes before toy.high",
                                "toy.low.b imports toy.high.c: toy.low comes before toy.high",
                                "toy.stray is in none of the subpackages low, high"])
    self.assertEqual(order_violations(graph, "toy", ("low", "high", "stray")),
                     problems[:2])  # toy.stray is then a subpackage of its own
    self.assertEqual(graph["toy.low.a"].outside, {"json"})

  def test_flags_forbidden_imports_but_not_from_inside(self):
    _, graph = self._graph({
        "claims/x": "from toy.claims import y\nfrom toy import grid\n",
        "claims/y": "x = 1\n",
        "grid/g": "from toy.claims import y\n",
        "sweep": "import toy.claims.x\n",
    })
    problems = forbidden_imports(graph, (("toy", "toy.claims"),))
    self.assertEqual(problems, ["toy.grid.g imports toy.claims", "toy.grid.g imports toy.claims.y",
                                "toy.sweep imports toy.claims", "toy.sweep imports toy.claims.x"])

  def test_flags_a_name_taken_through_a_module_that_imports_it(self):
    root, graph = self._graph({
        "a": "def f():\n  return 1\n\nK = 2\n",
        "b": "from toy.a import f\nfrom toy import a as a_lib\n\ndef g():\n  return f() + a_lib.K\n",
        "c": "from toy import b\nfrom toy.b import f\n\nx = b.g() + b.a_lib.K + b.f() + len(b.__name__)\n",
    })
    (root / "main.py").write_text("from toy import b\nimport toy\n\nprint(b.f, b.g, toy.b.f)\n")
    problems = through_uses(graph, {"main": module_imports("main", root / "main.py", package_modules(root, "toy"),
                                                            "toy")})
    self.assertEqual(problems, ["main:4: f through toy.b", "toy.c:2: f through toy.b",
                                "toy.c:4: a_lib through toy.b", "toy.c:4: f through toy.b"])
    self.assertEqual(graph["toy.b"].defines, {"g"})


class ScalingImportsTest(absltest.TestCase):
  """The checks on scaling/ itself."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.graph = import_graph(ROOT, "scaling")

  def test_walker_sees_the_layers(self):
    for sub in ORDER:
      self.assertIn(f"scaling.{sub}", self.graph)
    for layer in ATTENTION_LAYERS:
      for m in layer:
        self.assertIn(f"scaling.attention.{m}", self.graph)
    self.assertGreaterEqual(self.graph["scaling.attention.dispatch"].imports,
                            {"scaling.attention.logits", "scaling.attention.dense", "scaling.attention.blockwise",
                             "scaling.attention.pallas", "scaling.base", "scaling.base.validation"})
    self.assertIn("scaling.attention.blockwise", self.graph["scaling.attention.pallas"].imports)
    self.assertIn("scaling.studies.grid", self.graph["scaling.studies.claims.study"].imports)

  def test_no_import_cycle(self):
    cycle = find_cycle({m: g.imports for m, g in self.graph.items()})
    self.assertIsNone(cycle, f"import cycle: {' -> '.join(cycle or [])}")

  def test_no_private_names_across_modules(self):
    uses = [u for g in self.graph.values() for u in g.private_uses]
    self.assertEqual(uses, [], "\n".join(uses))

  def test_subpackages_import_only_from_themselves_and_earlier_ones(self):
    problems = order_violations(self.graph, "scaling", ORDER)
    self.assertEqual(problems, [], "\n".join(problems))

  def test_the_library_imports_no_main(self):
    problems = [f"{name} imports {main}" for name, g in sorted(self.graph.items()) for main in sorted(g.outside)
                if main in MAINS + (TESTS,)]
    self.assertEqual(problems, [], "\n".join(problems))

  def test_attention_layers_import_only_downward(self):
    problems = layer_violations(self.graph, "scaling.attention", ATTENTION_LAYERS)
    self.assertEqual(problems, [], "\n".join(problems))

  def test_the_studies_stay_apart(self):
    self.assertEqual({"scaling.studies.grid", "scaling.studies.claims", "scaling.studies.coord_check",
                      "scaling.studies.transfer"} - set(self.graph), set())
    problems = forbidden_imports(self.graph, STUDIES_APART)
    self.assertEqual(problems, [], "\n".join(problems))

  def test_every_name_comes_from_the_module_that_defines_it(self):
    # E.g. resolve_logit_options from scaling.attention.logits, not through scaling.attention.dispatch, which imports
    # it; in the project's mains too. A package's __init__ (the top level's names) is where users import from.
    problems = through_uses(self.graph, users_of(ROOT, "scaling", MAINS))
    self.assertEqual(problems, [], "\n".join(problems))
    # The tests may reach a module's imports to patch them (``mock.patch.object(results.subprocess, ...)``), but take
    # no attention function through the dispatcher.
    problems = [p for p in through_uses(self.graph, users_of(ROOT, "scaling", (TESTS,)))
                if p.endswith(" through scaling.attention.dispatch")]
    self.assertEqual(problems, [], "\n".join(problems))

  def test_every_subpackage_says_what_it_holds(self):
    for path in sorted((ROOT / "scaling").rglob("__init__.py")):
      docstring = ast.get_docstring(ast.parse(path.read_text()))
      self.assertTrue(docstring and len(docstring.split()) >= 8, f"{path.relative_to(ROOT)} has no docstring")

  def test_no_library_file_is_too_long(self):
    sizes = {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines()) for p in (ROOT / "scaling").rglob("*.py")}
    long = {p: n for p, n in sorted(sizes.items()) if n > MAX_LINES}
    self.assertEqual(long, {}, f"over {MAX_LINES} lines")

  def test_version_is_written_once_and_setup_reads_it(self):
    self.assertRegex(scaling.__version__, r"^\d+\.\d+\.\d+([ab]\d+|rc\d+)?$")  # PEP 440 release
    proc = subprocess.run([sys.executable, "setup.py", "--version"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    self.assertEqual(proc.returncode, 0, proc.stderr)
    self.assertEqual(proc.stdout.strip().splitlines()[-1], scaling.__version__)
    self.assertNotIn(scaling.__version__, (ROOT / "setup.py").read_text())  # not typed there a second time


if __name__ == "__main__":
  absltest.main()
