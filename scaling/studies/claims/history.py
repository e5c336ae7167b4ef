"""Each criterion's history, read from the published claims page's git history: when a claim's criterion took its
present form, and whether it changed after the claim's verdict was first published.

A criterion is declared before its measurement; one changed after its verdict was published may have been moved to
the data. The page (docs/claims.md) keeps every published verdict in git: each version's tables name, per row, the
mode (in the row's reproduce command), the claim id, its criterion and its verdict, and each table's heading the
commit its run ran on. ``page_versions`` reads those versions, ``criteria_history`` compares the present criteria
with them, and ``history_text`` words the result for the page. A checkout without git (or without the page's history)
has no history: the rows then say so.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
import subprocess
from typing import Any, Iterable, Mapping

PAGE = "docs/claims.md"
_RUN_COMMIT = re.compile(r"run on commit ([0-9a-f]{7,40})")
_MODE = re.compile(r"--mode=([A-Za-z0-9_]+)")
_IDS = re.compile(r"--ids=([A-Za-z0-9_.\-]+)")
MODE_RENAMES = {"full": "cpu_hour"}
"""Modes published under an earlier name: the page's "full" mode is today's cpu_hour (the same sizes, renamed)."""


@dataclasses.dataclass(frozen=True)
class Published:
  """One claim's row on one published version of the page.

  Attributes:
    page_commit: the commit that published this version of the page (short hash), and its day.
    run_commit: the commit its table's run ran on, from the table's heading ("" when the heading names none).
    criterion: the criterion as the row states it (without its "Why:" line and other readings).
    verdict: the published verdict.
  """

  page_commit: str
  page_date: str
  run_commit: str
  criterion: str
  verdict: str


def _cells(line: str) -> list[str]:
  """The cells of one Markdown table line (pipes escaped as "\\|" stay inside a cell)."""
  inner = line.strip()
  inner = inner[1:] if inner.startswith("|") else inner
  inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
  return [c.strip() for c in re.split(r"(?<!\\)\|", inner)]


def criterion_only(cell: str) -> str:
  """A criterion cell without the reason its thresholds follow ("... . Why: ...") and other readings ("... . Beside,
  ..."), whitespace collapsed: the part that decides the verdict."""
  for cut in (". Why: ", ". Beside, ", ". Criterion history: "):
    if cut in cell:
      cell = cell[:cell.index(cut)]
  return " ".join(cell.replace("\\|", "|").split())


def parse_page(text: str, page_commit: str = "", page_date: str = "") -> dict[tuple[str, str], Published]:
  """The measured rows of one version of the page, by (mode, claim id).

  Args:
    text: the page's Markdown.
    page_commit, page_date: the version's commit and day.

  Returns:
    {(mode, id): Published} for every table row with a criterion, a verdict and a reproduce command naming its mode
    and id (citation rows, with no command, are left out); an earlier mode name is read as today's
    (``MODE_RENAMES``).
  """
  out: dict[tuple[str, str], Published] = {}
  header: list[str] | None = None
  run_commit = ""
  for line in text.splitlines():
    if not line.lstrip().startswith("|"):
      header = None
      found = _RUN_COMMIT.search(line)
      if found and not line.lstrip().startswith("```"):
        run_commit = found.group(1)
      continue
    cells = _cells(line)
    if header is None:
      header = [c.lower() for c in cells]
      continue
    if all(set(c) <= set("-: ") for c in cells):
      continue
    if not {"criterion", "verdict", "reproduce"} <= set(header) or len(cells) != len(header):
      continue
    row = dict(zip(header, cells))
    mode, ids = _MODE.search(row["reproduce"]), _IDS.search(row["reproduce"])
    if not (mode and ids):
      continue
    verdict = re.match(r"\*\*(.+?)\*\*", row["verdict"])
    key = (MODE_RENAMES.get(mode.group(1), mode.group(1)), ids.group(1))
    out[key] = Published(page_commit, page_date, run_commit, criterion_only(row["criterion"]),
                         verdict.group(1) if verdict else row["verdict"])
  return out


def page_versions(root: str | pathlib.Path, page: str = PAGE) -> list[tuple[str, str, str]] | None:
  """Every committed version of ``page`` in the checkout at ``root``, oldest first.

  Args:
    root: the git checkout.
    page: the page's path in it.

  Returns:
    [(short commit, day, text)], or None when ``root`` is not the top of a git checkout (an installed package
    inside someone else's repository reads none of its history) or git is not available.
  """
  root = pathlib.Path(root).resolve()
  git = lambda *args: subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=60,
                                     check=True).stdout
  try:
    if pathlib.Path(git("rev-parse", "--show-toplevel").strip()).resolve() != root:
      return None
    log = git("log", "--format=%h %cs", "--reverse", "--", page).split("\n")
    return [(commit, day, git("show", f"{commit}:{page}"))
            for commit, day in (entry.split() for entry in log if entry.strip())]
  except (OSError, subprocess.SubprocessError):
    return None


def criteria_history(rows: Iterable[Mapping[str, Any]], mode: str,
                     versions: list[tuple[str, str, str]] | None) -> dict[str, dict[str, Any]]:
  """How each measured row's criterion relates to the published versions of the page.

  Args:
    rows: the run's rows (measured ones carry "statistic"; citations and rows not measurable here are skipped).
    mode: the run's mode.
    versions: ``page_versions``' result (None: no history available).

  Returns:
    {id: {"available", "first_published", "criterion_since", "changed_after_publication", "first_verdict",
    "first_criterion"}}: "first_published" the first version publishing the claim in this mode (None: never
    published); "criterion_since" the first version of the latest unbroken run of versions that publish today's
    criterion (None: today's criterion is not the last published one, i.e. it changed after the last publication);
    "changed_after_publication" whether the criterion first published differs from today's; "thresholds_changed"
    whether its "holds if …, does not hold if …" clauses differ (False: only the wording around them changed; True
    where today's criterion states none to compare).
  """
  published: list[dict[tuple[str, str], Published]] = [parse_page(text, c, d) for c, d, text in versions or ()]
  out = {}
  for row in rows:
    if row.get("statistic") is None:
      continue
    key, now = (mode, row["id"]), criterion_only(str(row["criterion"]))
    seen = [p[key] for p in published if key in p]
    if versions is None or not seen:
      out[row["id"]] = {"available": versions is not None, "first_published": None, "criterion_since": None,
                        "changed_after_publication": False, "first_verdict": None, "first_criterion": None,
                        "thresholds_changed": False}
      continue
    since = None
    for entry in reversed(seen):
      if entry.criterion != now:
        break
      since = entry
    first = seen[0]
    out[row["id"]] = {"available": True, "first_published": dataclasses.asdict(first),
                      "criterion_since": dataclasses.asdict(since) if since else None,
                      "changed_after_publication": first.criterion != now, "first_verdict": first.verdict,
                      "first_criterion": first.criterion,
                      "thresholds_changed": not thresholds(now) or thresholds(first.criterion) != thresholds(now)}
  return out


_THRESHOLDS = re.compile(r"holds if [<>]=? [^,]+, does not hold if [<>]=? [^,;:)]+")


def thresholds(criterion: str) -> list[str]:
  """The "holds if …, does not hold if …" clauses of a criterion, in order (a claim of parts has one per part, then
  its own)."""
  return _THRESHOLDS.findall(criterion)


def _version(entry: Mapping[str, Any]) -> str:
  """A published version in words: "the page of commit X (day; its run on commit Y)"."""
  run = f"; run on commit {entry['run_commit']}" if entry.get("run_commit") else ""
  return f"the page of commit {entry['page_commit']} ({entry['page_date']}{run})"


def history_text(info: Mapping[str, Any] | None) -> str:
  """One row's ``criteria_history`` entry in words, for its criterion cell ("" when there is none)."""
  if not info:
    return ""
  if not info["available"]:
    return "Criterion history: not available (no git history of the page in this checkout)."
  if info["first_published"] is None:
    return "Criterion history: first published here (no earlier page has this claim in this mode)."
  if info["criterion_since"] is not None:
    words = f"Criterion history: unchanged since {_version(info['criterion_since'])}"
  else:
    words = "Criterion history: changed since the last published page (new in this run)"
  if info["changed_after_publication"]:
    same = "its thresholds unchanged, " if not info.get("thresholds_changed", True) else ""
    words += (f"; **changed after its verdict was first published** ({same}first published in "
              f"{_version(info['first_published'])} with verdict {info['first_verdict']} under: "
              f"“{info['first_criterion']}”)")
  return words + "."
