"""Tests for scaling.optim: per-layer LRs against hand computations, schedules, vmap over LRs."""

import math

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax

from scaling import optim
from scaling import parametrization as P

_D, _V, _F = 8, 8, 16  # width 8 with base width 2: m = 4; V = D so only paths tell embed from readout
_MUP = P.get_parametrization("mup", base_width=2)

# Paths of the contract and their multipliers under μP at m = 4, written by hand.
_PATHS = {
    ("embed", "embedding"): ((_V, _D), 1.0, 4.0),
    ("block_0", "attn", "query", "kernel"): ((_D, _D), 0.25, 1.0),
    ("block_0", "attn", "key", "kernel"): ((_D, _D), 0.25, 1.0),
    ("block_0", "attn", "value", "kernel"): ((_D, _D), 0.25, 1.0),
    ("block_0", "attn", "out", "kernel"): ((_D, _D), 0.25, 1.0),
    ("block_0", "attn", "query_gain"): ((_D,), 1.0, 4.0),
    ("block_0", "ln_attn", "scale"): ((_D,), 1.0, 4.0),
    ("block_0", "mlp", "fc_in", "kernel"): ((_D, _F), 0.25, 1.0),
    ("block_0", "mlp", "fc_in", "bias"): ((_F,), 1.0, 4.0),
    ("block_0", "mlp", "fc_out", "kernel"): ((_F, _D), 0.25, 1.0),
    ("ln_final", "scale"): ((_D,), 1.0, 4.0),
    ("readout", "kernel"): ((_D, _V), 1.0, 4.0),
}
_DECAYED = {path for path in _PATHS if path[-1] in ("kernel", "embedding")}


def _tree(fn):
  """A nested dict over _PATHS with leaf fn(path, shape)."""
  tree = {}
  for path, (shape, _, _) in _PATHS.items():
    node = tree
    for name in path[:-1]:
      node = node.setdefault(name, {})
    node[path[-1]] = fn(path, shape)
  return tree


def _random_tree(seed):
  rng = np.random.default_rng(seed)
  return _tree(lambda path, shape: jnp.asarray(rng.standard_normal(shape, dtype=np.float32)))


def _get(tree, path):
  """The leaf of ``tree`` at ``path``, as a numpy array (hand computations stay out of jax)."""
  for name in path:
    tree = tree[name]
  return np.asarray(tree)


def _hand(fn):
  """The tree of fn(path, adam_mult, sgd_mult) over _PATHS."""
  return _tree(lambda path, shape: fn(path, _PATHS[path][1], _PATHS[path][2]))


class ScaleByParametrizationTest(chex.TestCase):

  def test_multipliers_in_state(self):
    params = _random_tree(0)
    for optimizer, column in (("adam", 1), ("sgd", 2)):
      state = optim.scale_by_parametrization(_MUP, _D, optimizer).init(params)
      want = _tree(lambda path, shape: jnp.float32(_PATHS[path][column]))
      chex.assert_trees_all_equal(state.multipliers, want)

  def test_lr_multipliers_umup(self):
    mults = optim.lr_multipliers(_random_tree(0), "umup", _D, "sgd")
    self.assertEqual(_get(mults, ("embed", "embedding")), 8.0)
    self.assertEqual(_get(mults, ("block_0", "mlp", "fc_out", "kernel")), 16.0)
    self.assertEqual(_get(mults, ("block_0", "mlp", "fc_in", "bias")), 16.0)
    self.assertEqual(_get(mults, ("readout", "kernel")), 8.0)
    adam = optim.lr_multipliers(_random_tree(0), "umup", _D, "adam")
    self.assertAlmostEqual(_get(adam, ("embed", "embedding")), 8**-0.5)
    self.assertEqual(_get(adam, ("block_0", "mlp", "fc_out", "kernel")), 0.25)

  def test_composes_with_optax_sgd(self):
    params, grads = _random_tree(0), _random_tree(1)
    lr = 0.3
    opt = optax.chain(optax.sgd(lr), optim.scale_by_parametrization(_MUP, _D, "sgd"))
    updates, _ = opt.update(grads, opt.init(params), params)
    want = _hand(lambda path, a, s: -lr * s * _get(grads, path))
    chex.assert_trees_all_close(updates, want, rtol=1e-6)

  def test_keeps_dtype(self):
    params = jax.tree.map(lambda x: x.astype(jnp.bfloat16), _random_tree(0))
    t = optim.scale_by_parametrization(_MUP, _D, "sgd")
    updates, _ = t.update(params, t.init(params))
    chex.assert_trees_all_equal_dtypes(updates, params)

  def test_errors(self):
    with self.assertRaisesRegex(ValueError, "unknown optimizer 'lion'"):
      optim.scale_by_parametrization("mup", 8, "lion")
    with self.assertRaisesRegex(ValueError, "width must be a positive integer"):
      optim.scale_by_parametrization("mup", 0)
    with self.assertRaisesRegex(ValueError, "unknown parametrization"):
      optim.scale_by_parametrization("abc", 8)
    params = _random_tree(0)
    params["block_0"]["attn"]["rotary"] = {"kernel": jnp.zeros((2, 2))}
    with self.assertRaisesRegex(ValueError, "block_0/attn/rotary/kernel"):
      optim.scale_by_parametrization("mup", 8).init(params)


class MakeOptimizerTest(chex.TestCase):

  def setUp(self):
    super().setUp()
    chex.clear_trace_counter()

  @chex.variants(with_jit=True, without_jit=True)
  def test_adam_first_step(self):
    params, grads = _random_tree(0), _random_tree(1)
    lr, eps = 0.01, 1e-8
    opt = optim.make_optimizer("adam", lr, _MUP, _D, eps=eps)

    @self.variant
    def step(grads, state, params):
      return opt.update(grads, state, params)

    updates, state = step(grads, opt.init(params), params)
    # First Adam step: m̂ = g, v̂ = g², so the direction is g / (|g| + eps).
    want = _hand(lambda path, a, s: -lr * a * _get(grads, path) / (np.abs(_get(grads, path)) + eps))
    chex.assert_trees_all_close(updates, want, rtol=1e-5)
    self.assertAlmostEqual(float(state.hyperparams["learning_rate"]), lr)

  @chex.variants(with_jit=True, without_jit=True)
  def test_sgd_two_steps_with_momentum(self):
    params, g1, g2 = _random_tree(0), _random_tree(1), _random_tree(2)
    lr, mu = 0.1, 0.9
    opt = optim.make_optimizer("sgd", lr, _MUP, _D, momentum=mu)
    step = self.variant(opt.update)
    state = opt.init(params)
    u1, state = step(g1, state, params)
    u2, state = step(g2, state, params)
    chex.assert_trees_all_close(u1, _hand(lambda p, a, s: -lr * s * _get(g1, p)), rtol=1e-6)
    chex.assert_trees_all_close(
        u2, _hand(lambda p, a, s: -lr * s * (_get(g2, p) + mu * _get(g1, p))), rtol=1e-6, atol=1e-7)

  def test_plain_sgd_step(self):
    params, grads = _random_tree(0), _random_tree(1)
    opt = optim.make_optimizer("sgd", 0.5, _MUP, _D)
    updates, _ = opt.update(grads, opt.init(params), params)
    chex.assert_trees_all_close(updates, _hand(lambda p, a, s: -0.5 * s * _get(grads, p)), rtol=1e-6)

  @chex.variants(with_jit=True, without_jit=True)
  def test_adamw_decays_matrices_only(self):
    params, grads = _random_tree(0), _random_tree(1)
    lr, wd, eps = 0.01, 0.1, 1e-8
    opt = optim.make_optimizer("adamw", lr, _MUP, _D, weight_decay=wd, eps=eps)
    updates, _ = self.variant(opt.update)(grads, opt.init(params), params)

    def want(path, a, s):
      g, p = _get(grads, path), _get(params, path)
      decay = wd * p if path in _DECAYED else 0.0
      return -lr * (a * g / (np.abs(g) + eps) + decay)  # the decay is not rescaled

    chex.assert_trees_all_close(updates, _hand(want), rtol=1e-5, atol=1e-7)

  def test_adamw_is_optax_adam_times_multiplier_plus_decay(self):
    params, lr, wd = _random_tree(0), 3e-3, 0.05
    ours = optim.make_optimizer("adamw", lr, _MUP, _D, weight_decay=wd, b1=0.8, b2=0.99)
    ref = optax.adam(lr, b1=0.8, b2=0.99)
    s_ours, s_ref = ours.init(params), ref.init(params)
    for seed in (1, 2, 3):
      grads = _random_tree(seed)
      u_ours, s_ours = ours.update(grads, s_ours, params)
      u_ref, s_ref = ref.update(grads, s_ref, params)
      want = _hand(lambda p, a, s: a * _get(u_ref, p) - lr * wd * _get(params, p) * (p in _DECAYED))
      chex.assert_trees_all_close(u_ours, want, rtol=1e-5, atol=1e-9)

  def test_sgd_weight_decay_and_momentum(self):
    params, g1, g2 = _random_tree(0), _random_tree(1), _random_tree(2)
    lr, wd, mu = 0.1, 0.01, 0.5
    opt = optim.make_optimizer("sgd", lr, _MUP, _D, weight_decay=wd, momentum=mu)
    state = opt.init(params)
    u1, state = opt.update(g1, state, params)
    u2, state = opt.update(g2, state, params)
    # L2 term added after the per-layer scaling, before momentum: trace(C·g + wd·p).
    d = lambda g, p, s: s * _get(g, p) + wd * _get(params, p) * (p in _DECAYED)
    chex.assert_trees_all_close(u1, _hand(lambda p, a, s: -lr * d(g1, p, s)), rtol=1e-5, atol=1e-8)
    chex.assert_trees_all_close(
        u2, _hand(lambda p, a, s: -lr * (d(g2, p, s) + mu * d(g1, p, s))), rtol=1e-5, atol=1e-8)

  def test_decay_rate_independent_of_width(self):
    # With zero gradients only the decay acts: every decayed matrix shrinks by lr·wd at any width.
    lr, wd = 0.1, 0.2
    for width, base in ((8, 8), (8, 2)):
      scheme = P.get_parametrization("mup", base_width=base)
      params = _random_tree(0)
      opt = optim.make_optimizer("adamw", lr, scheme, width, weight_decay=wd)
      updates, _ = opt.update(jax.tree.map(jnp.zeros_like, params), opt.init(params), params)
      chex.assert_trees_all_close(updates, _hand(lambda p, a, s: -lr * wd * _get(params, p) * (p in _DECAYED)),
                                  rtol=1e-6)

  def test_sp_adam_is_optax_adam(self):
    params = _random_tree(0)
    ours = optim.make_optimizer("adam", 1e-2, "sp", _D)
    ref = optax.adam(1e-2)
    s_ours, s_ref = ours.init(params), ref.init(params)
    for seed in (1, 2, 3):
      grads = _random_tree(seed)
      u_ours, s_ours = ours.update(grads, s_ours, params)
      u_ref, s_ref = ref.update(grads, s_ref, params)
      chex.assert_trees_all_close(u_ours, u_ref, rtol=1e-6)

  def test_umup_sgd_step(self):
    params, grads = _random_tree(0), _random_tree(1)
    opt = optim.make_optimizer("sgd", 1e-3, "umup", _D)
    updates, _ = opt.update(grads, opt.init(params), params)
    # u-μP SGD multipliers: n_out for embedding/bias/gains, n_in for matrices.
    mult = {("embed", "embedding"): 8, ("block_0", "attn", "query_gain"): 8, ("block_0", "mlp", "fc_in", "bias"): 16,
            ("block_0", "mlp", "fc_out", "kernel"): 16}
    want = _hand(lambda p, a, s: -1e-3 * mult.get(p, 8) * _get(grads, p))
    chex.assert_trees_all_close(updates, want, rtol=1e-6)

  def test_schedule_factor_and_schedule_learning_rate(self):
    params, grads = _random_tree(0), _random_tree(1)
    lr = 0.2
    factors = [0.0, 0.5, 1.0, 0.5 * (1 + math.cos(math.pi / 4)), 0.5]  # warmup 2, total 6
    with_factor = optim.make_optimizer("sgd", lr, _MUP, _D, schedule=optim.warmup_cosine_schedule(1.0, 2, 6))
    with_sched = optim.make_optimizer("sgd", optim.warmup_cosine_schedule(lr, 2, 6), _MUP, _D)
    s1, s2 = with_factor.init(params), with_sched.init(params)
    for t, factor in enumerate(factors):
      want = _hand(lambda p, a, s: -lr * factor * s * _get(grads, p))
      u1, s1 = with_factor.update(grads, s1, params)
      u2, s2 = with_sched.update(grads, s2, params)
      # The injected value is the learning rate this step used.
      self.assertAlmostEqual(float(s2.hyperparams["learning_rate"]), lr * factor, places=6)
      chex.assert_trees_all_close(u1, want, rtol=1e-5, atol=1e-8, custom_message=f"step {t}")
      chex.assert_trees_all_close(u2, want, rtol=1e-5, atol=1e-8, custom_message=f"step {t}")

  def test_vmap_over_learning_rates(self):
    params, g1, g2 = _random_tree(0), _random_tree(1), _random_tree(2)
    lrs = [1e-3, 1e-2, 1e-1]
    schedule = optim.warmup_cosine_schedule(1.0, 1, 4)

    def two_steps(lr):
      opt = optim.make_optimizer("adamw", lr, _MUP, _D, weight_decay=0.1, schedule=schedule)
      state = opt.init(params)
      p = params
      for g in (g1, g2):
        u, state = opt.update(g, state, p)
        p = optax.apply_updates(p, u)
      return p

    batched = jax.jit(jax.vmap(two_steps))(jnp.array(lrs))
    for i, lr in enumerate(lrs):
      chex.assert_trees_all_close(jax.tree.map(lambda x: x[i], batched), two_steps(lr), rtol=1e-5, atol=1e-7)
    # The runs differ, so the batch is not a broadcast of one of them.
    self.assertGreater(float(jnp.max(jnp.abs(batched["readout"]["kernel"][2] - batched["readout"]["kernel"][0]))), 0)

  def test_vmap_over_injected_learning_rate(self):
    params, grads = _random_tree(0), _random_tree(1)
    opt = optim.make_optimizer("sgd", 0.0, _MUP, _D)
    state = opt.init(params)
    lrs = jnp.array([0.1, 0.2, 0.3])
    step = jax.jit(jax.vmap(lambda lr: opt.update(grads, optim.set_learning_rate(state, lr), params)[0]))
    updates = step(lrs)
    for i, lr in enumerate([0.1, 0.2, 0.3]):
      want = _hand(lambda p, a, s: -lr * s * _get(grads, p))
      chex.assert_trees_all_close(jax.tree.map(lambda x: x[i], updates), want, rtol=1e-5)

  def test_no_retrace_across_steps(self):
    params = _random_tree(0)
    opt = optim.make_optimizer("adamw", 1e-3, _MUP, _D, weight_decay=0.01)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def step(params, state, grads):
      updates, state = opt.update(grads, state, params)
      return optax.apply_updates(params, updates), state

    state = opt.init(params)
    for seed in range(3):
      params, state = step(params, state, _random_tree(seed + 1))
    chex.assert_tree_all_finite(params)

  @parameterized.parameters(
      (("rmsprop", 0.1), {}, "unknown optimizer 'rmsprop'"),
      (("adam", 0.1), {"weight_decay": 0.1}, "adam takes no weight_decay"),
      (("adam", -0.1), {}, "learning_rate must be finite and non-negative"),
      (("sgd", float("nan")), {}, "learning_rate must be finite and non-negative"),
      (("sgd", "fast"), {}, "learning_rate must be a number"),
      (("sgd", np.ones(2)), {}, "learning_rate must be a scalar"),
      (("adamw", 0.1), {"weight_decay": -1.0}, "weight_decay must be finite and non-negative"),
      (("adam", 0.1), {"b1": 1.0}, "b1 must be in"),
      (("adam", 0.1), {"b2": -0.5}, "b2 must be in"),
      (("adam", 0.1), {"eps": float("inf")}, "eps must be finite"),
      (("sgd", 0.1), {"momentum": 1.0}, "momentum must be in"),
      (("sgd", 0.1), {"nesterov": True}, "nesterov=True needs momentum"),
      (("adamw", 0.1), {"decay_kinds": ("hidden", "conv")}, "unknown layer kind 'conv'"),
      (("sgd", 0.1), {"schedule": 3}, "schedule must be a callable"),
  )
  def test_errors(self, args, kwargs, message):
    with self.assertRaisesRegex(ValueError, message):
      optim.make_optimizer(*args, _MUP, _D, **kwargs)

  def test_set_learning_rate_needs_injected_state(self):
    with self.assertRaisesRegex(ValueError, "no injected learning_rate"):
      optim.set_learning_rate(optax.EmptyState(), 0.1)


class WarmupCosineTest(parameterized.TestCase):

  def test_values(self):
    schedule = optim.warmup_cosine_schedule(2.0, 2, 6)
    c = 0.5 * (1 + math.cos(math.pi / 4))
    want = [0.0, 1.0, 2.0, 2.0 * c, 1.0, 2.0 * (1 - c), 0.0, 0.0]
    got = [float(schedule(t)) for t in range(8)]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)

  def test_no_warmup_and_end_value(self):
    schedule = optim.warmup_cosine_schedule(1.0, 0, 4, end_value=0.1)
    np.testing.assert_allclose([float(schedule(t)) for t in (0, 2, 4)], [1.0, 0.55, 0.1], rtol=1e-6)

  @parameterized.parameters(
      ((1.0, 5, 5), "warmup .5. must be smaller than total"),
      ((1.0, -1, 5), "warmup must be a non-negative integer"),
      ((1.0, 1, 0), "total must be a positive integer"),
      ((-1.0, 1, 5), "peak must be a finite non-negative"),
      ((float("nan"), 1, 5), "peak must be a finite non-negative"),
      ((1.0, 1.5, 5), "warmup must be a non-negative integer"),
  )
  def test_errors(self, args, message):
    with self.assertRaisesRegex(ValueError, message):
      optim.warmup_cosine_schedule(*args)


class DecayMaskTest(absltest.TestCase):

  def test_default_and_custom(self):
    params = _random_tree(0)
    chex.assert_trees_all_equal(optim.decay_mask(params), _tree(lambda path, shape: path in _DECAYED))
    only_norm = optim.decay_mask(params, ("norm",))
    self.assertTrue(only_norm["ln_final"]["scale"])
    self.assertFalse(only_norm["readout"]["kernel"])


if __name__ == "__main__":
  absltest.main()
