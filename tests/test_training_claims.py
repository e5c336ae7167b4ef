"""Tests of the training claims (scaling.studies.claims.training.families and the modules it assembles): criteria,
post-processing helpers and each measurement on tiny sizes."""

import dataclasses
import math
import types

import jax
import numpy as np
import pytest

from scaling.training.optimizer import OptimizerConfig
from scaling.training.model import transformer as model_lib
from scaling.training.model.family import ModelFamily
from scaling.training import resources
from scaling.studies import device_time
from scaling.attention import rope as rope_lib
from scaling.attention import rules
from scaling.runs import timesplit
from scaling.training.loop import losses as losses_lib
from scaling.studies.grid import run as grid_run
from scaling.studies.grid import optimum as optimum_lib
from scaling.studies import stats
from scaling.studies.claims.training import best_learning_rate as best_lr
from scaling.studies.claims.training import depth as depth_claims
from scaling.studies.claims.training import loss_curves as curves
from scaling.studies.claims.training import nan_and_gradient as nan_claims
from scaling.studies.claims.training import qk_correlation as qk_claims
from scaling.studies.claims.training import scale_rules as scale_claims
from scaling.studies.claims.training import families as training_claims
from scaling.studies.claims.training import grids as grids_lib
from scaling.studies.claims.training import numbers as numbers_lib
from scaling.studies.claims.training import sizes as sizes_lib
from scaling.studies.claims import verdicts
from scaling.studies.claims.training.families import TRAINING_CLAIMS

NAN = float("nan")


def _ctx(planner=None):
  """A context of the "test" sizes on the synthetic task, with its own grids (``planner``: a new one)."""
  return types.SimpleNamespace(mode="test", seed=0, num_seeds=2, text_file=None,
                               planner=grid_run.GridPlanner() if planner is None else planner)


class _Written(grid_run.GridPlanner):
  """A planner that trains nothing: ``fake(spec)`` is the grid of each spec, or when given ``widened(spec)`` that of
  a grid widened past an edge."""

  def __init__(self, fake, widened=None):
    super().__init__()
    self.fake = fake
    self.widened = widened
    self.asked = []

  def train(self, spec, like=None):
    self.asked.append(spec)
    return self.widened(spec) if self.widened and spec.label.endswith(", widened") else self.fake(spec)


# ----------------------------------------------------------------------------
# The claims and their criteria.


def test_claims_are_training_claims_with_unique_ids():
  ids = [c.id for c in TRAINING_CLAIMS]
  assert len(ids) == len(set(ids)) == 14
  for c in TRAINING_CLAIMS:
    assert c.training and c.source and c.text and c.grids is not None


def test_a_training_claim_must_declare_its_grids():
  claim = TRAINING_CLAIMS[0]
  with pytest.raises(ValueError, match="declares the grids it trains"):
    verdicts.Claim(claim.id, claim.source, claim.text, claim.criterion, claim.measure, training=True)


@pytest.mark.parametrize("claim", TRAINING_CLAIMS, ids=lambda c: c.id)
def test_every_criterion_reaches_holds_and_fails(claim):
  verdict_set = {claim.criterion.verdict(x) for x in claim.criterion.probes()}
  assert verdicts.HOLDS in verdict_set and verdicts.FAILS in verdict_set
  assert claim.criterion.verdict(NAN) == verdicts.NOT_MEASURED


def test_every_training_verdict_takes_the_seeds_noise():
  """Every training criterion (and every other reading beside one) reads its statistic's standard error, and can
  reach holds, does not hold and inconclusive; those with a grid edge reach inconclusive (grid edge)."""
  for claim in TRAINING_CLAIMS:
    for criterion in (claim.criterion, *(r.criterion for r in claim.beside)):
      assert criterion.noise, claim.id
      probes = criterion.probes()
      reached = {criterion.verdict(x, 0.0) for x in probes} | {criterion.verdict(x, 1e3) for x in probes}
      assert {verdicts.HOLDS, verdicts.FAILS, verdicts.INCONCLUSIVE} <= reached, claim.id
      if criterion.edge:
        assert criterion.verdict(probes[0], 0.0, at_edge=True) == verdicts.INCONCLUSIVE_EDGE
      assert "standard errors" in criterion.text


# A criterion holding at >= 2 and failing at <= 1 (partly between): (value, standard error, verdict).
NOISE_CASES = (
    (3.0, 0.1, verdicts.HOLDS), (3.0, 0.6, verdicts.INCONCLUSIVE),  # 3 − 2 × 0.6 = 1.8 is below 2
    (0.5, 0.1, verdicts.FAILS), (0.5, 0.3, verdicts.INCONCLUSIVE),  # 0.5 + 0.6 = 1.1 is above 1
    (1.5, 0.1, verdicts.PARTLY), (1.5, 0.3, verdicts.INCONCLUSIVE),  # 1.5 ± 0.6 reaches both thresholds
    (1.004, 0.02, verdicts.INCONCLUSIVE), (1.004, 0.001, verdicts.PARTLY),  # 1.004 ± 0.04 reaches 1
    (1.004, None, verdicts.PARTLY), (1.0, 0.0, verdicts.FAILS), (NAN, 0.1, verdicts.NOT_MEASURED),
)


@pytest.mark.parametrize("value, se, verdict", NOISE_CASES)
def test_a_threshold_within_two_standard_errors_is_inconclusive(value, se, verdict):
  criterion = verdicts.Criterion("x", "a ratio", holds=(">=", 2.0), fails=("<=", 1.0), noise=True)
  assert criterion.verdict(value, se) == verdict
  assert criterion.verdict(value, se, at_edge=True) == (verdicts.NOT_MEASURED if math.isnan(value)
                                                        else verdicts.INCONCLUSIVE_EDGE)


def test_criterion_text_states_the_noise_and_edge_rules_and_rejects_a_negative_error():
  plain = verdicts.Criterion("x", "a ratio", holds=(">=", 2.0), fails=("<=", 1.0))
  noisy = verdicts.Criterion("x", "a ratio", holds=(">=", 2.0), fails=("<=", 1.0), noise=True, edge="at_edge")
  assert plain.text == "a ratio: holds if >= 2, does not hold if <= 1, partly otherwise"
  assert noisy.text == (plain.text + "; inconclusive if a threshold lies within 2 standard errors (over seeds) of the "
                        "value; inconclusive if the optimum stays at the edge of the grid searched (widened up to its "
                        "bound)")
  with pytest.raises(ValueError, match="standard_error"):
    noisy.verdict(1.5, -0.1)


def _written_claim(numbers, **criterion):
  """A training claim whose measurement reports ``numbers``, decided by a criterion holding at >= 2 and failing at
  <= 1 on "x" (with ``criterion``'s further fields), with the other reading "y" (holds at <= 0.5) beside it."""
  other = verdicts.Reading("another reading", verdicts.Criterion("y", "y", holds=("<=", 0.5), fails=(">=", 1.5),
                                                                 noise=True))
  return verdicts.Claim("train_x", "note", "X.", verdicts.Criterion("x", "a ratio", holds=(">=", 2.0),
                                                                    fails=("<=", 1.0), **criterion),
                        lambda ctx: verdicts.Measurement(numbers, "Measured."), training=True,
                        grids=lambda ctx: {}, beside=(other,))


def test_evaluate_reads_the_standard_error_and_the_edge_flag():
  row = _written_claim({"x": 1.004, "x_se": 0.02, "y": 0.2, "y_se": 0.1}, noise=True).evaluate(None)
  assert (row["verdict"], row["standard_error"]) == (verdicts.INCONCLUSIVE, 0.02)
  assert "x = 1.004 ± 0.02 (standard error over seeds)." in row["finding"]
  assert "Inconclusive: the threshold 1 lies within 2 standard errors of the value." in row["finding"]
  assert "Knife-edge" not in row["finding"]  # the inconclusive verdict says it instead
  assert row["beside"] == [{"label": "another reading", "criterion": row["beside"][0]["criterion"], "reason": "",
                            "statistic": "y", "value": 0.2, "standard_error": 0.1, "at_edge": False,
                            "verdict": verdicts.HOLDS}]
  assert "Beside, another reading: **holds** (y = 0.2 ± 0.1)." in row["finding"]
  decided = _written_claim({"x": 1.004, "x_se": 0.001, "y": 0.2, "y_se": 0.1}, noise=True).evaluate(None)
  assert decided["verdict"] == verdicts.PARTLY and "Knife-edge" in decided["finding"]
  edge = _written_claim({"x": 3.0, "x_se": 0.0, "x_edge": True, "y": 0.2, "y_se": 0.1}, noise=True,
                        edge="x_edge").evaluate(None)
  assert edge["verdict"] == verdicts.INCONCLUSIVE_EDGE and "stays at the edge of the grid" in edge["finding"]
  for numbers, missing in (({"x": 3.0, "x_edge": False, "y": 0.2, "y_se": 0.1}, "'x_se'"),
                           ({"x": 3.0, "x_se": 0.1, "x_edge": False, "y": 0.2}, "'y_se'"),
                           ({"x": 3.0, "x_se": 0.1, "y": 0.2, "y_se": 0.1}, "'x_edge'")):
    with pytest.raises(KeyError, match=missing):
      _written_claim(numbers, noise=True, edge="x_edge").evaluate(None)


def test_standard_error_and_spread():
  assert stats.standard_error([1.0, 3.0]) == pytest.approx(1.0)  # sample std √2 over √2
  assert stats.standard_error([2.0, 4.0, 9.0]) == pytest.approx(np.std([2.0, 4.0, 9.0], ddof=1) / math.sqrt(3))
  assert stats.standard_error([1.0, NAN]) is None and stats.standard_error([]) is None
  assert numbers_lib.spread("g", [1.0, NAN, 3.0]) == {"g_se": 1.0, "g_seeds": [1.0, None, 3.0]}


def test_widened_values_go_past_the_edge_by_at_most_the_bound():
  octaves = (-2.0, -1.0, 0.0, 1.0, 2.0)
  assert best_lr.widened_values(octaves, 0, 2.0) == (-3.0, -4.0)
  assert best_lr.widened_values(octaves, 4, 2.0) == (3.0, 4.0)
  assert best_lr.widened_values(octaves, 2, 2.0) == ()
  assert best_lr.widened_values((-12.0, -10.0, -8.0), 2, 2.0) == (-6.0,)  # one step of the grid's 2 octaves
  assert best_lr.widened_values((-10.0, -6.0, -2.0), 0, 2.0) == (-12.0,)  # a 4-octave step is cut to the bound
  with pytest.raises(ValueError, match="at least two"):
    best_lr.widened_values((1.0,), 0, 2.0)


def test_sizes_have_the_modes_and_reject_unknown_ones():
  assert {"quick", "cpu_hour", "paper", "test"} <= set(sizes_lib.SIZES)
  for s in sizes_lib.SIZES.values():
    for depth in (s["depth_small"], s["depth_converge"], s["depth_diverge"]):
      assert depth in s["steps"]
  with pytest.raises(KeyError, match="no training sizes"):
    sizes_lib.sizes(types.SimpleNamespace(mode="nope"))


# ----------------------------------------------------------------------------
# Post-processing helpers: known answers.


def test_diverged_and_nonfinite_within():
  losses = np.array([[4.0, 4.0, 4.0, 4.0],
                     [3.0, NAN, 13.0, 4.0],
                     [2.0, NAN, 3.0, np.inf]])
  np.testing.assert_array_equal(curves.diverged(losses), [False, True, True, True])
  np.testing.assert_array_equal(curves.diverged(losses, window=2), [False, True, True, False])
  np.testing.assert_array_equal(curves.diverged(losses, factor=4.0), [False, True, False, True])
  np.testing.assert_array_equal(curves.nonfinite_within(losses), [False, True, False, True])
  np.testing.assert_array_equal(curves.nonfinite_within(losses, window=2), [False, True, False, False])


def test_smallest_finite_final_losses_window_mean():
  assert curves.smallest_finite(np.array([[3.0, NAN], [1e-7, np.inf]])) == 1e-7
  assert math.isnan(curves.smallest_finite(np.array([NAN, np.inf])))
  losses = np.array([[5.0, 5.0], [4.0, NAN], [2.0, 3.0], [1.0, 3.0]])
  np.testing.assert_allclose(curves.final_losses(losses, 2), [1.5, NAN])
  np.testing.assert_allclose(curves.window_mean(losses, 3, 2), [1.5, 3.0])
  np.testing.assert_allclose(curves.window_mean(losses, 1, 2), [4.5, NAN])
  np.testing.assert_allclose(curves.window_mean(losses, 99, 1), [1.0, 3.0])


def test_best_index_and_mean_std():
  assert curves.best_index(np.array([[3.0, 3.0], [1.0, NAN], [2.0, 2.5]])) == 2
  assert curves.best_index(np.array([[NAN, 1.0]])) is None
  assert stats.finite_mean_std([1.0, 3.0, NAN]) == {"mean": 2.0, "std": 1.0}
  assert stats.finite_mean_std([NAN]) == {"mean": None, "std": None}
  assert stats.finite_mean_std([1.0, 2.0]) == {"mean": 1.5, "std": 0.5}
  assert stats.finite_mean_std([1.0, 1.0, 2.0]) == {"mean": 1.333, "std": 0.4714}  # 4/3, sqrt(2)/3


def test_rounding_and_mean_std_over_seeds():
  assert stats.round_sig(0.123456) == 0.1235
  assert stats.round_sig(123456.0) == 123500.0
  assert stats.round_sig(2.0 / 3.0, 6) == 0.666667
  assert stats.round_sig(None) is None
  assert math.isnan(stats.round_sig(NAN)) and stats.round_sig(math.inf) == math.inf
  assert stats.round_finite(math.inf) is None and stats.round_finite(NAN) is None
  assert stats.round_finite(-0.000123456) == -0.0001235
  assert stats.finite_or_none(np.float32(0.5)) == 0.5 and stats.finite_or_none(-math.inf) is None
  assert stats.mean_std([1.0, 2.0, 4.0]) == {"mean": 7.0 / 3.0, "std": math.sqrt(14.0) / 3.0}
  assert stats.mean_std([1.0, 2.0, 4.0], 3) == {"mean": 2.33, "std": 1.25}
  assert all(math.isnan(v) for v in stats.mean_std([1.0, NAN]).values())
  assert stats.format_mean_std(2.0 / 3.0, 0.05, ".3f") == "0.667 ± 0.050"
  with pytest.raises(ValueError, match="digits"):
    stats.round_sig(1.0, 0)


def test_qk_alignment_and_max_logit_growth():
  cos = np.array([[[0.5, -0.5], [0.1, 0.3]], [[NAN, 0.0], [0.0, 0.0]]])  # [M=2, depth=2, N=2]
  out = qk_claims.qk_alignment(cos)
  assert out[0] == pytest.approx(0.35) and math.isnan(out[1])
  logits = np.zeros((4, 2, 3))
  logits[0] = [[1.0, 2.0, 0.5], [4.0, 1.0, 1.0]]
  logits[2:] = [[3.0, 8.0, 1.0], [4.0, 2.0, 2.0]]
  np.testing.assert_allclose(qk_claims.max_logit_growth(logits, last=2), [4.0, 1.0])


def test_optimum_and_spread():
  assert optimum_lib.optimum_log2_lr({"log2_lr": -8.0, "log2_lr_interp": -7.5}) == -7.5
  assert optimum_lib.optimum_log2_lr({"log2_lr": -8.0, "log2_lr_interp": None}) == -8.0
  assert optimum_lib.optimum_log2_lr({"log2_lr": None, "log2_lr_interp": None}) is None
  assert optimum_lib.spread([-8.0, -6.5, -7.0]) == 1.5
  assert optimum_lib.spread([-8.0, None]) is None


def test_qk_alignment_fn_is_one_when_key_equals_query():
  dataset = sizes_lib.dataset_of(_ctx())
  family = ModelFamily(depth=1, num_heads=2, head_dim=8, rule="sqrt", base_width=16)
  config = family.model_config("sp", 16, vocab_size=dataset.vocab_size, max_len=dataset.seq_len)
  params = model_lib.init_params(jax.random.PRNGKey(0), config)
  attn = params["block_0"]["attn"]
  tied = {**params, "block_0": {**params["block_0"], "attn": {**attn, "key": attn["query"]}}}
  stacked = jax.tree.map(lambda *xs: np.stack(xs), params, tied)
  tokens = dataset.eval_batch(0, 0)["inputs"]
  cos = np.asarray(qk_claims.qk_alignment_fn(config)(stacked, tokens))
  assert cos.shape == (2, 1, 2)
  assert np.all(np.abs(cos[0]) < 0.9)
  np.testing.assert_allclose(cos[1], 1.0, atol=1e-5)


# ----------------------------------------------------------------------------
# Each measurement on tiny sizes (synthetic data; the grids are shared through the context's planner).


# The claims measured on tiny trained grids here: those that share the unscaled and 1/√d_k grids of one depth (the
# others train grids of their own; their measurements are checked on written-out grids below, which trains nothing).
TRAINED = ("train_nan_within_100_steps", "train_grad_norm_below_1e-6", "train_depth6_converges_worse",
           "train_depth6_oscillates", "train_depth6_slow", "train_post_softmax_worse", "train_scaled_grads_stable",
           "train_qk_correlate", "train_mup_lr_transfer")


@pytest.fixture(scope="module")
def trained():
  """(rows, the plan of the claims' declared grids, the grids their measurement trained, the run's time split)."""
  ctx = _ctx()
  claims = [c for c in TRAINING_CLAIMS if c.id in TRAINED]
  planned = ctx.planner.plan(spec for c in claims for spec in c.grids(ctx).values())
  assert not ctx.planner.runs  # planning trains nothing
  with timesplit.TimeSplit() as split:
    out = {c.id: c.evaluate(ctx) for c in claims}
  return out, planned, ctx.planner.runs, split


@pytest.fixture(scope="module")
def rows(trained):
  return trained[0]


def test_dry_run_plans_the_grids_the_run_trains(trained):
  """The plan (what --dry_run prints) lists exactly the grids the measurement trains, but for the grids widened past
  an edge an optimum sat at (found only by training), and the run compiles at least the distinct programs it counts
  (the plan's compilation is per distinct program)."""
  _, planned, grids, split = trained
  declared = [g.spec for g in grids if "widened" not in g.spec.label]
  assert list(planned.grids) == declared  # the same models, optimizers, rates and seeds, in order
  assert [(g.steps, g.members) for g in planned.grids] == [g.records["loss"].shape[:2] for g in grids
                                                            if "widened" not in g.spec.label]
  programs = planned.compiled()
  assert programs < len(planned)  # rules that are a logit factor share a program
  assert split.compiles >= programs


@pytest.mark.parametrize("claim", [c for c in TRAINING_CLAIMS if c.id in TRAINED], ids=lambda c: c.id)
def test_measure_returns_its_statistic(rows, claim):
  row = rows[claim.id]
  assert row["statistic"] == claim.criterion.statistic
  assert row["numbers"]["data"] == "synthetic recall task"
  assert row["numbers"]["mode"] == "test"
  assert row["verdict"] in (*verdicts.VERDICTS, verdicts.NOT_MEASURED)
  assert isinstance(row["finding"], str) and row["finding"]
  value = row["value"]
  assert value is None or isinstance(value, float)
  se = row["numbers"][f"{claim.criterion.statistic}_se"]  # every training verdict carries the seeds' spread
  assert row["standard_error"] == se and (se is None or se >= 0.0)


def test_measurements_report_seed_statistics(rows):
  assert set(rows["train_nan_within_100_steps"]["numbers"]["nan_fraction_none_per_seed"]) == {"mean", "std"}
  depth6 = rows["train_depth6_converges_worse"]["numbers"]
  assert set(depth6["none"]["final_loss"]) == {"mean", "std"}
  assert depth6["relative_final_gap"] is not None
  post = rows["train_post_softmax_worse"]["numbers"]
  assert set(post) >= {"post_softmax", "sqrt", "relative_final_gap", "relative_gap_at_fixed_step"}
  assert post["post_softmax"]["best_learning_rate"] is not None
  qk = rows["train_qk_correlate"]["numbers"]["by_rule_width"]
  assert set(qk) == {"sqrt width 16"}
  assert rows["train_mup_lr_transfer"]["numbers"]["mup_optimal_log2_lr_spread"] == 0.0


def test_grids_are_shared_between_claims():
  ctx = _ctx()
  a = ctx.planner.train(grids_lib.grid_spec(ctx, rule="none", depth=1))
  assert ctx.planner.train(grids_lib.grid_spec(ctx, rule="none", depth=1)) is a
  assert ctx.planner.runs == [a]
  assert a.records["loss"].shape == (4, 4)
  assert a.records["layer_grad_norm"].shape == (4, 4, 1)
  assert a.by_lr(a.records["loss"][0]).shape == (2, 2)
  assert _ctx().planner.train(a.spec) is not a  # another context trains its own


def _fake_grid(final_by_lr_seed, steps=10, initial=4.0, log2_lrs=(-10.0, -8.0), seeds=(0, 1), attn_mults=None,
               cls=grid_run.GridRun, spec=None, records=None, final_params=None):
  """A GridRun whose loss starts at ``initial`` and sits at each member's final value (NaN: diverged); ``spec``
  (default: one of the rates, seeds and multipliers given), further ``records`` and ``final_params`` as given."""
  final = np.asarray(final_by_lr_seed, np.float64).reshape(1, -1)
  loss = np.repeat(final, steps, axis=0)
  loss[0] = initial
  if spec is None:
    spec = grid_run.GridSpec(model_config=None, opt_config=None, data=None, data_seed=0, log2_lrs=log2_lrs,
                             seeds=seeds, attn_mults=attn_mults)
  assert spec.members == loss.shape[1]
  return cls(spec=spec, records={"loss": loss, **(records or {})}, final_params=final_params, wall_time=0.0)


def test_compare_at_best_lr_known_answer(monkeypatch):
  """Two fake grids (2 learning rates x 2 seeds, 10 steps) with losses chosen so the best rows and gaps are known."""
  steps = 10

  grids = {"a": _fake_grid([3.0, 3.2, 2.0, NAN], steps, 5.0),  # lr 2^-8 has a NaN seed: out, so a's best is 2^-10
           "b": _fake_grid([2.4, 2.6, 2.5, 2.5], steps, 5.0)}  # both 2.5 on average: the first (2^-10) wins the tie
  monkeypatch.setitem(sizes_lib.SIZES, "fake", dict(sizes_lib.SIZES["test"], steps={3: steps}, fixed_step=5))
  planner = _Written(pytest.fail, widened=lambda spec: _fake_grid([9.0] * spec.members, steps, 5.0, spec=spec))
  out = best_lr.compare_at_best_lr(types.SimpleNamespace(mode="fake", planner=planner), grids, "a", "b", 3)
  # Both best rates sit at the lower edge: each grid is widened 2 octaves below (2^-12), where the loss is worse.
  assert [spec.log2_lrs for spec in planner.asked] == [(-12.0,), (-12.0,)]
  assert out["a"]["widened_by"] == out["b"]["widened_by"] == [f"{2.0 ** -12:.3g}"]
  assert not out["a"]["best_at_grid_edge"] and not out["best_lr_at_edge"]
  assert out["a"]["best_learning_rate"] == f"{2.0 ** -10:.3g}"
  assert out["a"]["final_loss"]["mean"] == pytest.approx(3.1)
  assert out["b"]["final_loss"]["mean"] == pytest.approx(2.5)
  assert out["relative_final_gap"] == pytest.approx((3.1 - 2.5) / 2.5, rel=1e-3)
  assert out["relative_final_gap_per_seed"]["mean"] == pytest.approx(np.mean([(3.0 - 2.4) / 2.4, (3.2 - 2.6) / 2.6]),
                                                                     rel=1e-3)
  assert out["a"]["initial_loss"]["mean"] == 5.0


def _depth6_worse_row(widened_loss):
  """train_depth6_converges_worse on written depth-6 grids (rates 2^-12, 2^-10, 2^-8): unscaled best at 2^-10
  (interior, final loss 2.6), 1/√d_k best at 2^-8 (the grid's upper edge, 2.4), its widening to 2^-6 ending at
  ``widened_loss``. Returns (the row, the specs the planner was asked for)."""
  rates = (-12.0, -10.0, -8.0)

  def fake(spec):
    rule = _rule(spec)
    finals = [2.6, 2.6, 2.5, 2.5, 2.4, 2.4] if rule == "sqrt" else [3.0, 3.0, 2.6, 2.6, 2.7, 2.7]
    return _fake_grid(finals, log2_lrs=rates, spec=grid_run.GridSpec(None, None, None, 0, rates, (0, 1), label=rule))

  def widened(spec):
    assert spec.label == "sqrt, widened", spec.label  # only 1/√d_k's best sits at an edge
    return _fake_grid([widened_loss] * spec.members, spec=spec)

  planner = _Written(fake, widened)
  row = next(c for c in TRAINING_CLAIMS if c.id == "train_depth6_converges_worse").evaluate(_ctx(planner))
  return row, planner.asked


def test_a_best_rate_at_the_grid_edge_widens_the_grid_or_leaves_the_verdict_inconclusive():
  # Worse past the edge: 2^-8 is now interior and the comparison is decided, (2.6 − 2.4) / 2.4.
  row, asked = _depth6_worse_row(2.45)
  assert [s.log2_lrs for s in asked if s.label.endswith("widened")] == [(-6.0,)]
  assert row["numbers"]["sqrt"]["widened_by"] == [f"{2.0 ** -6:.3g}"] and not row["numbers"]["best_lr_at_edge"]
  assert row["value"] == pytest.approx(0.2 / 2.4, rel=1e-3)
  assert row["verdict"] == verdicts.HOLDS
  assert "1/√d_k's grid widened to 0.0156" in row["finding"]
  # Still better past the edge: the optimum may lie further out, so no verdict is read at it.
  row, _ = _depth6_worse_row(2.3)
  assert row["numbers"]["sqrt"]["best_learning_rate"] == f"{2.0 ** -6:.3g}" and row["numbers"]["best_lr_at_edge"]
  assert row["verdict"] == verdicts.INCONCLUSIVE_EDGE
  assert "best learning rate still at the grid's edge for 1/√d_k" in row["finding"]


def test_describe_sizes_reads_the_mode(monkeypatch):
  monkeypatch.setitem(sizes_lib.SIZES, "fake", dict(sizes_lib.SIZES["test"], width=48, num_heads=3, head_dim=16,
                                                    seq_len=24, batch_size=5, log2_lrs=(-9.0, -8.0, -7.0),
                                                    qk_widths=(48, 96)))
  text = sizes_lib.describe_sizes(types.SimpleNamespace(mode="fake", seed=0, num_seeds=2))
  for part in ("width 48", "3 heads of d_k 16", "sequences of 24", "batch 5", "3 learning rates 0.00195 .. 0.00781",
               "2 seeds", "q-k at widths 48, 96"):
    assert part in text, (part, text)


# ----------------------------------------------------------------------------
# The new post-processing helpers and measurements on written-out grids (nothing trained).


def test_stalled_roughness_and_steps_to_reach():
  losses = np.array([[4.0, 4.0, 4.0],
                     [3.9, 2.0, NAN],
                     [3.8, 1.0, NAN],
                     [3.7, 1.0, NAN]])
  np.testing.assert_array_equal(curves.stalled(losses, 0.9, last=2), [True, False, False])  # 3.75 > 3.6; 1.0 < 3.6
  np.testing.assert_allclose(curves.roughness(np.array([[1.0], [3.0], [2.0], [4.0], [1.0]])),
                             [math.sqrt((2.0**2 + 3.0**2) / 2)])  # the second half: 2, 4, 1
  reached = curves.steps_to_reach(np.array([[5.0, 5.0], [4.0, 5.0], [2.0, 5.0], [2.0, 5.0]]), np.array([3.0, 3.0]), 2)
  np.testing.assert_array_equal(reached, [2.0, NAN])  # window means 4.5, then 3.0 over steps 1..2: step 2


def _rule(spec):
  """The logit-scale rule of a grid: "sqrt" or "none"."""
  return next(r for r in ("sqrt", "none") if spec.model_config.rule == rules.get_rule(r))


def test_depth12_cannot_converge_counts_divergence_and_stalls_at_fair_rates():
  def fake(spec):
    pre_ln, warmup = spec.model_config.pre_ln, spec.opt_config.warmup_steps is not None
    if _rule(spec) == "sqrt":  # 1/√d_k fails only post-LN without warmup at the second learning rate (stalls)
      return _fake_grid([2.0, 2.0, 2.0, 3.9] if (not pre_ln and not warmup) else [2.0, 2.0, 2.0, 2.0])
    return _fake_grid([NAN, 3.9, 2.0, 2.0])  # unscaled: one diverged, one stalled, two converged
  row = next(c for c in TRAINING_CLAIMS if c.id == "train_depth12_cannot_converge").evaluate(_ctx(_Written(fake)))
  # Fair rates: both in three setups (4 runs, 2 failed), the first only post-LN without warmup (2 runs, 2 failed).
  assert row["numbers"]["runs_counted"] == 14
  assert row["value"] == pytest.approx(8 / 14, abs=1e-4)
  assert row["numbers"]["by_setup"]["post-LN, no warmup"]["none_failed_fraction"] == 1.0
  assert row["verdict"] == verdicts.PARTLY


# The depth-6 grids at rates 2^-10 (1/√d_k's best) and 2^-8, and the tiny-rate grids 2 and 4 octaves below 2^-10, each
# 2 rates x 2 seeds (members: rate-major); initial loss 4, so converged = final <= 3.6 and never above 12. Per case:
# the unscaled depth-6 grid, the unscaled and 1/√d_k tiny-rate grids, then the statistic (the fraction of unscaled runs
# converging with the tiny rate and clipping, at the rates where every 1/√d_k run so trained converges, minus the
# fraction converging at 2^-10 unclipped, per seed then averaged), the verdict, and the unscaled model's own best rate
# unclipped: (rate, fraction converged).
DIVERGES = [NAN, 13.0, 3.9, 3.9]  # at 2^-10: one NaN, one above 3 x 4 (diverged though finite); 2^-8 stalls
TINY_CASES = (
    ("holds", DIVERGES, [2.0] * 4, [2.0] * 4, 1.0, verdicts.HOLDS, (-8.0, 0.0)),
    ("inconclusive", DIVERGES, [2.0, 2.0, 2.0, 3.9], [2.0] * 4, 0.75, verdicts.INCONCLUSIVE, (-8.0, 0.0)),  # 1, 0.5
    ("not_needed", [2.0, 2.0, 3.9, 3.9], [2.0] * 4, [2.0] * 4, 0.0, verdicts.FAILS, (-10.0, 1.0)),
    ("neither_way", DIVERGES, [3.9, 3.7, NAN, 3.9], [2.0] * 4, 0.0, verdicts.FAILS, (-8.0, 0.0)),
    ("fair_rates_only", DIVERGES, [2.0, 2.0, 3.9, 3.9], [2.0, 2.0, 3.9, 2.0], 1.0, verdicts.HOLDS, (-8.0, 0.0)),
    ("not_measured", DIVERGES, [2.0] * 4, [3.9, 2.0, 2.0, 3.9], None, verdicts.NOT_MEASURED, (-8.0, 0.0)),
)


@pytest.mark.parametrize("none_base, none_tiny, sqrt_tiny, value, verdict, own", [c[1:] for c in TINY_CASES],
                         ids=[c[0] for c in TINY_CASES])
def test_tiny_lr_clipping_on_written_grids(none_base, none_tiny, sqrt_tiny, value, verdict, own):
  calls = []

  def fake(spec):
    rule, clip = _rule(spec), getattr(spec.opt_config, "clip", None)
    if clip is not None:  # the tiny-rate grids
      calls.append((rule, spec.log2_lrs, clip))
      return _fake_grid(none_tiny if rule == "none" else sqrt_tiny, log2_lrs=spec.log2_lrs)
    if rule == "sqrt":  # the depth-6 grid at rates 2^-10, 2^-8: the first is best
      return _fake_grid([2.0, 2.0, 3.0, 3.0])
    return _fake_grid(none_base)
  claim = next(c for c in TRAINING_CLAIMS if c.id == "train_depth6_tiny_lr_clipping")
  row = claim.evaluate(_ctx(_Written(fake)))
  assert calls == [("none", (-12.0, -14.0), 1.0), ("sqrt", (-12.0, -14.0), 1.0)]  # 2 and 4 octaves below 2^-10
  assert row["numbers"]["learning_rates"] == [f"{2.0 ** -12:.3g}", f"{2.0 ** -14:.3g}"]
  assert row["numbers"]["none_own_best_no_clipping"] == {"best_learning_rate": f"{2.0 ** own[0]:.3g}",
                                                         "converged_fraction": own[1]}
  assert (row["value"], row["verdict"]) == (value, verdict)
  if value is not None:
    assert row["numbers"]["without_tuning"]["learning_rate"] == f"{2.0 ** -10:.3g}"
    assert row["value"] == pytest.approx(np.mean(row["numbers"]["tuning_gain_seeds"]))


def test_converged_and_tiny_rates():
  losses = np.array([[4.0, 4.0, 4.0, 4.0],
                     [3.0, 13.0, 3.9, NAN],
                     [2.0, 2.0, 3.7, 2.0]])
  np.testing.assert_array_equal(curves.converged(losses, 0.9, last=1), [True, False, False, False])
  assert depth_claims.tiny_log2_lrs(-7.0, (4.0, 2.0)) == (-9.0, -11.0)


class _ParamsGrid(grid_run.GridRun):
  """A written grid whose initial parameters are the marker "init" (its final ones: "final")."""

  def initial_params(self):
    return "init"


def _sqrt_optimal_row(monkeypatch, loss_of_c, var_final, var_init=(1.0, 1.0)):
  """train_sqrt_optimal on written grids: the 1/√d_k grid's best rate is its middle one, its logit variance per seed
  ``var_init`` and ``var_final`` there; each multiplier 2^c of 1/√d_k ends at loss ``loss_of_c(c)``. Returns (the row,
  the multipliers (log2 c) of each grid trained)."""
  trained = []

  def fake(spec):
    if spec.attn_mults is not None:
      c = np.log2(np.asarray(spec.attn_mults) / math.sqrt(8))  # α = c·√d_k, d_k 8
      trained.append(tuple(float(x) for x in np.round(c, 9)))
      return _fake_grid(np.repeat([loss_of_c(x) for x in c], 2), log2_lrs=spec.log2_lrs, attn_mults=spec.attn_mults)
    return _fake_grid([3.0, 3.0, 2.0, 2.0, 3.0, 3.0], log2_lrs=(-12.0, -10.0, -8.0), cls=_ParamsGrid,
                      final_params="final")  # the 1/√d_k grid: the middle learning rate is best (interior)

  per_member = lambda per_seed: np.asarray([99.0, 99.0, *per_seed, 99.0, 99.0])[:, None, None] * np.ones((1, 1, 2))
  variance = {"init": per_member(var_init), "final": per_member(var_final)}
  monkeypatch.setattr(scale_claims, "logit_variance_fn", lambda config: lambda params, tokens: variance[params])
  row = next(c for c in TRAINING_CLAIMS if c.id == "train_sqrt_optimal").evaluate(_ctx(_Written(fake)))
  return row, trained


# Per seed, the 1/√d_k logits' variance after training, and the verdict on |log2 Var| (holds <= 1, fails >= 3).
VARIANCE_CASES = (("holds", (1.1, 0.9), 0.0, verdicts.HOLDS),
                  ("fails", (16.5, 15.5), 4.0, verdicts.FAILS),
                  ("inconclusive", (1.5, 2.9), math.log2(2.2), verdicts.INCONCLUSIVE))  # log2: 0.58, 1.54


@pytest.mark.parametrize("var_final, value, verdict", [c[1:] for c in VARIANCE_CASES],
                         ids=[c[0] for c in VARIANCE_CASES])
def test_sqrt_optimal_reads_the_logit_variance(monkeypatch, var_final, value, verdict):
  row, trained = _sqrt_optimal_row(monkeypatch, lambda c: 2.0 + (c - 0.5) ** 2, var_final)
  assert row["statistic"] == "abs_log2_logit_variance"
  assert row["value"] == pytest.approx(value, abs=1e-3)
  log2_var = np.log2(var_final)
  assert row["standard_error"] == pytest.approx(abs(log2_var[0] - log2_var[1]) / 2, rel=1e-3)  # std/√2 of two
  assert row["verdict"] == verdict
  assert row["numbers"]["logit_variance_init"]["mean"] == 1.0
  # The other reading beside it: the loss-optimal multiplier, a parabola with its vertex at log2 c = 0.5 (interior).
  (other,) = row["beside"]
  assert (other["statistic"], other["verdict"]) == ("abs_optimal_log2_multiplier", verdicts.HOLDS)
  assert other["value"] == pytest.approx(0.5, abs=1e-6) and other["standard_error"] == 0.0
  assert trained == [(-1.0, 0.0, 1.0)]  # interior: not widened
  assert "Beside, the loss-optimal multiplier" in row["finding"]


def test_sqrt_optimal_widens_the_multipliers_past_an_edge(monkeypatch):
  # The optimum at log2 c = -1.6 lies past the grid's edge (-1): widened by 2 octaves (-2, -3), it is interior.
  row, trained = _sqrt_optimal_row(monkeypatch, lambda c: 2.0 + (c + 1.6) ** 2, (1.0, 1.0))
  assert trained == [(-1.0, 0.0, 1.0), (-2.0, -3.0)]
  (other,) = row["beside"]
  assert other["value"] == pytest.approx(1.6, abs=1e-6)
  assert (other["at_edge"], other["verdict"]) == (False, verdicts.FAILS)
  assert row["numbers"]["widened_by"] == [-2.0, -3.0]
  # Still falling at the widened edge: the optimum is not located, whatever its value.
  row, trained = _sqrt_optimal_row(monkeypatch, lambda c: 2.0 + 0.01 * c, (1.0, 1.0))
  assert trained == [(-1.0, 0.0, 1.0), (-2.0, -3.0)]
  (other,) = row["beside"]
  assert (other["value"], other["at_edge"], other["verdict"]) == (3.0, True, verdicts.INCONCLUSIVE_EDGE)
  assert row["verdict"] == verdicts.HOLDS  # the verdict answers the note's reading, the variance


def test_logit_variance_fn_matches_the_models_own_logit_rms():
  """The variance per head, with the mean, gives back the RMS the attention sows (√mean(var + mean²))."""
  ctx = _ctx()
  dataset = sizes_lib.dataset_of(ctx)
  config = grids_lib.grid_spec(ctx, rule="sqrt", depth=2, steps=4).model_config
  params = model_lib.init_params(jax.random.PRNGKey(0), config)
  tokens = dataset.eval_batch(0, 0)["inputs"]
  stacked = jax.tree.map(lambda p: p[None], params)
  var = np.asarray(scale_claims.logit_variance_fn(config)(stacked, tokens))[0]  # [depth, N]
  # One compiled forward pass (op by op, each of its operations would compile a program of its own).
  forward = jax.jit(lambda p, t: model_lib.Transformer(config).apply({"params": p}, t,
                                                                      mutable=["metrics", "intermediates"]))
  _, state = forward(params, tokens)
  for i in range(config.depth):
    rms = float(np.asarray(jax.tree.leaves(state["metrics"][f"block_{i}"]["attn"]["attn_logits_rms"])[0]))
    attn = state["intermediates"][f"block_{i}"]["attn"]
    q, k = (rope_lib.apply_rope(attn[n][0], base=config.rope_base) for n in ("q_projected", "k_projected"))
    z = np.einsum("btnh,bsnh->bnts", np.asarray(q, np.float64), np.asarray(k, np.float64)) / math.sqrt(8)
    visible = np.tril(np.ones(z.shape[-2:], bool))
    means = np.array([z[:, h][:, visible].mean() for h in range(z.shape[1])])
    np.testing.assert_allclose(var[i], [z[:, h][:, visible].var() for h in range(z.shape[1])], rtol=1e-4)
    np.testing.assert_allclose(math.sqrt(np.mean(var[i] + means**2)), rms, rtol=1e-4)


def _transfer_row(monkeypatch, optima, slopes):
  """train_mup_lr_transfer on written transfer grids (widths 16 and 64, rates 2^-10, 2^-8, 2^-6, 10 steps, 2 seeds):
  each (parametrization, width) ends at loss 2 + 0.01 (log2 lr − ``optima[(name, width)]``)²; every layer output's
  RMS is 1 at step 0 and (width / 16)^``slopes[name][seed]`` after. Returns (the row, the widened grids trained)."""
  monkeypatch.setitem(sizes_lib.SIZES, "fake", dict(sizes_lib.SIZES["test"], transfer_widths=(16, 64),
                                                    transfer_steps=10, transfer_log2_lrs=(-10.0, -8.0, -6.0),
                                                    coord_lr=2.0**-8, transfer_parametrizations=("sp", "mup")))
  widened = []

  def fake(spec):
    name, width, steps = spec.model_config.parametrization.name, spec.model_config.width, 10
    if "widened" in spec.label:
      widened.append((name, width, spec.log2_lrs))
    final = [2.0 + 0.01 * (x - optima[(name, width)]) ** 2 for x in spec.log2_lrs for _ in spec.seeds]
    size = np.ones((steps, spec.members))
    size[1:] = np.tile([(width / 16) ** slopes[name][j] for j in range(len(spec.seeds))], len(spec.log2_lrs))
    rms = {m: size for m in ("embed_rms", "readout_rms")}
    rms.update({m: np.repeat(size[..., None], 2, axis=-1) for m in ("attn_logits_rms", "attn_out_rms", "mlp_out_rms")})
    return _fake_grid(final, steps=steps, spec=spec, records=rms)
  ctx = types.SimpleNamespace(mode="fake", seed=0, num_seeds=2, text_file=None, planner=_Written(fake))
  return next(c for c in TRAINING_CLAIMS if c.id == "train_mup_lr_transfer").evaluate(ctx), widened


FLAT = {("mup", 16): -8.0, ("mup", 64): -8.0, ("sp", 16): -8.0, ("sp", 64): -6.5}  # SP's at 64: past the grid's edge
# μP's layer-output slopes per seed, the largest slope of the seeds' mean RMS, and the verdict (holds <= 0.1, fails
# >= 0.5); SP's grow like width.
COORD_CASES = (("holds", (0.0, 0.0), 0.0, verdicts.HOLDS),
               ("fails", (0.8, 0.8), 0.8, verdicts.FAILS),
               ("inconclusive", (0.0, 0.3), math.log2((1 + 4**0.3) / 2) / 2, verdicts.INCONCLUSIVE))  # ± 0.15


@pytest.mark.parametrize("mup_slopes, value, verdict", [c[1:] for c in COORD_CASES], ids=[c[0] for c in COORD_CASES])
def test_mup_coordinate_check_on_written_grids(monkeypatch, mup_slopes, value, verdict):
  row, widened = _transfer_row(monkeypatch, FLAT, {"mup": mup_slopes, "sp": (1.0, 1.0)})
  assert row["statistic"] == "mup_max_coord_slope"
  assert row["value"] == pytest.approx(value, abs=1e-3)
  assert row["standard_error"] == pytest.approx(abs(mup_slopes[1] - mup_slopes[0]) / 2, abs=1e-3)
  assert row["verdict"] == verdict
  assert row["numbers"]["sp_max_coord_slope"] == pytest.approx(1.0)
  assert row["numbers"]["coord_check_learning_rate"] == f"{2.0 ** -8:.3g}"
  # Beside: learning-rate transfer. SP's optimum at width 64 sat at the edge 2^-6: widened by 2 octaves, it is -6.5.
  assert widened == [("sp", 64, (-4.0,))]
  (other,) = row["beside"]
  assert (other["statistic"], other["value"], other["verdict"]) == ("mup_optimal_log2_lr_spread", 0.0,
                                                                    verdicts.HOLDS)
  assert row["numbers"]["sp"]["optimal_log2_lr"] == [pytest.approx(-8.0), pytest.approx(-6.5)]
  assert row["numbers"]["sp_optimal_log2_lr_spread"] == pytest.approx(1.5)


def test_mup_transfer_at_the_widened_edge_is_inconclusive(monkeypatch):
  row, widened = _transfer_row(monkeypatch, {**FLAT, ("mup", 64): -1.0}, {"mup": (0.0, 0.0), "sp": (1.0, 1.0)})
  assert ("mup", 64, (-4.0,)) in widened
  (other,) = row["beside"]
  assert (other["at_edge"], other["verdict"]) == (True, verdicts.INCONCLUSIVE_EDGE)
  assert row["verdict"] == verdicts.HOLDS


def test_scaled_grads_stable_reports_the_unscaled_model_beside():
  def fake(spec):
    rule = _rule(spec)
    grad = np.ones((10, 6))
    grad[0] = 10.0 ** (0.5 if rule == "sqrt" else 2.5)  # max / min over steps: 0.5 and 2.5 decades
    return _fake_grid([3.0, 3.0, 2.0, 2.0, 3.0, 3.0], log2_lrs=(-12.0, -10.0, -8.0), records={"grad_norm": grad})
  row = next(c for c in TRAINING_CLAIMS if c.id == "train_scaled_grads_stable").evaluate(_ctx(_Written(fake)))
  assert (row["value"], row["standard_error"], row["verdict"]) == (0.5, 0.0, verdicts.HOLDS)
  assert row["numbers"]["unscaled"]["max_decades"] == 2.5
  assert row["numbers"]["max_decades_unscaled_minus_scaled"]["mean"] == 2.0
  assert "without the scale spans 2.50 decades" in row["finding"]


def test_clipped_optimizer_clips_the_global_norm():
  family = ModelFamily(depth=1, num_heads=2, head_dim=8, rule="sqrt", base_width=16)
  config = family.model_config("sp", 16, vocab_size=10, max_len=8)
  params = model_lib.init_params(jax.random.PRNGKey(0), config)
  grads = jax.tree.map(lambda p: 3.0 * np.ones_like(p), params)
  norm = math.sqrt(sum(9.0 * np.size(p) for p in jax.tree.leaves(params)))
  plain = OptimizerConfig(optimizer="sgd", learning_rate=0.1).build(model_lib.parametrized(config))
  clipped = depth_claims.ClippedOptimizerConfig(optimizer="sgd", learning_rate=0.1, clip=1.0).build(
      model_lib.parametrized(config))
  want, _ = plain.update(jax.tree.map(lambda g: g / norm, grads), plain.init(params), params)  # clipped by hand
  got, _ = clipped.update(grads, clipped.init(params), params)
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(a, b, rtol=1e-5)


def test_clipped_keeps_the_grids_options_and_adds_the_clip():
  spec = grids_lib.grid_spec(_ctx(), rule="none", depth=1, warmup=True)
  got = depth_claims.clipped(spec, 0.5)
  assert isinstance(got.opt_config, depth_claims.ClippedOptimizerConfig) and got.opt_config.clip == 0.5
  assert dataclasses.replace(got, opt_config=spec.opt_config) == spec
  assert {f.name: getattr(got.opt_config, f.name) for f in dataclasses.fields(spec.opt_config)} == \
      dataclasses.asdict(spec.opt_config)


def test_training_claims_keep_the_tables_order():
  assert [c.id for c in TRAINING_CLAIMS] == list(training_claims.ORDER)
  first, second = TRAINING_CLAIMS[:2]
  assert training_claims.in_order((second, first), (first.id, second.id)) == (first, second)
  for claims, order in (((first, first), (first.id, first.id)), ((first,), (first.id, second.id))):
    with pytest.raises(ValueError, match="each id of the claims once"):
      training_claims.in_order(claims, order)


def test_planned_grids_train_nothing_and_count_the_setups():
  ctx = _ctx(_Written(lambda spec: pytest.fail("planning trained a grid")))
  depth12 = next(c for c in TRAINING_CLAIMS if c.id == "train_depth12_cannot_converge")
  plan = ctx.planner.plan(depth12.grids(ctx).values())
  assert len(plan) == 8  # 2 rules x pre/post-LN x with/without warmup
  assert {g.model_config.pre_ln for g in plan.grids} == {True, False}
  assert all((g.steps, g.members, g.data.batch_size, g.data.seq_len) == (4, 4, 2, 8) for g in plan.grids)
  assert plan.runs == 8 * 4
  p = resources.param_count(plan.grids[0].model_config)
  assert plan.grids[0].flops() == pytest.approx((6 * p * 8 + 12 * 1 * 8**2 * 16) * 2 * 4 * 4)


# ----------------------------------------------------------------------------
# The grid engine the claims declare their grids to (``scaling.studies.grid.run``): members, plan, costs.


def test_grid_spec_members_are_laid_out_rate_major():
  ctx = _ctx()
  spec = grids_lib.grid_spec(ctx, rule="sqrt", depth=1, log2_lrs=(-10.0, -6.0, -2.0))
  lrs, seeds, mults = spec.member_arrays()
  np.testing.assert_array_equal(lrs, np.float32([2.0**-10] * 2 + [2.0**-6] * 2 + [2.0**-2] * 2))
  np.testing.assert_array_equal(seeds, [0, 1, 0, 1, 0, 1])
  assert mults is None and spec.members == 6 and spec.num_values == 3
  swept = grids_lib.grid_spec(ctx, rule="sqrt", depth=1, log2_lrs=(-6.0,), attn_mults=(1.0, 2.0, 4.0))
  lrs, seeds, mults = swept.member_arrays()
  np.testing.assert_array_equal(lrs, np.float32([2.0**-6] * 6))
  np.testing.assert_array_equal(seeds, [0, 1, 0, 1, 0, 1])
  np.testing.assert_array_equal(mults, [1.0, 1.0, 2.0, 2.0, 4.0, 4.0])
  assert swept.members == 6 and swept != grids_lib.grid_spec(ctx, rule="sqrt", depth=1, log2_lrs=(-6.0,))
  with pytest.raises(ValueError, match="one learning rate"):
    grids_lib.grid_spec(ctx, rule="sqrt", depth=1, log2_lrs=(-6.0, -5.0), attn_mults=(1.0,))
  with pytest.raises(ValueError, match="needs learning rates, seeds"):
    grid_run.GridSpec(model_config=None, opt_config=None, data=None, data_seed=0, log2_lrs=(-6.0,), seeds=())


def test_plan_counts_grids_programs_and_the_largest_program():
  ctx = _ctx()
  none, sqrt, post = (grids_lib.grid_spec(ctx, rule=r, depth=1) for r in ("none", "sqrt", "post_softmax"))
  wide = grids_lib.grid_spec(ctx, rule="sqrt", depth=1, width=32, label="wide grid")
  plan = ctx.planner.plan([none, sqrt, none, post, wide])
  assert plan.grids == (none, sqrt, post, wide)  # each once, in order
  # none and sqrt are logit factors of one model (one program); post_softmax is another; width 32 another
  assert plan.compiled() == 3
  assert plan.runs == 4 * 4
  assert plan.programs() == [(g.flops(), "float32", 4) for g in plan.grids]
  assert plan.flops() == pytest.approx(sum(g.flops() for g in plan.grids))
  estimate = plan.estimate(("mode",), "use a smaller mode")
  want = resources.training_program(wide.model_config, optimizer="adam", batch_size=2, seq_len=8, members=4)
  assert (estimate.total, estimate.where) == (want.total, "for the wide grid")
  assert all(p.flags == ("mode",) and p.hint == "use a smaller mode" for p in estimate.parts)
  assert not ctx.planner.runs
  with pytest.raises(TypeError, match="GridSpec"):
    ctx.planner.plan([none.model_config])


def test_training_flops_closed_form_and_bad_input():
  config = ModelFamily(depth=2, num_heads=2, head_dim=8, base_width=16).model_config(
      "sp", 16, vocab_size=10, max_len=8)
  p = resources.param_count(config)
  assert device_time.training_flops(config, steps=3, members=5, batch_size=2, seq_len=8) == pytest.approx(
      (6 * p * 8 + 12 * 2 * 8**2 * 16) * 2 * 3 * 5)
  with pytest.raises(ValueError, match="members"):
    device_time.training_flops(config, steps=3, members=0, batch_size=2, seq_len=8)


@pytest.mark.parametrize("rule", ["none", "sqrt", "qk_norm"])
def test_attention_grad_norm_is_the_norm_of_dl_dwq_and_dl_dwk(rule):
  """attention_grad_norm_fn (a shared program for logit-factor rules, α passed in) against jax.grad of each member's
  loss under its own unrolled model, and the norm taken by hand."""
  ctx = _ctx()
  # Only the trained parameters are read: the grid records the loss alone (a smaller program to compile).
  spec = grids_lib.grid_spec(ctx, rule=rule, depth=grids_lib.SCAN_FROM_DEPTH, steps=2, record=("loss",))
  assert spec.model_config.scan_layers  # the claims' deep grids run scanned
  run = ctx.planner.train(spec)
  batch = sizes_lib.dataset_of(ctx).eval_batch(0, 0)
  got = np.asarray(nan_claims.attention_grad_norm_fn(spec.model_config, spec.opt_config)(run.final_params, batch))
  config = dataclasses.replace(spec.model_config, scan_layers=False)
  model = model_lib.Transformer(config)
  # One compiled gradient for every member (op by op, each member would run hundreds of small programs).
  grad = jax.jit(jax.grad(lambda p: losses_lib.loss_fn(p, batch, model=model)[0]))
  for m in range(spec.members):
    params = jax.tree.map(lambda a: np.asarray(a)[m], run.final_params)  # sliced on the host: no program per leaf
    grads = grad(params)
    squares = sum(float(np.sum(np.square(np.asarray(grads[f"block_{i}"]["attn"][n]["kernel"], np.float64))))
                  for i in range(config.depth) for n in ("query", "key"))
    np.testing.assert_allclose(got[m], math.sqrt(squares), rtol=1e-4)
