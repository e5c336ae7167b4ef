"""The training state every program steps (``TrainState``, a pytree) and the metrics a step returns."""

from __future__ import annotations

from typing import Any, Sequence

import jax
from flax import struct

from scaling.base import validation
from scaling.base.validation import ConfigError

Array = jax.Array
Batch = dict[str, Array]


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


def select_metrics(values: dict[str, Array], metrics: Sequence[str] | None) -> dict[str, Array]:
  """The named metrics of ``values``.

  Args:
    values: every metric a step measures, by name.
    metrics: the names to return; None: all.

  Returns:
    Those of ``values`` (ConfigError naming an unknown one).
  """
  if metrics is None:
    return values
  unknown = [name for name in metrics if name not in values]
  if unknown:
    raise ConfigError(f"metrics: {validation.unknown_choice('metric', unknown[0], tuple(values))}")
  return {name: values[name] for name in metrics}

