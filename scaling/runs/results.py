"""Result files: JSON Lines, CSV and JSON written atomically, rows streamed to disk as they come.

In a job of several processes only process 0 (``scaling.runs.distributed.is_writer``) touches the output folder; the
writing functions do nothing on the others.
"""

from __future__ import annotations

import contextlib
import contextvars
import csv
import dataclasses
import hashlib
import io
import json
import math
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time
from typing import Any, Callable, Hashable, Iterable, Mapping, Sequence

import numpy as np

from scaling.runs import distributed
from scaling.runs import interrupt
from scaling.runs import run_lock
from scaling.base.config import option
from scaling.base.config import Options
from scaling.base.validation import ConfigError


def to_jsonable(x: Any) -> Any:
  """Converts numpy/JAX scalars and arrays (nested in dicts/lists) to plain Python; non-finite → None."""
  if isinstance(x, Mapping):
    return {str(k): to_jsonable(v) for k, v in x.items()}
  if isinstance(x, (list, tuple)):
    return [to_jsonable(v) for v in x]
  if hasattr(x, "shape") and hasattr(x, "dtype"):
    arr = np.asarray(x)
    return to_jsonable(arr.item() if arr.ndim == 0 else arr.tolist())
  if isinstance(x, (np.floating, float)):
    x = float(x)
    return x if math.isfinite(x) else None
  if isinstance(x, (np.integer,)):
    return int(x)
  if isinstance(x, np.bool_):
    return bool(x)
  return x


def _atomic_write(path: str | os.PathLike, text: str) -> None:
  if not distributed.is_writer():
    return
  path = pathlib.Path(path)
  tmp = path.with_name(f".{path.name}.tmp")
  tmp.write_text(text)
  os.replace(tmp, path)


def write_text(path: str | os.PathLike, text: str) -> None:
  """Writes a text file atomically (the old file stays until the new one is complete)."""
  _atomic_write(path, text)


def checkout_root() -> pathlib.Path:
  """The folder this package's checkout would be (the parent of ``scaling/``): a git checkout's top when the package
  runs from a clone, a site-packages folder when installed."""
  return pathlib.Path(__file__).resolve().parents[2]


def code_version(root: str | os.PathLike | None = None) -> dict[str, str]:
  """The code a run runs and when: {"code": the git commit of the checkout it is imported from (short hash, with
  "+changes" when tracked files other than Markdown pages differ from it: the pages are what runs write, e.g. the
  generated sections a reproduce script fills in between its runs), else the installed distribution's version;
  "date": UTC day}. ``root``: the checkout (default: the one this package sits in)."""
  date = time.strftime("%Y-%m-%d", time.gmtime())
  root = checkout_root() if root is None else pathlib.Path(root).resolve()
  try:
    git = lambda *args: subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10,
                                       check=True).stdout.strip()
    if pathlib.Path(git("rev-parse", "--show-toplevel")).resolve() == root:
      commit = git("rev-parse", "--short=12", "HEAD")
      changed = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)*.md")
      return {"code": f"commit {commit}" + ("+changes" if changed else ""), "date": date}
  except (OSError, subprocess.SubprocessError):
    pass
  from importlib import metadata  # pylint: disable=g-import-not-at-top
  try:
    return {"code": f"version {metadata.version('attention-logit-scaling')}", "date": date}
  except metadata.PackageNotFoundError:
    return {"code": "unknown version", "date": date}


def write_json(path: str | os.PathLike, obj: Any) -> None:
  """Writes one JSON document atomically."""
  _atomic_write(path, json.dumps(to_jsonable(obj), indent=2, sort_keys=True) + "\n")


def write_jsonl(path: str | os.PathLike, rows: Iterable[Mapping[str, Any]]) -> None:
  """Writes rows as JSON Lines atomically (the old file stays until the new one is complete)."""
  _atomic_write(path, "".join(json.dumps(to_jsonable(r)) + "\n" for r in rows))


def append_jsonl(path: str | os.PathLike, row: Mapping[str, Any]) -> None:
  """Appends one row and flushes it to disk, so an interrupted run keeps every finished row."""
  if not distributed.is_writer():
    return
  with open(path, "a") as f:
    f.write(json.dumps(to_jsonable(row)) + "\n")
    f.flush()
    os.fsync(f.fileno())


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
  """Reads JSON Lines, skipping a truncated last line left by an interrupted writer."""
  rows = []
  with open(path) as f:
    for line in f:
      line = line.strip()
      if not line:
        continue
      try:
        rows.append(json.loads(line))
      except json.JSONDecodeError:
        break
  return rows


def flatten(row: Mapping[str, Any], sep: str = "_") -> dict[str, Any]:
  """Flattens nested dicts: {'entropy': {'mean': 1, 'std': 0}} → {'entropy_mean': 1, 'entropy_std': 0}."""
  out: dict[str, Any] = {}
  for k, v in row.items():
    if isinstance(v, Mapping):
      for kk, vv in flatten(v, sep).items():
        out[f"{k}{sep}{kk}"] = vv
    else:
      out[k] = v
  return out


def write_csv(path: str | os.PathLike, rows: Iterable[Mapping[str, Any]]) -> None:
  """Writes rows (nested dicts flattened) as CSV with the union of keys as header, atomically."""
  flat = [flatten(to_jsonable(r)) for r in rows]
  header: list[str] = []
  for r in flat:
    header.extend(k for k in r if k not in header)
  buf = io.StringIO()
  writer = csv.DictWriter(buf, fieldnames=header)
  writer.writeheader()
  for r in flat:
    writer.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in header})
  _atomic_write(path, buf.getvalue())


_ANNOUNCED: contextvars.ContextVar[tuple[pathlib.Path, str] | None] = contextvars.ContextVar("announced",
                                                                                             default=None)


@contextlib.contextmanager
def announce_when_made(path: str | os.PathLike, line: str):
  """Within the block, ``make_dir(path)`` prints ``line`` (once) when it makes ready the folder ``path``.

  An entry point names its run directory this way: a run refused before it writes anything (bad input, a dry run)
  never prints it.
  """
  token = _ANNOUNCED.set((pathlib.Path(path).absolute(), line))
  try:
    yield
  finally:
    _ANNOUNCED.reset(token)


def make_dir(path: str | os.PathLike) -> pathlib.Path:
  """Creates the output folder (and parents); ValueError naming out_dir if it cannot be written."""
  p = pathlib.Path(path)
  if not distributed.is_writer():
    return p
  try:
    p.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    raise ConfigError(f"out_dir={str(path)!r}: cannot create directory ({e.strerror or e})") from None
  if not os.access(p, os.W_OK):
    raise ConfigError(f"out_dir={str(path)!r}: directory is not writable")
  announced = _ANNOUNCED.get()
  if announced is not None and announced[0] == p.absolute():
    _ANNOUNCED.set(None)
    print(announced[1], flush=True)
  return p


def read_complete_jsonl(path: str | os.PathLike) -> tuple[list[dict[str, Any]], bool]:
  """Reads the complete lines of a JSON Lines file that a killed writer may have left torn.

  Args:
    path: the file (missing: no rows).

  Returns:
    (rows, torn): the rows up to the first line that is not a whole JSON object
    ending in a newline, and whether such a line (a torn write) was found.
  """
  path = pathlib.Path(path)
  if not path.exists():
    return [], False
  rows = []
  for line in path.read_bytes().splitlines(keepends=True):
    if not line.strip():
      continue
    try:
      row = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
      return rows, True
    if not line.endswith(b"\n") or not isinstance(row, dict):
      return rows, True
    rows.append(row)
  return rows, False


def report_torn(path: pathlib.Path) -> None:
  """Says on stderr that ``path`` ended in a torn line (a run stopped while writing it), which is dropped."""
  if distributed.is_writer():
    print(f"{path}: dropped its torn last line (a run was stopped while writing it); every whole row is kept and "
          "the rest is computed again", file=sys.stderr, flush=True)


def _normalized(row: Mapping[str, Any]) -> dict[str, Any]:
  """A row as it reads back from its file (non-finite numbers as None, tuples as lists)."""
  return json.loads(json.dumps(to_jsonable(row)))


def _partial_path(path: pathlib.Path) -> pathlib.Path:
  return path.with_name(f"{path.stem}.partial{path.suffix}")


class RowStream:
  """Streams rows into ``path``: appended and fsynced to ``<name>.partial<suffix>`` as they come, then moved.

  An interrupted run leaves every finished row in the partial file; ``close``
  (or leaving the ``with`` block without an error) renames it to ``path``.
  With ``keep``, the stream resumes: the complete rows an earlier run left (in
  the partial file, else in ``path``) for which ``keep(row)`` is true stay, in
  ``rows``, and the rest (a torn last line included) is dropped.
  """

  def __init__(self, path: str | os.PathLike, keep: Callable[[dict[str, Any]], bool] | None = None):
    self.path = pathlib.Path(path)
    self.partial = _partial_path(self.path)
    self.rows: list[dict[str, Any]] = []
    if keep is None:
      if distributed.is_writer():
        self.partial.unlink(missing_ok=True)
      return
    source = self.partial if self.partial.exists() else self.path
    found, torn = read_complete_jsonl(source)
    if torn:
      report_torn(source)
    self.rows = [r for r in found if keep(r)]
    write_jsonl(self.partial, self.rows)

  def write(self, row: Mapping[str, Any]) -> None:
    """Appends one row (flushed to disk); a safe point to stop at (``scaling.runs.interrupt.check``)."""
    append_jsonl(self.partial, row)
    self.rows.append(dict(row))
    interrupt.check()

  def close(self) -> None:
    """Moves the complete file into place (an empty file when no row came)."""
    if not distributed.is_writer():
      return
    if not self.partial.exists():
      self.partial.write_text("")
    os.replace(self.partial, self.path)

  def __enter__(self) -> RowStream:
    return self

  def __exit__(self, exc_type, exc, tb) -> None:
    if exc_type is None:
      self.close()


class GroupedRows:
  """The rows of a resumable run: planned groups, each appended whole, so a rerun computes only missing ones.

  The plan lists every group of the run as (key, number of rows) in the order of
  the final file; ``key(row)`` says which group a row belongs to. Opening reads
  what an earlier run left (``<name>.partial<suffix>``, else the finished
  ``path``), keeps the groups that are complete (every row present, none torn),
  and rewrites the partial file with exactly those (write-then-rename), so a
  torn last line or half a group is dropped and computed again. ``add`` appends
  one finished group as one write, flushed and fsynced; ``finish`` writes
  ``path`` from the complete set in plan order and removes the partial file.
  """

  def __init__(self, path: str | os.PathLike, plan: Sequence[tuple[Hashable, int]],
               key: Callable[[dict[str, Any]], Hashable]):
    self.path = pathlib.Path(path)
    self.partial = _partial_path(self.path)
    self.plan = dict(plan)
    self.key = key
    source = self.partial if self.partial.exists() else self.path
    found, self.torn = read_complete_jsonl(source)
    groups: dict[Hashable, list[dict[str, Any]]] = {}
    for row in found:
      groups.setdefault(key(row), []).append(row)
    self.done = {k: groups[k] for k in self.plan if len(groups.get(k, ())) == self.plan[k]}
    self.dropped = len(found) - sum(len(g) for g in self.done.values())
    self.reused = len(found) - self.dropped
    """How many rows an earlier run left complete (kept, not computed again)."""
    if self.torn:
      report_torn(source)
    if self.done != groups or self.torn or source != self.partial:
      write_jsonl(self.partial, self.rows())

  def missing(self) -> list[Hashable]:
    """Keys of the planned groups not yet written, in plan order."""
    return [k for k in self.plan if k not in self.done]

  def add(self, key: Hashable, rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Appends one finished group whole (one write, flushed and fsynced); returns its rows as they read back.

    A safe point: a stop requested by a signal (``scaling.runs.interrupt``) raises here, once the group is written.
    """
    rows = [_normalized(r) for r in rows]
    if key not in self.plan:
      raise ValueError(f"group {key!r} is not in the plan")
    if len(rows) != self.plan[key] or any(self.key(r) != key for r in rows):
      raise ValueError(f"group {key!r} must have {self.plan[key]} rows of that key, got {len(rows)}")
    if distributed.is_writer():
      with open(self.partial, "a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
        f.flush()
        os.fsync(f.fileno())
    self.done[key] = rows
    interrupt.check()
    return rows

  def rows(self) -> list[dict[str, Any]]:
    """The rows of the finished groups, in plan order."""
    return [r for k in self.plan if k in self.done for r in self.done[k]]

  def finish(self, rows: Sequence[Mapping[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Writes ``path`` (default: ``rows()``; a study may pass them in another order) and removes the partial file.

    Raises:
      ValueError: a planned group is missing.
    """
    if self.missing():
      raise ValueError(f"{self.path.name}: groups {self.missing()} are missing")
    rows = self.rows() if rows is None else [_normalized(r) for r in rows]
    write_jsonl(self.path, rows)
    if distributed.is_writer():
      self.partial.unlink(missing_ok=True)
    return rows


MANIFEST = "run.json"
"""The file in each output folder that records the options its results were made with."""


def manifest(config: Any, ignore: Sequence[str] = ()) -> dict[str, Any]:
  """The options of ``config`` that change its results: all but the output and cluster groups and ``ignore``."""

  def strip(d):
    return {k: strip(v) if isinstance(v, dict) else v for k, v in d.items() if k not in ignore}

  return _normalized(strip({k: v for k, v in dataclasses.asdict(config).items() if k not in ("output", "cluster")}))


def _leaves(d: Mapping[str, Any]) -> dict[str, Any]:
  """{leaf name: value} of nested option dicts (leaf names are the flag names)."""
  out = {}
  for k, v in d.items():
    out.update(_leaves(v) if isinstance(v, Mapping) else {k: v})
  return out


def _show(name: str, v: Any) -> str:
  """``name=value`` as the option's field reads (a JSON list as a tuple)."""
  return f"{name}={tuple(v) if isinstance(v, list) else v!r}"


def open_run(out_dir: str | os.PathLike, config: Any, *, overwrite: bool = False, ignore: Sequence[str] = (),
             outputs: Sequence[str] = (), extra: Mapping[str, Any] | None = None) -> pathlib.Path:
  """Makes the output folder for a resumable run, checking and writing its manifest (``run.json``).

  A folder whose manifest records the same options is resumed (its files are
  kept). One made with other options is refused unless ``overwrite``. With
  ``overwrite``, and for a folder without a manifest, the files named in
  ``outputs`` (and their partial files; folders too) are removed first and the
  run starts afresh, so no result of another run is mixed in. The folder's lock
  (``scaling.runs.run_lock``) is taken first: a second live run into it is refused.

  Args:
    out_dir: the folder (--out_dir).
    config: the study's config; its manifest is ``manifest(config, ignore)``.
    overwrite: replace results made with other options (--overwrite).
    ignore: option names that do not change results (left out of the manifest).
    outputs: the names of the files and folders the study writes into the folder.
    extra: more that the results depend on (e.g. the dataset's description), recorded beside the options.

  Returns:
    The folder.

  Raises:
    ValueError: one line naming the options that differ, when not ``overwrite``; ``run_lock.RunLocked`` when
      another live run holds the folder.
  """
  folder = make_dir(out_dir)
  if distributed.is_writer():
    run_lock.acquire(folder)
  path = folder / MANIFEST
  want = _normalized({"config": manifest(config, ignore), **(extra or {})})
  have = None
  if path.exists():
    try:
      have = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
      have = {}
  if have == want and not overwrite:
    return folder
  if have is not None and have != want and not overwrite:
    old, new = _leaves(have), _leaves(want)
    diff = [f"{_show(k, new.get(k))} (was {_show(k, old.get(k))})" for k in sorted(set(old) | set(new))
            if old.get(k) != new.get(k)] or ["an unreadable run.json"]
    raise ConfigError(f"out_dir={str(out_dir)!r} holds results made with other options: {'; '.join(diff[:3])}"
                      f"{' ...' if len(diff) > 3 else ''}; rerun with those options to resume, or pass overwrite=True")
  for name in outputs if distributed.is_writer() else ():
    target = folder / name
    for p in (target, _partial_path(target)):
      if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
      else:
        p.unlink(missing_ok=True)
  write_json(path, want)
  return folder


LATEST = "latest"
"""The link in an experiment's folder of runs (``runs/<experiment>/latest``) to the run directory used last."""


def _ignored(config: Any) -> tuple[str, ...]:
  """The options of ``config`` that change no result (its class's ``NOT_IN_RESULTS``)."""
  return tuple(getattr(type(config), "NOT_IN_RESULTS", ()))


def run_name(config: Any, *, hash_length: int = 8) -> str:
  """The name of ``config``'s own run directory: the options it changes from its defaults, then a hash of all.

  The hash covers ``manifest(config)`` (every option that changes results; not the output group nor the
  config's ``NOT_IN_RESULTS``), so equal options give the same name and any changed one another name. The
  readable prefix lists the leaf options that differ from ``type(config)()`` (at most 96 characters, or
  ``defaults``); it is only for people, the hash alone tells runs apart.

  Args:
    config: a study's config (an ``Options`` dataclass whose class builds with its defaults).
    hash_length: hex digits of the SHA-256 of the options kept.

  Returns:
    A folder name such as ``rule=qk_norm,width=256-3f9a1c0e`` (list values joined by ``+``).
  """
  ignore = _ignored(config)
  options = manifest(config, ignore)
  digest = hashlib.sha256(json.dumps(options, sort_keys=True).encode()).hexdigest()[:hash_length]
  try:
    defaults = _leaves(manifest(type(config)(), ignore))
  except (TypeError, ValueError):
    defaults = {}
  show = lambda v: "+".join(map(str, v)) if isinstance(v, list) else str(v)
  changed = [f"{k}={show(v)}" for k, v in _leaves(options).items() if k not in defaults or defaults[k] != v]
  prefix = re.sub(r"[^A-Za-z0-9._=,+-]+", "_", ",".join(changed))[:96].rstrip(",_") or "defaults"
  return f"{prefix}-{digest}"


def run_dir(root: str | os.PathLike, config: Any) -> pathlib.Path:
  """``root / run_name(config)``: the directory of this configuration among an experiment's runs."""
  return pathlib.Path(root) / run_name(config)


def link_latest(folder: str | os.PathLike) -> pathlib.Path | None:
  """Points ``<parent>/latest`` at ``folder`` (a relative link, replaced atomically); returns the link.

  Does nothing (returns None) off process 0 or when ``folder`` does not exist.
  """
  folder = pathlib.Path(folder)
  if not distributed.is_writer() or not folder.is_dir():
    return None
  link = folder.parent / LATEST
  tmp = folder.parent / f".{LATEST}.{os.getpid()}.tmp"
  tmp.unlink(missing_ok=True)
  os.symlink(folder.name, tmp, target_is_directory=True)
  os.replace(tmp, link)
  return link


def append_timing(out_dir: str | os.PathLike, row: Mapping[str, Any]) -> None:
  """Appends one timing row to ``timings.jsonl``: wall times live there, never in the result files."""
  append_jsonl(pathlib.Path(out_dir) / "timings.jsonl", row)


@dataclasses.dataclass(frozen=True)
class OutputConfig(Options):
  """Where a study writes its results."""

  out_dir: str = option("runs", "Output directory. Not given: a directory of its own per configuration under this "
                        "default (options changed from the defaults plus a hash of all), so other options start a new "
                        "run and the same options resume; <default>/latest links the last one. Given: created if "
                        "missing; the same options resume, other options are refused unless --overwrite.")
  overwrite: bool = option(False, "Start afresh: remove this study's results in the output directory (also those "
                           "made with other options) instead of resuming.")

  def validate(self):
    if not self.out_dir:
      raise ConfigError("out_dir must not be empty")
