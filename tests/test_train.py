"""The training step and loop: loss, gradients, tracing, vmapping over learning rates, divergence, determinism."""

import functools
import math

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

from scaling import data as data_lib
from scaling import model as model_lib
from scaling import optim as optim_lib
from scaling import train as train_lib

T = 12


@functools.lru_cache(maxsize=None)
def _dataset(seed=0):
  return data_lib.make_dataset("recall", seq_len=T, batch_size=8, vocab_size=16, num_pairs=3, num_queries=3,
                               seed=seed)


@functools.lru_cache(maxsize=None)
def _config(**kw):
  base = dict(vocab_size=16, width=16, depth=2, num_heads=2, head_dim=8, max_len=T)
  base.update(kw)
  return model_lib.ModelConfig(**base)


@functools.lru_cache(maxsize=None)
def _adam(lr=1e-2):
  return optim_lib.make_optimizer("adam", lr, "sp", 16)


class LossTest(parameterized.TestCase):

  def test_weighted_cross_entropy_matches_log_softmax(self):
    k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
    logits = 3.0 * jax.random.normal(k1, (2, 5, 7))
    targets = jax.random.randint(k2, (2, 5), 0, 7)
    weights = jax.random.bernoulli(k3, 0.5, (2, 5)).astype(jnp.float32).at[0, 0].set(1.0)
    loss, acc = train_lib.weighted_cross_entropy(logits, targets, weights)
    lp = np.asarray(jax.nn.log_softmax(np.asarray(logits, np.float64)))
    nll = -np.take_along_axis(lp, np.asarray(targets)[..., None], -1)[..., 0]
    w = np.asarray(weights)
    np.testing.assert_allclose(loss, (nll * w).sum() / w.sum(), rtol=1e-5)
    hit = (np.asarray(logits).argmax(-1) == np.asarray(targets))
    np.testing.assert_allclose(acc, (hit * w).sum() / w.sum(), rtol=1e-6)

  def test_zero_weights_give_zero(self):
    loss, acc = train_lib.weighted_cross_entropy(jnp.ones((1, 3, 4)), jnp.zeros((1, 3), jnp.int32),
                                                 jnp.zeros((1, 3)))
    self.assertEqual(float(loss), 0.0)
    self.assertEqual(float(acc), 0.0)

  def test_check_divergence(self):
    self.assertEqual(train_lib.check_divergence(float("nan"), 2.0, 3.0), train_lib.STOP_NONFINITE)
    self.assertEqual(train_lib.check_divergence(float("inf"), 2.0, 3.0), train_lib.STOP_NONFINITE)
    self.assertEqual(train_lib.check_divergence(6.1, 2.0, 3.0), train_lib.STOP_LOSS_GROWTH)
    self.assertIsNone(train_lib.check_divergence(5.9, 2.0, 3.0))


class TrainStepTest(chex.TestCase):

  def setUp(self):
    super().setUp()
    chex.clear_trace_counter()

  def test_step_metrics_against_an_independent_gradient(self):
    cfg, opt = _config(), _adam()
    state = train_lib.init_train_state(jax.random.PRNGKey(0), cfg, opt)
    batch = _dataset().batch(0)
    new_state, metrics = train_lib.make_train_step(cfg, opt)(state, batch)
    model = model_lib.Transformer(cfg)

    def reference_loss(params):
      logits = model.apply({"params": params}, batch["inputs"])[0]
      nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), batch["targets"][..., None], -1)[..., 0]
      return jnp.sum(nll * batch["weights"]) / jnp.sum(batch["weights"])

    loss, grads = jax.jit(jax.value_and_grad(reference_loss))(state.params)
    np.testing.assert_allclose(metrics["loss"], loss, rtol=1e-5)
    sq = lambda tree: sum(float(np.sum(np.asarray(x, np.float64) ** 2)) for x in jax.tree.leaves(tree))
    np.testing.assert_allclose(metrics["grad_norm"], math.sqrt(sq(grads)), rtol=1e-4)
    np.testing.assert_allclose(metrics["layer_grad_norm"],
                               [math.sqrt(sq(grads[f"block_{i}"])) for i in range(cfg.depth)], rtol=1e-4)
    np.testing.assert_allclose(metrics["readout_grad_norm"], math.sqrt(sq(grads["readout"])), rtol=1e-4)
    np.testing.assert_allclose(metrics["learning_rate"], 1e-2, rtol=1e-6)
    for key in model_lib.LAYER_AUX_KEYS:
      chex.assert_shape(metrics[key], (cfg.depth,))
    self.assertEqual(int(new_state.step), 1)
    # One Adam step from zero moments moves every parameter with a non-zero gradient by about lr.
    moved = jax.tree.map(lambda a, b: jnp.max(jnp.abs(a - b)), new_state.params, state.params)
    np.testing.assert_allclose(moved["block_0"]["mlp"]["fc_in"]["kernel"], 1e-2, rtol=1e-3)

  def test_traces_once(self):
    cfg, opt = _config(), _adam()
    model = model_lib.Transformer(cfg)

    def step_fn(state, batch):
      return train_lib.train_step(state, batch, model=model, optimizer=opt)

    step = jax.jit(chex.assert_max_traces(step_fn, n=1))
    state = train_lib.init_train_state(jax.random.PRNGKey(0), cfg, opt)
    for i in range(4):
      state, metrics = step(state, _dataset().batch(i))
    chex.assert_tree_all_finite((state, metrics))
    self.assertEqual(int(state.step), 4)

  def test_vmap_over_learning_rates_equals_separate_runs(self):
    cfg = _config()
    lrs = (1e-2, 3e-2)
    shared = _adam(1.0)
    init = train_lib.init_train_state(jax.random.PRNGKey(1), cfg, shared)
    states = train_lib.stack_trees([train_lib.set_hyperparam(init, "learning_rate", lr) for lr in lrs])
    vstep = train_lib.make_train_step(cfg, shared, vmapped=True)
    # Separate runs: an optimizer built with 1e-2, and the same optimizer with its state set to 3e-2 (one compile).
    separate = [train_lib.init_train_state(jax.random.PRNGKey(1), cfg, _adam(lrs[0]))]
    separate.append(train_lib.set_hyperparam(separate[0], "learning_rate", lrs[1]))
    step = train_lib.make_train_step(cfg, _adam(lrs[0]))
    for i in range(3):
      batch = _dataset().batch(i)
      states, vmetrics = vstep(states, train_lib.stack_trees([batch, batch]))
      for j in range(2):
        separate[j], metrics = step(separate[j], batch)
        np.testing.assert_allclose(vmetrics["loss"][j], metrics["loss"], rtol=1e-5)
    for j in range(2):
      chex.assert_trees_all_close(jax.tree.map(lambda x, j=j: x[j], states.params), separate[j].params,
                                  rtol=1e-4, atol=1e-6)
    # The two learning rates really trained differently.
    diff = jax.tree.map(lambda x: jnp.max(jnp.abs(x[0] - x[1])), states.params)
    self.assertGreater(float(diff["readout"]["kernel"]), 1e-3)


class RunTrainingTest(parameterized.TestCase):

  def test_loss_decreases(self):
    result = train_lib.run_training(_config(), _adam(), _dataset(), steps=40, log_every=1)
    losses = [r["loss"] for r in result.history]
    self.assertLen(losses, 40)
    self.assertEqual(result.stop_reason, train_lib.STOP_COMPLETED)
    self.assertIsNone(result.divergence_step)
    self.assertLess(np.mean(losses[-5:]), 0.8 * losses[0])
    self.assertEqual(int(result.state.step), 40)
    evaluation = train_lib.evaluate(result.state.params, _config(), _dataset(), num_batches=2)
    self.assertLess(evaluation["loss"], 0.8 * losses[0])

  def test_log_every_and_callback(self):
    seen = []
    result = train_lib.run_training(_config(), _adam(), _dataset(), steps=7, log_every=3,
                                    callback=lambda step, m: seen.append((step, m["loss"])))
    self.assertEqual([s for s, _ in seen], [0, 3, 6])
    self.assertEqual([r["step"] for r in result.history], [0, 3, 6])
    self.assertEqual(result.steps_run, 7)
    for key in ("loss", "accuracy", "grad_norm", "layer_grad_norm", "attn_entropy", "attn_max_logit"):
      self.assertIn(key, result.history[0])
    self.assertLen(result.history[0]["attn_entropy"], 2)

  def test_divergence_is_detected(self):
    # A huge learning rate set in the optimizer state (reusing the compiled step of the other tests).
    state = train_lib.init_train_state(jax.random.PRNGKey(0), _config(), _adam())
    state = train_lib.set_hyperparam(state, "learning_rate", 1e3)
    result = train_lib.run_training(_config(), _adam(), _dataset(), steps=30, state=state)
    self.assertTrue(result.diverged)
    self.assertIn(result.stop_reason, (train_lib.STOP_NONFINITE, train_lib.STOP_LOSS_GROWTH))
    self.assertLess(result.divergence_step, 29)
    self.assertEqual(result.steps_run, result.divergence_step + 1)
    self.assertEqual(result.history[-1]["step"], result.divergence_step)
    bad = result.history[-1]["loss"]
    self.assertTrue(not math.isfinite(bad) or bad > 3.0 * result.initial_loss)
    self.assertGreater(result.divergence_step, 0)

  def test_deterministic_for_a_seed(self):
    run = lambda seed: train_lib.run_training(_config(), _adam(), _dataset(), steps=5, seed=seed)
    a, b, c = run(3), run(3), run(4)
    self.assertEqual([r["loss"] for r in a.history], [r["loss"] for r in b.history])
    chex.assert_trees_all_equal(a.state.params, b.state.params)
    self.assertNotEqual(a.history[0]["loss"], c.history[0]["loss"])

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, "steps"):
      train_lib.run_training(_config(), _adam(), _dataset(), steps=0)
    with self.assertRaisesRegex(ValueError, "vocab_size"):
      train_lib.run_training(_config(vocab_size=8), _adam(), _dataset(), steps=1)


if __name__ == "__main__":
  absltest.main()
