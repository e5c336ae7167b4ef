"""Training: the weighted next-token loss, a pure (vmappable) train step, and a loop that detects divergence.

``train_step`` is a pure function of (state, batch): the optimizer and model are
static, so one compiled step can be ``jax.vmap``-ed over a leading axis of
states and batches, e.g. a grid of learning rates × seeds with the learning
rate living inside the optimizer state (``optax.inject_hyperparams``; see
``set_hyperparam``). ``run_training`` streams batches from a
``scaling.data.Dataset`` and stops at the first non-finite loss or at a loss
above ``divergence_factor`` × the initial loss.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from scaling import model as model_lib

Array = jax.Array
Batch = dict[str, Array]

STOP_COMPLETED = "completed"
STOP_NONFINITE = "non-finite loss"
STOP_LOSS_GROWTH = "loss above divergence_factor x initial loss"
DEFAULT_DIVERGENCE_FACTOR = 3.0


def weighted_cross_entropy(logits: Array, targets: Array, weights: Array) -> tuple[Array, Array]:
  """Weighted mean next-token cross-entropy (nats) and accuracy.

  Args:
    logits: [B, T, V].
    targets: int [B, T], the next token of each input position.
    weights: [B, T], 1 where the prediction is scored.

  Returns:
    (loss, accuracy): sum(w·CE) / sum(w) and sum(w·[argmax = target]) / sum(w)
    (both 0 when all weights are 0).
  """
  logits = logits.astype(jnp.float32)
  weights = weights.astype(jnp.float32)
  ce = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
  correct = (jnp.argmax(logits, axis=-1) == targets).astype(jnp.float32)
  total = jnp.maximum(jnp.sum(weights), 1e-8)
  return jnp.sum(ce * weights) / total, jnp.sum(correct * weights) / total


def loss_fn(params: Any, batch: Batch, *, model: model_lib.Transformer) -> tuple[Array, tuple[Array, dict]]:
  """Loss of ``model`` on a batch, differentiable in params.

  Returns:
    (loss, (accuracy, aux)) with ``aux`` the model's forward-pass metrics.
  """
  logits, aux = model.apply({"params": params}, batch["inputs"])
  loss, accuracy = weighted_cross_entropy(logits, batch["targets"], batch["weights"])
  return loss, (accuracy, aux)


@struct.dataclass
class TrainState:
  """Everything that changes during training; a pytree, so it can be stacked and vmapped.

  Attributes:
    step: int32 scalar, the number of completed updates.
    params: the model's ``params`` collection.
    opt_state: the optimizer state (holds the learning rate when the optimizer
      uses ``optax.inject_hyperparams``).
  """

  step: Array
  params: Any
  opt_state: Any


def init_train_state(rng: Array, config: model_lib.ModelConfig,
                     optimizer: optax.GradientTransformation) -> TrainState:
  """Initial parameters from ``rng`` and the optimizer state for them."""
  params = model_lib.init_params(rng, config)
  return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=optimizer.init(params))


def layer_grad_norms(grads: Any, depth: int) -> Array:
  """Global norm of the gradient of each block_{i}, [depth]."""
  return jnp.stack([optax.tree.norm(grads[f"block_{i}"]) for i in range(depth)])


def _learning_rate(opt_state: Any) -> Array | None:
  """The injected learning rate in an optimizer state, or None when there is none (or several)."""
  try:
    lr = optax.tree_utils.tree_get(opt_state, "learning_rate")
  except (KeyError, ValueError):
    return None
  if lr is None:
    return None
  return jnp.asarray(lr, jnp.float32)


def train_step(state: TrainState, batch: Batch, *, model: model_lib.Transformer,
               optimizer: optax.GradientTransformation) -> tuple[TrainState, dict[str, Array]]:
  """One optimizer update; pure, so it can be jitted and vmapped over (state, batch).

  Args:
    state: the current TrainState.
    batch: {"inputs", "targets", "weights"} each [B, T].
    model: the Transformer (static).
    optimizer: an optax GradientTransformation (static).

  Returns:
    (new state, metrics) where metrics are measured at the parameters *before*
    the update: ``loss``, ``accuracy``, ``grad_norm`` (global),
    ``layer_grad_norm`` [depth], ``embed_grad_norm``, ``readout_grad_norm``,
    ``update_norm``, ``learning_rate`` (when injected), the model's per-layer
    aux metrics [depth] (``attn_entropy``, ``attn_max_logit``, ...) and
    ``embed_rms``, ``readout_rms``.
  """
  grad_fn = jax.value_and_grad(functools.partial(loss_fn, model=model), has_aux=True)
  (loss, (accuracy, aux)), grads = grad_fn(state.params, batch)
  updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
  params = optax.apply_updates(state.params, updates)
  metrics = {
      "loss": loss,
      "accuracy": accuracy,
      "grad_norm": optax.tree.norm(grads),
      "layer_grad_norm": layer_grad_norms(grads, model.config.depth),
      "embed_grad_norm": optax.tree.norm(grads["embed"]),
      "readout_grad_norm": optax.tree.norm(grads["readout"]),
      "update_norm": optax.tree.norm(updates),
      "embed_rms": aux["embed_rms"],
      "readout_rms": aux["readout_rms"],
      **aux["layers"],
  }
  lr = _learning_rate(state.opt_state)
  if lr is not None:
    metrics["learning_rate"] = lr
  return TrainState(step=state.step + 1, params=params, opt_state=opt_state), metrics


@functools.lru_cache(maxsize=16)
def make_train_step(model_config: model_lib.ModelConfig, optimizer: optax.GradientTransformation, *,
                    vmapped: bool = False) -> Callable[[TrainState, Batch], tuple[TrainState, dict[str, Array]]]:
  """``train_step`` for this model and optimizer, jitted (and vmapped over a leading axis when asked).

  Cached: the same (config, optimizer object) returns the same compiled function.
  """
  fn = functools.partial(train_step, model=model_lib.Transformer(model_config), optimizer=optimizer)
  if vmapped:
    fn = jax.vmap(fn)
  return jax.jit(fn)


@functools.lru_cache(maxsize=16)
def make_eval_step(model_config: model_lib.ModelConfig) -> Callable[[Any, Batch], dict[str, Array]]:
  """A jitted (params, batch) -> {"loss", "accuracy"} (cached per config)."""
  model = model_lib.Transformer(model_config)

  def step(params, batch):
    loss, (accuracy, _) = loss_fn(params, batch, model=model)
    return {"loss": loss, "accuracy": accuracy}

  return jax.jit(step)


def evaluate(params: Any, model_config: model_lib.ModelConfig, dataset: Any, num_batches: int = 4,
             seed: int | None = None) -> dict[str, float]:
  """Mean loss and accuracy over ``num_batches`` held-out batches of ``dataset``."""
  if num_batches < 1:
    raise ValueError(f"num_batches must be positive, got {num_batches}")
  step = make_eval_step(model_config)
  rows = [jax.device_get(step(params, dataset.eval_batch(i, seed))) for i in range(num_batches)]
  return {k: float(np.mean([r[k] for r in rows])) for k in ("loss", "accuracy")}


def set_hyperparam(state: TrainState, name: str, value: Any) -> TrainState:
  """Returns ``state`` with an injected optimizer hyperparameter (e.g. "learning_rate") set to ``value``."""
  current = optax.tree_utils.tree_get(state.opt_state, name)
  if current is None:
    raise ValueError(f"the optimizer state has no injected hyperparameter {name!r}; "
                     "build the optimizer with optax.inject_hyperparams")
  value = jnp.asarray(value, jnp.asarray(current).dtype)
  return state.replace(opt_state=optax.tree_utils.tree_set(state.opt_state, **{name: value}))


def stack_trees(trees: list[Any]) -> Any:
  """Stacks identically structured pytrees along a new leading axis (for vmapped steps)."""
  return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


def to_host(metrics: dict[str, Array]) -> dict[str, Any]:
  """Metrics as Python floats (scalars) and lists (per-layer arrays)."""
  out = {}
  for k, v in jax.device_get(metrics).items():
    v = np.asarray(v)
    out[k] = float(v) if v.ndim == 0 else v.astype(np.float64).tolist()
  return out


@dataclasses.dataclass
class TrainResult:
  """Outcome of ``run_training``.

  Attributes:
    state: the final TrainState (after the last update that was applied).
    steps_run: number of train steps executed (including a diverging one).
    stop_reason: STOP_COMPLETED, STOP_NONFINITE or STOP_LOSS_GROWTH.
    divergence_step: the step whose loss diverged, or None.
    initial_loss: loss of step 0.
    final_loss: loss of the last step run.
    history: host metrics (with "step") of every logged step.
    wall_time: seconds for the whole loop, compilation included.
    steps_per_sec: throughput after the first (compiling) step.
  """

  state: TrainState
  steps_run: int
  stop_reason: str
  divergence_step: int | None
  initial_loss: float
  final_loss: float
  history: list[dict[str, Any]]
  wall_time: float
  steps_per_sec: float

  @property
  def diverged(self) -> bool:
    return self.divergence_step is not None


def check_divergence(loss: float, initial_loss: float, factor: float) -> str | None:
  """The stop reason if ``loss`` diverged (non-finite, or above factor × initial), else None."""
  if not math.isfinite(loss):
    return STOP_NONFINITE
  if math.isfinite(initial_loss) and loss > factor * initial_loss:
    return STOP_LOSS_GROWTH
  return None


def run_training(model_config: model_lib.ModelConfig, optimizer: optax.GradientTransformation, dataset: Any, *,
                 steps: int, seed: int = 0, log_every: int = 1,
                 callback: Callable[[int, dict[str, Any]], None] | None = None,
                 divergence_factor: float = DEFAULT_DIVERGENCE_FACTOR,
                 state: TrainState | None = None) -> TrainResult:
  """Trains for ``steps`` steps on ``dataset``, stopping early on divergence.

  Deterministic given ``seed``: the parameters come from ``PRNGKey(seed)`` and
  batch i is ``dataset.batch(i, seed)``.

  Args:
    model_config: the model.
    optimizer: an optax GradientTransformation.
    dataset: a ``scaling.data.Dataset`` (``batch(step, seed)``).
    steps: number of updates.
    seed: initialization and data seed.
    log_every: call ``callback`` and record history every this many steps
      (the first, the last and a diverging step are always logged).
    callback: ``callback(step, metrics)`` with host metrics (floats and lists).
    divergence_factor: stop when the loss exceeds this × the step-0 loss.
    state: optional starting state (default: ``init_train_state``).

  Returns:
    A TrainResult.
  """
  if steps < 1:
    raise ValueError(f"steps must be positive, got {steps}")
  if log_every < 1:
    raise ValueError(f"log_every must be positive, got {log_every}")
  if not (math.isfinite(divergence_factor) and divergence_factor > 0):
    raise ValueError(f"divergence_factor must be a positive number, got {divergence_factor}")
  if dataset.vocab_size > model_config.vocab_size:
    raise ValueError(f"dataset vocab_size {dataset.vocab_size} exceeds the model's {model_config.vocab_size}")
  start = time.perf_counter()
  if state is None:
    state = init_train_state(jax.random.PRNGKey(seed), model_config, optimizer)
  step_fn = make_train_step(model_config, optimizer)
  history: list[dict[str, Any]] = []
  initial_loss = final_loss = float("nan")
  stop_reason, divergence_step = STOP_COMPLETED, None
  first_step_done = None
  steps_run = 0
  for i in range(steps):
    batch = dataset.batch(i, seed)
    state, metrics = step_fn(state, batch)
    loss = float(metrics["loss"])
    steps_run = i + 1
    if i == 0:
      initial_loss = loss
      first_step_done = time.perf_counter()
    final_loss = loss
    reason = check_divergence(loss, initial_loss, divergence_factor)
    if reason is not None:
      stop_reason, divergence_step = reason, i
    if i % log_every == 0 or i == steps - 1 or reason is not None:
      row = {"step": i, **to_host(metrics)}
      history.append(row)
      if callback is not None:
        callback(i, row)
    if reason is not None:
      break
  end = time.perf_counter()
  timed = steps_run - 1
  steps_per_sec = timed / (end - first_step_done) if timed > 0 and end > first_step_done else float("nan")
  return TrainResult(state=state, steps_run=steps_run, stop_reason=stop_reason, divergence_step=divergence_step,
                     initial_loss=initial_loss, final_loss=final_loss, history=history, wall_time=end - start,
                     steps_per_sec=steps_per_sec)
