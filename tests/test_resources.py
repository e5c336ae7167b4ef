"""Memory estimates against the real arrays they size and against XLA's own buffer plan."""

import functools

import chex
import jax
import jax.numpy as jnp
from absl.testing import absltest
from absl.testing import parameterized

from scaling.attention import dense as dense_lib
from scaling.training.model import transformer as model_lib
from scaling.training.model.family import ModelFamily
from scaling.training.optimizer import OptimizerConfig
from scaling.training import resources
from scaling.studies import sweep_memory
from scaling.training.loop import initialization as init_lib
from scaling.training.loop import step as step_lib
from scaling.studies import sweep


def _model(width=32, depth=1, heads=2, vocab=40, max_len=16, **family):
  fam = ModelFamily(depth=depth, num_heads=heads, **family).with_base_width([width])
  return fam.model_config("sp", width, vocab_size=vocab, max_len=max_len)


def _xla_bytes(compiled) -> int:
  m = compiled.memory_analysis()
  return m.temp_size_in_bytes + m.argument_size_in_bytes + m.output_size_in_bytes


def _leaf_bytes(tree) -> int:
  return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree))


class SizesTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("default", {}),
      ("learned_positions_post_ln", dict(positions="learned", pre_ln=False)),
      ("qk_norm_gqa", dict(rule="qk_norm", num_kv_heads=1)),
      ("qk_layer_norm_no_gains", dict(rule="qk_norm", qk_norm="layer", qk_norm_gains=False, depth=2)),
      ("wide_mlp", dict(mlp_ratio=2.5, depth=3)),
  )
  def test_param_count_matches_the_initialized_tree(self, family):
    config = _model(**family)
    params = jax.eval_shape(functools.partial(model_lib.init_params, config=config), jax.random.PRNGKey(0))
    real = sum(x.size for x in jax.tree.leaves(params))
    self.assertEqual(resources.param_count(config), real)
    self.assertEqual(resources.param_count(config) * resources.F32, _leaf_bytes(params))  # float32 parameters

  @parameterized.parameters(("adam", 0.0), ("adamw", 0.0), ("sgd", 0.9), ("sgd", 0.0), ("adam_atan2", 0.0))
  def test_optimizer_state_matches_the_real_state(self, optimizer, momentum):
    config = _model()
    opt = OptimizerConfig(optimizer=optimizer, momentum=momentum, steps=4,
                                weight_decay=0.1 if optimizer == "adamw" else 0.0)
    state = jax.eval_shape(init_lib.make_init(config, opt), jnp.zeros((), jnp.int32), jnp.zeros((), jnp.float32))
    p = resources.param_count(config)
    estimate = resources.optimizer_state_count(p, optimizer, momentum) * resources.F32
    real = _leaf_bytes(state.opt_state)
    # The real state also holds a float32 scalar per parameter leaf (LR multipliers) and the injected rate.
    leaves = len(jax.tree.leaves(state.params))
    self.assertBetween(real - estimate, 0, 8 * (leaves + 4))

  @parameterized.parameters((1, 1, 8, 8), (2, 3, 16, 8), (3, 2, 5, 7))
  def test_dense_logits_bytes_are_those_of_the_logits(self, b, n, t, s):
    q = jnp.ones((b, t, n, 4))
    k = v = jnp.ones((b, s, n, 4))
    _, logits, weights, _ = dense_lib.attention_with_aux(q, k, v)
    self.assertEqual(resources.logits_bytes(b, n, t, s), logits.astype(jnp.float32).nbytes)
    self.assertEqual(resources.attention_bytes(b, n, t, s, "dense", 4), weights.astype(jnp.float32).nbytes)
    self.assertEqual(resources.attention_bytes(b, n, t, s, "blockwise", 4), b * n * t * min(4, s) * 4)

  def test_formatting(self):
    self.assertEqual(resources.gib(2**30), "1 GiB")
    self.assertEqual(resources.gib(3 * 2**40), "3 TiB")
    self.assertEqual(resources.gib(2**60), "1 EiB")


class AgainstXlaTest(parameterized.TestCase):
  """Totals within a factor of two of the bytes XLA plans (arguments, outputs and temporaries)."""

  @parameterized.named_parameters(
      ("logits_dominate", dict(d_k=(16,), seq_len=256, batch=1, num_heads=1, num_seeds=2, rules=("sqrt", "none"))),
      ("qkv_dominate", dict(d_k=(256,), seq_len=32, batch=2, num_heads=2, num_seeds=2, rules=("qk_norm", "linear"))),
      ("blockwise", dict(d_k=(16,), seq_len=256, batch=1, num_heads=1, num_seeds=1, rules=("sqrt",),
                         attention="blockwise", block_size=32)),
  )
  def test_sweep(self, kwargs):
    config = sweep.SweepConfig(**kwargs)
    planned = _xla_bytes(sweep.make_shape_fn(config, config.d_k[0]).lower(jax.random.key(0)).compile())
    estimate = sweep_memory.sweep_estimate(config).total
    self.assertBetween(estimate / planned, 0.5, 2.0, (estimate, planned))

  @parameterized.named_parameters(
      ("attention_dominates_grid", dict(width=32, t=128, b=4), 2, "dense"),
      ("parameters_dominate_blockwise", dict(width=256, t=16, b=2), 1, "blockwise"),
  )
  def test_training_step(self, sizes, members, attention):
    t, b = sizes["t"], sizes["b"]
    config = _model(width=sizes["width"], depth=1, heads=2, max_len=t, attention=attention, block_size=16)
    opt = OptimizerConfig(steps=4)
    state = jax.eval_shape(init_lib.make_init(config, opt, grid=True), jnp.zeros((members,), jnp.int32),
                           jnp.zeros((members,), jnp.float32))
    batch = {name: jax.ShapeDtypeStruct((members, b, t), jnp.float32 if name == "weights" else jnp.int32)
             for name in ("inputs", "targets", "weights")}
    planned = _xla_bytes(step_lib.make_train_step(config, opt, grid=True).lower(state, batch).compile())
    estimate = resources.training_program(config, optimizer="adam", batch_size=b, seq_len=t, members=members)
    self.assertBetween(estimate.total / planned, 0.5, 2.0, (estimate.total, planned))
    # The parameter part is exactly the parameters' bytes per copy.
    self.assertEqual(estimate.bytes_of("parameters"), 2 * _leaf_bytes(state.params))


class CheckTest(absltest.TestCase):

  def test_refusal_names_the_options_of_the_largest_part(self):
    estimate = sweep_memory.sweep_estimate(sweep.SweepConfig(d_k=(1024,), seq_len=2_000_000))
    with self.assertRaises(resources.ResourceError) as ctx:
      resources.check(estimate, {"seq_len": 2_000_000, "d_k": (1024,), "batch": 4}, available=2**34)
    text = str(ctx.exception)
    self.assertNotIn("\n", text)
    self.assertTrue(text.startswith("seq_len=2000000 batch=4 need"), text)
    self.assertIn("dense attention logits", text)
    self.assertIn("16 GiB available", text)
    self.assertTrue(text.endswith("; use attention='blockwise', a smaller seq_len or batch, or fewer num_seeds or "
                                  "rules"), text)
    self.assertEqual(ctx.exception.fields, ("seq_len", "batch"))  # the hint's options among those given
    self.assertIsInstance(ctx.exception, ValueError)

  def test_fits(self):
    estimate = sweep_memory.sweep_estimate(sweep.SweepConfig(d_k=(16,), seq_len=8))
    resources.check(estimate, {}, available=estimate.total)  # equal is enough

  def test_largest_program_is_taken(self):
    estimate = sweep_memory.sweep_estimate(sweep.SweepConfig(d_k=(16, 512, 64), seq_len=8))
    self.assertEqual(estimate.where, "at d_k=512")
    chex.assert_scalar_positive(estimate.total)

  def test_device_memory_from_memory_stats(self):
    fake = lambda stats: type("Device", (), {"memory_stats": lambda self: stats})()
    self.assertEqual(resources.device_available_bytes(fake({"bytes_limit": 100, "bytes_in_use": 30})), 70)
    self.assertIsNone(resources.device_available_bytes(fake(None)))  # CPU devices have no statistics
    self.assertIsNone(resources.device_available_bytes(fake({"bytes_in_use": 30})))

  def test_available_memory_is_measured(self):
    available, where = resources.available_bytes()
    self.assertGreater(available, 0)
    self.assertTrue(where.startswith("on "), where)
    with open("/proc/meminfo") as f:
      total = int(next(line for line in f if line.startswith("MemTotal:")).split()[1]) * 1024
    self.assertBetween(resources.host_available_bytes(), 1, total)


if __name__ == "__main__":
  absltest.main()
