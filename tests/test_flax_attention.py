"""The Flax attention_fn adapter against Flax's own default attention, inside Flax's own modules."""

import math
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import chex
from flax import nnx
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

import scaling
from scaling.attention import flax_adapter as flax_attention
from scaling.attention import rules
from scaling.base import validation

TOL = dict(atol=1e-5, rtol=1e-5)
FEATURES, HEADS = 32, 4  # head_dim 8
HEAD_DIM = FEATURES // HEADS


def _normal(seed, shape):
  """Numpy draws: XLA compiles jax.random separately per shape (seconds on CPU), so tests also share shapes."""
  return jnp.asarray(np.random.RandomState(seed).standard_normal(shape), jnp.float32)


def _inputs(seed=0, batch=(2,), length=6, features=FEATURES):
  return _normal(seed, batch + (length, features))


def _qkv(seed=0, b=2, t=6, s=6, n=HEADS, k=HEADS, h=HEAD_DIM, std=1.0):
  return std * _normal(seed, (b, t, n, h)), std * _normal(seed + 1, (b, s, k, h)), _normal(seed + 2, (b, s, k, h))


def _key_padding_mask(x, valid):
  """Flax float mask [batch..., 1, T, S]: every query sees the first ``valid`` keys (no fully masked rows)."""
  return nn.make_attention_mask(jnp.ones(x.shape[:-1]), jnp.arange(x.shape[-2]) < valid)


def _mask(kind, x):
  if kind == "none":
    return None
  if kind == "causal":
    return nn.make_causal_mask(x[..., 0])
  return nn.combine_masks(nn.make_causal_mask(x[..., 0]), _key_padding_mask(x, x.shape[-2] - 2))


def _prescaled_flax(factor, flavour="linen"):
  """Flax's default attention_fn applied to query·factor (explicit signature: linen filters kwargs by name)."""

  def fn(query, key, value, bias=None, mask=None, broadcast_dropout=True, dropout_rng=None, dropout_rate=0.0,
         deterministic=False, dtype=None, precision=None, module=None, is_causal=False):
    args = (query * factor, key, value, bias, mask, broadcast_dropout, dropout_rng, dropout_rate, deterministic,
            dtype, precision, module)
    if flavour == "nnx":
      return nnx.dot_product_attention(*args, is_causal=is_causal)
    assert not is_causal, "linen never passes is_causal"
    return nn.dot_product_attention(*args)

  return fn


def _numpy_logit_stats(x, wq, bq, wk, bk, scale, visible):
  """Per-head population std and max |z| of the visible logits s·q·k of projections x·W + b, in float64 numpy."""
  x, wq, bq, wk, bk = (np.asarray(a, np.float64) for a in (x, wq, bq, wk, bk))
  q, k = np.einsum("btd,dnh->btnh", x, wq) + bq, np.einsum("btd,dnh->btnh", x, wk) + bk
  z = scale * np.einsum("btnh,bsnh->bnts", q, k)
  vis = np.broadcast_to(np.asarray(visible, bool), z.shape)
  per_head = [z[:, n][vis[:, n]] for n in range(z.shape[1])]
  return np.array([v.std() for v in per_head]), np.array([np.abs(v).max() for v in per_head])


def _rms(x, eps=1e-6):
  return x / jnp.sqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps)


class LinenModuleTest(chex.TestCase, parameterized.TestCase):

  def _pair(self, ours, ref=nn.dot_product_attention, **kw):
    make = lambda fn: nn.MultiHeadDotProductAttention(num_heads=HEADS, qkv_features=FEATURES, attention_fn=fn, **kw)
    return make(ours), make(ref)

  @parameterized.named_parameters(
      ("no_mask", "none", (2,)),
      ("causal", "causal", (2,)),
      ("causal_padding", "causal_padding", (2,)),
      ("two_batch_dims", "causal_padding", (2, 3)),
  )
  def test_sqrt_reproduces_flax_default(self, mask, batch):
    x = _inputs(batch=batch)
    ours, ref = self._pair(flax_attention.make_attention_fn("sqrt"), dropout_rate=0.3)
    params = ref.init(jax.random.key(1), x, deterministic=True)
    m = _mask(mask, x)
    y_ours = ours.apply(params, x, mask=m, deterministic=True)
    y_ref = ref.apply(params, x, mask=m, deterministic=True)
    chex.assert_trees_all_close(y_ours, y_ref, **TOL)

  @parameterized.named_parameters(("broadcast", True), ("per_entry", False))
  def test_dropout_matches_flax_draw_for_draw(self, broadcast):
    x = _inputs()
    ours, ref = self._pair(flax_attention.make_attention_fn("sqrt"), dropout_rate=0.4, broadcast_dropout=broadcast)
    params = ref.init(jax.random.key(1), x, deterministic=True)
    run = lambda mod: mod.apply(params, x, mask=_mask("causal", x), deterministic=False,
                                rngs={"dropout": jax.random.key(7)})
    y_ours = run(ours)
    chex.assert_trees_all_close(y_ours, run(ref), **TOL)
    self.assertGreater(float(jnp.max(jnp.abs(y_ours - ours.apply(params, x, deterministic=True)))), 1e-3)

  def test_sown_weights_match_flax(self):
    x = _inputs()
    ours, ref = self._pair(flax_attention.make_attention_fn("sqrt"))
    params = ref.init(jax.random.key(1), x)
    sown = lambda mod: mod.apply(params, x, mask=_mask("causal", x), sow_weights=True, mutable=["intermediates"])
    (y_ours, st_ours), (y_ref, st_ref) = sown(ours), sown(ref)
    chex.assert_trees_all_close(y_ours, y_ref, **TOL)
    chex.assert_trees_all_close(st_ours, st_ref, **TOL)
    chex.assert_shape(st_ours["intermediates"]["attention_weights"][0], (2, HEADS, 6, 6))

  def test_sown_logit_stats_match_numpy(self):
    x = _inputs()
    ours, _ = self._pair(flax_attention.make_attention_fn("linear", alpha=3.0, sow_logit_stats=True))
    params = ours.init(jax.random.key(1), x)
    mask = _mask("causal_padding", x)
    y, state = ours.apply(params, x, mask=mask, sow_weights=True, mutable=["intermediates"])
    sown = state["intermediates"]
    p = params["params"]
    std, absmax = _numpy_logit_stats(x, p["query"]["kernel"], p["query"]["bias"], p["key"]["kernel"],
                                     p["key"]["bias"], 3.0 / HEAD_DIM, mask)
    np.testing.assert_allclose(sown["attention_logit_std"][0], std, rtol=1e-5)
    np.testing.assert_allclose(sown["attention_logit_absmax"][0], absmax, rtol=1e-5)
    self.assertGreater(float(np.ptp(std)), 1e-3)  # heads differ: the statistics are per head
    # the weights are still sown beside them, and the output is unchanged by sowing
    chex.assert_shape(sown["attention_weights"][0], (2, HEADS, 6, 6))
    chex.assert_trees_all_close(y, ours.apply(params, x, mask=mask), **TOL)

  @parameterized.named_parameters(
      ("linear", "linear", {}, math.sqrt(HEAD_DIM) / HEAD_DIM),
      ("linear_base", "linear", {"base_head_dim": 64}, 8.0 / math.sqrt(HEAD_DIM)),
      ("temperature", "temperature", {"tau": 2.5}, math.sqrt(HEAD_DIM) / 2.5),
      ("none", "none", {}, math.sqrt(HEAD_DIM)),
  )
  def test_rule_equals_flax_on_prescaled_query(self, name, options, factor):
    x = _inputs()
    ours, ref = self._pair(flax_attention.make_attention_fn(name, **options), _prescaled_flax(factor))
    params = ref.init(jax.random.key(1), x)
    m = _mask("causal_padding", x)
    chex.assert_trees_all_close(ours.apply(params, x, mask=m), ref.apply(params, x, mask=m), **TOL)

  def test_jit_and_cross_attention(self):
    xq, xkv = _inputs(length=5), _inputs(seed=1, length=9)
    ours, ref = self._pair(flax_attention.make_attention_fn("linear"), _prescaled_flax(1 / math.sqrt(HEAD_DIM)))
    params = ref.init(jax.random.key(1), xq, xkv)
    m = nn.make_attention_mask(jnp.ones((2, 5)), jnp.arange(9) < 6)
    y_ours = jax.jit(lambda p, a, b: ours.apply(p, a, b, mask=m))(params, xq, xkv)
    chex.assert_trees_all_close(y_ours, ref.apply(params, xq, xkv, mask=m), **TOL)


class NnxModuleTest(chex.TestCase, parameterized.TestCase):

  def _module(self, fn, **kw):
    kw = dict(num_heads=HEADS, in_features=FEATURES, qkv_features=FEATURES, decode=False, **kw)
    return nnx.MultiHeadAttention(attention_fn=fn, rngs=nnx.Rngs(0), **kw)

  def _both(self, m, ours, ref, *args, **kw):
    """Runs module ``m`` with our attention_fn and then with ``ref``, same parameters."""
    m.attention_fn = ours
    y_ours = m(*args, **kw)
    m.attention_fn = ref
    return y_ours, m(*args, **kw)

  @parameterized.product(mask=("none", "causal", "causal_padding"), is_causal=(False, True), kv_heads=(4, 2))
  def test_sqrt_reproduces_flax_default(self, mask, is_causal, kv_heads):
    x = _inputs()
    m = self._module(nnx.dot_product_attention, dropout_rate=0.3, num_kv_heads=kv_heads)
    y_ours, y_ref = self._both(m, flax_attention.make_attention_fn("sqrt"), nnx.dot_product_attention, x,
                               mask=_mask(mask, x), is_causal=is_causal, deterministic=True)
    chex.assert_trees_all_close(y_ours, y_ref, **TOL)

  @parameterized.product(broadcast=(True, False), kv_heads=(4, 2))
  def test_dropout_matches_flax_draw_for_draw(self, broadcast, kv_heads):
    x = _inputs()
    m = self._module(nnx.dot_product_attention, dropout_rate=0.4, broadcast_dropout=broadcast, num_kv_heads=kv_heads)
    m.attention_fn = flax_attention.make_attention_fn("sqrt")
    y_ours = m(x, is_causal=True, deterministic=False, rngs=nnx.Rngs(dropout=3))
    y_det = m(x, is_causal=True, deterministic=True)
    m.attention_fn = nnx.dot_product_attention
    chex.assert_trees_all_close(y_ours, m(x, is_causal=True, deterministic=False, rngs=nnx.Rngs(dropout=3)), **TOL)
    self.assertGreater(float(jnp.max(jnp.abs(y_ours - y_det))), 1e-3)

  def test_sown_weights_match_flax(self):
    x = _inputs()
    m = self._module(nnx.dot_product_attention)
    sown = []
    for fn in (flax_attention.make_attention_fn("sqrt"), nnx.dot_product_attention):
      m.attention_fn = fn
      sown.append(nnx.capture(m, nnx.Intermediate)(x, mask=_mask("causal", x), sow_weights=True))
    chex.assert_trees_all_close(sown[0][0], sown[1][0], **TOL)
    w_ours, w_ref = (jax.tree.leaves(s[1])[0] for s in sown)
    chex.assert_shape(w_ours, (2, HEADS, 6, 6))
    chex.assert_trees_all_close(w_ours, w_ref, **TOL)

  def test_sown_logit_stats_match_numpy(self):
    x = _inputs()
    m = self._module(flax_attention.make_attention_fn("sqrt", sow_logit_stats=True))
    y, state = nnx.capture(m, nnx.Intermediate)(x, mask=_mask("causal", x), sow_weights=True)
    std, absmax = _numpy_logit_stats(x, m.query.kernel[...], m.query.bias[...], m.key.kernel[...], m.key.bias[...],
                                     HEAD_DIM ** -0.5, _mask("causal", x))
    np.testing.assert_allclose(state["attention_logit_std"].get_value()[0], std, rtol=1e-5)
    np.testing.assert_allclose(state["attention_logit_absmax"].get_value()[0], absmax, rtol=1e-5)
    chex.assert_shape(state["attention_weights"].get_value()[0], (2, HEADS, 6, 6))

  def test_temperature_rule_equals_flax_on_prescaled_query(self):
    x = _inputs()
    m = self._module(nnx.dot_product_attention)
    tau = 0.7
    y_ours, y_ref = self._both(m, flax_attention.make_attention_fn("temperature", tau=tau),
                               _prescaled_flax(math.sqrt(HEAD_DIM) / tau, "nnx"), x, mask=_mask("causal", x))
    chex.assert_trees_all_close(y_ours, y_ref, **TOL)


class FunctionTest(chex.TestCase, parameterized.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(
      ("linear", "linear", {}, 1 / math.sqrt(HEAD_DIM)),
      ("temperature", "temperature", {"tau": 0.5}, math.sqrt(HEAD_DIM) / 0.5),
      ("sqrt", "sqrt", {}, 1.0),
  )
  def test_rule_with_bias_and_mask(self, name, options, factor):
    q, k, v = _qkv()
    bias = _normal(3, (2, HEADS, 6, 6))
    mask = jnp.asarray(np.random.RandomState(4).rand(2, 1, 6, 6) < 0.6).at[..., 0].set(True)
    fn = flax_attention.make_attention_fn(name, **options)
    ours = self.variant(lambda *a: fn(*a))(q, k, v, bias, mask)
    chex.assert_trees_all_close(ours, nn.dot_product_attention(q * factor, k, v, bias, mask), **TOL)

  def test_qk_norm_equals_flax_on_normalized_query_and_key(self):
    q, k, v = _qkv(std=5.0)
    ours = flax_attention.make_attention_fn("qk_norm")(q, k, v)
    chex.assert_trees_all_close(ours, nn.dot_product_attention(_rms(q), _rms(k), v), atol=1e-4, rtol=1e-4)

  @parameterized.named_parameters(("broadcast", True), ("per_entry", False))
  def test_dropout_with_rule_equals_flax_with_same_rng(self, broadcast):
    q, k, v = _qkv()
    kw = dict(dropout_rng=jax.random.key(11), dropout_rate=0.25, broadcast_dropout=broadcast, deterministic=False)
    ours = flax_attention.make_attention_fn("linear")(q, k, v, **kw)
    ref = nn.dot_product_attention(q / math.sqrt(HEAD_DIM), k, v, **kw)
    chex.assert_trees_all_close(ours, ref, **TOL)

  def test_gradients_match_flax_with_dropout(self):
    q, k, v = _qkv()
    mask = nn.make_causal_mask(jnp.ones((2, 6)))
    kw = dict(mask=mask, dropout_rng=jax.random.key(11), dropout_rate=0.25, deterministic=False)
    loss = lambda fn: lambda q, k, v: jnp.sum(jnp.sin(fn(q, k, v, **kw)))
    ours = jax.jit(jax.grad(loss(flax_attention.make_attention_fn("sqrt")), argnums=(0, 1, 2)))(q, k, v)
    ref = jax.jit(jax.grad(loss(nn.dot_product_attention), argnums=(0, 1, 2)))(q, k, v)
    chex.assert_trees_all_close(ours, ref, **TOL)

  def test_dtype_and_precision(self):
    q, k, v = _qkv()
    fn = flax_attention.make_attention_fn("sqrt")
    out = fn(q, k, v, dtype=jnp.bfloat16)
    self.assertEqual(out.dtype, jnp.bfloat16)
    ref = nn.dot_product_attention(q, k, v, dtype=jnp.bfloat16, force_fp32_for_softmax=True)
    np.testing.assert_allclose(out.astype(np.float32), ref.astype(np.float32), atol=3e-2)
    for precision in (jax.lax.Precision.HIGHEST, "highest", (jax.lax.Precision.HIGHEST,) * 2):
      jaxpr = str(jax.make_jaxpr(lambda q, k, v, p=precision: fn(q, k, v, precision=p))(q, k, v))
      self.assertIn("Precision.HIGHEST", jaxpr)
      self.assertNotIn("precision=None", jaxpr)
    with jax.default_matmul_precision("highest"):  # precision=None keeps the caller's default
      self.assertNotIn("precision=None", str(jax.make_jaxpr(fn)(q, k, v)))

  def test_unbatched_gqa_and_value_depth(self):
    q, k, v = _qkv(n=4, k=2)
    fn = flax_attention.make_attention_fn("sqrt")
    v5 = _normal(9, (2, 6, 2, 5))  # value head dim 5 != query/key head dim 8
    ref = nnx.dot_product_attention(q, k, v5, dropout_rate=0.1, deterministic=True)  # jax.nn's path needs depth 8
    chex.assert_trees_all_close(fn(q, k, v5), ref, **TOL)
    chex.assert_trees_all_close(fn(q[0], k[0], v[0]), nnx.dot_product_attention(q[0], k[0], v[0]), **TOL)
    kw = dict(dropout_rng=jax.random.key(1), dropout_rate=0.2, deterministic=False, is_causal=True)
    chex.assert_trees_all_close(fn(q, k, v, **kw), nnx.dot_product_attention(q, k, v, **kw), **TOL)

  def test_fully_masked_row_gives_zero(self):
    q, k, v = _qkv()
    mask = jnp.ones((1, 1, 6, 6), bool).at[:, :, 2].set(False)
    out = flax_attention.make_attention_fn("sqrt")(q, k, v, mask=mask)
    np.testing.assert_array_equal(out[:, 2], 0.0)

  def test_rule_resolved_once(self):
    with mock.patch.object(rules, "get_rule", wraps=rules.get_rule) as spy:
      fn = flax_attention.make_attention_fn("linear", alpha=2.0)
      q, k, v = _qkv()
      for _ in range(3):
        fn(q, k, v)
    # The name is resolved once, when the adapter is made; later calls only pass the rule object through.
    by_name = [c for c in spy.call_args_list if isinstance(c.args[0], str)]
    self.assertEqual(by_name, [mock.call("linear", alpha=2.0)])
    self.assertEqual(fn.rule, rules.LinearScale(alpha=2.0))


def _complex(seed, shape, std=0.5):
  """Complex normal draws; std 0.5 keeps the complex softmax's denominator Σ exp(z) away from 0."""
  r = np.random.RandomState(seed)
  return jnp.asarray(std * (r.standard_normal(shape) + 1j * r.standard_normal(shape)), jnp.complex64)


def _complex_qkv(seed=0, b=2, t=6, s=6, n=HEADS, k=HEADS, h=HEAD_DIM):
  return _complex(seed, (b, t, n, h)), _complex(seed + 1, (b, s, k, h)), _complex(seed + 2, (b, s, k, h))


class ComplexTest(chex.TestCase, parameterized.TestCase):
  """Complex query, key and value, as Flax's own attention takes them."""

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(
      ("plain", False, False, (2,)),
      ("mask_and_complex_bias", True, True, (2,)),
      ("two_batch_dims", True, True, (2, 3)),
      ("unbatched", True, False, ()),
  )
  def test_sqrt_equals_flax(self, with_mask, with_bias, batch):
    q, k, v = (x.reshape(batch + x.shape[-3:]) for x in _complex_qkv(b=math.prod(batch) or 1))
    mask = jnp.asarray(np.random.RandomState(4).rand(*batch, 1, 6, 6) < 0.6).at[..., 0].set(True) if with_mask else None
    bias = _complex(5, batch + (HEADS, 6, 6)) if with_bias else None
    out = self.variant(flax_attention.make_attention_fn("sqrt"))(q, k, v, bias, mask)
    self.assertEqual(out.dtype, jnp.complex64)
    self.assertGreater(float(jnp.max(jnp.abs(out.imag))), 0.1)
    chex.assert_trees_all_close(out, nn.dot_product_attention(q, k, v, bias, mask), **TOL)

  def test_rule_equals_flax_on_prescaled_query(self):
    q, k, v = _complex_qkv()
    mask = nn.make_causal_mask(jnp.ones((2, 6)))
    ours = flax_attention.make_attention_fn("temperature", tau=2.0)(q, k, v, mask=mask)
    chex.assert_trees_all_close(ours, nn.dot_product_attention(q * (math.sqrt(HEAD_DIM) / 2.0), k, v, mask=mask), **TOL)

  @parameterized.named_parameters(("broadcast", True), ("per_entry", False))
  def test_dropout_matches_flax_draw_for_draw(self, broadcast):
    q, k, v = _complex_qkv()
    kw = dict(dropout_rng=jax.random.key(11), dropout_rate=0.25, broadcast_dropout=broadcast, deterministic=False)
    ours = flax_attention.make_attention_fn("sqrt")(q, k, v, **kw)
    chex.assert_trees_all_close(ours, nn.dot_product_attention(q, k, v, **kw), **TOL)
    self.assertGreater(float(jnp.max(jnp.abs(ours - flax_attention.make_attention_fn("sqrt")(q, k, v)))), 1e-3)

  def test_gqa_causal_equals_nnx_weights_path(self):
    q, k, v = _complex_qkv(k=2)
    # nnx's own path without dropout or module goes to jax.nn.dot_product_attention, which does not compute complex
    # attention; its weights path (taken when dropout_rate > 0) does, like linen's.
    ref = nnx.dot_product_attention(q, k, v, is_causal=True, dropout_rate=0.1, deterministic=True)
    chex.assert_trees_all_close(flax_attention.make_attention_fn("sqrt")(q, k, v, is_causal=True), ref, **TOL)

  def test_linen_module_output_and_sown_weights_equal_flax(self):
    x = _complex(0, (2, 6, FEATURES))
    make = lambda fn: nn.MultiHeadDotProductAttention(num_heads=HEADS, qkv_features=FEATURES, attention_fn=fn)
    ours, ref = make(flax_attention.make_attention_fn("sqrt")), make(nn.dot_product_attention)
    params = ref.init(jax.random.key(1), x)
    sown = lambda mod: mod.apply(params, x, mask=_mask("causal", x.real), sow_weights=True, mutable=["intermediates"])
    (y_ours, st_ours), (y_ref, st_ref) = sown(ours), sown(ref)
    self.assertEqual(y_ours.dtype, jnp.complex64)
    chex.assert_trees_all_close(y_ours, y_ref, atol=1e-4, rtol=1e-4)
    w_ours, w_ref = st_ours["intermediates"]["attention_weights"][0], st_ref["intermediates"]["attention_weights"][0]
    self.assertEqual(w_ours.dtype, jnp.complex64)
    chex.assert_trees_all_close(w_ours, w_ref, **TOL)

  def test_nnx_module_equals_flax_weights_path(self):
    x = _complex(0, (2, 6, FEATURES))
    m = nnx.MultiHeadAttention(num_heads=HEADS, in_features=FEATURES, qkv_features=FEATURES, decode=False,
                               attention_fn=flax_attention.make_attention_fn("sqrt"), rngs=nnx.Rngs(0))
    y_ours = m(x, is_causal=True)
    m.attention_fn = nnx.dot_product_attention
    y_ref, _ = nnx.capture(m, nnx.Intermediate)(x, is_causal=True, sow_weights=True)  # module given: weights path
    chex.assert_trees_all_close(y_ours, y_ref, atol=1e-4, rtol=1e-4)

  def test_refused_options_name_the_option(self):
    q, k, v = _complex_qkv()
    cases = ((dict(rule="sqrt", logit_soft_cap=5.0), "logit_soft_cap needs real logits; the inputs are complex64"),
             (dict(rule="sqrt", logit_clamp=5.0), "logit_clamp needs real logits"),
             (dict(rule="qk_norm"), "rule QKNorm transforms query and key"))
    for kwargs, needle in cases:
      with self.assertRaisesRegex(TypeError, needle):
        flax_attention.make_attention_fn(**kwargs)(q, k, v)
    layer = nn.MultiHeadDotProductAttention(
        num_heads=HEADS, attention_fn=flax_attention.make_attention_fn("sqrt", sow_logit_stats=True))
    x = _complex(0, (2, 6, FEATURES))
    params = layer.init(jax.random.key(0), x)
    with self.assertRaisesRegex(TypeError, "sow_logit_stats needs real logits"):
      layer.apply(params, x, sow_weights=True, mutable=["intermediates"])
    with self.assertRaisesRegex(TypeError, "bias must have a floating or complex dtype, got int32"):
      flax_attention.make_attention_fn("sqrt")(q, k, v, jnp.ones((6, 6), jnp.int32))
    with self.assertRaisesRegex(ValueError, "bias of shape \\(3, 6, 6\\) does not broadcast"):
      flax_attention.make_attention_fn("sqrt")(q, k, v, _complex(1, (3, 6, 6)))

  def test_library_attention_stays_real_with_clear_messages(self):
    q, k, v = _qkv()
    for x, needle in ((q.astype(jnp.complex64), "query must have a floating dtype, got complex64 \\(complex values "
                       "are not supported here"),
                      (q.astype(jnp.int32), "query must have a floating dtype, got int32$"),
                      (q > 0, "query must have a floating dtype, got bool$")):
      with self.assertRaisesRegex(TypeError, needle):
        scaling.dot_product_attention(x, k.astype(x.dtype), v.astype(x.dtype))
    for x in (np.array(["a", "b"]), np.array([None, 1.0], dtype=object), np.array([True]), np.array([1])):
      with self.assertRaisesRegex(TypeError, f"x must have a floating or complex dtype, got {x.dtype}$"):
        validation.check_floating("x", x, complex_ok=True)
    validation.check_floating("x", np.ones(2, np.complex128), complex_ok=True)


class MixedPrecisionTest(chex.TestCase, parameterized.TestCase):
  """``dtype=bfloat16`` with and without ``force_fp32_for_softmax``: dtypes and values as Flax's."""

  @parameterized.product(force_fp32=(True, False), dropout=(True, False))
  def test_linen_module_sown_weights_and_output_as_flax(self, force_fp32, dropout):
    x = _inputs()
    make = lambda fn: nn.MultiHeadDotProductAttention(num_heads=HEADS, qkv_features=FEATURES, dtype=jnp.bfloat16,
                                                      force_fp32_for_softmax=force_fp32, dropout_rate=0.3,
                                                      attention_fn=fn)
    ours, ref = make(flax_attention.make_attention_fn("sqrt")), make(nn.dot_product_attention)
    params = ref.init(jax.random.key(1), x, deterministic=True)
    run = lambda mod: mod.apply(params, x, mask=_mask("causal", x), sow_weights=True, mutable=["intermediates"],
                                deterministic=not dropout, rngs={"dropout": jax.random.key(7)})
    (y_ours, st_ours), (y_ref, st_ref) = run(ours), run(ref)
    w_ours, w_ref = st_ours["intermediates"]["attention_weights"][0], st_ref["intermediates"]["attention_weights"][0]
    self.assertEqual(w_ours.dtype, w_ref.dtype)
    self.assertEqual(y_ours.dtype, y_ref.dtype)
    np.testing.assert_allclose(w_ours.astype(np.float32), w_ref.astype(np.float32), atol=2e-2)
    np.testing.assert_allclose(y_ours.astype(np.float32), y_ref.astype(np.float32), atol=5e-2)

  @parameterized.product(force_fp32=(True, False), dropout=(True, False))
  def test_function_output_dtype_and_values_as_flax(self, force_fp32, dropout):
    q, k, v = (x.astype(jnp.bfloat16) for x in _qkv())
    kw = dict(force_fp32_for_softmax=force_fp32, dropout_rate=0.3, dropout_rng=jax.random.key(3),
              deterministic=not dropout)
    ours = flax_attention.make_attention_fn("sqrt")(q, k, v, **kw)
    ref = nn.dot_product_attention(q, k, v, **kw)
    self.assertEqual(ours.dtype, ref.dtype)
    np.testing.assert_allclose(ours.astype(np.float32), ref.astype(np.float32), atol=5e-2)


class ErrorTest(parameterized.TestCase):

  def test_bad_rules_and_options(self):
    with self.assertRaisesRegex(ValueError, "unknown logit-scale rule 'cube'"):
      flax_attention.make_attention_fn("cube")
    with self.assertRaisesRegex(ValueError, "bad options for rule 'sqrt'"):
      flax_attention.make_attention_fn("sqrt", tau=2.0)
    with self.assertRaisesRegex(ValueError, "options can only be given with a rule name"):
      flax_attention.make_attention_fn(rules.SqrtScale(), tau=2.0)
    with self.assertRaisesRegex(ValueError, "tau"):
      flax_attention.make_attention_fn("temperature", tau=-1.0)
    with self.assertRaisesRegex(ValueError, "logit_soft_cap must be a positive"):
      flax_attention.make_attention_fn("sqrt", logit_soft_cap=0.0)
    with self.assertRaisesRegex(TypeError, "sow_logit_stats must be True or False"):
      flax_attention.make_attention_fn("sqrt", sow_logit_stats="yes")

  def test_bad_call_arguments(self):
    q, k, v = _qkv()
    fn = flax_attention.make_attention_fn("sqrt")
    with self.assertRaisesRegex(ValueError, "dropout_rng is required"):
      fn(q, k, v, dropout_rate=0.1)
    with self.assertRaisesRegex(ValueError, "dropout_rate must be in \\[0, 1\\)"):
      fn(q, k, v, dropout_rate=1.0, dropout_rng=jax.random.key(0))
    with self.assertRaisesRegex(NotImplementedError, "cannot honour qk_attn_weights_einsum"):
      fn(q, k, v, qk_attn_weights_einsum=jnp.einsum, attn_weights_value_einsum=jnp.einsum)
    with self.assertRaisesRegex(NotImplementedError, "pair of equal values"):
      fn(q, k, v, precision=(jax.lax.Precision.HIGHEST, jax.lax.Precision.DEFAULT))
    with self.assertRaisesRegex(ValueError, "unknown precision 'fast-ish'"):
      fn(q, k, v, precision="fast-ish")
    with self.assertRaisesRegex(ValueError, "same rank"):
      fn(q, k[0], v[0])
    with self.assertRaisesRegex(ValueError, "batch dims must match"):
      fn(q, k[:1], v[:1])
    with self.assertRaisesRegex(ValueError, "must agree in length and heads"):
      fn(q, k, v[:, :3])
    with self.assertRaisesRegex(ValueError, "multiple of key heads"):
      fn(q, k[:, :, :3], v[:, :, :3])
    with self.assertRaisesRegex(TypeError, "unexpected keyword argument 'scale'"):
      fn(q, k, v, scale=0.1)

  def test_linen_module_with_aqt_einsum_raises(self):
    x = _inputs()
    layer = nn.MultiHeadDotProductAttention(num_heads=HEADS, attention_fn=flax_attention.make_attention_fn("sqrt"),
                                            qk_attn_weights_einsum_cls=lambda: jnp.einsum,
                                            attn_weights_value_einsum_cls=lambda: jnp.einsum)
    with self.assertRaisesRegex(NotImplementedError, "cannot honour qk_attn_weights_einsum"):
      layer.init(jax.random.key(0), x)


if __name__ == "__main__":
  absltest.main()
