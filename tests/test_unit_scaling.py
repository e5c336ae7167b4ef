"""Unit-scaled operations of u-μP: custom VJPs against plain jnp ops, unit scale at init."""

import math

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax

from scaling import unit_scaling as U


def _normal(seed, shape):
  return jax.random.normal(jax.random.PRNGKey(seed), shape)


def _rms(x):
  return float(jnp.sqrt(jnp.mean(jnp.square(x))))


def _plain_attention(q, k, v, alpha=1.0):
  """Causal softmax(α/d · q·k)·v with jax.nn (the independent reference)."""
  return jax.nn.dot_product_attention(q, k, v, scale=alpha / q.shape[-1], is_causal=True)


class VjpTest(parameterized.TestCase):
  """Forward = plain op × forward scale; backward = jax's gradient of the plain op × backward scale."""

  def test_scale(self):
    x, g = _normal(0, (3, 5)), _normal(1, (3, 5))
    y, vjp = jax.vjp(lambda x: U.scale(x, 0.3, 7.0), x)
    chex.assert_trees_all_close(y, x * 0.3, rtol=1e-6)
    chex.assert_trees_all_close(vjp(g)[0], g * 7.0, rtol=1e-6)

  @parameterized.parameters(((4, 8), 8, 16), ((2, 3, 16), 16, 4))
  def test_linear(self, x_shape, fan_in, fan_out):
    x, w = _normal(0, x_shape), _normal(1, (fan_in, fan_out))
    g = _normal(2, (*x_shape[:-1], fan_out))
    s_out, s_in, s_w = 0.25, 0.5, 0.125
    y, vjp = jax.vjp(lambda x, w: U.linear(x, w, s_out, s_in, s_w), x, w)
    y_ref, vjp_ref = jax.vjp(jnp.dot, x, w)
    chex.assert_trees_all_close(y, y_ref * s_out, rtol=1e-5)
    (dx, dw), (dx_ref, dw_ref) = vjp(g), vjp_ref(g)
    chex.assert_trees_all_close(dx, dx_ref * s_in, rtol=1e-5, atol=1e-6)
    chex.assert_trees_all_close(dw, dw_ref * s_w, rtol=1e-5, atol=1e-6)

  def test_attention(self):
    q, k, v = (_normal(i, (2, 16, 2, 8)) for i in range(3))
    g = _normal(3, (2, 16, 2, 8))
    s = U.attention_scale(16, 8)
    y, vjp = jax.vjp(lambda q, k, v: U.attention(_plain_attention, q, k, v, s), q, k, v)
    y_ref, vjp_ref = jax.vjp(_plain_attention, q, k, v)
    chex.assert_trees_all_close(y, y_ref * s, rtol=1e-5)
    for got, want in zip(vjp(g), vjp_ref(g)):
      chex.assert_trees_all_close(got, want * s, rtol=1e-4, atol=1e-6)

  def test_attention_scale_formula(self):
    # unit_scaling's rule: 1 / logint(σ(log(mult²/(4 d))), lower=√(log T / T) (causal) or √(1/T), upper=1).
    for t, d, mult, causal in ((64, 16, 1.0, True), (1024, 256, 1.0, True), (128, 32, 8.0, False)):
      w = 1 / (1 + 4 * d / mult**2)
      lower = math.sqrt((math.log(t) if causal else 1) / t)
      self.assertAlmostEqual(U.attention_scale(t, d, mult=mult, causal=causal), 1 / lower**(1 - w), places=9)

  def test_cross_entropy(self):
    logits, targets = _normal(0, (3, 5, 11)), jax.random.randint(jax.random.PRNGKey(1), (3, 5), 0, 11)
    weights = (jax.random.uniform(jax.random.PRNGKey(2), (3, 5)) > 0.3).astype(jnp.float32)
    loss, grad = jax.value_and_grad(U.cross_entropy)(logits, targets, weights)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
    np.testing.assert_allclose(loss, jnp.sum(ce * weights) / jnp.sum(weights), rtol=1e-6)
    summed = jax.grad(lambda z: jnp.sum(optax.softmax_cross_entropy_with_integer_labels(z, targets) * weights))
    chex.assert_trees_all_close(grad, summed(logits) * 11 / math.sqrt(10), rtol=1e-5, atol=1e-7)

  @parameterized.parameters(0.1, 1.0, 3.0)
  def test_residual_split_add(self, tau):
    # The split scales the gradients and the add the values, so together they are the plain residual
    # (τ·f(x) + x)/√(1 + τ²) with its true gradient.
    x, g = _normal(0, (4, 8)), _normal(1, (4, 8))
    f = lambda x: jnp.tanh(2.0 * x)

    def unit(x):
      branch, skip = U.residual_split(x, tau)
      return U.residual_add(f(branch), skip, tau)

    plain = lambda x: (tau * f(x) + x) / math.sqrt(1 + tau * tau)
    y, vjp = jax.vjp(unit, x)
    y_ref, vjp_ref = jax.vjp(plain, x)
    chex.assert_trees_all_close(y, y_ref, rtol=1e-6)
    chex.assert_trees_all_close(vjp(g), vjp_ref(g), rtol=1e-5, atol=1e-6)

  @parameterized.parameters((1, 1.0, 1.0), (6, 1.0, 1.0), (4, 0.5, 2.0))
  def test_residual_taus(self, depth, mult, ratio):
    # unit_scaling's transformer_residual_scaling_rule over the 2L branches (index i, attention when i is even).
    a_mlp = mult * math.sqrt(2 / (1 + ratio**2))
    a_attn = ratio * a_mlp
    want = []
    for i in range(2 * depth):
      n_attn, n_mlp = (i + 1) // 2, i // 2
      want.append((a_attn if i % 2 == 0 else a_mlp) / math.sqrt(depth + n_attn * a_attn**2 + n_mlp * a_mlp**2))
    got = [tau for pair in U.residual_taus(depth, mult, ratio) for tau in pair]
    np.testing.assert_allclose(got, want, rtol=1e-12)


class UnitScaleOpsTest(parameterized.TestCase):
  """Each unit-scaled op maps unit-scale inputs and output gradients to unit-scale outputs and gradients."""

  @parameterized.parameters((64, 256, 64), (1024, 256, 16), (256, 1024, 64))
  def test_linear_and_gelu(self, fan_in, fan_out, rows):
    x, w, g = _normal(0, (rows, fan_in)), _normal(1, (fan_in, fan_out)), _normal(2, (rows, fan_out))
    for constrained in (True, False):
      s = U.unit_linear_scales(fan_in, fan_out, rows, constrained=constrained)
      y, vjp = jax.vjp(lambda x, w: U.linear(x, w, *s), x, w)
      dx, dw = vjp(g)
      want_dx = math.sqrt(fan_out / fan_in) if constrained else 1.0  # constrained: the true gradient's scale
      for name, value, want in (("y", y, 1.0), ("dx", dx, want_dx), ("dw", dw, 1.0)):
        self.assertBetween(_rms(value) / want, 0.5, 2.0, msg=f"{name} constrained={constrained}")
    y, vjp = jax.vjp(U.gelu, x)
    self.assertBetween(_rms(y), 0.5, 2.0)
    self.assertBetween(_rms(vjp(_normal(3, x.shape))[0]), 0.5, 2.0)

  @parameterized.parameters((64, 16), (256, 64), (1024, 64), (1024, 256))
  def test_attention(self, t, d):
    q, k, v, g = (_normal(i, (1, t, 2, d)) for i in range(4))
    s = U.attention_scale(t, d)
    y, vjp = jax.vjp(lambda v: U.attention(_plain_attention, q, k, v, s), v)
    self.assertBetween(_rms(y), 0.5, 2.0)
    self.assertBetween(_rms(vjp(g)[0]), 0.5, 2.0)

  @parameterized.parameters(64, 256, 4096)
  def test_cross_entropy_gradient(self, vocab):
    logits = 0.1 * _normal(0, (64, vocab))
    targets = jax.random.randint(jax.random.PRNGKey(1), (64,), 0, vocab)
    grad = jax.grad(U.cross_entropy)(logits, targets, jnp.ones((64,)))
    self.assertBetween(_rms(grad), 0.5, 2.0)


if __name__ == "__main__":
  absltest.main()
