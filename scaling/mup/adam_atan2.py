"""Adam-atan2: Adam's direction without ε, as an optax transformation.

Everett et al. 2024 ("Scaling Exponents Across Parameterizations and
Optimizers", §4.3) replace Adam's m̂/(√v̂ + ε) by

    a · atan2(m̂, b · √v̂)

with a = 1.27 and b = 1. For |m̂| ≪ b√v̂ this is (a/b) · m̂/√v̂, Adam's
direction; it is bounded by a·π/2, and it is a function of the ratio m̂/√v̂
only, so scaling every gradient by a constant c > 0 leaves the update
unchanged (m̂ and √v̂ both scale by c). Adam's ε breaks that invariance once
√v̂ comes near ε, which is why width-dependent ε rules (μP, CompleteP) exist;
atan2 needs no ε and no rule for it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from scaling.base.validation import ConfigError

DEFAULT_A = 1.27
DEFAULT_B = 1.0


def scale_by_adam_atan2(b1: float = 0.9, b2: float = 0.999, a: float = DEFAULT_A,
                        b: float = DEFAULT_B) -> optax.GradientTransformation:
  """Rescales updates to ``a · atan2(m̂, b · √v̂)`` with Adam's bias-corrected moments m̂, v̂.

  The state is ``optax.ScaleByAdamState`` (count, mu, nu), the same as
  ``optax.scale_by_adam``'s; chain per-layer learning rates and the global
  learning rate after it exactly as after ``scale_by_adam``.

  Args:
    b1: decay of the first moment.
    b2: decay of the second moment.
    a: the output scale (the update is bounded by a·π/2).
    b: the scale of √v̂ inside atan2 (a/b is the small-ratio gain).

  Returns:
    An optax GradientTransformation.

  Raises:
    ValueError: b1 or b2 outside [0, 1), or a or b not positive.
  """
  for name, value in (("b1", b1), ("b2", b2)):
    if not 0 <= value < 1:
      raise ConfigError(f"{name} must be in [0, 1), got {value!r}")
  for name, value in (("a", a), ("b", b)):
    if not value > 0:
      raise ConfigError(f"{name} must be positive, got {value!r}")

  def init_fn(params):
    return optax.ScaleByAdamState(count=jnp.zeros([], jnp.int32), mu=optax.tree.zeros_like(params),
                                  nu=optax.tree.zeros_like(params))

  def update_fn(updates, state, params=None):
    del params
    mu = optax.tree.update_moment(updates, state.mu, b1, 1)
    nu = optax.tree.update_moment_per_elem_norm(updates, state.nu, b2, 2)
    count = optax.safe_increment(state.count)
    mu_hat = optax.tree.bias_correction(mu, b1, count)
    nu_hat = optax.tree.bias_correction(nu, b2, count)
    updates = jax.tree.map(lambda m, v: (a * jnp.arctan2(m, b * jnp.sqrt(v))).astype(m.dtype), mu_hat, nu_hat)
    return updates, optax.ScaleByAdamState(count=count, mu=mu, nu=optax.tree.cast_like(nu, state.nu))

  return optax.GradientTransformation(init_fn, update_fn)
