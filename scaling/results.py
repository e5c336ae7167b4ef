"""Result files: JSON Lines, CSV and JSON written atomically, rows streamed to disk as they come.

In a job of several processes only process 0 (``scaling.distributed.is_writer``) touches the output folder; the
writing functions do nothing on the others.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
import pathlib
from typing import Any, Iterable, Mapping

import numpy as np

from scaling import distributed
from scaling.config import option
from scaling.config import Options


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


def make_dir(path: str | os.PathLike) -> pathlib.Path:
  """Creates the output folder (and parents); ValueError naming --out_dir if it cannot be written."""
  p = pathlib.Path(path)
  if not distributed.is_writer():
    return p
  try:
    p.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    raise ValueError(f"--out_dir={path}: cannot create directory ({e.strerror or e})") from None
  if not os.access(p, os.W_OK):
    raise ValueError(f"--out_dir={path}: directory is not writable")
  return p


class RowStream:
  """Streams rows into ``path``: appended and fsynced to ``<name>.partial<suffix>`` as they come, then moved.

  An interrupted run leaves every finished row in the partial file; ``close``
  (or leaving the ``with`` block without an error) renames it to ``path``.
  """

  def __init__(self, path: str | os.PathLike):
    self.path = pathlib.Path(path)
    self.partial = self.path.with_name(f"{self.path.stem}.partial{self.path.suffix}")
    if distributed.is_writer():
      self.partial.unlink(missing_ok=True)
    self.rows: list[dict[str, Any]] = []

  def write(self, row: Mapping[str, Any]) -> None:
    """Appends one row (flushed to disk)."""
    append_jsonl(self.partial, row)
    self.rows.append(dict(row))

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


@dataclasses.dataclass(frozen=True)
class OutputConfig(Options):
  """Where a study writes its results."""

  out_dir: str = option("runs", "Output directory (created if missing).")

  def validate(self):
    if not self.out_dir:
      raise ValueError("out_dir must not be empty")
