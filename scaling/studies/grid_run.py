"""Running a study over a grid (``scaling.studies.grid.WidthGrid``): the checks and output folder before training,
the memory estimate of the largest point, and the resumable loop that computes the rows of every point.

Shared by ``scaling.studies.transfer`` and ``scaling.studies.coord_check``; each point's rows are one group of
``scaling.results.GroupedRows``, so a killed run resumes at the first point it had not finished.
"""

from __future__ import annotations

import dataclasses
import io
import json
import pathlib
import time
from typing import Any, Callable, Sequence

from scaling import data as data_lib
from scaling import report
from scaling import resources
from scaling import results
from scaling.studies.grid import WidthGrid
from scaling.validation import ConfigError


def prepare(config: Any, out_dir: pathlib.Path, outputs: Sequence[str] = ()) -> data_lib.Dataset:
  """For a width study (``data``, ``seeds``, ``grid``, ``family``): the dataset, every model checked, then
  the output folder opened (``results.open_run``: resumed, or refused if made with other options, unless
  --overwrite; ``outputs`` are the study's files) and config.json written; bad input fails before anything is
  written."""
  dataset = config.data.make(config.seeds.seed)
  config.grid.check(config.model, dataset)
  shown = config.grid.shown_values(resources.option_values(config))
  resources.check(memory_estimate(config, dataset), shown)
  results.open_run(out_dir, config, overwrite=config.output.overwrite, outputs=outputs,
                   extra={"dataset": data_lib.describe(dataset)})
  results.write_json(out_dir / "config.json", {"config": dataclasses.asdict(config),
                                               "dataset": data_lib.describe(dataset)})
  return dataset


def memory_estimate(config: Any, dataset: data_lib.Dataset) -> resources.Estimate:
  """For a width or depth study: the largest program of a grid point, its ``config.members`` models vmapped."""
  members, member_flags = config.members
  grid = config.grid
  models = [(f"at {grid.label(point)}", grid.model_config(config.model, point, dataset))
            for point in grid.points(config.model)]
  batch_size = max(grid.data_config(config.data, p).batch_size for p in grid.points(config.model))
  return resources.training_estimate(models, optimizer=config.optim.optimizer, momentum=config.optim.momentum,
                                     batch_size=batch_size, seq_len=dataset.seq_len, members=members,
                                     member_flags=member_flags, data_bytes=resources.dataset_bytes(dataset))


def run_points(grid: WidthGrid, points: Sequence[dict[str, Any]], out_dir: pathlib.Path, rows_per_point: int,
               compute: Callable[[dict[str, Any]], list[dict[str, Any]]], title: str, *,
               describe: Callable[[list[dict[str, Any]]], str] | None = None) -> list[dict[str, Any]]:
  """Computes the rows of every point of a grid into ``out_dir/results.jsonl``, resuming what a killed run left
  (``run_rows`` with the grid's keys and labels and ``rows_per_point`` rows per point)."""
  return run_rows(points, compute, title, key=grid.key, label=grid.label, count=lambda point: rows_per_point,
                  out_dir=out_dir, describe=describe, unit=f"{grid.axis}s")


def run_rows(points: Sequence[dict[str, Any]], compute: Callable[[dict[str, Any]], list[dict[str, Any]]], title: str,
             *, key: Callable[[dict[str, Any]], Any] | None = None, label: Callable[[dict[str, Any]], str] | None = None,
             count: Callable[[dict[str, Any]], int] | None = None, out_dir: str | pathlib.Path | None = None,
             describe: Callable[[list[dict[str, Any]]], str] | None = None, progress: bool = True,
             options: dict[str, Any] | None = None, unit: str = "points") -> list[dict[str, Any]]:
  """The rows of every point, computed one point at a time, streamed to ``out_dir/results.jsonl`` and resumed.

  Without ``out_dir`` the rows are only returned. With it, each point's rows are one group of
  ``results.GroupedRows`` (appended whole when computed), so a rerun computes only the points not yet written;
  wall times go to timings.jsonl; ``options`` (when given) are written to options.json and a rerun with other
  options into the same folder is refused.

  Args:
    points: the points, in the order of the final file.
    compute: the rows of one point.
    title: the progress bar's title.
    key: a row's or point's group key (default: its "parametrization" and "width").
    label: a point's words in the progress (default: its values).
    count: how many rows ``compute`` returns for a point (needed with ``out_dir``).
    out_dir: the output folder, or None.
    describe: optional words on a finished point's rows.
    progress: show the progress bar.
    options: what defines the run (JSON-able), checked against an earlier run's in ``out_dir``.
    unit: what the points are, in the resume message.

  Returns:
    Every point's rows, in point order.
  """
  key = key or (lambda row: (row["parametrization"], row["width"]))
  label = label or (lambda point: ", ".join(f"{k} {v}" for k, v in point.items()))
  stream_out = None if progress else io.StringIO()
  if out_dir is None:
    rows = []
    with report.Progress(len(points), title, stream=stream_out) as bar:
      for point in points:
        new = compute(point)
        rows += new
        bar.update(label(point) + (f": {describe(new)}" if describe else ""))
    return rows
  out_dir = pathlib.Path(out_dir)
  out_dir.mkdir(parents=True, exist_ok=True)
  if options is not None:
    path = out_dir / "options.json"
    if path.exists() and json.loads(path.read_text()) != json.loads(json.dumps(results.to_jsonable(options))):
      raise ConfigError(f"{out_dir} holds a run with other options ({path}); pass a new out_dir")
    results.write_json(path, options)
  if count is None:
    raise ConfigError("run_rows with out_dir needs count(point), the rows of each point")
  plan = [(key(point), count(point)) for point in points]
  stream = results.GroupedRows(out_dir / "results.jsonl", plan, key)
  missing = set(stream.missing())
  todo = [point for point in points if key(point) in missing]
  if len(todo) < len(plan):
    print(f"resuming: {len(plan) - len(todo)} of {len(plan)} {unit} already in {out_dir} "
          f"({stream.reused} rows reused)", flush=True)
  with report.Progress(len(todo), title, stream=stream_out) as bar:
    for point in todo:
      began = time.perf_counter()
      rows = stream.add(key(point), compute(point))
      results.append_timing(out_dir, {**point, "seconds": time.perf_counter() - began})
      bar.update(label(point) + (f": {describe(rows)}" if describe else ""))
  return stream.finish()
