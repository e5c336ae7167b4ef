"""Blocks run as one ``jax.lax.scan`` (``scan_layers``) against the same model unrolled: loss, gradients, per-block
metrics and activation gradients agree (depths 1–4, SP, μP with depth-μP, u-μP with its per-block τ); a rule that is
only a logit factor is one program for every such rule, and computes what the rule's constant computes."""

import dataclasses
import functools
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

from scaling.training.data.config import DataConfig
from scaling.training.model import transformer as model_lib
from scaling.training.model.config import ModelConfig
from scaling.training.model import scales as model_scales_lib
from scaling.training.model import scanned_blocks as scanned_blocks_lib
from scaling.training.model import init_rms as init_rms_lib
from scaling.training.model import config as model_config_lib
from scaling.training.optimizer import OptimizerConfig
from scaling.mup import schemes as param_lib
from scaling.attention import rules
from scaling.training.loop import initialization as init_lib
from scaling.training.loop import run as loop_lib
from scaling.training.loop import programs as programs_lib
from scaling.training.loop import step as step_lib
from scaling.mup import unit_scaling as unit

V = 29


def _config(depth: int, parametrization: str, **kw) -> ModelConfig:
  options = dict(base_width=16, base_head_dim=8, depth=depth)
  if parametrization == "mup":
    options.update(depth_alpha=0.5, base_depth=1)
  for name in ("umup_scales",):
    if name in kw:
      options[name] = kw.pop(name)
  p = param_lib.get_parametrization(parametrization, **options)
  fields = dict(vocab_size=V, width=32, depth=depth, num_heads=2, head_dim=8, max_len=16, parametrization=p,
                scan_layers=True)
  fields.update(kw)
  return ModelConfig(**fields)


# One batch of two token sequences for every test, drawn by NumPy (an eager jax.random draw compiles a program).
TOKENS = np.random.default_rng(1).integers(0, V, (2, 12), dtype=np.int32)


@functools.cache
def _params(config: ModelConfig):
  """init_params of the config, jitted (one program, where op by op compiles every new shape), once per config."""
  return jax.jit(model_lib.init_params, static_argnums=1)(jax.random.PRNGKey(0), config)


def _loss_and_aux(params, config, tokens):
  logits, aux = model_lib.apply_with_aux(model_lib.Transformer(config), params, tokens)
  log_p = jax.nn.log_softmax(logits[:, :-1], -1)
  loss = -jnp.mean(jnp.take_along_axis(log_p, tokens[:, 1:, None], -1))
  return loss, aux


def _assert_close(test, actual, expected, rtol=1e-6):
  """Every leaf within rtol of the expected leaf's largest magnitude (float32 sums in another order)."""
  for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected)):
    e = np.asarray(e, np.float64)
    scale = max(float(np.nanmax(np.abs(e))), 1e-30) if e.size else 1.0
    np.testing.assert_allclose(np.asarray(a, np.float64), e, rtol=0, atol=4 * rtol * scale)


class ScanLayersTest(parameterized.TestCase):

  # Depth 3 runs the same code as any deeper model (one scan over all blocks, each block's τ and depth-μP multiplier
  # a value; a first, a middle and a last block, of three τ under u-μP). At depth 1 every parametrization runs the
  # one plain block (nothing to stack): SP's case stands for all.
  @parameterized.parameters(
      (1, "sp"), (2, "sp"),
      (2, "mup"), (3, "mup"),
      (2, "umup"), (3, "umup"))
  def test_scanned_equals_unrolled(self, depth, parametrization):
    config = _config(depth, parametrization)
    unrolled = dataclasses.replace(config, scan_layers=False)
    params = _params(unrolled)
    chex.assert_trees_all_equal_structs(
        params, jax.eval_shape(lambda: model_lib.init_params(jax.random.PRNGKey(0), config)))
    tokens = TOKENS
    grad = jax.jit(jax.value_and_grad(_loss_and_aux, has_aux=True), static_argnums=1)
    (loss_s, aux_s), grads_s = grad(params, config, tokens)
    (loss_u, aux_u), grads_u = grad(params, unrolled, tokens)
    chex.assert_tree_all_finite((loss_s, grads_s))
    np.testing.assert_allclose(float(loss_s), float(loss_u), rtol=1e-6)
    _assert_close(self, grads_s, grads_u)
    chex.assert_shape(aux_s["layers"]["attn_entropy"], (depth,))
    _assert_close(self, aux_s, aux_u)

  def test_umup_taus_differ_per_block(self):
    """The scanned τ are the blocks' own (u-μP's τ rule gives every block another τ)."""
    config = _config(4, "umup")
    scales = model_scales_lib.unit_scales(config, 2, 12)
    taus = [b.tau_attn for b in scales.blocks]
    self.assertGreater(len(set(taus)), 1)
    self.assertEqual(scanned_blocks_lib.scan_groups(scales.blocks), [[0, 1, 2, 3]])

  def test_scan_groups_split_where_scales_differ(self):
    config = _config(3, "umup")
    blocks = list(model_scales_lib.unit_scales(config, 2, 12).blocks)
    blocks[1] = blocks[1]._replace(ln_attn=blocks[1].ln_attn * 2)
    self.assertEqual(scanned_blocks_lib.scan_groups(blocks), [[0], [1], [2]])
    self.assertEqual(scanned_blocks_lib.scan_groups([None] * 3), [[0, 1, 2]])
    self.assertEqual(scanned_blocks_lib.scan_groups([blocks[0], blocks[0], blocks[1]]), [[0, 1], [2]])

  def test_umup_covariance_scales(self):
    config = _config(2, "umup", umup_scales="covariance")
    unrolled = dataclasses.replace(config, scan_layers=False)
    params = _params(unrolled)
    tokens = TOKENS
    grad = jax.jit(jax.grad(lambda p, c: _loss_and_aux(p, c, tokens)[0]), static_argnums=1)
    _assert_close(self, grad(params, config), grad(params, unrolled))

  def test_activation_gradients_and_rms_at_init(self):
    """Probed activations and the gradients arriving at them (the perturbations collection) come out per block."""
    config = _config(2, "umup")  # two blocks of different τ
    scanned = init_rms_lib.rms_at_init(config, 12)
    unrolled = init_rms_lib.rms_at_init(dataclasses.replace(config, scan_layers=False), 12)
    self.assertEqual(scanned.keys(), unrolled.keys())
    for name in unrolled:
      np.testing.assert_allclose(scanned[name], unrolled[name], rtol=1e-5, err_msg=name)

  # SP trains as μP does with every multiplier 1 (the same stacked optimizer, metrics and traced logit factor).
  @parameterized.parameters((3, "mup"), (2, "umup"))
  def test_training_runs_agree(self, depth, parametrization):
    """Trained stacked (the scanned model's layout) and unrolled from the same init: same parameters and metrics."""
    data = DataConfig(seq_len=12, batch_size=2).make(0)
    config = dataclasses.replace(_config(depth, parametrization), vocab_size=data.vocab_size)
    opt = OptimizerConfig(steps=3, learning_rate=3e-3)
    runs = [loop_lib.run_training(c, opt, data, loop_lib.Runs(seed=[0, 1], learning_rates=[1e-3, 3e-3]),
                                  loop_lib.RunOptions(log_every=1))
            for c in (config, dataclasses.replace(config, scan_layers=False))]
    self.assertTrue(scanned_blocks_lib.is_stacked(runs[0].state.params, depth))
    self.assertFalse(scanned_blocks_lib.is_stacked(runs[1].state.params, depth))
    unstacked = jax.vmap(lambda p: scanned_blocks_lib.unstack_blocks(p, depth))(runs[0].state.params)
    chex.assert_trees_all_equal_structs(unstacked, runs[1].state.params)
    _assert_close(self, unstacked, runs[1].state.params, rtol=1e-5)
    for scanned, unrolled in zip(runs[0].history, runs[1].history):
      self.assertEqual(scanned.keys(), unrolled.keys())
      for key in ("loss", "grad_norm", "layer_grad_norm", "update_norm", "attn_entropy"):
        np.testing.assert_allclose(scanned[key], unrolled[key], rtol=1e-5, err_msg=key)

  def test_stack_blocks_round_trip(self):
    config = _config(4, "sp")
    params = _params(config)
    stacked = scanned_blocks_lib.stack_blocks(params, 4)
    self.assertEqual(sorted(stacked), sorted(k for k in params if k not in ("block_1", "block_2", "block_3")))
    chex.assert_shape(stacked["block_0"]["attn"]["query"]["kernel"],
                      (4, *params["block_0"]["attn"]["query"]["kernel"].shape))
    chex.assert_trees_all_equal(scanned_blocks_lib.unstack_blocks(stacked, 4), params)
    chex.assert_trees_all_equal(scanned_blocks_lib.stack_blocks(stacked, 4), stacked)
    tokens = TOKENS
    model = model_lib.Transformer(config)
    np.testing.assert_allclose(model.apply({"params": stacked}, tokens), model.apply({"params": params}, tokens),
                               rtol=1e-6, atol=1e-6)

  @parameterized.parameters(([[0], [1, 2], [3]],), ([[0, 1], [2, 3]],))
  def test_stacked_runs_split(self, groups):
    """Stacked parameters whose blocks run as several scans (scales that differ) give each run its slice."""
    config = _config(4, "umup")
    params = _params(config)  # one init for both splits
    tokens = TOKENS
    model = model_lib.Transformer(config)
    expected = model.apply({"params": params}, tokens)
    with mock.patch.object(scanned_blocks_lib, "scan_groups", lambda scales: groups):
      got = model.apply({"params": scanned_blocks_lib.stack_blocks(params, 4)}, tokens)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)

  def test_one_scan_whatever_the_depth(self):
    """The scanned model's whole training step (forward, backward, optimizer, metrics) holds one block, in a scan: as
    many matmuls and about as many operations at depth 4 as at depth 2; the unrolled step's grow with depth."""
    def ops(config):
      opt = OptimizerConfig(steps=2)
      program = programs_lib.as_program(config, opt)
      state = jax.eval_shape(lambda: program.with_constants(program.init_state(0, 1e-3)))
      batch = {k: jax.ShapeDtypeStruct((2, 12), d) for k, d in
               (("inputs", jnp.int32), ("targets", jnp.int32), ("weights", jnp.float32))}
      text = str(jax.make_jaxpr(program.step)(state, batch))
      return len(text.splitlines()), text.count("dot_general"), text.count("scan[")
    scanned = [ops(dataclasses.replace(_config(d, "mup"), scan_layers=True)) for d in (2, 4)]
    unrolled = [ops(dataclasses.replace(_config(d, "mup"), scan_layers=False)) for d in (2, 4)]
    self.assertEqual(scanned[0][1], scanned[1][1])
    self.assertGreater(scanned[0][2], 0)
    self.assertGreater(unrolled[1][1], unrolled[0][1])
    # An unrolled block adds ~1,000 lines to the ~500 of the rest of the step (embedding, readout, loss), so from
    # depth 2 to 4 the step grows ~1.8x; the scanned step adds a few lines per block (its per-block metrics), ~2%.
    self.assertLess(scanned[1][0], 1.1 * scanned[0][0])
    self.assertGreater(unrolled[1][0], 1.5 * unrolled[0][0])

  def test_bad_scan_layers(self):
    with self.assertRaisesRegex(TypeError, "scan_layers"):
      _config(2, "sp", scan_layers="yes")


class LogitMultiplierTest(parameterized.TestCase):

  @parameterized.parameters(("none", 8.0), ("sqrt", 8 ** 0.5), ("linear", None), ("temperature", 8.0 / 2.0))
  def test_alpha_of_a_logit_factor(self, name, alpha):
    rule = rules.get_rule(name, tau=2.0) if name == "temperature" else rules.get_rule(name)
    config = _config(1, "sp", rule=rule, scan_layers=False)
    got = model_config_lib.logit_multiplier(config)
    expected = rule.logit_scale(8) * 8 if alpha is None else alpha
    self.assertAlmostEqual(got, expected, places=6)
    state = init_lib.init_train_state(0, config, OptimizerConfig(steps=1))
    self.assertAlmostEqual(float(state.attn_mult), expected, places=6)

  @parameterized.parameters("qk_norm", "post_softmax")
  def test_no_alpha_for_rules_that_change_the_computation(self, name):
    config = _config(1, "sp", rule=rules.get_rule(name), scan_layers=False)
    self.assertIsNone(model_config_lib.logit_multiplier(config))
    self.assertIsNone(init_lib.init_train_state(0, config, OptimizerConfig(steps=1)).attn_mult)

  def test_no_alpha_under_umup_or_blockwise(self):
    self.assertIsNone(model_config_lib.logit_multiplier(_config(1, "umup")))
    self.assertIsNone(model_config_lib.logit_multiplier(_config(1, "sp", rule=rules.get_rule("sqrt"),
                                                         attention="blockwise")))

  @parameterized.parameters("none", "sqrt", "linear")
  def test_traced_alpha_computes_the_rule(self, name):
    """The model with the rule's α given as a value equals the model with the rule's constant."""
    config = _config(2, "sp", rule=rules.get_rule(name), scan_layers=False)
    params = _params(_config(2, "sp", scan_layers=False))  # these rules add no parameters: one init for all
    tokens = TOKENS
    model = model_lib.Transformer(config)
    alpha = jnp.asarray(model_config_lib.logit_multiplier(config), jnp.float32)
    traced = jax.jit(lambda a: model.clone(attn_mult=a).apply({"params": params}, tokens))(alpha)
    constant = model.apply({"params": params}, tokens)
    np.testing.assert_allclose(traced, constant, rtol=1e-5, atol=1e-6)

  def test_rules_share_one_program(self):
    """Grids that differ only in such a rule lower to the same program (the persistent cache serves the rest)."""
    def lowered(name):
      config = _config(2, "sp", rule=rules.get_rule(name), scan_layers=False)
      opt = OptimizerConfig(steps=2)
      state = jax.eval_shape(init_lib.make_init(config, opt, grid=True), jnp.arange(2), jnp.ones(2))
      batch = {k: jax.ShapeDtypeStruct((2, 2, 12), d) for k, d in
               (("inputs", jnp.int32), ("targets", jnp.int32), ("weights", jnp.float32))}
      return step_lib.make_train_step(config, opt, grid=True).lower(state, batch).as_text()
    self.assertEqual(lowered("none"), lowered("sqrt"))
    self.assertEqual(lowered("sqrt"), lowered("linear"))


if __name__ == "__main__":
  absltest.main()
