"""Running a study over a grid (``scaling.studies.grid.WidthGrid``): the checks and output folder before training,
the memory estimate of the largest point, and the resumable loop that computes the rows of every point.

Shared by ``scaling.studies.transfer`` and ``scaling.studies.coord_check``; each point's rows are one group of
``scaling.results.GroupedRows``, so a killed run resumes at the first point it had not finished.
"""

from __future__ import annotations

import dataclasses
import pathlib
import time
from typing import Any, Callable, Sequence

from scaling import data as data_lib
from scaling import report
from scaling import resources
from scaling import results
from scaling.studies.grid import WidthGrid


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
  """Computes the rows of every point of a grid into ``out_dir/results.jsonl``, resuming what a killed run left.

  Each point's rows are one group of ``results.GroupedRows`` (appended whole when computed); a rerun computes only
  the points not yet written. Wall times go to timings.jsonl; progress shows each point (and ``describe(rows)``).

  Args:
    grid: the grid (its ``key`` and ``label`` of a point).
    points: the points, in the order of the final file.
    out_dir: the output folder.
    rows_per_point: how many rows ``compute`` returns per point.
    compute: the rows of one point.
    title: the progress bar's title.
    describe: optional words on a finished point's rows.

  Returns:
    Every point's rows, in point order.
  """
  plan = [(grid.key(point), rows_per_point) for point in points]
  stream = results.GroupedRows(out_dir / "results.jsonl", plan, grid.key)
  missing = set(stream.missing())
  todo = [point for point in points if grid.key(point) in missing]
  if len(todo) < len(plan):
    print(f"resuming: {len(plan) - len(todo)} of {len(plan)} {grid.axis}s already in {out_dir} "
          f"({stream.reused} rows reused)", flush=True)
  with report.Progress(len(todo), title) as progress:
    for point in todo:
      began = time.perf_counter()
      rows = stream.add(grid.key(point), compute(point))
      results.append_timing(out_dir, {**point, "seconds": time.perf_counter() - began})
      progress.update(grid.label(point) + (f": {describe(rows)}" if describe else ""))
  return stream.finish()
