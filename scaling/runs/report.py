"""Progress with ETA and tables for the studies, through ``rich``; figures go through ``scaling.runs.plotting``.

Also the generated sections of README.md and docs/*.md: where each one lives
(``GENERATED_SECTIONS``), how one is replaced, and the README's headline built
from the output of ``python -m experiments.claims``.
"""

from __future__ import annotations

import collections
import io
import math
import pathlib
import re
import sys
import time
from typing import Any, Mapping, Sequence

from rich import box
from rich.console import Console
from rich.progress import BarColumn
from rich.progress import MofNCompleteColumn
from rich.progress import Progress as RichProgress
from rich.progress import TextColumn
from rich.progress import TimeElapsedColumn
from rich.progress import TimeRemainingColumn
from scaling.base.validation import ConfigError
from scaling.base.validation import ConfigTypeError


class Progress:
  """A progress bar with elapsed time and ETA on stderr; ``update(label)`` marks one unit done.

  Use as a context manager. On a terminal the bar redraws in place (a Progress
  opened while another is live becomes a second bar of the same display). Elsewhere
  (logs, CI) it prints whole lines, never wrapped, at a steady pace: after the
  first unit, after the last, and otherwise at most one every ``every_s`` seconds,
  so a long run shows progress without flooding its log.
  """

  _live: list[Progress] = []
  """The bars drawn now on a terminal, outermost first (a nested one draws into the outermost's display)."""

  def __init__(self, total: int, name: str, stream: Any = None, *, every_s: float = 10.0,
               terminal: bool | None = None, lines: bool = True):
    """Args:
      total: the number of units.
      name: shown before each label.
      stream: where to write (default stderr).
      every_s: off a terminal, the fewest seconds between two lines (the first and last unit always print).
      terminal: draw a live bar (True) or print lines (False); None asks the stream whether it is a terminal.
      lines: off a terminal, print lines at all (False when the caller logs its own).
    """
    self.total, self.name, self.done = total, name, 0
    self.every_s, self.lines = every_s, lines
    self.console = Console(file=stream or sys.stderr, highlight=False, force_terminal=terminal)
    self.live = self.console.is_terminal if terminal is None else terminal
    self._last_line = -math.inf
    self._started = time.monotonic()
    self._owner = self.live and not Progress._live
    if self.live and not self._owner:
      self._bar = Progress._live[0]._bar
    else:
      columns = (TextColumn("{task.fields[name]} {task.description}", markup=False), BarColumn(),
                 MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn())
      self._bar = RichProgress(*columns, console=self.console, disable=not self.live)
    self._task = self._bar.add_task("", total=total, name=name)

  def __enter__(self) -> Progress:
    if self._owner:
      self._bar.start()
    if self.live:
      Progress._live.append(self)
    return self

  def __exit__(self, *exc) -> None:
    if self.live:
      Progress._live.remove(self)
    if self._owner:
      self._bar.stop()
    elif self.live:
      self._bar.remove_task(self._task)

  def update(self, label: str = "", n: int = 1) -> None:
    """Marks ``n`` units done with a label for the one just finished."""
    self.done += n
    self._bar.update(self._task, advance=n, description=label)
    now = time.monotonic()
    due = self._last_line == -math.inf or self.done >= self.total or now - self._last_line >= self.every_s
    if self.live or not self.lines or not due:
      return
    self._last_line = now
    elapsed = now - self._started
    eta = elapsed / self.done * max(self.total - self.done, 0) if self.done else float("nan")
    self.console.file.write(f"{self.name} [{self.done}/{self.total}] {label}  {elapsed:.1f}s elapsed, "
                            f"~{eta:.1f}s left\n")
    self.console.file.flush()


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
    raise ConfigError(f"expected one {begin!r} followed by one {end!r}")
  head, rest = text.split(begin)
  _, tail = rest.split(end)
  return f"{head}{begin}\n{content.strip()}\n{end}{tail}"


GENERATED_SECTIONS: dict[str, str] = {
    "headline": "README.md",
    "claims": "docs/claims.md",
    "claims_cpu_hour": "docs/claims.md",
    "claims_compute_dtype": "docs/claims.md",
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
    "unit_scale_paper": "docs/umup.md",
    "umup_width_paper": "docs/umup.md",
    "umup_width_covariance": "docs/umup.md",
    "umup_depth_paper": "docs/umup.md",
    "umup_depth_covariance": "docs/umup.md",
    "your_model_first_example": "docs/your_model.md",
    "your_model_linen_mlp_coord": "docs/your_model.md",
    "your_model_linen_mlp_transfer": "docs/your_model.md",
    "your_model_nnx_mlp_coord": "docs/your_model.md",
    "your_model_nnx_mlp_transfer": "docs/your_model.md",
    "your_model_linen_transformer_coord": "docs/your_model.md",
    "your_model_linen_transformer_transfer": "docs/your_model.md",
    "your_model_nnx_transformer_coord": "docs/your_model.md",
    "your_model_nnx_transformer_transfer": "docs/your_model.md",
    "your_model_mup_tied": "docs/your_model.md",
    "your_model_mup_mlp": "docs/your_model.md",
    "your_model_base_equality": "docs/your_model.md",
    "your_model_init_modes": "docs/your_model.md",
    "bench_sweep": "docs/benchmarks.md",
    "attention": "docs/benchmarks.md",
    "bench_attention_profile": "docs/benchmarks.md",
    "bench_attention_rule": "docs/benchmarks.md",
    "bench_train": "docs/benchmarks.md",
    "bench_studies": "docs/benchmarks.md",
    "bench_tests": "docs/benchmarks.md",
    "test_time": "README.md",
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
    raise ConfigTypeError(f"name must be a non-empty string, got {name!r}")
  if not isinstance(content, str):
    raise ConfigTypeError(f"content must be a string, got {type(content).__name__}")
  if target is None:
    if name not in GENERATED_SECTIONS:
      raise ConfigError(f"unknown generated section {name!r}; known: {', '.join(GENERATED_SECTIONS)}")
    path = pathlib.Path(root) / GENERATED_SECTIONS[name]
  else:
    path = pathlib.Path(target)
  path.write_text(replace_generated(path.read_text(), name, content))
  return path


HEADLINE_CLAIMS = ("variance_is_dk", "sqrt_normalizes", "unscaled_one_hot", "gradients_vanish", "linear_uniform",
                   "fp16_exp_overflow", "train_depth12_cannot_converge", "train_mup_lr_transfer")
"""The claims that the README's headline answers in one line each (in this order; those the run measured)."""

_HEADLINE_KEYS = ("id", "claim", "verdict", "criterion", "statistic", "value")


def _statistic(value: Any) -> str:
  """A measured statistic, three significant digits."""
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    return str(value)
  return "NaN" if not math.isfinite(value) else format(value, ".3g")


def _thresholds(criterion: str) -> str:
  """The thresholds of a criterion's text ("holds if < 0.05, does not hold if > 0.2", and when it has them its
  inconclusive clauses in short), or the whole text; the last ones when the text quotes its parts' criteria first."""
  m = re.search(r".*holds if (.+?), does not hold if (.+?), partly otherwise((?:; inconclusive if [^;]+)*)$", criterion)
  if not m:
    return criterion
  out = f"holds if {m.group(1)}, does not hold if {m.group(2)}"
  if "standard errors" in m.group(3):
    out += "; inconclusive within " + re.search(r"within (\S+ standard errors)", m.group(3)).group(1)
  if "edge of the grid" in m.group(3):
    out += "; inconclusive at a grid edge"
  return out


def claims_headline(rows: Sequence[Mapping[str, Any]], config: Mapping[str, Any]) -> str:
  """The README's headline from a claims run: the verdict counts and the headline claims in one line each.

  Args:
    rows: the rows of the run's ``claims.jsonl`` (each with id, claim, verdict, criterion, statistic, value).
    config: the run's ``config.json`` (its ``config`` holds the run's ``mode`` and ``text_file``).

  Returns:
    Markdown: a sentence with the counts per verdict and how a verdict is decided, then one line per claim of
    ``HEADLINE_CLAIMS`` that the run measured: its verdict, the claim, the statistic measured and the thresholds.
  """
  if isinstance(rows, (str, bytes)) or not isinstance(rows, Sequence) or not rows:
    raise ConfigError("rows must be a non-empty list of claim rows (the lines of claims.jsonl)")
  for row in rows:
    missing = [k for k in _HEADLINE_KEYS if not isinstance(row, Mapping) or k not in row]
    if missing:
      raise ConfigError(f"rows: a row lacks {', '.join(missing)} (expected the rows of claims.jsonl)")
    if not isinstance(row["verdict"], str) or not row["verdict"]:
      raise ConfigError(f"rows: claim {row['id']!r} has no verdict")
  options = config.get("config") if isinstance(config, Mapping) else None
  if not isinstance(options, Mapping) or "mode" not in options:
    raise ConfigError("config must be the run's config.json: {'config': {'mode': ..., 'text_file': ...}, ...}")
  # A row's kind (claims.jsonl): "measured", "not measurable here" (no criterion can be declared), "supporting
  # measurement" (no claim of the notes: not counted among them), or a claim checked against its source (never a
  # measured verdict).
  kinds = ("measured", "not measurable here", "supporting measurement")
  measured = [r for r in rows if r.get("kind", "measured") == "measured"]
  unmeasurable = [r for r in rows if r.get("kind") == "not measurable here"]
  supporting = [r for r in rows if r.get("kind") == "supporting measurement"]
  cited = [r for r in rows if r.get("kind", "measured") not in kinds]
  tally = lambda group: ", ".join(f"{v} **{n}**" for v, n in collections.Counter(r["verdict"] for r in group).items())
  data = f"text file `{options['text_file']}`" if options.get("text_file") else "the built-in synthetic task"
  checked = f"; {len(cited)} factual citations checked against their sources: {tally(cited)}" if cited else ""
  run = f"; run on {config['code']}, {config['date']}" if "code" in config and "date" in config else ""
  unsettled = f"; {len(unmeasurable)} claims not measurable here" if unmeasurable else ""
  unsettled += f"; {len(supporting)} supporting measurements (no claim of the notes) beside them" if supporting else ""
  lines = [f"{len(measured)} claims of the notes measured by `python -m experiments.claims` (mode {options['mode']}, "
           f"training claims on {data}{run}); verdicts: {tally(measured)}{unsettled}{checked}.",
           "Criterion: a claim's verdict is its declared criterion applied to one statistic measured in that run "
           "(holds past one threshold,",
           "does not hold past the other, partly in between). Below: the claims of `scaling.runs.report.HEADLINE_CLAIMS`; "
           "every claim with its evidence", "and command is on [the claims page](docs/claims.md).", ""]
  by_id = {r["id"]: r for r in rows}
  for claim_id in HEADLINE_CLAIMS:
    if claim_id in by_id:
      r = by_id[claim_id]
      lines.append(f"- **{r['verdict']}**: {r['claim']}")
      lines.append(f"  (`{r['statistic']}` = {_statistic(r['value'])}; {_thresholds(r['criterion'])})")
  return "\n".join(lines).rstrip("\n") + "\n"
