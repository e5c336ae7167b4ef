"""The held-out evaluation of the built-in Transformer: mean loss and accuracy over a dataset's held-out batches."""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import numpy as np

from scaling.base import compilation
from scaling.base.validation import ConfigError
from scaling.training.loop import losses as losses_lib
from scaling.training.model import transformer as model_lib
from scaling.training.model.config import ModelConfig
from scaling.training.loop import state as state_lib


@functools.lru_cache(maxsize=16)
def make_eval_step(model_config: ModelConfig) -> Callable[[Any, state_lib.Batch], dict[str, jax.Array]]:
  """The evaluation step of a model.

  Args:
    model_config: the built-in Transformer.

  Returns:
    A jitted (params, batch) -> {"loss", "accuracy"} (cached per config).
  """
  model = model_lib.Transformer(model_config)

  def step(params, batch):
    loss, (accuracy, _) = losses_lib.loss_fn(params, batch, model=model)
    return {"loss": loss, "accuracy": accuracy}

  return compilation.jit(step)


def evaluate(params: Any, model_config: ModelConfig, dataset: Any, num_batches: int = 4,
             seed: int | None = None) -> dict[str, float]:
  """Mean loss and accuracy over held-out batches.

  Args:
    params: the model's parameters.
    model_config: the model.
    dataset: a ``scaling.training.data.dataset.Dataset`` (its ``eval_batch``).
    num_batches: how many held-out batches.
    seed: the seed of the held-out batches (None: the dataset's).

  Returns:
    {"loss", "accuracy"}: their means over the batches.
  """
  if num_batches < 1:
    raise ConfigError(f"num_batches must be positive, got {num_batches}")
  step = make_eval_step(model_config)
  rows = [jax.device_get(step(params, dataset.eval_batch(i, seed))) for i in range(num_batches)]
  return {k: float(np.mean([r[k] for r in rows])) for k in ("loss", "accuracy")}
