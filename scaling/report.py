"""Progress with ETA and tables for the studies, through ``rich``; figures go through ``scaling.plotting``.

Also the generated sections of README.md and docs/*.md: where each one lives
(``GENERATED_SECTIONS``) and how one is replaced.
"""

from __future__ import annotations

import io
import pathlib
import re
import sys
from typing import Any, Mapping, Sequence

from rich import box
from rich.console import Console
from rich.progress import BarColumn
from rich.progress import MofNCompleteColumn
from rich.progress import Progress as RichProgress
from rich.progress import TextColumn
from rich.progress import TimeElapsedColumn
from rich.progress import TimeRemainingColumn


class Progress:
  """A progress bar with elapsed time and ETA on stderr; ``update(label)`` marks one unit done.

  Use as a context manager. On a terminal the bar redraws in place; elsewhere
  (logs, CI) each update is printed as one line, so long runs show progress too.
  """

  def __init__(self, total: int, name: str, stream: Any = None):
    self.total, self.name, self.done = total, name, 0
    self.console = Console(file=stream or sys.stderr, highlight=False)
    self.live = self.console.is_terminal
    columns = (TextColumn(f"{name} {{task.description}}", markup=False), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn())
    self._bar = RichProgress(*columns, console=self.console, disable=not self.live)
    self._task = self._bar.add_task("", total=total)

  def __enter__(self) -> Progress:
    self._bar.start()
    return self

  def __exit__(self, *exc) -> None:
    self._bar.stop()

  def update(self, label: str = "", n: int = 1) -> None:
    """Marks ``n`` units done with a label for the one just finished."""
    self.done += n
    self._bar.update(self._task, advance=n, description=label)
    if not self.live:
      task = self._bar.tasks[0]
      elapsed = task.elapsed or 0.0
      eta = elapsed / self.done * (self.total - self.done) if self.done else float("nan")
      self.console.print(f"{self.name} [{self.done}/{self.total}] {label}  {elapsed:.1f}s elapsed, ~{eta:.1f}s left",
                         markup=False)


def _cell(value: Any, floatfmt: str) -> str:
  if isinstance(value, dict) and "mean" in value:
    value = value["mean"]
  if isinstance(value, float):
    return format(value, floatfmt)
  return "" if value is None else str(value)


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str], floatfmt: str = ".4g", title: str | None = None) -> str:
  """``rows`` restricted to ``columns`` as a plain-text table (nested {"mean": ..} cells show their mean)."""
  from rich.table import Table  # pylint: disable=g-import-not-at-top

  cells = [[_cell(r.get(c), floatfmt) for c in columns] for r in rows]
  t = Table(*columns, box=box.SIMPLE_HEAD, title=title, show_edge=False, pad_edge=False)
  for c in t.columns:
    c.justify, c.no_wrap = "right", True
  for row in cells:
    t.add_row(*row)
  widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
  buf = io.StringIO()
  Console(file=buf, width=sum(widths) + 3 * len(columns) + 4, highlight=False, color_system=None).print(t)
  return buf.getvalue().rstrip("\n")


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
  """A Markdown table: a header of ``columns``, then one line per row of cells ("|" escaped, newlines folded)."""
  cell = lambda text: str(text).replace("|", "\\|").replace("\n", " ")
  lines = ["| " + " | ".join(map(cell, columns)) + " |", "|" + "---|" * len(columns)]
  lines += ["| " + " | ".join(map(cell, row)) + " |" for row in rows]
  return "\n".join(lines) + "\n"


def replace_generated(text: str, name: str, content: str) -> str:
  """``text`` with the lines between ``<!-- BEGIN generated: name -->`` and ``<!-- END generated: name -->``
  replaced by ``content`` (ValueError unless both markers occur once, in order)."""
  begin, end = f"<!-- BEGIN generated: {name} -->", f"<!-- END generated: {name} -->"
  if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
    raise ValueError(f"expected one {begin!r} followed by one {end!r}")
  head, rest = text.split(begin)
  _, tail = rest.split(end)
  return f"{head}{begin}\n{content.strip()}\n{end}{tail}"


GENERATED_SECTIONS: dict[str, str] = {
    "headline": "README.md",
    "claims": "docs/claims.md",
    "sweep": "docs/sweep.md",
    "stability": "docs/stability.md",
    "coord_check_width": "docs/coord_check.md",
    "coord_check_depth": "docs/coord_check.md",
    "transfer_width": "docs/transfer.md",
    "wider": "docs/transfer.md",
    "transfer_depth": "docs/transfer.md",
    "transfer_attn_mult": "docs/transfer.md",
    "transfer_rules": "docs/transfer.md",
    "transfer_rules_optimum": "docs/transfer.md",
    "qk_norm_gains": "docs/transfer.md",
    "qk_norm_no_gains": "docs/transfer.md",
    "unit_scale": "docs/umup.md",
    "transfer_umup": "docs/umup.md",
    "transfer_umup_depth": "docs/umup.md",
    "bench_sweep": "docs/benchmarks.md",
    "attention": "docs/benchmarks.md",
    "bench_train": "docs/benchmarks.md",
}
"""Where each generated section lives: its name -> the file that holds it, relative to the repository root."""


def update_generated(root: str | pathlib.Path, name: str, content: str,
                     target: str | pathlib.Path | None = None) -> pathlib.Path:
  """Replaces the generated section ``name`` in the file that holds it.

  Args:
    root: the repository root that ``GENERATED_SECTIONS``' paths are relative to.
    name: the section's name (``<!-- BEGIN generated: name -->``).
    content: the new text between the markers.
    target: the file to write instead of ``GENERATED_SECTIONS[name]`` (then ``name`` need not be in the map).

  Returns:
    The file written; nothing outside the section's markers changes.
  """
  if not isinstance(name, str) or not name:
    raise TypeError(f"name must be a non-empty string, got {name!r}")
  if target is None:
    if name not in GENERATED_SECTIONS:
      raise ValueError(f"unknown generated section {name!r}; known: {', '.join(GENERATED_SECTIONS)}")
    path = pathlib.Path(root) / GENERATED_SECTIONS[name]
  else:
    path = pathlib.Path(target)
  path.write_text(replace_generated(path.read_text(), name, content))
  return path
