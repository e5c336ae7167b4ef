"""Metrics against closed forms and independent references: numpy for the statistics, jax.grad of a plain attention."""

import functools
import math

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

from scaling.attention import dense as dense_attention
from scaling.attention import metrics

# Each rule written out from its definition: (normalize q and k by their RMS, logit scale, weight scale) at head dim h.
_RULES = {
    "none": lambda h: (False, 1.0, 1.0),
    "sqrt": lambda h: (False, 1 / math.sqrt(h), 1.0),
    "qk_norm": lambda h: (True, 1 / math.sqrt(h), 1.0),
    "post_softmax": lambda h: (False, 1.0, 1 / math.sqrt(h)),
}
_EPS = 1e-6  # QK-norm's epsilon under the mean square

# The functions under test, each compiled once per shape and option: on CPU, compiling one program costs less than
# compiling every op of the eager path (the functions are jit-able by contract; WeightStatsTest runs both paths).
_per_head = jax.jit(metrics.attention_metrics_per_head, static_argnames=("rule", "is_causal"))
_blockwise = jax.jit(metrics.blockwise_attention_metrics_per_head,
                     static_argnames=("rule", "is_causal", "block_q", "block_k"))
_logits_and_weights = jax.jit(dense_attention.attention_logits_and_weights, static_argnames=("rule",))
_weight_stats = jax.jit(metrics.weight_stats_per_head)
_logit_stats = jax.jit(metrics.logit_stats_per_head)
_metric_sums = jax.jit(metrics.metric_sums)
_merge_sums = jax.jit(metrics.merge_sums)
_finalize_sums = jax.jit(metrics.finalize_sums)


def _qkvg(seed, b=2, t=5, s=6, n=4, k=2, h=8, q_std=1.0):
  ks = jax.random.split(jax.random.key(seed), 4)
  return (q_std * jax.random.normal(ks[0], (b, t, n, h)), jax.random.normal(ks[1], (b, s, k, h)),
          jax.random.normal(ks[2], (b, s, k, h)), jax.random.normal(ks[3], (b, t, n, h)))


def _plain_attention(q, k, v, delta, rule, causal):
  """Attention with einsum and jax.nn.softmax; ``delta`` [B, N, T, S] is added to the scaled logits."""
  h, groups = q.shape[-1], q.shape[2] // k.shape[2]
  normalize, logit_scale, weight_scale = _RULES[rule](h)
  k, v = jnp.repeat(k, groups, axis=2), jnp.repeat(v, groups, axis=2)
  if normalize:
    q, k = (x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + _EPS) for x in (q, k))
  z = jnp.einsum("btnh,bsnh->bnts", q, k) * logit_scale + delta
  if causal:
    z = jnp.where(np.tril(np.ones(z.shape[-2:], bool)), z, -jnp.inf)
  return jnp.einsum("bnts,bsnh->btnh", jax.nn.softmax(z, axis=-1) * weight_scale, v)


@functools.partial(jax.jit, static_argnames=("rule", "causal"))
def _plain_attention_grads(q, k, v, delta, g, rule, causal):
  """jax.vjp of ``_plain_attention`` at cotangent g: the gradients of q, k, v and delta."""
  return jax.vjp(lambda *a: _plain_attention(*a, rule, causal), q, k, v, delta)[1](g)


def _numpy_metrics(q, k, v, g, rule, causal):
  """Every metric of ``attention_metrics_per_head`` from the full T × S matrices, in float64 numpy, backward by hand."""
  q, k, v, g = (np.asarray(x, np.float64) for x in (q, k, v, g))
  b, t, n, h = q.shape
  s, kh = k.shape[1], k.shape[2]
  normalize, logit_scale, weight_scale = _RULES[rule](h)
  k, v = np.repeat(k, n // kh, axis=2), np.repeat(v, n // kh, axis=2)
  inv_rms = lambda x: 1 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + _EPS)
  qn, kn = (q * inv_rms(q), k * inv_rms(k)) if normalize else (q, k)
  vis = np.broadcast_to(np.tril(np.ones((t, s), bool)) if causal else np.ones((t, s), bool), (b, n, t, s))
  z = np.einsum("btnh,bsnh->bnts", qn, kn) * logit_scale
  e = np.where(vis, np.exp(z - np.where(vis, z, -np.inf).max(-1, keepdims=True)), 0.0)
  p = e / e.sum(-1, keepdims=True)
  out = {}
  zv = [z[:, i][vis[:, i]] for i in range(n)]
  out["logit_mean"] = [x.mean() for x in zv]
  out["logit_var"] = [x.var() for x in zv]
  out["logit_std"] = [x.std() for x in zv]
  out["logit_absmax"] = [np.abs(x).max() for x in zv]
  n_vis = vis.sum(-1)
  ent = -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=-1)
  out["entropy"] = ent.mean(axis=(0, 2))
  out["entropy_normalized"] = [(ent / np.log(np.maximum(n_vis, 2)))[:, i][n_vis[:, i] > 1].mean() for i in range(n)]
  out["max_prob"] = p.max(-1).mean(axis=(0, 2))
  out["saturated_frac"] = (p.max(-1) > 0.99).mean(axis=(0, 2))
  jac = np.einsum("...i,ij->...ij", p, np.eye(s)) - p[..., :, None] * p[..., None, :]
  out["softmax_jacobian_norm"] = np.linalg.norm(jac, axis=(-2, -1)).mean(axis=(0, 2))
  # Backward of <g, out> with out = (weight_scale · p) v: dv = wᵀg, dp = g vᵀ, dz = w ⊙ (dp − Σ p dp).
  w = weight_scale * p
  dv = np.einsum("bnts,btnh->bsnh", w, g)
  dp = np.einsum("btnh,bsnh->bnts", g, v)
  dz = w * (dp - (p * dp).sum(-1, keepdims=True))
  dqn = logit_scale * np.einsum("bnts,bsnh->btnh", dz, kn)
  dkn = logit_scale * np.einsum("bnts,btnh->bsnh", dz, qn)
  if normalize:  # x̂ = x·r with r = (mean x² + eps)^(-1/2): dx = r·dx̂ − r³·x·mean(dx̂·x)
    back = lambda x, dxn: inv_rms(x) * dxn - inv_rms(x) ** 3 * x * np.mean(dxn * x, axis=-1, keepdims=True)
    dqn, dkn = back(q, dqn), back(k, dkn)
  fold = lambda x: x.reshape(b, s, kh, n // kh, h).sum(3)  # kv-head gradients sum over their query heads
  norm = lambda x: np.linalg.norm(x, axis=(1, 3)).mean(0)
  out.update(grad_norm_q=norm(dqn), grad_norm_k=norm(fold(dkn)), grad_norm_v=norm(fold(dv)),
             grad_norm_logits=np.linalg.norm(dz, axis=(2, 3)).mean(0))
  return {name: np.asarray(x) for name, x in out.items()}


class WeightStatsTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_uniform_and_one_hot(self):
    n = 8
    uniform = jnp.full((1, 1, 3, n), 1.0 / n)
    one_hot = jnp.zeros((1, 1, 3, n)).at[..., 2].set(1.0)
    stats_u = self.variant(metrics.weight_stats_per_head)(uniform)
    stats_o = self.variant(metrics.weight_stats_per_head)(one_hot)
    np.testing.assert_allclose(stats_u["entropy"], [math.log(n)], rtol=1e-6)
    np.testing.assert_allclose(stats_u["entropy_normalized"], [1.0], rtol=1e-6)
    np.testing.assert_allclose(stats_u["max_prob"], [1.0 / n], rtol=1e-6)
    np.testing.assert_allclose(stats_u["saturated_frac"], [0.0])
    np.testing.assert_allclose(stats_o["entropy"], [0.0], atol=1e-7)
    np.testing.assert_allclose(stats_o["max_prob"], [1.0])
    np.testing.assert_allclose(stats_o["saturated_frac"], [1.0])
    # diag(p) - pp^T vanishes for one-hot p; for uniform its Frobenius norm is sqrt(1/n - 1/n^2).
    np.testing.assert_allclose(stats_o["softmax_jacobian_norm"], [0.0], atol=1e-7)
    np.testing.assert_allclose(stats_u["softmax_jacobian_norm"], [math.sqrt(1 / n - 1 / n**2)], rtol=1e-5)

  def test_causal_entropy_normalizes_by_visible_keys(self):
    t = 6
    logits = jnp.zeros((1, 1, t, t))
    mask = np.tril(np.ones((t, t), bool))[None, None]
    weights = mask / mask.sum(-1, keepdims=True)  # row i uniform over its i + 1 visible keys
    stats = _weight_stats(jnp.asarray(weights, jnp.float32), jnp.asarray(mask))
    # Row i sees i + 1 keys uniformly: entropy ln(i + 1).
    np.testing.assert_allclose(stats["entropy"], [np.mean([math.log(i + 1) for i in range(t)])], rtol=1e-5)
    np.testing.assert_allclose(stats["entropy_normalized"], [1.0], rtol=1e-5)  # rows with >= 2 keys
    np.testing.assert_allclose(_logit_stats(logits, mask)["var"], [0.0])

  def test_jacobian_against_jax_jacobian(self):
    z = jax.random.normal(jax.random.key(0), (5, 7)) * 2.0
    p = jax.nn.softmax(z)
    ref = jax.jit(jax.vmap(jax.jacobian(jax.nn.softmax)))(z)
    np.testing.assert_allclose(jax.jit(metrics.softmax_jacobian)(p), ref, atol=1e-6)
    np.testing.assert_allclose(jax.jit(metrics.softmax_jacobian_fro_norm)(p),
                               jnp.sqrt(jnp.sum(ref**2, axis=(-2, -1))), rtol=1e-5, atol=1e-7)

  def test_logit_stats_closed_form(self):
    z = jnp.arange(12.0).reshape(1, 1, 3, 4)
    mask = jnp.ones((1, 1, 3, 4), bool).at[0, 0, 0, 0].set(False)
    stats = _logit_stats(z, mask)
    vals = np.arange(1.0, 12.0)
    np.testing.assert_allclose(stats["mean"], [vals.mean()], rtol=1e-6)
    np.testing.assert_allclose(stats["var"], [vals.var()], rtol=1e-6)
    np.testing.assert_allclose(stats["absmax"], [11.0])

  def test_post_softmax_weights_are_renormalized(self):
    k = jax.random.split(jax.random.key(1), 3)
    q, kk, v = (jax.random.normal(x, (1, 5, 1, 16)) for x in k)
    _, w_post, _ = _logits_and_weights(q, kk, rule="post_softmax")
    _, w_none, _ = _logits_and_weights(q, kk, rule="none")
    np.testing.assert_allclose(w_post.sum(-1), 0.25, rtol=1e-5)
    chex.assert_trees_all_close(_weight_stats(w_post), _weight_stats(w_none), rtol=1e-5)


class MetricSumsTest(chex.TestCase):
  """Blocks of query rows merged with ``merge_sums`` give the statistics of all rows (numpy over the full matrix)."""

  def _blocks(self, x, sizes):
    return np.split(x, np.cumsum(sizes)[:-1], axis=2)

  def test_merged_blocks_equal_numpy_over_all_rows(self):
    rng = np.random.default_rng(0)
    b, n, t, s = 2, 3, 9, 7
    # A large common offset: E[z²] − E[z]² would lose every digit of the variance in float32; Chan's update does not.
    z = 1e4 + rng.normal(size=(b, n, t, s))
    mask = rng.random((b, n, t, s)) < 0.8
    mask[:, :, 4] = False  # a fully masked row (and, below, a fully masked block)
    w = np.where(mask, rng.random((b, n, t, s)), 0.0)
    dz = rng.normal(size=(b, n, t, s))
    parts = [_metric_sums(*(jnp.asarray(x, jnp.float32) for x in (zb, wb)), jnp.asarray(mb),
                          jnp.asarray(db, jnp.float32))
             for zb, wb, mb, db in zip(*(self._blocks(x, (4, 1, 4)) for x in (z, w, mask, dz)))]
    merged = _finalize_sums(_merge_sums(_merge_sums(parts[0], parts[1]), parts[2]))
    zv = [z[:, i][mask[:, i]] for i in range(n)]
    np.testing.assert_allclose(merged["logit_mean"], [x.mean() for x in zv], rtol=1e-6)
    np.testing.assert_allclose(merged["logit_var"], [x.var() for x in zv], rtol=1e-3)
    np.testing.assert_allclose(merged["logit_absmax"], [np.abs(x).max() for x in zv], rtol=1e-6)
    p = w / np.where(w.sum(-1, keepdims=True) > 0, w.sum(-1, keepdims=True), 1.0)
    rows = mask.any(-1)
    np.testing.assert_allclose(merged["max_prob"], (p.max(-1) * rows).sum((0, 2)) / rows.sum((0, 2)), rtol=1e-5)
    np.testing.assert_allclose(merged["grad_norm_logits"], np.linalg.norm(dz, axis=(2, 3)).mean(0), rtol=1e-5)
    # Splitting is invisible: one block of all rows gives the same numbers (to the float32 precision of a mean of
    # 1e4 + noise, ~1e4 × 6e-8, the tolerance of the variance above).
    whole = _finalize_sums(_metric_sums(*(jnp.asarray(x, jnp.float32) for x in (z, w)), jnp.asarray(mask),
                                        jnp.asarray(dz, jnp.float32)))
    chex.assert_trees_all_close(merged, whole, rtol=1e-3)

  def test_empty_block_is_neutral(self):
    z = jax.random.normal(jax.random.key(4), (1, 2, 3, 5))
    w = jax.nn.softmax(z)
    full = _metric_sums(z, w)
    empty = _metric_sums(z, w, jnp.zeros(z.shape, bool))
    chex.assert_trees_all_close(_finalize_sums(_merge_sums(empty, full)), _finalize_sums(full))
    chex.assert_trees_all_close(_finalize_sums(_merge_sums(full, empty)), _finalize_sums(full))

  def test_per_head_functions_are_one_block(self):
    z = jax.random.normal(jax.random.key(5), (2, 3, 4, 5))
    stats = _finalize_sums(_metric_sums(z, jax.nn.softmax(z)))
    self.assertEqual(set(stats), {f"logit_{k}" for k in ("mean", "var", "std", "absmax")} | set(
        _weight_stats(jax.nn.softmax(z))))
    chex.assert_trees_all_close({f"logit_{k}": v for k, v in _logit_stats(z).items()},
                                {k: v for k, v in stats.items() if k.startswith("logit_")})


class LayerMetricsTest(chex.TestCase):

  def test_against_numpy(self):
    rng = np.random.default_rng(1)
    b, n, t, s = 2, 3, 5, 6
    z = 3.0 * rng.normal(size=(b, n, t, s))
    mask = np.tril(np.ones((t, s), bool))[None, None] & (rng.random((b, n, 1, s)) < 0.8)
    mask[0, 1, 2] = False  # a fully masked row: no entropy, no log-sum-exp
    e = np.where(mask, np.exp(z), 0.0)
    p = e / np.where(e.sum(-1, keepdims=True) > 0, e.sum(-1, keepdims=True), 1.0)
    rows = mask.any(-1)
    ent = -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=-1)
    per_head = lambda x: (x * rows).sum((0, 2)) / rows.sum((0, 2))
    z2 = [np.mean(z[:, i][mask[:, i]] ** 2) for i in range(n)]
    lse = np.log(e.sum(-1)[rows])
    got = jax.jit(metrics.attention_layer_metrics)(jnp.asarray(z, jnp.float32), jnp.asarray(p, jnp.float32),
                                                   jnp.asarray(mask))
    self.assertEqual(set(got), {"attn_entropy", "attn_max_prob", "attn_max_logit", "attn_logits_rms", "attn_max_lse"})
    np.testing.assert_allclose(got["attn_entropy"], per_head(ent).mean(), rtol=1e-5)
    np.testing.assert_allclose(got["attn_max_prob"], per_head(p.max(-1)).mean(), rtol=1e-5)
    np.testing.assert_allclose(got["attn_max_logit"], np.abs(z[mask]).max(), rtol=1e-6)
    np.testing.assert_allclose(got["attn_logits_rms"], np.sqrt(np.mean(z2)), rtol=1e-5)
    np.testing.assert_allclose(got["attn_max_lse"], lse.max(), rtol=1e-5)

  def test_max_lse_skips_masked_rows(self):
    lse = jnp.array([[1.5, -jnp.inf], [-2.0, 0.5]])
    self.assertEqual(float(metrics.max_lse(lse)), 1.5)
    self.assertEqual(float(metrics.max_lse(jnp.full((2, 3), -jnp.inf))), -math.inf)


class GradNormTest(chex.TestCase):
  """Gradient norms against jax.vjp of a plain einsum + jax.nn.softmax attention written here."""

  @parameterized.parameters("sqrt", "qk_norm", "post_softmax")
  def test_against_jax_grad(self, rule):
    q, k, v, g = _qkvg(2)
    got = _per_head(q, k, v, g, rule=rule, is_causal=True)
    gq, gk, gv, gz = _plain_attention_grads(q, k, v, jnp.zeros((2, 4, 5, 6)), g, rule, True)
    np.testing.assert_allclose(got["grad_norm_q"], np.linalg.norm(gq, axis=(1, 3)).mean(0), rtol=1e-4)
    np.testing.assert_allclose(got["grad_norm_k"], np.linalg.norm(gk, axis=(1, 3)).mean(0), rtol=1e-4)
    np.testing.assert_allclose(got["grad_norm_v"], np.linalg.norm(gv, axis=(1, 3)).mean(0), rtol=1e-4)
    # Gradient w.r.t. the logits by hand: dL/dp = g·v, dL/dz = p ⊙ (dL/dp − Σ p dL/dp) (times weight scale).
    np.testing.assert_allclose(got["grad_norm_logits"], np.linalg.norm(gz, axis=(2, 3)).mean(0), rtol=1e-4)
    by_hand = _numpy_metrics(q, k, v, g, rule, causal=True)["grad_norm_logits"]
    np.testing.assert_allclose(got["grad_norm_logits"], by_hand, rtol=1e-4)


class BlockwiseMetricsTest(chex.TestCase):
  """The O(T·block) metrics against a full T × S numpy computation (blocks of 4 rows, the last one padded)."""

  @parameterized.product(rule=("sqrt", "none", "qk_norm", "post_softmax"), causal=(False, True))
  def test_against_numpy(self, rule, causal):
    q, k, v, g = _qkvg(3, t=11, s=11, q_std=2.0)
    blockwise = _blockwise(q, k, v, g, rule=rule, is_causal=causal, block_q=4, block_k=3)
    want = _numpy_metrics(q, k, v, g, rule, causal)
    self.assertEqual(set(blockwise), set(want))
    for name in want:
      np.testing.assert_allclose(blockwise[name], want[name], rtol=2e-4, atol=1e-6, err_msg=name)

  def test_dense_against_numpy(self):
    q, k, v, g = _qkvg(6, t=7, s=9)
    got = _per_head(q, k, v, g, rule="qk_norm")
    want = _numpy_metrics(q, k, v, g, "qk_norm", causal=False)
    self.assertEqual(set(got), set(want))
    for name in want:
      np.testing.assert_allclose(got[name], want[name], rtol=2e-4, atol=1e-6, err_msg=name)


if __name__ == "__main__":
  absltest.main()
