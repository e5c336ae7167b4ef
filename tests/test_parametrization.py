"""Tests for scaling.mup.schemes: effective quantities against the paper tables, μP = SP at m = 1, and the specs of
a tree of kinds at one global width."""

import itertools
import math
from typing import NamedTuple

from absl.testing import absltest
from absl.testing import parameterized
import chex
import hypothesis
from hypothesis import strategies as st
import jax
import jax.numpy as jnp

from scaling.mup import parametrize as parametrize_lib
from scaling.mup import roles as roles_lib
from scaling.mup import schemes as P
from scaling.attention import rules

_S = P.LayerSpec

# ---------------------------------------------------------------------------------------------------------------
# The parametrizations as the papers state them, written here as formulas (independently of the module), and
# compared through the quantities that every equivalent form shares.
#
# Every scheme is an abc-parametrization (Yang & Hu 2021, "Tensor Programs IV", §3): a weight is used as A·w with
# w ~ N(init_mean, B²) at init and trained with learning rate η·C. The reference functions return a LayerSpec
# (B, A, C_adam, C_sgd, init_mean) of a parameter of ``kind`` with fan-in n_in and fan-out n_out at width multiplier
# m = width / base_width. Biases start at 0 and norm gains at 1 in every scheme (B = 0, A = 1).
#
# Forms related by the abc-symmetry (Tensor Programs IV §3 for SGD, Tensor Programs V for Adam: A → θA, B → B/θ,
# C_adam → C_adam/θ, C_sgd → C_sgd/θ²) define the same training, so the tests compare the effective quantities
# (``_effective``): the initial weight A·w (std A·B, mean A·init_mean), the change of A·w in an Adam step (its
# update has O(1) entries, so ∝ A·C_adam) and in an SGD step (the gradient of w is A times that of A·w, so
# ∝ A²·C_sgd).
# ---------------------------------------------------------------------------------------------------------------


class _Effective(NamedTuple):
  init: float  # std of A·w at init: A·B
  mean: float  # mean of A·w at init: A·init_mean
  adam: float  # Adam step of A·w per unit LR: A·C_adam
  sgd: float  # SGD step of A·w per unit LR and unit gradient of A·w: A²·C_sgd


def _effective(spec):
  a = spec.multiplier
  return _Effective(a * spec.init_std, a * spec.init_mean, a * spec.lr_adam, a * a * spec.lr_sgd)


def _effective_mismatch(got, want):
  """None if the LayerSpecs ``got`` and ``want`` have the same effective quantities, else a message naming them."""
  g, w = _effective(got), _effective(want)
  bad = [f"{name} {x!r} (paper: {y!r})" for name, x, y in zip(_Effective._fields, g, w)
         if not math.isclose(x, y, rel_tol=1e-12, abs_tol=0.0)]
  return ", ".join(bad) or None


def _assert_effective_close(test, got, want, msg):
  mismatch = _effective_mismatch(got, want)
  test.assertIsNone(mismatch, f"{msg}: {mismatch}")


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


def _fixed_reference(n_in):
  """A parameter no width touches: SP's fan-in init and learning rate 1 in every scheme (mup's parameters without
  infinite dimensions are trained as SP)."""
  return _S(init_std=1.0 / math.sqrt(n_in), multiplier=1.0, lr_adam=1.0, lr_sgd=1.0)


def _ntk_reference(kind, n_in, n_out, m):
  """NTK parametrization: Jacot et al. 2018, "Neural Tangent Kernel", eq. 1, h = (1/√n_in) W x with
  W_ij ~ N(0, 1), trained by SGD with a constant learning rate (Tensor Programs IV §3, "NTP": a_1 = 0,
  a_l = 1/2 for l >= 2, b = 0, c = 0). The embedding's input is one-hot, so its effective fan-in is 1 (A = 1);
  a Dense input layer (dense input of fixed size n_in) is Jacot's first layer, A = 1/√n_in.

  Adam column (Tensor Programs IVb, Yang & Littwin 2023, kernel regime for entrywise-normalized updates): an
  update Φ with O(1) entries changes a hidden layer's output by A·C·n_in, which must be Θ(n^{-1/2}), so
  C ∝ 1/n; the readout's by A·C·n_in = Θ(1), so C ∝ n^{-1/2}; vector-like parameters C ∝ n^{-1/2}.
  Constants are 1 at the base width, hence 1/m and 1/√m.
  """
  del n_out
  if kind == "fixed":
    return _fixed_reference(n_in)
  if kind in P.VECTOR_KINDS:
    return _vector_spec(kind, 1.0 / math.sqrt(m), 1.0)
  if kind == "embedding":
    return _S(init_std=1.0, multiplier=1.0, lr_adam=1.0 / math.sqrt(m), lr_sgd=1.0)
  lr_adam = 1.0 / math.sqrt(m) if kind in ("readout", "input") else 1.0 / m
  return _S(init_std=1.0, multiplier=1.0 / math.sqrt(n_in), lr_adam=lr_adam, lr_sgd=1.0)


def _mup_table8_reference(kind, n_in, n_out, m):
  """μP: Yang et al. 2022, "Tensor Programs V", Table 8, the formulation of the ``mup`` package (MuReadout,
  MuAdam, MuSGD) with widths relative to a base model whose fans are n_in/m and n_out/m:

  =========  ================  ====  =======  ======
  kind       B                 A     Adam LR  SGD LR
  =========  ================  ====  =======  ======
  embedding  1                 1     1        m
  input      1/√n_in           1     1        m
  hidden     1/√n_in           1     1/m      1
  readout    1/√(n_in/m)       1/m   1        m
  bias/norm  0                 1     1        m
  =========  ================  ====  =======  ======

  ``input`` is Table 8's input weights with a dense input of fixed size n_in (init variance 1/fan_in, Adam LR 1,
  SGD LR fan_out, relative to the base: m).

  The readout's init variance is constant in width (Table 8: variance 1, multiplier 1/fan_in): mup keeps the base
  model's nn.Linear fan-in init (``set_base_shapes`` multiplies the fan-in init by √m) and divides the forward
  by m. Attention projections are hidden matrices.
  """
  del n_out
  if kind == "fixed":
    return _fixed_reference(n_in)
  if kind in P.VECTOR_KINDS:
    return _vector_spec(kind, 1.0, m)
  if kind == "embedding":
    return _S(init_std=1.0, multiplier=1.0, lr_adam=1.0, lr_sgd=m)
  if kind == "input":
    return _S(init_std=1.0 / math.sqrt(n_in), multiplier=1.0, lr_adam=1.0, lr_sgd=m)
  if kind == "readout":
    return _S(init_std=1.0 / math.sqrt(n_in / m), multiplier=1.0 / m, lr_adam=1.0, lr_sgd=m)
  return _S(init_std=1.0 / math.sqrt(n_in), multiplier=1.0, lr_adam=1.0 / m, lr_sgd=1.0)


def _mup_table3_reference(kind, n_in, n_out, m):
  """μP: Tensor Programs V, Table 3 (every multiplier 1), each constant fixed so that the base model (fans
  n_in/m, n_out/m) is SP, as the ``mup`` package's base shapes do:

  ==================  =========================  ===================  ===================
  kind                init std                   Adam LR              SGD LR
  ==================  =========================  ===================  ===================
  input (embedding)   1 (fan-in: vocabulary)     1                    fan_out: m
  hidden              1/√fan_in                  1/fan_in: 1/m        1
  output (readout)    1/fan_in: √(n_in/m)/n_in   1/fan_in: 1/m        1/fan_in: 1/m
  biases (and gains)  0                          1                    fan_out: m
  ==================  =========================  ===================  ===================

  Only the readout's row differs in form from Table 8's.
  """
  if kind != "readout":
    return _mup_table8_reference(kind, n_in, n_out, m)
  return _S(init_std=math.sqrt(n_in / m) / n_in, multiplier=1.0, lr_adam=1.0 / m, lr_sgd=1.0 / m)


def _umup_reference(kind, n_in, n_out, m):
  """u-μP: Blake et al. 2024, "u-μP: The Unit-Scaled Maximal Update Parametrization", §4 (u-μP column of the
  ABC-multiplier table, Table 2), absolute in the fans (no base shapes, so m plays no part):

  =========  ====  ========  ========
  kind       B     A         Adam LR
  =========  ====  ========  ========
  embedding  1     1         1/√n_out
  input      1     1/√n_in   1/√n_in
  hidden     1     1/√n_in   1/√n_in
  attn_*     1     1/√n_in   1/√n_in
  readout    1     1/n_in    1
  bias/norm  0     1         1
  =========  ====  ========  ========

  (``umup_scales="paper"``, the default; "covariance" gives the readout A = 1/√n_in and Adam LR 1/√n_in.) A Dense
  input layer is the reference library's ``Linear`` (mup_type "weight": A = 1/√fan_in, ``lr_scale_func_adam``
  1/√fan_in), the paper's embedding rule being for one-hot lookups.

  The model computes u-μP with unit-scaled operations whose backward pass rescales gradients to unit scale, so
  the SGD LR equals the Adam LR (``unit_scaling.optim.lr_scale_func_sgd`` with an unconstrained readout returns
  ``lr_scale_func_adam``).
  """
  del m
  if kind == "fixed":
    return _fixed_reference(n_in)
  if kind in P.VECTOR_KINDS:
    return _vector_spec(kind, 1.0, 1.0)
  if kind == "embedding":
    return _S(init_std=1.0, multiplier=1.0, lr_adam=1.0 / math.sqrt(n_out), lr_sgd=1.0 / math.sqrt(n_out))
  if kind == "readout":  # the paper's linear_readout: A = 1/n_in, Adam LR 1
    return _S(init_std=1.0, multiplier=1.0 / n_in, lr_adam=1.0, lr_sgd=1.0)
  a = 1.0 / math.sqrt(n_in)
  return _S(init_std=1.0, multiplier=a, lr_adam=a, lr_sgd=a)


_REFERENCES = {
    "sp": (_sp_reference,),
    "ntk": (_ntk_reference,),
    "mup": (_mup_table8_reference, _mup_table3_reference),
    "umup": (_umup_reference,),
}

# Width exponents of the effective quantities (A·B, A·C_adam, A²·C_sgd) when every fan that is a width grows with
# m, read off the papers' tables with n ∝ m; for vectors the first entry is that of the initial gain A·init_mean.
# μP (Tensor Programs V, Table 3): input weights var 1/fan_in, Adam LR 1, SGD LR fan_out; hidden var 1/fan_in,
# Adam LR 1/fan_in, SGD LR 1; output var 1/fan_in², Adam LR 1/fan_in, SGD LR 1/fan_in; biases as inputs. u-μP's
# SGD entry is A²·C of its table (its unit-scaled backward pass changes what an SGD step does). A Dense input layer
# (fan-in fixed) follows the input row of each scheme with n_in constant; a fixed parameter does not change.
_EXPONENTS = {
    "sp": {"embedding": (0, 0, 0), "input": (0, 0, 0), "hidden": (-0.5, 0, 0), "readout": (-0.5, 0, 0),
           "vector": (0, 0, 0), "fixed": (0, 0, 0)},
    "ntk": {"embedding": (0, -0.5, 0), "input": (0, -0.5, 0), "hidden": (-0.5, -1.5, -1), "readout": (-0.5, -1, -1),
            "vector": (0, -0.5, 0), "fixed": (0, 0, 0)},
    "mup": {"embedding": (0, 0, 1), "input": (0, 0, 1), "hidden": (-0.5, -1, 0), "readout": (-1, -1, -1),
            "vector": (0, 0, 1), "fixed": (0, 0, 0)},
    "umup": {"embedding": (0, -0.5, -0.5), "input": (0, 0, 0), "hidden": (-0.5, -1, -1.5), "readout": (-1, -1, -2),
             "vector": (0, 0, 0), "fixed": (0, 0, 0)},
}
_SCALING_WIDTHS = (64, 128, 256, 512)  # base width 64: m = 1, 2, 4, 8


def _kind_class(kind):
  """The row of _EXPONENTS for ``kind``: attention projections are hidden matrices."""
  if kind in P.VECTOR_KINDS:
    return "vector"
  return kind if kind in ("embedding", "input", "readout", "fixed") else "hidden"


def _growing_fans(kind, width):
  """(fan_in, fan_out) of a parameter of ``kind`` whose width-like fans are multiples of ``width``."""
  return {"embedding": (100, width), "input": (3, width), "readout": (width, 100), "attn_o": (width, width),
          "fixed": (7, 3)}.get(
      kind, (1, width) if kind in P.VECTOR_KINDS else (width, 4 * width))


def _scaling_mismatches(spec_at, kind, exponents):
  """The quantities of ``spec_at(width)`` that are not ``value at m = 1 · m^exponent`` at every _SCALING_WIDTHS."""
  base = _effective(spec_at(_SCALING_WIDTHS[0]))
  bad = []
  for width in _SCALING_WIDTHS[1:]:
    m = width / _SCALING_WIDTHS[0]
    got = _effective(spec_at(width))
    first = "mean" if kind in P.VECTOR_KINDS else "init"
    for field, e in zip((first, "adam", "sgd"), exponents):
      x, x0 = getattr(got, field), getattr(base, field)
      if x0 == 0:  # a bias starts at 0 in every scheme
        continue
      if not math.isclose(x / x0, m**e, rel_tol=1e-9):
        bad.append(f"{field} at m = {m:g}: ×{x / x0:.4g} of m = 1 (paper: m^{e:g} = {m**e:.4g})")
  return bad


def _fan_cases(kind, width):
  """(fan_in, fan_out) pairs of a parameter of ``kind`` in a model of ``width``, plus fans unrelated to it."""
  if kind in P.VECTOR_KINDS:
    return [(1, width), (1, 4 * width), (1, 7)]
  if kind == "embedding":
    return [(100, width), (50_257, width), (3, 7)]
  if kind == "readout":
    return [(width, 100), (width, 50_257), (7, 3)]
  if kind == "input":
    return [(3, width), (784, width), (7, 300)]
  if kind == "fixed":
    return [(7, 3), (1, 10), (300, 5)]
  return [(width, width), (width, 4 * width), (4 * width, width), (7, 300)]


_WIDTHS = (16, 64, 96, 256, 1024)
_BASE_WIDTHS = (32, 64)


def _old_mup_readout(n_in, m):
  """The readout law the μP scheme used before: std 1/√n_in (not the base model's) times the multiplier 1/m."""
  return _S(init_std=1.0 / math.sqrt(n_in), multiplier=1.0 / m, lr_adam=1.0, lr_sgd=m)


class PaperTableTest(parameterized.TestCase):
  """Every scheme's effective quantities against its paper's tables over many widths and fans."""

  @parameterized.parameters(*itertools.product(sorted(_REFERENCES), P.LAYER_KINDS))
  def test_layer_matches_paper(self, scheme, kind):
    for base_width, width in itertools.product(_BASE_WIDTHS, _WIDTHS):
      scheme_obj = P.get_parametrization(scheme, base_width=base_width)
      for fan_in, fan_out in _fan_cases(kind, width):
        got = scheme_obj.layer(kind, fan_in, fan_out, width)
        self.assertIsInstance(got, P.LayerSpec)
        for reference in _REFERENCES[scheme]:
          want = reference(kind, fan_in, fan_out, width / base_width)
          _assert_effective_close(self, got, want, f"{scheme} {kind} fans ({fan_in}, {fan_out}) width {width} "
                                  f"base {base_width} against {reference.__name__}")

  @parameterized.parameters(*itertools.product(sorted(_EXPONENTS), P.LAYER_KINDS))
  def test_width_exponents(self, scheme, kind):
    # Effective init, Adam step and SGD step as m^e at widths 64..512 over base 64, e from the papers' tables.
    scheme_obj = P.get_parametrization(scheme, base_width=_SCALING_WIDTHS[0])
    spec_at = lambda width: scheme_obj.layer(kind, *_growing_fans(kind, width), width)
    self.assertEqual(_scaling_mismatches(spec_at, kind, _EXPONENTS[scheme][_kind_class(kind)]), [])

  def test_mup_readout_by_hand(self):
    # Width 256, base 64 (m = 4), readout fans (256, 100): base fan-in 64, so A·B = (1/4)(1/8) = 1/32; the Adam step
    # A·C = 1/4 and the SGD step A²·C = (1/16)·4 = 1/4 (Tensor Programs V Table 3: 1/fan_in each, 1/8 at the base).
    got = _effective(P.get_parametrization("mup", base_width=64).layer("readout", 256, 100, 256))
    self.assertEqual(got, _Effective(init=1 / 32, mean=0.0, adam=0.25, sgd=0.25))
    # Hidden (256, 1024) at m = 4: 1/16, Adam 1/4, SGD 1; SP's readout at the base width: 1/8.
    hidden = _effective(P.get_parametrization("mup", base_width=64).layer("hidden", 256, 1024, 256))
    self.assertEqual(hidden, _Effective(init=1 / 16, mean=0.0, adam=0.25, sgd=1.0))
    self.assertEqual(_effective(P.get_parametrization("sp").layer("readout", 64, 100, 64)).init, 0.125)

  @parameterized.parameters(128, 256, 512)
  def test_old_readout_law_is_rejected(self, width):
    # The former μP readout (std 1/√n_in with multiplier 1/m) starts m^−1.5 instead of m^−1: at widths 128, 256
    # and 512 over base 64 its effective init is 1/√2, 1/2 and 1/√8 of the paper's. Both checks above reject it.
    m = width / 64
    old, want = _old_mup_readout(width, m), _mup_table8_reference("readout", width, 100, m)
    self.assertAlmostEqual(_effective(old).init / _effective(want).init, {128: 0.7071, 256: 0.5, 512: 0.3536}[width],
                           places=4)
    self.assertIn("init", _effective_mismatch(old, want))
    self.assertIn("init", _effective_mismatch(old, _mup_table3_reference("readout", width, 100, m)))
    old_at = lambda w: _old_mup_readout(w, w / 64)
    self.assertLen(_scaling_mismatches(old_at, "readout", _EXPONENTS["mup"]["readout"]), 3)

  def test_references_follow_the_exponents(self):
    # A check of the reference formulas themselves: their effective quantities scale as _EXPONENTS says, μP's two
    # forms agree everywhere, and Table 8's relative form (and NTK's effective init) equals SP at m = 1.
    for scheme, references in _REFERENCES.items():
      for reference, kind in itertools.product(references, P.LAYER_KINDS):
        spec_at = lambda width: reference(kind, *_growing_fans(kind, width), width / _SCALING_WIDTHS[0])
        self.assertEqual(_scaling_mismatches(spec_at, kind, _EXPONENTS[scheme][_kind_class(kind)]), [],
                         f"{reference.__name__} {kind}")
    for kind, width in itertools.product(P.LAYER_KINDS, _WIDTHS):
      for fan_in, fan_out in _fan_cases(kind, width):
        m = width / 64
        self.assertIsNone(_effective_mismatch(_mup_table3_reference(kind, fan_in, fan_out, m),
                                              _mup_table8_reference(kind, fan_in, fan_out, m)), kind)
        self.assertEqual(_mup_table8_reference(kind, fan_in, fan_out, 1.0), _sp_reference(kind, fan_in, fan_out, 1.0))
        self.assertAlmostEqual(_effective(_ntk_reference(kind, fan_in, fan_out, m)).init,
                               _effective(_sp_reference(kind, fan_in, fan_out, m)).init, places=12)

  @parameterized.parameters(*sorted(_REFERENCES))
  def test_zero_init_options_only_zero_the_init(self, scheme):
    # zero_query (TP5's Transformer experiments) and zero_readout (mup's readout_zero_init) set B = 0 for W_q and
    # the readout and leave A, C and every other kind as in the paper's table.
    scheme_obj = P.get_parametrization(scheme, base_width=32, zero_query=True, zero_readout=True)
    for kind in P.LAYER_KINDS:
      for fan_in, fan_out in _fan_cases(kind, 128):
        got = scheme_obj.layer(kind, fan_in, fan_out, 128)
        want = _REFERENCES[scheme][0](kind, fan_in, fan_out, 4.0)
        if kind in ("attn_q", "readout"):
          self.assertEqual(got.init_std, 0.0)
          want = P.LayerSpec(0.0, want.multiplier, want.lr_adam, want.lr_sgd, want.init_mean)
        _assert_effective_close(self, got, want, f"{scheme} {kind}")

  def test_umup_has_no_base_shapes(self):
    # u-μP's factors are absolute in the fans (Blake et al. 2024, §4): the base width changes nothing.
    for kind in P.LAYER_KINDS:
      for fan_in, fan_out in _fan_cases(kind, 256):
        specs = {P.get_parametrization("umup", base_width=b).layer(kind, fan_in, fan_out, 256) for b in (8, 64, 256)}
        self.assertLen(specs, 1, msg=kind)

  def test_lr_by_optimizer_name(self):
    spec = P.get_parametrization("mup").layer("embedding", 10, 256, 256)
    self.assertEqual(spec.lr("adam"), 1.0)
    self.assertEqual(spec.lr("adamw"), 1.0)
    self.assertEqual(spec.lr("sgd"), 4.0)
    with self.assertRaisesRegex(ValueError, "unknown optimizer"):
      spec.lr("lion")


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

  def test_layer_at_takes_the_multiplier(self):
    # layer_at(kind, fans, m) is layer(kind, fans, width) at m = width / base_width, for every scheme and kind.
    for name, kind in itertools.product(P.available_parametrizations(), P.LAYER_KINDS):
      scheme = P.get_parametrization(name, base_width=32)
      fan_in = 1 if kind in P.VECTOR_KINDS else 96
      self.assertEqual(scheme.layer_at(kind, fan_in, 96, 3.0), scheme.layer(kind, fan_in, 96, 96), f"{name} {kind}")
      self.assertEqual(scheme.eps_multiplier_at(kind, 3.0), scheme.eps_multiplier(kind, 96))
    for m in (0, -1.0, float("inf"), True, "2"):
      with self.assertRaisesRegex(ValueError, "width multiplier m must be a finite positive number"):
        P.get_parametrization("mup").layer_at("hidden", 4, 4, m)

  def test_width_mult(self):
    self.assertEqual(P.get_parametrization("mup", base_width=64).width_mult(16), 0.25)
    with self.assertRaisesRegex(ValueError, "width"):
      P.get_parametrization("mup").width_mult(0)


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


def _get(tree, path):
  for key in path:
    tree = tree[key]
  return tree


def _specs(params, kinds, scheme, width):
  """The LayerSpec of every parameter at one global width (multipliers not folded)."""
  roles = roles_lib.from_kinds(params, kinds, scheme.width_mult(width))
  return parametrize_lib.parametrize(roles, scheme, forward="model").specs()


class SpecsFromKindsTest(chex.TestCase):

  def test_structure_and_values(self):
    params = _contract_params()
    specs = _specs(params, _contract_kinds(), P.get_parametrization("mup", base_width=4), 16)
    is_spec = lambda x: isinstance(x, P.LayerSpec)
    self.assertEqual(jax.tree.structure(specs, is_leaf=is_spec), jax.tree.structure(params))
    self.assertTrue(all(is_spec(s) for s in jax.tree.leaves(specs, is_leaf=is_spec)))
    # μP at m = 16 / 4 = 4, effective (A·B, A·init_mean, A·C_adam, A²·C_sgd) worked by hand: the readout [16, 12]
    # starts at (1/4)·(1/√4) (std of the base fan-in 4); fc_out [64, 16] at 1/8, the key [16, 8] at 1/4.
    want = {
        ("readout", "kernel"): _Effective(0.125, 0.0, 0.25, 0.25),
        ("block_0", "mlp", "fc_out", "kernel"): _Effective(0.125, 0.0, 0.25, 1.0),
        ("block_0", "attn", "key", "kernel"): _Effective(0.25, 0.0, 0.25, 1.0),
        ("block_0", "mlp", "fc_in", "bias"): _Effective(0.0, 0.0, 1.0, 4.0),
        ("block_0", "attn", "query_gain"): _Effective(0.0, 1.0, 1.0, 4.0),
        ("embed", "embedding"): _Effective(1.0, 0.0, 1.0, 4.0),
    }
    for path, effective in want.items():
      self.assertEqual(_effective(_get(specs, path)), effective, msg=path)

  def test_kinds_not_names_decide(self):
    # The same shapes under other kinds get those kinds' specs: the names are never looked at.
    params = _contract_params()
    kinds = _contract_kinds()
    kinds["readout"]["kernel"] = "hidden"
    kinds["block_0"]["mlp"]["fc_out"]["kernel"] = "readout"
    specs = _specs(params, kinds, P.get_parametrization("mup", base_width=4), 16)
    # The readout [16, 12] as a hidden matrix: 1/4, Adam 1/4, SGD 1; fc_out [64, 16] as the readout (base fan-in
    # 16): (1/4)·(1/4), Adam 1/4, SGD (1/16)·4.
    self.assertEqual(_effective(specs["readout"]["kernel"]), _Effective(0.25, 0.0, 0.25, 1.0))
    self.assertEqual(_effective(specs["block_0"]["mlp"]["fc_out"]["kernel"]), _Effective(0.0625, 0.0, 0.25, 0.25))

  def test_umup_and_shape_structs(self):
    params = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), _contract_params())
    specs = _specs(params, _contract_kinds(), P.get_parametrization("umup"), 16)
    # u-μP: fc_out [64, 16] A = 1/8 (A·B 1/8, A·C 1/64, A²·C 1/512); the readout [16, 12] A = 1/16, Adam LR 1
    # (the paper's linear_readout).
    self.assertEqual(_effective(specs["block_0"]["mlp"]["fc_out"]["kernel"]), _Effective(0.125, 0.0, 1 / 64, 1 / 512))
    self.assertEqual(_effective(specs["readout"]["kernel"]), _Effective(1 / 16, 0.0, 1 / 16, 1 / 256))
    # The covariance setting's readout: A = 1/√16 and Adam LR 1/√16 (A·C = 1/16 as in the paper).
    covariance = _specs(params, _contract_kinds(), P.get_parametrization("umup", umup_scales="covariance"), 16)
    self.assertEqual(_effective(covariance["readout"]["kernel"]), _Effective(0.25, 0.0, 1 / 16, 1 / 64))

  def test_unknown_kind_named(self):
    params = _contract_params()
    kinds = _contract_kinds()
    params["block_0"]["attn"]["rotary"] = {"kernel": jnp.zeros((4, 4))}
    kinds["block_0"]["attn"]["rotary"] = {"kernel": "rotary"}
    with self.assertRaisesRegex(ValueError, "block_0/attn/rotary/kernel.*unknown layer kind 'rotary'"):
      _specs(params, kinds, P.get_parametrization("sp"), 16)

  def test_structure_mismatch(self):
    params = _contract_params()
    params["block_0"]["attn"]["rotary"] = {"kernel": jnp.zeros((4, 4))}
    with self.assertRaisesRegex(ValueError, "same tree structure"):
      _specs(params, _contract_kinds(), P.get_parametrization("sp"), 16)

  def test_bad_shape_named(self):
    with self.assertRaisesRegex(ValueError, "parameter 'readout/kernel'.*at least 2 axes"):
      _specs({"readout": {"kernel": jnp.zeros((4,))}}, {"readout": {"kernel": "readout"}},
             P.get_parametrization("sp"), 16)

  def test_bad_width(self):
    with self.assertRaisesRegex(ValueError, "width must be a positive integer"):
      _specs(_contract_params(), _contract_kinds(), P.get_parametrization("sp"), 0)


if __name__ == "__main__":
  absltest.main()
