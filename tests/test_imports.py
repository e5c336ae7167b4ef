"""The import structure of scaling/: no import cycle, no private names across modules, attention layered downward.

The walker parses every module with ``ast`` (imports inside functions included) and is itself tested on small
packages written here, one of them circular, so each check can fail.
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
from scaling.attention import dispatch as attention
from scaling.attention import blockwise
from scaling.attention import dense as dense_attention
from scaling.attention import logits

# The attention modules from the bottom up. A module may import only modules of strictly lower layers (those of one
# layer sit side by side and do not import each other).
ATTENTION_LAYERS = (
    ("validation",),
    ("rules", "masking"),
    ("logits",),
    ("dense_attention", "blockwise"),
    ("pallas_attention", "autotune"),
    ("attention", "metrics"),
    ("flax_attention",),
)


@dataclasses.dataclass
class ModuleImports:
  """What one module imports from its own package, and where it uses another module's private names."""

  imports: set[str] = dataclasses.field(default_factory=set)
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


def _ancestors(name: str) -> list[str]:
  """Enclosing packages of a dotted name, outermost first: a.b.c -> [a, a.b]."""
  parts = name.split(".")
  return [".".join(parts[:i]) for i in range(1, len(parts))]


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


def module_imports(name: str, path: pathlib.Path, modules: dict[str, pathlib.Path], package: str) -> ModuleImports:
  """The package modules that ``name`` imports (anywhere in the file) and its uses of other modules' private names.

  Importing a module also runs its enclosing packages, so they count as imported too, except the importer's own
  (already running) unless a name other than a submodule is taken from one (``from pkg import f`` inside a module
  of pkg needs pkg's __init__ to have defined f: a real cycle). A private name is one with a leading underscore reached as ``from pkg.x import _y`` or as an
  attribute of a name bound to a package module (``x_lib._y``, ``pkg.x._y``); attributes of other objects (a
  NamedTuple's ``_replace``) are not module names and are left alone.
  """
  in_package = lambda m: m == package or m.startswith(package + ".")
  is_package = path.name == "__init__.py"
  own = set(_ancestors(name)) | {name}
  tree = ast.parse(path.read_text(), filename=str(path))
  result = ModuleImports()
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
          continue
        add(alias.name)
        if alias.asname:
          bound[alias.asname] = alias.name
        else:
          bound[alias.name.split(".")[0]] = alias.name.split(".")[0]
    elif isinstance(node, ast.ImportFrom):
      source = _absolute(node.module, node.level, name, is_package)
      if not in_package(source):
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
      if _is_private(attr) and current != name:
        private(node.lineno, f"{'.'.join([root_name] + attrs[:i + 1])} ({current}.{attr})")
      break
  result.private_uses = sorted(set(result.private_uses))
  return result


def import_graph(root: pathlib.Path, package: str) -> dict[str, ModuleImports]:
  """``module_imports`` of every module of the package."""
  modules = package_modules(root, package)
  return {name: module_imports(name, path, modules, package) for name, path in modules.items()}


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


def layer_violations(graph: dict[str, ModuleImports], package: str,
                     layers: tuple[tuple[str, ...], ...]) -> list[str]:
  """Imports by a layered module of a package module that is not in a strictly lower layer."""
  level = {f"{package}.{m}": i for i, layer in enumerate(layers) for m in layer}
  problems = []
  for name in sorted(level):
    if name not in graph:
      problems.append(f"{name} is not a module of the package")
      continue
    for target in sorted(graph[name].imports):
      if target not in level:
        problems.append(f"{name} imports {target}, which is not one of the layered modules")
      elif level[target] >= level[name]:
        problems.append(f"{name} (layer {level[name]}) imports {target} (layer {level[target]}): not downward")
  return problems


def _write_package(root: pathlib.Path, package: str, files: dict[str, str]) -> None:
  """Writes ``files`` (module name -> source) as the package ``root/package``."""
  (root / package).mkdir()
  (root / package / "__init__.py").write_text("")
  for module, source in files.items():
    (root / package / f"{module}.py").write_text(textwrap.dedent(source))


class WalkerTest(absltest.TestCase):
  """The walker on small packages written here, so that each check is seen to fail."""

  def test_finds_a_cycle_through_an_import_inside_a_function(self):
    root = pathlib.Path(self.create_tempdir().full_path)
    _write_package(root, "toy", {
        "a": "from toy import b\n",
        "b": "import math\n\ndef f():\n  from toy import a\n  return a.g()\n",
        "c": "from toy import a\nfrom toy.a import g\n",
    })
    graph = import_graph(root, "toy")
    self.assertEqual(graph["toy.b"].imports, {"toy.a"})
    self.assertEqual(graph["toy.c"].imports, {"toy.a"})
    self.assertEqual(find_cycle({m: g.imports for m, g in graph.items()}), ["toy.a", "toy.b", "toy.a"])

  def test_no_cycle_in_a_layered_package(self):
    root = pathlib.Path(self.create_tempdir().full_path)
    _write_package(root, "toy", {"a": "x = 1\n", "b": "from toy import a\n", "c": "import toy.a\nimport toy.b\n"})
    graph = import_graph(root, "toy")
    self.assertEqual(graph["toy.c"].imports, {"toy.a", "toy.b"})
    self.assertIsNone(find_cycle({m: g.imports for m, g in graph.items()}))
    self.assertEqual(layer_violations(graph, "toy", (("a",), ("b",), ("c",))), [])

  def test_flags_private_names_of_other_modules_only(self):
    root = pathlib.Path(self.create_tempdir().full_path)
    _write_package(root, "toy", {
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
    uses = import_graph(root, "toy")["toy.b"].private_uses
    self.assertLen(uses, 4, uses)
    for text in ("from toy.a import _secret", "a_lib._secret", "a._other", "toy.a._third"):
      self.assertTrue(any(text in u for u in uses), (text, uses))
    self.assertEqual(import_graph(root, "toy")["toy.a"].private_uses, [])

  def test_flags_upward_and_sideways_imports(self):
    root = pathlib.Path(self.create_tempdir().full_path)
    _write_package(root, "toy", {"a": "from toy import b\n", "b": "x = 1\n", "c": "from toy import d\n",
                                 "d": "x = 1\n", "e": "from toy import other\n", "other": "x = 1\n"})
    problems = layer_violations(import_graph(root, "toy"), "toy", (("a",), ("b",), ("c", "d"), ("e",)))
    self.assertLen(problems, 3, problems)
    self.assertIn("toy.a (layer 0) imports toy.b (layer 1): not downward", problems)
    self.assertIn("toy.c (layer 2) imports toy.d (layer 2): not downward", problems)
    self.assertIn("toy.e imports toy.other, which is not one of the layered modules", problems)


class ScalingImportsTest(absltest.TestCase):
  """The checks on scaling/ itself."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.graph = import_graph(pathlib.Path(scaling.__file__).parent.parent, "scaling")

  def test_walker_sees_the_attention_modules(self):
    for layer in ATTENTION_LAYERS:
      for m in layer:
        self.assertIn(f"scaling.{m}", self.graph)
    self.assertGreaterEqual(self.graph["scaling.attention.dispatch"].imports,
                            {"scaling.attention.logits", "scaling.attention.dense", "scaling.attention.blockwise",
                             "scaling.attention.pallas"})
    self.assertIn("scaling.attention.blockwise", self.graph["scaling.attention.pallas"].imports)

  def test_no_import_cycle(self):
    cycle = find_cycle({m: g.imports for m, g in self.graph.items()})
    self.assertIsNone(cycle, f"import cycle: {' -> '.join(cycle or [])}")

  def test_no_private_names_across_modules(self):
    uses = [u for g in self.graph.values() for u in g.private_uses]
    self.assertEqual(uses, [], "\n".join(uses))

  def test_attention_layers_import_only_downward(self):
    problems = layer_violations(self.graph, "scaling", ATTENTION_LAYERS)
    self.assertEqual(problems, [], "\n".join(problems))

  def test_names_stay_where_users_import_them(self):
    moved = {logits: ("LogitOptions", "resolve_logit_options", "check_qkv", "shape_logits", "masked_softmax"),
             dense_attention: ("attention_with_aux", "attention_logits_and_weights", "attention_logits",
                               "attention_weights"),
             blockwise: ("blockwise_unsupported",)}
    for module, names in moved.items():
      for name in names:
        self.assertIs(getattr(attention, name), getattr(module, name), name)
    for name in ("dot_product_attention", "attention_with_aux", "attention_logits", "attention_weights",
                 "masked_softmax", "blockwise_attention", "make_attention_fn"):
      self.assertTrue(callable(getattr(scaling, name)), name)
    self.assertTrue(callable(blockwise.blockwise_tile_count))
    for name in ("select_implementation", "blockwise_blocks", "Choice", "IMPLEMENTATIONS", "BLOCKS", "LARGE_BLOCKS",
                 "BLOCKWISE_MIN_KV_LEN", "LARGE_BLOCKS_MIN_KV_LEN", "SINGLE_TILE_MAX_LOGITS",
                 "SMALL_SINGLE_TILE_MAX_LOGITS", "TILE_MAX_ELEMENTS", "MIN_BLOCKS", "STEP_CAP_MAX_KV_LEN", "CUDNN_DTYPES", "CUDNN_MAX_HEAD_DIM"):
      self.assertTrue(hasattr(attention, name), name)

  def test_version_is_written_once_and_setup_reads_it(self):
    self.assertRegex(scaling.__version__, r"^\d+\.\d+\.\d+([ab]\d+|rc\d+)?$")  # PEP 440 release
    root = pathlib.Path(scaling.__file__).parents[1]
    proc = subprocess.run([sys.executable, "setup.py", "--version"], cwd=root, capture_output=True, text=True,
                          timeout=120)
    self.assertEqual(proc.returncode, 0, proc.stderr)
    self.assertEqual(proc.stdout.strip().splitlines()[-1], scaling.__version__)
    self.assertNotIn(scaling.__version__, (root / "setup.py").read_text())  # not typed there a second time


if __name__ == "__main__":
  absltest.main()
