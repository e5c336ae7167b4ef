"""Tests for scaling.mup.optim: per-layer LRs against hand computations, kinds not names, schedules, vmap over LRs."""

import math

from absl.testing import absltest
from absl.testing import parameterized
import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from scaling.mup import adam_atan2
from scaling.mup import layers
from scaling.mup import optim
from scaling.training.optimizer import OptimizerConfig
from scaling.mup import schemes as P
from scaling.mup import roles as roles_lib
from scaling.mup import parametrize as parametrize_lib

_D, _V, _F = 8, 8, 16  # width 8 with base width 2: m = 4; V = D so only kinds tell embed from readout
_MUP = P.get_parametrization("mup", base_width=2)
_SP = P.get_parametrization("sp")
_UMUP = P.get_parametrization("umup", umup_scales="covariance")

# Paths of the contract, their layer kinds and their multipliers (Adam, SGD) under μP at m = 4, written by hand.
_PATHS = {
    ("embed", "embedding"): ((_V, _D), "embedding", 1.0, 4.0),
    ("block_0", "attn", "query", "kernel"): ((_D, _D), "attn_q", 0.25, 1.0),
    ("block_0", "attn", "key", "kernel"): ((_D, _D), "attn_k", 0.25, 1.0),
    ("block_0", "attn", "value", "kernel"): ((_D, _D), "attn_v", 0.25, 1.0),
    ("block_0", "attn", "out", "kernel"): ((_D, _D), "attn_o", 0.25, 1.0),
    ("block_0", "attn", "query_gain"): ((_D,), "norm", 1.0, 4.0),
    ("block_0", "ln_attn", "scale"): ((_D,), "norm", 1.0, 4.0),
    ("block_0", "mlp", "fc_in", "kernel"): ((_D, _F), "hidden", 0.25, 1.0),
    ("block_0", "mlp", "fc_in", "bias"): ((_F,), "bias", 1.0, 4.0),
    ("block_0", "mlp", "fc_out", "kernel"): ((_F, _D), "hidden", 0.25, 1.0),
    ("ln_final", "scale"): ((_D,), "final_norm", 1.0, 4.0),
    ("readout", "kernel"): ((_D, _V), "readout", 1.0, 4.0),
}
_DECAYED = {path for path in _PATHS if path[-1] in ("kernel", "embedding")}


def _tree(fn):
  """A nested dict over _PATHS with leaf fn(path, shape)."""
  tree = {}
  for path, (shape, *_) in _PATHS.items():
    node = tree
    for name in path[:-1]:
      node = node.setdefault(name, {})
    node[path[-1]] = fn(path, shape)
  return tree


def _kinds():
  """The layer kind of every parameter of _random_tree (as scaling.training.model.transformer.param_kinds gives them)."""
  return _tree(lambda path, shape: _PATHS[path][1])


_KINDS = _kinds()


def _parametrized(scheme, kinds=None, params=None, width=_D):
  """``scaling.parametrize`` of the roles of ``params`` (_random_tree's) at one global width (multipliers not folded:
  the specs of the scheme's tables, what the built-in model's come to)."""
  params = _random_tree(0) if params is None else params
  roles = roles_lib.from_kinds(params, _KINDS if kinds is None else kinds, scheme.width_mult(width))
  return parametrize_lib.parametrize(roles, scheme, forward="model")


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
  return _tree(lambda path, shape: fn(path, _PATHS[path][2], _PATHS[path][3]))


class ScaleLrTest(chex.TestCase):

  def test_multipliers_in_state(self):
    params = _random_tree(0)
    for optimizer, column in (("adam", 2), ("sgd", 3)):
      state = _parametrized(_MUP).scale_lr(optimizer).init(params)
      want = _tree(lambda path, shape: jnp.float32(_PATHS[path][column]))
      chex.assert_trees_all_equal(state.multipliers, want)

  def test_lr_multipliers_umup(self):
    # u-μP's backward pass is unit-scaled, so SGD takes the Adam multipliers (unit_scaling.optim.lr_scale_func_sgd
    # with an unconstrained readout): 1/√n_out for the embedding, 1/√n_in for matrices (the readout too, which
    # starts at unit scale), 1 for the rest.
    sgd = _parametrized(_UMUP).lr_multipliers(_random_tree(0), "sgd")
    adam = _parametrized(_UMUP).lr_multipliers(_random_tree(0), "adam")
    for mults in (sgd, adam):
      self.assertAlmostEqual(_get(mults, ("embed", "embedding")), 8**-0.5)
      self.assertEqual(_get(mults, ("block_0", "mlp", "fc_out", "kernel")), 0.25)
      self.assertEqual(_get(mults, ("block_0", "mlp", "fc_in", "bias")), 1.0)
      self.assertAlmostEqual(_get(mults, ("readout", "kernel")), _D**-0.5)
    # In a model of depth L every in-block multiplier is further divided by √L (unit_scaling's lr_scale_for_depth).
    deep = _parametrized(_UMUP.with_depth(4)).lr_multipliers(_random_tree(0), "adam")
    self.assertEqual(_get(deep, ("block_0", "mlp", "fc_out", "kernel")), 0.125)
    self.assertEqual(_get(deep, ("block_0", "ln_attn", "scale")), 0.5)
    self.assertEqual(_get(deep, ("ln_final", "scale")), 1.0)
    self.assertAlmostEqual(_get(deep, ("embed", "embedding")), 8**-0.5)

  def test_composes_with_optax_sgd(self):
    params, grads = _random_tree(0), _random_tree(1)
    lr = 0.3
    opt = optax.chain(optax.sgd(lr), _parametrized(_MUP).scale_lr("sgd"))
    updates, _ = opt.update(grads, opt.init(params), params)
    want = _hand(lambda path, a, s: -lr * s * _get(grads, path))
    chex.assert_trees_all_close(updates, want, rtol=1e-6)

  def test_keeps_dtype(self):
    params = jax.tree.map(lambda x: x.astype(jnp.bfloat16), _random_tree(0))
    t = _parametrized(_MUP).scale_lr("sgd")
    updates, _ = t.update(params, t.init(params))
    chex.assert_trees_all_equal_dtypes(updates, params)

  def test_unknown_optimizer(self):
    with self.assertRaisesRegex(ValueError, "unknown optimizer 'lion'"):
      _parametrized(_MUP).scale_lr("lion")


class OptimizerTest(chex.TestCase):

  def setUp(self):
    super().setUp()
    chex.clear_trace_counter()

  @chex.variants(with_jit=True, without_jit=True)
  def test_adam_first_step(self):
    params, grads = _random_tree(0), _random_tree(1)
    lr, eps = 0.01, 1e-8
    opt = _parametrized(_MUP).optimizer("adam", lr, eps=eps)

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
    opt = _parametrized(_MUP).optimizer("sgd", lr, momentum=mu)
    step = self.variant(opt.update)
    state = opt.init(params)
    u1, state = step(g1, state, params)
    u2, state = step(g2, state, params)
    chex.assert_trees_all_close(u1, _hand(lambda p, a, s: -lr * s * _get(g1, p)), rtol=1e-6)
    chex.assert_trees_all_close(
        u2, _hand(lambda p, a, s: -lr * s * (_get(g2, p) + mu * _get(g1, p))), rtol=1e-6, atol=1e-7)

  def test_plain_sgd_step(self):
    params, grads = _random_tree(0), _random_tree(1)
    opt = _parametrized(_MUP).optimizer("sgd", 0.5)
    updates, _ = opt.update(grads, opt.init(params), params)
    chex.assert_trees_all_close(updates, _hand(lambda p, a, s: -0.5 * s * _get(grads, p)), rtol=1e-6)

  @chex.variants(with_jit=True, without_jit=True)
  def test_adamw_decays_matrices_only(self):
    params, grads = _random_tree(0), _random_tree(1)
    lr, wd, eps = 0.01, 0.1, 1e-8
    opt = _parametrized(_MUP).optimizer("adamw", lr, weight_decay=wd, eps=eps)
    updates, _ = self.variant(opt.update)(grads, opt.init(params), params)

    def want(path, a, s):
      g, p = _get(grads, path), _get(params, path)
      decay = wd * p if path in _DECAYED else 0.0
      return -lr * (a * g / (np.abs(g) + eps) + decay)  # the decay is not rescaled

    chex.assert_trees_all_close(updates, _hand(want), rtol=1e-5, atol=1e-7)

  def test_adamw_is_optax_adam_times_multiplier_plus_decay(self):
    params, lr, wd = _random_tree(0), 3e-3, 0.05
    ours = _parametrized(_MUP).optimizer("adamw", lr, weight_decay=wd, b1=0.8, b2=0.99)
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
    opt = _parametrized(_MUP).optimizer("sgd", lr, weight_decay=wd, momentum=mu)
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
      opt = _parametrized(scheme, width=width).optimizer("adamw", lr, weight_decay=wd)
      updates, _ = opt.update(jax.tree.map(jnp.zeros_like, params), opt.init(params), params)
      chex.assert_trees_all_close(updates, _hand(lambda p, a, s: -lr * wd * _get(params, p) * (p in _DECAYED)),
                                  rtol=1e-6)

  def test_sp_adam_is_optax_adam(self):
    params = _random_tree(0)
    ours = _parametrized(_SP).optimizer("adam", 1e-2)
    ref = optax.adam(1e-2)
    s_ours, s_ref = ours.init(params), ref.init(params)
    for seed in (1, 2, 3):
      grads = _random_tree(seed)
      u_ours, s_ours = ours.update(grads, s_ours, params)
      u_ref, s_ref = ref.update(grads, s_ref, params)
      chex.assert_trees_all_close(u_ours, u_ref, rtol=1e-6)

  def test_umup_sgd_step(self):
    params, grads = _random_tree(0), _random_tree(1)
    opt = _parametrized(_UMUP).optimizer("sgd", 1e-3)
    updates, _ = opt.update(grads, opt.init(params), params)
    # u-μP SGD multipliers (= Adam's): 1/√n_out for the embedding, 1/√n_in for matrices and the readout, 1 for
    # gains and biases.
    mult = {("embed", "embedding"): 8**-0.5, ("block_0", "attn", "query_gain"): 1.0,
            ("block_0", "ln_attn", "scale"): 1.0, ("ln_final", "scale"): 1.0, ("block_0", "mlp", "fc_in", "bias"): 1.0,
            ("block_0", "mlp", "fc_out", "kernel"): 0.25, ("readout", "kernel"): _D**-0.5}
    want = _hand(lambda p, a, s: -1e-3 * mult.get(p, 8**-0.5) * _get(grads, p))
    chex.assert_trees_all_close(updates, want, rtol=1e-6)

  def test_schedule_factor_and_schedule_learning_rate(self):
    params, grads = _random_tree(0), _random_tree(1)
    lr = 0.2
    factors = [0.0, 0.5, 1.0, 0.5 * (1 + math.cos(math.pi / 4)), 0.5]  # warmup 2, total 6
    with_factor = _parametrized(_MUP).optimizer("sgd", lr, schedule=optim.warmup_cosine_schedule(1.0, 2, 6))
    with_sched = _parametrized(_MUP).optimizer("sgd", optim.warmup_cosine_schedule(lr, 2, 6))
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
      opt = _parametrized(_MUP).optimizer("adamw", lr, weight_decay=0.1, schedule=schedule)
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
    opt = _parametrized(_MUP).optimizer("sgd", 0.0)
    state = opt.init(params)
    lrs = jnp.array([0.1, 0.2, 0.3])
    step = jax.jit(jax.vmap(lambda lr: opt.update(grads, optim.set_learning_rate(state, lr), params)[0]))
    updates = step(lrs)
    for i, lr in enumerate([0.1, 0.2, 0.3]):
      want = _hand(lambda p, a, s: -lr * s * _get(grads, p))
      chex.assert_trees_all_close(jax.tree.map(lambda x: x[i], updates), want, rtol=1e-5)

  def test_no_retrace_across_steps(self):
    params = _random_tree(0)
    opt = _parametrized(_MUP).optimizer("adamw", 1e-3, weight_decay=0.01)

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
      _parametrized(_MUP).optimizer(*args, **kwargs)

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


class DecayKindsTest(absltest.TestCase):

  def test_default_and_custom(self):
    # With zero gradients only the decay acts: -lr·wd·p for the decayed parameters, 0 for the rest.
    params = _random_tree(0)
    zeros = jax.tree.map(jnp.zeros_like, params)
    for decay_kinds, decayed in ((None, lambda path: path in _DECAYED),
                                 (("norm",), lambda path: _PATHS[path][1] == "norm")):  # not "final_norm"
      kwargs = {} if decay_kinds is None else {"decay_kinds": decay_kinds}
      opt = _parametrized(_MUP).optimizer("adamw", 0.1, weight_decay=0.5, **kwargs)
      updates, _ = opt.update(zeros, opt.init(params), params)
      chex.assert_trees_all_close(updates, _hand(lambda p, a, s: -0.05 * _get(params, p) * decayed(p)), rtol=1e-6,
                                  custom_message=str(decay_kinds))


class _ThreeLayers(nn.Module):
  """x -> Dense(attn_q, with bias) -> · gain(norm) -> Dense(hidden) -> Dense(readout), under names given by the test.

  The kinds are set where the parameters are made (``scaling.mup.layers``); the names are free.
  """

  names: tuple[str, str, str, str]  # (attn_q layer, norm gain, hidden layer, readout layer)
  parametrization: P.Parametrization
  width: int

  @nn.compact
  def __call__(self, x):
    q_name, gain_name, hidden_name, readout_name = self.names
    d = self.width
    specs = roles_lib.GlobalWidth(self.parametrization, d)
    h = layers.ScaledDense(d, "attn_q", specs, use_bias=True, name=q_name)(x)
    gain, mult = layers.kind_param(self, gain_name, "norm", (d,), specs)
    h = layers.ScaledDense(4 * d, "hidden", specs, name=hidden_name)(h * layers.scaled(gain, mult))
    return layers.ScaledDense(11, "readout", specs, name=readout_name)(h)


_CANONICAL = ("query", "query_gain", "fc_in", "readout")
# Names that say nothing about the kind, or the wrong thing: a "hidden" layer called "readout", a readout called
# "fc_in", a gain called "kernel".
_RENAMED = ("totally_different", "kernel", "readout", "fc_in")


class KindsNotNamesTest(chex.TestCase):
  """Per-layer learning rates follow the kinds the layers set, not the module names."""

  _WIDTH = 32
  _SCHEME = P.get_parametrization("mup", base_width=8)  # m = 4

  def _init(self, names):
    module = _ThreeLayers(names, self._SCHEME, self._WIDTH)
    boxed = module.init(jax.random.PRNGKey(0), jnp.ones((2, 16)))["params"]
    return layers.unbox(boxed), layers.param_kinds(boxed)

  @staticmethod
  def _by_role(tree, names):
    """{role: subtree} so trees with different names can be compared."""
    return {role: tree[name] for role, name in zip(("q", "gain", "hidden", "readout"), names)}

  def test_kinds_come_from_the_layers(self):
    for names in (_CANONICAL, _RENAMED):
      _, kinds = self._init(names)
      self.assertEqual(self._by_role(kinds, names), {
          "q": {"kernel": "attn_q", "bias": "bias"},
          "gain": "norm",
          "hidden": {"kernel": "hidden"},
          "readout": {"kernel": "readout"},
      })

  @parameterized.parameters("adam", "sgd")
  def test_renaming_keeps_the_multipliers(self, optimizer):
    results = []
    for names in (_CANONICAL, _RENAMED):
      params, kinds = self._init(names)
      mults = _parametrized(self._SCHEME, kinds, params, self._WIDTH).lr_multipliers(params, optimizer)
      results.append(self._by_role(mults, names))
    self.assertEqual(results[0], results[1])
    # The μP table (Tensor Programs V, Table 8) at m = 4: matrix-like hidden and attention layers get Adam LR 1/m
    # and SGD LR 1; the readout, biases and gains Adam LR 1 and SGD LR m.
    m = 4.0
    want = {
        "adam": {"q": {"kernel": 1 / m, "bias": 1.0}, "gain": 1.0, "hidden": {"kernel": 1 / m},
                 "readout": {"kernel": 1.0}},
        "sgd": {"q": {"kernel": 1.0, "bias": m}, "gain": m, "hidden": {"kernel": 1.0}, "readout": {"kernel": m}},
    }[optimizer]
    self.assertEqual(results[1], want)

  def test_renaming_keeps_the_updates(self):
    # Flax draws the init from the module names, so both trees get the same values, moved to the other names.
    params0, _ = self._init(_CANONICAL)
    values = self._by_role(params0, _CANONICAL)
    updates = []
    for names in (_CANONICAL, _RENAMED):
      _, kinds = self._init(names)
      params = {name: values[role] for role, name in zip(("q", "gain", "hidden", "readout"), names)}
      grads = jax.tree.map(jnp.ones_like, params)
      opt = _parametrized(self._SCHEME, kinds, params, self._WIDTH).optimizer("adamw", 0.1, weight_decay=0.5)
      u, _ = opt.update(grads, opt.init(params), params)
      updates.append(self._by_role(u, names))
    chex.assert_trees_all_close(updates[0], updates[1])
    # First Adam step with g = 1: direction 1, so the update is -lr · (C + wd · p) with C = 1/m for the hidden
    # layer (named "readout" in the renamed tree) and C = 1 for the readout (named "fc_in").
    np.testing.assert_allclose(updates[1]["hidden"]["kernel"], -0.1 * (0.25 + 0.5 * values["hidden"]["kernel"]),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(updates[1]["readout"]["kernel"], -0.1 * (1.0 + 0.5 * values["readout"]["kernel"]),
                               rtol=1e-5, atol=1e-6)


def _adam_atan2_numpy(grads, b1, b2, a, b):
  """Adam-atan2's updates for a sequence of gradients, in float64 numpy (Everett et al. 2024, §4.3)."""
  m = v = 0.0
  out = []
  for t, g in enumerate(grads, 1):
    g = np.asarray(g, np.float64)
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    out.append(a * np.arctan2(m / (1 - b1**t), b * np.sqrt(v / (1 - b2**t))))
  return out


class AdamAtan2Test(chex.TestCase):

  @parameterized.parameters((0.9, 0.999, 1.27, 1.0), (0.5, 0.9, 2.0, 0.5))
  def test_three_steps_against_numpy(self, b1, b2, a, b):
    rng = np.random.default_rng(0)
    grads = [rng.standard_normal((4, 3)).astype(np.float32) * s for s in (1.0, 0.1, 5.0)]
    tx = adam_atan2.scale_by_adam_atan2(b1=b1, b2=b2, a=a, b=b)
    state = tx.init(jnp.zeros((4, 3)))
    for g, want in zip(grads, _adam_atan2_numpy(grads, b1, b2, a, b)):
      u, state = jax.jit(tx.update)(jnp.asarray(g), state)
      np.testing.assert_allclose(np.asarray(u, np.float64), want, rtol=1e-5, atol=1e-7)

  def test_first_step_closed_form(self):
    # m̂ = g and √v̂ = |g| at step 1: the update is 1.27 · atan2(g, |g|) = ±1.27 · π/4 (0 for g = 0).
    g = jnp.asarray([3.0, -2e-7, 0.0, 1e5])
    tx = adam_atan2.scale_by_adam_atan2()
    u, _ = tx.update(g, tx.init(g))
    np.testing.assert_allclose(u, 1.27 * np.pi / 4 * np.sign(np.asarray(g)), rtol=2e-5)  # float32 bias correction

  def test_invariant_to_the_gradient_scale_where_adam_is_not(self):
    rng = np.random.default_rng(1)
    base = [jnp.asarray(rng.standard_normal((64,)).astype(np.float32)) for _ in range(4)]

    def run(tx, scale):
      state = tx.init(base[0])
      for g in base:
        u, state = tx.update(scale * g, state)
      return np.asarray(u, np.float64)

    scales = (1e-12, 1e-9, 1e-8, 1e-6, 1e-3, 1.0, 1e3, 1e6)
    atan2 = {s: run(adam_atan2.scale_by_adam_atan2(), s) for s in scales}
    adam = {s: run(optax.scale_by_adam(eps=1e-8), s) for s in scales}
    for s in scales:
      np.testing.assert_allclose(atan2[s], atan2[1.0], rtol=1e-5, atol=1e-6, err_msg=f"scale {s}")
    # Adam's ε = 1e-8 against √v̂ ~ scale: its update is about halved at 1e-8 and ~1e-4 of itself at 1e-12.
    shrink = {s: np.median(np.abs(adam[s]) / np.abs(adam[1.0])) for s in scales}
    self.assertBetween(shrink[1e-8], 0.35, 0.6)
    self.assertLess(shrink[1e-12], 2e-4)
    self.assertGreater(np.max(np.abs(adam[1e-6] - adam[1.0])), 1e-3)
    np.testing.assert_allclose(adam[1e6], adam[1.0], rtol=1e-5, atol=1e-6)

  @parameterized.parameters(({"b1": 1.0}, "b1 must be in"), ({"b2": -0.1}, "b2 must be in"),
                            ({"a": 0.0}, "a must be positive"), ({"b": -1.0}, "b must be positive"))
  def test_errors(self, kwargs, message):
    with self.assertRaisesRegex(ValueError, message):
      adam_atan2.scale_by_adam_atan2(**kwargs)

  def test_optimizer_chains_the_per_layer_rates(self):
    params, g1, g2 = _random_tree(0), _random_tree(1), _random_tree(2)
    lr = 0.01
    opt = _parametrized(_MUP).optimizer("adam_atan2", lr)
    state = opt.init(params)
    for t, g in enumerate((g1, g2)):
      updates, state = opt.update(g, state, params)
      want = _hand(lambda path, a, s, t=t: -lr * a * _adam_atan2_numpy([_get(g1, path), _get(g2, path)], 0.9, 0.999,
                                                                       1.27, 1.0)[t])
      chex.assert_trees_all_close(updates, want, rtol=1e-5, atol=1e-8, custom_message=f"step {t}")
    cfg = OptimizerConfig(optimizer="adam_atan2", learning_rate=lr)
    built = cfg.build(_parametrized(_MUP))
    u_cfg, _ = built.update(g1, built.init(params), params)
    u_ref, _ = opt.update(g1, opt.init(params), params)
    chex.assert_trees_all_equal(u_cfg, u_ref)

  @parameterized.parameters(({"weight_decay": 0.1}, "adam_atan2 takes no weight_decay"),
                            ({"eps_scaling": "mup"}, "adam_atan2 has no epsilon"))
  def test_optimizer_refuses(self, kwargs, message):
    with self.assertRaisesRegex(ValueError, message):
      _parametrized(_MUP).optimizer("adam_atan2", 0.1, **kwargs)


class EpsScalingTest(chex.TestCase):

  def test_mup_scales_eps_by_one_over_m_and_none_does_not(self):
    # μP at m = 4: ε/4 for every parameter. A gradient of 1e-8 gives |u| = C · 1e-8 / (1e-8 + ε·f).
    params = _random_tree(0)
    grads = jax.tree.map(lambda x: jnp.full_like(x, 1e-8), params)
    for scaling, factor in (("none", 1.0), ("mup", 0.25)):
      opt = _parametrized(_MUP).optimizer("adam", 1.0, eps=1e-8, eps_scaling=scaling)
      u, _ = opt.update(grads, opt.init(params), params)
      chex.assert_trees_all_close(u, _hand(lambda path, a, s: np.full(_PATHS[path][0], -a / (1 + factor))),
                                  rtol=1e-4, custom_message=str(scaling))

  def test_config_values(self):
    self.assertEqual(OptimizerConfig().eps_scaling, "none")
    self.assertEqual(OptimizerConfig(eps_scaling="mup").eps_scaling, "mup")
    # Booleans are refused like any other value outside the choices.
    for kw, message in (({"eps_scaling": "yes"}, "eps_scaling must be one of none, mup"),
                        ({"eps_scaling": True}, "eps_scaling must be one of none, mup; got True"),
                        ({"eps_scaling": False}, "eps_scaling must be one of none, mup; got False"),
                        ({"eps_scaling": "mup", "optimizer": "sgd"}, "eps_scaling only applies"),
                        ({"eps_scaling": "mup", "optimizer": "adam_atan2"}, "optimizer='adam_atan2' has no epsilon")):
      with self.assertRaisesRegex(ValueError, message):
        OptimizerConfig(**kw)
    for value in ("cp", True):
      with self.assertRaisesRegex(ValueError, f"eps_scaling must be one of none, mup; got {value!r}"):
        _parametrized(_MUP).optimizer("adam", 0.1, eps_scaling=value)


class OptimizerConfigTest(chex.TestCase):

  def test_defaults(self):
    cfg = OptimizerConfig()
    self.assertEqual((cfg.optimizer, cfg.schedule, cfg.warmup), ("adam", "constant", 0))
    self.assertIsNone(cfg.schedule_fn())
    self.assertEqual(OptimizerConfig(schedule="cosine", steps=95).warmup, 9)  # steps // 10
    self.assertEqual(OptimizerConfig(schedule="cosine", steps=95, warmup_steps=0).warmup, 0)

  @parameterized.parameters(
      ({"optimizer": "sgd", "weight_decay": 0.1, "momentum": 0.9},),
      ({"optimizer": "adamw", "weight_decay": 0.1},),
      ({"schedule": "cosine", "steps": 1},),  # default warmup 0 < 1
      ({"warmup_steps": 9, "steps": 10},),
      ({"schedule": "cosine", "steps": 10, "warmup_steps": 9, "end_factor": 0.5},),
  )
  def test_valid(self, kw):
    OptimizerConfig(**kw)

  @parameterized.parameters(
      # Combinations (validate).
      ({"optimizer": "adam", "weight_decay": 0.1}, "^weight_decay needs optimizer='adamw' or optimizer='sgd'$"),
      ({"optimizer": "adamw", "momentum": 0.9}, "^momentum only applies to optimizer='sgd'$"),
      ({"optimizer": "adam", "momentum": 0.5}, "momentum only applies"),
      ({"warmup_steps": 10, "steps": 10}, "^warmup_steps=10 must be smaller than steps=10$"),
      ({"schedule": "cosine", "warmup_steps": 12, "steps": 10}, "warmup_steps=12 must be smaller"),
      # Bounds from the field declarations.
      ({"optimizer": "lion"}, "optimizer must be one of adam, adamw, sgd"),
      ({"optimizer": "adamm"}, "adam_atan2; got 'adamm' \\(did you mean 'adam'\\?\\)"),
      ({"schedule": "linear"}, "schedule must be one of constant, cosine"),
      ({"learning_rate": 0.0}, "learning_rate must be positive"),
      ({"learning_rate": -1e-3}, "learning_rate must be positive"),
      ({"learning_rate": float("nan")}, "learning_rate must be finite"),
      ({"optimizer": "adamw", "weight_decay": -0.1}, "weight_decay must be at least 0"),
      ({"optimizer": "sgd", "momentum": 1.0}, "momentum must be below 1"),
      ({"optimizer": "sgd", "momentum": -0.1}, "momentum must be at least 0"),
      ({"steps": 0}, "steps must be at least 1"),
      ({"steps": 2.5}, "steps must be an integer"),
      ({"warmup_steps": -1}, "warmup_steps must be at least 0"),
      ({"end_factor": -0.5}, "end_factor must be at least 0"),
  )
  def test_invalid(self, kw, message):
    with self.assertRaisesRegex(ValueError, message):
      OptimizerConfig(**kw)

  def test_constant_rate_without_warmup(self):
    cfg = OptimizerConfig(steps=10)
    for step in (0, 3, 10, 50):
      self.assertEqual(cfg.applied_learning_rate(0.3, step), 0.3)

  def test_constant_rate_with_linear_warmup(self):
    cfg = OptimizerConfig(steps=10, warmup_steps=4)
    base = 0.3
    for step in range(12):
      want = base * min(step / 4, 1.0)  # 0 at step 0, the base rate from step 4 on
      np.testing.assert_allclose(float(cfg.applied_learning_rate(base, step)), want, rtol=1e-6, atol=1e-9,
                                 err_msg=f"step {step}")

  @parameterized.parameters((None, 0.0), (5, 0.1))
  def test_cosine(self, warmup_steps, end_factor):
    steps, base = 40, 2e-3
    cfg = OptimizerConfig(schedule="cosine", steps=steps, warmup_steps=warmup_steps, end_factor=end_factor)
    w = steps // 10 if warmup_steps is None else warmup_steps

    def closed_form(t):
      # Linear warmup 0 -> base over w steps, then base · (e + (1 - e) · (1 + cos(π (t - w) / (T - w))) / 2).
      if t < w:
        return base * t / w
      if t >= steps:
        return base * end_factor
      return base * (end_factor + (1 - end_factor) * 0.5 * (1 + math.cos(math.pi * (t - w) / (steps - w))))

    for t in (0, 1, w - 1, w, w + 1, (w + steps) // 2, steps - 1, steps, steps + 5):
      np.testing.assert_allclose(float(cfg.applied_learning_rate(base, t)), closed_form(t), rtol=1e-5, atol=1e-9,
                                 err_msg=f"step {t}")
    # Vectorized over steps and with a traced base rate.
    ts = jnp.arange(steps + 2)
    got = jax.jit(cfg.applied_learning_rate)(jnp.float32(base), ts)
    np.testing.assert_allclose(got, [closed_form(int(t)) for t in ts], rtol=1e-5, atol=1e-9)

  def test_build_follows_the_schedule_and_multipliers(self):
    params, grads = _random_tree(0), _random_tree(1)
    cfg = OptimizerConfig(optimizer="sgd", learning_rate=0.2, schedule="cosine", steps=6, warmup_steps=2)
    factors = [0.0, 0.5, 1.0, 0.5 * (1 + math.cos(math.pi / 4)), 0.5]
    for lr, opt in ((0.2, cfg.build(_parametrized(_MUP))), (0.7, cfg.build(_parametrized(_MUP), learning_rate=0.7))):
      state = opt.init(params)
      for t, factor in enumerate(factors):
        self.assertAlmostEqual(float(cfg.applied_learning_rate(lr, t)), lr * factor, places=6)
        u, state = opt.update(grads, state, params)
        chex.assert_trees_all_close(u, _hand(lambda p, a, s: -lr * factor * s * _get(grads, p)), rtol=1e-5,
                                    atol=1e-8, custom_message=f"lr {lr} step {t}")

  def test_build_passes_weight_decay_and_momentum(self):
    params, g1, g2 = _random_tree(0), _random_tree(1), _random_tree(2)
    cfg = OptimizerConfig(optimizer="sgd", learning_rate=0.1, weight_decay=0.01, momentum=0.5)
    ref = _parametrized(_MUP).optimizer("sgd", 0.1, weight_decay=0.01, momentum=0.5)
    ours = cfg.build(_parametrized(_MUP))
    s_ours, s_ref = ours.init(params), ref.init(params)
    for g in (g1, g2):
      u_ours, s_ours = ours.update(g, s_ours, params)
      u_ref, s_ref = ref.update(g, s_ref, params)
      chex.assert_trees_all_close(u_ours, u_ref, rtol=1e-6)
    adamw = OptimizerConfig(optimizer="adamw", weight_decay=0.05).build(_parametrized(_MUP))
    self.assertAlmostEqual(float(adamw.init(params).hyperparams["weight_decay"]), 0.05)


if __name__ == "__main__":
  absltest.main()
