"""Dense attention against jax.nn.dot_product_attention and closed forms; masking against numpy positions."""

import functools
import math
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import chex
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import jax
import jax.numpy as jnp
import numpy as np

import scaling
from scaling.attention import masking
from scaling.studies import sweep_memory
from scaling.attention import rules


def _normal(seed, shape, std=1.0, dtype=jnp.float32):
  """Numpy draws: XLA compiles jax.random's programs once per shape, and the dispatcher's checks use many shapes."""
  return jnp.asarray(std * np.random.default_rng(seed).standard_normal(shape, np.float32), dtype)


def _qkv(seed=0, b=2, t=7, s=9, n=4, k=2, h=16, dtype=jnp.float32, std=1.0):
  return (_normal((seed, 0), (b, t, n, h), std, dtype), _normal((seed, 1), (b, s, k, h), std, dtype),
          _normal((seed, 2), (b, s, k, h), dtype=dtype))


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
    # One program for both calls and their references (eagerly, every op would compile on its own).
    got, want = jax.jit(lambda q, k, v: ((scaling.dot_product_attention(q, k, v),
                                          scaling.dot_product_attention(q[0], k[0], v[0])),
                                         (jax.nn.dot_product_attention(q, k, v),
                                          jax.nn.dot_product_attention(q[0], k[0], v[0]))))(q, k, v)
    chex.assert_shape(got[1], q.shape[1:])
    chex.assert_trees_all_close(got, want, atol=1e-5)

  def test_residual_matches_jax_nn(self):
    q, k, v = _qkv()
    _, lse = scaling.dot_product_attention(q, k, v, is_causal=True, return_residual=True)
    _, ref = jax.nn.dot_product_attention(q, k, v, is_causal=True, return_residual=True)
    chex.assert_shape(lse, (2, 7, 4))
    chex.assert_trees_all_close(lse, ref, atol=1e-5)

  def test_gradients_match_jax_nn(self):
    q, k, v = _qkv()
    loss = lambda f: lambda q, k, v: jnp.sum(jnp.sin(f(q, k, v, is_causal=True)))
    grads = lambda f: jax.grad(loss(f), argnums=(0, 1, 2))(q, k, v)
    ours, ref = jax.jit(lambda: (grads(scaling.dot_product_attention), grads(jax.nn.dot_product_attention)))()
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
  return scaling.attention.logits.resolve_logit_options(16, **{**base, **kwargs})


# Shapes (B, T, N, K, S, H) and masking on which the dispatcher's paths are checked. As the rule stands they reach
# each of its kinds of path: dense; one T x S tile under differentiation and dense alone; one tile; tiles, with the
# forward pass's own where they differ; GQA; causal with T < S; a local window; tiles that do not divide T or S.
# The checks hold for any shape and any limits of the rule: these cases only spread them.
RULE_CASES = (
    ((2, 48, 4, 2, 64, 8), {"is_causal": True}),
    ((3, 255, 4, 4, 255, 8), {}),
    ((1, 256, 2, 1, 256, 8), {"is_causal": True}),
    ((1, 512, 8, 8, 512, 8), {"is_causal": True}),
    ((4, 512, 8, 8, 512, 4), {"is_causal": True}),
    ((1, 512, 8, 2, 512, 8), {}),
    ((1, 200, 4, 2, 2048, 8), {"is_causal": True}),
    ((1, 1, 4, 4, 300, 8), {"is_causal": True}),
    ((1, 600, 4, 4, 1900, 4), {"local_window_size": (100, 0)}),
    ((2, 300, 6, 3, 700, 8), {}),
)


def _draw_case(data, max_len=600):
  """A random (B, T, N, K, S, H) and masking (none, causal, or a window) for the dispatcher's checks."""
  b = data.draw(st.integers(1, 3), label="B")
  t = data.draw(st.integers(1, max_len), label="T")
  s = data.draw(st.integers(1, 2 * max_len), label="S")
  k, groups = data.draw(st.integers(1, 3), label="K"), data.draw(st.sampled_from([1, 2, 4]), label="G")
  masking = data.draw(st.sampled_from([{}, {"is_causal": True}, {"local_window_size": (7, 3)}]), label="masking")
  if "local_window_size" in masking:
    t = min(t, s + 7)  # every query sees a key (jax.nn gives a fully masked row the mean value, this library 0)
  return (b, t, k * groups, k, s, data.draw(st.sampled_from([4, 8]), label="H")), masking


def _choice(shape, masking):
  b, t, n, k, s, h = shape
  return scaling.attention.dispatch.select_implementation(
      (b, t, n, h), (b, s, k, h), _opts(), is_causal=masking.get("is_causal", False),
      has_local_window=masking.get("local_window_size") is not None)


def _visible(t, s, masking):
  """[T, S] numpy: which keys each query sees (positions, as jax.nn counts them)."""
  i, j = np.arange(t)[:, None], np.arange(s)[None, :]
  seen = np.ones((t, s), bool)
  if masking.get("is_causal"):
    seen &= j <= i
  if masking.get("local_window_size") is not None:
    left, right = masking["local_window_size"]
    seen &= (j >= i - left) & (j <= i + right)
  return seen


class DispatchTest(parameterized.TestCase):
  """implementation=None: whatever path and tiles the rule picks, it computes exact attention within its memory."""

  def _check_matches_jax_nn(self, shape, masking, seed=0):
    """The default call's values, log-sum-exp and gradients (both passes' paths) against jax.nn's."""
    b, t, n, k, s, h = shape
    q, key, value = _qkv(seed=seed, b=b, t=t, s=s, n=n, k=k, h=h)
    ct = _normal((seed, 3), q.shape)

    def both(attend, q, key, value, ct):
      loss = lambda q, key, value: jnp.vdot(attend(q, key, value, **masking), ct)
      out_lse = attend(q, key, value, return_residual=True, **masking)
      return attend(q, key, value, **masking), out_lse, jax.value_and_grad(loss, argnums=(0, 1, 2))(q, key, value)

    # One program for both sides: a second would only repeat XLA's per-program work.
    got, want = jax.jit(lambda *a: (both(scaling.dot_product_attention, *a), both(jax.nn.dot_product_attention, *a)))(
        q, key, value, ct)
    for got_part, want_part in zip(got, want):  # output alone; output and log-sum-exp; loss and gradients
      chex.assert_trees_all_close(got_part, want_part, rtol=1e-4, atol=2e-5)

  def _check_tiles_cover_the_keys(self, shape, masking):
    """Every tile the rule picks for the shape (and ``blockwise_blocks``' tiles) visits each visible key once.

    With q = 0 every visible logit is 0: the log-sum-exp is log(number of visible keys), the output the mean of
    their values, and the value gradient of ⟨out, ct⟩ at key j the sum of ct / (visible count) over the queries
    that see j. A key dropped or counted twice by the tiling changes all three.
    """
    b, t, n, k, s, h = shape
    _, key, value = _qkv(seed=2, b=b, t=t, s=s, n=n, k=k, h=h)
    q = jnp.zeros((b, t, n, h))
    ct = _normal(3, q.shape)
    seen = _visible(t, s, masking)
    count = seen.sum(-1)  # [T]
    weights = seen / np.maximum(count, 1)[:, None]  # [T, S]; rows that see nothing output 0
    g = n // k
    v64, ct64 = np.asarray(value, np.float64), np.asarray(ct, np.float64).reshape(b, t, k, g, h)
    want_out = np.repeat(np.einsum("ts,bskh->btkh", weights, v64), g, axis=2)
    want_dv = np.einsum("ts,btkgh->bskh", weights, ct64)
    skips = masking.get("is_causal", False) or masking.get("local_window_size") is not None
    query_shape, key_shape = (b, t, n, h), (b, s, k, h)
    tiles = {*scaling.attention.dispatch.fixed_tiles(_choice(shape, masking)),
             *(scaling.attention.dispatch.blockwise_blocks(query_shape, key_shape, is_causal=skips, differentiated=d)
               for d in (True, False))}

    @functools.partial(jax.jit, static_argnums=(4, 5))
    def attend(q, key, value, ct, block_q, block_k):
      (out, lse), vjp = jax.vjp(lambda v: scaling.attention.blockwise.blockwise_attention(
          q, key, v, block_q=block_q, block_k=block_k, return_residual=True, **masking), value)
      return out, lse, vjp((ct, jnp.zeros_like(lse)))[0]

    for block_q, block_k in sorted(tiles):
      self.assertTrue(1 <= block_q <= t and 1 <= block_k <= s, (block_q, block_k))
      out, lse, dv = attend(q, key, value, ct, block_q, block_k)
      with np.errstate(divide="ignore"):
        want_lse = np.broadcast_to(np.log(count)[None, :, None], lse.shape)
      np.testing.assert_allclose(lse, want_lse, rtol=1e-5, err_msg=f"tiles {block_q}x{block_k}")
      np.testing.assert_allclose(out, want_out, rtol=1e-4, atol=1e-5, err_msg=f"tiles {block_q}x{block_k}")
      np.testing.assert_allclose(dv, want_dv, rtol=1e-4, atol=1e-5, err_msg=f"tiles {block_q}x{block_k}")

  @parameterized.parameters(*RULE_CASES)
  def test_chosen_paths_give_jax_nn_values_and_gradients(self, shape, masking):
    self._check_matches_jax_nn(shape, masking)

  @settings(max_examples=4, deadline=None)
  @given(data=st.data())
  def test_chosen_paths_give_jax_nn_values_and_gradients_on_random_shapes(self, data):
    shape, masking = _draw_case(data)
    self._check_matches_jax_nn(shape, masking, seed=data.draw(st.integers(0, 2**16), label="seed"))

  @parameterized.parameters(*RULE_CASES[2:7])
  def test_tiles_cover_each_key_once(self, shape, masking):
    self._check_tiles_cover_the_keys(shape, masking)

  @settings(max_examples=5, deadline=None)
  @given(data=st.data())
  def test_tiles_cover_each_key_once_on_random_shapes(self, data):
    self._check_tiles_cover_the_keys(*_draw_case(data))

  @settings(max_examples=200, deadline=None)
  @given(b=st.integers(1, 64), t=st.integers(1, 2**16), s=st.integers(1, 2**16), k=st.integers(1, 16),
         groups=st.sampled_from([1, 2, 3, 4, 8, 16, 32]), causal=st.booleans(), window=st.booleans())
  def test_tiles_fit_the_sequences_in_both_passes(self, b, t, s, k, groups, causal, window):
    # Pure Python: many shapes, large ones too. Every blockwise tile lies within T x S.
    choice = _choice((b, t, k * groups, k, s, 16), {"is_causal": causal, "local_window_size": (4, 0) if window
                                                    else None})
    self.assertIn(choice.implementation, ("dense", "blockwise"))
    for block_q, block_k in scaling.attention.dispatch.fixed_tiles(choice):
      self.assertTrue(1 <= block_q <= t and 1 <= block_k <= s, (choice, t, s))
    if choice.forward is not None:
      self.assertEqual(choice.implementation, "blockwise")  # only a blockwise choice has a forward of its own
      self.assertIn(choice.forward.implementation, ("dense", "blockwise"))

  @parameterized.parameters(
      ((1, 8192, 4, 4, 8192, 64), True), ((4, 2048, 8, 8, 2048, 64), True), ((1, 4096, 8, 2, 4096, 64), False),
      ((2, 1024, 16, 1, 1024, 32), True), ((4, 512, 8, 8, 512, 64), True), ((8, 128, 4, 4, 128, 64), False))
  def test_chosen_path_plans_no_more_memory_than_the_model(self, shape, causal):
    # XLA's buffer plan for the chosen paths (both passes; compiled from shapes alone, nothing is run; T = S) against
    # the library's memory model of that path, ``scaling.studies.sweep_memory.sweep_program`` (dense: its T x S logits;
    # blockwise: T x block_k per head), which the sweep checks before it runs.
    b, t, n, k, s, h = shape
    query, keys = jax.ShapeDtypeStruct((b, t, n, h), jnp.float32), jax.ShapeDtypeStruct((b, s, k, h), jnp.float32)
    choice = _choice(shape, {"is_causal": causal})
    for path, differentiated in ((choice, True), (choice.forward or choice, False)):
      attend = scaling.attention.autotune.path_function(path, is_causal=causal)
      step = (jax.value_and_grad(lambda q, key, v: jnp.sum(attend(q, key, v)), argnums=(0, 1, 2)) if differentiated
              else attend)
      analysis = jax.jit(step).lower(query, keys, keys).compile().memory_analysis()
      if analysis is None:
        self.skipTest("no memory analysis on this backend")
      planned = analysis.temp_size_in_bytes + analysis.argument_size_in_bytes + analysis.output_size_in_bytes
      bound = sweep_memory.sweep_program(batch=b, heads=n, seq_len=t, d_k=h, num_seeds=1, num_rules=1,
                                      attention=path.implementation, block=path.block_k or s).total
      self.assertLessEqual(planned, bound, f"{scaling.attention.autotune.choice_name(path)} for {shape}, causal={causal}")

  def test_options_decide_which_paths_may_run(self):
    # What the rule may choose is set by what each path computes, not by timings: options blockwise lacks run dense,
    # and cuDNN's kernel runs only on GPU, in half precision, with a plain scale and no bias or window.
    select = scaling.attention.dispatch.select_implementation
    long = ((1, 4 * scaling.attention.dispatch.BLOCKWISE_MIN_KV_LEN, 4, 16),) * 2
    for opts, kwargs in ((_opts(float32_softmax=False), {}), (_opts(subtract_max=False), {}),
                         (_opts(), {"return_weights": True})):
      for backend in ("cpu", "gpu"):
        self.assertEqual(select(*long, opts, dtype=jnp.bfloat16, backend=backend, **kwargs).implementation, "dense")
    self.assertEqual(select(*long, _opts(), dtype=jnp.bfloat16, backend="gpu").implementation, "cudnn")
    for opts, dtype, backend, kwargs in ((_opts(), jnp.bfloat16, "cpu", {}), (_opts(), jnp.float32, "gpu", {}),
                                         (_opts(rule="qk_norm"), jnp.bfloat16, "gpu", {}),
                                         (_opts(), jnp.bfloat16, "gpu", {"has_bias": True}),
                                         (_opts(), jnp.bfloat16, "gpu", {"has_local_window": True})):
      self.assertNotEqual(select(*long, opts, dtype=dtype, backend=backend, **kwargs).implementation, "cudnn")
    self.assertEqual(select((1, 0, 4, 16), long[1], _opts(), backend="cpu").implementation, "dense")  # T = 0

  @parameterized.parameters(scaling.attention.dispatch.BLOCKWISE_MIN_KV_LEN // 2, 2 * scaling.attention.dispatch.BLOCKWISE_MIN_KV_LEN)
  def test_a_split_choice_runs_its_forward_alone_and_its_own_path_differentiated(self, kv_len):
    # Whatever the rule picks: a choice with a forward of its own runs that path's very program when not
    # differentiated, and its own path forward and backward under differentiation; a call that cannot split (a mask
    # or a residual) runs its own path, or dense where the forward is dense below BLOCKWISE_MIN_KV_LEN.
    q, k, v = _qkv(seed=5, b=2, t=48, s=kv_len, n=4, k=2, h=8)
    ct = _normal(6, q.shape)
    mask = jnp.tril(jnp.ones((48, kv_len), bool))[None, None]
    dense = scaling.attention.autotune.Choice("dense")
    forwards = (dense, scaling.attention.autotune.Choice("blockwise", 32, 64))

    def value_and_grads(fn, q, k, v, **kw):
      return jax.value_and_grad(lambda q, k, v: jnp.vdot(fn(q, k, v, **kw), ct), argnums=(0, 1, 2))(q, k, v)

    def calls_and_paths(q, k, v):
      # Every call for both choices and every path they should run, traced into one program (the choice is mocked
      # while its calls are traced); a path both choices share is traced once.
      paths, calls = {}, []

      def path(kind, c, fn):
        key = (kind, c.implementation, c.block_q, c.block_k)
        if key not in paths:
          paths[key] = fn(scaling.attention.autotune.path_function(c))
        return paths[key]

      for forward in forwards:
        choice = scaling.attention.autotune.Choice("blockwise", 16, 32, forward=forward)
        unsplit = dense if forward == dense and kv_len < scaling.attention.dispatch.BLOCKWISE_MIN_KV_LEN else choice
        with mock.patch.object(scaling.attention.dispatch, "select_implementation", return_value=choice):
          calls.append({
              "alone": (scaling.dot_product_attention(q, k, v), path("alone", forward, lambda f: f(q, k, v))),
              "differentiated": (value_and_grads(scaling.dot_product_attention, q, k, v),
                                 path("differentiated", choice, lambda f: value_and_grads(f, q, k, v))),
              "masked": (value_and_grads(scaling.dot_product_attention, q, k, v, mask=mask),
                         path("masked", unsplit, lambda f: value_and_grads(f, q, k, v, mask=mask))),
              "residual": (scaling.dot_product_attention(q, k, v, return_residual=True),
                           path("residual", unsplit, lambda f: f(q, k, v, return_residual=True)))})
      return calls, value_and_grads(jax.nn.dot_product_attention, q, k, v, mask=mask)

    calls, reference = jax.jit(calls_and_paths)(q, k, v)
    for forward, checks in zip(forwards, calls):
      for name, (got, want) in checks.items():
        with self.subTest(forward=scaling.attention.autotune.choice_name(forward), call=name):
          chex.assert_trees_all_close(got, want, rtol=0, atol=0)
      with self.subTest(forward=scaling.attention.autotune.choice_name(forward), call="masked, against jax.nn"):
        chex.assert_trees_all_close(checks["masked"][0][0], reference[0], rtol=1e-4,
                                    atol=2e-5)  # and the path is attention: the masked loss is jax.nn's


  @parameterized.named_parameters(
      ("weights", {"return_weights": True}),
      ("no_max_subtraction", {"subtract_max": False}),
      ("low_precision_softmax", {"float32_softmax": False}),
  )
  def test_unsupported_options_fall_back_to_dense(self, kwargs):
    t = scaling.attention.dispatch.BLOCKWISE_MIN_KV_LEN
    q, k, v = _qkv(b=1, t=t, s=t, n=2, k=2, h=8, std=0.5)
    if "return_weights" not in kwargs:  # forcing blockwise shows what the fallback avoids
      with self.assertRaisesRegex(ValueError, "dense path"):
        scaling.dot_product_attention(q, k, v, is_causal=True, implementation="blockwise", **kwargs)
    out = scaling.dot_product_attention(q, k, v, is_causal=True, **kwargs)
    out = out[0] if isinstance(out, tuple) else out
    causal = np.tril(np.ones((t, t), bool))
    np.testing.assert_allclose(out, _reference(q, k, v, logit_scale=8**-0.5, mask=causal), rtol=2e-5, atol=2e-5)

  def test_traced_scale_falls_back_to_dense(self):
    t = scaling.attention.dispatch.BLOCKWISE_MIN_KV_LEN
    q, k, v = _qkv(b=1, t=t, s=t, n=2, k=2, h=8, std=0.5)
    scales = jnp.array([0.1, 0.4])
    # Traced under vmap (one program: eagerly every batched op would compile on its own).
    out = jax.jit(jax.vmap(lambda c: scaling.dot_product_attention(q, k, v, rule=rules.FixedScale(c, 1.0),
                                                                   is_causal=True)))(scales)
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
  """scaling.attention.masking against masks built from numpy positions."""

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
