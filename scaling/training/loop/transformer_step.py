"""One optimizer update of the built-in Transformer (``train_step``, pure) and the gradient norms it measures.

``scaling.training.loop.programs.TransformerProgram`` runs it; the training loop jits and vmaps it
(``scaling.training.loop.step``).
"""

from __future__ import annotations

import functools
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import optax

from scaling.base.validation import ConfigTypeError
from scaling.training.optimizer import OptimizerConfig
from scaling.training.loop import losses as losses_lib
from scaling.training.model import transformer as model_lib
from scaling.training.model import scanned_blocks as scanned_blocks_lib
from scaling.training.loop import state as state_lib

Array = jax.Array


def layer_grad_norms(grads: Any, depth: int) -> Array:
  """Global norm of the gradient of each block_{i}.

  Args:
    grads: the gradient of the Transformer's parameters (its blocks stacked or not).
    depth: the number of blocks.

  Returns:
    [depth]: the norm of each block's gradient (of each row of the stacked blocks' gradient).
  """
  if scanned_blocks_lib.is_stacked(grads, depth):
    squares = [jnp.sum(jnp.square(g).reshape(depth, -1), axis=1) for g in jax.tree.leaves(grads["block_0"])]
    return jnp.sqrt(sum(squares))
  return jnp.stack([optax.tree.norm(grads[f"block_{i}"]) for i in range(depth)])


def train_step(state: state_lib.TrainState, batch: state_lib.Batch, *, model: model_lib.Transformer,
               optimizer: optax.GradientTransformation, opt_config: OptimizerConfig,
               metrics: Sequence[str] | None = None) -> tuple[state_lib.TrainState, dict[str, Array]]:
  """One optimizer update; pure, so it can be jitted and vmapped over (state, batch).

  Args:
    state: the current TrainState.
    batch: {"inputs", "targets", "weights"} each [B, T].
    model: the Transformer (static).
    optimizer: its optax GradientTransformation (static; ``scaling.training.loop.programs.optimizer_for``).
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
  if not isinstance(state, state_lib.TrainState):
    raise ConfigTypeError(f"state must be a TrainState, got {type(state).__name__}")
  if state.attn_mult is not None:
    model = model.clone(attn_mult=state.attn_mult)
  grad_fn = jax.value_and_grad(functools.partial(losses_lib.loss_fn, model=model, z_loss_coefficient=opt_config.z_loss),
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
  new_state = state.replace(step=state.step + 1, params=params, opt_state=opt_state)
  return new_state, state_lib.select_metrics(values, metrics)
