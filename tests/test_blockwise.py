"""Blockwise attention against the dense path, jax.nn and closed forms; tile masks against the dense mask."""

import functools

from absl.testing import absltest
from absl.testing import parameterized
import chex
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import jax
import jax.numpy as jnp
import numpy as np

from scaling.attention import dispatch as attention
from scaling.attention import blockwise
from scaling.attention import masking
from scaling.attention import rules

blockwise_attention = blockwise.blockwise_attention

_RULES = ("none", "sqrt", "linear", "quadratic", "temperature", "qk_norm", "post_softmax")


def _inputs(seed, b, t, s, n, k, h, dtype=jnp.float32):
  # Numpy draws: XLA compiles jax.random's programs once per shape, and the random-shape test draws a shape per example.
  rng = np.random.default_rng(seed)
  q, key, value, ct = (rng.standard_normal(shape, np.float32) for shape in ((b, t, n, h), (b, s, k, h), (b, s, k, h),
                                                                          (b, t, n, h)))
  return jnp.asarray(q, dtype), jnp.asarray(key, dtype), jnp.asarray(value, dtype), jnp.asarray(ct)


def _value_and_grads(fn, q, key, value, bias, ct):
  """Output, lse and the gradients of <out, ct> w.r.t. q, k, v (and bias)."""
  def loss(q, key, value, bias):
    out, lse = fn(q, key, value, bias)
    return jnp.vdot(out.astype(jnp.float32), ct), (out, lse)
  argnums = (0, 1, 2) if bias is None else (0, 1, 2, 3)
  (_, (out, lse)), grads = jax.value_and_grad(loss, argnums=argnums, has_aux=True)(q, key, value, bias)
  return out, lse, grads


def _run_jitted(fn, *args):
  """Compiles ``fn`` with LLVM optimizations off (these tests check numbers, and compile twice as fast) and runs it."""
  return jax.jit(fn).lower(*args).compile({"xla_backend_optimization_level": 0})(*args)


def _both(blockwise_fn, dense_fn, q, key, value, bias, ct):
  """(blockwise, dense) results of ``_value_and_grads``, computed in one jitted program."""
  run = lambda *a: (_value_and_grads(blockwise_fn, *a), _value_and_grads(dense_fn, *a))
  return _run_jitted(run, q, key, value, bias, ct)


def _finite_lse(lse):
  return jnp.where(jnp.isfinite(lse), lse, 0.0)


@functools.lru_cache(maxsize=None)
def _jit_and_eager_case():
  """Inputs, options and the dense reference of ``test_jit_and_eager``, computed once for both of its variants."""
  b, t, s, n, kv_heads, h = 2, 23, 19, 4, 2, 8
  kwargs = dict(is_causal=True, local_window_size=(9, 2), logit_soft_cap=2.0, rule="post_softmax")
  q, key, value, ct = _inputs(3, b, t, s, n, kv_heads, h)
  mask = jax.random.bernoulli(jax.random.PRNGKey(5), 0.8, (b, 1, t, s))
  bias = jax.random.normal(jax.random.PRNGKey(6), (1, n, t, s))
  want = _run_jitted(functools.partial(_value_and_grads, lambda *a: attention.dot_product_attention(
      *a, mask, return_residual=True, **kwargs)), q, key, value, bias, ct)
  return (q, key, value, bias, mask, ct), kwargs, want


class BlockwiseMatchesDenseTest(chex.TestCase):

  @settings(max_examples=10, deadline=None)
  @given(data=st.data())
  def test_outputs_and_gradients_match_dense(self, data):
    t = data.draw(st.integers(1, 40), label="T")
    s = data.draw(st.integers(1, 40), label="S")
    kv_heads = data.draw(st.integers(1, 2), label="K")
    groups = data.draw(st.integers(1, 2), label="G")
    h = data.draw(st.sampled_from([4, 8]), label="H")
    b = data.draw(st.integers(1, 2), label="B")
    block_q = data.draw(st.integers(1, 16), label="block_q")
    block_k = data.draw(st.integers(1, 16), label="block_k")
    causal = data.draw(st.booleans(), label="causal")
    rule = data.draw(st.sampled_from(_RULES), label="rule")
    soft_cap = data.draw(st.sampled_from([None, None, 3.0]), label="soft_cap")
    clamp = data.draw(st.sampled_from([None, None, 2.5]), label="clamp")
    mask_kind = data.draw(st.sampled_from(["none", "full", "rows"]), label="mask")
    bias_kind = data.draw(st.sampled_from(["none", "full", "heads", "keys"]), label="bias")
    window = data.draw(st.sampled_from([None, None, 3, (5, 0)]), label="window")
    kv_lens = data.draw(st.booleans(), label="kv_lens")
    q_lens = data.draw(st.booleans(), label="q_lens")
    seed = data.draw(st.integers(0, 2**16), label="seed")
    n = kv_heads * groups
    q, key, value, ct = _inputs(seed, b, t, s, n, kv_heads, h)
    rng = np.random.default_rng(seed)
    mask = None
    if mask_kind != "none":
      shape = (b, n, t, s) if mask_kind == "full" else (b, 1, t, 1)
      mask = rng.random(shape) < 0.7
      mask[..., rng.integers(t), :] = False  # some fully masked query rows
      mask = jnp.asarray(mask)
    bias = {"none": None,
            "full": lambda: jnp.asarray(rng.normal(size=(b, n, t, s)), jnp.float32),
            "heads": lambda: jnp.asarray(rng.normal(size=(n, 1, 1)), jnp.float32),
            "keys": lambda: jnp.asarray(rng.normal(size=(1, 1, 1, s)), jnp.float32)}[bias_kind]
    bias = bias() if bias is not None else None
    kw = dict(rule=rule, is_causal=causal, logit_soft_cap=soft_cap, logit_clamp=clamp, local_window_size=window,
              key_value_seq_lengths=jnp.asarray(rng.integers(0, s + 1, size=b)) if kv_lens else None,
              query_seq_lengths=jnp.asarray(rng.integers(0, t + 1, size=b)) if q_lens else None,
              return_residual=True)
    got, want = _both(functools.partial(blockwise_attention, mask=mask, block_q=block_q, block_k=block_k, **kw),
                      functools.partial(attention.dot_product_attention, mask=mask, **kw), q, key, value, bias, ct)
    chex.assert_trees_all_equal_shapes_and_dtypes(got, want)
    np.testing.assert_array_equal(np.isneginf(got[1]), np.isneginf(want[1]))
    chex.assert_trees_all_close(got[0], want[0], rtol=1e-5, atol=2e-6)
    chex.assert_trees_all_close(_finite_lse(got[1]), _finite_lse(want[1]), rtol=1e-5, atol=1e-5)
    chex.assert_trees_all_close(got[2], want[2], rtol=1e-5, atol=5e-6)

  @chex.variants(with_jit=True, without_jit=True)
  def test_jit_and_eager(self):
    (q, key, value, bias, mask, ct), kwargs, want = _jit_and_eager_case()

    @self.variant
    def fn(q, key, value, bias):
      return blockwise_attention(q, key, value, bias, mask, block_q=8, block_k=5, return_residual=True, **kwargs)

    got = _value_and_grads(fn, q, key, value, bias, ct)
    chex.assert_trees_all_close(got[0], want[0], rtol=1e-5, atol=2e-6)
    chex.assert_trees_all_close(got[2], want[2], rtol=1e-5, atol=5e-6)

  def test_qk_norm_gains_get_dense_gradients(self):
    q, key, value, ct = _inputs(0, 1, 12, 12, 2, 2, 8)
    gains = (jnp.linspace(0.5, 2.0, 8), jnp.linspace(2.0, 0.5, 8))

    def grad_gains(fn):
      def loss(gq, gk):
        rule = rules.QKNorm(query_gain=gq, key_gain=gk)
        return jnp.vdot(fn(q, key, value, rule=rule, is_causal=True), ct)
      return jax.grad(loss, argnums=(0, 1))(*gains)

    got, want = _run_jitted(lambda: (grad_gains(functools.partial(blockwise_attention, block_q=5, block_k=4)),
                                     grad_gains(attention.dot_product_attention)))
    chex.assert_trees_all_close(got, want, rtol=1e-5, atol=5e-6)

  def test_unbatched_and_long_blocks(self):
    q, key, value, _ = _inputs(1, 1, 9, 7, 2, 1, 4)
    got, want = _run_jitted(lambda *a: (blockwise_attention(*a, is_causal=True, block_q=128, block_k=128),
                                        attention.dot_product_attention(*a, is_causal=True)), q[0], key[0], value[0])
    chex.assert_shape(got, (9, 2, 4))
    chex.assert_trees_all_close(got, want, rtol=1e-5, atol=1e-6)


class ResidualAndMaskingTest(chex.TestCase):

  def test_lse_matches_jax_nn(self):
    b, t, s, n, h = 2, 17, 21, 4, 8
    q, key, value, _ = _inputs(4, b, t, s, 2, 2, h)
    q = jax.random.normal(jax.random.PRNGKey(9), (b, t, n, h))
    mask = jax.random.bernoulli(jax.random.PRNGKey(7), 0.6, (b, n, t, s)).at[..., 0].set(True)  # no empty row
    bias = jax.random.normal(jax.random.PRNGKey(8), (1, n, t, s))
    (out, lse), (ref_out, ref_lse) = _run_jitted(lambda *a: (
        blockwise_attention(*a, is_causal=True, block_q=4, block_k=8, return_residual=True),
        jax.nn.dot_product_attention(*a, is_causal=True, return_residual=True)), q, key, value, bias, mask)
    chex.assert_shape(lse, (b, t, n))
    chex.assert_trees_all_close(out, ref_out, rtol=1e-5, atol=1e-5)
    chex.assert_trees_all_close(lse, ref_lse, rtol=1e-5, atol=1e-5)

  def test_fully_masked_rows_output_zero_with_finite_gradients(self):
    b, t, s, n, h = 1, 10, 12, 2, 4
    q, key, value, ct = _inputs(5, b, t, s, n, n, h)
    mask = np.ones((b, n, t, s), bool)
    mask[:, :, 3] = False  # query row 3 sees nothing
    mask[:, 1, 7] = False  # head 1, row 7 sees nothing
    mask = jnp.asarray(mask)
    fn = lambda q, key, value, bias: blockwise_attention(q, key, value, bias, mask, block_q=4, block_k=5,
                                                         return_residual=True)
    (out, lse, grads), want = _both(
        fn, lambda *a: attention.dot_product_attention(*a, mask, return_residual=True), q, key, value, None, ct)
    np.testing.assert_array_equal(out[:, 3], 0.0)
    np.testing.assert_array_equal(out[:, 7, 1], 0.0)
    self.assertTrue(np.isneginf(lse[0, 3]).all() and np.isneginf(lse[0, 7, 1]))
    self.assertTrue(np.isfinite(lse[0, 7, 0]))
    chex.assert_tree_all_finite(grads)
    np.testing.assert_array_equal(grads[0][:, 3], 0.0)  # no gradient flows into a row that attends nothing
    chex.assert_trees_all_close(grads, want[2], rtol=1e-5, atol=5e-6)

  def test_bfloat16_inputs_close_to_dense_float32(self):
    q, key, value, ct = _inputs(6, 1, 33, 33, 4, 2, 8)
    low = [x.astype(jnp.bfloat16) for x in (q, key, value)]
    (out, _, grads), (ref, _, ref_grads) = _run_jitted(lambda low, full: (
        _value_and_grads(lambda *a: (blockwise_attention(*a[:3], is_causal=True, block_q=8, block_k=16), 0.0),
                         *low, None, ct),
        _value_and_grads(lambda *a: (attention.dot_product_attention(*a[:3], is_causal=True), 0.0),
                         *full, None, ct)), low, (q, key, value))
    self.assertEqual(out.dtype, jnp.bfloat16)
    self.assertEqual(grads[0].dtype, jnp.bfloat16)
    chex.assert_trees_all_close(out.astype(jnp.float32), ref, atol=3e-2, rtol=3e-2)
    for g, r in zip(grads, ref_grads):
      np.testing.assert_allclose(np.asarray(g, np.float32), r, atol=0.05 * float(jnp.abs(r).max()))


class BlockSkippingTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("causal", dict(is_causal=True), 16, 16),
      ("causal_uneven_blocks", dict(is_causal=True), 16, 8),
      ("causal_rect", dict(is_causal=True), 8, 16),
      ("window", dict(local_window_size=(9, 3)), 8, 8),
      ("kv_lengths", dict(key_value_seq_lengths=jnp.array([20, 35])), 16, 8),
      ("query_lengths_causal", dict(query_seq_lengths=jnp.array([10, 30]), is_causal=True), 8, 8),
  )
  def test_visits_exactly_the_tiles_with_a_visible_entry(self, kwargs, block_q, block_k):
    b, t, s = 2, 60, 50
    q, key, value, _ = _inputs(0, b, t, s, 1, 1, 4)
    count = int(_run_jitted(functools.partial(blockwise.blockwise_tile_count, block_q=block_q, block_k=block_k,
                                              **kwargs), q, key, value))
    # Oracle: the dense visibility mask, padded to whole tiles; count tiles with any visible entry in any batch row.
    vis = masking.combined_mask(b, 1, t, s, **kwargs)
    vis = np.broadcast_to(np.asarray(vis), (b, 1, t, s)).any(axis=(0, 1))
    nq, nk = -(-t // block_q), -(-s // block_k)
    padded = np.zeros((nq * block_q, nk * block_k), bool)
    padded[:t, :s] = vis
    expected = padded.reshape(nq, block_q, nk, block_k).any(axis=(1, 3)).sum()
    self.assertEqual(count, expected)
    self.assertLess(count, nq * nk)

  @parameterized.named_parameters(
      ("causal_window", dict(is_causal=True, local_window_size=(5, 1))),
      ("lengths", dict(query_seq_lengths=jnp.array([3, 10]), key_value_seq_lengths=jnp.array([12, 5]))),
      ("user_mask", dict(mask=True)),
  )
  def test_tile_mask_is_a_tile_of_the_padded_dense_mask(self, kwargs):
    b, n, t, s, bq, bk = 2, 3, 10, 13, 4, 5
    nq, nk = -(-t // bq), -(-s // bk)
    kwargs = dict(kwargs)
    user = None
    if kwargs.pop("mask", None):
      user = np.zeros((b, n, nq * bq, nk * bk), bool)
      user[:, :, :t, :s] = np.random.default_rng(1).random((b, n, t, s)) < 0.7
    # Oracle: the mask of the whole padded grid with the padding rows and columns hidden, cut into tiles.
    full = masking.combined_mask(b, n, nq * bq, nk * bk, mask=user, **kwargs)
    full = np.array(np.broadcast_to(full, (b, n, nq * bq, nk * bk)))
    full[:, :, t:], full[:, :, :, s:] = False, False
    for i in range(nq):
      for j in range(nk):
        rows, cols = slice(i * bq, (i + 1) * bq), slice(j * bk, (j + 1) * bk)
        got = masking.tile_mask(b, n, bq, bk, q_offset=i * bq, kv_offset=j * bk, q_len=t, kv_len=s,
                                mask=None if user is None else user[:, :, rows, cols], **kwargs)
        np.testing.assert_array_equal(np.broadcast_to(got, (b, n, bq, bk)), full[:, :, rows, cols], err_msg=(i, j))

  def test_causal_square_visits_half_plus_diagonal(self):
    q, key, value, _ = _inputs(0, 1, 64, 64, 1, 1, 4)
    count = functools.partial(blockwise.blockwise_tile_count, block_q=16, block_k=16)
    causal, full = _run_jitted(lambda *a: (count(*a, is_causal=True), count(*a)), q, key, value)
    self.assertEqual(int(causal), 4 * 5 // 2)
    self.assertEqual(int(full), 16)

  def test_backward_memory_grows_linearly(self):
    # XLA's buffer plan for a jitted forward+backward: the dense path holds several [N, T, S] float32 arrays,
    # the blockwise path only O(T·block) scratch.
    t, n, h = 2048, 2, 16
    spec = jax.ShapeDtypeStruct((1, t, n, h), jnp.float32)

    def temp_bytes(fn):
      grad = jax.jit(jax.grad(lambda q, k, v: jnp.sum(fn(q, k, v)), argnums=(0, 1, 2)))
      analysis = grad.lower(spec, spec, spec).compile().memory_analysis()
      if analysis is None:
        self.skipTest("no memory analysis on this backend")
      return analysis.temp_size_in_bytes

    dense = temp_bytes(lambda q, k, v: attention.dot_product_attention(q, k, v, is_causal=True, implementation="dense"))
    block = temp_bytes(lambda q, k, v: blockwise_attention(q, k, v, is_causal=True, block_q=64, block_k=64))
    self.assertGreaterEqual(dense, n * t * t * 4)
    self.assertLess(block, n * t * t * 4 / 16)
    self.assertLess(block, 64 * n * t * h * 4)  # a few dozen [T, N, H] arrays at most


class ArgumentCheckTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("float16_softmax", dict(float32_softmax=False), "float32"),
      ("no_max", dict(subtract_max=False), "running maximum"),
      ("block_q", dict(block_q=0), "block_q"),
      ("block_k", dict(block_k=2.5), "block_k"),
      ("scale_and_rule", dict(scale=0.1, rule="sqrt"), "either"),
      ("mask_dtype", dict(mask=jnp.ones((5, 6), jnp.int32)), "boolean"),
      ("mask_shape", dict(mask=jnp.ones((1, 1, 3, 6), bool)), "broadcast"),
      ("bias_shape", dict(bias=jnp.ones((1, 2, 5, 6))), "broadcast"),
      ("lengths", dict(key_value_seq_lengths=jnp.array([1, 2])), "key_value_seq_lengths"),
  )
  def test_rejects(self, kwargs, message):
    q, key, value, _ = _inputs(0, 1, 5, 6, 1, 1, 4)
    with self.assertRaisesRegex(ValueError, message):
      blockwise_attention(q, key, value, **kwargs)


if __name__ == "__main__":
  absltest.main()
