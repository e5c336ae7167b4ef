"""Tolerances for comparing two float32 computations of one value that round in different orders.

Two programs that compute the same mathematical value (a grid run in chunks or all at once; a multiplier folded
into the weights or applied to the activations) may reassociate sums differently, and another CPU's code
generation may vectorise them differently again. Each rounding is within float32's unit roundoff u = eps/2
(eps = 2**-23 ≈ 1.19e-7); a sum of n terms reassociated differs by at most about n·u relative to the sum of its
terms' magnitudes (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., §4.2), and a chain of
``depth`` dependent operations adds their bounds. ``rtol`` is that bound; ``ulp_sensitivity`` measures how far one
ulp of a computation's inputs moves its outputs, for computations (such as Adam's first step, g/(|g| + ε), near
g = 0) that amplify rounding more than any fixed bound.
"""

import jax
import jax.numpy as jnp
import numpy as np

EPS32 = float(np.finfo(np.float32).eps)


def rtol(depth: int, steps: int = 1) -> float:
  """The relative tolerance of ``steps`` updates through ``depth`` dependent float32 operations each: depth·steps·eps.

  Each dependent operation may add eps/2 of relative error when it is reassociated and its input's error carries
  forward; a factor of two covers the error of both computations being compared.
  """
  return EPS32 * depth * steps


def ulp_sensitivity(fn, *args):
  """Per leaf of ``fn(*args)``: the largest change that moving every float input one ulp (up) makes.

  Two orders of the same roundings differ by about this much at most, whatever the computation's conditioning:
  a comparison of two such orders is held to a small multiple of it.
  """
  # In numpy: the same IEEE operations, without an eager program compiled per leaf shape.
  def up(x):
    x = np.asarray(x)
    return jnp.asarray(np.nextafter(x, np.asarray(np.inf, x.dtype))) if np.issubdtype(x.dtype, np.floating) else x

  nudged = jax.tree.map(up, args)
  return jax.tree.map(lambda a, b: float(np.max(np.abs(np.asarray(a) - np.asarray(b)))), fn(*args), fn(*nudged))
