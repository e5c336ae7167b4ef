"""The μP engine on models written as other libraries write them (tests/external_models.py): every parameter's
role and fan-in axes against a hand-written table, the tie found from the computation, overrides the computation
contradicts, the paper init of an (out, in) kernel, and the base model equal to the model as written."""

import functools

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

import scaling
from scaling.mup import user_model
from scaling.mup import width_family
import external_models as em

BASE = 16


@functools.cache
def _widths(name):
  """The model at its widths, one per model for every scheme and option (as ``scaling.coord_check`` shares it
  between schemes): its computation is read and its own init drawn once."""
  factory, loss, batch_of, _, _ = em.MODELS[name]
  return width_family.ModelWidths(factory, loss, batch_of(jax.random.key(0)))


def _family(name, scheme="mup", **kw):
  w = _widths(name)
  return scaling.WidthParametrization(w.model, w.loss_fn, w.example_batch, scheme, base_width=BASE, widths=w, **kw)


@functools.cache
def _shared(name, scheme="mup"):
  """The family of a model without options, one per process (its roles and models at a width are cached)."""
  return _family(name, scheme)


class RolesTest(parameterized.TestCase):

  @parameterized.parameters(*em.MODELS)
  def test_roles_and_fan_in_axes_equal_the_table(self, name):
    table, tied = em.MODELS[name][3], em.MODELS[name][4]
    roles = _shared(name).roles(4 * BASE)
    self.assertEqual({p: (r.kind, r.in_axes) for p, r in roles.items()}, table)
    self.assertEqual(roles.tied_embedding, tied)

  def test_out_in_kernel_gets_its_fan_in_from_axis_1(self):
    # GPT-2's c_fc kernel is stored [4·d, d]: its fan-in is d, so the paper init std is 1/√d, not 1/√(4·d).
    width = 4 * BASE
    p = _shared("gpt2_tied").at(width)
    self.assertEqual(p.roles["h_0/c_fc/kernel"].fans, (width, 4 * width))
    self.assertAlmostEqual(p.spec("h_0/c_fc/kernel").init_std, width**-0.5)
    self.assertAlmostEqual(p.spec("h_0/mlp_c_proj/kernel").init_std, (4 * width)**-0.5)

  def test_tied_readout_multiplier_is_base_over_width(self):
    self.assertAlmostEqual(_shared("gpt2_tied").at(4 * BASE).tied_readout_multiplier, 0.25)
    self.assertEqual(_shared("gpt2_tied", "sp").at(4 * BASE).tied_readout_multiplier, 1.0)

  def test_naming_the_wrong_table_as_tied_is_an_error(self):
    with self.assertRaisesRegex(ValueError, "'wpe/embedding'.*only looks it up"):
      _family("gpt2_tied", tied_embedding="wpe/embedding").roles(2 * BASE)

  @parameterized.named_parameters(
      ("input_axes", {"*/c_fc/kernel": ("hidden", 1)}, r"'h_0/c_fc/kernel'.*input axes are \(0\).*sums over axes \(1\)"),
      ("vector_for_a_matrix", {"*/c_fc/kernel": "bias"}, r"'h_0/c_fc/kernel'.*'bias' \(a vector\).*contracts"),
      ("matrix_for_a_table", {"wpe/embedding": "hidden"}, r"'wpe/embedding'.*'hidden'.*only looks it up"),
  )
  def test_an_override_the_computation_contradicts_is_one_error(self, overrides, message):
    with self.assertRaisesRegex(ValueError, message):
      _family("gpt2_tied", overrides=overrides).roles(2 * BASE)

  def test_an_override_that_agrees_is_taken(self):
    roles = _family("vit", overrides=scaling.FLAX_ATTENTION).roles(2 * BASE)
    self.assertEqual(roles["encoderblock_0/MultiHeadDotProductAttention_0/query/kernel"].kind, "attn_q")
    self.assertEqual(roles["encoderblock_0/MultiHeadDotProductAttention_0/out/kernel"].in_axes, (0, 1))


class BaseModelTest(parameterized.TestCase):
  """At the base width the μP model is the model as written: its own parameters, its own outputs."""

  @parameterized.parameters(*em.MODELS)
  def test_base_width_equals_the_model_as_written(self, name):
    wp = _shared(name)
    own, mup = wp.widths.functional(BASE), wp.model_at(BASE)
    key = jax.random.key(3)
    params, state = own.init(key)
    mup_params, _ = mup.init(key)
    batch = em.MODELS[name][2](jax.random.key(1))
    self.assertEqual(jax.tree.structure(params), jax.tree.structure(mup_params))
    # The scheme's init draws the model's own parameters from the model's key (split once), so compare the
    # model's own draw from that key.
    own_params, _ = own.init(jax.random.split(key)[0])
    chex.assert_trees_all_equal(mup_params, own_params)
    np.testing.assert_allclose(mup.loss(mup_params, state, batch), own.loss(own_params, state, batch), rtol=1e-6)

  def test_wider_models_follow_the_law_from_the_base(self):
    # Under μP a hidden matrix keeps std ∝ 1/√fan_in and the embedding its base std: with GPT-2's constant 0.02
    # at every width, the hidden std falls as 1/√width from 0.02 and the tables stay at 0.02.
    wp = _shared("gpt2_untied")
    for width in (BASE, 4 * BASE):
      params, _ = jax.jit(wp.model_at(width).init)(jax.random.key(0))
      m = width / BASE
      self.assertAlmostEqual(float(jnp.std(params["h_0"]["c_fc"]["kernel"])), 0.02 / m**0.5, delta=0.002 / m**0.5)
      self.assertAlmostEqual(float(jnp.std(params["wte"]["embedding"])), 0.02, delta=0.002)
      # the readout: (base/width) · std at its base fan-in, folded: 0.02 / m
      self.assertAlmostEqual(float(jnp.std(params["lm_head"]["kernel"])), 0.02 / m, delta=0.003 / m)

  def test_paper_init_changes_the_base_model(self):
    wp = _family("gpt2_tied", init="paper")
    params, _ = jax.jit(wp.model_at(BASE).init)(jax.random.key(0))
    self.assertAlmostEqual(float(jnp.std(params["wte"]["embedding"])), 1.0, delta=0.1)


class PureModelTest(absltest.TestCase):
  """A model given as a plain JAX function (no Flax) through the same engine."""

  def test_roles_products_and_base_equality(self):
    def mlp(width):
      def init(key):
        k1, k2, k3 = jax.random.split(key, 3)
        return {"w_in": jax.random.normal(k1, (5, width)) / jnp.sqrt(5.0),
                "w_hidden": jax.random.normal(k2, (width, width)) / jnp.sqrt(width),
                "w_out": jax.random.normal(k3, (3, width)) / jnp.sqrt(width)}  # stored [out, in]

      def apply(params, x):
        h = jax.nn.relu(x @ params["w_in"])
        h = jax.nn.relu(h @ params["w_hidden"])
        return h @ params["w_out"].T

      return scaling.PureModel(init, apply)

    loss = lambda model, batch: jnp.mean((model(batch["x"]) - batch["y"]) ** 2)
    batch = {"x": jax.random.normal(jax.random.key(0), (4, 5)), "y": jnp.zeros((4, 3))}
    wp = scaling.WidthParametrization(mlp, loss, batch, "mup", base_width=8)
    roles = wp.roles(32)
    self.assertEqual({p: (r.kind, r.in_axes) for p, r in roles.items()},
                     {"w_in": ("input", (0,)), "w_hidden": ("hidden", (0,)), "w_out": ("readout", (1,))})
    fm = wp.model_at(8)
    params, state = fm.init(jax.random.key(1))
    _, outs = fm.captured(params, state, batch)
    self.assertEqual(set(outs), {"w_in", "w_hidden", "w_out"})
    own = user_model.functional_model(mlp, loss, 8, batch).init(jax.random.split(jax.random.key(1))[0])[0]
    chex.assert_trees_all_equal(params, own)


if __name__ == "__main__":
  absltest.main()


class BuiltinAsUserModelTest(absltest.TestCase):
  """The built-in Transformer is one model factory among others: the engine reads the same roles from it as a user
  model (its computation, its Kinded kinds as overrides) as ``scaling.training.model.transformer.parametrized`` does from its shapes."""

  def test_same_roles_and_multipliers(self):
    from scaling.training.model import transformer as model_lib  # pylint: disable=g-import-not-at-top
    from scaling.training.model.family import ModelFamily
    from scaling.training.loop import losses as losses_lib  # pylint: disable=g-import-not-at-top
    family = ModelFamily(depth=2, head_dim=8, base_width=16, positions="learned")
    config = lambda w: family.model_config("mup", w, vocab_size=em.VOCAB, max_len=em.SEQ)
    batch = em.lm_batch(jax.random.key(0))
    batch["weights"] = jnp.ones(batch["targets"].shape)
    loss = lambda model, b: losses_lib.weighted_cross_entropy(model(b["inputs"]), b["targets"], b["weights"])[0]
    wp = scaling.WidthParametrization(lambda w: model_lib.Transformer(config(w)), loss, batch, "mup", base_width=16)
    ours, builtin = wp.roles(64), model_lib.parametrized(config(64)).roles
    self.assertEqual(set(ours), set(builtin))
    for path, role in builtin.items():
      self.assertEqual((ours[path].kind, ours[path].mult), (role.kind, role.mult), path)
      self.assertEqual(ours[path].fans, role.fans, path)
