"""Dense attention against jax.nn.dot_product_attention and closed forms; masking against numpy positions."""

import functools
import math
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

import scaling
from scaling import masking
from scaling import rules


def _qkv(seed=0, b=2, t=7, s=9, n=4, k=2, h=16, dtype=jnp.float32, std=1.0):
  kq, kk, kv = jax.random.split(jax.random.key(seed), 3)
  q = std * jax.random.normal(kq, (b, t, n, h))
  key = std * jax.random.normal(kk, (b, s, k, h))
  v = jax.random.normal(kv, (b, s, k, h))
  return q.astype(dtype), key.astype(dtype), v.astype(dtype)


def _reference(q, k, v, *, logit_scale, weight_scale=1.0, mask=None):
  """A plain numpy oracle: repeat kv heads, scale, mask, softmax, average."""
  q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
  g = q.shape[2] // k.shape[2]
  k, v = np.repeat(k, g, axis=2), np.repeat(v, g, axis=2)
  z = np.einsum("btnh,bsnh->bnts", q, k) * logit_scale
  if mask is not None:
    z = np.where(mask, z, -np.inf)
  with np.errstate(invalid="ignore"):  # fully masked rows become NaN here; tests compare the other rows
    z = z - z.max(-1, keepdims=True)
    p = np.exp(z)
    p = p / p.sum(-1, keepdims=True) * weight_scale
  return np.einsum("bnts,bsnh->btnh", p, v)


class MatchesJaxNnTest(chex.TestCase, parameterized.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(
      ("plain", {}),
      ("causal", {"is_causal": True}),
      ("mask_bias", {"mask": True, "bias": True}),
      ("causal_mask_bias", {"is_causal": True, "mask": True, "bias": True}),
      ("window", {"local_window_size": (2, 1)}),
      ("seq_lengths", {"seq_lengths": True}),
  )
  def test_sqrt_equals_jax_nn(self, opts):
    q, k, v = _qkv()
    kwargs = {}
    if opts.get("is_causal"):
      kwargs["is_causal"] = True
    if opts.get("local_window_size"):
      kwargs["local_window_size"] = opts["local_window_size"]
    args = [None, None]
    if opts.get("bias"):
      args[0] = jax.random.normal(jax.random.key(5), (2, 4, 7, 9))
    if opts.get("mask"):
      m = jax.random.bernoulli(jax.random.key(6), 0.7, (2, 1, 7, 9))
      args[1] = m.at[:, :, :, 0].set(True)  # jax.nn gives mean(V) for fully masked rows; we give 0
    if opts.get("seq_lengths"):
      kwargs["key_value_seq_lengths"] = jnp.array([4, 9], jnp.int32)
    ours = self.variant(lambda q, k, v, b, m: scaling.dot_product_attention(q, k, v, b, m, rule="sqrt", **kwargs))(
        q, k, v, *args)
    ref = jax.nn.dot_product_attention(q, k, v, *args, **kwargs)
    chex.assert_trees_all_close(ours, ref, atol=1e-5, rtol=1e-5)

  def test_default_is_sqrt_and_gqa_and_unbatched(self):
    q, k, v = _qkv(n=6, k=3, t=5, s=11)
    chex.assert_trees_all_close(scaling.dot_product_attention(q, k, v),
                                jax.nn.dot_product_attention(q, k, v), atol=1e-5)
    chex.assert_trees_all_close(scaling.dot_product_attention(q[0], k[0], v[0]),
                                jax.nn.dot_product_attention(q[0], k[0], v[0]), atol=1e-5)

  def test_residual_matches_jax_nn(self):
    q, k, v = _qkv()
    _, lse = scaling.dot_product_attention(q, k, v, is_causal=True, return_residual=True)
    _, ref = jax.nn.dot_product_attention(q, k, v, is_causal=True, return_residual=True)
    chex.assert_shape(lse, (2, 7, 4))
    chex.assert_trees_all_close(lse, ref, atol=1e-5)

  def test_gradients_match_jax_nn(self):
    q, k, v = _qkv()
    loss = lambda f: lambda q, k, v: jnp.sum(jnp.sin(f(q, k, v, is_causal=True)))
    ours = jax.grad(loss(scaling.dot_product_attention), argnums=(0, 1, 2))(q, k, v)
    ref = jax.grad(loss(jax.nn.dot_product_attention), argnums=(0, 1, 2))(q, k, v)
    chex.assert_trees_all_close(ours, ref, atol=1e-5)

  def test_number_scale(self):
    q, k, v = _qkv()
    chex.assert_trees_all_close(scaling.dot_product_attention(q, k, v, scale=0.3),
                                jax.nn.dot_product_attention(q, k, v, scale=0.3), atol=1e-5)


class RuleFormulaTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("none", "none", {}, lambda h: 1.0, 1.0),
      ("sqrt", "sqrt", {}, lambda h: 1 / math.sqrt(h), 1.0),
      ("linear", "linear", {}, lambda h: 1 / h, 1.0),
      ("linear_alpha", "linear", {"alpha": 3.0}, lambda h: 3.0 / h, 1.0),
      ("linear_base", "linear", {"base_head_dim": 64}, lambda h: 8.0 / h, 1.0),
      ("quadratic", "quadratic", {}, lambda h: 1 / h**2, 1.0),
      ("temperature", "temperature", {"tau": 2.5}, lambda h: 0.4, 1.0),
      ("post_softmax", "post_softmax", {}, lambda h: 1.0, "sqrt"),
  )
  def test_rule_against_formula(self, name, opts, logit_scale, weight_scale):
    h = 16
    q, k, v = _qkv(h=h)
    ws = 1 / math.sqrt(h) if weight_scale == "sqrt" else weight_scale
    out = scaling.dot_product_attention(q, k, v, rule=rules.get_rule(name, **opts))
    np.testing.assert_allclose(out, _reference(q, k, v, logit_scale=logit_scale(h), weight_scale=ws),
                               atol=2e-5, rtol=1e-4)

  def test_linear_equals_sqrt_at_base(self):
    self.assertAlmostEqual(rules.LinearScale(base_head_dim=64).logit_scale(64), 1 / 8)
    self.assertAlmostEqual(rules.LinearScale(base_head_dim=64).logit_scale(256), 8 / 256)

  @parameterized.parameters("rms", "layer")
  def test_qk_norm(self, norm):
    h = 8
    q, k, v = _qkv(h=h, std=7.0)
    gain_q = jnp.linspace(0.5, 1.5, h)
    gain_k = jnp.linspace(2.0, 1.0, h)

    def normalize(x, gain):
      x = np.asarray(x, np.float64)
      if norm == "layer":
        x = x - x.mean(-1, keepdims=True)
      return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * np.asarray(gain)

    rule = rules.QKNorm(norm=norm, query_gain=gain_q, key_gain=gain_k)
    out = jax.jit(lambda q, k, v, r: scaling.dot_product_attention(q, k, v, rule=r))(q, k, v, rule)
    ref = _reference(normalize(q, gain_q), normalize(k, gain_k), v, logit_scale=1 / math.sqrt(h))
    np.testing.assert_allclose(out, ref, atol=1e-4, rtol=1e-4)

  def test_qk_norm_is_scale_invariant(self):
    q, k, v = _qkv()
    a = scaling.dot_product_attention(q, k, v, rule="qk_norm")
    b = scaling.dot_product_attention(100 * q, 0.3 * k, v, rule="qk_norm")
    chex.assert_trees_all_close(a, b, atol=1e-4)

  def test_custom_rule_registers_without_touching_attention(self):

    @rules.struct.dataclass
    class Cubic(rules.ScaleRule):

      def logit_scale(self, head_dim):
        return head_dim**-3

    self.enter_context(mock.patch.dict(rules._REGISTRY))  # the rule is gone after the test (the registry is global)
    rules.register_rule("cubic_test", Cubic, overwrite=True)
    q, k, v = _qkv(h=4)
    np.testing.assert_allclose(scaling.dot_product_attention(q, k, v, rule="cubic_test"),
                               _reference(q, k, v, logit_scale=4.0**-3), atol=1e-5)

  def test_bad_rule_inputs(self):
    q, k, v = _qkv()
    with self.assertRaisesRegex(ValueError, "unknown logit-scale rule 'cube'"):
      scaling.dot_product_attention(q, k, v, rule="cube")
    with self.assertRaisesRegex(ValueError, "either `scale` or `rule`"):
      scaling.dot_product_attention(q, k, v, rule="sqrt", scale=1.0)
    with self.assertRaisesRegex(ValueError, "tau"):
      rules.get_rule("temperature", tau=0.0)
    with self.assertRaisesRegex(ValueError, "already registered"):
      rules.register_rule("sqrt", rules.SqrtScale)


class MaskingAndOptionsTest(chex.TestCase, parameterized.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_fully_masked_rows_give_zero_not_nan(self):
    q, k, v = _qkv()
    mask = jnp.ones((2, 4, 7, 9), bool).at[:, :, 3, :].set(False)
    out, w = self.variant(lambda q, k, v, m: scaling.dot_product_attention(q, k, v, mask=m, return_weights=True))(
        q, k, v, mask)
    chex.assert_tree_all_finite(out)
    np.testing.assert_array_equal(out[:, 3], 0.0)
    np.testing.assert_array_equal(w[:, :, 3], 0.0)
    ref = _reference(q, k, v, logit_scale=0.25, mask=np.asarray(mask))
    np.testing.assert_allclose(np.delete(out, 3, axis=1), np.delete(ref, 3, axis=1), atol=1e-5)
    grads = jax.grad(lambda q: jnp.sum(scaling.dot_product_attention(q, k, v, mask=mask)))(q)
    chex.assert_tree_all_finite(grads)

  @parameterized.parameters(jnp.float32, jnp.bfloat16)
  def test_masked_softmax_matches_closed_form_value_and_gradient(self, dtype):
    # Closed form, in numpy float64: softmax over the visible entries of each row, 0 elsewhere and on rows with
    # nothing visible; its vector-Jacobian product y·(g − Σ y·g) on the visible entries, 0 elsewhere.
    logits = jax.random.normal(jax.random.PRNGKey(3), (3, 5, 6), jnp.float32) * 4.0
    mask = jax.random.bernoulli(jax.random.PRNGKey(4), 0.6, (3, 5, 6)).at[1, 2].set(False).at[2, 0].set(True)
    cotangent = jax.random.normal(jax.random.PRNGKey(5), (3, 5, 6), jnp.float32)
    x, g = (np.asarray(a.astype(dtype), np.float64) for a in (logits, cotangent))
    m = np.asarray(mask)
    e = np.where(m, np.exp(x - np.max(x, axis=-1, keepdims=True, initial=-np.inf, where=m)), 0.0)
    denom = e.sum(-1, keepdims=True)
    y = np.where(denom > 0, e / np.where(denom > 0, denom, 1.0), 0.0)
    dx = y * (g - np.sum(y * g, axis=-1, keepdims=True))
    weights, vjp = jax.vjp(lambda z: scaling.masked_softmax(z, mask), logits.astype(dtype))
    (grad,) = vjp(cotangent.astype(dtype))
    tol = 1e-6 if dtype == jnp.float32 else 2e-2
    np.testing.assert_allclose(np.asarray(weights, np.float64), y, atol=tol)
    np.testing.assert_allclose(np.asarray(grad, np.float64), dx, atol=tol * 4)
    np.testing.assert_array_equal(np.asarray(weights)[~np.asarray(mask)], 0.0)  # exactly 0 where masked
    np.testing.assert_array_equal(np.asarray(grad)[~np.asarray(mask)], 0.0)
    self.assertEqual(weights.dtype, dtype)

  def test_query_seq_lengths_zero_padded_queries(self):
    q, k, v = _qkv()
    out = scaling.dot_product_attention(q, k, v, query_seq_lengths=jnp.array([3, 7], jnp.int32))
    np.testing.assert_array_equal(out[0, 3:], 0.0)
    chex.assert_trees_all_close(out, jax.nn.dot_product_attention(
        q, k, v, query_seq_lengths=jnp.array([3, 7], jnp.int32)), atol=1e-5)

  def test_soft_cap_and_clamp(self):
    q, k, v = _qkv(std=3.0)
    cap = 2.0
    logits = scaling.attention_logits(q, k, rule="none", logit_soft_cap=cap)
    raw = np.einsum("btnh,bsnh->bnts", np.asarray(q), np.repeat(np.asarray(k), 2, axis=2))
    np.testing.assert_allclose(logits, cap * np.tanh(raw / cap), atol=1e-5)
    clamped = scaling.attention_logits(q, k, rule="none", logit_clamp=1.5)
    np.testing.assert_allclose(clamped, np.clip(raw, -1.5, 1.5), atol=1e-5)
    with self.assertRaisesRegex(ValueError, "logit_soft_cap"):
      scaling.dot_product_attention(q, k, v, logit_soft_cap=-1.0)

  def test_logits_weights_and_output_share_one_path(self):
    q, k, v = _qkv()
    out, logits, weights, mask = scaling.attention_with_aux(q, k, v, is_causal=True)
    chex.assert_shape(logits, (2, 4, 7, 9))
    ref_logits = np.einsum("btnh,bsnh->bnts", np.asarray(q), np.repeat(np.asarray(k), 2, axis=2)) / 4.0
    np.testing.assert_allclose(logits, ref_logits, atol=1e-5)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-6)
    self.assertTrue(bool(jnp.all(jnp.where(mask, True, weights == 0))))
    np.testing.assert_allclose(out, np.einsum("bnts,bsnh->btnh", weights, np.repeat(np.asarray(v), 2, axis=2)),
                               atol=1e-5)
    chex.assert_trees_all_close(scaling.attention_weights(q, k, is_causal=True), weights)

  def test_shape_errors(self):
    q, k, v = _qkv()
    with self.assertRaisesRegex(ValueError, "multiple of key heads"):
      scaling.dot_product_attention(q[:, :, :3], k, v)
    with self.assertRaisesRegex(ValueError, "same shape"):
      scaling.dot_product_attention(q, k, v[:, :4])
    with self.assertRaisesRegex(ValueError, "boolean"):
      scaling.dot_product_attention(q, k, v, mask=jnp.ones((1, 1, 7, 9)))


def _opts(**kwargs):
  base = dict(scale=None, rule=None, logit_soft_cap=None, logit_clamp=None, float32_softmax=True, subtract_max=True)
  return scaling.attention.resolve_logit_options(16, **{**base, **kwargs})


class DispatchTest(parameterized.TestCase):
  """implementation=None: the measured rule picks dense or blockwise; options blockwise lacks go dense."""

  def test_rule(self):
    select = scaling.attention.select_implementation
    min_len = scaling.attention.BLOCKWISE_MIN_KV_LEN
    # Below BLOCKWISE_MIN_KV_LEN: one T x S tile under differentiation and dense alone, while B·N·T·S <=
    # SMALL_SINGLE_TILE_MAX_LOGITS (2**19 = 8·4·128·128); dense past it.
    self.assertEqual(scaling.attention.SMALL_SINGLE_TILE_MAX_LOGITS, 8 * 4 * 128 * 128)
    path = lambda c: (c.implementation, c.block_q, c.block_k, c.forward and c.forward.implementation)
    for causal in (False, True):
      below = (1, min_len - 1, 4, 16)
      self.assertEqual(path(select(below, below, _opts(), backend="cpu", is_causal=causal)),
                       ("blockwise", min_len - 1, min_len - 1, "dense"))
      self.assertEqual(path(select((8, 128, 4, 16), (8, 128, 2, 16), _opts(), backend="cpu", is_causal=causal)),
                       ("blockwise", 128, 128, "dense"))  # at the limit, GQA or not
      self.assertEqual(path(select((9, 128, 4, 16), (9, 128, 4, 16), _opts(), backend="cpu", is_causal=causal)),
                       ("dense", None, None, None))  # past it
    # causal with T < S: only the first T keys count (the tile is T x T); not causal, all S do
    self.assertEqual(path(select((1, 100, 4, 16), (1, 200, 4, 16), _opts(), backend="cpu", is_causal=True)),
                     ("blockwise", 100, 100, "dense"))
    self.assertEqual(path(select((1, 100, 4, 16), (1, 200, 4, 16), _opts(), backend="cpu")),
                     ("blockwise", 100, 200, "dense"))
    self.assertEqual(path(select(below, below, _opts(), backend="cpu", return_weights=True)),
                     ("dense", None, None, None))
    large = scaling.attention.LARGE_BLOCKS_MIN_KV_LEN
    for kv_len, blocks in ((large - 1, scaling.attention.BLOCKS), (large, scaling.attention.LARGE_BLOCKS)):
      choice = select((1, 2 * large, 2, 16), (1, kv_len, 2, 16), _opts(rule="qk_norm"), backend="cpu",
                      is_causal=True)
      self.assertEqual((choice.implementation, choice.block_q, choice.block_k), ("blockwise", *blocks))
      choice = select((1, 2 * large, 2, 16), (1, kv_len, 2, 16), _opts(rule="qk_norm"), backend="cpu")
      self.assertEqual((choice.block_q, choice.block_k), scaling.attention.LARGE_BLOCKS)  # no mask: large tiles
    self.assertEqual(select((1, 3, 4, 16), (1, min_len, 4, 16), _opts(), backend="cpu", is_causal=True).block_q,
                     3)  # capped at T
    small = scaling.attention.SINGLE_TILE_MAX_LOGITS // (4 * min_len)  # B·N·T·S at the limit: one T x S tile
    for causal in (False, True):
      choice = select((1, small, 4, 16), (1, min_len, 4, 16), _opts(), backend="cpu", is_causal=causal)
      self.assertEqual((choice.implementation, choice.block_q, choice.block_k, choice.forward),
                       ("blockwise", small, min_len, None))
    # causal with T < S: keys past T are never seen, so the rule tiles as if S were T (one T x T tile here)
    for t, kv_len in ((1, 4096), (200, 2048), (min_len, 4 * min_len)):
      choice = select((1, t, 4, 16), (1, kv_len, 4, 16), _opts(), backend="cpu", is_causal=True)
      self.assertEqual((choice.implementation, choice.block_q, choice.block_k), ("blockwise", t, t))
      choice = select((1, t, 4, 16), (1, kv_len, 4, 16), _opts(), backend="cpu")  # not causal: all S keys count
      self.assertEqual(choice.block_k, kv_len if 4 * t * kv_len <= scaling.attention.SINGLE_TILE_MAX_LOGITS else
                       scaling.attention.LARGE_BLOCKS[1])
    for causal, blocks in ((True, scaling.attention.BLOCKS), (False, scaling.attention.LARGE_BLOCKS)):  # past it
      choice = select((1, small + 1, 4, 16), (1, min_len, 4, 16), _opts(), backend="cpu", is_causal=causal)
      self.assertEqual((choice.implementation, choice.block_q, choice.block_k),
                       ("blockwise", *(min(b, min_len) for b in blocks)))
    long = ((1, 4 * min_len, 4, 16), (1, 4 * min_len, 4, 16))
    for opts, kwargs in ((_opts(float32_softmax=False), {}), (_opts(subtract_max=False), {}),
                         (_opts(), {"return_weights": True})):
      self.assertEqual(select(*long, opts, backend="cpu", **kwargs).implementation, "dense")
    self.assertEqual(select(*long, _opts(), dtype=jnp.bfloat16, backend="gpu").implementation, "cudnn")
    self.assertEqual(select(*long, _opts(), dtype=jnp.float32, backend="gpu").implementation, "blockwise")
    self.assertEqual(select(*long, _opts(rule="qk_norm"), dtype=jnp.bfloat16, backend="gpu").implementation,
                     "blockwise")

  @parameterized.parameters(  # (B, T, N, K, S) -> (forward+backward, forward alone) blocks, written out from the rule
      ((1, 2048, 4, 4, 2048), (256, 512), (256, 512)),  # no GQA: G·256·512 = 2**17 (tile limit); B·N = 4: fits
      ((4, 2048, 16, 16, 2048), (256, 512), (256, 512)),  # B·N = 64 > T·S / (256·512): no step cap from S = 2048
      ((8, 2048, 16, 16, 2048), (256, 512), (256, 512)),  # B·N = 128: likewise
      ((4, 2048, 16, 16, 8192), (256, 512), (256, 512)),  # local window, S = 8192: likewise
      ((2, 1024, 8, 8, 1024), (128, 128), (128, 128)),  # B·N = 16: 16·256·512 > T·S = 2**20: straight to 128x128
      ((1, 2048, 8, 8, 2048), (256, 512), (256, 512)),  # B·N = 8: 8·256·512 = 2**20 <= T·S
      ((1, 1024, 8, 8, 1024), (256, 512), (256, 512)),  # B·N = 8: 8·256·512 = 2**20 = T·S, the most that fits
      ((4, 1024, 8, 8, 1024), (128, 128), (128, 128)),  # B·N = 32: 32·128·128 = 2**19 <= T·S
      ((2, 1536, 8, 8, 1536), (256, 512), (256, 512)),  # B·N = 16: 16·256·512 = 2**21 <= T·S = 2359296
      ((4, 1536, 8, 8, 1536), (128, 128), (128, 128)),  # B·N = 32: 2**22 > T·S: 128x128, both passes
      ((1, 2048, 4, 2, 2048), (256, 256), (256, 256)),  # G = 2, one over: block_k halves first
      ((1, 2048, 8, 2, 2048), (128, 256), (128, 256)),  # G = 4: then block_q to 128
      ((2, 1024, 8, 2, 1024), (128, 256), (128, 256)),  # G = 4: the tile cap only, no step cap with GQA
      ((4, 512, 8, 2, 512), (128, 256), (128, 256)),  # G = 4: a step cap would have given the floor 64x128
      ((2, 4096, 8, 1, 4096), (128, 128), (128, 128)),  # G = 8: then block_k to 128
      ((1, 2048, 1, 1, 1023), (128, 128), (128, 128)),  # below LARGE_BLOCKS_MIN_KV_LEN without GQA: BLOCKS
      ((1, 2048, 16, 1, 1023), (64, 128), (64, 128)),  # with GQA LARGE_BLOCKS at any S; G = 16: block_q last
      ((2, 512, 4, 2, 512), (256, 256), (256, 256)),  # G = 2 below LARGE_BLOCKS_MIN_KV_LEN: block_k halves once
      ((1, 512, 32, 1, 512), (64, 128), (64, 128)),  # the floor MIN_BLOCKS, even over the limit
      ((4, 512, 8, 8, 512), (64, 128), (128, 128)),  # B·N = 32: 32·128·128 > T·S = 2**18: MIN_BLOCKS under grad
      ((2, 512, 8, 8, 512), (128, 128), (128, 128)),  # B·N = 16: 16·128·128 = 2**18 = T·S
      ((3, 600, 1, 1, 1900), (256, 512), (256, 512)),  # local window, S = 1900: 3·256·512 <= T·S = 1140000
      ((1, 100, 8, 8, 1500), (100, 128), (100, 128)),  # B·N = 8: 8·100·512 > T·S = 150000: 128x128 capped at T
      ((16, 100, 4, 4, 1500), (64, 128), (100, 128)),  # B·N = 64: 64·100·128 > T·S: MIN_BLOCKS under grad only
      ((64, 100, 4, 4, 4096), (100, 512), (100, 512)),  # S = 4096: no step cap from S = 2048
  )
  def test_blocks_hold_the_tile_within_the_limits(self, shape, blocks, forward_blocks):
    b, t, n, k, s = shape
    query_shape, key_shape = (b, t, n, 16), (b, s, k, 16)
    blocks_of = functools.partial(scaling.attention.blockwise_blocks, query_shape, key_shape, is_causal=True)
    self.assertEqual(blocks_of(), blocks)
    self.assertEqual(blocks_of(differentiated=False), forward_blocks)
    # the limits the table above was written for
    self.assertEqual((scaling.attention.TILE_MAX_ELEMENTS, scaling.attention.BLOCKS, scaling.attention.LARGE_BLOCKS,
                      scaling.attention.MIN_BLOCKS, scaling.attention.LARGE_BLOCKS_MIN_KV_LEN,
                      scaling.attention.STEP_CAP_MAX_KV_LEN), (2**17, (128, 128), (256, 512), (64, 128), 1024, 2048))
    # A causal mask with T < S would count only T keys (tested in test_rule); a local window keeps S, and the
    # rule treats it like a causal mask otherwise.
    choice = scaling.attention.select_implementation(query_shape, key_shape, _opts(), backend="cpu",
                                                     is_causal=t >= s, has_local_window=t < s)
    self.assertEqual((choice.block_q, choice.block_k), blocks)
    forward = choice.forward
    self.assertEqual(None if forward is None else (forward.implementation, forward.block_q, forward.block_k),
                     None if forward_blocks == blocks else ("blockwise", *forward_blocks))

  @parameterized.parameters((1, 300), (200, 2048))  # one T x T tile; 2048 keys padded to 11 tiles of 200
  def test_causal_short_queries_match_jax_nn(self, t, s):
    q, k, v = _qkv(seed=5, b=1, t=t, s=s, n=4, k=2, h=8)
    self.assertEqual(scaling.attention.select_implementation(q.shape, k.shape, _opts(), backend="cpu",
                                                             is_causal=True).block_k, t)

    def loss(attend):
      return lambda q, k, v: jnp.sum(jnp.sin(attend(q, k, v, is_causal=True)))

    ours = jax.jit(jax.value_and_grad(loss(scaling.dot_product_attention), argnums=(0, 1, 2)))(q, k, v)
    reference = jax.value_and_grad(loss(jax.nn.dot_product_attention), argnums=(0, 1, 2))(q, k, v)
    chex.assert_trees_all_close(ours, reference, atol=2e-5, rtol=2e-5)
    chex.assert_trees_all_close(jax.jit(functools.partial(scaling.dot_product_attention, is_causal=True))(q, k, v),
                                jax.nn.dot_product_attention(q, k, v, is_causal=True), atol=2e-5, rtol=2e-5)

  @parameterized.parameters(  # (B, T, N, K, S) -> blocks, both passes, written out from the rule
      ((4, 2048, 16, 16, 8192), (256, 512)),  # B·N = 64: no step cap without a mask
      ((4, 512, 8, 8, 512), (256, 512)),  # S < LARGE_BLOCKS_MIN_KV_LEN: LARGE_BLOCKS all the same
      ((1, 2048, 8, 2, 2048), (128, 256)),  # G = 4: the tile cap only
      ((1, 512, 32, 1, 512), (64, 128)),  # G = 32: the floor MIN_BLOCKS
  )
  def test_unmasked_blocks_are_large_in_both_passes(self, shape, blocks):
    b, t, n, k, s = shape
    query_shape, key_shape = (b, t, n, 16), (b, s, k, 16)
    for differentiated in (True, False):
      self.assertEqual(scaling.attention.blockwise_blocks(query_shape, key_shape, is_causal=False,
                                                          differentiated=differentiated), blocks)
    choice = scaling.attention.select_implementation(query_shape, key_shape, _opts(), backend="cpu")
    self.assertEqual((choice.implementation, choice.block_q, choice.block_k, choice.forward),
                     ("blockwise", *blocks, None))

  def test_forward_tiles_run_when_not_differentiated(self):
    # B·N = 64 heads of T = S = 256: 64·128·128 > T·S: backward tiles 64x128, forward 128x128.
    q, k, v = _qkv(seed=3, b=1, t=256, s=256, n=64, k=64, h=4)
    ct = jax.random.normal(jax.random.key(4), q.shape)
    choice = scaling.attention.select_implementation(q.shape, k.shape, _opts(), backend="cpu", is_causal=True)
    self.assertEqual((choice.block_q, choice.block_k, choice.forward.block_q, choice.forward.block_k),
                     (64, 128, 128, 128))
    big = scaling.attention.select_implementation((1, 256, 4, 8), (1, 8192, 4, 8), _opts(), backend="cpu",
                                                  has_local_window=True)
    self.assertIsNone(big.forward)  # B·N·256·512 <= T·S: both passes' tiles are LARGE_BLOCKS
    default = lambda q, k, v: scaling.dot_product_attention(q, k, v, is_causal=True)
    forced = {tiles: functools.partial(scaling.blockwise.blockwise_attention, is_causal=True, block_q=tiles[0],
                                       block_k=tiles[1]) for tiles in ((64, 128), (128, 128))}

    def value_and_grads(fn):
      return jax.value_and_grad(lambda q, k, v: jnp.vdot(fn(q, k, v), ct), argnums=(0, 1, 2))(q, k, v)

    # Alone: the forward's tiles; differentiated: the backward's tiles forward and backward, value and gradients.
    out, want = jax.jit(lambda: (default(q, k, v), forced[128, 128](q, k, v)))()
    chex.assert_trees_all_close(out, want, rtol=0, atol=1e-7)
    got, want = jax.jit(lambda: (value_and_grads(default), value_and_grads(forced[64, 128])))()
    chex.assert_trees_all_close(got, want, rtol=0, atol=1e-7)
    # Both against jax.nn's, an independent reference.
    out_nn = jax.nn.dot_product_attention(q, k, v, is_causal=True)
    chex.assert_trees_all_close(out, out_nn, rtol=1e-5, atol=2e-6)
    chex.assert_trees_all_close(got, value_and_grads(lambda q, k, v: jax.nn.dot_product_attention(
        q, k, v, is_causal=True)), rtol=1e-4, atol=2e-5)
    # With a mask (or a residual) nothing changes: the backward's tiles.
    mask = jnp.ones((1, 1, 256, 256), bool)
    chex.assert_trees_all_close(
        jax.jit(lambda: scaling.dot_product_attention(q, k, v, mask=mask, is_causal=True))(),
        jax.jit(lambda: forced[64, 128](q, k, v, mask=mask))(), rtol=0, atol=1e-7)

  def test_short_keys_one_tile_when_differentiated_dense_alone(self):
    # S = 64 < BLOCKWISE_MIN_KV_LEN: under differentiation one 48 x 64 tile, alone dense; with a mask, dense always.
    q, k, v = _qkv(seed=5, b=2, t=48, s=64, n=4, k=2, h=8)
    ct = jax.random.normal(jax.random.key(6), q.shape)
    default = lambda q, k, v, **kw: scaling.dot_product_attention(q, k, v, **kw)
    dense = functools.partial(scaling.dot_product_attention, implementation="dense")
    tile = functools.partial(scaling.blockwise.blockwise_attention, block_q=48, block_k=64)

    def value_and_grads(fn, **kw):
      return jax.value_and_grad(lambda q, k, v: jnp.vdot(fn(q, k, v, **kw), ct), argnums=(0, 1, 2))(q, k, v)

    out, want = jax.jit(lambda: (default(q, k, v), dense(q, k, v)))()
    chex.assert_trees_all_close(out, want, rtol=0, atol=0)  # the dense program itself
    got, want = jax.jit(lambda: (value_and_grads(default), value_and_grads(tile)))()
    chex.assert_trees_all_close(got, want, rtol=0, atol=0)  # the one tile's program itself
    chex.assert_trees_all_close(got, value_and_grads(jax.nn.dot_product_attention), rtol=1e-4, atol=2e-5)
    # Not split (a mask, a residual): dense, differentiated or not.
    mask = jnp.tril(jnp.ones((48, 64), bool))[None, None]
    got, want = jax.jit(lambda: (value_and_grads(default, mask=mask), value_and_grads(dense, mask=mask)))()
    chex.assert_trees_all_close(got, want, rtol=0, atol=0)
    loops = lambda **kw: "while[" in str(jax.make_jaxpr(lambda q: value_and_grads(default, **kw))(q))
    self.assertEqual((loops(is_causal=True), loops(mask=mask)), (True, False))  # blockwise's key-block loops

  def test_default_long_sequence_matches_jax_nn(self):
    t = scaling.attention.BLOCKWISE_MIN_KV_LEN
    q, k, v = _qkv(b=1, t=t, s=t, n=2, k=1, h=8, std=0.5)
    ct = jax.random.normal(jax.random.key(9), q.shape)

    def value_and_grads(fn):
      def loss(q, k, v):
        out, lse = fn(q, k, v, is_causal=True, return_residual=True)
        return jnp.vdot(out, ct), (out, lse)
      return jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True)(q, k, v)

    self.assertEqual(scaling.attention.select_implementation(q.shape, k.shape, _opts(), backend="cpu",
                                                             is_causal=True).implementation, "blockwise")
    got, want = jax.jit(lambda: (value_and_grads(scaling.dot_product_attention),
                                 value_and_grads(jax.nn.dot_product_attention)))()
    chex.assert_trees_all_close(got[0], want[0], rtol=1e-5, atol=2e-5)  # loss, output, log-sum-exp
    chex.assert_trees_all_close(got[1], want[1], rtol=1e-4, atol=2e-5)

  @parameterized.named_parameters(
      ("weights", {"return_weights": True}),
      ("no_max_subtraction", {"subtract_max": False}),
      ("low_precision_softmax", {"float32_softmax": False}),
  )
  def test_unsupported_options_fall_back_to_dense(self, kwargs):
    t = scaling.attention.BLOCKWISE_MIN_KV_LEN
    q, k, v = _qkv(b=1, t=t, s=t, n=2, k=2, h=8, std=0.5)
    if "return_weights" not in kwargs:  # forcing blockwise shows what the fallback avoids
      with self.assertRaisesRegex(ValueError, "dense path"):
        scaling.dot_product_attention(q, k, v, is_causal=True, implementation="blockwise", **kwargs)
    out = scaling.dot_product_attention(q, k, v, is_causal=True, **kwargs)
    out = out[0] if isinstance(out, tuple) else out
    causal = np.tril(np.ones((t, t), bool))
    np.testing.assert_allclose(out, _reference(q, k, v, logit_scale=8**-0.5, mask=causal), rtol=2e-5, atol=2e-5)

  def test_traced_scale_falls_back_to_dense(self):
    t = scaling.attention.BLOCKWISE_MIN_KV_LEN
    q, k, v = _qkv(b=1, t=t, s=t, n=2, k=2, h=8, std=0.5)
    scales = jnp.array([0.1, 0.4])
    out = jax.vmap(lambda c: scaling.dot_product_attention(q, k, v, rule=rules.FixedScale(c, 1.0),
                                                           is_causal=True))(scales)
    causal = np.tril(np.ones((t, t), bool))
    for i, c in enumerate([0.1, 0.4]):
      np.testing.assert_allclose(out[i], _reference(q, k, v, logit_scale=c, mask=causal), rtol=2e-5, atol=2e-5)

  def test_forced_implementations(self):
    q, k, v = _qkv()
    dense = scaling.dot_product_attention(q, k, v, implementation="dense")
    np.testing.assert_allclose(dense, _reference(q, k, v, logit_scale=16**-0.5), rtol=2e-5, atol=2e-6)
    chex.assert_trees_all_equal(scaling.dot_product_attention(q, k, v, implementation="xla"), dense)
    blockwise = jax.jit(lambda q, k, v: scaling.dot_product_attention(q, k, v, implementation="blockwise"))
    chex.assert_trees_all_close(blockwise(q, k, v), dense, rtol=2e-5, atol=2e-6)
    with self.assertRaisesRegex(ValueError, "implementation must be"):
      scaling.dot_product_attention(q, k, v, implementation="flash")
    with self.assertRaisesRegex(ValueError, "does not return weights"):
      scaling.dot_product_attention(q, k, v, implementation="blockwise", return_weights=True)
    with self.assertRaisesRegex(ValueError, "pallas.*bias"):
      scaling.dot_product_attention(q, k, v, jnp.zeros((7, 9)), implementation="pallas")
    with self.assertRaisesRegex(ValueError, "cudnn"):
      scaling.dot_product_attention(q, k, v, rule="qk_norm", implementation="cudnn")


class LowPrecisionTest(parameterized.TestCase):
  """float16 with and without the safeguards: the failure the switches exist to show."""

  def test_float16_default_is_finite_and_close(self):
    q, k, v = _qkv(h=64, std=1.0, dtype=jnp.float16)
    out = scaling.dot_product_attention(q, k, v, rule="none")
    chex.assert_tree_all_finite(out)
    ref = _reference(q, k, v, logit_scale=1.0)
    np.testing.assert_allclose(np.asarray(out, np.float32), ref, atol=2e-2)

  def test_float16_without_max_subtraction_overflows(self):
    q, k, v = _qkv(h=64, std=1.0, dtype=jnp.float16)
    # Unscaled logits have std 8 here; exp(z) overflows float16 (max 65504) once z > 11.1.
    out = scaling.dot_product_attention(q, k, v, rule="none", float32_softmax=False, subtract_max=False)
    self.assertFalse(bool(jnp.all(jnp.isfinite(out))))
    # Max-subtraction alone (still float16 softmax) prevents it.
    out = scaling.dot_product_attention(q, k, v, rule="none", float32_softmax=False)
    chex.assert_tree_all_finite(out)
    # float32 softmax alone prevents it too at these magnitudes (exp(40) fits float32).
    out = scaling.dot_product_attention(q, k, v, rule="none", subtract_max=False)
    chex.assert_tree_all_finite(out)


class MaskingModuleTest(parameterized.TestCase):
  """scaling.masking against masks built from numpy positions."""

  @parameterized.named_parameters(
      ("causal", dict(is_causal=True)),
      ("window_int", dict(local_window_size=2)),
      ("window_pair_causal", dict(local_window_size=(3, 0), is_causal=True)),
      ("lengths", dict(query_seq_lengths=np.array([2, 7]), key_value_seq_lengths=np.array([9, 4]))),
      ("user_mask_causal", dict(mask=True, is_causal=True)),
  )
  def test_combined_mask_against_numpy(self, kwargs):
    b, n, t, s, q0, k0 = 2, 4, 7, 9, 3, 1  # offsets: the mask of a tile starting at query 3, key 1
    kwargs = dict(kwargs)
    i, j = q0 + np.arange(t)[:, None], k0 + np.arange(s)[None, :]
    want = np.ones((b, n, t, s), bool)
    if kwargs.get("mask") is not None:
      kwargs["mask"] = np.random.default_rng(0).random((b, 1, t, s)) < 0.6
      want &= kwargs["mask"]
    if kwargs.get("is_causal"):
      want &= j <= i
    if "local_window_size" in kwargs:
      w = kwargs["local_window_size"]
      left, right = (w, w) if isinstance(w, int) else w
      want &= (j >= i - left) & (j <= i + right)
    if "query_seq_lengths" in kwargs:
      want &= i < kwargs["query_seq_lengths"][:, None, None, None]
    if "key_value_seq_lengths" in kwargs:
      want &= j < kwargs["key_value_seq_lengths"][:, None, None, None]
    got = masking.combined_mask(b, n, t, s, q_offset=q0, kv_offset=k0, **kwargs)
    np.testing.assert_array_equal(np.broadcast_to(got, want.shape), want)

  def test_nothing_masked_is_none(self):
    self.assertIsNone(masking.combined_mask(2, 4, 7, 9))
    self.assertIsNone(masking.tile_mask(2, 4, 7, 9, q_offset=7))

  def test_group_heads_round_trip(self):
    b, kh, g, t, s = 2, 3, 2, 4, 5
    x = jnp.arange(b * kh * g * t * s).reshape(b, kh * g, t, s)
    grouped = masking.group_heads(x, kh, g)
    chex.assert_shape(grouped, (b, kh, g, t, s))
    for head in range(kh * g):  # query head n belongs to kv head n // G, as jnp.repeat(k, G, axis=2) pairs them
      np.testing.assert_array_equal(grouped[:, head // g, head % g], x[:, head])
    np.testing.assert_array_equal(masking.ungroup_heads(grouped), x)
    chex.assert_shape(masking.group_heads(x[:, :1], kh, g), (b, 1, 1, t, s))  # a broadcast head stays broadcast
    self.assertIsNone(masking.group_heads(None, kh, g))

  def test_coercions_and_errors(self):
    chex.assert_shape(masking.ensure_4d(jnp.ones((5, 6)), "bias"), (1, 1, 5, 6))
    self.assertIsNone(masking.ensure_4d(None, "bias"))
    with self.assertRaisesRegex(ValueError, "bias must have at most 4 dimensions"):
      masking.ensure_4d(jnp.ones((1, 1, 1, 5, 6)), "bias")
    self.assertEqual(masking.ensure_bool_mask(np.ones((6,), bool)).shape, (1, 1, 1, 6))
    with self.assertRaisesRegex(ValueError, "boolean"):
      masking.ensure_bool_mask(jnp.ones((5, 6)))
    self.assertEqual(masking.window_bounds(3), (3, 3))
    self.assertEqual(masking.window_bounds([4, 0]), (4, 0))
    self.assertIsNone(masking.window_bounds(None))
    with self.assertRaisesRegex(ValueError, "pair"):
      masking.window_bounds((1, 2, 3))


if __name__ == "__main__":
  absltest.main()
