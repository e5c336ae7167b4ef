"""``ReadoutLinear``: the ``flax.nnx`` readout of ``scaling.mup.parametrize``'s ``forward="readout"``.

Its own module because it subclasses ``flax.nnx.Linear``: ``flax.nnx`` (and the
IPython it imports) adds about half a second to every start-up, so ``scaling``
imports this module on first use of ``scaling.ReadoutLinear``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx


class ReadoutLinear(nnx.Linear):
  """``flax.nnx.Linear`` whose product is multiplied by ``multiplier`` (mup's ``MuReadout``; see
  ``scaling.ReadoutDense``)."""

  def __init__(self, in_features: int, out_features: int, *, multiplier: float = 1.0, **kwargs: Any):
    super().__init__(in_features, out_features, **kwargs)
    self.multiplier = float(multiplier)

  def __call__(self, inputs: jax.Array) -> jax.Array:
    """inputs [..., in_features] -> [..., out_features]."""
    return super().__call__(inputs * jnp.asarray(self.multiplier, inputs.dtype))
