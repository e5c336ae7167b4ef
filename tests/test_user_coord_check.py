"""The coordinate check and learning-rate grid of a user's own Flax model (scaling.coord_check, scaling.transfer).

References: MLPs written here by hand, SP (Flax's defaults) and μP with the multipliers of Tensor Programs V
Table 8 (readout multiplier base/width with its init std fixed at the base, hidden Adam learning rate
η·base/width, input and readout at η); module outputs against numpy forward passes; a grid member against a
plain optax loop.
"""

import math

from absl.testing import absltest
from absl.testing import parameterized
import chex
import flax.linen as nn
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import optax

import scaling
from scaling.mup import user_model
from scaling.studies.coord_check import verdicts as coord_verdicts

D_IN, D_OUT, BASE = 8, 4, 32
WIDTHS = (32, 64, 128)
ROLES = {"input": "input", "hidden": "hidden", "readout": "readout"}


class SPMLP(nn.Module):
  """Standard parametrization: Flax's Dense layers (init std 1/√fan_in), one Adam learning rate."""

  width: int

  @nn.compact
  def __call__(self, x):
    h = nn.relu(nn.Dense(self.width, name="input")(x))
    h = nn.relu(nn.Dense(self.width, name="hidden")(h))
    return nn.Dense(D_OUT, name="readout")(h)


class MuReadout(nn.Module):
  """Tensor Programs V Table 8's readout (base/width) · h W, zero-initialized (mup's ``readout_zero_init``): with
  W's init std 1/√base the output at init shrinks like 1/√width and dominates the first steps at these widths."""

  features: int

  @nn.compact
  def __call__(self, h):
    w = self.param("kernel", nn.initializers.zeros, (h.shape[-1], self.features))
    return (BASE / h.shape[-1]) * (h @ w)


class MuMLP(nn.Module):
  """μP: input std 1/√d_in, hidden std 1/√width, the readout above."""

  width: int

  @nn.compact
  def __call__(self, x):
    n = self.width
    h = nn.relu(nn.Dense(n, kernel_init=nn.initializers.normal(1 / math.sqrt(D_IN)), name="input")(x))
    h = nn.relu(nn.Dense(n, kernel_init=nn.initializers.normal(1 / math.sqrt(n)), name="hidden")(h))
    return MuReadout(D_OUT, name="readout")(h)


class NnxMLP(nnx.Module):
  """The SP MLP in nnx."""

  def __init__(self, width, rngs):
    self.input = nnx.Linear(D_IN, width, rngs=rngs)
    self.hidden = nnx.Linear(width, width, rngs=rngs)
    self.readout = nnx.Linear(width, D_OUT, rngs=rngs)

  def __call__(self, x):
    return self.readout(nnx.relu(self.hidden(nnx.relu(self.input(x)))))


def mse(module, batch):
  return jnp.mean((module(batch["x"]) - batch["y"]) ** 2)


def sp_adam(width, params, lr):
  del width, params
  return optax.adam(lr)


def mup_adam(width, params, lr):
  """Adam with Tensor Programs V's per-layer learning rates: hidden kernel η·base/width, the rest η."""
  del params
  scale = {"input": {"kernel": 1.0, "bias": 1.0}, "hidden": {"kernel": BASE / width, "bias": 1.0},
           "readout": {"kernel": 1.0}}
  return optax.chain(optax.adam(lr), optax.stateless(lambda u, p=None: jax.tree.map(lambda a, s: a * s, u, scale)))


def make_batch(n=32):
  kx, ky = jax.random.split(jax.random.key(42))
  return {"x": jax.random.normal(kx, (n, D_IN)), "y": jax.random.normal(ky, (n, D_OUT))}


def np_forward(p, x):
  """The MLP's module outputs in numpy: input, hidden (before their relu) and readout."""
  x = np.asarray(x, np.float64)
  dense = lambda q, h: h @ np.asarray(q["kernel"], np.float64) + np.asarray(q["bias"], np.float64)
  a = dense(p["input"], x)
  b = dense(p["hidden"], np.maximum(a, 0))
  return {"input": a, "hidden": b, "readout": dense(p["readout"], np.maximum(b, 0))}


class CoordCheckTest(parameterized.TestCase):
  """One SP and one μP check (one compiled program per width each), read by every test."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    kw = dict(widths=WIDTHS, steps=3, learning_rate=1e-2, seeds=(0, 1, 2, 3), roles=ROLES, progress=False)
    cls.sp = scaling.coord_check(SPMLP, mse, make_batch(), sp_adam, name="sp", **kw)
    cls.mup = scaling.coord_check(MuMLP, mse, make_batch(), mup_adam, name="mup", **kw)

  def test_mup_is_flat(self):
    for layer in ("input", "hidden", "readout", "model"):
      for step in range(1, 4):
        self.assertLess(abs(self.mup.slope(layer, step)), 0.1, (layer, step))
    for layer in ("input", "hidden"):
      self.assertLess(abs(self.mup.slope(layer, 0)), 0.1, layer)
    self.assertIsNone(self.mup.slope("readout", 0))  # zero at initialization: no slope
    self.assertTrue(self.mup.ok, self.mup.broken)

  def test_sp_readout_grows(self):
    self.assertLess(abs(self.sp.slope("readout", 0)), 0.1)
    self.assertGreater(self.sp.slope("readout", 1), 0.5)
    self.assertGreater(self.sp.slope("hidden", 1, delta=True), 0.5)
    self.assertFalse(self.sp.ok)
    broken = {v["layer"]: v["cause"] for v in self.sp.broken}
    self.assertIn("1/width output multiplier", broken["readout"])
    self.assertIn("hidden weights not scaled by 1/width", broken["hidden"])
    self.assertNotIn("input", broken)

  def test_rows_and_outputs(self):
    both = coord_verdicts.combine(self.sp, self.mup)
    self.assertLen(both.rows, 2 * len(WIDTHS) * 4 * 4)  # parametrizations × widths × steps × modules
    self.assertEqual({r["layer"] for r in both.rows}, {"input", "hidden", "readout", "model"})
    for r in both.rows:  # no change at step 0; under SP every module has moved after one update
      if r["step"] == 0 or r["parametrization"] == "sp":
        self.assertEqual(r["delta_rms"] == 0.0, r["step"] == 0, r)
    text = both.verdict_markdown("Verdicts:")
    self.assertIn("| sp | readout | readout |", text)
    self.assertIn("- mup: every module within the tolerance", text)
    again = coord_verdicts.from_rows(both.rows, both.steps, roles=ROLES)
    self.assertEqual(again.verdicts, both.verdicts)
    path = self.create_tempdir().full_path + "/cc.png"
    both.write_figure(path)
    with open(path, "rb") as f:
      self.assertEqual(f.read(4), b"\x89PNG")


class LikelyCauseTest(parameterized.TestCase):

  @parameterized.parameters(
      ("readout", "update", 0.5, "like √width after updates: missing 1/width output multiplier"),
      ("hidden", "update", 1.0, "like width after updates: learning rate of the hidden weights not scaled"),
      ("hidden", "init", 0.5, "at initialization: init std not ∝ 1/√fan_in"),
      (None, "update", 0.3, "a layer inside or before it"),
  )
  def test_causes(self, role, when, slope, expected):
    self.assertIn(expected, coord_verdicts.likely_cause(role, when, slope))

  def test_roles_from_a_parameter_tree(self):
    tree = {"params": {"Dense_0": {"kernel": "hidden", "bias": "bias"}, "head": {"kernel": "readout"}}}
    self.assertEqual(coord_verdicts.module_roles(tree["params"]), {"Dense_0": "hidden", "head": "readout"})

  def test_roles_from_infer_kinds(self):
    shapes = lambda w: jax.eval_shape(SPMLP(w).init, jax.random.key(0), jnp.ones((2, D_IN)))["params"]
    roles = scaling.infer_kinds(shapes(16), shapes(32))
    self.assertEqual(coord_verdicts.module_roles(roles), ROLES)

  def test_verdict_thresholds(self):
    slope_rows = [{"parametrization": "p", "layer": "a", "step": 0, "slope": 0.05},
                  {"parametrization": "p", "layer": "a", "step": 1, "slope": 0.11},
                  {"parametrization": "p", "layer": "b", "step": 0, "slope": -0.5},
                  {"parametrization": "p", "layer": "b", "step": 1, "slope": 0.09}]
    got = {v["layer"]: v["verdict"] for v in coord_verdicts.verdicts(slope_rows, tolerance=0.1)}
    self.assertEqual(got, {"a": "breaks μP", "b": "ok"})
    # With the change since initialization given, it alone judges the steps after 0.
    delta_rows = [{**s, "slope": {"a": 0.05, "b": 0.3}[s["layer"]]} for s in slope_rows if s["step"] == 1]
    got = {v["layer"]: v["verdict"] for v in coord_verdicts.verdicts(slope_rows, delta_rows, tolerance=0.1)}
    self.assertEqual(got, {"a": "ok", "b": "breaks μP"})


class NoiseTest(absltest.TestCase):
  """A slope above the tolerance by less than two standard errors over the seeds is inconclusive."""

  def _rows(self, exponents):
    # One module, widths 16..64, each seed a power law width^a: the slope of the mean and the seeds' own slopes.
    rows = []
    for w in (16, 32, 64):
      seeds = [float(w) ** a for a in exponents]
      rows += [{"parametrization": "p", "width": w, "step": step, "layer": "m", "rms": 1.0, "rms_seeds": [1.0] * 2,
                "delta_rms": float(np.mean(seeds)) if step else 0.0, "delta_rms_seeds": seeds if step else None}
               for step in (0, 1)]
    return rows

  def test_standard_error_of_two_seeds(self):
    result = coord_verdicts.from_rows(self._rows([0.1, 0.5]), 1)
    # std (ddof 1) of the seeds' slopes 0.1 and 0.5 over √2: |0.5 − 0.1| / 2
    self.assertAlmostEqual(result.delta_slopes[-1]["slope_se"], 0.2, places=6)

  def test_inconclusive_then_breaks(self):
    noisy = coord_verdicts.from_rows(self._rows([0.0, 0.6]), 1).verdicts[0]   # slope ≈ 0.3, se 0.3
    self.assertEqual(noisy["verdict"], coord_verdicts.INCONCLUSIVE)
    clear = coord_verdicts.from_rows(self._rows([0.29, 0.31]), 1).verdicts[0]  # slope 0.3, se 0.01
    self.assertEqual(clear["verdict"], coord_verdicts.BREAKS)
    flat = coord_verdicts.from_rows(self._rows([0.0, 0.05]), 1).verdicts[0]
    self.assertEqual(flat["verdict"], "ok")


class UserModelTest(parameterized.TestCase):

  @parameterized.parameters("linen", "nnx")
  def test_captured_outputs_match_numpy(self, kind):
    factory = SPMLP if kind == "linen" else NnxMLP
    batch = make_batch(8)
    fm = user_model.functional_model(factory, mse, 16, batch)
    self.assertEqual(fm.kind, kind)
    params, state = fm.init(jax.random.key(3))
    loss, outs = jax.jit(fm.captured)(params, state, batch)
    want = np_forward(params, batch["x"])
    self.assertEqual(set(outs), {"input", "hidden", "readout", "model"})
    for name in ("input", "hidden", "readout"):
      np.testing.assert_allclose(outs[name], want[name], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(outs["model"], want["readout"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(loss, np.mean((want["readout"] - np.asarray(batch["y"])) ** 2), rtol=1e-4)

  def test_bad_inputs(self):
    with self.assertRaisesRegex(TypeError, "model must take the width"):
      user_model.model_kind(lambda: None)
    with self.assertRaisesRegex(ValueError, "widths must hold at least 2"):
      scaling.coord_check(SPMLP, mse, make_batch(), sp_adam, widths=(32,))
    with self.assertRaisesRegex(ValueError, "steps must be a positive int"):
      scaling.coord_check(SPMLP, mse, make_batch(), sp_adam, steps=0)
    with self.assertRaisesRegex(TypeError, "batches must be a batch"):
      user_model.materialize_batches("text", 2)
    with self.assertRaisesRegex(ValueError, "ran out after 1 of 3"):
      user_model.materialize_batches(iter([make_batch()]), 3)


class TransferTest(chex.TestCase):

  def test_grid_member_equals_a_plain_loop(self):
    batches = lambda t: jax.tree.map(lambda x: x + 0.01 * t, make_batch(16))
    log2_lrs, steps = (-8.0, -5.0), 6
    result = scaling.transfer(NnxMLP, mse, batches, sp_adam, widths=(16, 32), log2_lrs=log2_lrs, steps=steps,
                              seeds=(0, 1), average_last=2, progress=False)
    self.assertLen(result.rows, 2 * 2)
    # The reference: width 32, lr 2^-5, seed 1, trained by a plain optax loop.
    model = NnxMLP(32, nnx.Rngs(jax.random.key(1)))
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    tx = optax.adam(2.0**-5)
    opt_state = tx.init(params)
    loss_of = jax.jit(jax.value_and_grad(lambda p, b: mse(nnx.merge(graphdef, p, rest), b)))
    losses = []
    for t in range(steps):
      loss, grads = loss_of(params, batches(t))
      losses.append(float(loss))
      updates, opt_state = tx.update(grads, opt_state, params)
      params = optax.apply_updates(params, updates)
    row = next(r for r in result.rows if r["width"] == 32 and r["log2_lr"] == -5.0)
    np.testing.assert_allclose(row["final_loss_seeds"][1], np.mean(losses[-2:]), rtol=1e-4)
    np.testing.assert_allclose(row["initial_loss_seeds"][1], losses[0], rtol=1e-5)
    best = {o["width"]: o["log2_lr"] for o in result.optimum}
    for width in (16, 32):
      mine = [r for r in result.rows if r["width"] == width]
      self.assertEqual(best[width], min(mine, key=lambda r: r["final_loss"])["log2_lr"])
    self.assertIn("| model | 16 |", result.optimum_markdown("Optimum:"))


if __name__ == "__main__":
  absltest.main()
