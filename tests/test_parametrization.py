"""Tests for scaling.parametrization: the paper tables, μP = SP at m = 1, fans and param_specs."""

import itertools
import math

from absl.testing import absltest
from absl.testing import parameterized
import chex
import hypothesis
from hypothesis import strategies as st
import jax
import jax.numpy as jnp

from scaling import parametrization as P
from scaling import rules

_S = P.LayerSpec

# (scheme, kind, fan_in, fan_out, width) -> expected LayerSpec, all with base_width 64.
# Numbers worked out by hand from the paper tables written as formulas below (_REFERENCE), for particular fans
# and widths (e.g. 1/√256 = 0.0625, √2/32 = 0.0441941...): a check of those formulas at fixed points.
_CLOSED_FORM = [
    # SP
    ("sp", "embedding", 100, 256, 256, _S(1.0, 1.0, 1.0, 1.0)),
    ("sp", "hidden", 256, 1024, 256, _S(0.0625, 1.0, 1.0, 1.0)),
    ("sp", "hidden", 1024, 256, 256, _S(0.03125, 1.0, 1.0, 1.0)),
    ("sp", "hidden", 64, 256, 64, _S(0.125, 1.0, 1.0, 1.0)),
    ("sp", "attn_q", 256, 256, 256, _S(0.0625, 1.0, 1.0, 1.0)),
    ("sp", "attn_o", 512, 256, 256, _S(0.04419417382415922, 1.0, 1.0, 1.0)),
    ("sp", "readout", 256, 100, 256, _S(0.0625, 1.0, 1.0, 1.0)),
    ("sp", "bias", 1, 1024, 256, _S(0.0, 1.0, 1.0, 1.0)),
    ("sp", "norm", 1, 256, 256, _S(0.0, 1.0, 1.0, 1.0, init_mean=1.0)),
    # NTK, m = 4
    ("ntk", "embedding", 100, 256, 256, _S(1.0, 1.0, 0.5, 1.0)),
    ("ntk", "hidden", 256, 1024, 256, _S(1.0, 0.0625, 0.25, 1.0)),
    ("ntk", "hidden", 1024, 256, 256, _S(1.0, 0.03125, 0.25, 1.0)),
    ("ntk", "attn_k", 256, 256, 256, _S(1.0, 0.0625, 0.25, 1.0)),
    ("ntk", "readout", 256, 100, 256, _S(1.0, 0.0625, 0.5, 1.0)),
    ("ntk", "bias", 1, 1024, 256, _S(0.0, 1.0, 0.5, 1.0)),
    ("ntk", "norm", 1, 256, 256, _S(0.0, 1.0, 0.5, 1.0, init_mean=1.0)),
    # NTK, m = 1/4
    ("ntk", "hidden", 16, 64, 16, _S(1.0, 0.25, 4.0, 1.0)),
    ("ntk", "readout", 16, 100, 16, _S(1.0, 0.25, 2.0, 1.0)),
    ("ntk", "embedding", 100, 16, 16, _S(1.0, 1.0, 2.0, 1.0)),
    # muP, m = 4
    ("mup", "embedding", 100, 256, 256, _S(1.0, 1.0, 1.0, 4.0)),
    ("mup", "hidden", 256, 1024, 256, _S(0.0625, 1.0, 0.25, 1.0)),
    ("mup", "hidden", 1024, 256, 256, _S(0.03125, 1.0, 0.25, 1.0)),
    ("mup", "attn_q", 256, 256, 256, _S(0.0625, 1.0, 0.25, 1.0)),
    ("mup", "attn_v", 256, 256, 256, _S(0.0625, 1.0, 0.25, 1.0)),
    ("mup", "readout", 256, 100, 256, _S(0.0625, 0.25, 1.0, 4.0)),
    ("mup", "bias", 1, 1024, 256, _S(0.0, 1.0, 1.0, 4.0)),
    ("mup", "norm", 1, 256, 256, _S(0.0, 1.0, 1.0, 4.0, init_mean=1.0)),
    # muP, m = 2
    ("mup", "hidden", 128, 512, 128, _S(0.08838834764831845, 1.0, 0.5, 1.0)),
    ("mup", "readout", 128, 100, 128, _S(0.08838834764831845, 0.5, 1.0, 2.0)),
    ("mup", "embedding", 100, 128, 128, _S(1.0, 1.0, 1.0, 2.0)),
    ("mup", "bias", 1, 512, 128, _S(0.0, 1.0, 1.0, 2.0)),
    # u-muP (absolute fans; width only enters through them)
    ("umup", "embedding", 100, 256, 256, _S(1.0, 1.0, 0.0625, 0.0625)),
    ("umup", "hidden", 256, 1024, 256, _S(1.0, 0.0625, 0.0625, 0.0625)),
    ("umup", "hidden", 1024, 256, 256, _S(1.0, 0.03125, 0.03125, 0.03125)),
    ("umup", "attn_o", 256, 256, 256, _S(1.0, 0.0625, 0.0625, 0.0625)),
    ("umup", "readout", 256, 100, 256, _S(1.0, 1 / 256, 1.0, 1.0)),
    ("umup", "bias", 1, 1024, 256, _S(0.0, 1.0, 1.0, 1.0)),
    ("umup", "norm", 1, 256, 256, _S(0.0, 1.0, 1.0, 1.0, init_mean=1.0)),
    ("umup", "hidden", 64, 256, 64, _S(1.0, 0.125, 0.125, 0.125)),
    ("umup", "embedding", 100, 64, 64, _S(1.0, 1.0, 0.125, 0.125)),
]


# ---------------------------------------------------------------------------------------------------------------
# The parametrizations as the papers state them, written here as formulas (independently of the module).
#
# Every scheme is an abc-parametrization (Yang & Hu 2021, "Tensor Programs IV", §3): a weight is used as A·w with
# w ~ N(init_mean, B²) at init and trained with learning rate η·C. Each function returns the LayerSpec
# (B, A, C_adam, C_sgd, init_mean) of a parameter of ``kind`` with fan-in n_in and fan-out n_out at width multiplier
# m = width / base_width. Biases start at 0 and norm gains at 1 in every scheme (B = 0, A = 1).
# ---------------------------------------------------------------------------------------------------------------

_HIDDEN_LIKE = ("hidden", "attn_q", "attn_k", "attn_v", "attn_o")


def _vector_spec(kind, lr_adam, lr_sgd):
  return _S(init_std=0.0, multiplier=1.0, lr_adam=lr_adam, lr_sgd=lr_sgd, init_mean=1.0 if kind in ("norm", "final_norm") else 0.0)


def _sp_reference(kind, n_in, n_out, m):
  """SP: PyTorch/Flax defaults. Dense kernels W ~ N(0, 1/n_in) (fan-in, "LeCun" init), embedding tables N(0, 1)
  (``torch.nn.Embedding``), every multiplier 1 and one global learning rate: Tensor Programs IV §3 with
  a = 0, b = 1/2, c = 0 (the embedding's one-hot input has fan-in 1)."""
  del n_out, m
  if kind in P.VECTOR_KINDS:
    return _vector_spec(kind, 1.0, 1.0)
  b = 1.0 if kind == "embedding" else 1.0 / math.sqrt(n_in)
  return _S(init_std=b, multiplier=1.0, lr_adam=1.0, lr_sgd=1.0)


def _ntk_reference(kind, n_in, n_out, m):
  """NTK parametrization: Jacot et al. 2018, "Neural Tangent Kernel", eq. 1, h = (1/√n_in) W x with
  W_ij ~ N(0, 1), trained by SGD with a constant learning rate (Tensor Programs IV §3, "NTP": a_1 = 0,
  a_l = 1/2 for l >= 2, b = 0, c = 0). The first layer's input is one-hot, so its effective fan-in is 1 (A = 1).

  Adam column (Tensor Programs IVb, Yang & Littwin 2023, kernel regime for entrywise-normalized updates): an
  update Φ with O(1) entries changes a hidden layer's output by A·C·n_in, which must be Θ(n^{-1/2}), so
  C ∝ 1/n; the readout's by A·C·n_in = Θ(1), so C ∝ n^{-1/2}; vector-like parameters C ∝ n^{-1/2}.
  Constants are 1 at the base width, hence 1/m and 1/√m.
  """
  del n_out
  if kind in P.VECTOR_KINDS:
    return _vector_spec(kind, 1.0 / math.sqrt(m), 1.0)
  if kind == "embedding":
    return _S(init_std=1.0, multiplier=1.0, lr_adam=1.0 / math.sqrt(m), lr_sgd=1.0)
  lr_adam = 1.0 / math.sqrt(m) if kind == "readout" else 1.0 / m
  return _S(init_std=1.0, multiplier=1.0 / math.sqrt(n_in), lr_adam=lr_adam, lr_sgd=1.0)


def _mup_reference(kind, n_in, n_out, m):
  """μP: Yang et al. 2022, "Tensor Programs V", Table 8, the formulation of the ``mup`` package (MuReadout,
  MuAdam, MuSGD) with widths relative to a base model:

  =========  =========  ====  =======  ======
  kind       B          A     Adam LR  SGD LR
  =========  =========  ====  =======  ======
  embedding  1          1     1        m
  hidden     1/√n_in    1     1/m      1
  readout    1/√n_in    1/m   1        m
  bias/norm  0          1     1        m
  =========  =========  ====  =======  ======

  Attention projections are hidden matrices.
  """
  del n_out
  if kind in P.VECTOR_KINDS:
    return _vector_spec(kind, 1.0, m)
  if kind == "embedding":
    return _S(init_std=1.0, multiplier=1.0, lr_adam=1.0, lr_sgd=m)
  if kind == "readout":
    return _S(init_std=1.0 / math.sqrt(n_in), multiplier=1.0 / m, lr_adam=1.0, lr_sgd=m)
  return _S(init_std=1.0 / math.sqrt(n_in), multiplier=1.0, lr_adam=1.0 / m, lr_sgd=1.0)


def _umup_reference(kind, n_in, n_out, m):
  """u-μP: Blake et al. 2024, "u-μP: The Unit-Scaled Maximal Update Parametrization", §4 (u-μP column of the
  ABC-multiplier table), absolute in the fans (no base shapes, so m plays no part):

  =========  ====  ========  ========
  kind       B     A         Adam LR
  =========  ====  ========  ========
  embedding  1     1         1/√n_out
  hidden     1     1/√n_in   1/√n_in
  attn_*     1     1/√n_in   1/√n_in
  readout    1     1/n_in    1
  bias/norm  0     1         1
  =========  ====  ========  ========

  (``umup_scales="paper"``, the default; "covariance" gives the readout A = 1/√n_in and Adam LR 1/√n_in.)

  The model computes u-μP with unit-scaled operations whose backward pass rescales gradients to unit scale, so
  the SGD LR equals the Adam LR (``unit_scaling.optim.lr_scale_func_sgd`` with an unconstrained readout returns
  ``lr_scale_func_adam``).
  """
  del m
  if kind in P.VECTOR_KINDS:
    a, lr_adam, b = 1.0, 1.0, 0.0
  elif kind == "embedding":
    a, lr_adam, b = 1.0, 1.0 / math.sqrt(n_out), 1.0
  elif kind == "readout":
    a, lr_adam, b = 1.0 / n_in, 1.0, 1.0
  else:
    a, lr_adam, b = 1.0 / math.sqrt(n_in), 1.0 / math.sqrt(n_in), 1.0
  if kind in P.VECTOR_KINDS:
    return _vector_spec(kind, lr_adam, lr_adam)
  return _S(init_std=b, multiplier=a, lr_adam=lr_adam, lr_sgd=lr_adam)


_REFERENCE = {"sp": _sp_reference, "ntk": _ntk_reference, "mup": _mup_reference, "umup": _umup_reference}


def _fan_cases(kind, width):
  """(fan_in, fan_out) pairs of a parameter of ``kind`` in a model of ``width``, plus fans unrelated to it."""
  if kind in P.VECTOR_KINDS:
    return [(1, width), (1, 4 * width), (1, 7)]
  if kind == "embedding":
    return [(100, width), (50_257, width), (3, 7)]
  if kind == "readout":
    return [(width, 100), (width, 50_257), (7, 3)]
  return [(width, width), (width, 4 * width), (4 * width, width), (7, 300)]


_WIDTHS = (16, 64, 96, 256, 1024)
_BASE_WIDTHS = (32, 64)


def _assert_spec_close(test, got, want):
  for field in ("init_std", "multiplier", "lr_adam", "lr_sgd", "init_mean"):
    test.assertAlmostEqual(getattr(got, field), getattr(want, field), places=12, msg=field)


class ClosedFormTest(parameterized.TestCase):

  @parameterized.parameters(*_CLOSED_FORM)
  def test_formula(self, scheme, kind, fan_in, fan_out, width, want):
    got = P.get_parametrization(scheme, base_width=64).layer(kind, fan_in, fan_out, width)
    self.assertIsInstance(got, P.LayerSpec)
    _assert_spec_close(self, got, want)

  def test_mup_readout_and_hidden_at_m4(self):
    mup = P.get_parametrization("mup", base_width=32)
    self.assertEqual(mup.width_mult(128), 4.0)
    self.assertEqual(mup.layer("readout", 128, 50, 128).multiplier, 0.25)
    for kind in ("hidden", "attn_q", "attn_k", "attn_v", "attn_o"):
      self.assertEqual(mup.layer(kind, 128, 512, 128).lr_adam, 0.25)
    for kind in ("embedding", "bias", "norm", "readout"):
      self.assertEqual(mup.layer(kind, 1 if kind in ("bias", "norm") else 50, 128, 128).lr_adam, 1.0)

  def test_lr_by_optimizer_name(self):
    spec = P.get_parametrization("mup").layer("embedding", 10, 256, 256)
    self.assertEqual(spec.lr("adam"), 1.0)
    self.assertEqual(spec.lr("adamw"), 1.0)
    self.assertEqual(spec.lr("sgd"), 4.0)
    with self.assertRaisesRegex(ValueError, "unknown optimizer"):
      spec.lr("lion")


def _assert_spec_rel_close(test, got, want, msg):
  for field in ("init_std", "multiplier", "lr_adam", "lr_sgd", "init_mean"):
    g, w = getattr(got, field), getattr(want, field)
    test.assertTrue(math.isclose(g, w, rel_tol=1e-12, abs_tol=0.0), f"{msg}: {field} = {g!r}, paper: {w!r}")


class PaperTableTest(parameterized.TestCase):
  """Every scheme against its paper's table (the _REFERENCE formulas) over many widths and fans."""

  @parameterized.parameters(*itertools.product(sorted(_REFERENCE), P.LAYER_KINDS))
  def test_layer_matches_paper(self, scheme, kind):
    for base_width, width in itertools.product(_BASE_WIDTHS, _WIDTHS):
      scheme_obj = P.get_parametrization(scheme, base_width=base_width)
      for fan_in, fan_out in _fan_cases(kind, width):
        got = scheme_obj.layer(kind, fan_in, fan_out, width)
        want = _REFERENCE[scheme](kind, fan_in, fan_out, width / base_width)
        _assert_spec_rel_close(self, got, want, f"{scheme} {kind} fans ({fan_in}, {fan_out}) width {width} "
                               f"base {base_width}")

  @parameterized.parameters(*sorted(_REFERENCE))
  def test_zero_init_options_only_zero_the_init(self, scheme):
    # zero_query (TP5's Transformer experiments) and zero_readout (mup's readout_zero_init) set B = 0 for W_q and
    # the readout and leave A, C and every other kind as in the paper's table.
    scheme_obj = P.get_parametrization(scheme, base_width=32, zero_query=True, zero_readout=True)
    for kind in P.LAYER_KINDS:
      for fan_in, fan_out in _fan_cases(kind, 128):
        want = _REFERENCE[scheme](kind, fan_in, fan_out, 4.0)
        if kind in ("attn_q", "readout"):
          want = P.LayerSpec(0.0, want.multiplier, want.lr_adam, want.lr_sgd, want.init_mean)
        _assert_spec_rel_close(self, scheme_obj.layer(kind, fan_in, fan_out, 128), want, f"{scheme} {kind}")

  def test_umup_has_no_base_shapes(self):
    # u-μP's factors are absolute in the fans (Blake et al. 2024, §4): the base width changes nothing.
    for kind in P.LAYER_KINDS:
      for fan_in, fan_out in _fan_cases(kind, 256):
        specs = {P.get_parametrization("umup", base_width=b).layer(kind, fan_in, fan_out, 256) for b in (8, 64, 256)}
        self.assertLen(specs, 1, msg=kind)

  def test_reference_tables_at_the_base_width(self):
    # A check of the reference formulas themselves: Table 8's relative form equals SP at m = 1.
    for kind in P.LAYER_KINDS:
      for fan_in, fan_out in _fan_cases(kind, 64):
        self.assertEqual(_mup_reference(kind, fan_in, fan_out, 1.0), _sp_reference(kind, fan_in, fan_out, 1.0))


class MupEqualsSpAtBaseTest(parameterized.TestCase):

  @hypothesis.settings(max_examples=60, deadline=None)
  @hypothesis.given(
      kind=st.sampled_from(P.LAYER_KINDS),
      base_width=st.integers(1, 4096),
      fan_in=st.integers(1, 8192),
      fan_out=st.integers(1, 8192),
  )
  def test_every_kind(self, kind, base_width, fan_in, fan_out):
    if kind in P.VECTOR_KINDS:
      fan_in = 1
    sp = P.get_parametrization("sp", base_width=base_width).layer(kind, fan_in, fan_out, base_width)
    mup = P.get_parametrization("mup", base_width=base_width).layer(kind, fan_in, fan_out, base_width)
    self.assertEqual(sp, mup)

  def test_attention_rules_agree_at_base_head_dim(self):
    for base_head_dim in (16, 64, 128):
      mup = P.get_parametrization("mup", base_head_dim=base_head_dim).attention_rule()
      self.assertAlmostEqual(mup.logit_scale(base_head_dim), 1.0 / math.sqrt(base_head_dim), places=12)
      self.assertAlmostEqual(rules.SqrtScale().logit_scale(base_head_dim), 1.0 / math.sqrt(base_head_dim))

  def test_zero_options_are_the_only_difference(self):
    sp = P.get_parametrization("sp", base_width=64)
    mup = P.get_parametrization("mup", base_width=64, zero_query=True, zero_readout=True)
    for kind in P.LAYER_KINDS:
      fan_in = 1 if kind in P.VECTOR_KINDS else 64
      a, b = sp.layer(kind, fan_in, 64, 64), mup.layer(kind, fan_in, 64, 64)
      if kind in ("attn_q", "readout"):
        self.assertEqual(b.init_std, 0.0)
        self.assertEqual(a.init_std, 0.125)
        self.assertEqual((a.multiplier, a.lr_adam, a.lr_sgd), (b.multiplier, b.lr_adam, b.lr_sgd))
      else:
        self.assertEqual(a, b)


def _exponent(scheme, kind, quantity):
  """Width exponent of a quantity, from widths 64 and 256 with fans that grow with width."""
  values = []
  for width in (64, 256):
    fan_in, fan_out = {
        "embedding": (100, width), "readout": (width, 100), "bias": (1, 4 * width), "norm": (1, width),
        "final_bias": (1, width), "final_norm": (1, width),
    }.get(kind, (width, 4 * width))
    values.append(quantity(P.get_parametrization(scheme, base_width=64).layer(kind, fan_in, fan_out, width)))
  return math.log(values[1] / values[0]) / math.log(4)


class AbcSymmetryTest(parameterized.TestCase):
  """μP and u-μP differ by an abc-symmetry (TP5) under Adam, so their effective scalings agree.

  (Under SGD they do not compare this way: u-μP's backward pass rescales gradients.)"""

  @parameterized.parameters(*[k for k in P.LAYER_KINDS if k != "embedding"])
  def test_adam_effective_update(self, kind):
    # Under Adam the effective weight moves by A·C·Φ; u-μP's embedding rule deliberately differs.
    q = lambda s: s.multiplier * s.lr_adam
    self.assertAlmostEqual(_exponent("mup", kind, q), _exponent("umup", kind, q), places=9)

  def test_umup_embedding_adam_differs_from_mup(self):
    q = lambda s: s.multiplier * s.lr_adam
    self.assertAlmostEqual(_exponent("mup", "embedding", q), 0.0, places=9)
    self.assertAlmostEqual(_exponent("umup", "embedding", q), -0.5, places=9)

  @parameterized.parameters("embedding", "hidden", "attn_q", "attn_o")
  def test_effective_init(self, kind):
    q = lambda s: s.multiplier * s.init_std
    self.assertAlmostEqual(_exponent("mup", kind, q), _exponent("umup", kind, q), places=9)

  @parameterized.parameters("hidden", "attn_q", "attn_k", "attn_v", "attn_o", "readout")
  def test_ntk_effective_init_equals_sp(self, kind):
    # NTK's A·B = 1/√fan_in is SP's fan-in init (TP4 §3).
    for fan_in in (7, 64, 300):
      ntk = P.get_parametrization("ntk").layer(kind, fan_in, 32, 64)
      sp = P.get_parametrization("sp").layer(kind, fan_in, 32, 64)
      self.assertAlmostEqual(ntk.multiplier * ntk.init_std, sp.init_std, places=12)


class AttentionRuleTest(parameterized.TestCase):

  def test_sp_and_ntk_use_sqrt(self):
    for name in ("sp", "ntk"):
      rule = P.get_parametrization(name).attention_rule()
      self.assertIsInstance(rule, rules.SqrtScale)
      self.assertAlmostEqual(rule.logit_scale(64), 0.125)

  def test_mup_linear(self):
    rule = P.get_parametrization("mup").attention_rule()
    self.assertIsInstance(rule, rules.LinearScale)
    self.assertAlmostEqual(rule.logit_scale(64), 0.125)
    self.assertAlmostEqual(rule.logit_scale(128), 0.0625)
    self.assertAlmostEqual(rule.logit_scale(16), 0.5)
    rule32 = P.get_parametrization("mup", base_head_dim=32).attention_rule()
    self.assertAlmostEqual(rule32.logit_scale(128), math.sqrt(32) / 128)

  def test_umup_alpha_over_d(self):
    rule = P.get_parametrization("umup").attention_rule()
    self.assertIsInstance(rule, rules.LinearScale)
    self.assertAlmostEqual(rule.logit_scale(64), 1 / 64)
    self.assertAlmostEqual(P.get_parametrization("umup", attn_mult=4.0).attention_rule().logit_scale(64), 4 / 64)


class RegistryTest(parameterized.TestCase):

  def test_available(self):
    self.assertEqual(P.available_parametrizations(), ("sp", "ntk", "mup", "umup"))
    for name in P.available_parametrizations():
      p = P.get_parametrization(name, base_width=32, base_head_dim=16)
      self.assertEqual((p.name, p.base_width, p.base_head_dim), (name, 32, 16))
      self.assertFalse(p.zero_query or p.zero_readout)
      hash(p)  # frozen: usable as a static jit argument

  @parameterized.parameters("nope", "MUP", "", None, 3)
  def test_unknown_name(self, name):
    with self.assertRaisesRegex(ValueError, "unknown parametrization.*known: sp, ntk, mup, umup"):
      P.get_parametrization(name)

  @parameterized.parameters(
      ("sp", {"attn_mult": 2.0}, "unknown option.*attn_mult"),
      ("mup", {"zero_keys": True}, "unknown option.*zero_keys"),
      ("mup", {"zero_query": "yes"}, "zero_query must be a bool"),
      ("umup", {"attn_mult": 0.0}, "attn_mult must be a finite positive"),
      ("umup", {"attn_mult": float("nan")}, "attn_mult must be a finite positive"),
      ("mup", {"base_width": 0}, "base_width must be a positive integer"),
      ("mup", {"base_width": 64.5}, "base_width must be a positive integer"),
      ("sp", {"base_width": True}, "base_width must be a positive integer"),
      ("mup", {"base_head_dim": -8}, "base_head_dim must be a positive integer"),
  )
  def test_bad_options(self, name, options, message):
    with self.assertRaisesRegex(ValueError, message):
      P.get_parametrization(name, **options)

  @parameterized.parameters(
      ("weird", 4, 4, 4, "unknown layer kind 'weird'"),
      ("hidden", 0, 4, 4, "fan_in must be a positive integer"),
      ("hidden", 4, -3, 4, "fan_out must be a positive integer"),
      ("hidden", 4, 4, 0, "width must be a positive integer"),
      ("hidden", 4, 4, 1.5, "width must be a positive integer"),
      ("bias", 1, 4, -1, "width must be a positive integer"),
  )
  def test_bad_layer_arguments(self, kind, fan_in, fan_out, width, message):
    for name in P.available_parametrizations():
      with self.assertRaisesRegex(ValueError, message):
        P.get_parametrization(name).layer(kind, fan_in, fan_out, width)

  def test_width_mult(self):
    self.assertEqual(P.get_parametrization("mup", base_width=64).width_mult(16), 0.25)
    with self.assertRaisesRegex(ValueError, "width"):
      P.get_parametrization("mup").width_mult(0)


class PathNamesTest(absltest.TestCase):

  def test_jax_key_paths(self):
    tree = {"block_0": {"attn": {"query": {"kernel": 1}, "key_gain": 2}}, "ln_final": {"scale": 3}, "list": [4, 5]}
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    self.assertEqual([P.path_names(path) for path, _ in leaves], [
        ("block_0", "attn", "key_gain"),
        ("block_0", "attn", "query", "kernel"),
        ("list", "0"),
        ("list", "1"),
        ("ln_final", "scale"),
    ])

  def test_strings_and_attribute_keys(self):
    self.assertEqual(P.path_names(["params", "readout", "kernel"]), ("params", "readout", "kernel"))
    self.assertEqual(P.path_names([jax.tree_util.GetAttrKey("mu"), jax.tree_util.SequenceKey(2)]), ("mu", "2"))


class KindAndOptimizerNamesTest(parameterized.TestCase):

  @parameterized.parameters(*P.LAYER_KINDS)
  def test_check_kind_accepts_known(self, kind):
    self.assertEqual(P.check_kind(kind), kind)

  @parameterized.parameters(("conv",), ("Hidden",), ("",), (None,), (3,), (("hidden",),))
  def test_check_kind_rejects_unknown(self, kind):
    with self.assertRaisesRegex(ValueError, "unknown layer kind"):
      P.check_kind(kind)

  def test_optimizer_family(self):
    self.assertEqual([P.optimizer_family(o) for o in ("adam", "adamw", "sgd")], ["adam", "adam", "sgd"])
    with self.assertRaisesRegex(ValueError, "unknown optimizer 'lion'"):
      P.optimizer_family("lion")


class FansTest(parameterized.TestCase):

  @parameterized.parameters(
      ("embedding", (100, 32), (100, 32)),
      ("hidden", (32, 128), (32, 128)),
      ("hidden", (128, 32), (128, 32)),
      ("attn_q", (32, 64), (32, 64)),
      ("attn_k", (32, 4, 8), (32, 32)),
      ("attn_v", (32, 16), (32, 16)),
      ("attn_o", (64, 32), (64, 32)),
      ("attn_o", (4, 16, 32), (64, 32)),
      ("readout", (32, 100), (32, 100)),
      ("bias", (128,), (1, 128)),
      ("bias", (4, 16), (1, 64)),
      ("norm", (32,), (1, 32)),
      ("norm", (), (1, 1)),
  )
  def test_fans(self, kind, shape, want):
    self.assertEqual(P.fans(kind, shape), want)

  @parameterized.parameters(
      ("embedding", (100,), "embedding parameter must be"),
      ("embedding", (2, 3, 4), "embedding parameter must be"),
      ("hidden", (32,), "at least 2 axes"),
      ("readout", (0, 10), "empty or negative axis"),
      ("bias", (0,), "empty or negative axis"),
      ("conv", (3, 3), "unknown layer kind"),
      ("hidden", (2.5, 3), "sequence of integers"),
  )
  def test_bad(self, kind, shape, message):
    with self.assertRaisesRegex(ValueError, message):
      P.fans(kind, shape)


def _contract_params(d=16, v=12, f=64):
  z = jnp.zeros
  return {
      "embed": {"embedding": z((v, d))},
      "block_0": {
          "ln_attn": {"scale": z((d,))},
          "attn": {"query": {"kernel": z((d, d))}, "key": {"kernel": z((d, d // 2))},
                   "value": {"kernel": z((d, d // 2))}, "out": {"kernel": z((d, d))},
                   "query_gain": z((4,))},
          "ln_mlp": {"scale": z((d,))},
          "mlp": {"fc_in": {"kernel": z((d, f)), "bias": z((f,))}, "fc_out": {"kernel": z((f, d))}},
      },
      "ln_final": {"scale": z((d,))},
      "readout": {"kernel": z((d, v))},
  }


def _contract_kinds():
  """The layer kind of every parameter of _contract_params, written out."""
  return {
      "embed": {"embedding": "embedding"},
      "block_0": {
          "ln_attn": {"scale": "norm"},
          "attn": {"query": {"kernel": "attn_q"}, "key": {"kernel": "attn_k"},
                   "value": {"kernel": "attn_v"}, "out": {"kernel": "attn_o"},
                   "query_gain": "norm"},
          "ln_mlp": {"scale": "norm"},
          "mlp": {"fc_in": {"kernel": "hidden", "bias": "bias"}, "fc_out": {"kernel": "hidden"}},
      },
      "ln_final": {"scale": "final_norm"},
      "readout": {"kernel": "readout"},
  }


class ParamSpecsTest(chex.TestCase):

  def test_structure_and_values(self):
    params = _contract_params()
    specs = P.param_specs(params, _contract_kinds(), P.get_parametrization("mup", base_width=4), 16)
    is_spec = lambda x: isinstance(x, P.LayerSpec)
    self.assertEqual(jax.tree.structure(specs, is_leaf=is_spec), jax.tree.structure(params))
    self.assertTrue(all(is_spec(s) for s in jax.tree.leaves(specs, is_leaf=is_spec)))
    self.assertEqual(specs["readout"]["kernel"], P.LayerSpec(0.25, 0.25, 1.0, 4.0))
    self.assertEqual(specs["block_0"]["mlp"]["fc_out"]["kernel"], P.LayerSpec(0.125, 1.0, 0.25, 1.0))
    self.assertEqual(specs["block_0"]["attn"]["key"]["kernel"], P.LayerSpec(0.25, 1.0, 0.25, 1.0))
    self.assertEqual(specs["block_0"]["mlp"]["fc_in"]["bias"], P.LayerSpec(0.0, 1.0, 1.0, 4.0))
    self.assertEqual(specs["block_0"]["attn"]["query_gain"], P.LayerSpec(0.0, 1.0, 1.0, 4.0, 1.0))
    self.assertEqual(specs["embed"]["embedding"], P.LayerSpec(1.0, 1.0, 1.0, 4.0))

  def test_kinds_not_names_decide(self):
    # The same shapes under other kinds get those kinds' specs: param_specs never looks at names.
    params = _contract_params()
    kinds = _contract_kinds()
    kinds["readout"]["kernel"] = "hidden"
    kinds["block_0"]["mlp"]["fc_out"]["kernel"] = "readout"
    specs = P.param_specs(params, kinds, P.get_parametrization("mup", base_width=4), 16)
    self.assertEqual(specs["readout"]["kernel"], P.LayerSpec(0.25, 1.0, 0.25, 1.0))
    self.assertEqual(specs["block_0"]["mlp"]["fc_out"]["kernel"], P.LayerSpec(0.125, 0.25, 1.0, 4.0))

  def test_umup_and_shape_structs(self):
    params = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), _contract_params())
    specs = P.param_specs(params, _contract_kinds(), P.get_parametrization("umup"), 16)
    self.assertEqual(specs["block_0"]["mlp"]["fc_out"]["kernel"], P.LayerSpec(1.0, 0.125, 0.125, 0.125))
    self.assertEqual(specs["readout"]["kernel"], P.LayerSpec(1.0, 1 / 16, 1.0, 1.0))

  def test_unknown_kind_named(self):
    params = _contract_params()
    kinds = _contract_kinds()
    params["block_0"]["attn"]["rotary"] = {"kernel": jnp.zeros((4, 4))}
    kinds["block_0"]["attn"]["rotary"] = {"kernel": "rotary"}
    with self.assertRaisesRegex(ValueError, "block_0/attn/rotary/kernel.*unknown layer kind 'rotary'"):
      P.param_specs(params, kinds, P.get_parametrization("sp"), 16)

  def test_structure_mismatch(self):
    params = _contract_params()
    params["block_0"]["attn"]["rotary"] = {"kernel": jnp.zeros((4, 4))}
    with self.assertRaisesRegex(ValueError, "same tree structure"):
      P.param_specs(params, _contract_kinds(), P.get_parametrization("sp"), 16)

  def test_bad_shape_named(self):
    with self.assertRaisesRegex(ValueError, "parameter 'readout/kernel'.*at least 2 axes"):
      P.param_specs({"readout": {"kernel": jnp.zeros((4,))}}, {"readout": {"kernel": "readout"}},
                    P.get_parametrization("sp"), 16)

  def test_bad_width(self):
    with self.assertRaisesRegex(ValueError, "width must be a positive integer"):
      P.param_specs(_contract_params(), _contract_kinds(), P.get_parametrization("sp"), 0)


if __name__ == "__main__":
  absltest.main()
