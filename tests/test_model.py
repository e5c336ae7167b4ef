"""The transformer: shapes, causality by Jacobian, init against the parametrization, aux metrics by hand."""

import math

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

import scaling
from scaling import model as model_lib
from scaling import parametrization as param_lib
from scaling import rules

V = 13


def _config(**kw):
  base = dict(vocab_size=V, width=16, depth=1, num_heads=2, head_dim=8, max_len=16)
  base.update(kw)
  return model_lib.ModelConfig(**base)


def _tokens(b=2, t=8, seed=1):
  return jax.random.randint(jax.random.key(seed), (b, t), 0, V)


def _params(cfg, seed=0):
  return model_lib.init_params(jax.random.PRNGKey(seed), cfg)


def _init_apply(cfg, tokens, seed=0, jit=False):
  # Eager by default: configurations with the shapes of _config() reuse the compiled ops of earlier tests.
  params = _params(cfg, seed)
  apply = model_lib.Transformer(cfg).apply
  logits, aux = (jax.jit(apply) if jit else apply)({"params": params}, tokens)
  return params, logits, aux


def _paths(params):
  return {"/".join(param_lib.path_names(p)) for p, _ in jax.tree_util.tree_flatten_with_path(params)[0]}


class ShapeAndNamesTest(parameterized.TestCase):

  def test_jit_and_eager_agree(self):
    cfg = _config()
    tokens = _tokens()
    params = _params(cfg)
    apply = model_lib.Transformer(cfg).apply
    chex.assert_trees_all_close(jax.jit(apply)({"params": params}, tokens), apply({"params": params}, tokens),
                                rtol=1e-5, atol=1e-6)

  @parameterized.named_parameters(
      # num_heads * head_dim = 8 differs from width = 16.
      ("depth2_gqa_head_dim_not_width", {"depth": 2, "num_heads": 4, "num_kv_heads": 2, "head_dim": 2}),
      ("post_ln_learned_bias_rms_mup", {"depth": 2, "num_heads": 4, "num_kv_heads": 2, "head_dim": 2,
                                        "pre_ln": False, "positions": "learned", "use_bias": True, "norm": "rms",
                                        "parametrization": "mup"}),
  )
  def test_output_shapes(self, kw):
    cfg = _config(**kw)
    tokens = _tokens(3, 7)
    _, logits, aux = _init_apply(cfg, tokens, jit=True)
    chex.assert_shape(logits, (3, 7, V))
    self.assertEqual(logits.dtype, jnp.float32)
    self.assertEqual(set(aux["layers"]), set(model_lib.LAYER_AUX_KEYS))
    for key, value in aux["layers"].items():
      chex.assert_shape(value, (cfg.depth,), custom_message=key)
    chex.assert_shape([aux["embed_rms"], aux["readout_rms"]], ())
    chex.assert_tree_all_finite((logits, aux))

  def test_parameter_names_follow_the_contract(self):
    cfg = _config(positions="learned", use_bias=True, rule="qk_norm", num_kv_heads=1)
    params = model_lib.init_params(jax.random.PRNGKey(0), cfg)
    expected = {
        "embed/embedding", "pos_embed/embedding", "ln_final/scale", "ln_final/bias", "readout/kernel",
        "block_0/ln_attn/scale", "block_0/ln_attn/bias", "block_0/ln_mlp/scale", "block_0/ln_mlp/bias",
        "block_0/attn/query_gain", "block_0/attn/key_gain",
        "block_0/mlp/fc_in/kernel", "block_0/mlp/fc_in/bias", "block_0/mlp/fc_out/kernel", "block_0/mlp/fc_out/bias",
    }
    for name in ("query", "key", "value", "out"):
      expected |= {f"block_0/attn/{name}/kernel", f"block_0/attn/{name}/bias"}
    self.assertEqual(_paths(params), expected)
    shapes = {"/".join(param_lib.path_names(k)): v.shape for k, v in jax.tree_util.tree_flatten_with_path(params)[0]}
    self.assertEqual(shapes["embed/embedding"], (V, 16))
    self.assertEqual(shapes["pos_embed/embedding"], (16, 16))
    self.assertEqual(shapes["block_0/attn/query/kernel"], (16, 2 * 8))
    self.assertEqual(shapes["block_0/attn/key/kernel"], (16, 1 * 8))
    self.assertEqual(shapes["block_0/attn/value/kernel"], (16, 1 * 8))
    self.assertEqual(shapes["block_0/attn/out/kernel"], (2 * 8, 16))
    self.assertEqual(shapes["block_0/mlp/fc_in/kernel"], (16, 64))
    self.assertEqual(shapes["block_0/attn/query_gain"], (8,))
    self.assertEqual(shapes["readout/kernel"], (16, V))
    # Every path has a kind in the parametrization's table.
    param_lib.param_specs(params, "mup", cfg.width)

  def test_post_ln_has_no_final_norm(self):
    params = model_lib.init_params(jax.random.PRNGKey(0), _config(pre_ln=False))
    self.assertNotIn("ln_final", params)

  def test_too_long_sequence_rejected(self):
    cfg = _config(max_len=8)
    with self.assertRaisesRegex(ValueError, "max_len"):
      model_lib.Transformer(cfg).init(jax.random.PRNGKey(0), _tokens(1, 9))


def _dependence(cfg, t=8, seed=0):
  """|d logits[t] / d embedded[s]| summed over vocab and width: [T, T] (row t, column s)."""
  model = model_lib.Transformer(cfg)
  tokens = _tokens(2, t)
  params = _params(cfg, seed)
  emb = jax.random.normal(jax.random.key(7), (2, t, cfg.width))
  # A random projection of the vocabulary keeps the Jacobian small: [T] outputs of sequence 0.
  proj = jax.random.normal(jax.random.key(8), (cfg.vocab_size,))
  f = lambda e: model.apply({"params": params}, tokens, embedded=e)[0][0] @ proj
  jac = jax.jit(jax.jacobian(f))(emb)  # [T, 2, T, D]
  np.testing.assert_array_equal(jac[:, 1], 0.0)  # sequences do not interact
  return np.asarray(jnp.sum(jnp.abs(jac[:, 0]), axis=-1))


class CausalityTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("rope_depth2", {"positions": "rope", "depth": 2}),
      ("learned", {"positions": "learned"}),
      ("none_post_ln_qk_norm_gqa", {"positions": "none", "pre_ln": False, "rule": "qk_norm", "num_kv_heads": 1}),
  )
  def test_future_inputs_have_zero_gradient(self, kw):
    dep = _dependence(_config(**kw))
    future = np.triu(np.ones_like(dep, bool), k=1)
    np.testing.assert_array_equal(dep[future], 0.0)
    self.assertTrue(np.all(dep[~future] > 0), "every past position should influence the output")

  def test_check_detects_a_non_causal_model(self):
    dep = _dependence(_config(causal=False))
    future = np.triu(np.ones_like(dep, bool), k=1)
    self.assertTrue(np.all(dep[future] > 0))


class VariantsTest(parameterized.TestCase):

  @parameterized.parameters(*rules.available_rules())
  def test_every_registered_rule_runs(self, rule):
    _, logits, aux = _init_apply(_config(rule=rule), _tokens())
    chex.assert_tree_all_finite((logits, aux))

  def test_qk_norm_gains_are_learnable(self):
    cfg = _config(rule="qk_norm")
    tokens = _tokens()
    model = model_lib.Transformer(cfg)
    params = _params(cfg)
    np.testing.assert_array_equal(params["block_0"]["attn"]["query_gain"], np.ones(8))
    grads = jax.jit(jax.grad(lambda p: jnp.sum(model.apply({"params": p}, tokens)[0] ** 2)))(params)
    for name in ("query_gain", "key_gain"):
      self.assertGreater(float(jnp.linalg.norm(grads["block_0"]["attn"][name])), 0.0)
    # The gains multiply the normalized q and k: doubling both quadruples every logit.
    doubled = jax.tree.map(lambda x: x, params)
    doubled["block_0"]["attn"]["query_gain"] = 2.0 * params["block_0"]["attn"]["query_gain"]
    doubled["block_0"]["attn"]["key_gain"] = 2.0 * params["block_0"]["attn"]["key_gain"]
    apply = model.apply
    a = apply({"params": params}, tokens)[1]["layers"]["attn_logits_rms"][0]
    b = apply({"params": doubled}, tokens)[1]["layers"]["attn_logits_rms"][0]
    np.testing.assert_allclose(b, 4.0 * a, rtol=1e-4)

  def test_rule_options_are_used(self):
    tokens = _tokens()
    _, _, aux1 = _init_apply(_config(rule="temperature", rule_options=(("tau", 1.0),)), tokens)
    _, _, aux2 = _init_apply(_config(rule="temperature", rule_options=(("tau", 2.0),)), tokens)
    np.testing.assert_allclose(aux2["layers"]["attn_logits_rms"][0], aux1["layers"]["attn_logits_rms"][0] / 2,
                               rtol=1e-5)

  def test_default_rule_comes_from_the_parametrization(self):
    # μP at head_dim 8 with base_head_dim 64: α/d = 8/8 = 1, i.e. √8 times SP's 1/√8.
    tokens = _tokens()
    _, _, sp = _init_apply(_config(parametrization="sp"), tokens)
    _, _, mup = _init_apply(_config(parametrization="mup"), tokens)
    np.testing.assert_allclose(mup["layers"]["attn_logits_rms"][0], math.sqrt(8) * sp["layers"]["attn_logits_rms"][0],
                               rtol=1e-5)
    _, _, explicit = _init_apply(_config(parametrization="mup", rule="sqrt"), tokens)
    np.testing.assert_allclose(explicit["layers"]["attn_logits_rms"][0], sp["layers"]["attn_logits_rms"][0],
                               rtol=1e-5)

  @parameterized.parameters("rope", "learned", "none")
  def test_positions(self, positions):
    params, logits, _ = _init_apply(_config(positions=positions), _tokens())
    chex.assert_tree_all_finite(logits)
    self.assertEqual("pos_embed" in params, positions == "learned")

  def test_rope_changes_the_output(self):
    tokens = _tokens()
    _, a, _ = _init_apply(_config(positions="rope"), tokens)
    _, b, _ = _init_apply(_config(positions="none"), tokens)
    # Same parameters (RoPE has none); position 0 is not rotated, later positions are.
    np.testing.assert_allclose(a[:, 0], b[:, 0], rtol=1e-5, atol=1e-6)
    self.assertGreater(float(jnp.max(jnp.abs(a[:, 1:] - b[:, 1:]))), 1e-3)

  @parameterized.parameters("bfloat16", "float16")
  def test_low_precision_runs_finite(self, dtype):
    tokens = _tokens()
    params, logits, aux = _init_apply(_config(dtype=dtype), tokens)
    chex.assert_tree_all_finite((logits, aux))
    self.assertEqual(logits.dtype, jnp.float32)
    self.assertTrue(all(x.dtype == jnp.float32 for x in jax.tree.leaves(params)))
    _, ref, _ = _init_apply(_config(), tokens)
    np.testing.assert_allclose(logits, ref, atol=0.1 * float(jnp.std(ref)) + 0.05)

  @parameterized.parameters(
      ({"width": 0}, "width"),
      ({"depth": -1}, "depth"),
      ({"head_dim": 7}, "even head_dim"),
      ({"num_heads": 4, "num_kv_heads": 3}, "multiple"),
      ({"parametrization": "foo"}, "parametrization"),
      ({"rule": "foo"}, "rule"),
      ({"rule_options": (("tau", 2.0),)}, "explicit rule"),
      ({"rule": "sqrt", "rule_options": (("tau", 2.0),)}, "rule_options"),
      ({"dtype": "float64"}, "dtype"),
      ({"positions": "alibi"}, "positions"),
      ({"attention": "flash"}, "attention"),
      ({"mlp_ratio": 0}, "mlp_ratio"),
      ({"logit_soft_cap": -1.0}, "logit_soft_cap"),
  )
  def test_bad_config(self, kw, message):
    with self.assertRaisesRegex(ValueError, message):
      _config(**kw)


class InitTest(parameterized.TestCase):

  @parameterized.parameters(*param_lib.available_parametrizations())
  def test_init_std_matches_parametrization(self, name):
    cfg = _config(width=64, num_heads=4, head_dim=16, parametrization=name, vocab_size=128, use_bias=True)
    params = model_lib.init_params(jax.random.PRNGKey(3), cfg)
    specs = param_lib.param_specs(params, cfg.make_parametrization(), cfg.width)
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    spec_leaves = jax.tree.leaves(specs, is_leaf=lambda x: isinstance(x, param_lib.LayerSpec))
    self.assertLen(spec_leaves, len(flat))
    for (path, x), spec in zip(flat, spec_leaves):
      name_ = "/".join(param_lib.path_names(path))
      x = np.asarray(x, np.float64)
      if spec.init_std == 0:
        np.testing.assert_array_equal(x, spec.init_mean, err_msg=name_)
      else:
        self.assertAlmostEqual(float(np.mean(x)), spec.init_mean, delta=5 * spec.init_std / math.sqrt(x.size),
                               msg=name_)
        np.testing.assert_allclose(np.std(x), spec.init_std, rtol=0.08, err_msg=name_)

  def test_sp_init_closed_form(self):
    cfg = _config(width=64, num_heads=4, head_dim=16, vocab_size=128)
    p = model_lib.init_params(jax.random.PRNGKey(0), cfg)
    np.testing.assert_allclose(np.std(p["embed"]["embedding"]), 1.0, rtol=0.05)
    np.testing.assert_allclose(np.std(p["block_0"]["mlp"]["fc_out"]["kernel"]), 1 / math.sqrt(256), rtol=0.05)
    np.testing.assert_allclose(np.std(p["block_0"]["attn"]["out"]["kernel"]), 1 / math.sqrt(64), rtol=0.05)
    np.testing.assert_array_equal(p["ln_final"]["scale"], np.ones(64))

  @parameterized.parameters("sp", "mup")
  def test_zero_query_and_readout(self, name):
    cfg = _config(parametrization=name, zero_query=True, zero_readout=True)
    tokens = _tokens()
    params, logits, aux = _init_apply(cfg, tokens)
    for i in range(cfg.depth):
      np.testing.assert_array_equal(params[f"block_{i}"]["attn"]["query"]["kernel"], 0.0)
      self.assertGreater(float(jnp.std(params[f"block_{i}"]["attn"]["key"]["kernel"])), 0.0)
    np.testing.assert_array_equal(params["readout"]["kernel"], 0.0)
    np.testing.assert_array_equal(logits, 0.0)
    # Zero queries give zero logits: uniform causal attention, entropy = mean_t log(t + 1).
    np.testing.assert_array_equal(aux["layers"]["attn_max_logit"], 0.0)
    t = tokens.shape[1]
    expected = np.mean(np.log(np.arange(1, t + 1)))
    np.testing.assert_allclose(aux["layers"]["attn_entropy"], expected, rtol=1e-5)

  def test_readout_multiplier_applied(self):
    # μP at width 16 with base width 8 (m = 2): logits = (1/m) · h @ W_readout.
    cfg = _config(parametrization="mup", base_width=8)
    tokens = _tokens()
    model = model_lib.Transformer(cfg)
    params = _params(cfg)
    apply = lambda p, x: model.apply({"params": p}, x, capture_intermediates=True)
    (logits, _), state = apply(params, tokens)
    h = state["intermediates"]["ln_final"]["__call__"][0]
    np.testing.assert_allclose(logits, 0.5 * h @ params["readout"]["kernel"], rtol=1e-5, atol=1e-6)


def _entropy(p):
  p = np.asarray(p, np.float64)
  return -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1)), 0), axis=-1)


class AuxMetricsTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("sp_rope", {}),
      ("mup_gqa_none", {"parametrization": "mup", "num_kv_heads": 1, "positions": "none"}),
      ("post_softmax", {"rule": "post_softmax"}),
  )
  def test_layer0_metrics_recomputed_by_hand(self, kw):
    cfg = _config(**kw)
    tokens = _tokens(2, 8)
    model = model_lib.Transformer(cfg)
    params = _params(cfg)
    apply = lambda p, x: model.apply({"params": p}, x, capture_intermediates=True)
    (logits, aux), state = apply(params, tokens)
    inter = state["intermediates"]
    attn = inter["block_0"]["attn"]
    b, t = tokens.shape
    q = attn["query"]["__call__"][0].reshape(b, t, cfg.num_heads, cfg.head_dim)
    k = attn["key"]["__call__"][0].reshape(b, t, cfg.kv_heads, cfg.head_dim)
    if cfg.positions == "rope":
      q, k = scaling.apply_rope(q), scaling.apply_rope(k)
    rule = cfg.make_rule()
    z = np.asarray(scaling.attention_logits(q, k, rule=rule, is_causal=True), np.float64)  # [B, N, T, T]
    causal = np.tril(np.ones((t, t), bool))
    zm = np.where(causal, z, -np.inf)
    p = np.exp(zm - zm.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    layers = {key: np.asarray(v) for key, v in aux["layers"].items()}
    np.testing.assert_allclose(layers["attn_entropy"][0], _entropy(p).mean(), rtol=1e-4)
    np.testing.assert_allclose(layers["attn_max_prob"][0], p.max(-1).mean(), rtol=1e-4)
    visible = z[:, :, causal]
    np.testing.assert_allclose(layers["attn_max_logit"][0], np.abs(visible).max(), rtol=1e-4)
    np.testing.assert_allclose(layers["attn_logits_rms"][0], np.sqrt(np.mean(visible**2)), rtol=1e-4)
    lse = zm.max(-1) + np.log(np.exp(zm - zm.max(-1, keepdims=True)).sum(-1))
    np.testing.assert_allclose(layers["attn_max_lse"][0], lse.max(), rtol=1e-4)
    # Activation RMS for the coordinate check.
    out0 = np.asarray(attn["out"]["__call__"][0], np.float64)
    np.testing.assert_allclose(layers["attn_out_rms"][0], np.sqrt(np.mean(out0**2)), rtol=1e-4)
    mlp0 = np.asarray(inter["block_0"]["mlp"]["__call__"][0], np.float64)
    np.testing.assert_allclose(layers["mlp_out_rms"][0], np.sqrt(np.mean(mlp0**2)), rtol=1e-4)
    emb = np.asarray(params["embed"]["embedding"], np.float64)[np.asarray(tokens)]
    np.testing.assert_allclose(aux["embed_rms"], np.sqrt(np.mean(emb**2)), rtol=1e-4)
    np.testing.assert_allclose(aux["readout_rms"], np.sqrt(np.mean(np.asarray(logits, np.float64)**2)), rtol=1e-4)


class BlockwiseTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    if not model_lib.blockwise_available():
      self.skipTest("scaling.blockwise is not available")

  @parameterized.named_parameters(
      ("qk_norm_gqa_mup_soft_cap", {"rule": "qk_norm", "num_kv_heads": 1, "parametrization": "mup",
                                    "logit_soft_cap": 5.0}),
  )
  def test_dense_equals_blockwise(self, kw):
    tokens = _tokens(2, 11)
    dense = model_lib.Transformer(_config(**kw))
    block = model_lib.Transformer(_config(attention="blockwise", block_q=4, block_k=3, **kw))
    params = _params(dense.config)

    def loss_and_grad(model):
      def loss(p):
        logits, aux = model.apply({"params": p}, tokens)
        return jnp.mean(logits**2), (logits, aux)
      return jax.jit(jax.value_and_grad(loss, has_aux=True))(params)

    (_, (ld, auxd)), gd = loss_and_grad(dense)
    (_, (lb, auxb)), gb = loss_and_grad(block)
    np.testing.assert_allclose(lb, ld, rtol=1e-5, atol=1e-5)
    for key in ("attn_max_lse", "attn_out_rms", "mlp_out_rms"):
      np.testing.assert_allclose(auxb["layers"][key], auxd["layers"][key], rtol=1e-5, err_msg=key)
    self.assertTrue(np.all(np.isnan(auxb["layers"]["attn_entropy"])))
    chex.assert_trees_all_close(gb, gd, rtol=1e-4, atol=1e-6)


if __name__ == "__main__":
  absltest.main()
