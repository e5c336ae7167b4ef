"""Running a study over a grid (``scaling.studies.grid.points.WidthGrid``): the checks and output folder before training,
the memory estimate of the largest point, and the resumable loop that computes the rows of every point.

Shared by ``scaling.studies.transfer.study`` and ``scaling.studies.coord_check.study``; each point's rows are one group of
``scaling.runs.results.GroupedRows``, so a killed run resumes at the first point it had not finished.

Grids declared one at a time (``scaling.studies.claims.training.grids``): a ``GridSpec`` is one model's vmapped grid of
learning rates (or logit multipliers) × seeds, ``train_grid`` trains it (``scaling.training.loop.run.run_training``, every step
recorded, never stopped on divergence) into a ``GridRun``, and a ``GridPlanner`` trains each spec once however many
measurements read it. ``GridPlanner.plan`` turns declared specs into a ``GridPlan`` without training anything: its
floating-point operations, the programs it compiles and its largest program's memory.
"""

from __future__ import annotations

from concurrent import futures
import dataclasses
import io
import json
import pathlib
import sys
import threading
import time
from typing import Any, Callable, Iterable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from scaling.training.data.dataset import Dataset
from scaling.training.data import dataset as dataset_lib
from scaling.training.data.config import DataConfig
from scaling.training.model import transformer as model_lib
from scaling.training.model import config as model_config_lib
from scaling.training.model.config import ModelConfig
from scaling.training.model import scanned_blocks as scanned_blocks_lib
from scaling.training.optimizer import OptimizerConfig
from scaling.runs import report
from scaling.training import resources
from scaling.studies import device_time
from scaling.runs import results
from scaling.attention import rules as rules_lib
from scaling.runs import timesplit
from scaling.training.loop import initialization as init_lib
from scaling.training.loop import run as loop_lib
from scaling.studies.grid.points import lr_grid
from scaling.studies.grid.points import WidthGrid
from scaling.base.validation import ConfigError


def prepare(config: Any, out_dir: pathlib.Path, outputs: Sequence[str] = ()) -> Dataset:
  """For a width study (``data``, ``seeds``, ``grid``, ``family``): the dataset, every model checked, then
  the output folder opened (``results.open_run``: resumed, or refused if made with other options, unless
  --overwrite; ``outputs`` are the study's files) and config.json written; bad input fails before anything is
  written."""
  dataset = config.data.make(config.seeds.seed)
  config.grid.check(config.model, dataset)
  shown = config.grid.shown_values(resources.option_values(config))
  resources.check(memory_estimate(config, dataset), shown)
  results.open_run(out_dir, config, overwrite=config.output.overwrite, outputs=outputs,
                   extra={"dataset": dataset_lib.describe(dataset)})
  results.write_json(out_dir / "config.json", {"config": dataclasses.asdict(config),
                                               "dataset": dataset_lib.describe(dataset)})
  return dataset


def memory_estimate(config: Any, dataset: Dataset) -> resources.Estimate:
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


# ----------------------------------------------------------------------------
# Grids declared one at a time, trained once each, and planned without training.


@dataclasses.dataclass(frozen=True)
class GridSpec:
  """One vmapped grid: ``model_config`` trained under ``opt_config`` at every member, member i = (swept value
  i // S, seed i % S) as ``lr_grid`` lays them out; the swept values are the learning rates, or with ``attn_mults``
  the logit multipliers at one learning rate.

  Attributes:
    model_config: the model (a ``scaling.training.model.config.ModelConfig``).
    opt_config: the optimizer, schedule and number of steps (the members' learning rates replace its own).
    data: the training data, made with ``data_seed``.
    data_seed: the seed of ``data.make``.
    log2_lrs: the L learning rates (base-2 logarithms); with ``attn_mults``, the one rate of every member.
    seeds: the S seeds (a tuple, or a range of consecutive seeds).
    attn_mults: None, or the α of each swept logit scale α/d_head (``scaling.training.loop.state.TrainState.attn_mult``).
    record: the metrics kept at every step (``scaling.training.loop.run.run_training``'s ``record``).
    label: the grid in words, for messages (not part of what is trained).
  """

  model_config: Any
  opt_config: OptimizerConfig
  data: DataConfig
  data_seed: int
  log2_lrs: tuple[float, ...]
  seeds: tuple[int, ...] | range
  attn_mults: tuple[float, ...] | None = None
  record: tuple[str, ...] = ("loss",)
  label: str = dataclasses.field(default="", compare=False)

  def __post_init__(self):
    object.__setattr__(self, "log2_lrs", tuple(float(x) for x in self.log2_lrs))
    if not (isinstance(self.seeds, range) and self.seeds.step == 1):  # a range stays one (planned, never listed)
      object.__setattr__(self, "seeds", tuple(int(x) for x in self.seeds))
    if self.attn_mults is not None:
      object.__setattr__(self, "attn_mults", tuple(float(x) for x in self.attn_mults))
    object.__setattr__(self, "record", tuple(self.record))
    if not self.log2_lrs or not self.seeds or self.attn_mults == ():
      raise ConfigError(f"a grid needs learning rates, seeds and (when given) attn_mults; got log2_lrs "
                        f"{self.log2_lrs}, seeds {self.seeds}, attn_mults {self.attn_mults}")
    if self.attn_mults is not None and len(self.log2_lrs) != 1:
      raise ConfigError(f"a grid of attn_mults trains at one learning rate, got log2_lrs {self.log2_lrs}")

  @property
  def num_values(self) -> int:
    """How many values the grid sweeps (learning rates, or logit multipliers)."""
    return len(self.log2_lrs if self.attn_mults is None else self.attn_mults)

  @property
  def members(self) -> int:
    """The models vmapped: swept values × seeds."""
    return self.num_values * len(self.seeds)

  @property
  def steps(self) -> int:
    """Training steps."""
    return self.opt_config.steps

  def member_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(learning rates [M], seeds [M], α [M] or None) of the members, in order."""
    lrs, seeds = lr_grid(self.log2_lrs * (self.num_values if self.attn_mults is not None else 1), self.seeds)
    mults = None if self.attn_mults is None else np.repeat(np.asarray(self.attn_mults, np.float64), len(self.seeds))
    return lrs, seeds, mults

  def flops(self) -> float:
    """Floating-point operations of training the grid (``device_time.training_flops``)."""
    return device_time.training_flops(self.model_config, steps=self.steps, members=self.members,
                                    batch_size=self.data.batch_size, seq_len=self.data.seq_len)

  def padded(self, num_values: int) -> GridSpec:
    """The grid with its swept values padded to ``num_values`` by repeating the last one: its members then number
    those of a grid of ``num_values`` values, so it runs that grid's compiled step (``program_key``); itself when
    it already sweeps that many or more."""
    extra = int(num_values) - self.num_values
    if extra <= 0:
      return self
    if self.attn_mults is None:
      return dataclasses.replace(self, log2_lrs=self.log2_lrs + self.log2_lrs[-1:] * extra)
    return dataclasses.replace(self, attn_mults=self.attn_mults + self.attn_mults[-1:] * extra)

  def program_key(self) -> tuple[Any, ...]:
    """What the grid's compiled training step depends on: models whose rule is only a logit factor
    (``scaling.training.model.config.logit_multiplier``: α is a value of the training state) share one step."""
    model_config = self.model_config
    if model_config_lib.logit_multiplier(model_config) is not None:
      model_config = dataclasses.replace(model_config, rule=rules_lib.FixedScale())
    return (model_config, self.opt_config, self.members, self.data.batch_size, self.data.seq_len)


@dataclasses.dataclass
class GridRun:
  """One trained grid.

  Attributes:
    spec: what was trained.
    records: the spec's ``record`` metrics, float64 [steps, M, ...].
    final_params: the parameters after the last step, stacked [M, ...], one ``block_{i}`` per block
      (``unrolled_params``).
    wall_time: seconds of training, compilation included.
  """

  spec: GridSpec
  records: dict[str, np.ndarray]
  final_params: Any
  wall_time: float

  @property
  def model_config(self) -> Any:
    """The model trained."""
    return self.spec.model_config

  @property
  def opt_config(self) -> OptimizerConfig:
    """The optimizer trained with."""
    return self.spec.opt_config

  @property
  def log2_lrs(self) -> tuple[float, ...]:
    """The learning rates (base-2 logarithms)."""
    return self.spec.log2_lrs

  @property
  def seeds(self) -> tuple[int, ...]:
    """The seeds."""
    return self.spec.seeds

  def initial_params(self) -> Any:
    """The members' parameters before the first step, stacked [M, ...] (as ``train_grid`` initialized them)."""
    lrs, seeds, _ = self.spec.member_arrays()
    init = init_lib.make_init(self.model_config, self.opt_config, grid=True)(jnp.asarray(seeds), jnp.asarray(lrs))
    return unrolled_params(init.params, self.model_config)

  def first(self, spec: GridSpec) -> GridRun:
    """This run's first ``spec.num_values`` swept values (the rest padding, ``GridSpec.padded``), as the run of
    ``spec``."""
    if spec.padded(self.spec.num_values) != self.spec:
      raise ConfigError(f"first: the {spec.label or 'grid'} is not the start of the {self.spec.label or 'grid'}")
    members = spec.members
    records = {k: np.asarray(v)[:, :members] for k, v in self.records.items()}
    params = jax.tree.map(lambda x: x[:members], self.final_params)
    return GridRun(spec=spec, records=records, final_params=params, wall_time=self.wall_time)

  def by_lr(self, values: np.ndarray) -> np.ndarray:
    """A per-member array [M, ...] reshaped to [swept values, S, ...] (rows: the learning rates, or multipliers)."""
    values = np.asarray(values)
    return values.reshape(self.spec.num_values, len(self.seeds), *values.shape[1:])


def join_runs(first: GridRun, second: GridRun) -> GridRun:
  """One grid of two trained grids of the same model, optimizer, data and seeds over different learning rates (a
  grid and its widening): its rates in ascending order, each row's records and final parameters from the grid that
  trained it.

  Args:
    first: a trained learning-rate grid.
    second: a grid of the same spec but for ``log2_lrs`` (none shared with ``first``'s) and ``label``.

  Returns:
    The ``GridRun`` of the union of rates (its wall time the sum of both).
  """
  a, b = first.spec, second.spec
  if a.attn_mults is not None or b.attn_mults is not None:
    raise ConfigError("join_runs joins learning-rate grids, not grids of logit multipliers")
  if dataclasses.replace(b, log2_lrs=a.log2_lrs, label=a.label) != a:
    raise ConfigError(f"join_runs needs grids that differ only in their learning rates; got {a.label!r} and "
                      f"{b.label!r}")
  if set(a.log2_lrs) & set(b.log2_lrs):
    raise ConfigError(f"join_runs: the grids share learning rates {sorted(set(a.log2_lrs) & set(b.log2_lrs))}")
  rates = a.log2_lrs + b.log2_lrs
  order = np.argsort(rates, kind="stable")
  s = len(a.seeds)
  members = np.concatenate([np.arange(i * s, (i + 1) * s) for i in order])  # member i = (rate i // S, seed i % S)

  def joined(x, y, axis):
    return np.take(np.concatenate([np.asarray(x), np.asarray(y)], axis=axis), members, axis=axis)

  spec = dataclasses.replace(a, log2_lrs=tuple(rates[i] for i in order))
  records = {k: joined(first.records[k], second.records[k], 1) for k in first.records}  # [steps, M, ...]
  params = jax.tree.map(lambda x, y: joined(x, y, 0), first.final_params, second.final_params)
  return GridRun(spec=spec, records=records, final_params=params, wall_time=first.wall_time + second.wall_time)


def train_grid(spec: GridSpec, dataset: Dataset,
               callback: Callable[[int, dict[str, Any]], None] | None = None) -> GridRun:
  """Trains every member of ``spec`` on ``dataset`` in one vmapped program, every step recorded and no member
  stopped on divergence (``scaling.training.loop.run.run_training``; ``callback`` as its ``RunOptions``')."""
  lrs, seeds, mults = spec.member_arrays()
  result = loop_lib.run_training(spec.model_config, spec.opt_config, dataset,
                                 loop_lib.Runs(seed=seeds, learning_rates=lrs, attn_mults=mults),
                                 loop_lib.RunOptions(record=spec.record, stop_on_divergence=False,
                                                     callback=callback))
  return GridRun(spec=spec, records=result.records, final_params=unrolled_params(result.state.params,
                                                                                 spec.model_config),
                 wall_time=result.wall_time)


def unrolled_params(params: Any, model_config: Any) -> Any:
  """Members' parameters [M, ...] with one ``block_{i}`` per block, as ``model.init_params`` lays them out (a scanned
  model trains them stacked, ``scaling.training.model.scanned_blocks.stack_blocks``); as given for any other model."""
  if not (isinstance(model_config, ModelConfig) and model_lib.scans_blocks(model_config)):
    return params
  # Sliced on the host: no compiled slice per shape.
  return scanned_blocks_lib.unstack_blocks(jax.device_get(params), model_config.depth, leading=1)


@dataclasses.dataclass(frozen=True)
class GridPlan:
  """Distinct grids to train, in order, and what training them costs (nothing is trained).

  Attributes:
    grids: the specs, each once.
  """

  grids: tuple[GridSpec, ...]

  def __len__(self) -> int:
    return len(self.grids)

  @property
  def runs(self) -> int:
    """The models trained: members summed over the grids."""
    return sum(g.members for g in self.grids)

  def flops(self) -> float:
    """Floating-point operations of training every grid."""
    return sum(g.flops() for g in self.grids)

  def programs(self) -> list[tuple[float, str, int]]:
    """One (floating-point operations, dtype, steps) per grid, for ``device_time.accelerator_seconds``."""
    return [(g.flops(), str(g.model_config.dtype), int(g.steps)) for g in self.grids]

  def compiled(self) -> int:
    """How many distinct training steps the grids compile (``GridSpec.program_key``)."""
    return len({g.program_key() for g in self.grids})

  def estimate(self, flags: Sequence[str], hint: str) -> resources.Estimate:
    """The largest training program of the grids (``resources.training_program``), its parts sized by ``flags``
    and ``hint`` naming what to change; ``where``: "for the " and the grid's label."""
    if not self.grids:
      raise ConfigError("an empty plan has no largest program")
    estimates = []
    for g in self.grids:
      e = resources.training_program(g.model_config, optimizer=g.opt_config.optimizer,
                                     momentum=g.opt_config.momentum, batch_size=g.data.batch_size,
                                     seq_len=g.data.seq_len, members=g.members)
      parts = tuple(dataclasses.replace(p, flags=tuple(flags), hint=hint) for p in e.parts)
      estimates.append(resources.Estimate(parts, f"for the {g.label or 'grid'}"))
    return resources.largest(estimates)


def _compile_grid(spec: GridSpec, dataset: Dataset) -> None:
  """The programs ``train_grid(spec)`` runs, compiled in this thread and counted as compiled ahead."""
  with timesplit.compiling_ahead():
    loop_lib.compile_grid(spec.model_config, spec.opt_config, dataset, spec.members)


class _Stopped(Exception):
  """The planner closed while a grid was training ahead."""


def _train_grid_ahead(spec: GridSpec, dataset: Dataset, closing: threading.Event) -> GridRun:
  """``train_grid(spec, dataset)`` in this thread, beside the run (its compilation counted as compiled ahead, its
  compute outside the run's split); stopped between two steps once ``closing`` is set."""

  def stop_when_closing(step, row):
    del step, row  # only the moment matters
    if closing.is_set():
      raise _Stopped()

  with timesplit.compiling_ahead():
    return train_grid(spec, dataset, callback=stop_when_closing)


def _failure(future: futures.Future, waiting: Any, failed: str, instead: str) -> BaseException | None:
  """Waits for ``future`` inside ``waiting`` (a time-split context: what the wait counts as) and returns its
  exception, or None when it succeeded; a failure other than a stop on closing is reported on stderr as ``failed``
  and what the run does ``instead``."""
  with waiting:
    error = future.exception()
  if error is not None and not isinstance(error, _Stopped):
    sys.stderr.write(f"{failed} ({type(error).__name__}: {error}); {instead}\n")
  return error


class GridPlanner:
  """The grids of one context: each dataset made once and each ``GridSpec`` trained once, however many
  measurements read it; ``plan`` lists declared grids without training them, and ``compile_ahead`` compiles their
  programs in a thread beside whatever runs meanwhile (and on a CPU then trains them there too)."""

  def __init__(self):
    self._datasets: dict[tuple[DataConfig, int], Dataset] = {}
    self._runs: dict[GridSpec, GridRun] = {}
    self._ahead: dict[tuple[Any, ...], futures.Future] = {}
    self._trained_ahead: dict[GridSpec, futures.Future] = {}
    self._closing = threading.Event()
    self._executor: futures.ThreadPoolExecutor | None = None

  def compile_ahead(self, specs: Iterable[GridSpec], *, train: bool | None = None) -> None:
    """Compiles the programs of ``specs`` (each distinct ``program_key`` once, in order) in one thread while the
    caller goes on; ``train`` waits for a grid's programs that are still compiling, so nothing compiles twice. On
    one device (``scaling.training.loop.run.compile_grid``); elsewhere nothing is done ahead.

    Args:
      specs: the grids the run will train, in the order it asks for them.
      train: once every program is compiled, the same thread also trains the grids, from the last one backwards,
        while the caller trains from the first: ``train`` takes a grid trained there (or waits for the one under
        way) and trains the rest itself, so the two meet in between. The same programs on the same inputs: the
        same numbers. Default: on a CPU, where one grid's training leaves a core idle; an accelerator is filled by
        one grid, and two at once would need twice its memory.
    """
    if jax.device_count() > 1:
      return
    if train is None:
      train = jax.default_backend() == "cpu"
    if self._executor is None:
      self._closing.clear()
      self._executor = futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="compile-ahead")
    grids = self.plan(specs).grids
    for spec in grids:
      key = spec.program_key()
      if key not in self._ahead:
        self._ahead[key] = self._executor.submit(_compile_grid, spec, self.dataset(spec.data, spec.data_seed))
    if train:
      for spec in reversed(grids):
        if spec not in self._runs and spec not in self._trained_ahead:
          self._trained_ahead[spec] = self._executor.submit(_train_grid_ahead, spec,
                                                            self.dataset(spec.data, spec.data_seed), self._closing)

  def close(self) -> None:
    """Stops working ahead: programs and grids not yet started are dropped; a program under way finishes, a grid
    under way stops at its next step."""
    if self._executor is not None:
      self._closing.set()
      for future in (*self._ahead.values(), *self._trained_ahead.values()):
        future.cancel()
      self._executor.shutdown(wait=True)
      self._executor = None
      self._trained_ahead.clear()

  def _wait_for_programs(self, spec: GridSpec) -> None:
    """Waits until the programs of ``spec`` compiled ahead are ready (a failure there is reported and the run
    compiles them itself)."""
    future = self._ahead.get(spec.program_key())
    if future is None or future.cancelled():
      return
    _failure(future, timesplit.waiting_for_compilation(), f"compiling ahead failed for the {spec.label or 'grid'}",
             "it compiles when it trains")

  def dataset(self, config: DataConfig, seed: int) -> Dataset:
    """``config.make(seed)``, made once."""
    key = (config, int(seed))
    if key not in self._datasets:
      self._datasets[key] = config.make(key[1])
    return self._datasets[key]

  def train(self, spec: GridSpec, *, like: GridSpec | None = None) -> GridRun:
    """The trained grid of ``spec`` (``train_grid`` on its data, the first time it is asked for).

    Args:
      spec: the grid.
      like: a grid of the same program but more swept values (e.g. the grid ``spec`` widens): ``spec`` is trained
        padded to its values (``GridSpec.padded``), so it runs ``like``'s compiled step instead of compiling its
        own, and the padding is dropped (each member trains alone: the same records as unpadded, up to float
        rounding).
    """
    if not isinstance(spec, GridSpec):
      raise TypeError(f"spec must be a GridSpec, got {type(spec).__name__}")
    if like is not None and not isinstance(like, GridSpec):
      raise TypeError(f"like must be a GridSpec, got {type(like).__name__}")
    if spec not in self._runs:
      padded = spec if like is None else spec.padded(like.num_values)
      if padded != spec and padded.program_key() != like.program_key():
        raise ConfigError(f"train: the {spec.label or 'grid'} padded to the {like.label or 'grid'}'s values does "
                          "not run its program (they differ in more than their swept values)")
      run = self._trained_there(padded)
      if run is None:
        self._wait_for_programs(padded)
        run = train_grid(padded, self.dataset(spec.data, spec.data_seed))
      self._runs[spec] = run if padded == spec else run.first(spec)
    return self._runs[spec]

  def _trained_there(self, spec: GridSpec) -> GridRun | None:
    """``spec``'s run trained ahead (waiting for it while under way; the wait is the run's compute), or None when
    it was not started there (it is dropped from there: the caller trains it) or failed (reported)."""
    future = self._trained_ahead.pop(spec, None)
    if future is None or future.cancel():
      return None
    if _failure(future, timesplit.computing(), f"training ahead failed for the {spec.label or 'grid'}",
                "it trains here") is None:
      return future.result()
    return None

  @property
  def runs(self) -> list[GridRun]:
    """The grids trained so far, in order."""
    return list(self._runs.values())

  def plan(self, specs: Iterable[GridSpec]) -> GridPlan:
    """The distinct grids of ``specs``, in order, as a ``GridPlan`` (nothing is trained)."""
    specs = tuple(specs)
    for spec in specs:
      if not isinstance(spec, GridSpec):
        raise TypeError(f"specs must be GridSpecs, got {type(spec).__name__}")
    return GridPlan(tuple(dict.fromkeys(specs)))
