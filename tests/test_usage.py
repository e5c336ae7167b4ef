"""scaling.mup.usage: how a computation uses each parameter, against hand-written tables of layouts; the readout's
product scaled by the library against a model that scales its own logits; products recorded from a plain function
against the products computed by hand."""

from absl.testing import absltest
from absl.testing import parameterized
import chex
import flax.linen as nn
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import jax
import jax.numpy as jnp
import numpy as np

from scaling.mup import usage


class _Layouts(nn.Module):
  """One parameter per layout, each used as its library would use it."""

  @nn.compact
  def __call__(self, tokens, images):
    wte = nn.Embed(10, 8, name="wte")
    x = wte(tokens)                                                       # gathered along 0
    out_in = self.param("out_in", nn.initializers.normal(), (24, 8))        # Conv1D-style [out, in]
    qkv = x @ out_in.T
    general = nn.DenseGeneral((2, 4), name="general")(x)                    # [D, N, H]
    merged = nn.DenseGeneral(8, axis=(-2, -1), name="merged")(general)     # [N, H, D]
    ein = self.param("ein", nn.initializers.normal(), (8, 2, 4))
    y = jnp.einsum("btd,dnh->btnh", x, ein)
    conv = nn.Conv(8, (2, 2), name="conv")(images)                          # [kh, kw, in, out]
    stacked = self.param("stacked", nn.initializers.normal(), (3, 8, 8))    # scanned over its first axis
    h, _ = jax.lax.scan(lambda c, w: (jnp.tanh(c @ w), None), merged, stacked)
    gain = self.param("gain", nn.initializers.ones, (8,))
    h = nn.Dense(8, name="hidden")(h * gain)
    logits = wte.attend(h)                                                  # tied readout: terminal
    return logits.sum() + qkv.sum() + y.sum() + conv.sum()


class UsageTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    tokens, images = jnp.zeros((2, 5), jnp.int32), jnp.zeros((2, 4, 4, 3))
    model = _Layouts()
    params = jax.eval_shape(lambda: model.init(jax.random.key(0), tokens, images))["params"]
    cls.usage = usage.read_usage(lambda p: model.apply({"params": p}, tokens, images), params)

  @parameterized.parameters(
      ("out_in", {1}), ("general/kernel", {0}), ("merged/kernel", {0, 1}), ("ein", {0}),
      ("conv/kernel", {0, 1, 2}), ("stacked", {1}), ("hidden/kernel", {0}), ("wte/embedding", {1}))
  def test_fan_in_axes(self, path, axes):
    self.assertEqual(self.usage[path].fan_in_axes, frozenset(axes))

  def test_lookups_gains_and_biases(self):
    self.assertEqual(self.usage["wte/embedding"].lookup_axes, frozenset({0}))
    self.assertIsNone(self.usage["hidden/kernel"].lookup_axes)
    self.assertEqual(self.usage["gain"].elementwise, ("mul",))
    self.assertEqual(self.usage["hidden/bias"].elementwise, ("add",))
    self.assertIsNone(self.usage["gain"].fan_in_axes)

  def test_terminal_products(self):
    # Only the tied readout's product reaches the output with no parameter contracted after it; the others feed
    # later layers or are summed straight into the output (qkv, y and conv are terminal too).
    terminal = {p for p, u in self.usage.items() if u.terminal}
    self.assertEqual(terminal, {"wte/embedding", "out_in", "ein", "conv/kernel"})

  def test_unused_parameter(self):
    u = usage.read_usage(lambda p, x: x @ p["w"], {"w": jnp.ones((3, 4)), "unused": jnp.ones(2)}, jnp.ones((2, 3)))
    self.assertFalse(u["unused"].used)
    self.assertTrue(u["w"].terminal)

  def test_different_contractions_of_one_parameter_are_an_error(self):
    u = usage.read_usage(lambda p, x: (x @ p["w"]).sum() + (p["w"] @ x.T).sum(), {"w": jnp.ones((3, 3))},
                         jnp.ones((2, 3)))
    with self.assertRaisesRegex(ValueError, "different axes"):
      u["w"].fan_in_axes  # pylint: disable=pointless-statement

  @settings(deadline=None, max_examples=30)
  @given(st.lists(st.sampled_from([1, 2, 3, 4]), min_size=1, max_size=4).filter(lambda d: max(d) > 1))
  def test_reshape_keeps_each_axis_with_its_block(self, dims):
    # Merging all axes then splitting them back gives every axis the union of all (one block); a transpose
    # before a contraction over the merged axis sums over all of them.
    shape = tuple(dims)
    u = usage.read_usage(lambda p, x: x @ p["w"].reshape(-1, 1), {"w": jnp.ones(shape)},
                         jnp.ones((2, int(np.prod(shape)))))
    self.assertEqual(u["w"].fan_in_axes, frozenset(i for i, d in enumerate(shape) if d > 1))


class _Readout(nn.Module):
  scale: float = 1.0

  @nn.compact
  def __call__(self, tokens):
    embed = nn.Embed(7, 16, name="embed")
    h = nn.tanh(nn.Dense(16, name="hidden")(embed(tokens)))
    return self.scale * embed.attend(h)


def _loss(model, params, tokens):
  logits = model.apply({"params": params}, tokens)
  return jax.nn.log_softmax(logits)[..., 0].mean()


class ScaleProductsTest(chex.TestCase):
  """The library's tied-readout multiplier equals a model that multiplies its own logits."""

  @chex.variants(with_jit=True, without_jit=True)
  def test_scaled_tied_logits_and_gradients(self):
    tokens = jax.random.randint(jax.random.key(1), (3, 5), 0, 7)
    params = _Readout().init(jax.random.key(0), tokens)["params"]
    scaled = usage.scale_products(lambda p, t: _loss(_Readout(), p, t), {"embed/embedding": 0.25})
    reference = lambda p, t: _loss(_Readout(scale=0.25), p, t)
    got = self.variant(jax.value_and_grad(scaled))(params, tokens)
    want = jax.value_and_grad(reference)(params, tokens)
    chex.assert_trees_all_close(got, want, rtol=1e-6, atol=1e-7)

  def test_vmapped_members(self):
    tokens = jax.random.randint(jax.random.key(1), (3, 5), 0, 7)
    params = jax.vmap(lambda k: _Readout().init(k, tokens)["params"])(jax.random.split(jax.random.key(0), 3))
    scaled = usage.scale_products(lambda p, t: _loss(_Readout(), p, t), {"embed/embedding": 0.5})
    got = jax.vmap(scaled, in_axes=(0, None))(params, tokens)
    want = jax.vmap(lambda p: _loss(_Readout(scale=0.5), p, tokens))(params)
    np.testing.assert_allclose(got, want, rtol=1e-6)

  def test_a_parameter_without_a_terminal_product_is_an_error(self):
    tokens = jnp.zeros((1, 2), jnp.int32)
    params = _Readout().init(jax.random.key(0), tokens)["params"]
    scaled = usage.scale_products(lambda p, t: _loss(_Readout(), p, t), {"hidden/kernel": 0.5})
    with self.assertRaisesRegex(ValueError, "no terminal product"):
      scaled(params, tokens)

  def test_factor_one_is_the_function_itself(self):
    fn = lambda p, t: 0.0
    self.assertIs(usage.scale_products(fn, {"embed/embedding": 1.0}), fn)


class RecordProductsTest(absltest.TestCase):

  def test_products_of_a_plain_function(self):
    params = {"layer_0": {"w": jax.random.normal(jax.random.key(0), (3, 4))},
              "layer_1": {"w": jax.random.normal(jax.random.key(1), (4, 2)), "b": jnp.ones(2)},
              "table": jax.random.normal(jax.random.key(2), (5, 3))}

    def fn(p, ids):
      x = p["table"][ids]
      h = jnp.tanh(x @ p["layer_0"]["w"])
      return (h @ p["layer_1"]["w"] + p["layer_1"]["b"]).sum()

    ids = jnp.array([0, 3, 4])
    out, products = usage.record_products(fn)(params, ids)
    x = params["table"][ids]
    h = jnp.tanh(x @ params["layer_0"]["w"])
    self.assertAlmostEqual(float(out), float(fn(params, ids)), places=5)
    self.assertEqual(set(products), {"table", "layer_0", "layer_1"})
    np.testing.assert_allclose(products["table"], x, rtol=1e-6)
    np.testing.assert_allclose(products["layer_0"], x @ params["layer_0"]["w"], rtol=1e-5)
    np.testing.assert_allclose(products["layer_1"], h @ params["layer_1"]["w"], rtol=1e-5)


if __name__ == "__main__":
  absltest.main()
