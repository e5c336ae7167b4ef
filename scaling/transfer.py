"""μTransfer of the learning rate: a grid of learning rates × seeds per width, trained in one vmapped program.

Tensor Programs V (Yang et al. 2022, "Tuning Large Neural Networks via
Zero-Shot Hyperparameter Transfer", §1 and Fig. 1) shows that under μP the
optimal learning rate of a Transformer hardly moves as the width grows, so it
can be tuned on a small proxy model, whereas under SP it shrinks with width
(roughly ∝ 1/width for Adam). This module measures that: for each
parametrization and width it trains every (learning rate, seed) pair of a
grid and records the final training loss.

Training a grid. The learning rate lives in the optimizer state
(``optax.inject_hyperparams`` in ``scaling.optim.make_optimizer``), so all
members of a grid share one compiled train step: their states are stacked
along a leading axis [M] (M = learning rates × seeds) and the step is
``jax.jit(jax.vmap(scaling.train.train_step))``. Each width (per
parametrization) compiles one init and one step, whatever the size of the
grid. Member i = (learning rate i // S, seed i % S) is initialized with
``PRNGKey(seed)`` and trained on ``dataset.batch(t, seed)`` at step t, exactly
as ``scaling.train.run_training`` would train it alone; all learning rates
share the same seeds (common random numbers), so differences between learning
rates are not sampling noise of the data or init.

Compiled inits and steps are cached per (model config, optimizer spec), so
repeated grids in one process (the coordinate check, tests, benchmarks) do not
recompile; ``clear_caches`` empties the caches.

Divergence: a member whose loss is ever non-finite has diverged; its final
loss is None (reported as null, treated as +inf by ``find_optimum``), and a
learning rate at which any seed diverged has no mean loss.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable, Iterable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from scaling import model as model_lib
from scaling import optim
from scaling import parametrization as param_lib
from scaling import train as train_lib
from scaling.validation import check_finite
from scaling.validation import check_positive_int

DEFAULT_NUM_HEADS = 4
SCHEDULES = ("constant", "cosine")
# train_step metrics returned by grid steps: the loss and the RMS values of the coordinate check.
GRID_METRICS = ("loss", "embed_rms", "attn_logits_rms", "attn_out_rms", "mlp_out_rms", "readout_rms")


def check_widths(widths: Iterable[int]) -> tuple[int, ...]:
  """Validated, de-duplicated widths in the given order (ValueError if empty or not positive)."""
  out = tuple(dict.fromkeys(check_positive_int("width", w) for w in widths))
  if not out:
    raise ValueError("widths must not be empty")
  return out


def check_parametrizations(names: Iterable[str]) -> tuple[str, ...]:
  """Validated, de-duplicated parametrization names."""
  out = tuple(dict.fromkeys(names))
  if not out:
    raise ValueError("parametrizations must not be empty")
  known = param_lib.available_parametrizations()
  for name in out:
    if name not in known:
      raise ValueError(f"unknown parametrization {name!r}; known: {', '.join(known)}")
  return out


def check_seed(seed: Any, count: int) -> int:
  """A base seed such that seed .. seed + count - 1 are non-negative int32 values."""
  if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed <= 2**31 - 1 - count:
    raise ValueError(f"seed must be an integer in [0, 2**31 - {count}], got {seed!r}")
  return int(seed)


# ----------------------------------------------------------------------------
# The models: a width-indexed family.


@dataclasses.dataclass(frozen=True)
class WidthFamily:
  """Transformers indexed by width D, with every width-like dimension proportional to D.

  Either the number of heads is fixed and the head dimension grows
  (H = D / num_heads), or the head dimension is fixed and the number of heads
  grows (N = D / head_dim); at most one of the two is given (neither: fixed
  ``DEFAULT_NUM_HEADS`` heads). The MLP width is mlp_ratio · D. μP's relative
  factors (Tensor Programs V, Table 8) assume this: every fan that is a width
  scales by the same m = D / base_width.

  Attributes:
    depth: number of blocks.
    num_heads: fixed number of heads (head dim grows with width), or None.
    head_dim: fixed head dimension (number of heads grows), or None.
    mlp_ratio: F / D.
    base_width: the width at which μP equals SP (None: set later from the
      smallest width, see ``with_base_width``). The base head dim (where μP's
      α/d_head equals 1/√d_head) is the head dim at this width.
    zero_query: zero-initialize W_q (a μP option, TP5 §D.2).
    zero_readout: zero-initialize the readout (``mup``'s readout_zero_init).
    positions: "rope", "learned" or "none".
  """

  depth: int = 2
  num_heads: int | None = None
  head_dim: int | None = None
  mlp_ratio: float = 4.0
  base_width: int | None = None
  zero_query: bool = False
  zero_readout: bool = False
  positions: str = "rope"

  def __post_init__(self):
    check_positive_int("depth", self.depth)
    if self.num_heads is not None and self.head_dim is not None:
      raise ValueError("give num_heads or head_dim, not both: the other one follows from the width")
    if self.num_heads is not None:
      check_positive_int("num_heads", self.num_heads)
    if self.head_dim is not None:
      check_positive_int("head_dim", self.head_dim)
    if self.base_width is not None:
      check_positive_int("base_width", self.base_width)
    check_finite("mlp_ratio", self.mlp_ratio, positive=True)
    if self.positions not in model_lib.POSITIONS:
      raise ValueError(f"positions must be one of {', '.join(model_lib.POSITIONS)}, got {self.positions!r}")

  def heads(self, width: int) -> tuple[int, int]:
    """(num_heads N, head_dim H) at ``width``, with N · H = width.

    Raises:
      ValueError: the width is not a multiple of the fixed heads or head dim.
    """
    width = check_positive_int("width", width)
    if self.head_dim is not None:
      if width % self.head_dim:
        raise ValueError(f"width {width} is not a multiple of head_dim={self.head_dim}")
      return width // self.head_dim, self.head_dim
    n = DEFAULT_NUM_HEADS if self.num_heads is None else self.num_heads
    if width % n:
      raise ValueError(f"width {width} is not divisible into num_heads={n} heads")
    return n, width // n

  def with_base_width(self, widths: Sequence[int]) -> WidthFamily:
    """This family with base_width = min(widths) if it was None."""
    if self.base_width is not None:
      return self
    return dataclasses.replace(self, base_width=min(check_widths(widths)))

  def model_config(self, parametrization: str, width: int, *, vocab_size: int, max_len: int,
                   **overrides: Any) -> model_lib.ModelConfig:
    """The ``scaling.model.ModelConfig`` of this family at ``width``.

    Args:
      parametrization: "sp", "ntk", "mup" or "umup".
      width: D.
      vocab_size: V.
      max_len: the longest sequence the model takes.
      **overrides: further ModelConfig fields.

    Raises:
      ValueError: bad width or base width (the message names it), or a
        configuration the model rejects.
    """
    if self.base_width is None:
      raise ValueError("base_width is not set (use with_base_width)")
    num_heads, head_dim = self.heads(width)
    try:
      base_head_dim = self.heads(self.base_width)[1]
    except ValueError as e:
      raise ValueError(f"base_width: {e}") from None
    fields = dict(vocab_size=vocab_size, width=width, depth=self.depth, num_heads=num_heads, head_dim=head_dim,
                  mlp_ratio=self.mlp_ratio, max_len=max_len, positions=self.positions,
                  parametrization=parametrization, base_width=self.base_width, base_head_dim=base_head_dim,
                  zero_query=self.zero_query, zero_readout=self.zero_readout)
    fields.update(overrides)
    return model_lib.ModelConfig(**fields)

  def check(self, parametrizations: Sequence[str], widths: Sequence[int], *, vocab_size: int, max_len: int) -> None:
    """Raises ValueError unless every (parametrization, width) gives a valid model."""
    for width in check_widths(widths):
      for name in parametrizations:
        self.model_config(name, width, vocab_size=vocab_size, max_len=max_len)


# ----------------------------------------------------------------------------
# The optimizer, as hashable data.


@dataclasses.dataclass(frozen=True)
class OptimizerSpec:
  """An optimizer of ``scaling.optim.make_optimizer`` without its learning rate (which lives in the state).

  Attributes:
    name: "adam", "adamw" or "sgd".
    schedule: "constant" (no schedule) or "cosine": linear warmup over
      ``warmup_steps`` then cosine decay to ``end_factor`` at ``total_steps``
      (``scaling.optim.warmup_cosine_schedule``), multiplying the learning rate.
    warmup_steps: warmup length of the cosine schedule.
    total_steps: length of the cosine schedule (required for "cosine").
    end_factor: final factor of the cosine schedule.
    weight_decay: decoupled (adamw) or L2 (sgd) decay; 0 for adam.
  """

  name: str = "adam"
  schedule: str = "constant"
  warmup_steps: int = 0
  total_steps: int | None = None
  end_factor: float = 0.0
  weight_decay: float = 0.0

  def __post_init__(self):
    if self.name not in optim.OPTIMIZERS:
      raise ValueError(f"unknown optimizer {self.name!r}; expected one of {', '.join(optim.OPTIMIZERS)}")
    if self.schedule not in SCHEDULES:
      raise ValueError(f"unknown schedule {self.schedule!r}; expected one of {', '.join(SCHEDULES)}")
    if self.schedule == "cosine":
      check_positive_int("total_steps", self.total_steps)
      if (isinstance(self.warmup_steps, bool) or not isinstance(self.warmup_steps, int)
          or not 0 <= self.warmup_steps < self.total_steps):
        raise ValueError(f"warmup_steps must be an integer in [0, total_steps={self.total_steps}), "
                         f"got {self.warmup_steps!r}")
    check_finite("end_factor", self.end_factor, nonnegative=True)
    check_finite("weight_decay", self.weight_decay, nonnegative=True)
    if self.name == "adam" and self.weight_decay:
      raise ValueError("adam takes no weight_decay; use 'adamw'")

  def build(self, parametrization: str | param_lib.Parametrization, width: int,
            learning_rate: float = 1.0) -> optax.GradientTransformation:
    """``scaling.optim.make_optimizer`` with this spec (the learning rate can be replaced in the state later)."""
    schedule = None
    if self.schedule == "cosine":
      schedule = optim.warmup_cosine_schedule(1.0, self.warmup_steps, self.total_steps, end_value=self.end_factor)
    return optim.make_optimizer(self.name, learning_rate, parametrization, width,
                                weight_decay=self.weight_decay, schedule=schedule)

  def for_model(self, model_config: model_lib.ModelConfig, learning_rate: float = 1.0) -> optax.GradientTransformation:
    """The optimizer for ``model_config``'s parametrization and width."""
    return self.build(model_config.make_parametrization(), model_config.width, learning_rate)


# ----------------------------------------------------------------------------
# Training a grid of runs in one vmapped program.


def lr_grid(log2_lrs: Sequence[float], seeds: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
  """The members of a grid: (learning rates float32 [L·S], seeds int32 [L·S]); member i = (lr i // S, seed i % S)."""
  log2_lrs = np.asarray(log2_lrs, np.float64)
  seeds = np.asarray(seeds, np.int32)
  lrs = np.repeat(np.exp2(log2_lrs), len(seeds)).astype(np.float32)
  return lrs, np.tile(seeds, len(log2_lrs))


def init_member(model_config: model_lib.ModelConfig, spec: OptimizerSpec, seed: Any, lr: Any) -> train_lib.TrainState:
  """The TrainState of one run: ``init_train_state(PRNGKey(seed))`` with learning rate ``lr`` in the optimizer state."""
  state = train_lib.init_train_state(jax.random.PRNGKey(seed), model_config, spec.for_model(model_config))
  return state.replace(opt_state=optim.set_learning_rate(state.opt_state, lr))


@functools.lru_cache(maxsize=64)
def _init_fn(model_config: model_lib.ModelConfig, spec: OptimizerSpec) -> Callable:
  """Jitted (seeds [M], lrs [M]) -> TrainState [M]."""
  return jax.jit(jax.vmap(functools.partial(init_member, model_config, spec)))


def init_grid(model_config: model_lib.ModelConfig, spec: OptimizerSpec, seeds: Any, lrs: Any) -> train_lib.TrainState:
  """Stacked TrainStates [M]: member i is ``init_train_state(PRNGKey(seeds[i]))`` with learning rate ``lrs[i]``."""
  seeds = jnp.asarray(seeds, jnp.int32)
  lrs = jnp.asarray(lrs, jnp.float32)
  if seeds.shape != lrs.shape or seeds.ndim != 1:
    raise ValueError(f"seeds and lrs must be 1-D of the same length, got {seeds.shape} and {lrs.shape}")
  return _init_fn(model_config, spec)(seeds, lrs)


def member_step(model_config: model_lib.ModelConfig, spec: OptimizerSpec) -> Callable:
  """The pure step of one run, (state, batch) -> (state, ``GRID_METRICS``), to jit or vmap."""
  model = model_lib.Transformer(model_config)
  optimizer = spec.for_model(model_config)

  def step(state, batch):
    state, metrics = train_lib.train_step(state, batch, model=model, optimizer=optimizer)
    return state, {k: metrics[k] for k in GRID_METRICS}

  return step


@functools.lru_cache(maxsize=64)
def grid_step_fn(model_config: model_lib.ModelConfig, spec: OptimizerSpec) -> Callable:
  """Jitted, vmapped (states [M], batches [M, ...]) -> (states, metrics [M, ...]); cached per config."""
  return jax.jit(jax.vmap(member_step(model_config, spec)))


@jax.jit
def grid_batches(dataset: Any, step: Any, seeds: jax.Array) -> dict[str, jax.Array]:
  """Batch ``step`` of each seed: {inputs, targets, weights} [M, B, T] (compiled once per dataset config)."""
  return jax.vmap(lambda s: dataset.batch(step, s))(seeds)


def clear_caches() -> None:
  """Forgets compiled inits and steps (to time compilation)."""
  _init_fn.cache_clear()
  grid_step_fn.cache_clear()
  grid_batches.clear_cache()
  jax.clear_caches()


def train_grid(model_config: model_lib.ModelConfig, spec: OptimizerSpec, dataset: Any, lrs: Any, seeds: Any,
               steps: int, *, fixed_batch: bool = False) -> dict[str, np.ndarray]:
  """Trains every member (lrs[i], seeds[i]) for ``steps`` steps in one vmapped program.

  Args:
    model_config: the model (its vocab_size must cover the dataset's).
    spec: the optimizer.
    dataset: a ``scaling.data.Dataset``.
    lrs: float [M] learning rates.
    seeds: int [M] seeds (init ``PRNGKey(seed)``, data ``dataset.batch(t, seed)``).
    steps: number of updates.
    fixed_batch: train every step on batch 0 (the coordinate check's default).

  Returns:
    ``GRID_METRICS`` stacked as float64 numpy arrays [steps, M, ...], each
    measured before that step's update (row t = parameters after t updates).
  """
  steps = check_positive_int("steps", steps)
  if dataset.vocab_size > model_config.vocab_size:
    raise ValueError(f"dataset vocab_size {dataset.vocab_size} exceeds the model's {model_config.vocab_size}")
  seeds = jnp.asarray(seeds, jnp.int32)
  states = init_grid(model_config, spec, seeds, lrs)
  step_fn = grid_step_fn(model_config, spec)
  history = []
  batch = grid_batches(dataset, 0, seeds) if fixed_batch else None
  for t in range(steps):
    states, metrics = step_fn(states, batch if fixed_batch else grid_batches(dataset, t, seeds))
    history.append(metrics)
  stacked = jax.device_get(jax.tree.map(lambda *xs: jnp.stack(xs), *history))
  return {k: np.asarray(v, np.float64) for k, v in stacked.items()}


# ----------------------------------------------------------------------------
# The transfer experiment.


@dataclasses.dataclass(frozen=True)
class TransferConfig:
  """A learning-rate sweep at several widths.

  Attributes:
    parametrizations: schemes to compare.
    widths: model widths D.
    log2_lrs: base-2 logarithms of the learning rates tried.
    num_seeds: seeds per learning rate (seed, seed + 1, ...).
    steps: updates per run.
    family: the models; base_width defaults to min(widths).
    optimizer: the optimizer (its schedule's total_steps must equal steps).
    seed: the first seed.
    average_last: final loss = mean training loss of the last this many steps
      (None: max(1, steps // 10)).
  """

  parametrizations: tuple[str, ...] = ("sp", "mup")
  widths: tuple[int, ...] = (32, 64, 128, 256)
  log2_lrs: tuple[float, ...] = tuple(float(x) for x in range(-14, -3))
  num_seeds: int = 2
  steps: int = 200
  family: WidthFamily = WidthFamily()
  optimizer: OptimizerSpec = OptimizerSpec()
  seed: int = 0
  average_last: int | None = None

  def __post_init__(self):
    object.__setattr__(self, "parametrizations", check_parametrizations(self.parametrizations))
    object.__setattr__(self, "widths", check_widths(self.widths))
    object.__setattr__(self, "family", self.family.with_base_width(self.widths))
    lrs = tuple(check_finite("log2_lr", x) for x in self.log2_lrs)
    if not lrs:
      raise ValueError("log2_lrs must not be empty")
    for x in lrs:
      if not -126 < x < 64:
        raise ValueError(f"log2_lr must lie in (-126, 64) (a positive float32 learning rate), got {x}")
    object.__setattr__(self, "log2_lrs", tuple(dict.fromkeys(lrs)))
    check_positive_int("num_seeds", self.num_seeds)
    check_positive_int("steps", self.steps)
    check_seed(self.seed, self.num_seeds)
    if self.average_last is not None:
      check_positive_int("average_last", self.average_last)
      if self.average_last > self.steps:
        raise ValueError(f"average_last ({self.average_last}) must not exceed steps ({self.steps})")
    if self.optimizer.schedule == "cosine" and self.optimizer.total_steps != self.steps:
      raise ValueError(f"the cosine schedule's total_steps ({self.optimizer.total_steps}) must equal steps "
                       f"({self.steps})")

  @property
  def last(self) -> int:
    """The number of final steps averaged."""
    return self.average_last if self.average_last is not None else max(1, self.steps // 10)

  @property
  def seeds(self) -> tuple[int, ...]:
    """The seeds of every learning rate."""
    return tuple(range(self.seed, self.seed + self.num_seeds))


def _or_none(x: float) -> float | None:
  """x if finite, else None."""
  return float(x) if math.isfinite(x) else None


def summarize_grid(losses: np.ndarray, log2_lrs: Sequence[float], num_seeds: int, last: int) -> list[dict[str, Any]]:
  """Final losses of a grid from its loss history.

  Args:
    losses: [steps, L·S] training losses, member i = (lr i // S, seed i % S).
    log2_lrs: the L log2 learning rates.
    num_seeds: S.
    last: the final loss of a member is the mean of its last ``last`` losses.

  Returns:
    One row per learning rate: log2_lr, learning_rate, final_loss (mean over
    seeds; None if any seed diverged), final_loss_std, final_loss_seeds (None
    for a diverged seed), diverged_seeds (count), initial_loss (mean step-0 loss).
  """
  losses = np.asarray(losses, np.float64)
  steps, m = losses.shape
  if m != len(log2_lrs) * num_seeds:
    raise ValueError(f"losses have {m} members, expected {len(log2_lrs)} x {num_seeds}")
  if not 1 <= last <= steps:
    raise ValueError(f"last must be in [1, {steps}], got {last}")
  diverged = ~np.all(np.isfinite(losses), axis=0)
  final = np.where(diverged, np.nan, np.mean(losses[-last:], axis=0)).reshape(len(log2_lrs), num_seeds)
  initial = losses[0].reshape(len(log2_lrs), num_seeds)
  diverged = diverged.reshape(len(log2_lrs), num_seeds)
  rows = []
  for i, x in enumerate(log2_lrs):
    ok = not diverged[i].any()
    rows.append({
        "log2_lr": float(x),
        "learning_rate": float(2.0**x),
        "final_loss": float(np.mean(final[i])) if ok else None,
        "final_loss_std": float(np.std(final[i])) if ok else None,
        "final_loss_seeds": [_or_none(v) for v in final[i]],
        "diverged_seeds": int(diverged[i].sum()),
        "initial_loss": _or_none(float(np.nanmean(initial[i])) if np.isfinite(initial[i]).any() else float("nan")),
    })
  return rows


def parabola_vertex(x: Sequence[float], y: Sequence[float]) -> float | None:
  """The x of the vertex of the parabola through three points, or None unless it opens upwards."""
  (x0, x1, x2), (y0, y1, y2) = x, y
  denom = (x0 - x1) * (x0 - x2) * (x1 - x2)
  if denom == 0:
    return None
  a = (x2 * (y1 - y0) + x1 * (y0 - y2) + x0 * (y2 - y1)) / denom
  b = (x2**2 * (y0 - y1) + x1**2 * (y2 - y0) + x0**2 * (y1 - y2)) / denom
  if not a > 0:
    return None
  return float(-b / (2 * a))


def find_optimum(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
  """The best learning rate of each (parametrization, width).

  Args:
    rows: rows with parametrization, width, log2_lr and final_loss (None or
      non-finite = diverged = +inf).

  Returns:
    One row per (parametrization, width), in order of first appearance:
    ``log2_lr`` (the grid argmin; None if every run diverged), ``final_loss``
    there, ``at_edge`` (the argmin is the smallest or largest learning rate
    tried, so the optimum may lie outside the grid), ``log2_lr_interp`` (vertex
    of the parabola through the argmin and its two neighbours in log2 LR, when
    both are finite and the parabola opens upwards; else None) and
    ``num_diverged`` (learning rates with a diverged seed).
  """
  groups: dict[tuple[str, int], list[tuple[float, float]]] = {}
  for r in rows:
    loss = r["final_loss"]
    loss = float("inf") if loss is None or not math.isfinite(loss) else float(loss)
    groups.setdefault((r["parametrization"], r["width"]), []).append((float(r["log2_lr"]), loss))
  out = []
  for (name, width), points in groups.items():
    points.sort()
    xs = [x for x, _ in points]
    ys = [y for _, y in points]
    best = int(np.argmin(ys))
    row = {"parametrization": name, "width": width, "log2_lr": None, "final_loss": None, "at_edge": None,
           "log2_lr_interp": None, "num_diverged": sum(not math.isfinite(y) for y in ys)}
    if math.isfinite(ys[best]):
      row.update(log2_lr=xs[best], final_loss=ys[best], at_edge=best in (0, len(xs) - 1))
      if 0 < best < len(xs) - 1 and all(math.isfinite(v) for v in ys[best - 1:best + 2]):
        row["log2_lr_interp"] = parabola_vertex(xs[best - 1:best + 2], ys[best - 1:best + 2])
    out.append(row)
  return out


def run_width(config: TransferConfig, parametrization: str, width: int, dataset: Any) -> list[dict[str, Any]]:
  """Trains the whole learning-rate × seed grid of one (parametrization, width) and summarizes it.

  Returns:
    ``summarize_grid`` rows with parametrization, width and steps added.
  """
  model_config = config.family.model_config(parametrization, width, vocab_size=dataset.vocab_size,
                                            max_len=dataset.seq_len)
  lrs, seeds = lr_grid(config.log2_lrs, config.seeds)
  losses = train_grid(model_config, config.optimizer, dataset, lrs, seeds, config.steps)["loss"]
  rows = summarize_grid(losses, config.log2_lrs, config.num_seeds, config.last)
  return [{"parametrization": parametrization, "width": width, **r, "steps": config.steps,
           "average_last": config.last} for r in rows]


def run_transfer(config: TransferConfig, dataset: Any, *,
                 on_width: Callable[[str, int, list[dict[str, Any]]], None] | None = None) -> list[dict[str, Any]]:
  """The learning-rate sweep at every parametrization and width.

  Args:
    config: the sweep.
    dataset: a ``scaling.data.Dataset``.
    on_width: called as ``on_width(parametrization, width, rows)`` when a width
      is done (to append results as they come).

  Returns:
    All ``run_width`` rows.
  """
  rows = []
  for name in config.parametrizations:
    for width in config.widths:
      new = run_width(config, name, width, dataset)
      rows += new
      if on_width is not None:
        on_width(name, width, new)
  return rows
