"""Unit-scaled operations of u-μP: custom VJPs against plain jnp ops, the paper's scales, the covariance correction."""

import contextlib
import functools
import io
import json
import math
import os
import pathlib
import subprocess
import sys

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from scaling.mup import layers
from scaling.mup import roles as roles_lib
from scaling.training.model import transformer as model_lib
from scaling.training.model import blocks as blocks_lib
from scaling.training.model.config import ModelConfig
from scaling.training.model import scales as model_scales_lib
from scaling.training.model.family import ModelFamily
from scaling.training.model import init_rms as init_rms_lib
from scaling.mup import schemes as P
from scaling.attention import rope as rope_lib
from scaling.training.optimizer import OptimizerConfig
from scaling.training.loop import initialization as init_lib
from scaling.training.loop import step as step_lib
from scaling.mup import unit_scaling as U
from scaling.mup import unit_scaling_covariance as C

import experiment_main


# Test inputs drawn by NumPy: every eager jax.random draw of a new shape compiles a program of its own.
def _normal(seed, shape):
  return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


def _randint(seed, shape, high):
  return np.random.default_rng(seed).integers(0, high, shape, dtype=np.int32)


def _rms(x):
  return float(np.sqrt(np.mean(np.square(np.asarray(x, np.float64)))))


def _vjp(f, args, g, consts=()):
  """(f(*consts, *args), the gradients of ⟨g, f(*consts, *args)⟩ with respect to args): one compiled program, which
  on CPU costs less than compiling every op of jax.vjp run eagerly. Arrays f closes over would be constants of the
  program, folded at compile time: pass large ones in consts."""
  def run(consts, args, g):
    y, vjp = jax.vjp(lambda *a: f(*consts, *a), *args)
    return y, vjp(g)
  return jax.jit(run)(consts, args, g)


def _plain_attention(q, k, v, alpha=1.0):
  """Causal softmax(α/d · q·k)·v with jax.nn (the independent reference)."""
  return jax.nn.dot_product_attention(q, k, v, scale=alpha / q.shape[-1], is_causal=True)


class VjpTest(parameterized.TestCase):
  """Forward = plain op × forward scale; backward = jax's gradient of the plain op × backward scale."""

  def test_scale(self):
    x, g = _normal(0, (3, 5)), _normal(1, (3, 5))
    y, vjp = jax.vjp(lambda x: U.scale(x, 0.3, 7.0), x)
    chex.assert_trees_all_close(y, x * 0.3, rtol=1e-6)
    chex.assert_trees_all_close(vjp(g)[0], g * 7.0, rtol=1e-6)

  @parameterized.parameters(((4, 8), 8, 16), ((2, 3, 16), 16, 4))
  def test_linear(self, x_shape, fan_in, fan_out):
    x, w = _normal(0, x_shape), _normal(1, (fan_in, fan_out))
    g = _normal(2, (*x_shape[:-1], fan_out))
    s_out, s_in, s_w = 0.25, 0.5, 0.125
    y, (dx, dw) = _vjp(lambda x, w: U.linear(x, w, s_out, s_in, s_w), (x, w), g)
    y_ref, (dx_ref, dw_ref) = _vjp(jnp.dot, (x, w), g)
    chex.assert_trees_all_close(y, y_ref * s_out, rtol=1e-5)
    chex.assert_trees_all_close(dx, dx_ref * s_in, rtol=1e-5, atol=1e-6)
    chex.assert_trees_all_close(dw, dw_ref * s_w, rtol=1e-5, atol=1e-6)

  def test_attention(self):
    q, k, v = (_normal(i, (2, 16, 2, 8)) for i in range(3))
    g = _normal(3, (2, 16, 2, 8))
    s, s_q, s_k, s_v = 0.7, 5.0, 4.0, 3.0
    y, grads = _vjp(lambda q, k, v: U.attention(_plain_attention, q, k, v, s, s_q, s_k, s_v), (q, k, v), g)
    y_ref, grads_ref = _vjp(_plain_attention, (q, k, v), g)
    chex.assert_trees_all_close(y, y_ref * s, rtol=1e-5)
    for got, want, scale in zip(grads, grads_ref, (s_q, s_k, s_v)):
      chex.assert_trees_all_close(got, want * scale, rtol=1e-4, atol=1e-6)

  def test_projections_undo_attention_backward_scales(self):
    # The model's q/k/v projections scale their input gradient by forward/backward of the attention, so the
    # gradient of x is jax's gradient of the plain composite (x @ W_q, x @ W_k, x @ W_v -> attention) × s.
    x, g = _normal(0, (1, 16, 8)), _normal(1, (1, 16, 2, 4))
    w = [_normal(2 + i, (8, 8)) for i in range(3)]
    s, s_q, s_k, s_v, a = 0.7, 5.0, 4.0, 3.0, 8**-0.5

    def unit(x):
      q, k, v = (U.linear(x, wi, a, a * s / sb, 1.0).reshape(1, 16, 2, 4) for wi, sb in zip(w, (s_q, s_k, s_v)))
      return U.attention(_plain_attention, q, k, v, s, s_q, s_k, s_v)

    plain = lambda x: _plain_attention(*((x @ wi * a).reshape(1, 16, 2, 4) for wi in w))
    (_, (dx,)), (_, (dx_ref,)) = _vjp(unit, (x,), g), _vjp(plain, (x,), g)
    chex.assert_trees_all_close(dx, dx_ref * s, rtol=1e-4, atol=1e-6)

  def test_norm_gradient_factor_keeps_the_input_gradient(self):
    # The model scales the gradient at a norm's output (as probed) and undoes it at the norm's input: the
    # gradient of x is jax's gradient of the plain norm, the gain's × grad_factor.
    x, g, gain = _normal(0, (6, 8)), _normal(1, (6, 8)), 1.0 + 0.1 * _normal(2, (8,))
    plain = lambda x, gain: jax.nn.standardize(x, axis=-1, epsilon=1e-6) * gain
    grad_factor = 2.5
    unit = lambda x, gain: blocks_lib._unit_norm(lambda v: plain(v, gain), x, grad_factor, lambda y: y)
    y, (dx, dgain) = _vjp(unit, (x, gain), g)
    y_ref, (dx_ref, dgain_ref) = _vjp(plain, (x, gain), g)
    chex.assert_trees_all_close(y, y_ref, rtol=1e-6)
    chex.assert_trees_all_close(dx, dx_ref, rtol=1e-4, atol=1e-6)
    chex.assert_trees_all_close(dgain, dgain_ref * grad_factor, rtol=1e-4, atol=1e-6)
    # The probed output gradient is the incoming one × grad_factor.
    dy = jax.jit(jax.grad(lambda p: jnp.sum(blocks_lib._unit_norm(lambda v: plain(v, gain), x, grad_factor,
                                                                 lambda y: y + p) * g)))(jnp.zeros_like(x))
    chex.assert_trees_all_close(dy, g * grad_factor, rtol=1e-6)

  def test_attention_scale_formula(self):
    # unit_scaling's rule: 1 / logint(σ(log(mult²/(4 d))), lower=√(log T / T) (causal) or √(1/T), upper=1).
    for t, d, mult, causal in ((64, 16, 1.0, True), (1024, 256, 1.0, True), (128, 32, 8.0, False)):
      w = 1 / (1 + 4 * d / mult**2)
      lower = math.sqrt((math.log(t) if causal else 1) / t)
      self.assertAlmostEqual(U.attention_scale(t, d, mult=mult, causal=causal), 1 / lower**(1 - w), places=9)

  def test_cross_entropy(self):
    logits, targets = _normal(0, (3, 5, 11)), _randint(1, (3, 5), 11)
    weights = (np.random.default_rng(2).uniform(size=(3, 5)) > 0.3).astype(np.float32)
    loss, grad = jax.jit(jax.value_and_grad(U.cross_entropy))(logits, targets, weights)
    summed = lambda z: jnp.sum(optax.softmax_cross_entropy_with_integer_labels(z, targets) * weights)
    ce_sum, ce_grad = jax.jit(jax.value_and_grad(summed))(logits)
    np.testing.assert_allclose(loss, ce_sum / np.sum(weights), rtol=1e-6)
    chex.assert_trees_all_close(grad, ce_grad * 11 / math.sqrt(10), rtol=1e-5, atol=1e-7)

  @parameterized.parameters(0.1, 1.0, 3.0)
  def test_residual_split_add(self, tau):
    # The split scales the gradients and the add the values, so together they are the plain residual
    # (τ·f(x) + x)/√(1 + τ²) with its true gradient.
    x, g = _normal(0, (4, 8)), _normal(1, (4, 8))
    f = lambda x: jnp.tanh(2.0 * x)

    def unit(x):
      branch, skip = U.residual_split(x, tau)
      return U.residual_add(f(branch), skip, tau)

    plain = lambda x: (tau * f(x) + x) / math.sqrt(1 + tau * tau)
    y, dx = _vjp(unit, (x,), g)
    y_ref, dx_ref = _vjp(plain, (x,), g)
    chex.assert_trees_all_close(y, y_ref, rtol=1e-6)
    chex.assert_trees_all_close(dx, dx_ref, rtol=1e-5, atol=1e-6)

  @parameterized.parameters((1, 1.0, 1.0), (6, 1.0, 1.0), (4, 0.5, 2.0))
  def test_residual_taus(self, depth, mult, ratio):
    # unit_scaling's transformer_residual_scaling_rule over the 2L branches (index i, attention when i is even).
    a_mlp = mult * math.sqrt(2 / (1 + ratio**2))
    a_attn = ratio * a_mlp
    want = []
    for i in range(2 * depth):
      n_attn, n_mlp = (i + 1) // 2, i // 2
      want.append((a_attn if i % 2 == 0 else a_mlp) / math.sqrt(depth + n_attn * a_attn**2 + n_mlp * a_mlp**2))
    got = [tau for pair in U.residual_taus(depth, mult, ratio) for tau in pair]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def _vjp_scales(op, plain, args, g):
  """(forward ratio, [gradient ratio per argument]) of op against plain on the same inputs and output gradient.

  Each ratio is the least-squares factor c of got ≈ c · want, asserted to hold elementwise (rtol 1e-4).
  """
  y, grads = _vjp(op, args, g)
  y_ref, grads_ref = _vjp(plain, args, g)

  def ratio(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    c = float(np.sum(got * want) / np.sum(want * want))
    np.testing.assert_allclose(got, c * want, rtol=1e-4, atol=1e-6 * np.abs(c * want).max())
    return c

  return ratio(y, y_ref), [ratio(a, b) for a, b in zip(grads, grads_ref)]


class PaperScalesTest(parameterized.TestCase):
  """Each op under ``umup_scales="paper"``: forward and backward scales, through jax.vjp, equal the paper's closed
  forms (Blake et al. 2024, Table 2 / App. B; graphcore-research/unit-scaling ``functional``), written here."""

  def _assert_scales(self, got, want):
    fwd, grads = got
    np.testing.assert_allclose([fwd, *grads], want, rtol=1e-5)

  @parameterized.parameters((64, 256, 16), (256, 64, 9))
  def test_linear(self, fan_in, fan_out, rows):
    # functional.linear: output 1/√fan_in, grad-input 1/√fan_in (to_output_scale) or 1/√fan_out (None),
    # grad-weight 1/√batch.
    x, w, g = _normal(0, (rows, fan_in)), _normal(1, (fan_in, fan_out)), _normal(2, (rows, fan_out))
    for constrained, grad_in in ((True, fan_in**-0.5), (False, fan_out**-0.5)):
      s = U.unit_linear_scales(fan_in, fan_out, rows, constrained=constrained)
      got = _vjp_scales(lambda x, w: U.linear(x, w, *s), jnp.dot, (x, w), g)
      self._assert_scales(got, [fan_in**-0.5, grad_in, rows**-0.5])

  def test_readout(self):
    # functional.linear_readout: scale powers (1, 0.5, 0.5), no constraint: 1/fan_in, 1/√fan_out, 1/√batch.
    x, w, g = _normal(0, (12, 64)), _normal(1, (64, 65)), _normal(2, (12, 65))
    got = _vjp_scales(lambda x, w: U.linear(x, w, *U.readout_scales(64, 65, 12)), jnp.dot, (x, w), g)
    self._assert_scales(got, [1 / 64, 65**-0.5, 12**-0.5])

  def test_gelu(self):
    # functional.gelu at mult 1: log-interpolation with α = 1/(1 + 0.25) = 0.8 between 2 and √(2/(1 − 1/π)),
    # one scale both ways (to_output_scale).
    want = math.sqrt(2 / (1 - 1 / math.pi))**0.8 * 2**0.2
    self.assertAlmostEqual(want, 1.7668, places=4)
    x, g = _normal(0, (32, 16)), _normal(1, (32, 16))
    self._assert_scales(_vjp_scales(U.gelu, jax.nn.gelu, (x,), g), [want, want])

  @parameterized.parameters((64, 16, 1.0, True), (1024, 64, 1.0, True), (128, 32, 8.0, False))
  def test_attention(self, t, d, mult, causal):
    # functional.scaled_dot_product_attention: one scale 1/logint(1/(1 + 4·d/mult²), √(log T / T) causal or
    # √(1/T), 1) = (T / log T)^((1 − w)/2), on the output and on the gradients of q, k and v.
    w = 1 / (1 + 4 * d / mult**2)
    want = (t / (math.log(t) if causal else 1.0))**((1 - w) / 2)
    cfg = dict(batch=1, seq_len=t, width=4 * d, mlp_hidden=16 * d, num_heads=4, kv_heads=4, head_dim=d,
               vocab_size=65, max_len=t, depth=1, attn_mult=mult, causal=causal)
    scales = U.paper_scales(**cfg).blocks[0].attention
    np.testing.assert_allclose(scales, [want] * 4, rtol=1e-9)
    plain = lambda q, k, v: jax.nn.dot_product_attention(q, k, v, scale=mult / d, is_causal=causal)
    q, k, v, g = (_normal(i, (1, t, 2, d)) for i in range(4))
    got = _vjp_scales(lambda q, k, v: U.attention(plain, q, k, v, *scales), plain, (q, k, v), g)
    self._assert_scales(got, [want] * 4)

  def test_residual_taus_of_the_model(self):
    # transformer_residual_scaling_rule at L = 2, α_attn = α_mlp = 1: τ_i = 1/√(L + i) over the 4 branches.
    cfg = dict(batch=2, seq_len=8, width=16, mlp_hidden=64, num_heads=2, kv_heads=2, head_dim=8, vocab_size=65,
               max_len=8, depth=2)
    taus = [tau for b in U.paper_scales(**cfg).blocks for tau in (b.tau_attn, b.tau_mlp)]
    np.testing.assert_allclose(taus, [2**-0.5, 3**-0.5, 4**-0.5, 5**-0.5], rtol=1e-12)

  def test_embedding_norm_and_model_scales(self):
    # B = 2, T = 32, D = 64, F = 256, N = 4 query heads, K = 2 key/value heads of 16, V = 65, 64 learned
    # positions: functional.embedding √(V / lookups), layer_norm 1/√rows, linear and linear_readout.
    s = U.paper_scales(batch=2, seq_len=32, width=64, mlp_hidden=256, num_heads=4, kv_heads=2, head_dim=16,
                       vocab_size=65, max_len=64, depth=3)
    rows = 64
    self.assertAlmostEqual(s.embedding, math.sqrt(65 / rows))
    self.assertAlmostEqual(s.positions, math.sqrt(64 / 32))
    self.assertAlmostEqual(s.ln_final, 1 / 8)
    np.testing.assert_allclose(s.readout, [1 / 64, 65**-0.5, 1 / 8])
    for b in s.blocks:
      for linear in (b.query, b.key, b.value, b.out):  # constrained
        np.testing.assert_allclose(linear, [1 / 8, 1 / 8, 1 / 8])
      np.testing.assert_allclose(b.fc_in, [1 / 8, 1 / 16, 1 / 8])  # the MLP's mirrored unconstrained pair
      np.testing.assert_allclose(b.fc_out, [1 / 16, 1 / 8, 1 / 8])
      self.assertEqual((b.ln_attn, b.ln_mlp, b.attn_in_grad), (1 / 8, 1 / 8, 1.0))

  def test_embedding_table_gradient(self):
    # The model's table: the gradient of E[ids] is jax's × √(V / lookups).
    table, ids = _normal(0, (65, 8)), _randint(1, (2, 16), 65)
    g = _normal(2, (2, 16, 8))
    embed = layers.ScaledEmbed(65, 8, roles_lib.GlobalWidth(P.get_parametrization("umup"), 8),
                               grad_scale=U.embedding_grad_scale(65, 32))
    op = lambda t: embed.apply({"params": {"embedding": t}}, ids)
    got = _vjp_scales(op, lambda t: jnp.take(t, ids, axis=0), (table,), g)
    self._assert_scales(got, [1.0, math.sqrt(65 / 32)])

  def test_fused_projections_equal_separate_ones(self):
    # Under the paper's scales q, k and v share their scales, so the model fuses them into one unit linear:
    # outputs and gradients (of x and of each kernel) equal three separate ones.
    x, s = _normal(0, (2, 8, 16)), U.unit_linear_scales(16, 8, 16)
    kernels = [(_normal(1 + i, (16, f)), 16**-0.5, None, 1.0) for i, f in enumerate((8, 4, 4))]
    g = [_normal(5 + i, (2, 8, k.shape[1])) for i, (k, *_) in enumerate(kernels)]

    def loss(x, ws, fused):
      parts = [(w, *rest) for w, (_, *rest) in zip(ws, kernels)]
      ys = (layers.unit_fused_dense(x, parts, s, jnp.float32) if fused
            else [U.linear(x, w, *s) for w in ws])
      return sum(jnp.sum(y * gi) for y, gi in zip(ys, g))

    ws = [k for k, *_ in kernels]
    fused, separate = (jax.jit(jax.grad(loss, argnums=(0, 1)), static_argnums=2)(x, ws, f) for f in (True, False))
    chex.assert_trees_all_close(fused, separate, rtol=1e-5, atol=1e-6)
    with self.assertRaisesRegex(TypeError, "scales must be a unit_scaling.LinearScales"):
      layers.unit_fused_dense(x, kernels, (1.0, 1.0, 1.0), jnp.float32)

  def test_rejects_bad_sizes(self):
    with self.assertRaisesRegex(ValueError, "fan_out must be a positive integer"):
      U.unit_linear_scales(4, 0, 2)
    with self.assertRaisesRegex(ValueError, "batch must be a positive integer"):
      U.readout_scales(4, 4, 1.5)
    with self.assertRaisesRegex(ValueError, "umup_scales must be one of paper, covariance"):
      P.get_parametrization("umup", umup_scales="exact")


class ModelScalesTest(parameterized.TestCase):
  """The scales a model computes with: the parametrization's multipliers, the setting's values."""

  @parameterized.parameters("paper", "covariance")
  def test_forward_scales_are_the_multipliers(self, umup_scales):
    cfg = ModelConfig(vocab_size=65, width=32, depth=2, num_heads=4, head_dim=8, num_kv_heads=2,
                                max_len=16, parametrization=P.get_parametrization("umup", umup_scales=umup_scales))
    s = model_scales_lib.unit_scales(cfg, 2, 16)
    mult = lambda kind, fan_in, fan_out: cfg.parametrization.layer(kind, fan_in, fan_out, 32).multiplier
    self.assertAlmostEqual(s.readout.output, mult("readout", 32, 65))
    self.assertAlmostEqual(s.readout.output, 1 / 32 if umup_scales == "paper" else 32**-0.5)
    for b in s.blocks:
      for linear, kind, fan_in, fan_out in ((b.query, "attn_q", 32, 32), (b.key, "attn_k", 32, 16),
                                            (b.value, "attn_v", 32, 16), (b.out, "attn_o", 32, 32),
                                            (b.fc_in, "hidden", 32, 128), (b.fc_out, "hidden", 128, 32)):
        self.assertAlmostEqual(linear.output, mult(kind, fan_in, fan_out))

  def test_paper_readout_spec(self):
    # The paper's readout: A = 1/n_in, Adam (and SGD) LR 1; covariance: unit-scaled A = 1/√n_in, LR 1/√n_in.
    paper = P.get_parametrization("umup").layer("readout", 256, 100, 256)
    self.assertEqual((paper.init_std, paper.multiplier, paper.lr_adam, paper.lr_sgd), (1.0, 1 / 256, 1.0, 1.0))
    cov = P.get_parametrization("umup", umup_scales="covariance").layer("readout", 256, 100, 256)
    self.assertEqual((cov.init_std, cov.multiplier, cov.lr_adam, cov.lr_sgd), (1.0, 1 / 16, 1 / 16, 1 / 16))

  def test_rejects_other_parametrizations(self):
    with self.assertRaisesRegex(ValueError, "unit-scaled parametrization"):
      model_scales_lib.unit_scales(ModelConfig(vocab_size=65), 1, 8)

  def test_family_option(self):
    family = ModelFamily(umup_scales="covariance")
    cfg = family.with_base_width([32]).model_config("umup", 32, vocab_size=65, max_len=16)
    self.assertEqual(cfg.parametrization.umup_scales, "covariance")
    self.assertEqual(ModelFamily().with_base_width([32]).model_config(
        "umup", 32, vocab_size=65, max_len=16).parametrization.umup_scales, "paper")
    with self.assertRaisesRegex(ValueError, "umup_scales"):
      ModelFamily(umup_scales="exact")


class UnitScaleOpsTest(parameterized.TestCase):
  """Each unit-scaled op maps unit-scale inputs and output gradients to unit-scale outputs and gradients."""

  @parameterized.parameters((64, 256, 64), (1024, 256, 16), (256, 1024, 64))
  def test_linear_and_gelu(self, fan_in, fan_out, rows):
    x, w, g = _normal(0, (rows, fan_in)), _normal(1, (fan_in, fan_out)), _normal(2, (rows, fan_out))
    for constrained in (True, False):
      s = U.unit_linear_scales(fan_in, fan_out, rows, constrained=constrained)
      y, (dx, dw) = _vjp(lambda x, w: U.linear(x, w, *s), (x, w), g)
      want_dx = math.sqrt(fan_out / fan_in) if constrained else 1.0  # constrained: the true gradient's scale
      for name, value, want in (("y", y, 1.0), ("dx", dx, want_dx), ("dw", dw, 1.0)):
        self.assertBetween(_rms(value) / want, 0.5, 2.0, msg=f"{name} constrained={constrained}")
    y, (dx,) = _vjp(U.gelu, (x,), _normal(3, x.shape))
    self.assertBetween(_rms(y), 0.5, 2.0)
    self.assertBetween(_rms(dx), 0.5, 2.0)

  @parameterized.parameters((64, 16), (256, 64), (1024, 64), (1024, 256))
  def test_attention(self, t, d):
    q, k, v, g = (_normal(i, (1, t, 2, d)) for i in range(4))
    s = U.attention_scale(t, d)
    y, (dv,) = _vjp(lambda q, k, v: U.attention(_plain_attention, q, k, v, s), (v,), g, consts=(q, k))
    self.assertBetween(_rms(y), 0.5, 2.0)
    self.assertBetween(_rms(dv), 0.5, 2.0)

  @parameterized.parameters(64, 256, 4096)
  def test_cross_entropy_gradient(self, vocab):
    logits = 0.1 * _normal(0, (64, vocab))
    targets = _randint(1, (64,), vocab)
    grad = jax.jit(jax.grad(U.cross_entropy))(logits, targets, jnp.ones((64,)))
    self.assertBetween(_rms(grad), 0.5, 2.0)


class CovarianceFactorsTest(parameterized.TestCase):
  """The correction of ``unit_scaling_covariance`` (``umup_scales="covariance"``) against closed forms."""

  @parameterized.parameters((64, 16), (1024, 16), (1024, 256), (128, 64))
  def test_attention_qk_gradients(self, t, d):
    # q and k gradients of near-uniform α/d_head attention, from jax.grad of the unscaled op, × the q/k scale.
    q, k, v, g = (_normal(i, (1, t, 2, d)) for i in range(4))
    _, (dq, dk, _) = _vjp(_plain_attention, (q, k, v), g)
    s = C.attention_qk_grad_scale(t, d)
    self.assertBetween(_rms(dq) * s, 0.5, 2.0)
    self.assertBetween(_rms(dk) * s, 0.5, 2.0)

  @parameterized.parameters((64, 65), (1024, 65), (1024, 4096), (256, 8))
  def test_correlation_factor_of_first_block(self, t, vocab):
    # Random tokens: embeddings of two positions have expected overlap 1/V, so a causal mean of t + 1 values
    # has variance (1 − 1/V)/(t + 1) + 1/V; the factor is √((H_T/T) / mean over t of that).
    harmonic = sum(1.0 / n for n in range(1, t + 1)) / t
    want = math.sqrt(harmonic / ((1 - 1 / vocab) * harmonic + 1 / vocab))
    got = C.attention_correlation_factors(t, U.residual_taus(2), vocab_size=vocab)[0]
    self.assertAlmostEqual(got, want, places=6)

  @parameterized.parameters(True, False)
  def test_transposed_uniform_attention_covariance(self, causal):
    # Aᵀ·G·A with A the explicit (causal) averaging matrix, against the cumulative-sum form.
    t = 12
    a = np.tril(np.ones((t, t))) if causal else np.ones((t, t))
    a = a / a.sum(axis=1, keepdims=True)
    g = np.asarray(_normal(0, (t, t)), np.float64)
    g = g @ g.T
    np.testing.assert_allclose(C._uniform_attention_cov_t(g, causal), a.T @ g @ a, rtol=1e-10, atol=1e-12)

  def test_gradient_factors_of_independent_positions(self):
    # One position: nothing is correlated, so the factors of the value gradient and of the weights in the
    # blocks are 1 (u-μP's own scales); the final gain's and the readout's are 1/√(1 + T/D) and 1/√(1 + T/(D·V))
    # (the mean of their gradient). The last two columns and the embedding's factor also normalize the scale of
    # a branch's gradient, which is not 1 even at T = 1.
    blocks, (readout, final_gain, _) = C.gradient_correlation_factors(1, U.residual_taus(3), vocab_size=65, width=64, head_dim=16)
    np.testing.assert_allclose(np.asarray(blocks)[:, :8], 1.0, rtol=1e-9)
    np.testing.assert_allclose(np.asarray(blocks)[:, 10:], 1.0, rtol=1e-9)
    self.assertAlmostEqual(final_gain, (1 + 1 / 64) ** -0.5, places=9)
    self.assertAlmostEqual(readout, (1 + 1 / (64 * 65)) ** -0.5, places=9)


_EPS = 1e-4  # logit scale of the reference attention: near-uniform, gradients per unit logit scale


def _qk_moments(seq_len, head_dim, causal, rope, sample_inputs, samples, seed=0):
  """E[dq·dqᵀ]/d_head and E[dk·dkᵀ]/d_head per unit logit scale, by jax.vjp of jax.nn's near-uniform attention.

  sample_inputs(key) -> (q, k, v, g), each [T, d_head]; RoPE (base 100) rotates q and k when ``rope``.
  """
  def one(key):
    q, k, v, g = sample_inputs(key)
    if rope:
      q, k = (rope_lib.apply_rope(x[None, :, None, :], base=100.0)[0, :, 0] for x in (q, k))
    attend = lambda q, k, v: jax.nn.dot_product_attention(
        q[None, :, None], k[None, :, None], v[None, :, None], scale=_EPS, is_causal=causal)[0, :, 0]
    dq, dk, _ = jax.vjp(attend, q, k, v)[1](g)
    return dq @ dq.T / (head_dim * _EPS**2), dk @ dk.T / (head_dim * _EPS**2)

  qs, ks = jax.jit(jax.vmap(one))(jax.random.split(jax.random.PRNGKey(seed), samples))
  return np.asarray(qs.mean(0), np.float64), np.asarray(ks.mean(0), np.float64)


def _covariances(t, seed=0):
  """A random correlation matrix R and a random gradient covariance G (non-uniform diagonal), [T, T]."""
  rng = np.random.default_rng(seed)
  a, b = rng.normal(size=(t, t)), rng.normal(size=(t, t))
  return C._corr(a @ a.T / t + np.eye(t)), b @ b.T / t + 0.5 * np.eye(t)


class QkGradientCovarianceTest(parameterized.TestCase):
  """``unit_scaling_covariance._qk_gradient_covariances`` against Monte Carlo through jax.nn.dot_product_attention's VJP."""

  @parameterized.product(causal=(True, False), rope=(True, False))
  def test_mean_field(self, causal, rope):
    # q, k, v independent Gaussians of position correlation R, g of covariance G: the closed form is exact.
    t, d = 10, 32
    r, g = _covariances(t)
    chol_r, chol_g = (jnp.asarray(np.linalg.cholesky(c), jnp.float32) for c in (r, g))

    def sample(key):
      keys = jax.random.split(key, 4)
      q, k, v = (chol_r @ jax.random.normal(keys[i], (t, d)) for i in range(3))
      return q, k, v, chol_g @ jax.random.normal(keys[3], (t, d))

    got_q, got_k = _qk_moments(t, d, causal, rope, sample, samples=4000)
    want_q, want_k = C._qk_gradient_covariances(r, g, C._rope_rotation(t, d, 100.0 if rope else None), causal)
    for got, want in ((got_q, d * want_q), (got_k, d * want_k)):  # per unit logit scale: d_head·(Q, K)
      self.assertLess(np.abs(got - want).max() / np.abs(want).max(), 0.06)

  @parameterized.parameters(True, False)
  def test_finite_width_and_tokens(self, tokens):
    # q, k, v = x·W of the same inputs x of D features: past D keys the query gradient sums coherently (the
    # Wishart term), and positions holding the same token add the pairing of equal entries (token_var).
    t, d = 32, 16
    vocab, width = (3, 64) if tokens else (None, 12)
    r, g = _covariances(t)
    if tokens:
      r = np.eye(t) + (np.ones((t, t)) - np.eye(t)) / vocab
    chol_r, chol_g = (jnp.asarray(np.linalg.cholesky(c), jnp.float32) for c in (r, g))

    def sample(key):
      k_x, k_w, k_t, k_g = jax.random.split(key, 4)
      if tokens:
        x = jax.random.normal(k_x, (vocab, width))[jax.random.randint(k_t, (t,), 0, vocab)]
      else:
        x = chol_r @ jax.random.normal(k_x, (t, width))
      w = jax.random.normal(k_w, (3, width, d)) / math.sqrt(width)
      return x @ w[0], x @ w[1], x @ w[2], chol_g @ jax.random.normal(k_g, (t, d))

    got_q, got_k = _qk_moments(t, d, True, True, sample, samples=3000)
    rotation = C._rope_rotation(t, d, 100.0)
    token_var = np.full((t, t), (1 - 1 / vocab) / vocab) if tokens else None
    want_q, want_k = C._qk_gradient_covariances(r, g, rotation, True, width=width, token_var=token_var)
    mean_field_q, _ = C._qk_gradient_covariances(r, g, rotation, True)
    mean = lambda c: float(np.mean(np.diag(c)))
    self.assertGreater(mean(got_q), 1.4 * d * mean(mean_field_q))  # the correction matters here
    self.assertAlmostEqual(mean(got_q) / (d * mean(want_q)), 1.0, delta=0.1)
    self.assertAlmostEqual(mean(got_k) / (d * mean(want_k)), 1.0, delta=0.1)


def _umup_config(width, depth, seq_len, umup_scales, vocab=65):
  """A u-μP model of 4 heads for sequences of seq_len."""
  return ModelConfig(vocab_size=vocab, width=width, depth=depth, num_heads=4, head_dim=width // 4, max_len=seq_len,
                     parametrization=P.get_parametrization("umup", umup_scales=umup_scales))


def _model_scales(width, depth, seq_len, vocab=65, seed=0, umup_scales="covariance"):
  """{"act/..." | "grad/..." | "weight/...": RMS} at init of a u-μP model of 4 heads on one random sequence."""
  cfg = _umup_config(width, depth, seq_len, umup_scales, vocab)
  short = {"activation": "act", "gradient": "grad", "weight gradient": "weight"}
  return {short[k.split("/", 1)[0]] + "/" + k.split("/", 1)[1]: v
          for k, v in init_rms_lib.rms_at_init(cfg, seq_len, seed).items()}


@functools.cache
def _unit_init(width, depth, seq_len):
  """Parameters of the paper-scaled ``_umup_config``, by the jitted init_params rms_at_init runs (one program)."""
  return jax.jit(model_lib.init_params, static_argnums=1)(jax.random.PRNGKey(1),
                                                          _umup_config(width, depth, seq_len, "paper"))


def _assert_every_tensor_in_band(test, width, depth, seq_len):
  """Every activation, activation gradient and weight gradient of the covariance-scaled model in [0.5, 2]."""
  scales = _model_scales(width, depth, seq_len, umup_scales="covariance")
  test.assertLen([k for k in scales if k.startswith("act/")], 3 + 11 * depth)
  test.assertLen([k for k in scales if k.startswith("grad/")], 3 + 11 * depth)
  test.assertLen([k for k in scales if k.startswith("weight/")], 3 + 8 * depth)
  test.assertEmpty({k: round(v, 3) for k, v in scales.items() if not 0.5 <= v <= 2.0})


@pytest.mark.slow  # 16 blocks that cannot share one scan (each has scales of its own): compiled unrolled
class DeepModelUnitScaleTest(parameterized.TestCase):
  """The deep corners of ``ModelUnitScaleTest`` (depth 16, T = 64 and T = 1024): the covariance scales keep every
  tensor in the band where the gradient is most correlated across positions and blocks."""

  @parameterized.parameters((64, 16, 64), (64, 16, 1024))
  def test_every_tensor_in_band(self, width, depth, seq_len):
    _assert_every_tensor_in_band(self, width, depth, seq_len)


class ModelUnitScaleTest(parameterized.TestCase):
  """The u-μP model under ``umup_scales="covariance"`` is unit-scaled at init: RMS in the [0.5, 2] band of unit
  scaling, an independent criterion.

  Corners of widths 64–1024, depths 2–16 and sequence lengths 64–1024 (batch 1, vocabulary 65 as in
  character-level text): every activation, every activation gradient and every weight gradient, including the
  deep and long model (width 64, depth 16, T = 1024) where the gradient is most correlated across positions
  (the backward factors of ``unit_scaling_covariance.gradient_correlation_factors``; the depth-16 corners are
  ``DeepModelUnitScaleTest``, in the slow group). The other width-1024
  corners (depth 16, or T = 1024: 200 M parameters or long sequences, 30 s and more each on two cores) are measured
  by scripts/unit_scale_check.py (docs/umup.md).
  """

  def _outside(self, scales, names):
    self.assertNotEmpty(names)
    return {k: round(scales[k], 3) for k in names if not 0.5 <= scales[k] <= 2.0}

  @parameterized.parameters((1024, 2, 64), (64, 2, 1024))
  def test_every_tensor_in_band(self, width, depth, seq_len):
    _assert_every_tensor_in_band(self, width, depth, seq_len)

  def test_paper_scales_leave_the_band(self):
    # The paper's fixed scales at depth 2 and T = 64, as the corners above: measured outside the band (the
    # correction's point; 11 of the 69 tensors, down to RMS 0.1, and more the deeper the model: at depth 8, 74 of
    # 249, down to 0.04; more still at the deep, long corner, which scripts/unit_scale_check.py measures).
    scales = _model_scales(64, 2, 64, umup_scales="paper")
    self.assertTrue(all(math.isfinite(v) and v > 0 for v in scales.values()))
    self.assertNotEmpty(self._outside(scales, list(scales)))

  @parameterized.parameters(("covariance", math.sqrt(64 / 65)), ("paper", 64 / math.sqrt(65)))
  def test_input_gradient_is_the_true_one(self, umup_scales, ratio):
    # Every op's backward scales are consistent with its forward ones, so the gradient reaching the residual
    # stream (here the embedded input) is the true gradient × the readout's grad-input/forward ratio:
    # √(D/V) for the unit-scaled readout (1/√V over 1/√D), D/√V for linear_readout (1/√V over 1/D); against
    # central finite differences, at any parameters: both cases take the init of the paper-scaled model of
    # test_paper_scales_leave_the_band (u-μP's unit init, whatever the scales), whose program rms_at_init compiled.
    cfg = _umup_config(64, 2, 64, umup_scales)
    model = model_lib.Transformer(cfg)
    tokens = _randint(0, (1, 64), 65)
    params = _unit_init(64, 2, 64)
    g = _normal(2, (1, 64, 65))
    embedded = _normal(3, (1, 64, 64))
    loss = jax.jit(lambda e, p: jnp.sum(model.apply({"params": p}, tokens, embedded=e) * g))
    grad = jax.jit(jax.grad(loss))(embedded, params)
    eps = 1e-2
    for seed in range(4):
      u = _normal(10 + seed, embedded.shape)
      fd = (loss(embedded + eps * u, params) - loss(embedded - eps * u, params)) / (2 * eps)
      self.assertAlmostEqual(float(jnp.sum(grad * u) / fd) / ratio, 1.0, delta=0.005)


class PaperTrainingTest(parameterized.TestCase):
  """u-μP with the paper's scales is a finite, trainable model."""

  @parameterized.parameters(dict(), dict(use_bias=True, num_kv_heads=2), dict(pre_ln=False, positions="learned"))
  def test_loss_falls(self, **kw):
    cfg = ModelConfig(vocab_size=17, width=32, depth=2, num_heads=4, head_dim=8, max_len=16,
                                parametrization=P.get_parametrization("umup"), **kw)
    opt = OptimizerConfig(learning_rate=0.05, steps=40)
    step = step_lib.make_train_step(cfg, opt)
    state = init_lib.make_init(cfg, opt)(0, opt.learning_rate)  # the jitted init: one program, not op by op
    tokens = _randint(3, (4, 17), 17)
    batch = {"inputs": tokens[:, :-1], "targets": tokens[:, 1:], "weights": np.ones((4, 16), np.float32)}
    losses = []
    for _ in range(40):
      state, metrics = step(state, batch)
      losses.append(float(metrics["loss"]))
    self.assertTrue(all(math.isfinite(v) for v in losses))
    self.assertAlmostEqual(losses[0], math.log(17), delta=0.3)  # small logits at init: near-uniform
    self.assertLess(losses[-1], 0.5 * losses[0])


class UnitScaleCheckScriptTest(parameterized.TestCase):
  """scripts/unit_scale_check.py on a tiny grid: its table and summary agree with the measurements it saved."""

  def test_tiny_grid(self):
    """The paper's op scales, the script's main in this process (starting Python and JAX again costs a quarter of
    the run); the grid pools two models."""
    self._check(self._run("paper", "1,2", in_process=True), "paper", "1,2")

  @pytest.mark.slow  # the command line in a process of its own
  def test_command_line(self):
    """The covariance-matched scales, the command line; it measures one model (its two blocks pooled)."""
    self._check(self._run("covariance", "2", in_process=False), "covariance", "2")

  def _run(self, umup_scales, depths, in_process):
    root = pathlib.Path(__file__).resolve().parents[1]
    out = pathlib.Path(self.create_tempdir().full_path) / "runs" / "unit_scale.md"  # runs/ made by the script
    args = [f"--out={out}", "--widths=16", f"--depths={depths}", "--seq_lens=8", f"--umup_scales={umup_scales}"]
    if in_process:
      with contextlib.redirect_stdout(io.StringIO()):
        self.assertEqual(experiment_main.load_script("unit_scale_check").main(["unit_scale_check", *args]), 0)
    else:
      env = {**os.environ, "PYTHONPATH": str(root), "JAX_PLATFORMS": "cpu"}
      subprocess.run([sys.executable, str(root / "scripts" / "unit_scale_check.py"), *args], check=True, cwd=root,
                     capture_output=True, env=env)
    return out

  def _check(self, out, umup_scales, depths):
    script_module = experiment_main.load_script("unit_scale_check")
    saved = json.loads(out.with_suffix(".json").read_text())
    self.assertEqual(saved["umup_scales"], umup_scales)
    runs = saved["runs"]
    self.assertEqual(sorted(runs), [f"16/{depth}/8" for depth in depths.split(",")])
    text = out.read_text()
    self.assertIn(f"--umup_scales={umup_scales}", text)
    values = [v for scales in runs.values() for v in scales.values()]
    self.assertIn(f"the smallest RMS is {min(values):.3g}", text)
    self.assertIn(f"the largest {max(values):.3g}", text)
    inside = all(0.5 <= v <= 2.0 for v in values)
    self.assertEqual("quantities are in [0.5, 2]" in text, inside)
    self.assertEqual(text.count("| **no** |") == 0, inside)
    # --merge pools saved runs of the same setting (and refuses the other's); run in this process (the script's
    # main), as starting Python and JAX again would cost more than the merge itself.
    merged = out.with_name("merged.md")
    with contextlib.redirect_stdout(io.StringIO()):
      status = script_module.main(["unit_scale_check", f"--out={merged}", f"--merge={out.with_suffix('.json')}",
                                   f"--umup_scales={umup_scales}"])
    self.assertEqual(status, 0)
    self.assertEqual(merged.read_text().splitlines()[-2:], text.splitlines()[-2:])
    other = "paper" if umup_scales == "covariance" else "covariance"
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
      status = script_module.main(["unit_scale_check", f"--out={merged}", f"--merge={out.with_suffix('.json')}",
                                   f"--umup_scales={other}"])
    self.assertEqual(status, 2)
    self.assertIn(f"not {other!r}", stderr.getvalue())


if __name__ == "__main__":
  absltest.main()
