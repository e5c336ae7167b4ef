"""Training: the weighted next-token loss, one pure train step, and one loop for a run or a vmapped grid.

``train_step`` is a pure function of (state, batch); the model and optimizer
are static. ``run_training`` runs it either for a single run or, with a leading grid
axis, for a grid of learning rates × seeds: the learning rate lives in the
optimizer state (``optax.inject_hyperparams``), so every member shares one
compiled step (``jax.vmap``; on one CPU device a small model's members are
vmapped a few at a time, ``default_grid_chunk``). Member i is initialized with ``PRNGKey(seed_i)``
and trained on ``dataset.batch(t, seed_i)`` at step t, exactly as a single run
of that seed would be. The grid's members are split over all devices
(padded to a multiple of the device count; padded members are dropped from
every result); a single run splits its batch over the devices with the
parameters replicated, or sharded FSDP-style with ``shard_params``. The loop stops on divergence (a non-finite loss, or one
above ``divergence_factor`` × the initial loss) once every member has
diverged, and keeps the last state whose loss was finite so that a diverged
run is evaluated there rather than on NaN parameters. Every step reports the
learning rate actually applied (peak × schedule factor). Steps that are not
logged compute only the loss and the recorded metrics, and unless the last
finite state is kept, each step writes the new state over the old one's buffers
(``donate_argnums``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from scaling.training import model as model_lib
from scaling.mup import optim as optim_lib
from scaling.attention import rules as rules_lib
from scaling.training import sharding as sharding_lib
from scaling.runs import timesplit
from scaling.mup import unit_scaling
from scaling.base import validation
from scaling.base.validation import ConfigError
from scaling.base.validation import ConfigTypeError

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


def log_partition(logits: Array) -> Array:
  """log Z = logsumexp of the logits over the vocabulary, [B, T] in float32 (the softmax's normalizer)."""
  return jax.nn.logsumexp(logits.astype(jnp.float32), axis=-1)


def z_loss(logits: Array, weights: Array, coefficient: float) -> Array:
  """The auxiliary z-loss c · mean((log Z)²) over the scored tokens.

  PaLM (Chowdhery et al. 2022, §5) and Wortsman et al. 2023 ("Small-scale
  proxies for large-scale Transformer training instabilities", §3.2): it pulls
  log Z of the readout towards 0, so the output logits cannot drift upwards
  together. Its gradient with respect to the logits of token i is
  2c · w_i · log Z_i · softmax(logits_i) / Σw.

  Args:
    logits: [B, T, V].
    weights: [B, T], 1 where a prediction is scored (the cross-entropy's weights).
    coefficient: c ≥ 0.

  Returns:
    The scalar c · Σ w · (log Z)² / Σ w (0 when all weights are 0).
  """
  validation.check_rank("logits", logits, (3,), "[B, T, V]")
  validation.check_floating("logits", logits)
  if jnp.shape(weights) != jnp.shape(logits)[:2]:
    raise ConfigError(f"weights must be [B, T] = {jnp.shape(logits)[:2]} like the logits, got {jnp.shape(weights)}")
  validation.check_number("coefficient", coefficient, nonnegative=True)
  weights = weights.astype(jnp.float32)
  total = jnp.maximum(jnp.sum(weights), 1e-8)
  return coefficient * jnp.sum(weights * jnp.square(log_partition(logits))) / total


def log_z_stats(logits: Array, weights: Array) -> dict[str, Array]:
  """{"log_z_mean", "log_z_max"}: mean and max of log Z over the scored tokens (weights > 0)."""
  lz = log_partition(logits)
  weights = weights.astype(jnp.float32)
  scored = weights > 0
  return {"log_z_mean": jnp.sum(weights * lz) / jnp.maximum(jnp.sum(weights), 1e-8),
          "log_z_max": jnp.max(jnp.where(scored, lz, -jnp.inf))}


def loss_fn(params: Any, batch: Batch, *, model: model_lib.Transformer,
            z_loss_coefficient: float = 0.0) -> tuple[Array, tuple[Array, dict]]:
  """Loss of ``model`` on a batch, differentiable in params.

  Args:
    params: the model's parameters.
    batch: {"inputs", "targets", "weights"} each [B, T].
    model: the Transformer.
    z_loss_coefficient: c of the z-loss added to the cross-entropy (``z_loss``); 0 adds nothing.

  Returns:
    (objective, (accuracy, aux)): the objective is the cross-entropy plus the
    z-loss; ``aux`` holds the model's forward-pass metrics, ``cross_entropy``,
    ``z_loss`` (0 when off) and ``log_z_mean``, ``log_z_max`` (``log_z_stats``).
  """
  logits, aux = model_lib.apply_with_aux(model, params, batch["inputs"])
  loss, accuracy = weighted_cross_entropy(logits, batch["targets"], batch["weights"])
  if model.config.parametrization.unit_scaled:  # the same value, with u-μP's unit-scaled backward pass
    loss = unit_scaling.cross_entropy(logits, batch["targets"], batch["weights"])
  aux = {**aux, "cross_entropy": loss, "z_loss": jnp.zeros((), jnp.float32),
         **log_z_stats(jax.lax.stop_gradient(logits), batch["weights"])}
  if z_loss_coefficient:
    aux["z_loss"] = z_loss(logits, batch["weights"], z_loss_coefficient)
    loss = loss + aux["z_loss"]
  return loss, (accuracy, aux)


@struct.dataclass
class TrainState:
  """Everything that changes during training; a pytree, so it can be stacked and vmapped.

  Attributes:
    step: int32 scalar, the number of completed updates.
    params: the model's ``params`` collection.
    opt_state: the optimizer state (holds the learning rate when the optimizer
      uses ``optax.inject_hyperparams``).
    attn_mult: None, or the α of the attention logit scale α/d_head (a value, so a grid can vmap over it;
      the model's ``attn_mult``); never trained.
    learning_rate: a ``FunctionalProgram``'s learning rate (its optimizer factory takes it; None for the
      built-in model, whose rate lives in ``opt_state``).
    model_state: a ``FunctionalProgram``'s non-trained model state (linen collections, nnx state), held fixed.
    initial_params: the parameters at initialization, kept when a ``FunctionalProgram`` records how far every
      module's output moved (the coordinate check); else None.
  """

  step: Array
  params: Any
  opt_state: Any
  attn_mult: Any = None
  learning_rate: Any = None
  model_state: Any = None
  initial_params: Any = None


@functools.lru_cache(maxsize=64)
def make_optimizer(model_config: model_lib.ModelConfig,
                   opt_config: optim_lib.OptimizerConfig) -> optax.GradientTransformation:
  """The optimizer of a model: ``opt_config.build`` with the model's parametrization (``model.parametrized``)."""
  return opt_config.build(model_lib.parametrized(model_config))


def init_train_state(seed: Any, model_config: model_lib.ModelConfig, opt_config: optim_lib.OptimizerConfig,
                     learning_rate: Any = None) -> TrainState:
  """Parameters from ``PRNGKey(seed)`` and the optimizer state, with ``learning_rate`` (default: the config's); a rule
  that is only a logit factor puts its α in ``attn_mult`` (``model.logit_multiplier``: one program for such rules)."""
  program = as_program(model_config, opt_config)
  lr = opt_config.learning_rate if learning_rate is None else learning_rate
  return program.with_constants(program.init_state(seed, lr))


@dataclasses.dataclass(frozen=True)
class TransformerProgram:
  """What ``run_training`` trains for a ``ModelConfig``: the built-in Transformer and its optimizer.

  A program gives ``init_state(seed, learning_rate)``, ``step(state, batch, metrics)`` and the ``width`` (the grid's
  chunking rule); ``FunctionalProgram`` is the same for any other model.
  """

  model_config: model_lib.ModelConfig
  opt_config: optim_lib.OptimizerConfig
  logit_alpha: float | None = dataclasses.field(default=None, compare=False)
  """The α of a model whose rule ``as_program`` replaced by the shared one (its state carries α in ``attn_mult``):
  not part of the program's identity, so the models of every such rule share one compiled step."""

  @property
  def width(self) -> int:
    return self.model_config.width

  def init_state(self, seed: Any, learning_rate: Any) -> TrainState:
    """The state without the values ``with_constants`` adds (so the init program is the same for every rule)."""
    return self.state_from_params(_transformer_params(self.model_config, seed), learning_rate)

  def state_from_params(self, params: Any, learning_rate: Any) -> TrainState:
    """The state of freshly initialized ``params`` (``init_state`` after the parameters are drawn)."""
    opt_state = make_optimizer(self.model_config, self.opt_config).init(params)
    return TrainState(step=jnp.zeros((), jnp.int32), params=params,
                      opt_state=optim_lib.set_learning_rate(opt_state, learning_rate))

  def with_constants(self, state: TrainState) -> TrainState:
    """The state with the model's α in ``attn_mult`` (one per member; ``logit_alpha``, else
    ``model.logit_multiplier``), added outside the compiled init; as it is for a model without one."""
    alpha = model_lib.logit_multiplier(self.model_config) if self.logit_alpha is None else self.logit_alpha
    if alpha is None:
      return state
    return state.replace(attn_mult=jnp.zeros_like(state.step, jnp.float32) + jnp.float32(alpha))

  def step(self, state: TrainState, batch: Batch,
           metrics: Sequence[str] | None = None) -> tuple[TrainState, dict[str, Array]]:
    if self.logit_alpha is not None and state.attn_mult is None:
      raise ConfigError("the state has no attn_mult, but this model's logit scale is carried there (a rule that is "
                        "only a logit factor); make the state with make_init or init_train_state")
    return train_step(state, batch, model=model_lib.Transformer(self.model_config),
                      optimizer=make_optimizer(self.model_config, self.opt_config), opt_config=self.opt_config,
                      metrics=metrics)


def _transformer_params(model_config: model_lib.ModelConfig, seed: Any) -> Any:
  """The parameters of ``model_config`` from ``PRNGKey(seed)``, stacked where the model trains them stacked."""
  params = model_lib.init_params(jax.random.PRNGKey(seed), model_config)
  if model_lib.trains_stacked(model_config):
    params = model_lib.stack_blocks(params, model_config.depth)
  return params


class FunctionalProgram:
  """What ``run_training`` trains for any model: a ``scaling.mup.user_model.FunctionalModel`` and an optimizer factory.

  Member i starts from ``fm.init(PRNGKey(seed_i))`` and trains with ``optimizer(width, param_shapes,
  learning_rate_i)`` (the rate kept in the state, traced: one program serves every rate). Its metrics at step t
  (measured at the parameters after t updates, on batch t): ``loss``, ``grad_norm``, ``update_norm``,
  ``learning_rate``, and with ``record_outputs`` (the coordinate check) ``rms/<module>`` and ``delta_rms/<module>``,
  the RMS of every module's output and of its change since initialization (the same batch through the initial
  parameters).
  """

  def __init__(self, model: Any, optimizer: Callable[[int, Any, Any], optax.GradientTransformation], *,
               record_outputs: bool = False):
    if not all(hasattr(model, a) for a in ("init", "loss", "captured", "width")):
      raise ConfigTypeError(f"model must be a scaling.mup.user_model.FunctionalModel, got {type(model).__name__}")
    if not callable(optimizer):
      raise ConfigTypeError(f"optimizer must be a function optimizer(width, params, learning_rate), got {optimizer!r}")
    self.model = model
    self.optimizer = optimizer
    self.record_outputs = bool(record_outputs)
    self.shapes = jax.eval_shape(lambda: model.init(jax.random.key(0))[0])

  @property
  def width(self) -> int:
    return self.model.width

  def _tx(self, learning_rate: Any) -> optax.GradientTransformation:
    tx = self.optimizer(self.model.width, self.shapes, learning_rate)
    if not isinstance(tx, optax.GradientTransformation):
      raise ConfigTypeError(f"optimizer(width, params, learning_rate) must return an optax.GradientTransformation, "
                            f"got {type(tx).__name__}")
    return tx

  def with_constants(self, state: TrainState) -> TrainState:
    return state

  def init_state(self, seed: Any, learning_rate: Any) -> TrainState:
    params, model_state = self.model.init(jax.random.PRNGKey(seed))
    learning_rate = jnp.asarray(learning_rate, jnp.float32)
    return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=self._tx(learning_rate).init(params),
                      learning_rate=learning_rate, model_state=model_state,
                      initial_params=params if self.record_outputs else None)

  def step(self, state: TrainState, batch: Any,
           metrics: Sequence[str] | None = None) -> tuple[TrainState, dict[str, Array]]:
    fm = self.model
    values = {}
    if self.record_outputs:
      (loss, outs), grads = jax.value_and_grad(fm.captured, has_aux=True)(state.params, state.model_state, batch)
      _, outs0 = fm.captured(state.initial_params, state.model_state, batch)
      values.update({f"rms/{k}": _rms(v) for k, v in outs.items()})
      values.update({f"delta_rms/{k}": _rms(v - outs0[k]) for k, v in outs.items()})
    else:
      loss, grads = jax.value_and_grad(fm.loss)(state.params, state.model_state, batch)
    updates, opt_state = self._tx(state.learning_rate).update(grads, state.opt_state, state.params)
    values.update(loss=jnp.asarray(loss, jnp.float32), grad_norm=optax.tree.norm(grads),
                  update_norm=optax.tree.norm(updates), learning_rate=state.learning_rate)
    values = _select(values, metrics)
    return state.replace(step=state.step + 1, params=optax.apply_updates(state.params, updates),
                         opt_state=opt_state), values


def _rms(x: Array) -> Array:
  x = jnp.asarray(x, jnp.float32)
  return jnp.sqrt(jnp.mean(jnp.square(x)))


def _select(values: dict[str, Array], metrics: Sequence[str] | None) -> dict[str, Array]:
  """The named metrics of ``values`` (all when None; ConfigError naming an unknown one)."""
  if metrics is None:
    return values
  unknown = [name for name in metrics if name not in values]
  if unknown:
    raise ConfigError(f"metrics: {validation.unknown_choice('metric', unknown[0], tuple(values))}")
  return {name: values[name] for name in metrics}


Program = TransformerProgram | FunctionalProgram


SHARED_RULE = rules_lib.FixedScale()
"""The rule of every program whose model's rule is only a logit factor (``model.logit_multiplier``): its α/d_head
comes from the state, so these models compile one step program between them."""


def as_program(model: Any, opt_config: optim_lib.OptimizerConfig | None = None) -> Program:
  """``model`` if it is a program, else the ``TransformerProgram`` of a ``ModelConfig`` and ``opt_config``.

  A model whose rule is only a logit factor (none, sqrt, linear, temperature, ...; ``model.logit_multiplier``) gets
  ``SHARED_RULE`` in the program and its α in ``logit_alpha`` (the state's ``attn_mult``): the same function, one
  compiled program for all such rules."""
  if isinstance(model, (TransformerProgram, FunctionalProgram)):
    return model
  if isinstance(model, model_lib.ModelConfig):
    if not isinstance(opt_config, optim_lib.OptimizerConfig):
      raise ConfigTypeError(f"opt_config must be a OptimizerConfig, got {type(opt_config).__name__}")
    alpha = model_lib.logit_multiplier(model)
    if alpha is None:
      return TransformerProgram(model, opt_config)
    return TransformerProgram(dataclasses.replace(model, rule=SHARED_RULE), opt_config, logit_alpha=alpha)
  raise ConfigTypeError(f"model_config must be a scaling.training.model.ModelConfig or a training program (TransformerProgram, "
                        f"FunctionalProgram), got {type(model).__name__}")


def layer_grad_norms(grads: Any, depth: int) -> Array:
  """Global norm of the gradient of each block_{i}, [depth] (of each row of the stacked blocks' gradient)."""
  if model_lib.is_stacked(grads, depth):
    squares = [jnp.sum(jnp.square(g).reshape(depth, -1), axis=1) for g in jax.tree.leaves(grads["block_0"])]
    return jnp.sqrt(sum(squares))
  return jnp.stack([optax.tree.norm(grads[f"block_{i}"]) for i in range(depth)])


def train_step(state: TrainState, batch: Batch, *, model: model_lib.Transformer,
               optimizer: optax.GradientTransformation, opt_config: optim_lib.OptimizerConfig,
               metrics: Sequence[str] | None = None) -> tuple[TrainState, dict[str, Array]]:
  """One optimizer update; pure, so it can be jitted and vmapped over (state, batch).

  Args:
    state: the current TrainState.
    batch: {"inputs", "targets", "weights"} each [B, T].
    model: the Transformer (static).
    optimizer: its optax GradientTransformation (static; ``make_optimizer``).
    opt_config: the optimizer's config (static), for the applied learning rate.
    metrics: names of the metrics to return (static); None: all. A jitted step
      computes only what it returns, so a step that does not log skips the rest.

  Returns:
    (new state, metrics) where metrics are measured at the parameters *before*
    the update: ``loss``, ``accuracy``, ``grad_norm`` (global),
    ``layer_grad_norm`` [depth], ``embed_grad_norm``, ``readout_grad_norm``,
    ``update_norm``, ``learning_rate`` (the rate applied in this update: the
    peak in the optimizer state times the schedule factor), the model's
    per-layer metrics [depth] (``attn_entropy``, ``attn_max_logit``, ...),
    ``embed_rms``, ``readout_rms``, ``log_z_mean``, ``log_z_max`` (log Z of
    the readout over the scored tokens) and ``z_loss``. ``loss`` is the
    cross-entropy; the gradient is that of loss + z_loss (``opt_config.z_loss``).
  """
  if not isinstance(state, TrainState):
    raise ConfigTypeError(f"state must be a TrainState, got {type(state).__name__}")
  if state.attn_mult is not None:
    model = model.clone(attn_mult=state.attn_mult)
  grad_fn = jax.value_and_grad(functools.partial(loss_fn, model=model, z_loss_coefficient=opt_config.z_loss),
                               has_aux=True)
  (_, (accuracy, aux)), grads = grad_fn(state.params, batch)
  updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
  params = optax.apply_updates(state.params, updates)
  peak = jnp.asarray(optax.tree_utils.tree_get(state.opt_state, "learning_rate"), jnp.float32)
  values = {
      "loss": aux["cross_entropy"],
      "accuracy": accuracy,
      "grad_norm": optax.tree.norm(grads),
      "layer_grad_norm": layer_grad_norms(grads, model.config.depth),
      "embed_grad_norm": optax.tree.norm(grads["embed"]),
      "readout_grad_norm": optax.tree.norm(grads["readout"]),
      "update_norm": optax.tree.norm(updates),
      "learning_rate": jnp.asarray(opt_config.applied_learning_rate(peak, state.step), jnp.float32),
      "embed_rms": aux["embed_rms"],
      "readout_rms": aux["readout_rms"],
      "log_z_mean": aux["log_z_mean"],
      "log_z_max": aux["log_z_max"],
      "z_loss": aux["z_loss"],
      **aux["layers"],
  }
  return state.replace(step=state.step + 1, params=params, opt_state=opt_state), _select(values, metrics)


# A grid's members vmapped all at once or a few at a time (``jax.lax.map`` over chunks of ``grid_chunk`` members,
# each chunk vmapped; one compiled body either way). Per-step time of a 16-member grid (8 learning rates x 2 seeds,
# depth 2, 2 heads, batch 8 x 32 tokens unless given; 2-core CPU, one device; best of 5 interleaved rounds of 30
# steps), ``run_training(grid_chunk=c)`` over all at once's, and a loop of the 16 separate runs (each its own
# compiled step, as the train benchmark times it):
#
#   width (batch)   chunk 1  chunk 2  chunk 4  chunk 8  all 16 (ms)   loop of runs
#   32                 1.09     0.99     1.00     0.90     1.00 (37)        1.01
#   64                 0.80     0.73     0.82     0.83     1.00 (86)        0.87
#   64 (batch 32)      0.78     0.63     0.69     0.81     1.00 (238)       0.68
#   128                1.17     0.92     0.98     1.03     1.00 (175)       0.93
#
# Wider, all at once was the fastest: chunks of 2 took 1.12-1.15x its time at width 256 (411-428 ms), and with the
# chunks unrolled in one program every chunk size from 1 to 8 took 1.07-1.11x at width 192. So on one CPU device a
# grid of more than GRID_CHUNK members of a model up to GRID_CHUNK_MAX_WIDTH wide runs GRID_CHUNK members at a time;
# otherwise (several devices, which split the members between them, or an accelerator) all at once. Chunks change
# only the order of float rounding: a member's losses agree with all at once's to about 1e-6 relative.
GRID_CHUNK = 2
"""Members vmapped together per chunk of a small model's grid step on one CPU device (``default_grid_chunk``)."""
GRID_CHUNK_MAX_WIDTH = 128
"""The widest model whose grid runs in chunks of ``GRID_CHUNK`` by default."""


def default_grid_chunk(model_config: Any, members: int, *, backend: str | None = None,
                       devices: int = 1) -> int | None:
  """How many of a grid's ``members`` its step vmaps together by default (the measured rule above).

  Args:
    model_config: the model (a ``ModelConfig`` or a training program: anything with its ``width``).
    members: the grid's members (after padding to the device count).
    backend: "cpu", "gpu" or "tpu"; None = ``jax.default_backend()``.
    devices: the devices the members are split over.

  Returns:
    ``GRID_CHUNK`` on one CPU device for a model up to ``GRID_CHUNK_MAX_WIDTH`` wide with more members than that,
    else None (all at once); the ``chunk`` of ``make_train_step``.
  """
  backend = jax.default_backend() if backend is None else backend
  if backend == "cpu" and devices == 1 and model_config.width <= GRID_CHUNK_MAX_WIDTH and members > GRID_CHUNK:
    return GRID_CHUNK
  return None


def _chunked(step: Callable[[TrainState, Batch], Any], chunk: int | None) -> Callable[[TrainState, Batch], Any]:
  """``step`` over a leading member axis: vmapped all at once, or ``chunk`` members at a time (``lax.map``)."""
  def grid_step(state, batch):
    members = jax.tree.leaves(state)[0].shape[0]
    if chunk is None or chunk >= members:
      return jax.vmap(step)(state, batch)
    return jax.lax.map(lambda member: step(*member), (state, batch), batch_size=chunk)
  return grid_step


def make_train_step(model_config: Any, opt_config: optim_lib.OptimizerConfig | None = None, *,
                    grid: bool = False, metrics: tuple[str, ...] | None = None, donate: bool = False,
                    chunk: int | None = None) -> Callable[[TrainState, Batch], tuple[TrainState, dict[str, Array]]]:
  """The training step of a program (``train_step`` for the built-in model), jitted, vmapped over a leading grid
  axis when ``grid``.

  A grid's outputs keep the grid axis split over all devices (``scaling.training.sharding``).

  Args:
    model_config: the model (a ``ModelConfig``, with ``opt_config``) or a training program (``FunctionalProgram``).
    opt_config: the optimizer of a ``ModelConfig``.
    grid: vmap over a leading axis of (state, batch).
    metrics: the metrics the step returns (None: all; see ``train_step``).
    donate: the step takes over the buffers of the state it is given (``donate_argnums``): the new
      parameters and optimizer state are written in place, and the old state must not be used again.
    chunk: a grid's members vmapped together: None (or at least the members) all at once, else this many at a
      time (``jax.lax.map`` with ``batch_size``; see ``default_grid_chunk``).

  Returns:
    The jitted ``(state, batch) -> (new state, metrics)``; the same configs return the same function (cached,
    however the arguments are passed).
  """
  return _jitted_train_step(as_program(model_config, opt_config), grid, metrics, donate, chunk)


def clear_caches() -> None:
  """Forgets the cached jitted steps and inits and the optimizers (``make_train_step``, ``make_init``): the next
  call builds and compiles them anew."""
  for cached in (_jitted_train_step, _make_init, _single_init, _params_init, _sharded_init_of, _sharded_step,
                 make_optimizer):
    cached.cache_clear()


@functools.lru_cache(maxsize=64)
def _jitted_train_step(program: Program, grid: bool, metrics: tuple[str, ...] | None, donate: bool,
                       chunk: int | None) -> Callable[[TrainState, Batch], tuple[TrainState, dict[str, Array]]]:
  """``make_train_step``'s function, cached by its arguments in one order."""
  fn = functools.partial(program.step, metrics=metrics)
  donated = (0,) if donate else ()
  if grid:
    return jax.jit(_chunked(fn, chunk), out_shardings=sharding_lib.leading(), donate_argnums=donated)
  return jax.jit(fn, donate_argnums=donated)


def make_init(model_config: Any, opt_config: optim_lib.OptimizerConfig | None = None, *,
              grid: bool = False) -> Callable[[Any, Any], TrainState]:
  """Jitted (seed, learning_rate) -> TrainState (vmapped over [M] seeds and rates when ``grid``) of a ``ModelConfig``
  with ``opt_config``, or of a training program."""
  program = as_program(model_config, opt_config)
  return _make_init(program, grid, getattr(program, "logit_alpha", None))


@functools.lru_cache(maxsize=64)
def _single_init(program: Program) -> Callable[[Any, Any], TrainState]:
  """The init of one member (shared by every α of a program). The built-in Transformer's parameters come from one
  jitted program per model (``_params_init``: the same for every optimizer, so grids that differ only in their
  optimizer share it) and its optimizer state from the optimizer's init run op by op (zeros and counters: nothing
  worth a program of its own); any other program's init is one jitted program. ``lower(seed, learning_rate)``
  lowers the one program either way."""
  if isinstance(program, TransformerProgram):
    params = _params_init(program.model_config)
    init = lambda seed, learning_rate: program.state_from_params(params(seed), learning_rate)
    init.lower = lambda seed, learning_rate: params.lower(seed)  # its one program, lowered (as jax.jit's ``lower``)
    return init
  return jax.jit(program.init_state)


@functools.lru_cache(maxsize=64)
def _params_init(model_config: model_lib.ModelConfig) -> Callable[[Any], Any]:
  """The jitted seed -> parameters of a model (``_transformer_params``)."""
  return jax.jit(functools.partial(_transformer_params, model_config))


@functools.lru_cache(maxsize=64)
def _make_init(program: Program, grid: bool, alpha: float | None) -> Callable[[Any, Any], TrainState]:
  """One compiled init of a single member; on one device a grid's members are initialized one by one and stacked.

  So one init program serves every grid size, and (with the values of ``with_constants`` added outside it) every
  model of the same parameters: the persistent compilation cache then serves all of them. The members' states are
  those of the same init vmapped (the same draws).
  """
  del alpha  # part of the cache key only: ``program.with_constants`` adds it
  single = _single_init(program)
  if not grid:
    return lambda seed, learning_rate: program.with_constants(single(seed, learning_rate))
  if jax.device_count() > 1:  # members split over devices (and hosts): one vmapped program lays them out
    vmapped = jax.jit(jax.vmap(program.init_state), out_shardings=sharding_lib.leading())
    return lambda seeds, learning_rates: program.with_constants(vmapped(seeds, learning_rates))

  def init(seeds: Any, learning_rates: Any) -> TrainState:
    if not any(isinstance(x, jax.core.Tracer) for x in (seeds, learning_rates)):  # host scalars: one program
      seeds, learning_rates = np.asarray(seeds, np.int32), np.asarray(learning_rates, np.float32)
    states = [single(seed, lr) for seed, lr in zip(seeds, learning_rates)]
    if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(states)):  # traced (eval_shape, jit)
      stacked = jax.tree.map(lambda *leaves: jnp.stack(leaves), *states)
    else:  # stacked on the host: no compiled stack per grid size
      stacked = jax.tree.map(lambda *leaves: np.stack(leaves), *jax.device_get(states))
    return program.with_constants(jax.device_put(stacked, sharding_lib.leading()))

  return init


def _stacked_on_host(values: list[Array]) -> np.ndarray:
  """Recorded values of the steps as one host array [steps, ...] (stacked on the host unless they span processes)."""
  if all(not isinstance(v, jax.Array) or v.is_fully_addressable for v in values):
    return np.stack(jax.device_get(values))  # no compiled stack per record length
  return sharding_lib.to_host(jnp.stack(values))


def compile_grid(model_config: Any, opt_config: optim_lib.OptimizerConfig, dataset: Any, members: int) -> int:
  """Compiles, without running them, the init and the training step that ``run_training(model_config, opt_config,
  dataset, seed=<members seeds>)`` calls on one device (its defaults: every step logged, the state donated), so
  that its first step finds them compiled; e.g. in a thread while another grid trains (``GridPlanner``).

  Returns:
    The programs compiled (0 on several devices, whose layouts are made where they run).
  """
  program = as_program(model_config, opt_config)
  mesh = sharding_lib.make_mesh()
  if mesh.size > 1:
    return 0
  lead = sharding_lib.leading(mesh)
  placed = lambda tree: jax.tree.map(
      lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=lead, weak_type=a.weak_type), tree)
  _single_init(program).lower(jax.ShapeDtypeStruct((), jnp.int32), jax.ShapeDtypeStruct((), jnp.float32)).compile()
  state = placed(jax.eval_shape(make_init(program, grid=True), jax.ShapeDtypeStruct((members,), jnp.int32),
                                jax.ShapeDtypeStruct((members,), jnp.float32)))
  batch = placed(jax.tree.map(lambda a: jax.ShapeDtypeStruct((members, *a.shape), a.dtype),
                              jax.eval_shape(dataset.batch, 0, 0)))
  step = make_train_step(program, grid=True, donate=True, chunk=default_grid_chunk(program, members, devices=1))
  step.lower(state, batch).compile()
  return 2


def grid_batches(dataset: Any, step: Any, seeds: Array) -> Batch:
  """Batch ``step`` of each seed: {inputs, targets, weights} [M, B, T], split over the devices like ``seeds``."""
  return _grid_batches(sharding_lib.make_mesh())(dataset, step, seeds)


@functools.lru_cache(maxsize=4)
def _grid_batches(mesh: jax.sharding.Mesh) -> Callable[[Any, Any, Array], Batch]:
  """The jitted ``grid_batches`` for ``mesh`` (compiled once per dataset config)."""
  return jax.jit(lambda dataset, step, seeds: jax.vmap(lambda s: dataset.batch(step, s))(seeds),
                 out_shardings=sharding_lib.leading(mesh))


@jax.jit
def _keep(ok: Array, new: Any, old: Any) -> Any:
  """Per member: ``new`` where ``ok`` (shape [] or [M]), else ``old``."""
  def pick(a, b):
    return jnp.where(jnp.reshape(ok, ok.shape + (1,) * (a.ndim - ok.ndim)), a, b)
  return jax.tree.map(pick, new, old)


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
    raise ConfigError(f"num_batches must be positive, got {num_batches}")
  step = make_eval_step(model_config)
  rows = [jax.device_get(step(params, dataset.eval_batch(i, seed))) for i in range(num_batches)]
  return {k: float(np.mean([r[k] for r in rows])) for k in ("loss", "accuracy")}


def to_host(metrics: dict[str, Array], members: int | None = None) -> dict[str, Any]:
  """Metrics as Python floats (scalars) and lists (arrays); a grid's leading axis cut to ``members``."""
  out = {}
  for k, v in sharding_lib.to_host(metrics).items():
    v = np.asarray(v)
    if members is not None:
      v = v[:members]
    out[k] = float(v) if v.ndim == 0 else v.astype(np.float64).tolist()
  return out


def _sharded_init(program: Program, mesh: jax.sharding.Mesh,
                  shard_params: bool) -> tuple[Callable[[Any, Any], TrainState], Any]:
  return _sharded_init_of(program, mesh, shard_params, getattr(program, "logit_alpha", None))


@functools.lru_cache(maxsize=16)
def _sharded_init_of(program: Program, mesh: jax.sharding.Mesh, shard_params: bool,
                     alpha: float | None) -> tuple[Callable[[Any, Any], TrainState], Any]:
  """(init, state sharding) of a single run laid out on ``mesh``: the state replicated, or with ``shard_params``
  every array split along its largest axis that divides the device count (FSDP: moments follow their parameters);
  ``alpha`` keys the cache (``program.with_constants`` adds it inside the program)."""
  del alpha
  init_state = lambda seed, learning_rate: program.with_constants(program.init_state(seed, learning_rate))
  state_shapes = jax.eval_shape(init_state, 0, jnp.float32(1.0))
  if shard_params:
    state_sharding = sharding_lib.fsdp_shardings(state_shapes, mesh)
  else:
    state_sharding = jax.tree.map(lambda _: sharding_lib.replicated(mesh), state_shapes)
  return jax.jit(init_state, out_shardings=state_sharding), state_sharding


def make_sharded_run(program: Program, batch: Any, mesh: jax.sharding.Mesh,
                     shard_params: bool) -> tuple[Callable, Callable, Callable]:
  """(init, batch_of, step) of a single run laid out on ``mesh`` (each part cached).

  The batch's leading axes are split over the mesh (replicated where they do not divide the device count); the
  state as ``_sharded_init`` lays it out.

  Args:
    program: the training program.
    batch: the shapes of one batch (a tree of ``jax.ShapeDtypeStruct``, e.g. ``jax.eval_shape`` of
      ``dataset.batch``).
    mesh: the devices.
    shard_params: FSDP instead of replicated parameters.

  Returns:
    ``init(seed, learning_rate)`` -> TrainState, ``batch_of(dataset, step, seed)`` -> Batch and the jitted train
    step, each producing arrays with these layouts.
  """
  init, state_sharding = _sharded_init(program, mesh, shard_params)
  leaves, treedef = jax.tree.flatten(batch)
  batch_of, step = _sharded_step(program, mesh, shard_params, treedef, tuple(tuple(x.shape) for x in leaves))
  return init, batch_of, step


@functools.lru_cache(maxsize=16)
def _sharded_step(program: Program, mesh: jax.sharding.Mesh, shard_params: bool, treedef: Any,
                  shapes: tuple[tuple[int, ...], ...]) -> tuple[Callable, Callable]:
  """(batch_of, step) of ``make_sharded_run`` for one batch layout."""
  _, state_sharding = _sharded_init(program, mesh, shard_params)
  batch_sharding = jax.tree.unflatten(
      treedef, [jax.sharding.NamedSharding(mesh, sharding_lib.batch_spec(shape, mesh.size)) for shape in shapes])
  batch_of = jax.jit(lambda ds, t, seed: ds.batch(t, seed), out_shardings=batch_sharding)
  step = jax.jit(program.step, in_shardings=(state_sharding, batch_sharding),
                 out_shardings=(state_sharding, sharding_lib.replicated(mesh)))
  return batch_of, step


def make_run_init(model_config: Any, opt_config: optim_lib.OptimizerConfig | None = None,
                  batch_shape: tuple[int, int] | None = None,
                  shard_params: bool = False) -> Callable[[Any, Any], TrainState]:
  """(seed, learning_rate) -> TrainState of a single run, laid out on the devices as ``run_training`` lays it out
  (so a checkpoint restored into its shape continues on the same layout, on one process or several)."""
  del batch_shape  # the state's layout does not depend on the batch
  program = as_program(model_config, opt_config)
  mesh = sharding_lib.make_mesh()
  if mesh.size > 1 or shard_params:
    return _sharded_init(program, mesh, shard_params)[0]
  return make_init(program)


def check_divergence(loss: float, initial_loss: float, factor: float) -> str | None:
  """The stop reason if ``loss`` diverged (non-finite, or above factor × initial), else None."""
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

  state: TrainState
  last_finite_state: TrainState | None
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


def check_run_args(model_config: Any, opt_config: Any, dataset: Any, **args: Any) -> None:
  """ConfigError or ConfigTypeError naming the first argument of ``run_training`` that cannot be used."""
  if not isinstance(opt_config, optim_lib.OptimizerConfig):
    raise ConfigTypeError(f"opt_config must be a OptimizerConfig, got {type(opt_config).__name__}")
  as_program(model_config, opt_config)
  needs = ("batch", "vocab_size") if isinstance(model_config, model_lib.ModelConfig) else ("batch",)
  if not all(hasattr(dataset, a) for a in needs):
    raise ConfigTypeError(f"dataset must be a scaling.training.data.Dataset (scaling.training.data.make_dataset) or a batch source with "
                          f"batch(step, seed) (scaling.mup.user_model.Batches), got {type(dataset).__name__}")
  for name in ("callback", "after_step"):
    if args[name] is not None and not callable(args[name]):
      raise ConfigTypeError(f"{name} must be callable or None, got {args[name]!r}")
  chunk = args["grid_chunk"]
  if chunk is not None and (isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer))):
    raise ConfigTypeError(f"grid_chunk must be a positive int or None, got {chunk!r}")
  if chunk is not None and chunk < 1:
    raise ConfigError(f"grid_chunk must be a positive int or None, got {chunk}")
  if args["learning_rates"] is not None:
    lrs = np.asarray(args["learning_rates"], np.float64)
    if not np.all(np.isfinite(lrs) & (lrs > 0)):
      raise ConfigError(f"learning_rates must be finite and positive, got {lrs.tolist()}")


def run_training(model_config: Any, opt_config: optim_lib.OptimizerConfig, dataset: Any, *,
          seed: int | Sequence[int] = 0, learning_rates: Sequence[float] | None = None,
          attn_mults: Sequence[float] | None = None, log_every: int = 1,
          callback: Callable[[int, dict[str, Any]], None] | None = None,
          divergence_factor: float = DEFAULT_DIVERGENCE_FACTOR, record: Sequence[str] = (),
          fixed_batch: bool = False, keep_last_finite: bool = False, stop_on_divergence: bool = True,
          state: TrainState | None = None, initial_loss: float | None = None,
          after_step: Callable[[int, TrainState], None] | None = None, shard_params: bool = False,
          grid_chunk: int | None = None) -> TrainResult:
  """Trains one run, or a grid of runs in one vmapped program, for ``opt_config.steps`` steps.

  Deterministic given the seeds: member i starts from ``PRNGKey(seed_i)`` and
  sees ``dataset.batch(t, seed_i)`` at step t (batch 0 throughout with
  ``fixed_batch``).

  Args:
    model_config: the model: a ``ModelConfig`` (the built-in Transformer, its optimizer from ``opt_config``) or any
      training program (``FunctionalProgram``: a user's model and its optimizer factory).
    opt_config: the optimizer, schedule and number of steps (of a program: the steps and default learning rate).
    dataset: a ``scaling.training.data.Dataset``, or for a program any source with ``batch(step, seed)``
      (``scaling.mup.user_model.Batches``).
    seed: an int for a single run, or a sequence [M] for a grid.
    learning_rates: a grid's learning rates [M] (with a sequence of seeds);
      None: ``opt_config.learning_rate`` for every member.
    attn_mults: optional α [M] of each member's attention logit scale α/d_head (``TrainState.attn_mult``; a
      grid only): one compiled step serves every α.
    log_every: call ``callback`` and keep history every this many steps (the
      first, the last and a diverging step are always logged); the steps between
      compute only the loss and the ``record`` metrics. A diverging step between
      logged ones is logged with every metric when ``keep_last_finite`` (it is
      recomputed from the kept state), else with only those.
    callback: ``callback(step, row)`` with host metrics (floats and lists) and ``row["diverged"]``, true at
      the step where a member diverges.
    divergence_factor: a member diverges at a non-finite loss or one above
      this × its step-0 loss.
    record: metric names kept at every step in ``TrainResult.records``.
    fixed_batch: train every step on batch 0.
    keep_last_finite: keep the last finite state of each member (a second copy
      of the state on the device).
    stop_on_divergence: stop once every member has diverged.
    state: optional starting state (single run). A state after n updates (a
      checkpoint) resumes the run: steps n .. steps - 1 run, on the batches of
      those steps, exactly as they would have in one go.
    initial_loss: the step-0 loss of a resumed run (divergence is judged against it).
    after_step: ``after_step(updates done, state)`` after each step, once its row is logged (for checkpoints).
    shard_params: a single run on several devices shards parameters and
      optimizer state over them (FSDP) instead of replicating them.
    grid_chunk: a grid's members vmapped together in its step (the rest run one chunk after another in the same
      program); None: ``default_grid_chunk``'s measured rule. Any value gives the same results up to float
      rounding.

  Returns:
    A TrainResult.
  """
  check_run_args(model_config, opt_config, dataset, callback=callback, after_step=after_step,
                 learning_rates=learning_rates, grid_chunk=grid_chunk)
  steps = opt_config.steps
  if log_every < 1:
    raise ConfigError(f"log_every must be positive, got {log_every}")
  if not (math.isfinite(divergence_factor) and divergence_factor > 0):
    raise ConfigError(f"divergence_factor must be a positive number, got {divergence_factor}")
  program = as_program(model_config, opt_config)
  if isinstance(model_config, model_lib.ModelConfig) and dataset.vocab_size > model_config.vocab_size:
    raise ConfigError(f"dataset vocab_size {dataset.vocab_size} exceeds the model's {model_config.vocab_size}")
  if attn_mults is not None and not isinstance(program, TransformerProgram):
    raise ConfigError("attn_mults apply to the built-in Transformer (a ModelConfig) only")
  grid = not isinstance(seed, (int, np.integer))
  first = 0 if state is None or grid else int(jax.device_get(state.step))
  donate = not keep_last_finite  # the state before a step is needed only to keep the last finite one
  if donate and state is not None:  # the caller's state stays usable
    state = jax.tree.map(jnp.copy, state)
  lean = tuple(dict.fromkeys(("loss", *record)))
  if first and initial_loss is None:
    raise ConfigError(f"resuming after {first} updates needs the step-0 loss (initial_loss)")
  start = time.perf_counter()
  mesh = sharding_lib.make_mesh()
  members = None
  if grid:
    seeds = np.asarray(seed, np.int32)
    lrs = (np.full(seeds.shape, opt_config.learning_rate, np.float32) if learning_rates is None
           else np.asarray(learning_rates, np.float32))
    if seeds.ndim != 1 or seeds.shape != lrs.shape or not seeds.size:
      raise ConfigError(f"seeds and learning_rates must be 1-D of the same length, got {seeds.shape} and {lrs.shape}")
    mults = None if attn_mults is None else np.asarray(attn_mults, np.float32)
    if mults is not None and mults.shape != seeds.shape:
      raise ConfigError(f"attn_mults must be 1-D like the seeds, got {mults.shape} and {seeds.shape}")
    (seeds, lrs, mults), members = sharding_lib.shard((seeds, lrs, mults), mesh)  # padding repeats the last one
    batch_of = lambda t: grid_batches(dataset, 0 if fixed_batch else t, seeds)
    shape = (members,)
    if state is None:
      state = make_init(program, grid=True)(seeds, lrs)
      state = state if mults is None else state.replace(attn_mult=mults)
    chunk = (default_grid_chunk(program, int(seeds.shape[0]), devices=mesh.size) if grid_chunk is None
             else int(grid_chunk))
    step_fn = make_train_step(program, grid=True, donate=donate, chunk=chunk)
    lean_fn = make_train_step(program, grid=True, metrics=lean, donate=donate, chunk=chunk)
  else:
    if learning_rates is not None or attn_mults is not None or grid_chunk is not None:
      raise ConfigError("learning_rates, attn_mults and grid_chunk need a sequence of seeds (a grid)")
    seeds = int(seed)
    shape = ()
    if mesh.size > 1 or shard_params:
      init, sharded_batch, step_fn = make_sharded_run(program, jax.eval_shape(dataset.batch, 0, seeds), mesh,
                                                      shard_params)
      batch_of = lambda t: sharded_batch(dataset, 0 if fixed_batch else t, seeds)
      state = init(seeds, opt_config.learning_rate) if state is None else state
      lean_fn, donate = step_fn, False
    else:
      batch_of = lambda t: dataset.batch(0 if fixed_batch else t, seeds)
      if state is None:
        state = make_init(program)(seeds, opt_config.learning_rate)
      step_fn = make_train_step(program, donate=donate)
      lean_fn = make_train_step(program, metrics=lean, donate=donate)
  padded_ok = lambda ok: (ok if members is None
                          else sharding_lib.place(sharding_lib.pad(ok, mesh.size)[0], sharding_lib.leading(mesh)))
  kept = state if keep_last_finite else None
  history: list[dict[str, Any]] = []
  records: dict[str, list] = {name: [] for name in record}
  initial = final = np.full(shape, np.nan) if initial_loss is None else np.asarray(initial_loss, np.float64)
  diverged_at = np.full(shape, -1)
  reasons = np.full(shape, STOP_COMPLETED, dtype=object)
  first_step_done = start
  steps_run = first
  with timesplit.computing():  # the steps and their results on the host: the run's compute
    for t in range(first, steps):
      state_in = state
      logged = t % log_every == 0 or t == steps - 1
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
          reason = check_divergence(float(loss[idx]), float(initial[idx]), divergence_factor)
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
        if callback is not None:
          callback(t, row)
      if after_step is not None:
        after_step(t + 1, state)
      if stop_on_divergence and np.all(diverged_at >= 0):
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
