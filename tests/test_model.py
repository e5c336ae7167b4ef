"""The transformer: shapes, causality by Jacobian, logits against a hand-written reference, kinds, the effective
init against the papers' closed forms, aux metrics by hand."""

import dataclasses
import math
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

import scaling
from scaling.mup import layers as layers_lib
from scaling.training.model import transformer as model_lib
from scaling.training.model.config import ModelConfig
from scaling.training.model.family import ModelFamily
from scaling.mup import schemes as param_lib
from scaling.mup import shapes as shapes_lib
from scaling.attention import rules

V = 13

_PARAMETRIZATION_OPTIONS = ("base_width", "base_head_dim", "zero_query", "zero_readout")


def _config(**kw):
  """A small ModelConfig. Names are resolved to objects here, the one place in these tests: ``parametrization``
  and ``rule`` may be names, with ``base_width``, ``base_head_dim``, ``zero_query``, ``zero_readout`` and
  ``parametrization_options`` for ``get_parametrization`` and ``rule_options`` for ``get_rule``."""
  base = dict(vocab_size=V, width=16, depth=1, num_heads=2, head_dim=8, max_len=16)
  base.update(kw)
  parametrization = base.pop("parametrization", "sp")
  options = {name: base.pop(name) for name in _PARAMETRIZATION_OPTIONS if name in base}
  options.update(dict(base.pop("parametrization_options", ())))
  if isinstance(parametrization, str):
    parametrization = param_lib.get_parametrization(parametrization, **options)
  elif options:
    raise ValueError("parametrization options need a parametrization name")
  rule, rule_options = base.pop("rule", None), dict(base.pop("rule_options", ()))
  if isinstance(rule, str):
    rule = rules.get_rule(rule, **rule_options)
  elif rule_options:
    raise ValueError("rule_options need a rule name")
  return ModelConfig(parametrization=parametrization, rule=rule, **base)


def _tokens(b=2, t=8, seed=1):
  return jax.random.randint(jax.random.key(seed), (b, t), 0, V)


def _params(cfg, seed=0):
  return model_lib.init_params(jax.random.PRNGKey(seed), cfg)


def _init_apply(cfg, tokens, seed=0, jit=False):
  """(params, logits, aux). Eager by default: configurations with the shapes of _config() reuse the compiled ops
  of earlier tests."""
  params = _params(cfg, seed)
  model = model_lib.Transformer(cfg)
  apply = lambda p, x: model_lib.apply_with_aux(model, p, x)
  logits, aux = (jax.jit(apply) if jit else apply)(params, tokens)
  return params, logits, aux


def _apply_capturing(model, params, tokens):
  """(logits, aux, intermediates): the forward pass with every module's output captured."""
  logits, state = model.apply({"params": params}, tokens, capture_intermediates=True,
                              mutable=["intermediates", layers_lib.METRICS])
  return logits, model_lib.gather_aux(state[layers_lib.METRICS], model.config.depth), state["intermediates"]


def _paths(params):
  return {"/".join(shapes_lib.path_names(p)) for p, _ in jax.tree_util.tree_flatten_with_path(params)[0]}


def _flat(tree):
  """{"a/b/c": leaf} of a nested dict."""
  return {"/".join(shapes_lib.path_names(p)): x for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}


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
    shapes = {"/".join(shapes_lib.path_names(k)): v.shape for k, v in jax.tree_util.tree_flatten_with_path(params)[0]}
    self.assertEqual(shapes["embed/embedding"], (V, 16))
    self.assertEqual(shapes["pos_embed/embedding"], (16, 16))
    self.assertEqual(shapes["block_0/attn/query/kernel"], (16, 2 * 8))
    self.assertEqual(shapes["block_0/attn/key/kernel"], (16, 1 * 8))
    self.assertEqual(shapes["block_0/attn/value/kernel"], (16, 1 * 8))
    self.assertEqual(shapes["block_0/attn/out/kernel"], (2 * 8, 16))
    self.assertEqual(shapes["block_0/mlp/fc_in/kernel"], (16, 64))
    self.assertEqual(shapes["block_0/attn/query_gain"], (8,))
    self.assertEqual(shapes["readout/kernel"], (16, V))
    # Every parameter has a kind in the parametrization's table, that fits its shape.
    scaling.mup.roles.from_kinds(params, model_lib.param_kinds(cfg), 1.0)

  def test_qk_norm_without_gains_has_no_gain_parameters(self):
    with_gains = _config(rule="qk_norm", depth=2)
    without = _config(rule="qk_norm", depth=2, qk_norm_gains=False)
    paths = _paths(model_lib.init_params(jax.random.PRNGKey(0), without))
    self.assertEqual(_paths(model_lib.init_params(jax.random.PRNGKey(0), with_gains)) - paths,
                     {f"block_{i}/attn/{name}" for i in range(2) for name in ("query_gain", "key_gain")})
    self.assertFalse(any("gain" in path for path in paths))
    kinds = jax.tree_util.tree_flatten_with_path(model_lib.param_kinds(without))[0]
    self.assertFalse(any("gain" in "/".join(shapes_lib.path_names(k)) for k, _ in kinds))

  def test_family_qk_norm_options(self):
    kw = dict(vocab_size=V, max_len=16)
    family = ModelFamily(rule="qk_norm", base_width=16)
    default = family.model_config("sp", 16, **kw)
    self.assertEqual(default.attention_rule, rules.QKNorm(norm="rms"))  # today's rule: RMSNorm with gains
    self.assertTrue(default.qk_norm_gains)
    layer = dataclasses.replace(family, qk_norm="layer", qk_norm_gains=False).model_config("sp", 16, **kw)
    self.assertEqual(layer.attention_rule, rules.QKNorm(norm="layer"))
    self.assertFalse(layer.qk_norm_gains)
    for options, message in (({"qk_norm": "layer"}, "^qk_norm='layer' only applies to rule='qk_norm'$"),
                             ({"qk_norm_gains": False}, "^qk_norm_gains=False only applies to rule='qk_norm'$"),
                             ({"qk_norm": "layer", "qk_norm_gains": False, "rule": "sqrt"},
                              "^qk_norm='layer' and qk_norm_gains=False only apply"),
                             ({"qk_norm": "batch", "rule": "qk_norm"}, "qk_norm must be one of rms, layer")):
      with self.assertRaisesRegex(ValueError, message):
        ModelFamily(**options)

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
  # A random projection of the vocabulary keeps the Jacobian small: [T] outputs of sequence 0. The parameters are
  # an argument, not constants of the program that XLA would fold at compile time.
  proj = jax.random.normal(jax.random.key(8), (cfg.vocab_size,))
  f = lambda e, p: model.apply({"params": p}, tokens, embedded=e)[0] @ proj
  jac = jax.jit(jax.jacobian(f))(emb, params)  # [T, 2, T, D]
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
    grads = jax.jit(jax.grad(lambda p: jnp.sum(model.apply({"params": p}, tokens) ** 2)))(params)
    for name in ("query_gain", "key_gain"):
      self.assertGreater(float(jnp.linalg.norm(grads["block_0"]["attn"][name])), 0.0)
    # The gains multiply the normalized q and k: doubling both quadruples every logit.
    doubled = jax.tree.map(lambda x: x, params)
    doubled["block_0"]["attn"]["query_gain"] = 2.0 * params["block_0"]["attn"]["query_gain"]
    doubled["block_0"]["attn"]["key_gain"] = 2.0 * params["block_0"]["attn"]["key_gain"]
    a = model_lib.apply_with_aux(model, params, tokens)[1]["layers"]["attn_logits_rms"][0]
    b = model_lib.apply_with_aux(model, doubled, tokens)[1]["layers"]["attn_logits_rms"][0]
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
    # Jitted: no other test runs ops in this dtype, so one program compiles faster than every op on its own.
    params, logits, aux = _init_apply(_config(dtype=dtype), tokens, jit=True)
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
      ({"dtype": "float64"}, "dtype"),
      ({"positions": "alibi"}, "positions"),
      ({"attention": "flash"}, "attention"),
      ({"mlp_ratio": 0}, "mlp_ratio"),
      ({"logit_soft_cap": -1.0}, "logit_soft_cap"),
      # Names and options are checked where they are resolved (get_parametrization, get_rule).
      ({"parametrization": "foo"}, "unknown parametrization"),
      ({"parametrization": "sp", "parametrization_options": (("attn_mult", 2.0),)}, "unknown option.*attn_mult"),
      ({"base_width": 0}, "base_width"),
      ({"rule": "foo"}, "unknown logit-scale rule"),
      ({"rule": "temperature", "rule_options": (("tau", -1.0),)}, "tau"),
  )
  def test_bad_config(self, kw, message):
    with self.assertRaisesRegex(ValueError, message):
      _config(**kw)

  def test_rule_options_must_fit_the_rule(self):
    # SqrtScale takes no tau: get_rule says so with a ValueError.
    with self.assertRaises(ValueError):
      _config(rule="sqrt", rule_options=(("tau", 2.0),))

  @parameterized.named_parameters(
      ("parametrization_name", {"parametrization": "mup"}, "parametrization must be a Parametrization object"),
      ("parametrization_none", {"parametrization": None}, "parametrization must be a Parametrization object"),
      ("parametrization_class", {"parametrization": param_lib.MuParametrization},
       "parametrization must be a Parametrization object"),
      ("rule_name", {"rule": "sqrt"}, "rule must be a ScaleRule object"),
      ("rule_class", {"rule": rules.SqrtScale}, "rule must be a ScaleRule object"),
  )
  def test_names_are_not_accepted_by_the_config(self, kw, message):
    # ModelConfig takes objects; names are resolved once, before (ModelFamily.model_config, _config here).
    with self.assertRaisesRegex(ValueError, message):
      ModelConfig(vocab_size=V, **kw)

  def test_objects_and_effective_rule(self):
    mup = param_lib.get_parametrization("mup", base_head_dim=32)
    cfg = ModelConfig(vocab_size=V, parametrization=mup)
    self.assertEqual(cfg.parametrization, dataclasses.replace(mup, depth=cfg.depth))  # the config's depth is set
    self.assertEqual(cfg.attention_rule, rules.LinearScale(base_head_dim=32))
    tau = rules.get_rule("temperature", tau=3.0)
    self.assertIs(ModelConfig(vocab_size=V, parametrization=mup, rule=tau).attention_rule, tau)
    self.assertIsInstance(ModelConfig(vocab_size=V).parametrization, param_lib.StandardParametrization)
    self.assertIsInstance(ModelConfig(vocab_size=V).attention_rule, rules.SqrtScale)
    hash(cfg)  # a static jit argument and a param_kinds cache key


def _expected_kinds(cfg):
  """The layer kind of every parameter, written out from the model's parameter contract."""
  def dense(kind):
    return {"kernel": kind, "bias": "bias"} if cfg.use_bias else {"kernel": kind}

  def norm(gain="norm", bias="bias"):
    return {"scale": gain, "bias": bias} if cfg.use_bias else {"scale": gain}

  kinds = {"embed": {"embedding": "embedding"}, "readout": {"kernel": "readout"}}  # the readout has no bias
  if cfg.positions == "learned":
    kinds["pos_embed"] = {"embedding": "embedding"}
  if cfg.pre_ln:
    kinds["ln_final"] = norm("final_norm", "final_bias")  # outside the blocks: depth scaling leaves it alone
  for i in range(cfg.depth):
    attn = {"query": dense("attn_q"), "key": dense("attn_k"), "value": dense("attn_v"), "out": dense("attn_o")}
    if isinstance(cfg.attention_rule, rules.QKNorm):
      attn.update(query_gain="norm", key_gain="norm")
    kinds[f"block_{i}"] = {"ln_attn": norm(), "attn": attn, "ln_mlp": norm(),
                           "mlp": {"fc_in": dense("hidden"), "fc_out": dense("hidden")}}
  return kinds


class KindsTest(parameterized.TestCase):

  def test_every_kind_written_out(self):
    cfg = _config(positions="learned", use_bias=True, rule="qk_norm", num_kv_heads=1)
    want = {
        "embed/embedding": "embedding",
        "pos_embed/embedding": "embedding",
        "block_0/ln_attn/scale": "norm", "block_0/ln_attn/bias": "bias",
        "block_0/attn/query/kernel": "attn_q", "block_0/attn/query/bias": "bias",
        "block_0/attn/key/kernel": "attn_k", "block_0/attn/key/bias": "bias",
        "block_0/attn/value/kernel": "attn_v", "block_0/attn/value/bias": "bias",
        "block_0/attn/out/kernel": "attn_o", "block_0/attn/out/bias": "bias",
        "block_0/attn/query_gain": "norm", "block_0/attn/key_gain": "norm",
        "block_0/ln_mlp/scale": "norm", "block_0/ln_mlp/bias": "bias",
        "block_0/mlp/fc_in/kernel": "hidden", "block_0/mlp/fc_in/bias": "bias",
        "block_0/mlp/fc_out/kernel": "hidden", "block_0/mlp/fc_out/bias": "bias",
        "ln_final/scale": "final_norm", "ln_final/bias": "final_bias",
        "readout/kernel": "readout",
    }
    kinds = model_lib.param_kinds(cfg)
    self.assertEqual(_flat(kinds), want)
    self.assertEqual(jax.tree.structure(kinds), jax.tree.structure(_params(cfg)))

  @parameterized.named_parameters(
      ("sp_default", {}),
      ("mup_depth2_post_ln_learned", {"parametrization": "mup", "depth": 2, "pre_ln": False, "positions": "learned"}),
      ("umup_bias_gqa_qk_norm", {"parametrization": "umup", "use_bias": True, "num_kv_heads": 1,
                                 "rule": "qk_norm"}),
  )
  def test_param_kinds_match_the_contract(self, kw):
    cfg = _config(**kw)
    self.assertEqual(model_lib.param_kinds(cfg), _expected_kinds(cfg))
    self.assertEqual(_paths(_params(cfg)), set(_flat(_expected_kinds(cfg))))


def _measured_multipliers(cfg, params, tokens):
  """{parameter path: the forward multiplier A the model applies to it}, for every kernel and embedding table.

  Measured on the real forward pass: each linear layer's output y against its input x times its parameter W
  (biases are 0 at init), A = <y, x W> / <x W, x W>; each lookup's output against the looked-up rows.
  """
  flat = _flat(params)
  records = []  # (parameter path, output, output without the multiplier)

  def path_of(array):
    return next(path for path, w in flat.items() if w.shape == array.shape and np.array_equal(w, array))

  def interceptor(next_fun, args, kwargs, context):
    y = next_fun(*args, **kwargs)
    module, names = context.module, context.module.path
    if context.method_name == "__call__" and isinstance(module, layers_lib.ScaledDense):
      kernel = flat["/".join((*names, "kernel"))]
      records.append(("/".join((*names, "kernel")), y, np.asarray(args[0], np.float64) @ np.asarray(kernel)))
    if context.method_name == "__call__" and isinstance(module, layers_lib.ScaledEmbed):
      table = flat["/".join((*names, "embedding"))]
      records.append(("/".join((*names, "embedding")), y, np.asarray(table)[np.asarray(args[0])]))
    return y

  fused = layers_lib.fused_dense

  def recording_fused_dense(x, parts, dtype):  # q, k and v as one matmul: every part is a layer of its own
    out = fused(x, parts, dtype)
    for (kernel, _, _, _), y in zip(parts, out):
      records.append((path_of(kernel), y, np.asarray(x, np.float64) @ np.asarray(kernel)))
    return out

  unit_fused = layers_lib.unit_fused_dense

  def recording_unit_fused_dense(x, parts, scales, dtype):  # u-μP's fused q, k and v
    out = unit_fused(x, parts, scales, dtype)
    for (kernel, _, _, _), y in zip(parts, out):
      records.append((path_of(kernel), y, np.asarray(x, np.float64) @ np.asarray(kernel)))
    return out

  with (mock.patch.object(layers_lib, "fused_dense", recording_fused_dense),
        mock.patch.object(layers_lib, "unit_fused_dense", recording_unit_fused_dense),
        nn.intercept_methods(interceptor)):
    model_lib.Transformer(cfg).apply({"params": params}, tokens)
  mult = {}
  for path, y, unscaled in records:
    y = np.asarray(y, np.float64)
    mult[path] = float(np.sum(y * unscaled) / np.sum(unscaled * unscaled))
  return mult


def _paper_effective_init_std(scheme, kind, fan_in, m):
  """A·B, the std of a matrix's effective weight at init, from the papers (m = width / base width).

  Embedding tables N(0, 1) with multiplier 1 in every scheme (SP: ``torch.nn.Embedding``; μP: input weights
  constant in width, TP5 Table 3; NTK and u-μP: unit init). Other matrices: fan-in init 1/√fan_in (SP; μP
  hidden, TP5 Table 3; NTK and u-μP as B = 1 with A = 1/√fan_in); μP's readout: TP5 Table 3's std 1/fan_in with
  the constant of SP at the base width, i.e. √(fan_in/m) / fan_in (∝ 1/width); u-μP's readout: unit_scaling's
  ``linear_readout``, B = 1 with A = 1/fan_in (Blake et al. 2024, Table 2).
  """
  if kind == "embedding":
    return 1.0
  if scheme == "mup" and kind == "readout":
    return math.sqrt(fan_in / m) / fan_in
  if scheme == "umup" and kind == "readout":
    return 1.0 / fan_in
  return 1.0 / math.sqrt(fan_in)


class InitTest(parameterized.TestCase):

  @parameterized.parameters(*param_lib.available_parametrizations())
  def test_effective_init_matches_the_papers(self, name):
    # Width 64 over base width 16 (m = 4): fan-ins 64 (q, k, v, o, fc_in, readout) and 256 (fc_out).
    cfg = _config(width=64, num_heads=4, head_dim=16, parametrization=name, base_width=16, vocab_size=128,
                  use_bias=True, rule="qk_norm", positions="learned")
    params = model_lib.init_params(jax.random.PRNGKey(3), cfg)
    kinds = _flat(_expected_kinds(cfg))
    flat = _flat(params)
    self.assertEqual(set(flat), set(kinds))
    # One sequence of 8 tokens, the shapes of init_params' forward pass, whose compiled ops the eager forward here
    # reuses; each multiplier is a ratio of two products of the same rows, exact at any number of rows.
    mult = _measured_multipliers(cfg, params, _tokens(1, 8))
    specs = _flat(model_lib.parametrized(cfg).specs())
    for path, x in flat.items():
      kind, x = kinds[path], np.asarray(x, np.float64)
      if kind in param_lib.VECTOR_KINDS:  # gains start at 1 and biases at 0, multiplier 1, in every scheme
        mean = 1.0 if kind in ("norm", "final_norm") else 0.0
        np.testing.assert_array_equal(x, mean, err_msg=path)
        self.assertEqual((specs[path].init_std, specs[path].init_mean, specs[path].multiplier), (0.0, mean, 1.0),
                         msg=path)
        continue
      want = _paper_effective_init_std(name, kind, x.shape[0], 4.0)
      self.assertAlmostEqual(float(np.mean(x)), 0.0, delta=5 * np.std(x) / math.sqrt(x.size), msg=path)
      np.testing.assert_allclose(mult[path] * np.std(x), want, rtol=0.08, err_msg=path)
      # The specs declare the multiplier the model applies and the papers' effective init.
      np.testing.assert_allclose(specs[path].multiplier, mult[path], rtol=1e-5, err_msg=path)
      np.testing.assert_allclose(specs[path].multiplier * specs[path].init_std, want, rtol=1e-12, err_msg=path)

  def test_effective_init_rejects_the_old_mup_readout(self):
    # The former μP readout (std 1/√fan_in times 1/m) starts at 1/(4·8) at fan-in 64 and m = 4, half the paper's
    # √16/64 = 1/16: outside the tolerance above.
    self.assertEqual(_paper_effective_init_std("mup", "readout", 64, 4.0), 1 / 16)
    self.assertFalse(np.isclose(1 / 32, 1 / 16, rtol=0.08))

  def test_measured_multipliers(self):
    # μP at m = 2 (width 16 over base 8): the readout's 1/m; u-μP: 1/√fan_in for every matrix (fc_out: 1/√64)
    # except the readout, 1/fan_in (the paper's linear_readout; 1/√fan_in with the covariance correction).
    mup = _config(parametrization="mup", base_width=8, use_bias=True)
    mult = _measured_multipliers(mup, _params(mup), _tokens())
    self.assertLen(mult, 8)  # embedding, q, k, v, o, fc_in, fc_out, readout
    for path, a in mult.items():
      self.assertAlmostEqual(a, 0.5 if path == "readout/kernel" else 1.0, places=5, msg=path)
    umup = _config(parametrization="umup")
    mult = _measured_multipliers(umup, _params(umup), _tokens())
    self.assertAlmostEqual(mult["block_0/mlp/fc_out/kernel"], 0.125, places=5)
    self.assertAlmostEqual(mult["readout/kernel"], 1 / 16, places=5)
    self.assertAlmostEqual(mult["embed/embedding"], 1.0, places=5)
    covariance = _config(parametrization="umup", parametrization_options={"umup_scales": "covariance"})
    self.assertAlmostEqual(_measured_multipliers(covariance, _params(covariance), _tokens())["readout/kernel"], 0.25,
                           places=5)

  def test_sp_init_closed_form(self):
    cfg = _config(width=64, num_heads=4, head_dim=16, vocab_size=128)
    p = model_lib.init_params(jax.random.PRNGKey(0), cfg)
    np.testing.assert_allclose(np.std(p["embed"]["embedding"]), 1.0, rtol=0.05)
    np.testing.assert_allclose(np.std(p["block_0"]["mlp"]["fc_out"]["kernel"]), 1 / math.sqrt(256), rtol=0.05)
    np.testing.assert_allclose(np.std(p["block_0"]["attn"]["out"]["kernel"]), 1 / math.sqrt(64), rtol=0.05)
    np.testing.assert_array_equal(p["ln_final"]["scale"], np.ones(64))

  def test_params_are_plain_arrays(self):
    params = _params(_config(use_bias=True))
    self.assertTrue(all(isinstance(x, jax.Array) for x in jax.tree.leaves(params)))
    self.assertFalse(any(isinstance(x, layers_lib.Kinded)
                         for x in jax.tree.leaves(params, is_leaf=lambda x: isinstance(x, layers_lib.Kinded))))

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


def _gelu_tanh(x):
  """GELU, tanh approximation (Hendrycks & Gimpel 2016; flax.linen.gelu's default)."""
  return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def _rope(x, base):
  """RoPE (Su et al. 2021, §3.4) in the rotate-half layout: coordinates (i, i + H/2) of position t are rotated by
  the angle t · base^(-2i/H). x [B, T, heads, H]."""
  h = x.shape[-1]
  half = h // 2
  angles = np.arange(x.shape[1])[:, None] * base ** (-2.0 * np.arange(half) / h)  # [T, H/2]
  cos, sin = np.cos(angles)[None, :, None, :], np.sin(angles)[None, :, None, :]
  x1, x2 = x[..., :half], x[..., half:]
  return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def _reference_logits(cfg, params, tokens, *, mult, logit_scale, unit=None):
  """The decoder's logits recomputed in float64 numpy from the parameters.

  Args:
    cfg: the ModelConfig (shapes and switches only).
    params: the params tree.
    tokens: int [B, T].
    mult: (kind, fan_in) -> the forward multiplier A of a layer, written out by the test.
    logit_scale: the factor s in softmax(s · q·k), written out by the test.
    unit: u-μP's unit-scaled forward, written out by the test: {"attn": attention output scale, "gelu": GELU
      output scale, "taus": [(τ_attn, τ_mlp) per block]}; residuals become (τ·f + x)/√(1 + τ²). None: plain.
  """
  p = jax.tree.map(lambda x: np.asarray(x, np.float64), params)
  tokens = np.asarray(tokens)
  b, t = tokens.shape
  n, kv, h = cfg.num_heads, cfg.kv_heads, cfg.head_dim
  eps = 1e-6

  def dense(layer, x, kind):
    y = mult(kind, layer["kernel"].shape[0]) * np.einsum("...i,io->...o", x, layer["kernel"])
    return y + mult("bias", 1) * layer["bias"] if "bias" in layer else y

  def norm(layer, x):
    # LayerNorm without a learned centring bias (unless use_bias), or RMSNorm; then the gain.
    if cfg.norm == "layer":
      x = x - x.mean(-1, keepdims=True)
    y = x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps) * (mult("norm", 1) * layer["scale"])
    return y + mult("bias", 1) * layer["bias"] if "bias" in layer else y

  def attention(a, x):
    q = dense(a["query"], x, "attn_q").reshape(b, t, n, h)
    k = dense(a["key"], x, "attn_k").reshape(b, t, kv, h)
    v = dense(a["value"], x, "attn_v").reshape(b, t, kv, h)
    if cfg.positions == "rope":
      q, k = _rope(q, cfg.rope_base), _rope(k, cfg.rope_base)
    if isinstance(cfg.attention_rule, rules.QKNorm):
      # QK-norm: RMS-normalize every head vector (LayerNorm: centre it first), then the learnable gains if any.
      def qk_norm(x, gain):
        if cfg.attention_rule.norm == "layer":
          x = x - x.mean(-1, keepdims=True)
        x = x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps)
        return x if gain is None else x * gain
      q, k = qk_norm(q, a.get("query_gain")), qk_norm(k, a.get("key_gain"))
    # GQA: query head j reads key/value head j // (N / K).
    k, v = np.repeat(k, n // kv, axis=2), np.repeat(v, n // kv, axis=2)
    z = logit_scale * np.einsum("bqnh,bsnh->bnqs", q, k)
    z = np.where(np.tril(np.ones((t, t), bool)), z, -np.inf)  # causal: query q sees keys s <= q
    w = np.exp(z - z.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    o = np.einsum("bnqs,bsnh->bqnh", w, v).reshape(b, t, n * h)
    if unit:
      o = o * unit["attn"]
    return dense(a["out"], o, "attn_o")

  def mlp(m, x):
    hidden = _gelu_tanh(dense(m["fc_in"], x, "hidden"))
    return dense(m["fc_out"], hidden * unit["gelu"] if unit else hidden, "hidden")

  def add(x, f, i, j):
    if not unit:
      return x + f
    tau = unit["taus"][i][j]
    return (tau * f + x) / np.sqrt(1 + tau * tau)

  x = mult("embedding", V) * p["embed"]["embedding"][tokens]
  if cfg.positions == "learned":
    x = x + mult("embedding", cfg.max_len) * p["pos_embed"]["embedding"][:t][None]
  for i in range(cfg.depth):
    blk = p[f"block_{i}"]
    if cfg.pre_ln:
      x = add(x, attention(blk["attn"], norm(blk["ln_attn"], x)), i, 0)
      x = add(x, mlp(blk["mlp"], norm(blk["ln_mlp"], x)), i, 1)
    else:
      x = norm(blk["ln_attn"], add(x, attention(blk["attn"], x), i, 0))
      x = norm(blk["ln_mlp"], add(x, mlp(blk["mlp"], x), i, 1))
  if cfg.pre_ln:
    x = norm(p["ln_final"], x)
  return mult("readout", cfg.width) * np.einsum("btd,dv->btv", x, p["readout"]["kernel"])


def _ones(kind, fan_in):
  del kind, fan_in
  return 1.0


def _mup_m2(kind, fan_in):
  # μP at m = width / base_width = 16 / 8 = 2 (Tensor Programs V, Table 8): only the readout has A = 1/m.
  del fan_in
  return 0.5 if kind == "readout" else 1.0


def _umup(kind, fan_in):
  # u-μP (Blake et al. 2024, §4): A = 1/√n_in for hidden and attention matrices; the readout is unit-scaled too.
  if kind in ("hidden", "attn_q", "attn_k", "attn_v", "attn_o", "readout"):
    return 1.0 / math.sqrt(fan_in)
  return 1.0


def _perturbed(params, seed=5, scale=0.3):
  """params plus scale · N(0, 1) noise, so that gains and biases differ from their init (1 and 0)."""
  leaves, treedef = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  return jax.tree.unflatten(treedef, [x + scale * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys)])


class ReferenceLogitsTest(parameterized.TestCase):
  """Transformer(cfg).apply against the decoder written out with numpy einsums."""

  @parameterized.named_parameters(
      # SP: Vaswani et al.'s 1/√d_head with d_head = 8.
      ("sp_rope_pre_ln", {}, _ones, 1 / math.sqrt(8)),
      # μP (base width 8, base head dim 64): readout multiplier 1/m = 1/2 and logits α/d = √64 / 8 = 1.
      ("mup_m2_gqa_bias", {"parametrization": "mup", "base_width": 8, "num_kv_heads": 1, "use_bias": True},
       _mup_m2, 1.0),
      # u-μP: fan-based multipliers, logits α_attn/d = 1/8.
      ("umup_post_ln_rms_learned", {"parametrization": "umup", "pre_ln": False, "norm": "rms",
                                    "positions": "learned",
                                    "parametrization_options": (("umup_scales", "covariance"),)}, _umup, 1 / 8),
      # QK-norm keeps 1/√d; two blocks, no positions.
      ("sp_qk_norm_depth2_none", {"rule": "qk_norm", "depth": 2, "positions": "none"}, _ones, 1 / math.sqrt(8)),
      # QK-norm with LayerNorm over the head dim (after RoPE), with and without gains.
      ("sp_qk_layer_norm", {"rule": "qk_norm", "rule_options": (("norm", "layer"),)}, _ones, 1 / math.sqrt(8)),
      ("sp_qk_layer_norm_no_gains_gqa", {"rule": "qk_norm", "rule_options": (("norm", "layer"),),
                                         "qk_norm_gains": False, "num_kv_heads": 1}, _ones, 1 / math.sqrt(8)),
      ("mup_qk_rms_no_gains", {"rule": "qk_norm", "qk_norm_gains": False, "parametrization": "mup",
                               "base_width": 8}, _mup_m2, 1 / math.sqrt(8)),
      # An explicit rule overrides the parametrization's: temperature τ = 2 gives s = 1/2 (μP at m = 1: all A = 1).
      ("mup_m1_temperature", {"parametrization": "mup", "base_width": 16, "rule": "temperature",
                              "rule_options": (("tau", 2.0),)}, _ones, 0.5),
  )
  def test_logits_match_reference(self, kw, mult, logit_scale):
    cfg = _config(**kw)
    tokens = _tokens(2, 8)
    params = _perturbed(_params(cfg))
    logits = model_lib.Transformer(cfg).apply({"params": params}, tokens)
    unit = None
    if kw.get("parametrization") == "umup":
      # u-μP's forward (unit_scaling): causal attention output × √(T / log T)^(1 − w), w = 1/(1 + 4·d/α²) with
      # T = 8, d = 8, α = 1; GELU × 1.7657 (its 0.8/0.2 log-interpolation between √(2/(1 − 1/π)) and 2); one
      # block: τ_attn = α_attn/√L = 1, τ_mlp = α_mlp/√(L + α_attn²) = 1/√2.
      # The one block's values are random-token plus learned-position embeddings (unit init), whose overlap
      # between two positions is 1/V of 2, ρ = 1/(2V): their causal mean has mean square (1 − ρ)·H_8/8 + ρ, so
      # the scale takes the factor √((H_8/8) / that) of values correlated across positions.
      w = 1 / (1 + 4 * 8)
      harmonic, rho = sum(1 / n for n in range(1, 9)) / 8, 1 / (2 * V)
      factor = math.sqrt(harmonic / ((1 - rho) * harmonic + rho))
      unit = {"attn": (math.sqrt(8 / math.log(8)) * factor) ** (1 - w),
              "gelu": math.sqrt(2 / (1 - 1 / math.pi)) ** 0.8 * 2**0.2, "taus": [(1.0, 1 / math.sqrt(2))]}
    want = _reference_logits(cfg, params, tokens, mult=mult, logit_scale=logit_scale, unit=unit)
    chex.assert_shape(logits, (2, 8, V))
    np.testing.assert_allclose(np.asarray(logits, np.float64), want, rtol=2e-4, atol=2e-5)

  def test_reference_detects_a_wrong_multiplier(self):
    # The comparison is sensitive to the readout multiplier (μP at m = 2): with A = 1 it fails.
    cfg = _config(parametrization="mup", base_width=8)
    tokens = _tokens(2, 8)
    params = _perturbed(_params(cfg))
    logits = np.asarray(model_lib.Transformer(cfg).apply({"params": params}, tokens), np.float64)
    np.testing.assert_allclose(logits, _reference_logits(cfg, params, tokens, mult=_mup_m2, logit_scale=1.0),
                               rtol=2e-4, atol=2e-5)
    wrong = _reference_logits(cfg, params, tokens, mult=_ones, logit_scale=1.0)
    np.testing.assert_allclose(logits, 0.5 * wrong, rtol=2e-4, atol=2e-5)


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
    logits, aux, inter = _apply_capturing(model, params, tokens)
    attn = inter["block_0"]["attn"]
    b, t = tokens.shape
    # q and k as the attention received them: A·(x W) from the layer's input, kernels and multipliers, then RoPE.
    x = np.asarray(inter["block_0"]["ln_attn"]["__call__"][0], np.float64)
    q, k = [cfg.parametrization.layer(kind, *shapes_lib.fans(kind, w.shape), cfg.width).multiplier * (x @ w)
            for kind, w in (("attn_q", np.asarray(params["block_0"]["attn"]["query"]["kernel"], np.float64)),
                            ("attn_k", np.asarray(params["block_0"]["attn"]["key"]["kernel"], np.float64)))]
    q, k = q.reshape(b, t, cfg.num_heads, cfg.head_dim), k.reshape(b, t, cfg.kv_heads, cfg.head_dim)
    if cfg.positions == "rope":
      q, k = scaling.apply_rope(jnp.asarray(q, jnp.float32)), scaling.apply_rope(jnp.asarray(k, jnp.float32))
    rule = cfg.attention_rule
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

  KW = {"rule": "qk_norm", "num_kv_heads": 1, "parametrization": "mup", "logit_soft_cap": 5.0}  # qk_norm, GQA, μP
  _dense = None  # the dense model's loss and gradients, computed once for the class

  def _loss_and_grad(self, **kw):
    tokens = _tokens(2, 11)
    model = model_lib.Transformer(_config(**self.KW, **kw))
    params = _params(model_lib.Transformer(_config(**self.KW)).config)

    def loss(p):
      logits, aux = model_lib.apply_with_aux(model, p, tokens)
      return jnp.mean(logits**2), (logits, aux)
    return jax.jit(jax.value_and_grad(loss, has_aux=True))(params)

  # T = 11 is below the autotune's shortest case: "auto" takes the fixed rule's path, through dot_product_attention.
  @parameterized.named_parameters(("blockwise", "blockwise"), ("auto", "auto"))
  def test_equals_dense(self, attention):
    if BlockwiseTest._dense is None:
      BlockwiseTest._dense = self._loss_and_grad()
    (_, (ld, auxd)), gd = BlockwiseTest._dense
    (_, (lb, auxb)), gb = self._loss_and_grad(attention=attention, block_q=4, block_k=3)
    np.testing.assert_allclose(lb, ld, rtol=1e-5, atol=1e-5)
    for key in ("attn_max_lse", "attn_out_rms", "mlp_out_rms"):
      np.testing.assert_allclose(auxb["layers"][key], auxd["layers"][key], rtol=1e-5, err_msg=key)
    self.assertTrue(np.all(np.isnan(auxb["layers"]["attn_entropy"])))
    chex.assert_trees_all_close(gb, gd, rtol=1e-4, atol=1e-6)


class FusedDenseTest(parameterized.TestCase):

  def test_values_and_gradients_match_the_per_layer_products(self):
    """fused_dense on [B, T, D] against A_i·einsum(x, W_i) + A_bi·b_i written out, values and gradients."""
    keys = jax.random.split(jax.random.PRNGKey(3), 6)
    x = jax.random.normal(keys[0], (2, 5, 8))
    kernels = [jax.random.normal(keys[1], (8, 6)), jax.random.normal(keys[2], (8, 3))]
    biases = [None, jax.random.normal(keys[3], (3,))]
    mults, bmults = (0.5, 2.0), (1.0, 0.25)
    cotangents = [jax.random.normal(keys[4], (2, 5, 6)), jax.random.normal(keys[5], (2, 5, 3))]

    def fused(x, ws, b):
      parts = [(ws[0], mults[0], None, bmults[0]), (ws[1], mults[1], b, bmults[1])]
      return sum(jnp.sum(y * c) for y, c in zip(layers_lib.fused_dense(x, parts, jnp.float32), cotangents))

    def reference(x, ws, b):
      ys = [mults[0] * jnp.einsum("btd,df->btf", x, ws[0]),
            mults[1] * jnp.einsum("btd,df->btf", x, ws[1]) + bmults[1] * b]
      return sum(jnp.sum(y * c) for y, c in zip(ys, cotangents))

    args = (x, kernels, biases[1])
    got, want = (jax.jit(jax.value_and_grad(f, argnums=(0, 1, 2)))(*args) for f in (fused, reference))
    chex.assert_trees_all_close(got, want, rtol=1e-5, atol=1e-5)


if __name__ == "__main__":
  absltest.main()
