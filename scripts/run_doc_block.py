"""Runs the Python block of a page that a generated section follows, and writes what it printed and how long it
took into that section.

  python scripts/run_doc_block.py your_model_first_example
  python scripts/run_doc_block.py NAME [PAGE]

The block is the last ```python block before ``<!-- BEGIN generated: NAME -->`` in the page that
``scaling.runs.report.GENERATED_SECTIONS`` names for NAME (or in PAGE, relative to the repository root, when given).
It runs as a reader would run it: a fresh interpreter (this one), the repository on PYTHONPATH, an empty working
folder, JAX on the CPU unless JAX_PLATFORMS says otherwise. The section gets the block's standard output (Markdown,
rendered by the page) after one line with the command, the run's wall-clock and CPU time, the machine's CPU count and
the jax version. A block that fails leaves the page as it was (exit status 1, its standard error shown).

The page's recipes (a ```python block right after a ``<!-- recipe: NAME -->`` line) are run by tests/test_recipes.py,
not by the docs test; ``recipe_blocks`` finds them for both.
"""

from __future__ import annotations

from importlib import metadata
import os
import pathlib
import re
import resource
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scaling.runs import report  # pylint: disable=g-import-not-at-top,wrong-import-position

PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)
RECIPE_BLOCK = re.compile(r"^<!-- recipe: ([\w-]+) -->\n```python\n(.*?)^```$", re.S | re.M)
USAGE = "usage: python scripts/run_doc_block.py NAME [PAGE]"


def recipe_blocks(text: str) -> dict[str, str]:
  """{name: code} of the recipes of a page (a ```python block right after ``<!-- recipe: NAME -->``)."""
  found = RECIPE_BLOCK.findall(text)
  names = [name for name, _ in found]
  duplicated = sorted({n for n in names if names.count(n) > 1})
  if duplicated:
    raise ValueError(f"recipe names used twice: {', '.join(duplicated)}")
  return dict(found)


def without_recipes(text: str) -> str:
  """The page without its recipe blocks (what the docs test runs)."""
  return RECIPE_BLOCK.sub("", text)


def block_before(text: str, name: str) -> str:
  """The code of the last ```python block before the BEGIN marker of section ``name``."""
  begin = text.find(f"<!-- BEGIN generated: {name} -->")
  if begin < 0:
    raise ValueError(f"no section {name!r} in the page")
  blocks = [m.group(1) for m in PYTHON_BLOCK.finditer(text) if m.end() <= begin]
  if not blocks:
    raise ValueError(f"no python block before section {name!r}")
  return blocks[-1]


def run_block(code: str) -> tuple[subprocess.CompletedProcess, float, float]:
  """(the finished process, wall-clock seconds, CPU seconds) of ``code`` run in a fresh interpreter."""
  env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
         "MPLBACKEND": "Agg"}
  env.setdefault("JAX_PLATFORMS", "cpu")
  before = resource.getrusage(resource.RUSAGE_CHILDREN)
  start = time.perf_counter()
  with tempfile.TemporaryDirectory() as folder:
    done = subprocess.run([sys.executable, "-c", code], cwd=folder, env=env, capture_output=True, text=True,
                          check=False)
  wall = time.perf_counter() - start
  after = resource.getrusage(resource.RUSAGE_CHILDREN)
  cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
  return done, wall, cpu


def section_text(command: str, output: str, wall: float, cpu: float, jax_version: str) -> str:
  """The generated section: the command (its arguments), the times, then the block's output."""
  return (f"What it prints (`python scripts/run_doc_block.py {command}` ran it in {wall:.0f} s, {cpu:.0f} s of CPU "
          f"time, on {os.cpu_count()} CPU cores with jax {jax_version}):\n\n{output.strip()}\n")


def main(argv: list[str], root: pathlib.Path = ROOT) -> int:
  if len(argv) not in (2, 3):
    sys.stderr.write(USAGE + "\n")
    return 2
  name = argv[1]
  where = argv[2] if len(argv) == 3 else report.GENERATED_SECTIONS.get(name)
  if where is None:
    sys.stderr.write(f"error: unknown generated section {name!r} (scaling.runs.report.GENERATED_SECTIONS)\n")
    return 2
  page = pathlib.Path(root) / where
  try:
    code = block_before(page.read_text(), name)
  except (OSError, ValueError) as e:
    sys.stderr.write(f"error: {where}: {e}\n")
    return 2
  done, wall, cpu = run_block(code)
  if done.returncode != 0:
    sys.stderr.write(f"error: the block before section {name!r} of {where} failed; the page is unchanged\n")
    sys.stderr.write(done.stderr)
    return 1
  command = " ".join([name] + argv[2:])
  report.update_generated(root, name, section_text(command, done.stdout, wall, cpu, metadata.version("jax")), page)
  print(f"{where}: section {name!r} replaced by the block's output ({wall:.0f} s)")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
