"""Tests for scaling.parametrization: closed-form tables, μP = SP at m = 1, paths and fans."""

import math

from absl.testing import absltest
from absl.testing import parameterized
import chex
import hypothesis
from hypothesis import strategies as st
import jax
import jax.numpy as jnp

from scaling import parametrization as P
from scaling import rules

_S = P.LayerSpec

# (scheme, kind, fan_in, fan_out, width) -> expected LayerSpec, all with base_width 64.
# Numbers written out by hand from the tables in the module docstring.
_CLOSED_FORM = [
    # SP
    ("sp", "embedding", 100, 256, 256, _S(1.0, 1.0, 1.0, 1.0)),
    ("sp", "hidden", 256, 1024, 256, _S(0.0625, 1.0, 1.0, 1.0)),
    ("sp", "hidden", 1024, 256, 256, _S(0.03125, 1.0, 1.0, 1.0)),
    ("sp", "hidden", 64, 256, 64, _S(0.125, 1.0, 1.0, 1.0)),
    ("sp", "attn_q", 256, 256, 256, _S(0.0625, 1.0, 1.0, 1.0)),
    ("sp", "attn_o", 512, 256, 256, _S(0.04419417382415922, 1.0, 1.0, 1.0)),
    ("sp", "readout", 256, 100, 256, _S(0.0625, 1.0, 1.0, 1.0)),
    ("sp", "bias", 1, 1024, 256, _S(0.0, 1.0, 1.0, 1.0)),
    ("sp", "norm", 1, 256, 256, _S(0.0, 1.0, 1.0, 1.0, init_mean=1.0)),
    # NTK, m = 4
    ("ntk", "embedding", 100, 256, 256, _S(1.0, 1.0, 0.5, 1.0)),
    ("ntk", "hidden", 256, 1024, 256, _S(1.0, 0.0625, 0.25, 1.0)),
    ("ntk", "hidden", 1024, 256, 256, _S(1.0, 0.03125, 0.25, 1.0)),
    ("ntk", "attn_k", 256, 256, 256, _S(1.0, 0.0625, 0.25, 1.0)),
    ("ntk", "readout", 256, 100, 256, _S(1.0, 0.0625, 0.5, 1.0)),
    ("ntk", "bias", 1, 1024, 256, _S(0.0, 1.0, 0.5, 1.0)),
    ("ntk", "norm", 1, 256, 256, _S(0.0, 1.0, 0.5, 1.0, init_mean=1.0)),
    # NTK, m = 1/4
    ("ntk", "hidden", 16, 64, 16, _S(1.0, 0.25, 4.0, 1.0)),
    ("ntk", "readout", 16, 100, 16, _S(1.0, 0.25, 2.0, 1.0)),
    ("ntk", "embedding", 100, 16, 16, _S(1.0, 1.0, 2.0, 1.0)),
    # muP, m = 4
    ("mup", "embedding", 100, 256, 256, _S(1.0, 1.0, 1.0, 4.0)),
    ("mup", "hidden", 256, 1024, 256, _S(0.0625, 1.0, 0.25, 1.0)),
    ("mup", "hidden", 1024, 256, 256, _S(0.03125, 1.0, 0.25, 1.0)),
    ("mup", "attn_q", 256, 256, 256, _S(0.0625, 1.0, 0.25, 1.0)),
    ("mup", "attn_v", 256, 256, 256, _S(0.0625, 1.0, 0.25, 1.0)),
    ("mup", "readout", 256, 100, 256, _S(0.0625, 0.25, 1.0, 4.0)),
    ("mup", "bias", 1, 1024, 256, _S(0.0, 1.0, 1.0, 4.0)),
    ("mup", "norm", 1, 256, 256, _S(0.0, 1.0, 1.0, 4.0, init_mean=1.0)),
    # muP, m = 2
    ("mup", "hidden", 128, 512, 128, _S(0.08838834764831845, 1.0, 0.5, 1.0)),
    ("mup", "readout", 128, 100, 128, _S(0.08838834764831845, 0.5, 1.0, 2.0)),
    ("mup", "embedding", 100, 128, 128, _S(1.0, 1.0, 1.0, 2.0)),
    ("mup", "bias", 1, 512, 128, _S(0.0, 1.0, 1.0, 2.0)),
    # u-muP (absolute fans; width only enters through them)
    ("umup", "embedding", 100, 256, 256, _S(1.0, 1.0, 0.0625, 256.0)),
    ("umup", "hidden", 256, 1024, 256, _S(1.0, 0.0625, 0.0625, 256.0)),
    ("umup", "hidden", 1024, 256, 256, _S(1.0, 0.03125, 0.03125, 1024.0)),
    ("umup", "attn_o", 256, 256, 256, _S(1.0, 0.0625, 0.0625, 256.0)),
    ("umup", "readout", 256, 100, 256, _S(1.0, 0.00390625, 1.0, 256.0)),
    ("umup", "bias", 1, 1024, 256, _S(0.0, 1.0, 1.0, 1024.0)),
    ("umup", "norm", 1, 256, 256, _S(0.0, 1.0, 1.0, 256.0, init_mean=1.0)),
    ("umup", "hidden", 64, 256, 64, _S(1.0, 0.125, 0.125, 64.0)),
    ("umup", "embedding", 100, 64, 64, _S(1.0, 1.0, 0.125, 64.0)),
]


def _assert_spec_close(test, got, want):
  for field in ("init_std", "multiplier", "lr_adam", "lr_sgd", "init_mean"):
    test.assertAlmostEqual(getattr(got, field), getattr(want, field), places=12, msg=field)


class ClosedFormTest(parameterized.TestCase):

  @parameterized.parameters(*_CLOSED_FORM)
  def test_formula(self, scheme, kind, fan_in, fan_out, width, want):
    got = P.get_parametrization(scheme, base_width=64).layer(kind, fan_in, fan_out, width)
    self.assertIsInstance(got, P.LayerSpec)
    _assert_spec_close(self, got, want)

  def test_mup_readout_and_hidden_at_m4(self):
    mup = P.get_parametrization("mup", base_width=32)
    self.assertEqual(mup.width_mult(128), 4.0)
    self.assertEqual(mup.layer("readout", 128, 50, 128).multiplier, 0.25)
    for kind in ("hidden", "attn_q", "attn_k", "attn_v", "attn_o"):
      self.assertEqual(mup.layer(kind, 128, 512, 128).lr_adam, 0.25)
    for kind in ("embedding", "bias", "norm", "readout"):
      self.assertEqual(mup.layer(kind, 1 if kind in ("bias", "norm") else 50, 128, 128).lr_adam, 1.0)

  def test_lr_by_optimizer_name(self):
    spec = P.get_parametrization("mup").layer("embedding", 10, 256, 256)
    self.assertEqual(spec.lr("adam"), 1.0)
    self.assertEqual(spec.lr("adamw"), 1.0)
    self.assertEqual(spec.lr("sgd"), 4.0)
    with self.assertRaisesRegex(ValueError, "unknown optimizer"):
      spec.lr("lion")


class MupEqualsSpAtBaseTest(parameterized.TestCase):

  @hypothesis.settings(max_examples=60, deadline=None)
  @hypothesis.given(
      kind=st.sampled_from(P.LAYER_KINDS),
      base_width=st.integers(1, 4096),
      fan_in=st.integers(1, 8192),
      fan_out=st.integers(1, 8192),
  )
  def test_every_kind(self, kind, base_width, fan_in, fan_out):
    if kind in P.VECTOR_KINDS:
      fan_in = 1
    sp = P.get_parametrization("sp", base_width=base_width).layer(kind, fan_in, fan_out, base_width)
    mup = P.get_parametrization("mup", base_width=base_width).layer(kind, fan_in, fan_out, base_width)
    self.assertEqual(sp, mup)

  def test_attention_rules_agree_at_base_head_dim(self):
    for base_head_dim in (16, 64, 128):
      mup = P.get_parametrization("mup", base_head_dim=base_head_dim).attention_rule()
      self.assertAlmostEqual(mup.logit_scale(base_head_dim), 1.0 / math.sqrt(base_head_dim), places=12)
      self.assertAlmostEqual(rules.SqrtScale().logit_scale(base_head_dim), 1.0 / math.sqrt(base_head_dim))

  def test_zero_options_are_the_only_difference(self):
    sp = P.get_parametrization("sp", base_width=64)
    mup = P.get_parametrization("mup", base_width=64, zero_query=True, zero_readout=True)
    for kind in P.LAYER_KINDS:
      fan_in = 1 if kind in P.VECTOR_KINDS else 64
      a, b = sp.layer(kind, fan_in, 64, 64), mup.layer(kind, fan_in, 64, 64)
      if kind in ("attn_q", "readout"):
        self.assertEqual(b.init_std, 0.0)
        self.assertEqual(a.init_std, 0.125)
        self.assertEqual((a.multiplier, a.lr_adam, a.lr_sgd), (b.multiplier, b.lr_adam, b.lr_sgd))
      else:
        self.assertEqual(a, b)


def _exponent(scheme, kind, quantity):
  """Width exponent of a quantity, from widths 64 and 256 with fans that grow with width."""
  values = []
  for width in (64, 256):
    fan_in, fan_out = {
        "embedding": (100, width), "readout": (width, 100), "bias": (1, 4 * width), "norm": (1, width),
    }.get(kind, (width, 4 * width))
    values.append(quantity(P.get_parametrization(scheme, base_width=64).layer(kind, fan_in, fan_out, width)))
  return math.log(values[1] / values[0]) / math.log(4)


class AbcSymmetryTest(parameterized.TestCase):
  """μP and u-μP differ by an abc-symmetry (TP5), so their effective scalings agree."""

  @parameterized.parameters(*P.LAYER_KINDS)
  def test_sgd_effective_update(self, kind):
    # Under SGD the effective weight A·w moves by A²·C·(dL/d(Aw)).
    q = lambda s: s.multiplier**2 * s.lr_sgd
    self.assertAlmostEqual(_exponent("mup", kind, q), _exponent("umup", kind, q), places=9)

  @parameterized.parameters(*[k for k in P.LAYER_KINDS if k != "embedding"])
  def test_adam_effective_update(self, kind):
    # Under Adam the effective weight moves by A·C·Φ; u-μP's embedding rule deliberately differs.
    q = lambda s: s.multiplier * s.lr_adam
    self.assertAlmostEqual(_exponent("mup", kind, q), _exponent("umup", kind, q), places=9)

  def test_umup_embedding_adam_differs_from_mup(self):
    q = lambda s: s.multiplier * s.lr_adam
    self.assertAlmostEqual(_exponent("mup", "embedding", q), 0.0, places=9)
    self.assertAlmostEqual(_exponent("umup", "embedding", q), -0.5, places=9)

  @parameterized.parameters("embedding", "hidden", "attn_q", "attn_o")
  def test_effective_init(self, kind):
    q = lambda s: s.multiplier * s.init_std
    self.assertAlmostEqual(_exponent("mup", kind, q), _exponent("umup", kind, q), places=9)

  @parameterized.parameters("hidden", "attn_q", "attn_k", "attn_v", "attn_o", "readout")
  def test_ntk_effective_init_equals_sp(self, kind):
    # NTK's A·B = 1/√fan_in is SP's fan-in init (TP4 §3).
    for fan_in in (7, 64, 300):
      ntk = P.get_parametrization("ntk").layer(kind, fan_in, 32, 64)
      sp = P.get_parametrization("sp").layer(kind, fan_in, 32, 64)
      self.assertAlmostEqual(ntk.multiplier * ntk.init_std, sp.init_std, places=12)


class AttentionRuleTest(parameterized.TestCase):

  def test_sp_and_ntk_use_sqrt(self):
    for name in ("sp", "ntk"):
      rule = P.get_parametrization(name).attention_rule()
      self.assertIsInstance(rule, rules.SqrtScale)
      self.assertAlmostEqual(rule.logit_scale(64), 0.125)

  def test_mup_linear(self):
    rule = P.get_parametrization("mup").attention_rule()
    self.assertIsInstance(rule, rules.LinearScale)
    self.assertAlmostEqual(rule.logit_scale(64), 0.125)
    self.assertAlmostEqual(rule.logit_scale(128), 0.0625)
    self.assertAlmostEqual(rule.logit_scale(16), 0.5)
    rule32 = P.get_parametrization("mup", base_head_dim=32).attention_rule()
    self.assertAlmostEqual(rule32.logit_scale(128), math.sqrt(32) / 128)

  def test_umup_alpha_over_d(self):
    rule = P.get_parametrization("umup").attention_rule()
    self.assertIsInstance(rule, rules.LinearScale)
    self.assertAlmostEqual(rule.logit_scale(64), 1 / 64)
    self.assertAlmostEqual(P.get_parametrization("umup", attn_mult=4.0).attention_rule().logit_scale(64), 4 / 64)


class RegistryTest(parameterized.TestCase):

  def test_available(self):
    self.assertEqual(P.available_parametrizations(), ("sp", "ntk", "mup", "umup"))
    for name in P.available_parametrizations():
      p = P.get_parametrization(name, base_width=32, base_head_dim=16)
      self.assertEqual((p.name, p.base_width, p.base_head_dim), (name, 32, 16))
      self.assertFalse(p.zero_query or p.zero_readout)
      hash(p)  # frozen: usable as a static jit argument

  @parameterized.parameters("nope", "MUP", "", None, 3)
  def test_unknown_name(self, name):
    with self.assertRaisesRegex(ValueError, "unknown parametrization.*known: sp, ntk, mup, umup"):
      P.get_parametrization(name)

  @parameterized.parameters(
      ("sp", {"attn_mult": 2.0}, "unknown option.*attn_mult"),
      ("mup", {"zero_keys": True}, "unknown option.*zero_keys"),
      ("mup", {"zero_query": "yes"}, "zero_query must be a bool"),
      ("umup", {"attn_mult": 0.0}, "attn_mult must be a finite positive"),
      ("umup", {"attn_mult": float("nan")}, "attn_mult must be a finite positive"),
      ("mup", {"base_width": 0}, "base_width must be a positive integer"),
      ("mup", {"base_width": 64.5}, "base_width must be a positive integer"),
      ("sp", {"base_width": True}, "base_width must be a positive integer"),
      ("mup", {"base_head_dim": -8}, "base_head_dim must be a positive integer"),
  )
  def test_bad_options(self, name, options, message):
    with self.assertRaisesRegex(ValueError, message):
      P.get_parametrization(name, **options)

  @parameterized.parameters(
      ("weird", 4, 4, 4, "unknown layer kind 'weird'"),
      ("hidden", 0, 4, 4, "fan_in must be a positive integer"),
      ("hidden", 4, -3, 4, "fan_out must be a positive integer"),
      ("hidden", 4, 4, 0, "width must be a positive integer"),
      ("hidden", 4, 4, 1.5, "width must be a positive integer"),
      ("bias", 1, 4, -1, "width must be a positive integer"),
  )
  def test_bad_layer_arguments(self, kind, fan_in, fan_out, width, message):
    for name in P.available_parametrizations():
      with self.assertRaisesRegex(ValueError, message):
        P.get_parametrization(name).layer(kind, fan_in, fan_out, width)

  def test_width_mult(self):
    self.assertEqual(P.get_parametrization("mup", base_width=64).width_mult(16), 0.25)
    with self.assertRaisesRegex(ValueError, "width"):
      P.get_parametrization("mup").width_mult(0)


class LayerKindTest(parameterized.TestCase):

  @parameterized.parameters(
      (("embed", "embedding"), "embedding"),
      (("pos_embed", "embedding"), "embedding"),
      (("block_0", "attn", "query", "kernel"), "attn_q"),
      (("block_0", "attn", "key", "kernel"), "attn_k"),
      (("block_0", "attn", "value", "kernel"), "attn_v"),
      (("block_11", "attn", "out", "kernel"), "attn_o"),
      (("block_2", "mlp", "fc_in", "kernel"), "hidden"),
      (("block_2", "mlp", "fc_out", "kernel"), "hidden"),
      (("block_0", "mlp", "fc_in", "bias"), "bias"),
      (("block_0", "attn", "out", "bias"), "bias"),
      (("block_0", "ln_attn", "bias"), "bias"),
      (("block_0", "ln_attn", "scale"), "norm"),
      (("block_5", "ln_mlp", "scale"), "norm"),
      (("ln_final", "scale"), "norm"),
      (("block_0", "attn", "query_gain"), "norm"),
      (("block_0", "attn", "key_gain"), "norm"),
      (("readout", "kernel"), "readout"),
      (("params", "readout", "kernel"), "readout"),
      (("params", "block_0", "attn", "query", "kernel"), "attn_q"),
      ("block_0/mlp/fc_out/kernel", "hidden"),
  )
  def test_known(self, path, kind):
    self.assertEqual(P.layer_kind(path), kind)

  @parameterized.parameters(
      ("block_0", "attn", "foo", "kernel"),
      ("block_0", "attn", "query", "weight"),
      ("fc_in", "kernel"),
      ("block_0", "mlp", "query", "kernel"),
      ("readout", "scale"),
      ("embed", "kernel"),
      ("embedding",),
      ("block_0", "attn", "value_gain"),
      ("block_0", "ln_attn", "weight"),
      ("block_0", "norm", "scale"),
      (),
  )
  def test_unknown_raises_naming_path(self, *path):
    with self.assertRaisesRegex(ValueError, "cannot tell the layer kind") as ctx:
      P.layer_kind(path)
    self.assertIn("/".join(path), str(ctx.exception))

  def test_jax_key_paths(self):
    tree = {"block_0": {"attn": {"query": {"kernel": 1}, "key_gain": 2}}, "ln_final": {"scale": 3}}
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    kinds = {P.path_names(path): P.layer_kind(path) for path, _ in leaves}
    self.assertEqual(kinds, {
        ("block_0", "attn", "key_gain"): "norm",
        ("block_0", "attn", "query", "kernel"): "attn_q",
        ("ln_final", "scale"): "norm",
    })


class FansTest(parameterized.TestCase):

  @parameterized.parameters(
      ("embedding", (100, 32), (100, 32)),
      ("hidden", (32, 128), (32, 128)),
      ("hidden", (128, 32), (128, 32)),
      ("attn_q", (32, 64), (32, 64)),
      ("attn_k", (32, 4, 8), (32, 32)),
      ("attn_v", (32, 16), (32, 16)),
      ("attn_o", (64, 32), (64, 32)),
      ("attn_o", (4, 16, 32), (64, 32)),
      ("readout", (32, 100), (32, 100)),
      ("bias", (128,), (1, 128)),
      ("bias", (4, 16), (1, 64)),
      ("norm", (32,), (1, 32)),
      ("norm", (), (1, 1)),
  )
  def test_fans(self, kind, shape, want):
    self.assertEqual(P.fans(kind, shape), want)

  @parameterized.parameters(
      ("embedding", (100,), "embedding parameter must be"),
      ("embedding", (2, 3, 4), "embedding parameter must be"),
      ("hidden", (32,), "at least 2 axes"),
      ("readout", (0, 10), "empty or negative axis"),
      ("bias", (0,), "empty or negative axis"),
      ("conv", (3, 3), "unknown layer kind"),
      ("hidden", (2.5, 3), "sequence of integers"),
  )
  def test_bad(self, kind, shape, message):
    with self.assertRaisesRegex(ValueError, message):
      P.fans(kind, shape)


def _contract_params(d=16, v=12, f=64):
  z = jnp.zeros
  return {
      "embed": {"embedding": z((v, d))},
      "block_0": {
          "ln_attn": {"scale": z((d,))},
          "attn": {"query": {"kernel": z((d, d))}, "key": {"kernel": z((d, d // 2))},
                   "value": {"kernel": z((d, d // 2))}, "out": {"kernel": z((d, d))},
                   "query_gain": z((4,))},
          "ln_mlp": {"scale": z((d,))},
          "mlp": {"fc_in": {"kernel": z((d, f)), "bias": z((f,))}, "fc_out": {"kernel": z((f, d))}},
      },
      "ln_final": {"scale": z((d,))},
      "readout": {"kernel": z((d, v))},
  }


class ParamSpecsTest(chex.TestCase):

  def test_structure_and_values(self):
    params = _contract_params()
    specs = P.param_specs(params, P.get_parametrization("mup", base_width=4), 16)
    is_spec = lambda x: isinstance(x, P.LayerSpec)
    self.assertEqual(jax.tree.structure(specs, is_leaf=is_spec), jax.tree.structure(params))
    self.assertTrue(all(is_spec(s) for s in jax.tree.leaves(specs, is_leaf=is_spec)))
    self.assertEqual(specs["readout"]["kernel"], P.LayerSpec(0.25, 0.25, 1.0, 4.0))
    self.assertEqual(specs["block_0"]["mlp"]["fc_out"]["kernel"], P.LayerSpec(0.125, 1.0, 0.25, 1.0))
    self.assertEqual(specs["block_0"]["attn"]["key"]["kernel"], P.LayerSpec(0.25, 1.0, 0.25, 1.0))
    self.assertEqual(specs["block_0"]["mlp"]["fc_in"]["bias"], P.LayerSpec(0.0, 1.0, 1.0, 4.0))
    self.assertEqual(specs["block_0"]["attn"]["query_gain"], P.LayerSpec(0.0, 1.0, 1.0, 4.0, 1.0))
    self.assertEqual(specs["embed"]["embedding"], P.LayerSpec(1.0, 1.0, 1.0, 4.0))

  def test_by_name_and_shape_structs(self):
    params = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), _contract_params())
    specs = P.param_specs(params, "umup", 16)
    self.assertEqual(specs["block_0"]["mlp"]["fc_out"]["kernel"], P.LayerSpec(1.0, 0.125, 0.125, 64.0))
    self.assertEqual(specs["readout"]["kernel"], P.LayerSpec(1.0, 1 / 16, 1.0, 16.0))

  def test_unknown_path_named(self):
    params = _contract_params()
    params["block_0"]["attn"]["rotary"] = {"kernel": jnp.zeros((4, 4))}
    with self.assertRaisesRegex(ValueError, "block_0/attn/rotary/kernel"):
      P.param_specs(params, "sp", 16)

  def test_bad_shape_named(self):
    with self.assertRaisesRegex(ValueError, "parameter 'readout/kernel'.*at least 2 axes"):
      P.param_specs({"readout": {"kernel": jnp.zeros((4,))}}, "sp", 16)

  def test_bad_width(self):
    with self.assertRaisesRegex(ValueError, "width must be a positive integer"):
      P.param_specs(_contract_params(), "sp", 0)


if __name__ == "__main__":
  absltest.main()
