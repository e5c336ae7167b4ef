"""Metrics on closed-form cases, the Jacobian against jax.jacobian, gradients against jax.grad."""

import math

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

import scaling
from scaling import metrics


class WeightStatsTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_uniform_and_one_hot(self):
    n = 8
    uniform = jnp.full((1, 1, 3, n), 1.0 / n)
    one_hot = jnp.zeros((1, 1, 3, n)).at[..., 2].set(1.0)
    stats_u = self.variant(metrics.weight_stats_per_head)(uniform)
    stats_o = self.variant(metrics.weight_stats_per_head)(one_hot)
    np.testing.assert_allclose(stats_u["entropy"], [math.log(n)], rtol=1e-6)
    np.testing.assert_allclose(stats_u["entropy_normalized"], [1.0], rtol=1e-6)
    np.testing.assert_allclose(stats_u["max_prob"], [1.0 / n], rtol=1e-6)
    np.testing.assert_allclose(stats_u["saturated_frac"], [0.0])
    np.testing.assert_allclose(stats_o["entropy"], [0.0], atol=1e-7)
    np.testing.assert_allclose(stats_o["max_prob"], [1.0])
    np.testing.assert_allclose(stats_o["saturated_frac"], [1.0])
    # diag(p) - pp^T vanishes for one-hot p; for uniform its Frobenius norm is sqrt(1/n - 1/n^2).
    np.testing.assert_allclose(stats_o["softmax_jacobian_norm"], [0.0], atol=1e-7)
    np.testing.assert_allclose(stats_u["softmax_jacobian_norm"], [math.sqrt(1 / n - 1 / n**2)], rtol=1e-5)

  def test_causal_entropy_normalizes_by_visible_keys(self):
    t = 6
    logits = jnp.zeros((1, 1, t, t))
    _, weights, mask = scaling.attention_logits_and_weights(
        jnp.zeros((1, t, 1, 4)), jnp.zeros((1, t, 1, 4)), is_causal=True)
    stats = metrics.weight_stats_per_head(weights, mask)
    # Row i sees i + 1 keys uniformly: entropy ln(i + 1).
    np.testing.assert_allclose(stats["entropy"], [np.mean([math.log(i + 1) for i in range(t)])], rtol=1e-5)
    np.testing.assert_allclose(stats["entropy_normalized"], [1.0], rtol=1e-5)  # rows with >= 2 keys
    np.testing.assert_allclose(metrics.logit_stats_per_head(logits, mask)["var"], [0.0])

  def test_jacobian_against_jax_jacobian(self):
    z = jax.random.normal(jax.random.key(0), (5, 7)) * 2.0
    p = jax.nn.softmax(z)
    ref = jax.vmap(jax.jacobian(jax.nn.softmax))(z)
    np.testing.assert_allclose(metrics.softmax_jacobian(p), ref, atol=1e-6)
    np.testing.assert_allclose(metrics.softmax_jacobian_fro_norm(p),
                               jnp.sqrt(jnp.sum(ref**2, axis=(-2, -1))), rtol=1e-5, atol=1e-7)

  def test_logit_stats_closed_form(self):
    z = jnp.arange(12.0).reshape(1, 1, 3, 4)
    mask = jnp.ones((1, 1, 3, 4), bool).at[0, 0, 0, 0].set(False)
    stats = metrics.logit_stats_per_head(z, mask)
    vals = np.arange(1.0, 12.0)
    np.testing.assert_allclose(stats["mean"], [vals.mean()], rtol=1e-6)
    np.testing.assert_allclose(stats["var"], [vals.var()], rtol=1e-6)
    np.testing.assert_allclose(stats["absmax"], [11.0])

  def test_post_softmax_weights_are_renormalized(self):
    k = jax.random.split(jax.random.key(1), 3)
    q, kk, v = (jax.random.normal(x, (1, 5, 1, 16)) for x in k)
    _, w_post, _ = scaling.attention_logits_and_weights(q, kk, rule="post_softmax")
    _, w_none, _ = scaling.attention_logits_and_weights(q, kk, rule="none")
    np.testing.assert_allclose(w_post.sum(-1), 0.25, rtol=1e-5)
    chex.assert_trees_all_close(metrics.weight_stats_per_head(w_post), metrics.weight_stats_per_head(w_none),
                                rtol=1e-5)


class GradNormTest(parameterized.TestCase):

  @parameterized.parameters("sqrt", "qk_norm", "post_softmax")
  def test_against_jax_grad(self, rule):
    ks = jax.random.split(jax.random.key(2), 4)
    q = jax.random.normal(ks[0], (2, 5, 4, 8))
    k = jax.random.normal(ks[1], (2, 6, 2, 8))
    v = jax.random.normal(ks[2], (2, 6, 2, 8))
    g = jax.random.normal(ks[3], (2, 5, 4, 8))
    got = metrics.attention_metrics_per_head(q, k, v, g, rule=rule, is_causal=True)
    loss = lambda q, k, v: jnp.sum(g * scaling.dot_product_attention(q, k, v, rule=rule, is_causal=True))
    gq, gk, gv = jax.grad(loss, argnums=(0, 1, 2))(q, k, v)
    np.testing.assert_allclose(got["grad_norm_q"], np.linalg.norm(gq, axis=(1, 3)).mean(0), rtol=1e-4)
    np.testing.assert_allclose(got["grad_norm_k"], np.linalg.norm(gk, axis=(1, 3)).mean(0), rtol=1e-4)
    np.testing.assert_allclose(got["grad_norm_v"], np.linalg.norm(gv, axis=(1, 3)).mean(0), rtol=1e-4)
    # Gradient w.r.t. the logits by hand: dL/dp = g·v, dL/dz = p ⊙ (dL/dp − Σ p dL/dp) (times weight scale).
    _, w, mask = scaling.attention_logits_and_weights(q, k, rule=rule, is_causal=True)
    w = np.asarray(w, np.float64)
    vr = np.repeat(np.asarray(v, np.float64), 2, axis=2)
    dp = np.einsum("btnh,bsnh->bnts", np.asarray(g, np.float64), vr)
    scale = w.sum(-1, keepdims=True)
    p = w / scale
    dz = scale * p * (dp - (p * dp).sum(-1, keepdims=True))
    np.testing.assert_allclose(got["grad_norm_logits"], np.linalg.norm(dz, axis=(2, 3)).mean(0), rtol=1e-4)


class BlockwiseMetricsTest(parameterized.TestCase):
  """The O(T·block) metrics equal the dense ones (an independent, full T × S computation)."""

  @parameterized.product(rule=("sqrt", "none", "qk_norm", "post_softmax"), causal=(False, True))
  def test_equals_dense(self, rule, causal):
    ks = jax.random.split(jax.random.key(3), 4)
    q = 2.0 * jax.random.normal(ks[0], (2, 11, 4, 8))
    k = jax.random.normal(ks[1], (2, 11, 2, 8))
    v = jax.random.normal(ks[2], (2, 11, 2, 8))
    g = jax.random.normal(ks[3], (2, 11, 4, 8))
    dense = metrics.attention_metrics_per_head(q, k, v, g, rule=rule, is_causal=causal)
    blockwise = metrics.blockwise_attention_metrics_per_head(q, k, v, g, rule=rule, is_causal=causal, block_q=4,
                                                            block_k=3)
    self.assertEqual(set(dense), set(blockwise))
    for name in dense:
      np.testing.assert_allclose(blockwise[name], dense[name], rtol=2e-4, atol=1e-6, err_msg=name)


if __name__ == "__main__":
  absltest.main()
