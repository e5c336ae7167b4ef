"""Flax's own attention tests, run with ``scaling.make_attention_fn`` as the default ``attention_fn``.

  python scripts/flax_attention_suite.py                        # the installed flax's sdist, from the package registry
  python scripts/flax_attention_suite.py --sdist flax-X.tar.gz  # a source distribution already here (offline)

Downloads the source distribution of the installed flax version
(``pip download --no-binary :all: --no-deps flax==<version>``) into a temporary folder, extracts
tests/linen/linen_attention_test.py and tests/nnx/nn/attention_test.py from it and runs them with pytest
(``sys.executable -m pytest``). This file is also the pytest plugin of that run (``-p flax_attention_suite``):
before any test is collected it makes ``make_attention_fn(rule=--rule)`` the default ``attention_fn`` of
flax.linen's and flax.nnx's attention modules and counts the adapter's calls. Prints the passed and failed counts
and the number of calls; exits 1 when a test fails or errs, or when the adapter was never called, and 2 when the
tests cannot be had.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib.metadata
import inspect
import json
import os
import pathlib
import subprocess
import sys
import tarfile
import tempfile
from typing import Any
import xml.etree.ElementTree as ET

ROOT = pathlib.Path(__file__).resolve().parents[1]
TEST_FILES = ("tests/linen/linen_attention_test.py", "tests/nnx/nn/attention_test.py")
REPORT_ENV = "FLAX_ATTENTION_SUITE_REPORT"
RULE_ENV = "FLAX_ATTENTION_SUITE_RULE"
_PLUGIN = pathlib.Path(__file__).stem

_calls = 0
_patched: list[str] = []


# --- the pytest plugin ---------------------------------------------------------------------------------------------

def counted(fn):
  """``fn`` with its calls counted in this module (``functools.wraps`` keeps the signature linen filters by)."""

  @functools.wraps(fn)
  def wrapper(*args, **kwargs):
    global _calls
    _calls += 1
    return fn(*args, **kwargs)

  return wrapper


def patch_flax_defaults(attention_fn) -> list[str]:
  """Makes ``attention_fn`` the default ``attention_fn`` of every attention module of flax.linen and flax.nnx.

  Args:
    attention_fn: the new default.

  Returns:
    The names of the classes patched.

  Raises:
    RuntimeError: when a class's signature does not show the new default afterwards, or no class was found.
  """
  import flax.linen.attention as linen_attention  # pylint: disable=g-import-not-at-top
  import flax.nnx.nn.attention as nnx_attention  # pylint: disable=g-import-not-at-top

  originals = (linen_attention.dot_product_attention, nnx_attention.dot_product_attention)
  swap = lambda d: attention_fn if any(d is f for f in originals) else d
  patched = []
  for module in (linen_attention, nnx_attention):
    for cls in vars(module).values():
      if not isinstance(cls, type) or cls.__module__ != module.__name__:
        continue
      param = inspect.signature(cls.__init__).parameters.get("attention_fn")
      if param is None or not any(param.default is f for f in originals):
        continue
      init = cls.__init__
      while hasattr(init, "__wrapped__"):  # linen wraps the dataclass __init__ with a copy of its signature
        sig = getattr(init, "__signature__", None)
        if sig is not None:
          init.__signature__ = sig.replace(parameters=[p.replace(default=swap(p.default))
                                                       for p in sig.parameters.values()])
        init = init.__wrapped__
      if init.__defaults__:
        init.__defaults__ = tuple(swap(d) for d in init.__defaults__)
      if init.__kwdefaults__:
        init.__kwdefaults__ = {k: swap(d) for k, d in init.__kwdefaults__.items()}
      if dataclasses.is_dataclass(cls):  # linen: the field's default and the class attribute, for clone() and reads
        for field in dataclasses.fields(cls):
          if field.name == "attention_fn":
            field.default = attention_fn
        if "attention_fn" in vars(cls):
          setattr(cls, "attention_fn", attention_fn)
      if inspect.signature(cls.__init__).parameters["attention_fn"].default is not attention_fn:
        raise RuntimeError(f"could not patch the default attention_fn of {module.__name__}.{cls.__name__}")
      patched.append(f"{module.__name__}.{cls.__name__}")
  if not patched:
    raise RuntimeError("no Flax attention module with a default attention_fn was found to patch")
  return patched


def pytest_configure(config):
  """Patches Flax's defaults before any test module is imported."""
  del config
  from scaling.attention import flax_adapter as flax_attention  # pylint: disable=g-import-not-at-top

  _patched[:] = patch_flax_defaults(counted(flax_attention.make_attention_fn(rule=os.environ.get(RULE_ENV, "sqrt"))))


def pytest_report_header(config):
  del config
  return f"attention_fn: scaling.make_attention_fn(rule={os.environ.get(RULE_ENV, 'sqrt')!r}) in {', '.join(_patched)}"


def pytest_unconfigure(config):
  """Writes the adapter's call count where the script reads it."""
  del config
  path = os.environ.get(REPORT_ENV)
  if path:
    pathlib.Path(path).write_text(json.dumps({"calls": _calls, "patched": _patched}))


# --- the script ----------------------------------------------------------------------------------------------------

class SuiteError(Exception):
  """The tests could not be had (download or extraction)."""


def download_sdist(version: str, dest: pathlib.Path) -> pathlib.Path:
  """flax==``version``'s source distribution from the package registry, into ``dest``."""
  cmd = [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "--quiet",
         f"flax=={version}", "-d", str(dest)]
  done = subprocess.run(cmd, capture_output=True, text=True, check=False)
  found = sorted(dest.glob("flax-*.tar.gz"))
  if done.returncode or not found:
    raise SuiteError(f"pip download of flax=={version} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
  return found[0]


def extract_tests(sdist: pathlib.Path, dest: pathlib.Path) -> list[pathlib.Path]:
  """Writes the ``TEST_FILES`` of ``sdist`` (a .tar.gz, files under one top folder) to the same paths in ``dest``."""
  try:
    with tarfile.open(sdist) as tar:
      by_path = {m.name.split("/", 1)[-1]: m for m in tar.getmembers() if m.isfile()}
      missing = [p for p in TEST_FILES if p not in by_path]
      if missing:
        raise SuiteError(f"{sdist.name} has no {', '.join(missing)}")
      out = []
      for rel in TEST_FILES:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(tar.extractfile(by_path[rel]).read())
        out.append(target)
  except (OSError, tarfile.TarError) as e:
    raise SuiteError(f"cannot read {sdist}: {e}") from None
  (dest / "pytest.ini").write_text("[pytest]\n")  # the temporary folder is pytest's root: no outer configuration
  return out


def run_tests(work: pathlib.Path, rule: str, pytest_args: list[str]) -> dict[str, Any]:
  """Runs the extracted tests under this plugin: their counts, the adapter's calls and the classes patched."""
  report, junit = work / "adapter_calls.json", work / "junit.xml"
  env = dict(os.environ, **{REPORT_ENV: str(report), RULE_ENV: rule})
  env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "scripts")] + [p for p in [env.get("PYTHONPATH")] if p])
  cmd = [sys.executable, "-m", "pytest", "-q", "-p", _PLUGIN, "-p", "no:cacheprovider", "-p", "no:xdist",
         f"--junitxml={junit}", *TEST_FILES, *pytest_args]
  done = subprocess.run(cmd, cwd=work, env=env, check=False)
  counts = dict(tests=0, failures=0, errors=0, skipped=0)
  if junit.exists():
    for suite in ET.parse(junit).getroot().iter("testsuite"):
      for name in counts:
        counts[name] += int(suite.get(name, 0))
  plugin = json.loads(report.read_text()) if report.exists() else {"calls": 0, "patched": []}
  failed = counts["failures"] + counts["errors"]
  if done.returncode not in (0, 1) and not failed:  # pytest could not run the tests (a usage or internal error)
    counts["errors"] += 1
  return dict(passed=counts["tests"] - failed - counts["skipped"], failed=counts["failures"], errors=counts["errors"],
              skipped=counts["skipped"], calls=plugin["calls"], patched=plugin["patched"], pytest_exit=done.returncode)


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  parser.add_argument("--sdist", type=pathlib.Path, help="a flax source distribution (.tar.gz) to take the tests "
                      "from, instead of downloading the installed version's")
  parser.add_argument("--rule", default="sqrt", help="the logit-scale rule of the adapter (default: sqrt, with "
                      "which it reproduces Flax's default attention)")
  parser.add_argument("--work_dir", type=pathlib.Path, help="where to download and run (default: a temporary "
                      "folder, removed afterwards)")
  parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --), e.g. -- -k dtype")
  args = parser.parse_args(argv)
  with tempfile.TemporaryDirectory(prefix="flax_attention_suite_") as tmp:
    work = args.work_dir or pathlib.Path(tmp)
    work.mkdir(parents=True, exist_ok=True)
    try:
      if args.sdist is not None:
        sdist = args.sdist.resolve()
      else:
        sdist = download_sdist(importlib.metadata.version("flax"), work)
      extract_tests(sdist, work)
    except SuiteError as e:
      sys.stderr.write(f"error: {e}\n")
      return 2
    result = run_tests(work, args.rule, args.pytest_args)
  print(f"{sdist.name}: {', '.join(TEST_FILES)} with make_attention_fn(rule={args.rule!r}) as the default "
        f"attention_fn: {result['passed']} passed, {result['failed']} failed, {result['errors']} errors, "
        f"{result['skipped']} skipped; the adapter was called {result['calls']} times")
  print(f"the default attention_fn of: {', '.join(result['patched']) or 'nothing'}")
  if result["calls"] == 0:
    sys.stderr.write("error: the adapter was never called: the default attention_fn was not patched\n")
    return 1
  return 1 if result["failed"] or result["errors"] or result["passed"] == 0 else 0


if __name__ == "__main__":
  sys.exit(main())
