"""The Pallas flash-attention path (interpret mode on CPU) against the dense path: values and gradients."""

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp

from scaling.attention import dispatch as attention
from scaling.attention import pallas as pallas_attention
from scaling.attention import rules


def _inputs(seed, b, t, s, n, k, h):
  keys = jax.random.split(jax.random.PRNGKey(seed), 4)
  return (jax.random.normal(keys[0], (b, t, n, h)), jax.random.normal(keys[1], (b, s, k, h)),
          jax.random.normal(keys[2], (b, s, k, h)), jax.random.normal(keys[3], (b, t, n, h)))


def _value_and_grads(fn, gains, q, key, value, ct):
  """<out, ct>, out, lse and the gradients w.r.t. q, k, v and the QK-norm gains."""
  def loss(gains, q, key, value):
    out, lse = fn(gains, q, key, value)
    return jnp.vdot(out, ct), (out, lse)
  return jax.value_and_grad(loss, argnums=(0, 1, 2, 3), has_aux=True)(gains, q, key, value)


class PallasMatchesDenseTest(chex.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      # T and S not multiples of the blocks (padding masked), GQA, several key blocks per query block.
      ("sqrt_causal_gqa_padded", "sqrt", True, 13, 13, 2, 1),
      ("qk_norm_cross_attention", "qk_norm", False, 5, 11, 1, 1),
  )
  def test_values_and_gradients(self, rule_name, causal, t, s, n, k):
    q, key, value, ct = _inputs(0, 1, t, s, n, k, 8)
    gains = (1.0 + 0.1 * jnp.arange(8.0), 1.0 - 0.05 * jnp.arange(8.0))

    def make(impl):
      def fn(gains, q, key, value):
        rule = rules.get_rule("qk_norm", query_gain=gains[0], key_gain=gains[1]) if rule_name == "qk_norm" else "sqrt"
        if impl == "pallas":
          return pallas_attention.pallas_attention(q, key, value, rule=rule, is_causal=causal, block_q=8, block_k=4,
                                                   return_residual=True, interpret=True)
        return attention.dot_product_attention(q, key, value, rule=rule, is_causal=causal, return_residual=True,
                                               implementation="dense")
      return fn

    run = lambda *a: (_value_and_grads(make("pallas"), *a), _value_and_grads(make("dense"), *a))
    got, want = jax.jit(run)(gains, q, key, value, ct)
    chex.assert_trees_all_close(got[0], want[0], rtol=1e-5, atol=2e-6)  # loss, output, lse
    chex.assert_trees_all_close(got[1], want[1], rtol=1e-4, atol=5e-6)  # gradients (gains included)

  def test_rules_through_dot_product_attention(self):
    q, key, value, _ = _inputs(1, 2, 6, 6, 2, 2, 4)
    rule = rules.get_rule("temperature", tau=0.7)
    got = jax.jit(lambda q, k, v: attention.dot_product_attention(q, k, v, rule=rule, is_causal=True,
                                                                  implementation="pallas"))(q, key, value)
    want = jax.nn.dot_product_attention(q, key, value, is_causal=True, scale=1 / 0.7)
    chex.assert_trees_all_close(got, want, rtol=1e-5, atol=2e-6)

  def test_rejects_what_the_kernel_lacks(self):
    q, key, value, _ = _inputs(0, 1, 4, 4, 1, 1, 4)
    with self.assertRaisesRegex(ValueError, "soft cap"):
      attention.dot_product_attention(q, key, value, logit_soft_cap=2.0, implementation="pallas")
    with self.assertRaisesRegex(ValueError, "mask"):
      attention.dot_product_attention(q, key, value, mask=jnp.ones((4, 4), bool), implementation="pallas")
    with self.assertRaisesRegex(ValueError, "traced"):
      jax.vmap(lambda c: pallas_attention.pallas_attention(q, key, value, rule=rules.FixedScale(c)))(jnp.ones(2))


if __name__ == "__main__":
  absltest.main()
