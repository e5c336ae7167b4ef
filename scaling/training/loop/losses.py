"""The losses of training: the weighted next-token cross-entropy, the z-loss and the loss of the built-in Transformer.

``loss_fn`` is what a train step differentiates (``scaling.training.loop.transformer_step.train_step``) and what the
held-out evaluation measures (``scaling.training.loop.evaluation``).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax

from scaling.base import validation
from scaling.base.validation import ConfigError
from scaling.mup import unit_scaling
from scaling.training.model import transformer as model_lib
from scaling.training.loop import state as state_lib

Array = jax.Array


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


def loss_fn(params: Any, batch: state_lib.Batch, *, model: model_lib.Transformer,
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
