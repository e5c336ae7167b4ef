"""The training step and loop: loss, gradients, tracing, vmapped grids, divergence, schedules, determinism."""

import functools
import math
import types

from absl.testing import absltest
from absl.testing import parameterized
import chex
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import optax

import float_tolerance
from scaling.training.data.config import DataConfig
from scaling.training.model import scanned_blocks as scanned_blocks_lib
from scaling.training.model import transformer as model_lib
from scaling.training.model.config import ModelConfig
from scaling.training.optimizer import OptimizerConfig
from scaling.training import resources
from scaling.training import sharding
from scaling.training.loop import evaluation as evaluation_lib
from scaling.training.loop import initialization as init_lib
from scaling.training.loop import run as loop_lib
from scaling.training.loop import losses as losses_lib
from scaling.training.loop import programs as programs_lib
from scaling.training.loop import step as step_lib

T = 12
STEPS = 40  # every run takes the same steps, so the tests share their compiled steps


@functools.lru_cache(maxsize=None)
def _dataset(seed=0):
  return DataConfig(task="recall", seq_len=T, batch_size=8, vocab_size=16, num_pairs=3,
                             num_queries=3).make(seed)


@functools.lru_cache(maxsize=None)
def _config(**kw):
  base = dict(vocab_size=16, width=16, depth=2, num_heads=2, head_dim=8, max_len=T)
  base.update(kw)
  return ModelConfig(**base)


def _adam(lr=1e-2, steps=STEPS, **kw):
  return OptimizerConfig(optimizer="adam", learning_rate=lr, steps=steps, **kw)


# Warmup then cosine decay (shared by the schedule and the diverging-with-warmup tests).
WARMUP = 10
END = 0.1
COSINE = _adam(schedule="cosine", warmup_steps=WARMUP, end_factor=END)


def _cosine_factor(t):
  """The closed form of COSINE's schedule at step t."""
  if t < WARMUP:
    return t / WARMUP
  return END + (1 - END) * 0.5 * (1 + math.cos(math.pi * (t - WARMUP) / (STEPS - WARMUP)))


def _member(tree, i):
  # Indexed on the host: an eager x[i] would compile a program per leaf shape.
  return jax.tree.map(lambda x: np.asarray(x)[i], tree)


class LossTest(parameterized.TestCase):

  def test_weighted_cross_entropy_matches_log_softmax(self):
    k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
    logits = 3.0 * jax.random.normal(k1, (2, 5, 7))
    targets = jax.random.randint(k2, (2, 5), 0, 7)
    weights = jax.random.bernoulli(k3, 0.5, (2, 5)).astype(jnp.float32).at[0, 0].set(1.0)
    loss, acc = losses_lib.weighted_cross_entropy(logits, targets, weights)
    lp = np.asarray(jax.nn.log_softmax(np.asarray(logits, np.float64)))
    nll = -np.take_along_axis(lp, np.asarray(targets)[..., None], -1)[..., 0]
    w = np.asarray(weights)
    np.testing.assert_allclose(loss, (nll * w).sum() / w.sum(), rtol=1e-5)
    hit = (np.asarray(logits).argmax(-1) == np.asarray(targets))
    np.testing.assert_allclose(acc, (hit * w).sum() / w.sum(), rtol=1e-6)

  def test_zero_weights_give_zero(self):
    loss, acc = losses_lib.weighted_cross_entropy(jnp.ones((1, 3, 4)), jnp.zeros((1, 3), jnp.int32),
                                                  jnp.zeros((1, 3)))
    self.assertEqual(float(loss), 0.0)
    self.assertEqual(float(acc), 0.0)

  def test_check_divergence(self):
    self.assertEqual(loop_lib.check_divergence(float("nan"), 2.0, 3.0), loop_lib.STOP_NONFINITE)
    self.assertEqual(loop_lib.check_divergence(float("inf"), 2.0, 3.0), loop_lib.STOP_NONFINITE)
    self.assertEqual(loop_lib.check_divergence(6.1, 2.0, 3.0), loop_lib.STOP_LOSS_GROWTH)
    self.assertIsNone(loop_lib.check_divergence(5.9, 2.0, 3.0))


def _numpy_lse(logits):
  """log Z = log Σ exp(logits) over the last axis, in float64."""
  x = np.asarray(logits, np.float64)
  top = x.max(-1, keepdims=True)
  return (top + np.log(np.exp(x - top).sum(-1, keepdims=True)))[..., 0]


class ZLossTest(parameterized.TestCase):

  @parameterized.parameters(("all", 0.3), ("some", 0.3), ("all", 1e-4))
  def test_gradient_is_the_closed_form(self, which, c):
    k1, k2 = jax.random.split(jax.random.key(3))
    logits = 4.0 * jax.random.normal(k1, (2, 5, 7)) + 2.0
    weights = (jnp.ones((2, 5)) if which == "all"
               else jax.random.bernoulli(k2, 0.5, (2, 5)).astype(jnp.float32).at[0, 0].set(1.0))
    value, grad = jax.value_and_grad(lambda l: losses_lib.z_loss(l, weights, c))(logits)
    x, w = np.asarray(logits, np.float64), np.asarray(weights, np.float64)
    lse = _numpy_lse(x)
    softmax = np.exp(x - lse[..., None])
    # c · Σ w (log Z)² / Σ w, and its gradient 2c · w · log Z · softmax / Σ w per token.
    np.testing.assert_allclose(value, c * np.sum(w * lse**2) / w.sum(), rtol=1e-5)
    np.testing.assert_allclose(grad, 2 * c * (w * lse)[..., None] * softmax / w.sum(), rtol=1e-4, atol=1e-9)

  def test_log_z_stats_against_numpy(self):
    logits = 3.0 * jax.random.normal(jax.random.key(4), (2, 4, 6))
    weights = jnp.asarray([[1.0, 0.0, 1.0, 1.0], [0.0, 2.0, 1.0, 0.0]])
    stats = losses_lib.log_z_stats(logits, weights)
    lse, w = _numpy_lse(logits), np.asarray(weights)
    np.testing.assert_allclose(stats["log_z_mean"], np.sum(w * lse) / w.sum(), rtol=1e-5)
    np.testing.assert_allclose(stats["log_z_max"], lse[w > 0].max(), rtol=1e-6)


class TrainStepTest(chex.TestCase):

  def test_step_metrics_against_an_independent_gradient(self):
    cfg, opt = _config(), _adam()
    state = init_lib.init_train_state(0, cfg, opt)
    batch = _dataset().batch(0)
    new_state, metrics = step_lib.make_train_step(cfg, opt)(state, batch)
    model = model_lib.Transformer(cfg)

    def reference_loss(params):
      logits = model.apply({"params": params}, batch["inputs"])
      nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), batch["targets"][..., None], -1)[..., 0]
      return jnp.sum(nll * batch["weights"]) / jnp.sum(batch["weights"])

    loss, grads = jax.jit(jax.value_and_grad(reference_loss))(state.params)
    grads = scanned_blocks_lib.unstack_blocks(grads, cfg.depth)  # the blocks train stacked (scanned, the default)
    np.testing.assert_allclose(metrics["loss"], loss, rtol=1e-5)
    sq = lambda tree: sum(float(np.sum(np.asarray(x, np.float64) ** 2)) for x in jax.tree.leaves(tree))
    np.testing.assert_allclose(metrics["grad_norm"], math.sqrt(sq(grads)), rtol=1e-4)
    np.testing.assert_allclose(metrics["layer_grad_norm"],
                               [math.sqrt(sq(grads[f"block_{i}"])) for i in range(cfg.depth)], rtol=1e-4)
    np.testing.assert_allclose(metrics["readout_grad_norm"], math.sqrt(sq(grads["readout"])), rtol=1e-4)
    np.testing.assert_allclose(metrics["embed_grad_norm"], math.sqrt(sq(grads["embed"])), rtol=1e-4)
    np.testing.assert_allclose(metrics["learning_rate"], 1e-2, rtol=1e-6)
    for key in model_lib.LAYER_AUX_KEYS:
      chex.assert_shape(metrics[key], (cfg.depth,))
    self.assertEqual(int(new_state.step), 1)
    # One Adam step from zero moments moves every parameter with a non-zero gradient by about lr.
    moved = jax.tree.map(lambda a, b: np.max(np.abs(np.asarray(a) - np.asarray(b))), new_state.params, state.params)
    np.testing.assert_allclose(moved["block_0"]["mlp"]["fc_in"]["kernel"], 1e-2, rtol=1e-3)

  def test_zero_z_loss_is_bit_identical_to_the_plain_cross_entropy(self):
    cfg = _config()
    opt = _adam(z_loss=0.0)
    model = model_lib.Transformer(cfg)
    optimizer = programs_lib.optimizer_for(cfg, opt)

    @jax.jit
    def plain_step(params, opt_state, batch):  # the cross-entropy alone, without the model's metrics
      loss = lambda p: losses_lib.weighted_cross_entropy(model.apply({"params": p}, batch["inputs"]),
                                                         batch["targets"], batch["weights"])[0]
      grads = jax.grad(loss)(params)
      updates, opt_state = optimizer.update(grads, opt_state, params)
      return optax.apply_updates(params, updates), opt_state

    state = init_lib.init_train_state(0, cfg, opt)
    params, opt_state = state.params, state.opt_state
    batch = _dataset().batch(0)
    # Both programs compiled with XLA's default CPU emitters: the tests' faster-compiling ones (conftest) fuse the
    # two differently shaped programs with different roundings.
    options = {"xla_cpu_use_fusion_emitters": True}
    step = step_lib.make_train_step(cfg, opt).lower(state, batch).compile(options)
    plain_step = plain_step.lower(params, opt_state, batch).compile(options)
    for t in range(2):
      state, metrics = step(state, _dataset().batch(t))
      params, opt_state = plain_step(params, opt_state, _dataset().batch(t))
      self.assertEqual(float(metrics["z_loss"]), 0.0)
    chex.assert_trees_all_equal(state.params, params)

  def test_z_loss_step_against_an_independent_gradient(self):
    cfg, c = _config(), 0.05
    opt = _adam(z_loss=c)
    state = init_lib.init_train_state(0, cfg, opt)
    batch = _dataset().batch(0)
    _, metrics = step_lib.make_train_step(cfg, opt)(state, batch)
    model = model_lib.Transformer(cfg)
    w = batch["weights"]

    def reference(params):
      logits = model.apply({"params": params}, batch["inputs"])
      lse = jax.nn.logsumexp(logits, -1)
      nll = lse - jnp.take_along_axis(logits, batch["targets"][..., None], -1)[..., 0]
      ce, zl = jnp.sum(nll * w) / jnp.sum(w), c * jnp.sum(w * lse**2) / jnp.sum(w)
      return ce + zl, (ce, zl, logits)

    (_, (ce, zl, logits)), grads = jax.jit(jax.value_and_grad(reference, has_aux=True))(state.params)
    np.testing.assert_allclose(metrics["loss"], ce, rtol=1e-5)  # the logged loss is the cross-entropy
    np.testing.assert_allclose(metrics["z_loss"], zl, rtol=1e-5)
    sq = lambda tree: sum(float(np.sum(np.asarray(x, np.float64) ** 2)) for x in jax.tree.leaves(tree))
    np.testing.assert_allclose(metrics["grad_norm"], math.sqrt(sq(grads)), rtol=1e-4)
    lse, wn = _numpy_lse(logits), np.asarray(w)
    np.testing.assert_allclose(metrics["log_z_mean"], np.sum(wn * lse) / wn.sum(), rtol=1e-5)
    np.testing.assert_allclose(metrics["log_z_max"], lse[wn > 0].max(), rtol=1e-5)

  def test_traces_once(self):
    # The library's step (compiled by test_step_metrics_against_an_independent_gradient): the states it returns have
    # the initial state's signature, so every step runs the one traced and compiled program.
    cfg, opt = _config(), _adam()
    step = step_lib.make_train_step(cfg, opt)
    state = init_lib.init_train_state(0, cfg, opt)
    for i in range(4):
      state, metrics = step(state, _dataset().batch(i))
    self.assertEqual(step._cache_size(), 1)  # pylint: disable=protected-access
    chex.assert_tree_all_finite((state, metrics))
    self.assertEqual(int(state.step), 4)

  def test_compiled_functions_are_cached(self):
    cfg, opt = _config(), _adam()
    self.assertIs(step_lib.make_train_step(cfg, opt), step_lib.make_train_step(cfg, opt))
    self.assertIs(init_lib.make_init(cfg, opt, grid=True), init_lib.make_init(cfg, opt, grid=True))
    self.assertIsNot(step_lib.make_train_step(cfg, opt), step_lib.make_train_step(cfg, opt, grid=True))
    self.assertIs(programs_lib.optimizer_for(cfg, opt), programs_lib.optimizer_for(cfg, opt))

  def test_init_sets_the_learning_rate_in_the_state(self):
    cfg, opt = _config(), _adam()
    state = init_lib.make_init(cfg, opt)(3, 0.25)
    np.testing.assert_allclose(state.opt_state.hyperparams["learning_rate"], 0.25)
    default = init_lib.init_train_state(3, cfg, opt)
    np.testing.assert_allclose(default.opt_state.hyperparams["learning_rate"], 1e-2)
    # The seed alone sets the parameters: the same compiled init at another rate, and the op-by-op one (rounded
    # apart in the last bits where XLA fuses the draws).
    chex.assert_trees_all_equal(state.params, init_lib.make_init(cfg, opt)(3, 1e-2).params)
    chex.assert_trees_all_close(state.params, default.params, rtol=1e-6, atol=0)


class GridTest(chex.TestCase):
  """A vmapped grid of (seed, learning rate) members against the same runs trained one at a time."""

  def test_vmapped_grid_equals_separate_runs(self):
    cfg, opt = _config(), _adam()
    seeds, lrs = [1, 1, 2], [1e-2, 3e-2, 1e-2]
    grid = loop_lib.run_training(cfg, opt, _dataset(), loop_lib.Runs(seed=seeds, learning_rates=lrs),
                                 loop_lib.RunOptions(record=("loss", "learning_rate", "attn_logits_rms")))
    chex.assert_shape(grid.records["loss"], (STEPS, 3))
    chex.assert_shape(grid.records["attn_logits_rms"], (STEPS, 3, cfg.depth))
    np.testing.assert_allclose(grid.records["learning_rate"], np.broadcast_to(lrs, (STEPS, 3)), rtol=1e-6)
    self.assertEqual(grid.steps_run, STEPS)
    np.testing.assert_array_equal(grid.divergence_step, [-1, -1, -1])
    self.assertEqual(list(grid.stop_reason), [loop_lib.STOP_COMPLETED] * 3)
    np.testing.assert_array_equal(grid.diverged, [False, False, False])
    chex.assert_shape(grid.initial_loss, (3,))
    step = step_lib.make_train_step(cfg, opt, grid=True, donate=True,  # the step run_training uses
                                    chunk=step_lib.default_grid_chunk(cfg, len(seeds)))
    self.assertEqual(step._cache_size(), 1)  # pylint: disable=protected-access
    # Separate single runs: the learning rate from the config, or set in the initial state (same compiled step).
    separate = [loop_lib.run_training(cfg, opt, _dataset(), loop_lib.Runs(seed=1),
                                      loop_lib.RunOptions(record=("loss",))),
                loop_lib.run_training(cfg, opt, _dataset(), loop_lib.Runs(seed=1),
                                      loop_lib.RunOptions(record=("loss",),
                                                          state=init_lib.make_init(cfg, opt)(1, 3e-2))),
                loop_lib.run_training(cfg, opt, _dataset(), loop_lib.Runs(seed=2),
                                      loop_lib.RunOptions(record=("loss",)))]
    for j, run in enumerate(separate):
      chex.assert_shape(run.records["loss"], (STEPS,))
      np.testing.assert_allclose(grid.records["loss"][:, j], run.records["loss"], rtol=1e-5)
      chex.assert_trees_all_close(_member(grid.state.params, j), run.state.params, rtol=1e-4, atol=1e-5)
      self.assertAlmostEqual(float(grid.initial_loss[j]), run.initial_loss, places=5)
    np.testing.assert_allclose(grid.state.opt_state.hyperparams["learning_rate"], lrs, rtol=1e-6)
    # The two learning rates of seed 1 really trained differently; seed 2 saw other data from another init.
    diff = jax.tree.map(lambda x: np.max(np.abs(np.asarray(x)[0] - np.asarray(x)[1])), grid.state.params)
    self.assertGreater(float(diff["readout"]["kernel"]), 1e-3)
    self.assertNotEqual(grid.records["loss"][0, 0], grid.records["loss"][0, 2])

  def test_grid_init(self):
    cfg, opt = _config(), _adam()
    # Three members placed as run_training places them, as in test_vmapped_grid_equals_separate_runs (same compiled
    # init).
    (seeds, lrs), _ = sharding.shard((np.asarray([3, 4, 3], np.int32), np.asarray([0.5, 0.25, 0.125], np.float32)))
    states = init_lib.make_init(cfg, opt, grid=True)(seeds, lrs)
    np.testing.assert_allclose(states.opt_state.hyperparams["learning_rate"], [0.5, 0.25, 0.125])
    chex.assert_shape(states.params["embed"]["embedding"], (3, 16, 16))
    chex.assert_trees_all_equal(_member(states.params, 0), _member(states.params, 2))
    self.assertFalse(np.allclose(states.params["embed"]["embedding"][0], states.params["embed"]["embedding"][1]))
    chex.assert_trees_all_equal(_member(states.params, 1), init_lib.make_init(cfg, opt)(4, 0.25).params)

  def test_optimizers_of_one_model_share_its_parameter_init(self):
    cfg = _config(width=24, head_dim=12, depth=1)  # a shape no other test compiles; one block compiles faster
    optimizers = {"adam": _adam(), "cosine": COSINE,
                  "sgd": OptimizerConfig(optimizer="sgd", momentum=0.9, steps=STEPS)}
    compiled = []
    listen = lambda event, duration, fun_name="?", **_: compiled.append(fun_name) if event.endswith(
        "backend_compile_duration") else None
    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
      states = {name: init_lib.make_init(cfg, opt, grid=True)(np.asarray([3, 4]), np.asarray([0.5, 0.25]))
                for name, opt in optimizers.items()}
    finally:
      jax.monitoring.unregister_event_duration_listener(listen)
    self.assertEqual(sum("params" in name for name in compiled), 1, compiled)
    # Each state is the one a single jitted program of the whole init gives (parameters and optimizer state).
    for name, opt in optimizers.items():
      whole = jax.jit(programs_lib.as_program(cfg, opt).init_state)
      for j, (seed, lr) in enumerate(((3, 0.5), (4, 0.25))):
        chex.assert_trees_all_equal(_member(states[name].params, j), whole(seed, lr).params)
        chex.assert_trees_all_equal(_member(states[name].opt_state, j), whole(seed, lr).opt_state)

  @parameterized.parameters(1, 2)
  def test_grid_in_chunks_equals_all_at_once(self, chunk):
    cfg, opt = _config(), _adam()
    seeds, lrs = [1, 2, 3], [1e-2, 3e-2, 2e-2]  # chunk 2: one chunk of 2 and a remainder of 1
    whole = loop_lib.run_training(cfg, opt, _dataset(), loop_lib.Runs(seed=seeds, learning_rates=lrs, chunk=3),
                                  loop_lib.RunOptions(record=("loss",)))
    parts = loop_lib.run_training(cfg, opt, _dataset(), loop_lib.Runs(seed=seeds, learning_rates=lrs, chunk=chunk),
                                  loop_lib.RunOptions(record=("loss",)))
    np.testing.assert_allclose(parts.records["loss"], whole.records["loss"], rtol=1e-5)
    chex.assert_trees_all_close(parts.state.params, whole.state.params, rtol=1e-4, atol=1e-5)
    self.assertFalse(np.allclose(parts.records["loss"][-1, 0], parts.records["loss"][-1, 1]))
    # The chunked step ran (a loop over chunks in its program); all at once is a plain vmap, without one (seen with
    # the blocks unrolled: no scan of the model's own).
    ran = step_lib.make_train_step(cfg, opt, grid=True, donate=True, chunk=chunk)
    self.assertEqual(ran._cache_size(), 1)  # pylint: disable=protected-access
    cfg = _config(scan_layers=False)
    chunked = step_lib.make_train_step(cfg, opt, grid=True, donate=True, chunk=chunk)
    plain = step_lib.make_train_step(cfg, opt, grid=True, donate=True)
    state = init_lib.make_init(cfg, opt, grid=True)(jnp.asarray(seeds), jnp.asarray(lrs))
    batch = step_lib.grid_batches(_dataset(), 0, jnp.asarray(seeds))
    self.assertIn("scan", str(jax.make_jaxpr(chunked)(state, batch)))
    self.assertNotIn("scan", str(jax.make_jaxpr(plain)(state, batch)))

  @settings(max_examples=100, deadline=None)
  @given(width=st.integers(1, 4096), members=st.integers(1, 64), backend=st.sampled_from(["cpu", "gpu", "tpu"]),
         devices=st.integers(1, 8))
  def test_default_grid_chunk_divides_the_members(self, width, members, backend, devices):
    # Whatever its limits: all at once (None), or chunks of at least one member and fewer than the grid's.
    chunk = step_lib.default_grid_chunk(types.SimpleNamespace(width=width), members, backend=backend,
                                        devices=devices)
    self.assertTrue(chunk is None or (type(chunk) is int and 1 <= chunk < members), chunk)

  def test_default_grid_chunk_runs_every_member_and_an_even_split_within_the_grid_estimate(self):
    # The rule's chunk on one CPU device, for the smallest grids it splits evenly and with a remainder: every
    # member's step equals all at once's; split evenly, XLA's buffer plan of the chunked step stays within the
    # library's memory estimate of the grid (``resources.training_program``).
    cfg, opt = _config(), _adam()
    chunks = {m: step_lib.default_grid_chunk(cfg, m, backend="cpu") for m in range(2, 17)}
    even = [m for m, c in chunks.items() if c and m % c == 0]
    uneven = [m for m, c in chunks.items() if c and m % c]
    if not even and not uneven:
      self.skipTest("the rule runs every grid of this model all at once")
    for members in (*even[:1], *uneven[:1]):
      # Placed and initialized as run_training does. Three members are the grid the other grid tests train: its
      # steps are theirs, which donate the state (chunk=3 is all at once); every step gets its own copy of the state,
      # placed from the host.
      (seeds, lrs), _ = sharding.shard((np.arange(members, dtype=np.int32),
                                        np.geomspace(1e-3, 1e-1, members).astype(np.float32)))
      state = init_lib.make_init(cfg, opt, grid=True)(seeds, lrs)
      batch = step_lib.grid_batches(_dataset(), 0, seeds)
      shared = members == 3
      chunked = step_lib.make_train_step(cfg, opt, grid=True, donate=shared, chunk=chunks[members])
      whole_step = step_lib.make_train_step(cfg, opt, grid=True, donate=shared, chunk=3 if shared else None)
      host = jax.device_get(state)
      copy = lambda s: jax.tree.map(lambda x, like: jax.device_put(np.asarray(x), like.sharding), s, state)
      whole = lambda s, b: whole_step(copy(s), b)
      (got, got_metrics), (want, want_metrics) = chunked(copy(host), batch), whole(host, batch)
      # The same sums in another order: the loss within float32's bound for the model's depth of dependent
      # operations; the parameters within what one ulp of the inputs moves them, as Adam's first step
      # g/(|g| + eps) amplifies the rounding of gradients near zero far beyond any fixed bound.
      np.testing.assert_allclose(got_metrics["loss"], want_metrics["loss"], rtol=float_tolerance.rtol(depth=32))
      moved = float_tolerance.ulp_sensitivity(lambda s: whole(s, batch)[0].params, state)
      jax.tree.map(lambda g, w, m: np.testing.assert_allclose(g, w, rtol=0, atol=4 * m + float_tolerance.EPS32),
                   got.params, want.params, moved)
      if members % chunks[members]:
        continue
      analysis = chunked.lower(copy(host), batch).compile().memory_analysis()
      if analysis is None:
        self.skipTest("no memory analysis on this backend")
      planned = analysis.temp_size_in_bytes + analysis.argument_size_in_bytes + analysis.output_size_in_bytes
      estimate = resources.training_program(cfg, optimizer=opt.optimizer, batch_size=_dataset().batch_size,
                                            seq_len=T, members=members)
      self.assertLessEqual(planned, estimate.total)

  def test_bad_grid_arguments(self):
    with self.assertRaisesRegex(ValueError, "same length"):
      loop_lib.Runs(seed=[0, 1], learning_rates=[1e-2])
    with self.assertRaisesRegex(ValueError, "same length"):
      loop_lib.Runs(seed=[0, 1], attn_mults=[1.0, 2.0, 3.0])
    with self.assertRaisesRegex(ValueError, "grid"):
      loop_lib.Runs(seed=0, learning_rates=[1e-2])
    with self.assertRaisesRegex(ValueError, "grid"):
      loop_lib.Runs(seed=0, chunk=2)
    with self.assertRaisesRegex(ValueError, "finite and positive"):
      loop_lib.Runs(seed=[0, 1], learning_rates=[1e-2, -1.0])
    for bad in ([], [[0, 1]], [0.5, 1.5], "01"):
      with self.assertRaisesRegex(ValueError, "seed must be"):
        loop_lib.Runs(seed=bad)
    for bad in (0, 1.5, True, "2"):
      with self.assertRaisesRegex(ValueError, "chunk"):
        loop_lib.Runs(seed=[0, 1], chunk=bad)

  def test_runs_are_kept_as_tuples(self):
    runs = loop_lib.Runs(seed=np.arange(2), learning_rates=np.asarray([1e-2, 3e-2], np.float32), chunk=np.int64(1))
    self.assertEqual(runs, loop_lib.Runs(seed=(0, 1), learning_rates=(np.float32(1e-2), np.float32(3e-2)), chunk=1))
    self.assertTrue(runs.grid)
    self.assertFalse(loop_lib.Runs(seed=np.int32(3)).grid)
    self.assertEqual(loop_lib.Runs(seed=np.int32(3)).seed, 3)


class RunTrainingTest(chex.TestCase):

  def test_loss_decreases(self):
    result = loop_lib.run_training(_config(), _adam(), _dataset(),
                                   options=loop_lib.RunOptions(log_every=1, record=("loss",)))
    losses = [r["loss"] for r in result.history]
    self.assertLen(losses, STEPS)
    np.testing.assert_array_equal(result.records["loss"], losses)
    self.assertEqual(result.stop_reason, loop_lib.STOP_COMPLETED)
    self.assertIsNone(result.divergence_step)
    self.assertFalse(result.diverged)
    self.assertIsNone(result.last_finite_state)  # only kept with keep_last_finite
    self.assertLess(np.mean(losses[-5:]), 0.8 * losses[0])
    self.assertEqual(result.initial_loss, losses[0])
    self.assertEqual(result.final_loss, losses[-1])
    self.assertEqual(int(result.state.step), STEPS)
    self.assertGreater(result.steps_per_sec, 0)
    evaluation = evaluation_lib.evaluate(result.state.params, _config(), _dataset(), num_batches=2)
    self.assertLess(evaluation["loss"], 0.8 * losses[0])

  def test_log_every_and_callback(self):
    seen = []
    result = loop_lib.run_training(_config(), _adam(), _dataset(),
                                   options=loop_lib.RunOptions(log_every=15,
                                                               callback=lambda step, m: seen.append((step, m["loss"]))))
    # Every 15th step, and the last one.
    self.assertEqual([s for s, _ in seen], [0, 15, 30, STEPS - 1])
    self.assertEqual([r["step"] for r in result.history], [0, 15, 30, STEPS - 1])
    self.assertEqual([m for _, m in seen], [r["loss"] for r in result.history])
    self.assertEqual(result.steps_run, STEPS)
    self.assertEqual(result.records, {})
    for key in ("loss", "accuracy", "grad_norm", "layer_grad_norm", "attn_entropy", "attn_max_logit",
                "learning_rate", "update_norm"):
      self.assertIn(key, result.history[0])
    self.assertLen(result.history[0]["attn_entropy"], 2)

  def test_steps_between_logs_compute_only_what_is_recorded(self):
    # Logged every 15 steps: the steps between return the loss (and the recorded metrics) alone, and train the
    # same parameters as a run that logs every step, whose records are the reference.
    every = loop_lib.run_training(_config(), _adam(), _dataset(),
                                  options=loop_lib.RunOptions(log_every=1, record=("loss", "grad_norm")))
    sparse = loop_lib.run_training(_config(), _adam(), _dataset(),
                                   options=loop_lib.RunOptions(log_every=15, record=("loss", "grad_norm")))
    for name in ("loss", "grad_norm"):
      np.testing.assert_allclose(sparse.records[name], every.records[name], rtol=1e-5)
    chex.assert_trees_all_close(sparse.state.params, every.state.params, rtol=1e-4, atol=1e-6)
    lean = step_lib.make_train_step(_config(), _adam(), metrics=("loss", "grad_norm"), donate=True)
    self.assertEqual(lean._cache_size(), 1)  # pylint: disable=protected-access
    state = init_lib.make_init(_config(), _adam())(0, 1e-2)
    _, metrics = step_lib.make_train_step(_config(), _adam())(state, _dataset().batch(0, 0))
    _, lean_metrics = lean(state, _dataset().batch(0, 0))
    self.assertEqual(set(lean_metrics), {"loss", "grad_norm"})
    np.testing.assert_allclose(lean_metrics["loss"], metrics["loss"], rtol=1e-6)
    self.assertTrue(state.params["embed"]["embedding"].is_deleted())  # donated to the lean step

  def test_the_callers_state_survives_donation(self):
    init = init_lib.make_init(_config(), _adam())(0, 1e-2)
    before = jax.tree.map(np.asarray, init)
    result = loop_lib.run_training(_config(), _adam(), _dataset(), options=loop_lib.RunOptions(state=init))
    chex.assert_trees_all_equal(jax.tree.map(np.asarray, init), before)
    self.assertEqual(int(result.state.step), STEPS)

  def _check_last_finite(self, result, cfg, opt, init):
    """The kept state is the last one whose loss was finite and not diverged: the parameters before the update
    that made the loss diverge (step d - 1 for divergence step d); replays the run one step at a time."""
    d = result.divergence_step
    kept = result.last_finite_state
    chex.assert_tree_all_finite(kept.params)
    self.assertEqual(int(kept.step), d - 1)
    step = step_lib.make_train_step(cfg, opt)
    state = init
    for t in range(d - 1):
      state, metrics = step(state, _dataset().batch(t, 0))
      self.assertLess(float(metrics["loss"]), 3.0 * result.initial_loss)
    chex.assert_trees_all_equal(kept.params, state.params)
    chex.assert_trees_all_equal(kept.opt_state, state.opt_state)
    # ... and the diverged run evaluates there, to a finite loss.
    self.assertTrue(math.isfinite(evaluation_lib.evaluate(kept.params, cfg, _dataset(), num_batches=1)["loss"]))

  def test_divergence_is_detected(self):
    # A huge learning rate set in the initial state (reusing the compiled step of test_loss_decreases).
    cfg, opt = _config(), _adam()
    init = init_lib.make_init(cfg, opt)(0, 1e3)
    result = loop_lib.run_training(cfg, opt, _dataset(),
                                   options=loop_lib.RunOptions(state=init, keep_last_finite=True))
    self.assertTrue(result.diverged)
    self.assertIn(result.stop_reason, (loop_lib.STOP_NONFINITE, loop_lib.STOP_LOSS_GROWTH))
    d = result.divergence_step
    self.assertGreater(d, 0)
    self.assertLess(d, STEPS - 1)
    self.assertEqual(result.steps_run, d + 1)
    self.assertEqual(result.history[-1]["step"], d)
    self.assertEqual([r["diverged"] for r in result.history], [False] * (len(result.history) - 1) + [True])
    bad = result.history[-1]["loss"]
    self.assertTrue(not math.isfinite(bad) or bad > 3.0 * result.initial_loss)
    if math.isfinite(bad):
      self.assertEqual(result.final_loss, bad)
    else:
      self.assertFalse(math.isfinite(result.final_loss))
    self._check_last_finite(result, cfg, opt, init)
    # Logged only at step 0, the diverging step still gets a full row: the same as when every step is logged.
    sparse = loop_lib.run_training(cfg, opt, _dataset(),
                                   options=loop_lib.RunOptions(state=init, keep_last_finite=True, log_every=STEPS))
    self.assertEqual([r["step"] for r in sparse.history], [0, d])
    self.assertEqual(set(sparse.history[-1]), set(result.history[-1]))
    for key in ("loss", "accuracy", "grad_norm"):
      np.testing.assert_allclose(sparse.history[-1][key], result.history[-1][key], rtol=1e-4)

  def test_diverging_after_warmup_is_evaluated_on_its_last_finite_state(self):
    # The warmup delays the divergence by a few steps, so the kept state has taken real updates.
    cfg = _config()
    init = init_lib.make_init(cfg, COSINE)(0, 10.0)
    result = loop_lib.run_training(cfg, COSINE, _dataset(),
                                   options=loop_lib.RunOptions(state=init, keep_last_finite=True))
    self.assertTrue(result.diverged)
    self.assertGreaterEqual(result.divergence_step, 2)
    self.assertEqual(result.steps_run, result.divergence_step + 1)
    self._check_last_finite(result, cfg, COSINE, init)
    # The final state is the diverged one, not the kept one.
    self.assertEqual(int(result.state.step), result.steps_run)

  def test_a_completed_run_keeps_its_final_state(self):
    result = loop_lib.run_training(_config(), _adam(), _dataset(), options=loop_lib.RunOptions(keep_last_finite=True))
    self.assertFalse(result.diverged)
    chex.assert_trees_all_equal(result.last_finite_state, result.state)

  def test_grid_divergence_is_per_member(self):
    # Members 0 and 2 train normally, member 1 diverges: the grid runs on to the end and keeps each member's own
    # last finite state (member 1: the one before its divergence step). Three members, as in
    # test_vmapped_grid_equals_separate_runs (same compiled step).
    cfg, opt = _config(), _adam()
    seeds, lrs = jnp.asarray([0, 0, 1]), jnp.asarray([1e-2, 1e3, 1e-2])
    grid = loop_lib.run_training(cfg, opt, _dataset(), loop_lib.Runs(seed=seeds, learning_rates=lrs),
                                 loop_lib.RunOptions(keep_last_finite=True, record=("loss",)))
    self.assertEqual(grid.steps_run, STEPS)
    np.testing.assert_array_equal(grid.diverged, [False, True, False])
    np.testing.assert_array_equal(grid.divergence_step[[0, 2]], [-1, -1])
    d = int(grid.divergence_step[1])
    self.assertGreater(d, 0)
    self.assertEqual(grid.stop_reason[0], loop_lib.STOP_COMPLETED)
    self.assertIn(grid.stop_reason[1], (loop_lib.STOP_NONFINITE, loop_lib.STOP_LOSS_GROWTH))
    losses = grid.records["loss"][:, 1]
    self.assertTrue(np.all(losses[:d] <= 3.0 * losses[0]))
    self.assertFalse(losses[d] <= 3.0 * losses[0])
    self.assertEqual(grid.final_loss[0], grid.records["loss"][-1, 0])
    for j in (0, 2):
      chex.assert_trees_all_equal(_member(grid.last_finite_state, j), _member(grid.state, j))
    kept = _member(grid.last_finite_state, 1)
    chex.assert_tree_all_finite(kept.params)
    self.assertEqual(int(kept.step), d - 1)
    if d == 1:  # the state before the first update
      init = init_lib.make_init(cfg, opt, grid=True)(seeds, lrs)
      chex.assert_trees_all_equal(kept.params, _member(init.params, 1))

  def test_stop_on_divergence_false_runs_every_step(self):
    cfg, opt = _config(), _adam()
    result = loop_lib.run_training(cfg, opt, _dataset(),
                                   options=loop_lib.RunOptions(state=init_lib.make_init(cfg, opt)(0, 1e3),
                                                               stop_on_divergence=False, record=("loss",)))
    self.assertTrue(result.diverged)
    self.assertEqual(result.steps_run, STEPS)
    chex.assert_shape(result.records["loss"], (STEPS,))

  def test_deterministic_for_a_seed(self):
    # Logged and recorded as test_steps_between_logs_compute_only_what_is_recorded's sparse run (its lean step).
    run = lambda seed: loop_lib.run_training(_config(), _adam(), _dataset(), loop_lib.Runs(seed=seed),
                                             loop_lib.RunOptions(log_every=15, record=("loss", "grad_norm")))
    a, b, c = run(3), run(3), run(4)
    self.assertEqual([r["loss"] for r in a.history], [r["loss"] for r in b.history])
    chex.assert_trees_all_equal(a.state.params, b.state.params)
    self.assertNotEqual(a.history[0]["loss"], c.history[0]["loss"])

  def test_fixed_batch_trains_on_batch_zero(self):
    cfg, opt = _config(), _adam()
    result = loop_lib.run_training(cfg, opt, _dataset(), loop_lib.Runs(seed=2),
                                   loop_lib.RunOptions(fixed_batch=True, record=("loss",)))
    step = step_lib.make_train_step(cfg, opt)
    state = init_lib.make_init(cfg, opt)(2, opt.learning_rate)
    for t in range(3):
      state, metrics = step(state, _dataset().batch(0, 2))
      self.assertEqual(float(metrics["loss"]), result.records["loss"][t])

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, "steps"):
      _adam(steps=0)
    with self.assertRaisesRegex(ValueError, "vocab_size"):
      loop_lib.run_training(_config(vocab_size=8), _adam(), _dataset())
    with self.assertRaisesRegex(TypeError, "runs must be a Runs"):
      loop_lib.run_training(_config(), _adam(), _dataset(), [0, 1])
    with self.assertRaisesRegex(ValueError, "initial_loss"):
      loop_lib.run_training(_config(), _adam(), _dataset(),
                            options=loop_lib.RunOptions(state=init_lib.make_init(_config(), _adam())(0, 1e-2)
                                                        .replace(step=jnp.int32(3))))
    with self.assertRaisesRegex(ValueError, "log_every"):
      loop_lib.RunOptions(log_every=0)
    with self.assertRaisesRegex(ValueError, "divergence_factor"):
      loop_lib.RunOptions(divergence_factor=float("nan"))
    with self.assertRaisesRegex(TypeError, "record must be"):
      loop_lib.RunOptions(record="loss")
    with self.assertRaisesRegex(TypeError, "callback must be callable"):
      loop_lib.RunOptions(callback=3)
    with self.assertRaisesRegex(TypeError, "state must be a TrainState"):
      loop_lib.RunOptions(state={"params": {}})
    with self.assertRaisesRegex(TypeError, "keep_last_finite"):
      loop_lib.RunOptions(keep_last_finite="yes")


class ScheduleTest(chex.TestCase):
  """The logged learning_rate is the rate actually applied: injected peak × warmup/cosine factor."""

  def test_warmup_cosine_closed_form(self):
    cfg = _config()
    expected = np.array([_cosine_factor(t) for t in range(STEPS)])
    self.assertEqual(_cosine_factor(0), 0.0)
    self.assertEqual(_cosine_factor(WARMUP), 1.0)
    np.testing.assert_allclose(_cosine_factor(STEPS), END)
    # The peak from the config, logged at every step (records) and at the logged steps (history). The runs keep their
    # last finite state: they run the undonated step that the diverging-with-warmup test and the last check compile.
    result = loop_lib.run_training(cfg, COSINE, _dataset(),
                                   options=loop_lib.RunOptions(log_every=7, record=("learning_rate",),
                                                               keep_last_finite=True))
    np.testing.assert_allclose(result.records["learning_rate"], 1e-2 * expected, rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose([r["learning_rate"] for r in result.history],
                               [1e-2 * expected[r["step"]] for r in result.history], rtol=1e-5, atol=1e-9)
    # A peak injected into the optimizer state (as a grid member's) is scaled by the same factor.
    injected = loop_lib.run_training(cfg, COSINE, _dataset(),
                                     options=loop_lib.RunOptions(state=init_lib.make_init(cfg, COSINE)(0, 3e-3),
                                                                 record=("learning_rate",), keep_last_finite=True))
    np.testing.assert_allclose(injected.records["learning_rate"], 3e-3 * expected, rtol=1e-5, atol=1e-9)
    # The config's own closed form agrees.
    np.testing.assert_allclose([float(COSINE.applied_learning_rate(1.0, t)) for t in range(STEPS)], expected,
                               rtol=1e-5, atol=1e-9)
    # The factor acts on the update, not only on the log: step 0 (rate 0) leaves the parameters unchanged.
    state = init_lib.make_init(cfg, COSINE)(0, 1e-2)
    new_state, _ = step_lib.make_train_step(cfg, COSINE)(state, _dataset().batch(0, 0))
    chex.assert_trees_all_equal(new_state.params, state.params)

  def test_constant_warmup_factor(self):
    opt = _adam(warmup_steps=4)
    np.testing.assert_allclose([float(opt.applied_learning_rate(2.0, t)) for t in range(7)],
                               [0.0, 0.5, 1.0, 1.5, 2.0, 2.0, 2.0], rtol=1e-6)
    self.assertEqual(_adam().applied_learning_rate(2.0, 5), 2.0)

  def test_default_warmup(self):
    self.assertEqual(_adam(steps=50, schedule="cosine").warmup, 5)
    self.assertEqual(_adam(steps=50).warmup, 0)
    self.assertIsNone(_adam().schedule_fn())
    with self.assertRaisesRegex(ValueError, "warmup_steps"):
      _adam(steps=5, warmup_steps=5)


if __name__ == "__main__":
  absltest.main()
