"""The training loop: ``run_training`` trains one run, or a grid of runs in one vmapped program.

What it trains is a program (``scaling.training.loop.programs.as_program``: a ``ModelConfig`` or a ``FunctionalProgram``),
how is the ``OptimizerConfig``, on what is the dataset; ``Runs`` says which runs (one seed, or a grid of learning rates
× seeds) and ``RunOptions`` how the loop runs (logging, recording, divergence, a resumed state). A grid's learning
rate lives in the optimizer state (``optax.inject_hyperparams``), so every member shares one compiled step
(``jax.vmap``; on one CPU device a small model's members are vmapped a few at a time,
``scaling.training.loop.step.default_grid_chunk``). Member i is initialized with ``PRNGKey(seed_i)`` and trained on
``dataset.batch(t, seed_i)`` at step t, exactly as a single run of that seed would be. The grid's members are split
over all devices (padded to a multiple of the device count; padded members are dropped from every result); a single
run splits its batch over the devices with the parameters replicated, or sharded FSDP-style with ``shard_params``.
The loop stops on divergence (a non-finite loss, or one above ``divergence_factor`` × the initial loss) once every
member has diverged, and keeps the last state whose loss was finite so that a diverged run is evaluated there rather
than on NaN parameters. Every step reports the learning rate actually applied (peak × schedule factor). Steps that
are not logged compute only the loss and the recorded metrics, and unless the last finite state is kept, each step
writes the new state over the old one's buffers (``donate_argnums``).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from scaling.base import validation
from scaling.base.validation import ConfigError
from scaling.base.validation import ConfigTypeError
from scaling.training.optimizer import OptimizerConfig
from scaling.runs import timesplit
from scaling.training.loop import initialization as init_lib
from scaling.training.loop import programs as programs_lib
from scaling.training.loop import sharded as sharded_lib
from scaling.training import sharding as sharding_lib
from scaling.training.loop import state as state_lib
from scaling.training.loop import step as step_lib

Array = jax.Array

STOP_COMPLETED = "completed"
STOP_NONFINITE = "non-finite loss"
STOP_LOSS_GROWTH = "loss above divergence_factor x initial loss"
DEFAULT_DIVERGENCE_FACTOR = 3.0


@dataclasses.dataclass(frozen=True)
class Runs:
  """Which runs ``run_training`` trains: one (an int seed), or a grid of members (a sequence of seeds) in one program.

  Checked when made; sequences are kept as tuples.

  Attributes:
    seed: an int for a single run, or a sequence [M] for a grid.
    learning_rates: a grid's learning rates [M], finite and positive; None: ``opt_config.learning_rate`` for every
      member.
    attn_mults: a grid's α [M] of each member's attention logit scale α/d_head (``TrainState.attn_mult``; the
      built-in Transformer only): one compiled step serves every α.
    chunk: a grid's members vmapped together in its step (the rest run one chunk after another in the same
      program); None: ``scaling.training.loop.step.default_grid_chunk``'s measured rule. Any value gives the same results
      up to float rounding.
  """

  seed: int | Sequence[int] = 0
  learning_rates: Sequence[float] | None = None
  attn_mults: Sequence[float] | None = None
  chunk: int | None = None

  def __post_init__(self):
    if isinstance(self.seed, (int, np.integer)) and not isinstance(self.seed, bool):
      object.__setattr__(self, "seed", int(self.seed))
      if self.learning_rates is not None or self.attn_mults is not None or self.chunk is not None:
        raise ConfigError("learning_rates, attn_mults and chunk need a sequence of seeds (a grid)")
      return
    seeds = np.asarray(self.seed)
    if seeds.ndim != 1 or not seeds.size or not np.issubdtype(seeds.dtype, np.integer):
      raise ConfigError(f"seed must be an int or a non-empty 1-D sequence of ints, got {self.seed!r}")
    object.__setattr__(self, "seed", tuple(int(s) for s in seeds))
    for name in ("learning_rates", "attn_mults"):
      values = getattr(self, name)
      if values is not None:
        values = np.asarray(values, np.float64)
        if values.shape != seeds.shape:
          raise ConfigError(f"seeds and {name} must be 1-D of the same length, got {seeds.shape} and {values.shape}")
        object.__setattr__(self, name, tuple(float(v) for v in values))
    if self.learning_rates is not None and not all(math.isfinite(lr) and lr > 0 for lr in self.learning_rates):
      raise ConfigError(f"learning_rates must be finite and positive, got {list(self.learning_rates)}")
    if self.chunk is not None:
      object.__setattr__(self, "chunk", validation.check_positive_int("chunk", self.chunk))

  @property
  def grid(self) -> bool:
    """Whether these runs are a grid (a sequence of seeds)."""
    return not isinstance(self.seed, int)


@dataclasses.dataclass(frozen=True)
class RunOptions:
  """How ``run_training`` runs: what it logs and records, when it stops, where it starts. Checked when made.

  Attributes:
    log_every: call ``callback`` and keep history every this many steps (the first, the last and a diverging step
      are always logged); the steps between compute only the loss and the ``record`` metrics. A diverging step
      between logged ones is logged with every metric when ``keep_last_finite`` (it is recomputed from the kept
      state), else with only those.
    callback: ``callback(step, row)`` with host metrics (floats and lists) and ``row["diverged"]``, true at the step
      where a member diverges.
    record: metric names kept at every step in ``TrainResult.records``.
    divergence_factor: a member diverges at a non-finite loss or one above this × its step-0 loss.
    stop_on_divergence: stop once every member has diverged.
    keep_last_finite: keep the last finite state of each member (a second copy of the state on the device).
    fixed_batch: train every step on batch 0.
    state: optional starting state. A single run's state after n updates (a checkpoint) resumes the run: steps
      n .. steps - 1 run, on the batches of those steps, exactly as they would have in one go.
    initial_loss: the step-0 loss of a resumed run (divergence is judged against it).
    after_step: ``after_step(updates done, state)`` after each step, once its row is logged (for checkpoints).
    shard_params: a single run on several devices shards parameters and optimizer state over them (FSDP) instead
      of replicating them.
  """

  log_every: int = 1
  callback: Callable[[int, dict[str, Any]], None] | None = None
  record: Sequence[str] = ()
  divergence_factor: float = DEFAULT_DIVERGENCE_FACTOR
  stop_on_divergence: bool = True
  keep_last_finite: bool = False
  fixed_batch: bool = False
  state: state_lib.TrainState | None = None
  initial_loss: float | None = None
  after_step: Callable[[int, state_lib.TrainState], None] | None = None
  shard_params: bool = False

  def __post_init__(self):
    object.__setattr__(self, "log_every", validation.check_positive_int("log_every", self.log_every))
    validation.check_number("divergence_factor", self.divergence_factor, positive=True)
    if isinstance(self.record, str) or not all(isinstance(name, str) for name in self.record):
      raise ConfigTypeError(f"record must be a sequence of metric names, got {self.record!r}")
    object.__setattr__(self, "record", tuple(self.record))
    for name in ("stop_on_divergence", "keep_last_finite", "fixed_batch", "shard_params"):
      object.__setattr__(self, name, validation.check_bool(name, getattr(self, name)))
    for name in ("callback", "after_step"):
      if getattr(self, name) is not None and not callable(getattr(self, name)):
        raise ConfigTypeError(f"{name} must be callable or None, got {getattr(self, name)!r}")
    if self.state is not None and not isinstance(self.state, state_lib.TrainState):
      raise ConfigTypeError(f"state must be a TrainState or None, got {type(self.state).__name__}")


def check_divergence(loss: float, initial_loss: float, factor: float) -> str | None:
  """Whether a loss diverged.

  Args:
    loss: the loss of a step.
    initial_loss: the step-0 loss.
    factor: the divergence factor.

  Returns:
    The stop reason if ``loss`` diverged (non-finite, or above factor × initial), else None.
  """
  if not math.isfinite(loss):
    return STOP_NONFINITE
  if math.isfinite(initial_loss) and loss > factor * initial_loss:
    return STOP_LOSS_GROWTH
  return None


@dataclasses.dataclass
class TrainResult:
  """Outcome of ``run_training``. For a grid, per-member values are arrays [M]; for a single run, scalars.

  Attributes:
    state: the final TrainState (after the last update that was applied).
    last_finite_state: the state to evaluate: ``state`` for a member that never
      diverged, else the last state whose loss was finite and not diverged
      (None unless ``keep_last_finite``).
    steps_run: number of train steps executed (including a diverging one; a resumed run counts those before
      its starting state too).
    stop_reason: STOP_COMPLETED, STOP_NONFINITE or STOP_LOSS_GROWTH (per member).
    divergence_step: the step whose loss diverged, or None (-1 in a grid).
    initial_loss: loss of step 0.
    final_loss: loss of the last step run.
    history: host metrics of every logged step, with "step" and "diverged" (a member diverged at that step).
    records: the metrics named in ``record`` at every step run (by this call), numpy float64
      [steps, (M,) ...].
    wall_time: seconds for the whole loop, compilation included.
    steps_per_sec: throughput after the first (compiling) step.
  """

  state: state_lib.TrainState
  last_finite_state: state_lib.TrainState | None
  steps_run: int
  stop_reason: Any
  divergence_step: Any
  initial_loss: Any
  final_loss: Any
  history: list[dict[str, Any]]
  records: dict[str, np.ndarray]
  wall_time: float
  steps_per_sec: float

  @property
  def diverged(self) -> Any:
    """Whether the run (each member) diverged."""
    if isinstance(self.divergence_step, np.ndarray):
      return self.divergence_step >= 0
    return self.divergence_step is not None


def run_training(model: Any, opt_config: OptimizerConfig, dataset: Any, runs: Runs = Runs(),
                 options: RunOptions = RunOptions()) -> TrainResult:
  """Trains one run, or a grid of runs in one vmapped program, for ``opt_config.steps`` steps.

  Deterministic given the seeds: member i starts from ``PRNGKey(seed_i)`` and
  sees ``dataset.batch(t, seed_i)`` at step t (batch 0 throughout with
  ``fixed_batch``).

  Args:
    model: what to train: a ``ModelConfig`` (the built-in Transformer, its optimizer from ``opt_config``) or a
      training program (``scaling.training.loop.programs.FunctionalProgram``: a user's model and its optimizer factory).
    opt_config: how: the optimizer, schedule and number of steps (of a ``FunctionalProgram``: the steps and default
      learning rate).
    dataset: on what: a ``scaling.training.data.dataset.Dataset``, or for a ``FunctionalProgram`` any source with
      ``batch(step, seed)`` (``scaling.mup.user_model.Batches``).
    runs: which runs: one seed, or a grid of seeds, learning rates and α.
    options: logging, recording, divergence, a starting state.

  Returns:
    A TrainResult.
  """
  if not isinstance(opt_config, OptimizerConfig):
    raise ConfigTypeError(f"opt_config must be a OptimizerConfig, got {type(opt_config).__name__}")
  if not isinstance(runs, Runs):
    raise ConfigTypeError(f"runs must be a Runs, got {type(runs).__name__}")
  if not isinstance(options, RunOptions):
    raise ConfigTypeError(f"options must be a RunOptions, got {type(options).__name__}")
  program = programs_lib.as_program(model, opt_config)
  program.check_dataset(dataset)
  if runs.attn_mults is not None and not program.takes_attn_mults:
    raise ConfigError("attn_mults apply to the built-in Transformer (a ModelConfig) only")
  steps = opt_config.steps
  record = options.record
  grid = runs.grid
  state = options.state
  first = 0 if state is None or grid else int(jax.device_get(state.step))
  donate = not options.keep_last_finite  # the state before a step is needed only to keep the last finite one
  if donate and state is not None:  # the caller's state stays usable
    state = jax.tree.map(jnp.copy, state)
  lean = tuple(dict.fromkeys(("loss", *record)))
  if first and options.initial_loss is None:
    raise ConfigError(f"resuming after {first} updates needs the step-0 loss (initial_loss)")
  start = time.perf_counter()
  mesh = sharding_lib.make_mesh()
  members = None
  fixed_batch = options.fixed_batch
  if grid:
    seeds = np.asarray(runs.seed, np.int32)
    lrs = (np.full(seeds.shape, opt_config.learning_rate, np.float32) if runs.learning_rates is None
           else np.asarray(runs.learning_rates, np.float32))
    mults = None if runs.attn_mults is None else np.asarray(runs.attn_mults, np.float32)
    (seeds, lrs, mults), members = sharding_lib.shard((seeds, lrs, mults), mesh)  # padding repeats the last one
    batch_of = lambda t: step_lib.grid_batches(dataset, 0 if fixed_batch else t, seeds)
    shape = (members,)
    if state is None:
      state = init_lib.make_init(program, grid=True)(seeds, lrs)
      state = state if mults is None else state.replace(attn_mult=mults)
    chunk = (step_lib.default_grid_chunk(program, int(seeds.shape[0]), devices=mesh.size) if runs.chunk is None
             else runs.chunk)
    step_fn = step_lib.make_train_step(program, grid=True, donate=donate, chunk=chunk)
    lean_fn = step_lib.make_train_step(program, grid=True, metrics=lean, donate=donate, chunk=chunk)
  else:
    seeds = runs.seed
    shape = ()
    if mesh.size > 1 or options.shard_params:
      init, sharded_batch, step_fn = sharded_lib.make_sharded_run(program, jax.eval_shape(dataset.batch, 0, seeds),
                                                                  mesh, options.shard_params)
      batch_of = lambda t: sharded_batch(dataset, 0 if fixed_batch else t, seeds)
      state = init(seeds, opt_config.learning_rate) if state is None else state
      lean_fn, donate = step_fn, False
    else:
      batch_of = lambda t: dataset.batch(0 if fixed_batch else t, seeds)
      if state is None:
        state = init_lib.make_init(program)(seeds, opt_config.learning_rate)
      step_fn = step_lib.make_train_step(program, donate=donate)
      lean_fn = step_lib.make_train_step(program, metrics=lean, donate=donate)
  padded_ok = lambda ok: (ok if members is None
                          else sharding_lib.place(sharding_lib.pad(ok, mesh.size)[0], sharding_lib.leading(mesh)))
  kept = state if options.keep_last_finite else None
  history: list[dict[str, Any]] = []
  records: dict[str, list] = {name: [] for name in record}
  initial = final = (np.full(shape, np.nan) if options.initial_loss is None
                     else np.asarray(options.initial_loss, np.float64))
  diverged_at = np.full(shape, -1)
  reasons = np.full(shape, STOP_COMPLETED, dtype=object)
  first_step_done = start
  steps_run = first
  with timesplit.computing():  # the steps and their results on the host: the run's compute
    for t in range(first, steps):
      state_in = state
      logged = t % options.log_every == 0 or t == steps - 1
      batch = batch_of(t)
      state, metrics = (step_fn if logged else lean_fn)(state_in, batch)
      loss = np.asarray(sharding_lib.to_host(metrics["loss"]), np.float64)
      loss = loss if members is None else loss[:members]
      steps_run = t + 1
      if t == first:
        initial = loss if t == 0 else initial
        first_step_done = time.perf_counter()
      final = loss
      new = np.zeros(shape, bool)
      for idx in np.ndindex(shape):
        if diverged_at[idx] < 0:
          reason = check_divergence(float(loss[idx]), float(initial[idx]), options.divergence_factor)
          if reason is not None:
            diverged_at[idx], reasons[idx], new[idx] = t, reason, True
      if kept is not None:
        kept = _keep(padded_ok(diverged_at < 0), state_in, kept)
      for name in record:
        if name not in metrics:
          raise ConfigError(f"record: {validation.unknown_choice('metric', name, tuple(metrics))}")
        records[name].append(metrics[name])
      if logged or new.any():
        if not logged and not donate:  # every metric of the diverging step, from the state before it
          metrics = step_fn(state_in, batch)[1]
        row = {"step": t, **to_host(metrics, members), "diverged": bool(new.any())}
        history.append(row)
        if options.callback is not None:
          options.callback(t, row)
      if options.after_step is not None:
        options.after_step(t + 1, state)
      if options.stop_on_divergence and np.all(diverged_at >= 0):
        break
    end = time.perf_counter()
    if kept is not None:
      kept = _keep(padded_ok(diverged_at >= 0), kept, state)
    timed = steps_run - first - 1
    steps_per_sec = timed / (end - first_step_done) if timed > 0 and end > first_step_done else float("nan")
    host_records = {k: np.asarray(_stacked_on_host(v), np.float64) for k, v in records.items()}
    if grid:
      host_records = {k: v[:, :members] for k, v in host_records.items()}
      if sharding_lib.padded_size(members, mesh.size) > members:
        state = sharding_lib.unpad(state, members)
        kept = None if kept is None else sharding_lib.unpad(kept, members)
  if grid:
    result = dict(stop_reason=reasons, divergence_step=diverged_at, initial_loss=initial, final_loss=final)
  else:
    step = int(diverged_at)
    result = dict(stop_reason=str(reasons[()]), divergence_step=None if step < 0 else step,
                  initial_loss=float(initial), final_loss=float(final))
  return TrainResult(state=state, last_finite_state=kept, steps_run=steps_run, history=history,
                     records=host_records, wall_time=end - start, steps_per_sec=steps_per_sec, **result)


def to_host(metrics: dict[str, Array], members: int | None = None) -> dict[str, Any]:
  """A step's metrics on the host.

  Args:
    metrics: the step's metrics (device arrays).
    members: a grid's members (its leading axis cut to them); None for a single run.

  Returns:
    The metrics as Python floats (scalars) and lists (arrays).
  """
  out = {}
  for k, v in sharding_lib.to_host(metrics).items():
    v = np.asarray(v)
    if members is not None:
      v = v[:members]
    out[k] = float(v) if v.ndim == 0 else v.astype(np.float64).tolist()
  return out


def _stacked_on_host(values: list[Array]) -> np.ndarray:
  """Recorded values of the steps as one host array [steps, ...] (stacked on the host unless they span processes)."""
  if all(not isinstance(v, jax.Array) or v.is_fully_addressable for v in values):
    return np.stack(jax.device_get(values))  # no compiled stack per record length
  return sharding_lib.to_host(jnp.stack(values))


@jax.jit
def _keep(ok: Array, new: Any, old: Any) -> Any:
  """Per member: ``new`` where ``ok`` (shape [] or [M]), else ``old``."""
  def pick(a, b):
    return jnp.where(jnp.reshape(ok, ok.shape + (1,) * (a.ndim - ok.ndim)), a, b)
  return jax.tree.map(pick, new, old)


def compile_grid(model: Any, opt_config: OptimizerConfig, dataset: Any, members: int) -> int:
  """Compiles, without running them, the init and the training step that ``run_training(model, opt_config, dataset,
  Runs(seed=<members seeds>))`` calls on one device (its defaults: every step logged, the state donated), so that its
  first step finds them compiled; e.g. in a thread while another grid trains (``GridPlanner``).

  Args:
    model: a ``ModelConfig`` or a training program.
    opt_config: the optimizer.
    dataset: the batch source (only its batch shapes are used).
    members: the grid's members.

  Returns:
    The programs compiled (0 on several devices, whose layouts are made where they run).
  """
  program = programs_lib.as_program(model, opt_config)
  mesh = sharding_lib.make_mesh()
  if mesh.size > 1:
    return 0
  lead = sharding_lib.leading(mesh)
  placed = lambda tree: jax.tree.map(
      lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=lead, weak_type=a.weak_type), tree)
  init_lib.member_init(program).lower(jax.ShapeDtypeStruct((), jnp.int32),
                                      jax.ShapeDtypeStruct((), jnp.float32)).compile()
  state = placed(jax.eval_shape(init_lib.make_init(program, grid=True), jax.ShapeDtypeStruct((members,), jnp.int32),
                                jax.ShapeDtypeStruct((members,), jnp.float32)))
  batch = placed(jax.tree.map(lambda a: jax.ShapeDtypeStruct((members, *a.shape), a.dtype),
                              jax.eval_shape(dataset.batch, 0, 0)))
  step = step_lib.make_train_step(program, grid=True, donate=True,
                                  chunk=step_lib.default_grid_chunk(program, members, devices=1))
  step.lower(state, batch).compile()
  return 2


def clear_caches() -> None:
  """Forgets the cached jitted steps and inits and the optimizers of training (``make_train_step``, ``make_init``,
  ``make_sharded_run``, ``optimizer_for``): the next call builds and compiles them anew."""
  programs_lib.optimizer_for.cache_clear()
  for module in (step_lib, init_lib, sharded_lib):
    module.clear_caches()
