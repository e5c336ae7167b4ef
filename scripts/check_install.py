"""The package as installed: built from this checkout into a fresh virtual environment, run from outside the checkout.

  ${PYTHON:-python3} scripts/check_install.py            # under a minute on 2 CPU cores

Builds a wheel of a copy of this checkout's package files (the interpreter's own
setuptools, no build isolation: nothing is downloaded, nothing is written into the
checkout), installs it with ``pip install --no-deps --no-index`` into a fresh
virtual environment that sees the interpreter's site-packages (the dependencies),
copies this file to an empty folder outside the checkout and runs it there with
the environment's python. That run,
with a package named ``experiments`` that refuses to import first on PYTHONPATH
(the library must never need the checkout's mains, in its own process or in the
ones it starts), imports ``scaling`` from the environment and runs on tiny sizes
each study's ``run`` (the d_k sweep, two claims, the coordinate check, the width
transfer on the shipped corpus ``--text_file=shakespeare``) and the benchmark
paths that start fresh processes (the sweep rerun with the compilation cache,
one memory measurement), checking what each wrote.
Prints one line per check and ``install check: ok`` at the end; exits 1 when a
check fails and 3 when this machine cannot build the wheel or make a virtual
environment with pip (nothing was checked).
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE_FILES = ("setup.py", "setup.cfg", "pyproject.toml", "MANIFEST.in", "README.md", "scaling", "experiments",
                 "benchmarks")
"""What building the package reads (those that exist)."""
CANNOT_RUN = 3
"""Exit status when this machine cannot make the virtual environment (nothing was checked)."""
BLOCKER = 'raise ImportError("the installed library imported experiments, a package of the checkout")\n'


def _venv(folder: pathlib.Path) -> pathlib.Path | None:
  """A virtual environment in ``folder`` over this interpreter's site-packages, with pip; its python, or None."""
  made = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(folder)], capture_output=True,
                        text=True, check=False)
  python = folder / "bin" / "python"
  if made.returncode != 0 or not python.exists():
    print(f"install check: cannot make a virtual environment: {made.stderr.strip()[-300:]}", file=sys.stderr)
    return None
  pip = subprocess.run([str(python), "-m", "pip", "--version"], capture_output=True, text=True, check=False)
  if pip.returncode != 0:
    print(f"install check: no pip in the virtual environment: {pip.stderr.strip()[-300:]}", file=sys.stderr)
    return None
  return python


def _can_build_wheels() -> bool:
  """Whether this interpreter's setuptools builds wheels without downloading anything (70.1 or later, or wheel)."""
  try:
    import setuptools  # pylint: disable=import-outside-toplevel
  except ImportError:
    return False
  version = tuple(int(part) for part in setuptools.__version__.split(".")[:2] if part.isdigit())
  return version >= (70, 1) or importlib.util.find_spec("wheel") is not None


def _wheel(tmp: pathlib.Path) -> pathlib.Path:
  """A wheel of a copy of the package files of the checkout (built outside it), in ``tmp / "dist"``."""
  source = tmp / "source"
  source.mkdir()
  for name in PACKAGE_FILES:
    if (ROOT / name).is_dir():
      shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    elif (ROOT / name).exists():
      shutil.copy(ROOT / name, source / name)
  subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--wheel-dir",
                  str(tmp / "dist"), str(source)], check=True, cwd=tmp, stdout=subprocess.DEVNULL)
  (wheel,) = (tmp / "dist").glob("*.whl")
  return wheel


def main() -> int:
  """Builds the wheel, makes the environment, installs the wheel, runs ``inside`` there; returns the exit status."""
  if not _can_build_wheels():
    print("install check: this interpreter's setuptools cannot build a wheel offline (it needs 70.1 or later, or "
          "the wheel package)", file=sys.stderr)
    return CANNOT_RUN
  with tempfile.TemporaryDirectory(prefix="scaling-install-check-") as tmp:
    tmp = pathlib.Path(tmp)
    python = _venv(tmp / "venv")
    if python is None:
      return CANNOT_RUN
    start = time.perf_counter()
    wheel = _wheel(tmp)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
                   check=True, cwd=tmp, stdout=subprocess.DEVNULL)
    print(f"install check: built and installed {wheel.name} ({time.perf_counter() - start:.0f}s)", flush=True)
    blocked = tmp / "blocked" / "experiments"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text(BLOCKER)
    work = tmp / "elsewhere"
    work.mkdir()
    shutil.copy(__file__, work / "check_install.py")
    env = {**os.environ, "PYTHONPATH": str(blocked.parent), "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"),
           "MPLBACKEND": "Agg", "XDG_CACHE_HOME": str(tmp / "cache")}
    done = subprocess.run([str(python), "check_install.py", "--inside", str(ROOT)], cwd=work, env=env, check=False)
    return 0 if done.returncode == 0 else 1


def _check(name: str, fn) -> None:
  """Runs one check, printing its name and seconds."""
  start = time.perf_counter()
  fn()
  print(f"install check: {name} ({time.perf_counter() - start:.0f}s)", flush=True)


def inside(root: pathlib.Path) -> int:
  """The checks, in the virtual environment, from a folder outside the checkout ``root``; returns the exit status."""
  import scaling  # pylint: disable=import-outside-toplevel
  where = pathlib.Path(scaling.__file__).resolve()
  if not where.is_relative_to(pathlib.Path(sys.prefix).resolve()) or where.is_relative_to(root):
    print(f"install check: scaling imported from {where}, not from the virtual environment", file=sys.stderr)
    return 1
  print(f"install check: import scaling {scaling.__version__} from {where.parent}", flush=True)
  # pylint: disable=import-outside-toplevel
  from scaling.base import config as config_lib
  from scaling.studies.claims import study as claims
  from scaling.studies.coord_check import study as coord_check
  from scaling.studies import sweep
  from scaling.studies.transfer import study as transfer
  from benchmarks import memory
  from benchmarks import sweep as sweep_bench

  out = pathlib.Path.cwd() / "runs"
  tiny_sweep = sweep.SweepConfig(d_k=(4, 8), rules=("sqrt", "qk_norm"), seq_len=(8,), batch=1, num_seeds=2)
  tiny_training = {"widths": (16, 32), "steps": 2, "num_seeds": 1, "depth": 1, "seq_len": 8, "batch_size": 2}
  studies = (
      ("sweep", sweep.run, tiny_sweep, "results.jsonl"),
      ("claims", claims.run, claims.ClaimsConfig(mode="quick", ids=("variance_is_dk", "cite_t5_fixed_sqrt"),
                                                 d_k=(64, 128), seq_len=16), "claims.jsonl"),
      ("coord_check", coord_check.run, config_lib.build(coord_check.CoordCheckConfig, tiny_training), "slopes.jsonl"),
      ("transfer on the shipped corpus", transfer.run,
       config_lib.build(transfer.TransferConfig, {**tiny_training, "log2_lrs": (-6.0, -4.0), "text_file": "shakespeare"}),
       "optimum.jsonl"),
  )
  from scaling.training.data import text_corpus
  corpus = text_corpus.corpus_path("shakespeare").resolve()
  if not corpus.is_file() or not corpus.is_relative_to(where.parent):
    print(f"install check: the shipped corpus is not in the installed package: {corpus}", file=sys.stderr)
    return 1
  for name, run, config, written in studies:

    def one(name=name, run=run, config=config, written=written):
      folder = out / name.split()[0]
      run(config, folder)
      rows = [json.loads(line) for line in (folder / written).read_text().splitlines()]
      assert rows, f"{name} wrote no rows to {written}"

    _check(f"{name}.run", one)

  def rerun():
    result = sweep_bench.rerun_with_cache(tiny_sweep)
    first, second = result["runs"]
    assert first["cache_files"] > 0 and second["cache_files"] == first["cache_files"], result

  _check("benchmarks: the sweep rerun in two fresh processes", rerun)

  def measure():
    row = memory.collect(memory.launch(memory.MemoryConfig(impl="dense", seq_len=16, num_heads=1, head_dim=4), 120.0))
    assert row["status"] == "ok", row

  _check("benchmarks: one memory measurement in a fresh process", measure)
  print("install check: ok", flush=True)
  return 0


if __name__ == "__main__":
  if any(arg in ("-h", "--help") for arg in sys.argv[1:]):
    print(__doc__.strip())
    sys.exit(0)
  if sys.argv[1:2] == ["--inside"]:
    sys.exit(inside(pathlib.Path(sys.argv[2]).resolve()))
  sys.exit(main())
