"""Benchmark suite `tests`: how long the README's test command takes on this machine, and the slow group.

Runs ``python -m pytest -q`` from the repository root in a fresh process (the default group: every test but those
marked ``slow``, which start Python in a process of their own), then ``python -m pytest -q -m slow`` (that group,
which CI runs too), and reports each one's wall time, its counts of tests and the machine's cores beside the target
``TARGET_S`` for the default group. Writes tests.json, tests.md (the README's test-time line: ``python
scripts/update_readme.py test_time runs/benchmark/latest/tests.md``) and each group's whole pytest output
(pytest_<group>.log). It needs a clone: the tests are not part of the installed package.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import subprocess
import sys
import time
from typing import Any

from scaling.base.config import option
from scaling.base.config import Options
from scaling.base.validation import ConfigError
from scaling.base.validation import ConfigTypeError
from scaling.runs import report
from scaling.runs import results as results_lib

ROOT = pathlib.Path(__file__).resolve().parents[1]
"""The repository root: pytest runs here, so it reads pytest.ini (workers, markers, the default group)."""
GROUPS = {"default": (), "slow": ("-m", "slow")}
"""Group name: the arguments that select it after ``python -m pytest -q``."""
TARGET_S = 300.0
"""The most seconds the default group (README's ``pytest -q``) may take on two cores."""
_COUNTS = re.compile(r"(\d+) (passed|failed|errors?|skipped|deselected)")
_SECONDS = re.compile(r" in ([0-9.]+)s")


@dataclasses.dataclass(frozen=True)
class TestsBenchConfig(Options):
  """Which groups of the test suite are timed, and on which paths."""

  __test__ = False  # not a test class, whatever pytest's name patterns say

  groups: tuple[str, ...] = option(tuple(GROUPS), "Groups timed: default (README's pytest -q) and slow "
                                   "(pytest -q -m slow).", choices=tuple(GROUPS))
  paths: tuple[str, ...] | None = option(None, "Test files or folders, relative to the repository root (default: "
                                         "the testpaths of pytest.ini).")


QUICK = TestsBenchConfig(groups=("default",), paths=("tests/test_architecture.py",))
"""One small file: a smoke run, not a measurement."""


def parse_summary(output: str) -> dict[str, Any]:
  """The counts and seconds of pytest's last summary line (``3 passed, 1 skipped in 2.10s``).

  Raises:
    ValueError: if ``output`` holds no such line.
  """
  for line in reversed(output.strip().splitlines()):
    seconds = _SECONDS.search(line)
    counts = _COUNTS.findall(line)
    if seconds and (counts or "no tests ran" in line):
      parsed = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "deselected": 0}
      for n, what in counts:
        parsed["errors" if what.startswith("error") else what] += int(n)
      return {**parsed, "pytest_s": float(seconds.group(1))}
  raise ValueError(f"no pytest summary line in the output: {output.strip()[-300:]!r}")


def time_group(group: str, paths: tuple[str, ...] | None = None, log: pathlib.Path | None = None) -> dict[str, Any]:
  """Runs one group in a fresh ``python -m pytest -q`` process from the repository root; its wall time and counts.
  ``log``: a file that gets pytest's whole output (which tests failed, and why)."""
  if group not in GROUPS:
    raise ConfigError(f"group must be one of {', '.join(GROUPS)}; got {group!r}")
  paths = tuple(paths or ())
  command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *GROUPS[group], *paths]
  load = os.getloadavg()[0]
  start = time.perf_counter()
  done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
  wall = time.perf_counter() - start
  if log is not None:
    log.write_text(done.stdout + done.stderr)
  summary = parse_summary(done.stdout)
  return {"group": group, "command": " ".join(["pytest", "-q", *GROUPS[group], *paths]), "wall_s": wall,
          "returncode": done.returncode, "load_average": load, **summary}


def run(bench: TestsBenchConfig, out_dir: pathlib.Path) -> dict:
  """Times each group of the test suite; writes tests.json and tests.md into ``out_dir`` (which must exist).

  Returns:
    Each group's wall seconds and whether the default group met ``TARGET_S`` (None where it was not timed).
  """
  if not isinstance(bench, TestsBenchConfig):
    raise ConfigTypeError(f"bench must be a TestsBenchConfig, got {type(bench).__name__}")
  if not (ROOT / "tests").is_dir() or not (ROOT / "pytest.ini").is_file():
    raise ConfigError(f"the tests suite runs the test suite of a clone, and {ROOT} has no tests/ or pytest.ini")
  cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
  rows = [time_group(group, bench.paths, out_dir / f"pytest_{group}.log") for group in bench.groups]
  for row in rows:
    row["meets_target"] = (row["wall_s"] <= TARGET_S) if row["group"] == "default" and not bench.paths else None
  results = {"config": dataclasses.asdict(bench), "cores": cores, "groups": rows}
  print(report.table([{k: r[k] for k in ("group", "wall_s", "passed", "failed", "skipped", "meets_target")}
                      for r in rows], ("group", "wall_s", "passed", "failed", "skipped", "meets_target"),
                     floatfmt=".1f"))
  results_lib.write_json(out_dir / "tests.json", results)
  (out_dir / "tests.md").write_text(readme_markdown(results))
  return {**{f"{r['group']}_s": r["wall_s"] for r in rows},
          "targets_met": next((r["meets_target"] for r in rows if r["meets_target"] is not None), None)}


def readme_markdown(results: dict[str, Any]) -> str:
  """The README's test-time line from ``results`` (tests.json)."""
  parts = []
  for r in results["groups"]:
    what = "the default group" if r["group"] == "default" else "the slow group"
    counts = f"{r['passed']} passed" + (f", {r['failed']} failed" if r["failed"] else "") + (
        f", {r['errors']} errors" if r["errors"] else "") + (f", {r['skipped']} skipped" if r["skipped"] else "")
    line = (f"`{r['command']}` ({what}: {counts}) took {r['wall_s']:.0f} s wall "
            f"(1-minute load average {r['load_average']:.1f} at its start)")
    if r["meets_target"] is not None:
      line += f"; target ≤ {TARGET_S:.0f} s on two cores: {'met' if r['meets_target'] else 'not met'}"
    parts.append(line)
  return (f"Measured by `python -m experiments.benchmark --suite=tests` on {results['cores']} CPU cores: "
          + "; ".join(parts) + ".\n")
