"""Models written with other libraries (Equinox, Haiku) through the μP engine, and what the coordinate check says of
modules it cannot measure or whose change vanishes.

Every expectation is derived by hand here: the role of each parameter from how the layer uses it (an Equinox
``Linear`` stores its weight [out, in] and computes ``weight @ x``, so its fan-in is axis 1; Haiku's ``Linear`` stores
``w`` [in, out]; an ``Embedding`` is a table [vocab, features] whose rows are looked up), the RMS of a float32 output
holding ``finfo(float32).min`` (its square overflows: inf), and the slope of a readout whose input the model
multiplies by width^−1/2 (Adam's first update moves each weight by ±η whatever the gradient's size, so the product's
change is that multiplier times the change without it: slope −1/2 more).
"""

import ast
import re
import warnings

from absl.testing import absltest
from absl.testing import parameterized
import equinox as eqx
import flax.linen as nn
import haiku as hk
import jax
import jax.numpy as jnp
from jax import lax

import scaling
from scaling.mup import usage
from scaling.runs import results
from scaling.studies.coord_check import verdicts as coord_verdicts

VOCAB, SEQ, D_IN, D_OUT = 11, 8, 5, 3
# The slopes are least-squares fits of log2 RMS against log2 width; over three widths equally spaced in log2 the
# middle one has zero weight (the slope is half the difference of the ends), so 16 and 64 give the slopes and
# verdicts of 16, 32, 64 with one program fewer to compile per scheme.
WIDTHS = (16, 64)
BASE = WIDTHS[0]


def _eqx_pure(build):
  """A ``scaling.PureModel`` of the Equinox module ``build(key)`` returns: its arrays (``eqx.partition``) as the
  parameters, ``eqx.combine`` with the rest to call it."""
  _, static = eqx.partition(build(jax.random.key(0)), eqx.is_array)
  return scaling.PureModel(lambda key: eqx.partition(build(key), eqx.is_array)[0],
                           lambda params, *inputs: eqx.combine(params, static)(*inputs))


class _EqxLanguageModel(eqx.Module):
  """One token at a time: ``Embedding`` → ``Linear`` → ``MLP`` (one hidden layer) → logits over the vocabulary."""

  embed: eqx.nn.Embedding
  mix: eqx.nn.Linear
  head: eqx.nn.MLP

  def __init__(self, width, key):
    k1, k2, k3 = jax.random.split(key, 3)
    self.embed = eqx.nn.Embedding(VOCAB, width, key=k1)
    self.mix = eqx.nn.Linear(width, width, key=k2)
    self.head = eqx.nn.MLP(width, VOCAB, width, depth=1, key=k3)

  def __call__(self, token):
    return self.head(jax.nn.relu(self.mix(self.embed(token))))


def eqx_language_model(width):
  return _eqx_pure(lambda key: _EqxLanguageModel(width, key))


def token_loss(model, batch):
  """Next-token cross-entropy, the model vmapped over the tokens (as Equinox models are called)."""
  logits = jax.vmap(model)(batch[:-1])
  return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), batch[1:, None], axis=-1))


TOKENS = jax.random.randint(jax.random.key(3), (SEQ + 1,), 0, VOCAB)

# Hand-derived: (kind, input axes). An Equinox Linear's weight is [out, in] (fan-in axis 1); the table is looked up
# along its vocabulary axis 0; the last bias is over the vocabulary, which does not grow: fixed.
EQX_LM_ROLES = {
    "embed/weight": ("embedding", (0,)),
    "mix/weight": ("hidden", (1,)), "mix/bias": ("bias", None),
    "head/layers/0/weight": ("hidden", (1,)), "head/layers/0/bias": ("bias", None),
    "head/layers/1/weight": ("readout", (1,)), "head/layers/1/bias": ("fixed", None),
}


def eqx_mlp(width):
  return _eqx_pure(lambda key: eqx.nn.MLP(D_IN, D_OUT, width, depth=2, key=key))


def haiku_mlp(width):
  f = hk.transform(lambda x: hk.nets.MLP([width, width, D_OUT], name="mlp")(x))
  return scaling.PureModel(lambda key: f.init(key, jnp.zeros((1, D_IN))), lambda params, x: f.apply(params, None, x))


def vector_mse(model, batch):
  return jnp.mean((jax.vmap(model)(batch["x"]) - batch["y"]) ** 2)


def batch_mse(model, batch):
  return jnp.mean((model(batch["x"]) - batch["y"]) ** 2)


def regression_batch(n=16):
  kx, ky = jax.random.split(jax.random.key(7))
  return {"x": jax.random.normal(kx, (n, D_IN)), "y": jax.random.normal(ky, (n, D_OUT))}


MLP_ROLES = {
    # input [D_IN → width], hidden [width → width], readout [width → D_OUT]; the readout's bias over D_OUT is fixed.
    "eqx": {"layers/0/weight": ("input", (1,)), "layers/0/bias": ("bias", None),
            "layers/1/weight": ("hidden", (1,)), "layers/1/bias": ("bias", None),
            "layers/2/weight": ("readout", (1,)), "layers/2/bias": ("fixed", None)},
    "haiku": {"mlp/~/linear_0/w": ("input", (0,)), "mlp/~/linear_0/b": ("bias", None),
              "mlp/~/linear_1/w": ("hidden", (0,)), "mlp/~/linear_1/b": ("bias", None),
              "mlp/~/linear_2/w": ("readout", (0,)), "mlp/~/linear_2/b": ("fixed", None)},
}
MLPS = {"eqx": (eqx_mlp, vector_mse), "haiku": (haiku_mlp, batch_mse)}


def _roles(model, loss, batch, width=4 * BASE, **kw):
  wp = scaling.WidthParametrization(model, loss, batch, "mup", base_width=BASE, **kw)
  return {p: (r.kind, r.in_axes) for p, r in wp.roles(width).items()}


class LookupTest(absltest.TestCase):
  """A gather's looked-up axes are those its ids select one entry of; an axis read whole is not looked up."""

  def test_vmapped_row_lookups_look_up_the_vocabulary_only(self):
    table = {"w": jnp.zeros((VOCAB, 6))}
    ids = jnp.arange(4)
    ways = {"eqx.nn.Embedding": lambda p, i: eqx.nn.Embedding(weight=p["w"])(i),
            "dynamic_slice": lambda p, i: lax.dynamic_slice(p["w"], (i, 0), (1, 6))[0],
            "dynamic_index": lambda p, i: lax.dynamic_index_in_dim(p["w"], i, keepdims=False),
            "indexing": lambda p, i: p["w"][i]}
    for name, row in ways.items():
      with self.subTest(name):
        use = usage.read_usage(lambda p, i, row=row: jax.vmap(lambda t: row(p, t))(i).sum(), table, ids)["w"]
        self.assertEqual(use.lookup_axes, frozenset({0}))

  def test_a_window_is_a_slice_of_the_parameter(self):
    # vmap of a 2-row window: the gather selects no single entry of any axis; the window is then summed over its
    # rows against x, so axis 0 of w is the fan-in (and its features the fan-out).
    fn = lambda p, starts, x: jnp.einsum("nk,nkd->nd", x, jax.vmap(
        lambda s: lax.dynamic_slice_in_dim(p["w"], s, 2, axis=0))(starts)).sum()
    use = usage.read_usage(fn, {"w": jnp.zeros((8, 5))}, jnp.arange(3), jnp.ones((3, 2)))["w"]
    self.assertIsNone(use.lookup_axes)
    self.assertEqual(use.fan_in_axes, frozenset({0}))


class RolesTest(parameterized.TestCase):

  def test_equinox_language_model_needs_no_override(self):
    self.assertEqual(_roles(eqx_language_model, token_loss, TOKENS), EQX_LM_ROLES)

  @parameterized.parameters("eqx", "haiku")
  def test_mlp(self, name):
    model, loss = MLPS[name]
    self.assertEqual(_roles(model, loss, regression_batch()), MLP_ROLES[name])

  def test_equinox_language_model_through_the_coordinate_check(self):
    result = scaling.coord_check(eqx_language_model, token_loss, TOKENS, schemes=("mup",), widths=WIDTHS,
                                 steps=1, seeds=(0, 1), progress=False)
    roles = {v["layer"]: v["role"] for v in result.verdicts}
    # The recorded products: the lookup, the Linear's and each MLP layer's (a parameter's path without its key).
    self.assertEqual(roles, {"embed": "embedding", "mix": "hidden", "head/layers/0": "hidden",
                             "head/layers/1": "readout"})


def _pasted(message):
  """The first ``overrides={...}`` an error message suggests, as the dict it spells."""
  found = re.search(r"overrides=(\{[^{}]*\})", message)
  assert found, message
  return ast.literal_eval(found.group(1))


class SuggestedOverrideTest(absltest.TestCase):
  """Every error that asks for an override shows a form that works when pasted."""

  def test_a_vocabulary_that_grows_with_width(self):
    # The table has `width` rows: its looked-up axis grows. The message names the form for this parameter.
    model = lambda width: _eqx_pure(lambda key: _Rows(width, key))
    ids = jnp.arange(6) % 4
    with self.assertRaises(ValueError) as caught:
      _roles(model, lambda m, b: jnp.mean(jax.vmap(m)(b) ** 2), ids)
    message = str(caught.exception)
    self.assertIn("overrides={'embed/weight': ('embedding', (0,))}", message)
    roles = _roles(model, lambda m, b: jnp.mean(jax.vmap(m)(b) ** 2), ids, overrides=_pasted(message))
    self.assertEqual(roles["embed/weight"], ("embedding", (0,)))
    self.assertEqual(roles["out/weight"], ("readout", (1,)))

  def test_a_kernel_contracted_over_different_axes(self):
    # w [D_IN, width] is used as x @ w and as y @ w.T: which axes are its input cannot be read.
    fn = lambda p, x, y: (x @ p["w"] @ p["o"]).sum() + (y @ p["w"].T).sum()
    shapes = lambda w: {"w": jnp.zeros((D_IN, w)), "o": jnp.zeros((w, D_OUT))}
    use = usage.read_usage(fn, shapes(BASE), jnp.ones((2, D_IN)), jnp.ones((2, BASE)))
    with self.assertRaises(ValueError) as caught:
      scaling.infer_kinds(shapes(BASE), shapes(2 * BASE), usage=use)
    message = str(caught.exception)
    self.assertIn("overrides={'w': ('input', (0,))}", message)
    roles = scaling.infer_kinds(shapes(BASE), shapes(2 * BASE), usage=use, overrides=_pasted(message))
    self.assertEqual((roles["w"].kind, roles["w"].fans), ("input", (D_IN, 2 * BASE)))

  def test_a_kernel_whose_input_axes_its_shape_does_not_tell(self):
    base, delta = {"w": {"kernel": jnp.zeros((8, 2, 4))}}, {"w": {"kernel": jnp.zeros((16, 4, 4))}}
    with self.assertRaises(ValueError) as caught:
      scaling.infer_kinds(base, delta)
    roles = scaling.infer_kinds(base, delta, overrides=_pasted(str(caught.exception)))
    self.assertEqual((roles["w/kernel"].kind, roles["w/kernel"].fans), ("hidden", (16, 16)))


class _Rows(eqx.Module):
  """A table of ``width`` rows (its vocabulary grows with width), then a readout."""

  embed: eqx.nn.Embedding
  out: eqx.nn.Linear

  def __init__(self, width, key):
    k1, k2 = jax.random.split(key)
    self.embed = eqx.nn.Embedding(width, width, key=k1)
    self.out = eqx.nn.Linear(width, D_OUT, key=k2)

  def __call__(self, token):
    return self.out(self.embed(token))


class _MaskedBias(nn.Module):
  """A learned [SEQ, SEQ] position bias plus a causal mask of finfo(float32).min, returned as T5 returns it."""

  @nn.compact
  def __call__(self):
    bias = self.param("rel", nn.initializers.normal(0.1), (SEQ, SEQ))
    return bias + jnp.where(jnp.tril(jnp.ones((SEQ, SEQ))) > 0, 0.0, jnp.finfo(jnp.float32).min)


class _MixedMLP(nn.Module):
  """An MLP over a sequence whose positions are mixed by softmax(masked position bias)."""

  width: int

  @nn.compact
  def __call__(self, x):
    h = nn.relu(nn.Dense(self.width, name="inp")(x))
    h = nn.relu(nn.Dense(self.width, name="hid")(h))
    h = jnp.einsum("st,btw->bsw", jax.nn.softmax(_MaskedBias(name="pos")(), axis=-1), h)
    return nn.Dense(D_OUT, name="out")(h)


class NotMeasurableTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    kx, ky = jax.random.split(jax.random.key(5))
    batch = {"x": jax.random.normal(kx, (4, SEQ, D_IN)), "y": jax.random.normal(ky, (4, SEQ, D_OUT))}
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      cls.result = scaling.coord_check(_MixedMLP, batch_mse, batch, schemes=("sp", "mup"), widths=WIDTHS, steps=2,
                                       seeds=(0, 1), progress=False)
    cls.runtime_warnings = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]

  def test_the_masked_module_is_not_measurable(self):
    self.assertEqual(float(jnp.sqrt(jnp.mean(jnp.square(jnp.float32(jnp.finfo(jnp.float32).min))))), float("inf"))
    for v in self.result.verdicts:
      if v["layer"] == "pos":
        self.assertEqual(v["verdict"], coord_verdicts.NOT_MEASURABLE)
        self.assertEqual(v["cause"], f"its output holds non-finite values (RMS inf at width {WIDTHS[0]}, step 0)")
      else:
        self.assertNotEqual(v["verdict"], coord_verdicts.NOT_MEASURABLE, v)
    self.assertEqual({v["layer"] for v in self.result.unmeasurable}, {"pos"})
    self.assertEmpty(self.runtime_warnings)

  def test_the_rest_is_judged_and_drawn(self):
    sp = {v["layer"]: v["verdict"] for v in self.result.verdicts if v["parametrization"] == "sp"}
    self.assertEqual(sp["out"], coord_verdicts.BREAKS)  # SP's readout still grows after updates
    text = self.result.verdict_markdown("Verdicts:")
    self.assertIn("| sp | pos | fixed | – | – | not measurable | its output holds non-finite values", text)
    self.assertIn("1 not measurable, left out of the figure (pos: RMS not finite)", text)
    for delta in (False, True):
      path = self.create_tempdir().full_path + "/cc.png"
      self.result.write_figure(path, delta=delta)
      with open(path, "rb") as f:
        self.assertEqual(f.read(4), b"\x89PNG")

  def test_rows_read_back_give_the_same_verdicts(self):
    # A results file holds None where a value was not finite (out_dir's results.jsonl).
    rows = results.to_jsonable(self.result.rows)
    self.assertIsNone(next(r for r in rows if r["layer"] == "pos")["rms"])
    again = coord_verdicts.from_rows(rows, self.result.steps)
    pos = [v for v in again.verdicts if v["layer"] == "pos"]
    self.assertEqual({v["verdict"] for v in pos}, {coord_verdicts.NOT_MEASURABLE})
    self.assertIn("RMS not finite at width 16, step 0", pos[0]["cause"])


class _ScaledLogits(nn.Module):
  """An MLP whose readout sees its input times ``multiplier(width)`` inside the model (T5 multiplies its tied
  logits' input by d_model^−1/2), the readout zero-initialized (mup's readout_zero_init: no initial part)."""

  width: int
  multiplier: float = 1.0

  @nn.compact
  def __call__(self, x):
    h = nn.relu(nn.Dense(self.width, name="inp")(x))
    h = nn.relu(nn.Dense(self.width, name="hid")(h))
    return nn.Dense(D_OUT, use_bias=False, kernel_init=nn.initializers.zeros, name="out")(h * self.multiplier)


class VanishingChangeTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    # Every target 1: at Adam's first update each readout weight moves by η/m against the sign of its feature's
    # gradient, the same for every sample (relu features are ≥ 0), so the product's change is exactly c·η·base·mean(h)
    # per sample: Θ(1) times the model's multiplier c. Sixteen seeds (vmapped, nearly free) average out the spread
    # of mean(h) between draws at these widths.
    batch = {**regression_batch(), "y": jnp.ones((16, D_OUT))}
    kw = dict(schemes=("mup",), widths=WIDTHS, steps=2, seeds=tuple(range(16)), progress=False)
    cls.hidden = scaling.coord_check(lambda w: _ScaledLogits(w, w**-0.5), batch_mse, batch, **kw)
    cls.plain = scaling.coord_check(lambda w: _ScaledLogits(w), batch_mse, batch, **kw)

  def test_a_hidden_multiplier_makes_the_logits_change_vanish(self):
    # The same draws with and without c = width^−1/2: the step-1 change differs by c exactly, slope −1/2.
    slope = self.hidden.slope("out", 1, delta=True)
    own = self.plain.slope("out", 1, delta=True)
    self.assertAlmostEqual(slope - own, -0.5, places=3)
    self.assertLess(abs(own), 0.1)
    out = {v["layer"]: v for v in self.hidden.verdicts}["out"]
    self.assertEqual(out["verdict"], coord_verdicts.BREAKS)
    self.assertLess(out["slope_update"], -0.4)
    self.assertIn("vanishes with width", out["cause"])
    self.assertIn("lazy, as under NTK", out["cause"])
    self.assertIn("multiplier inside the model", out["cause"])
    self.assertFalse(self.hidden.ok)

  def test_without_it_the_readout_passes(self):
    out = {v["layer"]: v for v in self.plain.verdicts}["out"]
    self.assertEqual(out["verdict"], "ok", str(out))

  def test_the_criterion_names_both_directions(self):
    text = self.hidden.verdict_markdown("Verdicts:")
    self.assertIn("exceeds 0.1", text)
    self.assertIn("below −0.25", text)


class VanishingRuleTest(parameterized.TestCase):
  """Which modules' change is judged for vanishing: those whose weights μP moves by Θ(1), and only with the change."""

  def _verdict(self, role, update_slope, se=0.01, delta=True):
    slope_rows = [{"parametrization": "p", "layer": "m", "step": 0, "slope": 0.0, "slope_se": se}]
    update = [{"parametrization": "p", "layer": "m", "step": 1, "slope": update_slope, "slope_se": se}]
    return coord_verdicts.verdicts(slope_rows + ([] if delta else update), update if delta else (),
                                   roles=None if role is None else {"m": role})[0]

  @parameterized.parameters("embedding", "input", "hidden", "attn_q", "readout", "norm")
  def test_theta_one_roles(self, role):
    self.assertEqual(self._verdict(role, -0.5)["verdict"], coord_verdicts.BREAKS)
    self.assertEqual(self._verdict(role, -0.5, se=0.3)["verdict"], coord_verdicts.INCONCLUSIVE)
    self.assertEqual(self._verdict(role, -0.05)["verdict"], "ok")

  def test_the_vanishing_bound_is_halfway_to_ntk(self):
    # A finite-width part of a μP change (−0.16 ± 0.015, an nnx model's tied logits at widths 32–128) passes; a
    # change falling faster than halfway to NTK's −1/2 does not.
    self.assertEqual(self._verdict("readout", -0.16, se=0.015)["verdict"], "ok")
    self.assertEqual(self._verdict("readout", -0.3, se=0.01)["verdict"], coord_verdicts.BREAKS)

  @parameterized.parameters("fixed", None)
  def test_unknown_expectation_is_not_judged(self, role):
    self.assertEqual(self._verdict(role, -0.5)["verdict"], "ok")

  def test_rms_after_updates_is_not_judged_for_vanishing(self):
    self.assertEqual(self._verdict("readout", -0.5, delta=False)["verdict"], "ok")


if __name__ == "__main__":
  absltest.main()
