"""Tests for scaling.parametrize on a user's own Flax model: Tensor Programs V's tables written as formulas, the
readout multiplier explicit or folded (same trajectories), the optimizers, nnx, depth, and the u-μP example."""

import importlib.util
import math
import pathlib
import sys

from absl.testing import absltest
from absl.testing import parameterized
import chex
import flax.linen as nn
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import optax

import float_tolerance
import scaling
from scaling.mup import schemes as param_lib

D_IN, D_OUT = 5, 10
BASE, DELTA, TARGET = 32, 64, 256  # m = 8
M = TARGET / BASE


class _Mlp(nn.Module):
  """A user's linen MLP; the readout multiplies its product by ``readout_mult`` (``scaling.ReadoutDense``)."""
  width: int
  readout_mult: float = 1.0

  @nn.compact
  def __call__(self, x):
    h = nn.tanh(nn.Dense(self.width, name="fc_in")(x))
    h = nn.tanh(nn.Dense(self.width, name="fc_hidden")(h))
    h = nn.LayerNorm(name="ln")(h)
    return scaling.ReadoutDense(D_OUT, multiplier=self.readout_mult, name="readout")(h)


class _NnxMlp(nnx.Module):
  """The same MLP in nnx (same parameter paths)."""

  def __init__(self, width, rngs, readout_mult=1.0):
    self.fc_in = nnx.Linear(D_IN, width, rngs=rngs)
    self.fc_hidden = nnx.Linear(width, width, rngs=rngs)
    self.ln = nnx.LayerNorm(width, rngs=rngs)
    self.readout = scaling.ReadoutLinear(width, D_OUT, multiplier=readout_mult, rngs=rngs)

  def __call__(self, x):
    h = jnp.tanh(self.fc_hidden(jnp.tanh(self.fc_in(x))))
    return self.readout(self.ln(h))


def _shapes(width):
  return jax.eval_shape(lambda: _Mlp(width).init(jax.random.key(0), jnp.zeros((1, D_IN))))["params"]


def _roles(target=TARGET, **kwargs):
  return scaling.infer_kinds(_shapes(BASE), _shapes(DELTA), _shapes(target), **kwargs)


def _params(width=TARGET):
  return _Mlp(width).init(jax.random.key(0), jnp.zeros((1, D_IN)))["params"]


# ---------------------------------------------------------------------------------------------------------------
# Tensor Programs V (Yang et al. 2022), Table 3 as formulas in the effective quantities every equivalent form
# shares (init std of A·w: A·B; Adam step of A·w: A·C; SGD step of A·w: A²·C), each constant fixed so that the
# base model (fans / m) is SP, as mup's base shapes do. n_in, n_out are the target's fans, m = n / n_base:
#   input weights   A·B = 1/√n_in (n_in fixed)   Adam 1        SGD fan_out: m
#   hidden weights  A·B = 1/√n_in                Adam 1/m      SGD 1
#   output weights  A·B = √(n_in / m) / n_in     Adam 1/m      SGD 1/m
#   biases, gains   (kept)                       Adam 1        SGD m
# SP: every A·B the fan-in init 1/√n_in, every learning rate 1. A bias over the 10 outputs does not grow: 1, 1.
# ---------------------------------------------------------------------------------------------------------------
def _mup_table(path, n_in):
  if path == "readout/bias":
    return None, 1.0, 1.0
  if path == "fc_in/kernel":
    return 1 / math.sqrt(n_in), 1.0, M
  if path == "fc_hidden/kernel":
    return 1 / math.sqrt(n_in), 1 / M, 1.0
  if path == "readout/kernel":
    return math.sqrt(n_in / M) / n_in, 1 / M, 1 / M
  return None, 1.0, M


def _sp_table(path, n_in):
  return (None if path.endswith(("bias", "scale")) else 1 / math.sqrt(n_in)), 1.0, 1.0


_TABLES = {"mup": _mup_table, "sp": _sp_table}


def _measured_steps(p, params, name):
  """One step of ``p.optimizer(name, lr)`` on a unit-RMS gradient: |update| / lr per parameter (C as applied)."""
  lr = 1e-3
  opt = p.optimizer(name, lr)
  grads = jax.tree.map(lambda x: jnp.where(jnp.arange(x.size).reshape(x.shape) % 2 == 0, 1.0, -1.0), params)
  updates, _ = opt.update(grads, opt.init(params), params)
  return jax.tree.map(lambda u: float(jnp.max(jnp.abs(u))) / lr, updates)


class TensorProgramsTablesTest(parameterized.TestCase):

  @parameterized.product(scheme=("mup", "sp"), forward=("fold", "readout"))
  def test_user_mlp_against_tables(self, scheme, forward):
    p = scaling.parametrize(_roles(), scheme, forward=forward)
    params = p.init(jax.random.key(1), _params())
    adam_steps = _measured_steps(p, params, "adam")
    sgd_steps = _measured_steps(p, params, "sgd")
    for path, role in p.roles.items():
      a = p.multiplier(path)
      init, adam, sgd = _TABLES[scheme](path, role.fans[0])
      spec = p.spec(path)
      leaf = params
      for key in path.split("/"):
        leaf = leaf[key]
      msg = f"{scheme} {forward} {path}"
      if init is not None:
        self.assertAlmostEqual(a * spec.init_std / init, 1.0, places=12, msg=msg)
        # The drawn weights: their std times A (sampling error of 1,280 to 65,536 draws: < 6%).
        self.assertAlmostEqual(a * float(jnp.std(leaf)) / init, 1.0, delta=0.06, msg=msg)
      # The optimizers as built: Adam's first step is lr·C·sign(g), SGD's lr·C·g; effective A·C and A²·C.
      # (float32 bias corrections: 1 − 0.999 is 1.3e-5 off in float32, so Adam's step is within 1e-5 of lr·C.)
      module, name = path.split("/")
      self.assertAlmostEqual(a * adam_steps[module][name] / adam, 1.0, places=4, msg=msg)
      self.assertAlmostEqual(a * a * sgd_steps[module][name] / sgd, 1.0, places=5, msg=msg)
    if forward == "readout" and scheme == "mup":
      self.assertEqual(p.multiplier("readout/kernel"), 1 / M)  # mup's MuReadout: 1/width_mult
    else:
      self.assertEqual(p.multiplier("readout/kernel"), 1.0)

  def test_biases_and_gains_are_kept(self):
    p = scaling.parametrize(_roles(), "mup")
    params = jax.tree.map(lambda x: x + 0.5, _params())
    new = p.init(jax.random.key(1), params)
    chex.assert_trees_all_equal(new["ln"], params["ln"])
    chex.assert_trees_all_equal(new["readout"]["bias"], params["readout"]["bias"])

  def test_eps_factors(self):
    # ε under eps_scaling="mup" is ε/m (CompleteP, Table 1), divided by a folded multiplier A (w' = A·w makes the
    # gradient 1/A times as large, so ε/A keeps Adam's update the same): the folded readout's 1/m cancels.
    folded = scaling.parametrize(_roles(), "mup")
    explicit = scaling.parametrize(_roles(), "mup", forward="readout")
    self.assertAlmostEqual(folded.eps_factor("fc_hidden/kernel", "mup"), 1 / M)
    self.assertAlmostEqual(folded.eps_factor("readout/kernel", "mup"), 1.0)
    self.assertAlmostEqual(folded.eps_factor("readout/kernel"), M)
    self.assertAlmostEqual(explicit.eps_factor("readout/kernel", "mup"), 1 / M)
    self.assertAlmostEqual(explicit.eps_factor("readout/bias", "mup"), 1.0)  # fixed: m = 1


class InitTest(absltest.TestCase):

  def test_rescale_keeps_the_initializer(self):
    # Flax's truncated-normal init rescaled: std exactly B (μP hidden: 1/√256), the same draws up to one factor.
    p = scaling.parametrize(_roles(), "mup")
    params = _params()
    params["fc_hidden"]["kernel"] = jax.random.truncated_normal(jax.random.key(5), -2.0, 2.0, (TARGET, TARGET))
    new = p.rescale(params)
    w, old = np.asarray(new["fc_hidden"]["kernel"]), np.asarray(params["fc_hidden"]["kernel"])
    self.assertAlmostEqual(float(np.std(w)), 1 / 16, places=6)
    ratio = (w - w.mean()) / (old - old.mean())
    np.testing.assert_allclose(ratio, np.full_like(ratio, ratio.flat[0]), rtol=1e-3)
    chex.assert_trees_all_equal(new["ln"], params["ln"])
    zero = scaling.parametrize(_roles(), param_lib.get_parametrization("mup", zero_readout=True))
    np.testing.assert_array_equal(zero.rescale(params)["readout"]["kernel"], 0.0)


class AttentionTest(absltest.TestCase):

  def test_attention_fn_in_flax_attention(self):
    # μP's logits α·q·k/d_head with α = √base_head_dim (Tensor Programs V §4) in Flax's attention module
    # against jax.nn.dot_product_attention with that scale on the module's own projections.
    p = scaling.parametrize(_roles(), param_lib.get_parametrization("mup", base_head_dim=4))
    module = nn.MultiHeadDotProductAttention(num_heads=2, qkv_features=32, attention_fn=p.attention_fn())
    x = jax.random.normal(jax.random.key(6), (1, 5, 32))
    variables = module.init(jax.random.key(7), x)
    got = module.apply(variables, x)
    w = variables["params"]
    q, k, v = (jnp.einsum("btd,dnh->btnh", x, w[n]["kernel"]) + w[n]["bias"] for n in ("query", "key", "value"))
    ctx = jax.nn.dot_product_attention(q, k, v, scale=math.sqrt(4) / 16)
    want = jnp.einsum("btnh,nhd->btd", ctx, w["out"]["kernel"]) + w["out"]["bias"]
    chex.assert_trees_all_close(got, want, atol=1e-5)


def _train(model, params, opt, steps=20):
  """The losses of ``steps`` steps on one fixed regression batch."""
  x = jax.random.normal(jax.random.key(3), (16, D_IN))
  y = jnp.sin(x @ jax.random.normal(jax.random.key(4), (D_IN, D_OUT)))
  loss_fn = lambda q: jnp.mean((model.apply({"params": q}, x) - y) ** 2)

  def step(carry, _):
    params, state = carry
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, state = opt.update(grads, state, params)
    return (optax.apply_updates(params, updates), state), loss

  return jax.lax.scan(step, (params, opt.init(params)), None, length=steps)[1]


class FoldedReadoutTest(parameterized.TestCase):
  """μP with mup's explicit readout multiplier (ReadoutDense, 1/m) and the same with it folded into init and LR."""

  @parameterized.parameters(("adam", 1e-2), ("sgd", 0.5))
  def test_same_trajectory(self, name, lr):
    roles = _roles(target=128)
    explicit = scaling.parametrize(roles, "mup", forward="readout")
    folded = scaling.parametrize(roles, "mup")
    a = explicit.multiplier("readout/kernel")
    self.assertEqual(a, 0.25)
    params = _params(128)
    runs = []
    for p, model in ((explicit, _Mlp(128, readout_mult=a)), (folded, _Mlp(128))):
      runs.append(jax.jit(lambda q, p=p, model=model: _train(model, q, p.optimizer(name, lr)))(
          p.init(jax.random.key(1), params)))
    explicit_losses, folded_losses = np.asarray(runs[0]), np.asarray(runs[1])
    self.assertLess(explicit_losses[-1], 0.8 * explicit_losses[0])  # it trains
    # One multiplier applied in two places: the same trajectory up to float32 roundings in another order, over
    # 20 steps of a forward and backward pass through 3 layers, a LayerNorm and a tanh each (about 8 dependent operations).
    np.testing.assert_allclose(folded_losses, explicit_losses, rtol=float_tolerance.rtol(depth=8, steps=20))
    if name != "adam":
      return
    # A different readout (the law before: std 1/√n_in with multiplier 1/m) is not the same trajectory.
    wrong = _Mlp(128, readout_mult=a)
    wrong_params = explicit.init(jax.random.key(1), params)
    wrong_params["readout"]["kernel"] = wrong_params["readout"]["kernel"] * math.sqrt(32 / 128)
    other = np.asarray(jax.jit(lambda q: _train(wrong, q, explicit.optimizer(name, lr)))(wrong_params))
    self.assertGreater(np.max(np.abs(other - explicit_losses) / explicit_losses), 1e-3)


  def test_adam_atan2_step(self):
    # Adam-atan2 is invariant to the gradient's scale: the folded step of A·w is A times the explicit step of w.
    roles = _roles(target=128)
    explicit, folded = (scaling.parametrize(roles, "mup", forward=f) for f in ("readout", "fold"))
    a = explicit.multiplier("readout/kernel")
    x = jax.random.normal(jax.random.key(3), (16, D_IN))
    steps = []
    for p, model in ((explicit, _Mlp(128, readout_mult=a)), (folded, _Mlp(128))):

      @jax.jit
      def step(params, p=p, model=model):
        grads = jax.grad(lambda q: jnp.mean(model.apply({"params": q}, x) ** 2))(params)
        opt = p.optimizer("adam_atan2", 1e-2)
        return opt.update(grads, opt.init(params), params)[0]["readout"]["kernel"]

      steps.append(step(p.init(jax.random.key(1), _params(128))))
    chex.assert_trees_all_close(steps[1], a * steps[0], rtol=1e-5)


class OptimizerTest(parameterized.TestCase):

  @parameterized.parameters(("adam", optax.adam), ("sgd", optax.sgd))
  def test_scale_lr_chains_after_any_optax_optimizer(self, name, make):
    # optax's own optimizer followed by scale_lr = the optimizer this module builds (one ε: explicit form).
    p = scaling.parametrize(_roles(), "mup", forward="readout")
    params = p.init(jax.random.key(1), _params())
    grads = jax.tree.map(lambda x: jax.random.normal(jax.random.key(x.size), x.shape), params)
    chained = optax.chain(make(1e-2), p.scale_lr(name))
    built = p.optimizer(name, 1e-2)
    got, _ = chained.update(grads, chained.init(params), params)
    want, _ = built.update(grads, built.init(params), params)
    chex.assert_trees_all_close(got, want, rtol=1e-6)

  def test_weight_decay_is_not_scaled(self):
    # AdamW: the decay of a decayed matrix is lr·wd·w whatever its LR multiplier (assemble_optimizer's rule).
    p = scaling.parametrize(_roles(), "mup")
    params = p.init(jax.random.key(1), _params())
    opt = p.optimizer("adamw", 1e-2, weight_decay=0.1)
    zero = jax.tree.map(jnp.zeros_like, params)
    updates, _ = opt.update(zero, opt.init(params), params)
    chex.assert_trees_all_close(updates["fc_hidden"]["kernel"], -1e-3 * params["fc_hidden"]["kernel"], rtol=1e-5)
    chex.assert_trees_all_close(updates["ln"]["scale"], jnp.zeros_like(params["ln"]["scale"]))

  def test_learning_rate_can_be_traced(self):
    p = scaling.parametrize(_roles(), "mup")
    params = _params()

    def first_update(lr):
      opt = p.optimizer("sgd", lr)
      return opt.update(jax.tree.map(jnp.ones_like, params), opt.init(params), params)[0]["fc_hidden"]["kernel"]

    got = jax.vmap(first_update)(jnp.array([0.1, 0.2]))
    np.testing.assert_allclose(got[:, 0, 0], [-0.1, -0.2], rtol=1e-6)  # hidden SGD multiplier 1


class NnxTest(absltest.TestCase):

  def test_nnx_mlp(self):
    abstract = lambda w: nnx.eval_shape(lambda: _NnxMlp(w, nnx.Rngs(0)))
    roles = scaling.infer_kinds(abstract(BASE), abstract(DELTA), abstract(TARGET))
    p = scaling.parametrize(roles, "mup", forward="readout")
    linen = scaling.parametrize(_roles(), "mup", forward="readout")
    chex.assert_trees_all_equal(p.specs(), linen.specs())
    model = _NnxMlp(TARGET, nnx.Rngs(0), readout_mult=p.multiplier("readout/kernel"))
    nnx.update(model, p.init(jax.random.key(1), nnx.state(model, nnx.Param)))
    self.assertAlmostEqual(float(jnp.std(model.fc_hidden.kernel[...])) * math.sqrt(TARGET), 1.0, delta=0.05)
    optimizer = nnx.Optimizer(model, p.optimizer("adam", 1e-3), wrt=nnx.Param)
    before = model.fc_hidden.kernel[...]
    x = jax.random.normal(jax.random.key(2), (8, D_IN))
    grads = nnx.grad(lambda m: jnp.mean(m(x) ** 2))(model)
    optimizer.update(model, grads)
    step = jnp.abs(model.fc_hidden.kernel[...] - before)
    self.assertAlmostEqual(float(jnp.max(step)) / 1e-3, 1 / M, places=4)  # Adam's first step: lr / m


class DepthTest(absltest.TestCase):

  def test_completep(self):
    # CompleteP (Dey et al. 2025, Table 1) at 4× the base depth, α = 1: branches × 1/4, in-block Adam LRs
    # × m_L^(α−1) = 1, ε × m_L^−α in the blocks; depth-μP (α = 1/2): Adam LRs × 1/2 in blocks, none outside.
    roles = _roles(blocks="fc_hidden/*")
    for alpha, adam in ((1.0, 1.0), (0.5, 0.5)):
      p = scaling.parametrize(roles, param_lib.get_parametrization("mup", depth_alpha=alpha, base_depth=2, depth=8))
      self.assertEqual(p.residual_multiplier, 4.0**-alpha)
      self.assertAlmostEqual(p.spec("fc_hidden/kernel").lr_adam, adam / M)
      self.assertAlmostEqual(p.spec("fc_hidden/bias").lr_adam, adam)
      self.assertAlmostEqual(p.spec("ln/scale").lr_adam, 1.0)  # final_norm: outside the blocks
      self.assertAlmostEqual(p.spec("fc_in/kernel").lr_adam, 1.0)
      self.assertAlmostEqual(p.eps_factor("fc_hidden/kernel", "mup"), 4.0**-alpha / M)

  def test_hidden_outside_blocks(self):
    depth = param_lib.get_parametrization("mup", depth_alpha=1.0, depth=4)
    with self.assertRaisesRegex(ValueError, r"'fc_hidden/kernel' is outside the blocks.*blocks=\[\.\.\., 'fc_hidden\*'\]"):
      scaling.parametrize(_roles(blocks="ln/*"), depth)
    # The form the message shows, pasted, is accepted.
    scaling.parametrize(_roles(blocks=["ln/*", "fc_hidden*"]), depth)


class ErrorsTest(parameterized.TestCase):

  def test_bad_arguments(self):
    roles = _roles()
    with self.assertRaisesRegex(ValueError, "forward must be one of fold, readout, model"):
      scaling.parametrize(roles, "mup", forward="wrapper")
    with self.assertRaisesRegex(ValueError, "u-μP.*forward='model'"):
      scaling.parametrize(roles, "umup")
    with self.assertRaisesRegex(ValueError, "zero_query needs to know the query projections"):
      scaling.parametrize(roles, param_lib.get_parametrization("mup", zero_query=True))
    with self.assertRaisesRegex(TypeError, "roles must be the Roles"):
      scaling.parametrize({"a": "hidden"}, "mup")
    with self.assertRaisesRegex(ValueError, "unknown parametrization"):
      scaling.parametrize(roles, "mu")
    p = scaling.parametrize(roles, "mup")
    with self.assertRaisesRegex(ValueError, "no parameter 'fc/kernel'"):
      p.spec("fc/kernel")
    with self.assertRaisesRegex(ValueError, "eps_scaling applies to adam and adamw only"):
      p.optimizer("sgd", 0.1, eps_scaling="mup")
    with self.assertRaisesRegex(ValueError, "no tied embedding"):
      _ = p.tied_readout_multiplier

  def test_tied_readout_multiplier(self):
    shapes = lambda w: {"embed": {"embedding": jax.ShapeDtypeStruct((50, w), jnp.float32)},
                        "hidden": {"kernel": jax.ShapeDtypeStruct((w, w), jnp.float32)}}
    roles = scaling.infer_kinds(shapes(32), shapes(64), shapes(256), tied_embedding="embed/embedding")
    self.assertEqual(scaling.parametrize(roles, "mup").tied_readout_multiplier, 1 / 8)  # MuSharedReadout: 1/m


class UmupExampleTest(absltest.TestCase):

  def test_runs_at_tiny_size(self):
    path = pathlib.Path(__file__).resolve().parents[1] / "examples" / "umup_mlp.py"
    spec = importlib.util.spec_from_file_location("umup_mlp_example", path)
    example = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = example  # flax's module dataclasses look their module up
    spec.loader.exec_module(example)
    result = example.run((16, 64), depth=2, steps=30, batch_size=32, learning_rate=0.3)
    for width, row in result.items():
      self.assertTrue(row["scales_match"], width)  # the ops' forward scales are u-μP's multipliers A
      for name, rms in row["init_rms"].items():  # unit scale at init (GELU's interpolated scale: within 1.5×)
        self.assertBetween(rms, 0.67, 1.5, msg=f"{width} {name}")
      self.assertLess(np.mean(row["loss"][-5:]), 0.8 * row["loss"][0])
    # u-μP's Adam LRs (Blake et al. 2024, §4): 1/√fan_in for the input and hidden matrices, 1 for the readout.
    x0 = jnp.zeros((32, example.D_IN))
    shapes = lambda w: jax.eval_shape(lambda: example.UnitMlp(w, 2).init(jax.random.key(0), x0))["params"]
    p = scaling.parametrize(scaling.infer_kinds(shapes(16), shapes(32), shapes(64)), "umup", forward="model")
    self.assertEqual([p.spec(k).lr_adam for k in ("dense_0/kernel", "dense_1/kernel", "readout/kernel")],
                     [example.D_IN**-0.5, 64**-0.5, 1.0])


if __name__ == "__main__":
  absltest.main()
