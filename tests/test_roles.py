"""Tests for scaling.mup.roles: roles inferred from shapes against the built-in Transformer's Kinded metadata, tables
written here for Flax's layers (linen and nnx), overrides, and the errors for roles that shapes cannot decide."""

import dataclasses

from absl.testing import absltest
from absl.testing import parameterized
import chex
import flax.linen as nn
from flax import nnx
import jax
import jax.numpy as jnp

import scaling
from scaling.training.model import transformer as model_lib
from scaling.training.model.family import ModelFamily
from scaling.mup import roles as roles_lib
from scaling.mup import usage as usage_lib


def _shapes(module, *inputs):
  """The params of a linen module as jax.ShapeDtypeStructs (no compute)."""
  return jax.eval_shape(lambda: module.init(jax.random.key(0), *inputs))["params"]


class _Mlp(nn.Module):
  width: int
  hidden_ratio: int = 1

  @nn.compact
  def __call__(self, x):
    h = nn.relu(nn.Dense(self.width, name="fc_in")(x))
    h = nn.relu(nn.Dense(self.hidden_ratio * self.width, name="fc_hidden")(h))
    h = nn.LayerNorm(name="ln")(h)
    return nn.Dense(10, name="readout")(h)


class _Layouts(nn.Module):
  """Flax's multi-axis kernels: Conv [kh, kw, in, out], MHA's DenseGeneral q/k/v [D, N, H] and out [N, H, D]."""
  width: int

  @nn.compact
  def __call__(self, tokens):
    x = nn.Embed(50, self.width, name="embed")(tokens)
    x = nn.Conv(self.width, (3,), name="conv")(x)
    x = nn.MultiHeadDotProductAttention(num_heads=self.width // 8, name="attn")(x)
    return nn.Dense(50, use_bias=False, name="readout")(x)


class _Tied(nn.Module):
  width: int

  @nn.compact
  def __call__(self, tokens):
    embed = nn.Embed(50, self.width, name="embed")
    return embed.attend(nn.Dense(self.width, name="hidden")(embed(tokens)))


class _NnxMlp(nnx.Module):

  def __init__(self, width, rngs):
    self.fc_in = nnx.Linear(5, width, rngs=rngs)
    self.embed = nnx.Embed(50, width, rngs=rngs)
    self.ln = nnx.LayerNorm(width, rngs=rngs)
    self.attn = nnx.MultiHeadAttention(num_heads=width // 8, in_features=width, decode=False, rngs=rngs)
    self.out = nnx.Linear(width, 3, rngs=rngs)


def _transformer_shapes(family, width, **config):
  cfg = dataclasses.replace(family.model_config("mup", width, vocab_size=40, max_len=16), **config)
  return jax.eval_shape(lambda: model_lib.init_params(jax.random.key(0), cfg)), model_lib.param_kinds(cfg)


class TransformerRolesTest(parameterized.TestCase):
  """The built-in Transformer's Kinded metadata is an independent record of every parameter's kind."""

  @parameterized.named_parameters(
      # heads fixed (the head dim grows), rotary positions, no biases
      ("heads_fixed", {}, (32, 64), {}),
      # the head dim fixed (heads grow), learned positions, biases (ln_final's bias is final_bias)
      ("head_dim_fixed", {"head_dim": 16}, (64, 96), {"use_bias": True, "positions": "learned"}),
  )
  def test_kinds_equal_metadata(self, family_options, widths, config):
    family = ModelFamily(**family_options).with_base_width(widths)
    (base, _), (delta, want) = (_transformer_shapes(family, w, **config) for w in widths)
    roles = scaling.infer_kinds(base, delta, overrides=scaling.FLAX_ATTENTION, blocks="block_*")
    chex.assert_trees_all_equal(roles.kinds(), want)
    self.assertIn("block_0/attn/query/kernel", roles)
    if config:
      self.assertEqual(roles["ln_final/bias"].kind, "final_bias")
      self.assertEqual(roles["pos_embed/embedding"].kind, "embedding")

  def test_kinded_boxes_are_read(self):
    # Boxed trees (as Module.init makes them) carry their kinds: no override is needed for q, k, v, o.
    family = ModelFamily().with_base_width((32, 64))
    model = lambda w: model_lib.Transformer(family.model_config("mup", w, vocab_size=40, max_len=16))
    boxed = [_shapes(model(w), jnp.zeros((1, 8), jnp.int32)) for w in (32, 64)]
    roles = scaling.infer_kinds(*boxed)
    self.assertEqual(roles["block_1/attn/key/kernel"].kind, "attn_k")
    self.assertEqual(roles["ln_final/scale"].kind, "final_norm")


class LinenRolesTest(parameterized.TestCase):

  def test_mlp_table(self):
    # Widths 16 (base), 32 (delta), 128 (target) with a hidden layer 2·width wide, written out: fc_in [5, w] is an
    # input layer, fc_hidden [w, 2w] hidden, the readout [2w, 10] a readout, its bias [10] fixed, the rest vectors;
    # m is the fan-in ratio for hidden and readout, the fan-out ratio for the rest: 128/16 = 256/32 = 8.
    shapes = lambda w: _shapes(_Mlp(w, hidden_ratio=2), jnp.zeros((1, 5)))
    roles = scaling.infer_kinds(shapes(16), shapes(32), shapes(128))
    want = {"fc_in/kernel": ("input", (5, 128), 8.0), "fc_in/bias": ("bias", (1, 128), 8.0),
            "fc_hidden/kernel": ("hidden", (128, 256), 8.0), "fc_hidden/bias": ("bias", (1, 256), 8.0),
            "ln/scale": ("norm", (1, 256), 8.0), "ln/bias": ("bias", (1, 256), 8.0),
            "readout/kernel": ("readout", (256, 10), 8.0), "readout/bias": ("fixed", (1, 10), 1.0)}
    self.assertEqual({p: (r.kind, r.fans, r.mult) for p, r in roles.items()}, want)
    self.assertEqual(roles["fc_hidden/kernel"].grown, (0, 1))
    self.assertEqual(roles["fc_hidden/kernel"].base_shape, (16, 32))

  def test_layouts(self):
    shapes = lambda w: _shapes(_Layouts(w), jnp.zeros((1, 4), jnp.int32))
    roles = scaling.infer_kinds(shapes(16), shapes(32), overrides=scaling.FLAX_ATTENTION)
    got = {p: (r.kind, r.fans) for p, r in roles.items() if not p.endswith("bias")}
    # Conv [3, 32, 32]: fan-in 3·32 (kernel window and input channels); q [32, 4, 8]; out [4, 8, 32].
    self.assertEqual(got, {"embed/embedding": ("embedding", (50, 32)), "conv/kernel": ("hidden", (96, 32)),
                           "attn/query/kernel": ("attn_q", (32, 32)), "attn/key/kernel": ("attn_k", (32, 32)),
                           "attn/value/kernel": ("attn_v", (32, 32)), "attn/out/kernel": ("attn_o", (32, 32)),
                           "readout/kernel": ("readout", (32, 50))})
    self.assertEqual(roles["attn/query/bias"].kind, "bias")
    # Without the attention overrides the projections are hidden matrices with the same layouts.
    plain = scaling.infer_kinds(shapes(16), shapes(32))
    self.assertEqual((plain["attn/out/kernel"].kind, plain["attn/out/kernel"].fans), ("hidden", (32, 32)))

  def test_overrides_by_pattern(self):
    shapes = lambda w: _shapes(_Mlp(w), jnp.zeros((1, 5)))
    roles = scaling.infer_kinds(shapes(16), shapes(32), overrides={"*hidden/kernel": "attn_v", "ln/*": "final_norm"})
    self.assertEqual(roles["fc_hidden/kernel"].kind, "attn_v")
    self.assertEqual((roles["ln/scale"].kind, roles["ln/bias"].kind), ("final_norm", "final_norm"))
    blocks = scaling.infer_kinds(shapes(16), shapes(32), blocks="fc_*")
    self.assertEqual((blocks["ln/scale"].kind, blocks["fc_in/bias"].kind), ("final_norm", "bias"))

  def test_variables_dict(self):
    base, delta = (jax.eval_shape(lambda w=w: _Mlp(w).init(jax.random.key(0), jnp.zeros((1, 5)))) for w in (16, 32))
    self.assertEqual(scaling.infer_kinds(base, delta)["fc_hidden/kernel"].kind, "hidden")
    base, delta = ({**v, "batch_stats": {"bn": {"mean": jnp.zeros(3)}}} for v in (base, delta))
    self.assertLen(scaling.infer_kinds(base, delta), 8)  # the params only

  def test_tied_embedding(self):
    shapes = lambda w: _shapes(_Tied(w), jnp.zeros((1, 4), jnp.int32))
    with self.assertRaisesRegex(ValueError, r"embed/embedding: if one is also the readout.*tied_embedding"):
      scaling.infer_kinds(shapes(16), shapes(32))
    roles = scaling.infer_kinds(shapes(16), shapes(32), tied_embedding="embed/embedding")
    self.assertEqual((roles["embed/embedding"].kind, roles.tied_embedding), ("embedding", "embed/embedding"))
    with self.assertRaisesRegex(ValueError, "tied_embedding='hidden/kernel' is not an embedding"):
      scaling.infer_kinds(shapes(16), shapes(32), tied_embedding="hidden/kernel")
    # From the computation the tie needs no name: the table is gathered and contracted with the last hidden state.
    tokens = jnp.zeros((1, 4), jnp.int32)
    model = _Tied(16)
    params = model.init(jax.random.key(0), tokens)["params"]
    use = usage_lib.read_usage(lambda p: model.apply({"params": p}, tokens), params)
    roles = scaling.infer_kinds(shapes(16), shapes(32), usage=use)
    self.assertEqual(roles.tied_embedding, "embed/embedding")
    self.assertEqual(roles["embed/embedding"].in_axes, (0,))


class ErrorsTest(parameterized.TestCase):

  def test_undecidable_kernel(self):
    # A kernel whose every axis is the same at both widths: one error naming it and what to pass.
    base = {"stem": {"kernel": jnp.zeros((5, 7))}, "fc": {"kernel": jnp.zeros((7, 16))},
            "out": {"kernel": jnp.zeros((16, 3))}}
    delta = {"stem": {"kernel": jnp.zeros((5, 7))}, "fc": {"kernel": jnp.zeros((7, 32))},
             "out": {"kernel": jnp.zeros((32, 3))}}
    with self.assertRaisesRegex(ValueError, r"parameter 'stem/kernel'.*overrides=\{'stem/kernel': 'fixed'\}"):
      scaling.infer_kinds(base, delta)
    roles = scaling.infer_kinds(base, delta, overrides={"stem/*": "fixed"})
    self.assertEqual([r.kind for r in roles.values()], ["input", "readout", "fixed"])

  def test_ambiguous_multi_axis_kernel(self):
    base, delta = {"w": {"kernel": jnp.zeros((8, 2, 4))}}, {"w": {"kernel": jnp.zeros((16, 4, 4))}}
    with self.assertRaisesRegex(ValueError, r"'w/kernel'.*input axes.*overrides=\{'w/kernel': \('hidden', 1\)\} "
                                r"\(if its first axis is its input\), or \{'w/kernel': \('readout', 2\)\}"):
      scaling.infer_kinds(base, delta)
    self.assertEqual(scaling.infer_kinds(base, delta, overrides={"w/kernel": ("readout", 2)})["w/kernel"].fans,
                     (64, 4))
    roles = scaling.infer_kinds(base, delta, overrides={"w/kernel": ("hidden", 2)})
    self.assertEqual(roles["w/kernel"].fans, (64, 4))
    with self.assertRaisesRegex(ValueError, r"parameter 'w/kernel' as hidden: in_axes must be an integer in \[1, 2\]"):
      scaling.infer_kinds(base, delta, overrides={"w/kernel": ("hidden", 3)})
    with self.assertRaisesRegex(ValueError, "parameter 'w/kernel' as embedding: embedding parameter must be"):
      scaling.infer_kinds(base, delta, overrides={"w/kernel": "embedding"})

  @parameterized.named_parameters(
      ("same_shapes", {"a": jnp.zeros((4, 4))}, {"a": jnp.zeros((4, 4))}, "same parameter shapes"),
      ("different_trees", {"a": jnp.zeros((4, 4))}, {"b": jnp.zeros((8, 4))}, "different parameters: a, b"),
      ("rank", {"a": jnp.zeros((4, 4))}, {"a": jnp.zeros((8,))}, "'a' has rank 2, 1"),
      ("vocab_grows", {"embed": {"embedding": jnp.zeros((4, 4))}}, {"embed": {"embedding": jnp.zeros((8, 8))}},
       "'embed/embedding'.*vocabulary axis grows"),
      ("bad_override", {"a": jnp.zeros((4, 4))}, {"a": jnp.zeros((8, 8))}, "overrides\\['a'\\].*unknown layer kind"),
  )
  def test_bad_inputs(self, base, delta, message):
    overrides = {"a": "conv"} if "override" in message else None
    with self.assertRaisesRegex(ValueError, message):
      scaling.infer_kinds(base, delta, overrides=overrides)

  def test_target_must_follow_delta(self):
    base, delta, target = ({"a": {"kernel": jnp.zeros(s)}, "o": {"kernel": jnp.zeros((s[1], 3))}}
                           for s in ((4, 8), (4, 16), (6, 32)))
    with self.assertRaisesRegex(ValueError, r"'a/kernel': axes \[0\] differ between base"):
      scaling.infer_kinds(base, delta, target)

  def test_not_an_array(self):
    with self.assertRaisesRegex(TypeError, "base: parameter 'a' is a str"):
      scaling.infer_kinds({"a": "x"}, {"a": "y"})


class NnxRolesTest(absltest.TestCase):

  def test_nnx_mlp(self):
    abstract = lambda w: nnx.eval_shape(lambda: _NnxMlp(w, nnx.Rngs(0)))
    roles = scaling.infer_kinds(abstract(16), abstract(32), overrides=scaling.FLAX_ATTENTION)
    got = {p: (r.kind, r.fans) for p, r in roles.items() if not p.endswith("bias")}
    self.assertEqual(got, {"fc_in/kernel": ("input", (5, 32)), "embed/embedding": ("embedding", (50, 32)),
                           "ln/scale": ("norm", (1, 32)),
                           "attn/query/kernel": ("attn_q", (32, 32)), "attn/key/kernel": ("attn_k", (32, 32)),
                           "attn/value/kernel": ("attn_v", (32, 32)), "attn/out/kernel": ("attn_o", (32, 32)),
                           "out/kernel": ("readout", (32, 3))})
    self.assertEqual(roles["out/bias"].kind, "fixed")
    # An nnx State and the Module give the same roles; kinds() has the State's pure-dict structure.
    model = _NnxMlp(16, nnx.Rngs(0))
    again = scaling.infer_kinds(nnx.state(model, nnx.Param), abstract(32), overrides=scaling.FLAX_ATTENTION)
    self.assertEqual(again.kinds(), roles.kinds())
    self.assertEqual(again.kinds()["attn"]["query"]["kernel"], "attn_q")

  def test_path_key(self):
    path = (jax.tree_util.DictKey("fc"), jax.tree_util.DictKey("kernel"), jax.tree_util.GetAttrKey("value"))
    self.assertEqual(roles_lib.path_key(path), "fc/kernel")

if __name__ == "__main__":
  absltest.main()
