"""RoPE: rotations preserve norms, and q·k depends only on relative position."""

from absl.testing import absltest
import chex
import jax
import jax.numpy as jnp
import numpy as np

from scaling.attention import rope


class RopeTest(chex.TestCase):

  def test_preserves_norms(self):
    x = jax.random.normal(jax.random.key(0), (2, 10, 3, 16))
    y = rope.apply_rope(x)
    np.testing.assert_allclose(jnp.linalg.norm(y, axis=-1), jnp.linalg.norm(x, axis=-1), rtol=1e-5)

  def test_relative_position(self):
    q = jax.random.normal(jax.random.key(1), (1, 1, 1, 8))
    k = jax.random.normal(jax.random.key(2), (1, 1, 1, 8))
    dot = lambda i, j: jnp.sum(rope.apply_rope(q, jnp.array([i])) * rope.apply_rope(k, jnp.array([j])))
    np.testing.assert_allclose(dot(3, 1), dot(10, 8), rtol=1e-4)
    np.testing.assert_allclose(dot(0, 0), jnp.sum(q * k), rtol=1e-5)
    self.assertGreater(abs(float(dot(3, 1) - dot(3, 2))), 1e-3)

  def test_closed_form_first_pair(self):
    # The pair (x_0, x_{H/2}) rotates by angle position * base^0 = position.
    x = jnp.zeros((1, 4, 1, 4)).at[..., 0].set(1.0)
    y = rope.apply_rope(x)
    np.testing.assert_allclose(y[0, :, 0, 0], np.cos(np.arange(4)), atol=1e-6)
    np.testing.assert_allclose(y[0, :, 0, 2], np.sin(np.arange(4)), atol=1e-6)

  def test_default_positions_are_constant_tables(self):
    # Positions 0..T-1 by default: the same rotation as those positions given, with cos and sin computed at trace
    # time (the compiled program evaluates no cosine or sine).
    x = jax.random.normal(jax.random.key(3), (2, 50, 3, 16))
    chex.assert_trees_all_close(rope.apply_rope(x), rope.apply_rope(x, jnp.arange(50)), atol=2e-5)
    chex.assert_trees_all_close(jax.jit(rope.apply_rope)(x), rope.apply_rope(x, jnp.arange(50)), atol=2e-5)
    hlo = jax.jit(rope.apply_rope).lower(x).compile().as_text()
    self.assertNotRegex(hlo, r"= f32\[[\d,]*\]\{[\d,]*\} (cosine|sine)\(")
    self.assertRegex(jax.jit(rope.apply_rope).lower(x, jnp.arange(50)).compile().as_text(), r" cosine\(")

  def test_odd_head_dim_rejected(self):
    with self.assertRaisesRegex(ValueError, "even head_dim"):
      rope.apply_rope(jnp.zeros((1, 2, 1, 5)))


if __name__ == "__main__":
  absltest.main()
