"""Depth scaling (depth-μP / CompleteP): the formulas against the paper's table, α = 0 = the width-only model."""

import dataclasses
import functools
import itertools
import math

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

import scaling
from scaling.training.model import transformer as model_lib
from scaling.training.model.family import ModelFamily
from scaling.training.model.config import ModelConfig
from scaling.training.optimizer import OptimizerConfig
from scaling.mup import schemes as P
from scaling.mup import shapes as shapes_lib
from scaling.training.loop import initialization as init_lib
from scaling.training.loop import step as step_lib

# ---------------------------------------------------------------------------------------------------------------
# CompleteP (Dey et al. 2025, "Don't be lazy: CompleteP enables compute-efficient deep transformers", Table 1;
# the completep branch of EleutherAI/nanoGPT-mup), written here independently of the module. With
# m_L = L / L_base and α ∈ [0.5, 1] (α = 0.5 is depth-μP, Yang et al. 2023; Bordelon et al. 2023):
#
#   residual branch multiplier              m_L^-α
#   hidden weights (in the blocks)          Adam LR × m_L^(α-1),  Adam ε × m_L^-α   (on top of μP's width rules)
#   LN gains and biases in the blocks       Adam LR × m_L^(α-1),  Adam ε × m_L^-α
#   embedding, unembedding, final LN        no depth factor
#   every Adam ε (μP)                       × 1/m
#   init variances and forward multipliers  no depth factor
#
# SGD (derived, not in the table): an SGD step on an in-block matrix changes its branch's output by
# m_L^-α · C · m_L^-α (the branch multiplier enters the forward and the gradient); every branch must move by
# Θ(1/L), so C ∝ m_L^(2α-1) (α = 1/2: constant, as depth-μP prescribes for SGD).
# ---------------------------------------------------------------------------------------------------------------
_IN_BLOCK = {"hidden": True, "attn_q": True, "attn_k": True, "attn_v": True, "attn_o": True, "bias": True,
             "norm": True, "embedding": False, "input": False, "readout": False, "final_norm": False, "final_bias": False,
             "fixed": False}


def _completep(kind, alpha, depth, base_depth, m):
  """(branch multiplier, Adam LR factor, SGD LR factor, Adam ε factor) of CompleteP's Table 1 under μP."""
  m_l = depth / base_depth
  if not _IN_BLOCK[kind]:
    return m_l**-alpha, 1.0, 1.0, 1.0 / m
  return m_l**-alpha, m_l**(alpha - 1), m_l**(2 * alpha - 1), m_l**-alpha / m


def _fans(kind, width):
  if kind in ("bias", "norm", "final_norm", "final_bias"):
    return 1, width
  if kind == "embedding":
    return 100, width
  if kind == "input":
    return 3, width
  if kind == "fixed":
    return 7, 3
  if kind == "readout":
    return width, 100
  return width, 4 * width


class TableTest(parameterized.TestCase):

  @parameterized.parameters(*itertools.product((0.5, 0.75, 1.0), ((2, 1), (8, 2), (3, 12)), ("sp", "ntk", "mup")))
  def test_against_completep(self, alpha, depths, scheme):
    depth, base_depth = depths
    width, base_width = 256, 64
    flat = P.get_parametrization(scheme, base_width=base_width)
    deep = P.get_parametrization(scheme, base_width=base_width, depth_alpha=alpha, base_depth=base_depth,
                                 depth=depth)
    for kind in P.LAYER_KINDS:
      fan_in, fan_out = _fans(kind, width)
      branch, adam, sgd, eps = _completep(kind, alpha, depth, base_depth, width / base_width)
      want_width, got = flat.layer(kind, fan_in, fan_out, width), deep.layer(kind, fan_in, fan_out, width)
      msg = f"{scheme} α={alpha} L={depth} L_base={base_depth} {kind}"
      self.assertAlmostEqual(deep.residual_multiplier(), branch, places=12, msg=msg)
      self.assertEqual((got.init_std, got.multiplier, got.init_mean),
                       (want_width.init_std, want_width.multiplier, want_width.init_mean), msg=msg)
      self.assertAlmostEqual(got.lr_adam / want_width.lr_adam, adam, places=12, msg=msg)
      self.assertAlmostEqual(got.lr_sgd / want_width.lr_sgd, sgd, places=12, msg=msg)
      width_eps = 1.0 / (width / base_width) if scheme == "mup" else 1.0  # CompleteP's 1/m is μP's
      self.assertAlmostEqual(deep.eps_multiplier(kind, width), eps * (width / base_width) * width_eps, places=12,
                             msg=msg)

  def test_complete_p_numbers(self):
    # CompleteP (α = 1) at four times the base depth: branches × 1/4, Adam LRs unchanged, in-block ε / 4 (and / m).
    p = P.get_parametrization("mup", base_width=32, depth_alpha=1.0, base_depth=2, depth=8)
    self.assertEqual(p.residual_multiplier(), 0.25)
    self.assertEqual(p.layer("hidden", 128, 512, 128).lr_adam, 0.25)  # μP's 1/m only
    self.assertEqual(p.eps_multiplier("hidden", 128), 1 / 16)
    self.assertEqual(p.eps_multiplier("readout", 128), 1 / 4)
    # depth-μP (α = 1/2) at 4× depth: branches × 1/2, in-block Adam LRs × 1/2, SGD LRs unchanged.
    q = P.get_parametrization("sp", depth_alpha=0.5, base_depth=2, depth=8)
    self.assertEqual(q.residual_multiplier(), 0.5)
    self.assertEqual(q.layer("norm", 1, 64, 64).lr_adam, 0.5)
    self.assertEqual(q.layer("norm", 1, 64, 64).lr_sgd, 1.0)
    self.assertEqual(q.layer("final_norm", 1, 64, 64).lr_adam, 1.0)

  def test_alpha_zero_changes_nothing(self):
    for scheme in ("sp", "ntk", "mup"):
      flat = P.get_parametrization(scheme, base_width=16)
      off = P.get_parametrization(scheme, base_width=16, depth_alpha=0.0, base_depth=3, depth=24)
      self.assertEqual(off.residual_multiplier(), 1.0)
      for kind in P.LAYER_KINDS:
        self.assertEqual(off.layer(kind, *_fans(kind, 64), 64), flat.layer(kind, *_fans(kind, 64), 64))
        self.assertEqual(off.eps_multiplier(kind, 64), flat.eps_multiplier(kind, 64))

  @parameterized.parameters(0.3, -0.5, 1.5, float("nan"), True)
  def test_bad_alpha(self, alpha):
    with self.assertRaisesRegex(ValueError, "depth_alpha must be 0"):
      P.get_parametrization("mup", depth_alpha=alpha)
    with self.assertRaisesRegex(ValueError, "depth_alpha"):
      ModelFamily(depth_alpha=alpha)

  def test_umup_rejects_alpha(self):
    with self.assertRaisesRegex(ValueError, "τ rule"):
      P.get_parametrization("umup", depth_alpha=1.0)


_V, _T, _B = 16, 8, 2


def _batch(seed):
  key = jax.random.PRNGKey(seed)
  tokens = jax.random.randint(key, (_B, _T + 1), 0, _V)
  return {"inputs": tokens[:, :-1], "targets": tokens[:, 1:], "weights": jnp.ones((_B, _T), jnp.float32)}


def _train(cfg, opt, steps=3):
  state = init_lib.init_train_state(0, cfg, opt)
  step = step_lib.make_train_step(cfg, opt)
  losses = []
  for i in range(steps):
    state, metrics = step(state, _batch(i))
    losses.append(metrics["loss"])
  return state.params, jnp.stack(losses)


class AlphaZeroTest(parameterized.TestCase):
  """α = 0 reproduces the width-only model bit for bit: params and losses of a few Adam/AdamW steps."""

  @parameterized.parameters(("mup", "adamw"), ("sp", "sgd"))
  def test_training_is_bit_identical(self, scheme, optimizer):
    base = ModelConfig(vocab_size=_V, width=32, depth=2, num_heads=2, head_dim=16, max_len=_T,
                                 parametrization=P.get_parametrization(scheme, base_width=16, base_head_dim=8))
    family = ModelFamily(depth=2, num_heads=2, base_width=16, depth_alpha=0.0, base_depth=1)
    off = family.model_config(scheme, 32, vocab_size=_V, max_len=_T)
    self.assertNotEqual(off.parametrization.depth, None)
    opt = OptimizerConfig(optimizer=optimizer, learning_rate=1e-2, steps=3,
                                weight_decay=0.1 if optimizer == "adamw" else 0.0)
    params_a, losses_a = _train(base, opt)
    params_b, losses_b = _train(off, opt)
    chex.assert_trees_all_equal(losses_a, losses_b)
    chex.assert_trees_all_equal(params_a, params_b)


@functools.partial(jax.jit, static_argnums=0)
def _forward(cfg, params, tokens):
  # One compiled forward per model: the flat model runs twice (scaled and unscaled kernels) in the same program.
  return model_lib.Transformer(cfg).apply({"params": params}, tokens)


class ModelTest(parameterized.TestCase):

  # m_L = 2, 4 and 2 (a base depth of 2 and of 1; pre- and post-LN): the claim holds at any m_L != 1, and the two
  # pre-LN models of depth 4 share their flat reference.
  @parameterized.parameters((1.0, 4, 2, True), (0.5, 4, 1, True), (1.0, 2, 1, False))
  def test_branch_multiplier_in_the_forward(self, alpha, depth, base_depth, pre_ln):
    # Independent reference: a branch's output is linear in its last kernel (attn/out, mlp/fc_out; no biases), so
    # the depth-scaled model equals the unscaled model with those kernels multiplied by m_L^-α.
    mup = P.get_parametrization("mup", base_width=16, base_head_dim=8)
    flat = ModelConfig(vocab_size=_V, width=32, depth=depth, num_heads=2, head_dim=16, max_len=_T,
                                 parametrization=mup, pre_ln=pre_ln)
    deep = dataclasses.replace(flat, parametrization=dataclasses.replace(mup, depth_alpha=alpha,
                                                                         base_depth=base_depth))
    params = model_lib.init_params(jax.random.PRNGKey(1), deep)
    s = (depth / base_depth) ** -alpha
    scaled = jax.tree_util.tree_map_with_path(
        lambda path, x: x * s if shapes_lib.path_names(path)[-2:] in (("out", "kernel"), ("fc_out", "kernel")) else x,
        params)
    tokens = _batch(0)["inputs"]
    got = _forward(deep, params, tokens)
    want = _forward(flat, scaled, tokens)
    chex.assert_trees_all_close(got, want, rtol=2e-5, atol=2e-5)
    self.assertGreater(float(jnp.max(jnp.abs(got - _forward(flat, params, tokens)))), 1e-3)

  def test_family_flags(self):
    family = ModelFamily(depth=8, base_width=32, depth_alpha=1.0, base_depth=2)
    cfg = family.model_config("mup", 64, vocab_size=_V, max_len=_T)
    self.assertEqual((cfg.parametrization.depth_alpha, cfg.parametrization.base_depth, cfg.parametrization.depth),
                     (1.0, 2, 8))
    self.assertEqual(cfg.parametrization.residual_multiplier(), 0.25)
    default = ModelFamily(depth=8, base_width=32, depth_alpha=0.5).model_config("mup", 64, vocab_size=_V,
                                                                                          max_len=_T)
    self.assertEqual(default.parametrization.residual_multiplier(), 1.0)  # base depth = depth
    self.assertEqual(ModelFamily(depth=8).with_base_depth([4, 8]).base_depth, 4)


class EpsScalingTest(parameterized.TestCase):

  def test_first_adam_step(self):
    # First Adam step: m̂ = g, v̂ = g², so the update is -lr · C · g / (|g| + ε·f) with f the ε factor of the
    # parameter (written out: CompleteP with m = 4, m_L = 4, α = 1: 1/16 in the blocks, 1/4 outside).
    p = P.get_parametrization("mup", base_width=8, depth_alpha=1.0, base_depth=2, depth=8)
    kinds = {"embed": "embedding", "w": "hidden", "gain": "norm", "final": "final_norm", "out": "readout"}
    shapes = {"embed": (5, 32), "w": (32, 64), "gain": (32,), "final": (32,), "out": (32, 5)}
    factors = {"embed": 1 / 4, "w": 1 / 16, "gain": 1 / 16, "final": 1 / 4, "out": 1 / 4}
    lr_mult = {"embed": 1.0, "w": 1 / 4, "gain": 1.0, "final": 1.0, "out": 1.0}
    keys = dict(zip(shapes, jax.random.split(jax.random.PRNGKey(0), len(shapes))))
    params = {k: jnp.zeros(s) for k, s in shapes.items()}
    grads = {k: 0.3 * jax.random.normal(keys[k], s) for k, s in shapes.items()}
    eps, lr = 0.5, 0.1
    for scaled in ("none", "mup"):
      roles = scaling.mup.roles.from_kinds(params, kinds, p.width_mult(32))
      opt = scaling.parametrize(roles, p, forward="model").optimizer("adam", lr, eps=eps, eps_scaling=scaled)
      # One program for the first step (eager, the update's many small ops on five shapes each compile their own).
      updates = jax.jit(lambda g, q, opt=opt: opt.update(g, opt.init(q), q)[0])(grads, params)
      for k, g in grads.items():
        g = np.asarray(g, np.float64)
        f = factors[k] if scaled == "mup" else 1.0
        want = -lr * lr_mult[k] * g / (np.abs(g) + eps * f)
        np.testing.assert_allclose(np.asarray(updates[k]), want, rtol=1e-5, err_msg=f"{k} scaled={scaled}")

  def test_config_builds_it(self):
    p = P.get_parametrization("mup", base_width=8)
    kinds = {"w": "hidden"}
    cfg = OptimizerConfig(optimizer="adamw", weight_decay=0.0, eps_scaling="mup", learning_rate=1.0)
    roles = scaling.mup.roles.from_kinds({"w": jnp.zeros((32, 4))}, kinds, p.width_mult(32))
    opt = cfg.build(scaling.parametrize(roles, p, forward="model"))
    g = {"w": jnp.full((32, 4), 1e-8)}
    updates, _ = opt.update(g, opt.init(g), g)
    # ε = 1e-8 / 4: the update is -(1/4) · 1e-8 / (1e-8 + 0.25e-8) = -0.2
    np.testing.assert_allclose(np.asarray(updates["w"]), -0.2, rtol=1e-4)
    with self.assertRaisesRegex(ValueError, "eps_scaling only applies"):
      OptimizerConfig(optimizer="sgd", eps_scaling="mup")


if __name__ == "__main__":
  absltest.main()
