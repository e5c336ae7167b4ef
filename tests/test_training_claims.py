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
from scaling.studies.claims.training import hard_selection as hard_claims
from scaling.studies.claims.training import loss_curves as curves
from scaling.studies.claims.training import mup_transfer as mup_claims
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
# The parameters of a model in one compiled program (op by op, each of init_params' draws compiles its own).
_init_params = jax.jit(model_lib.init_params, static_argnums=1)


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
  assert len(ids) == len(set(ids)) == 15
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
  params = _init_params(jax.random.PRNGKey(0), config)
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
           "train_qk_correlate", "train_mup_lr_transfer", "train_attention_hard_selection")


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
  found = lambda label: "widened" in label or label.endswith(best_lr.REFINED)  # grids placed by an optimum
  declared = [g.spec for g in grids if not found(g.spec.label)]
  assert [g for g in planned.grids if not found(g.label)] == declared  # the same models, rates and seeds, in order
  assert [(g.steps, g.members) for g in planned.grids if not found(g.label)] == [
      g.records["loss"].shape[:2] for g in grids if not found(g.spec.label)]
  # Each refinement trained is planned on its grid's compiled step (at rates standing for those found).
  for g in grids:
    if g.spec.label.endswith(best_lr.REFINED):
      assert any(p.label == g.spec.label and p.program_key()[0] == g.spec.program_key()[0] for p in planned.grids)
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
  nan = rows["train_nan_within_100_steps"]["numbers"]
  assert len(nan["nan_fraction_low_precision_seeds"]) == 2 and nan["nan_fraction_low_precision_runs"] == 8
  assert set(nan["per_depth"]) == {"1 float32", "1 bfloat16", "1 float16"}  # the low precisions at depth 1
  hard = rows["train_attention_hard_selection"]["numbers"]
  assert hard["early_steps_by_depth"] == {"1": 1} and 0.0 < hard["early_max_prob_none"] <= 1.0
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


def test_refined_values_are_the_midpoints_around_the_best_rate():
  assert best_lr.refined_values((-12.0, -10.0, -8.0), 1) == (-11.0, -9.0)
  assert best_lr.refined_values((-12.0, -10.0, -7.0), 2) == (-8.5,)  # at an edge: one neighbour
  assert best_lr.refined_values((-12.0, -10.0), 0) == (-11.0,)
  for values, best in (((-10.0,), 0), ((-8.0, -10.0), 0), ((-12.0, -10.0), 2)):
    with pytest.raises(ValueError, match="ascending"):
      best_lr.refined_values(values, best)


def test_near_best_keeps_the_rates_within_two_paired_standard_errors():
  final = np.array([[2.0, 2.0, 2.0],     # the best
                    [2.1, 1.9, 2.3],     # differences 0.1, −0.1, 0.3: mean 0.1, within 2 standard errors
                    [2.05, 2.05, 2.05],  # 0.05 every seed: no spread, so not within
                    [NAN, 2.0, 2.0],     # a diverged seed
                    [2.0, 2.0, 2.0]])    # a tie
  d = final[1] - final[0]
  assert np.mean(d) <= 2 * np.std(d, ddof=1) / math.sqrt(3)  # the reference: 0.1 <= 0.23
  assert best_lr.near_best(final, 0) == [0, 1, 4]
  assert best_lr.near_best(final[:, :1], 0) == [0, 4]  # one seed: ties only
  assert best_lr.near_best(final, None) == []
  with pytest.raises(ValueError, match="rates, seeds"):
    best_lr.near_best(final[0], 0)


def test_compare_at_best_lr_refined_reports_the_gap_over_the_rates_near_the_best(monkeypatch):
  """Rates 2^-12, 2^-10, 2^-8, each grid's best 2^-10 (interior); refined at 2^-11 and 2^-9. Rule a: 2^-9 within the
  seeds' noise of its best (3.0, 3.0 against 3.05, 2.99), rule b: none; the gap over the pairs: (3.02 − 2.5) / 2.5 and
  (3.0 − 2.5) / 2.5."""
  rates = (-12.0, -10.0, -8.0)
  finals = {"a": [4.0, 4.0, 3.0, 3.0, 4.0, 4.0], "b": [3.0, 3.0, 2.5, 2.5, 3.0, 3.0]}
  refined = {"a": [3.5, 3.5, 3.05, 2.99], "b": [2.8, 2.8, 2.9, 2.9]}
  grids = {k: _fake_grid(v, log2_lrs=rates, spec=grid_run.GridSpec(None, None, None, 0, rates, (0, 1), label=k))
           for k, v in finals.items()}

  def fake(spec):
    assert spec.label.endswith(best_lr.REFINED) and spec.log2_lrs == (-11.0, -9.0)
    return _fake_grid(refined[spec.label[0]], spec=spec)

  monkeypatch.setitem(sizes_lib.SIZES, "fake", dict(sizes_lib.SIZES["test"], steps={3: 10}, fixed_step=5))
  planner = _Written(fake)
  ctx = types.SimpleNamespace(mode="fake", planner=planner)
  out = best_lr.compare_at_best_lr(ctx, grids, "a", "b", 3, refine=True)
  assert len(planner.asked) == 2
  assert out["a"]["refined_by"] == [f"{2.0 ** x:.3g}" for x in (-11.0, -9.0)]
  assert out["a"]["near_best_learning_rates"] == [f"{2.0 ** x:.3g}" for x in (-10.0, -9.0)]
  assert out["b"]["near_best_learning_rates"] == [f"{2.0 ** -10:.3g}"]
  assert out["relative_final_gap"] == pytest.approx(0.2, rel=1e-3)
  assert out["relative_final_gap_near_best"] == {"min": pytest.approx(0.2, rel=1e-3),
                                                 "max": pytest.approx(0.52 / 2.5, rel=1e-3)}
  words = best_lr.choice_words(out, {"a": "rule a", "b": "rule b"})
  assert "refined around it (rule a at 0.000488, 0.00195; rule b at 0.000488, 0.00195)" in words
  assert "give the gap from 0.2 to 0.208" in words
  # Without refine (or in a mode without refine_best_lr) nothing more is trained and nothing is said.
  plain = best_lr.compare_at_best_lr(types.SimpleNamespace(mode="fake", planner=_Written(pytest.fail)), grids, "a",
                                     "b", 3)
  assert "relative_final_gap_near_best" not in plain and best_lr.choice_words(plain, {"a": "a"}) == ""


def test_refinements_are_planned_on_their_grids_compiled_step():
  ctx = _ctx(_Written(lambda spec: pytest.fail("planning trained a grid")))
  spec = grids_lib.grid_spec(ctx, rule="sqrt", depth=1, log2_lrs=(-10.0, -6.0, -2.0))
  finer = best_lr.refined_plan_spec(ctx, spec)
  assert finer.label.endswith(best_lr.REFINED) and finer.log2_lrs == (-8.0, -8.0, -8.0)  # padded to 3 rates
  assert finer.program_key() == spec.program_key() and finer.flops() == spec.flops()
  assert best_lr.refined_plan_spec(ctx, grids_lib.grid_spec(ctx, rule="sqrt", depth=1, log2_lrs=(-6.0,))) is None
  quick = types.SimpleNamespace(**{**vars(ctx), "mode": "quick"})
  assert best_lr.refined_plan_spec(quick, spec) is None
  claim = next(c for c in TRAINING_CLAIMS if c.id == "train_norms_dont_replace_scaling")
  plan = ctx.planner.plan(claim.grids(ctx).values())
  base = ctx.planner.plan(scale_claims.norm_grids(ctx).values())
  assert len(plan) == 2 * len(base) and plan.compiled() == base.compiled()  # one refinement per grid, no new program


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
# converging with the tiny rate and clipping, at the rates where every 1/√d_k run so trained converges) and its
# verdict, the unscaled model's own best rate unclipped: (rate, fraction converged), and beside, the statistic less
# the fraction converging at 2^-10 unclipped (per seed, then averaged) and its verdict.
DIVERGES = [NAN, 13.0, 3.9, 3.9]  # at 2^-10: one NaN, one above 3 x 4 (diverged though finite); 2^-8 stalls
TINY_CASES = (
    ("holds", DIVERGES, [2.0] * 4, [2.0] * 4, 1.0, verdicts.HOLDS, (-8.0, 0.0), 1.0, verdicts.HOLDS),
    ("inconclusive", DIVERGES, [2.0, 2.0, 2.0, 3.9], [2.0] * 4, 0.75, verdicts.INCONCLUSIVE, (-8.0, 0.0),  # 1, 0.5
     0.75, verdicts.INCONCLUSIVE),
    ("not_needed", [2.0, 2.0, 3.9, 3.9], [2.0] * 4, [2.0] * 4, 1.0, verdicts.HOLDS, (-10.0, 1.0), 0.0, verdicts.FAILS),
    ("neither_way", DIVERGES, [3.9, 3.7, NAN, 3.9], [2.0] * 4, 0.0, verdicts.FAILS, (-8.0, 0.0), 0.0, verdicts.FAILS),
    ("one_in_four", DIVERGES, [2.0, 3.9, 3.9, 3.9], [2.0] * 4, 0.25, verdicts.INCONCLUSIVE, (-8.0, 0.0),  # 0.5, 0
     0.25, verdicts.INCONCLUSIVE),
    ("fair_rates_only", DIVERGES, [2.0, 2.0, 3.9, 3.9], [2.0, 2.0, 3.9, 2.0], 1.0, verdicts.HOLDS, (-8.0, 0.0), 1.0,
     verdicts.HOLDS),
    ("not_measured", DIVERGES, [2.0] * 4, [3.9, 2.0, 2.0, 3.9], None, verdicts.NOT_MEASURED, (-8.0, 0.0), None,
     verdicts.NOT_MEASURED),
)


@pytest.mark.parametrize("none_base, none_tiny, sqrt_tiny, value, verdict, own, gain, gain_verdict",
                         [c[1:] for c in TINY_CASES], ids=[c[0] for c in TINY_CASES])
def test_tiny_lr_clipping_on_written_grids(none_base, none_tiny, sqrt_tiny, value, verdict, own, gain, gain_verdict):
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
  (needed,) = row["beside"]
  assert (needed["statistic"], needed["value"], needed["verdict"]) == ("tuning_gain", gain, gain_verdict)
  if value is not None:
    assert row["numbers"]["without_tuning"]["learning_rate"] == f"{2.0 ** -10:.3g}"
    assert row["value"] == pytest.approx(np.mean(row["numbers"]["converged_fraction_seeds"]))
    assert gain == pytest.approx(np.mean(row["numbers"]["tuning_gain_seeds"]))


def test_converged_and_tiny_rates():
  losses = np.array([[4.0, 4.0, 4.0, 4.0],
                     [3.0, 13.0, 3.9, NAN],
                     [2.0, 2.0, 3.7, 2.0]])
  np.testing.assert_array_equal(curves.converged(losses, 0.9, last=1), [True, False, False, False])
  assert depth_claims.tiny_log2_lrs(-7.0, (4.0, 2.0)) == (-9.0, -11.0)


class _ParamsGrid(grid_run.GridRun):
  """A written grid whose parameters are each member's logit variance (``logit_variance_fn`` is replaced by one that
  reads them): after training ``final_params`` [M], at initialization ``initial`` per seed."""

  initial = (1.0, 1.0)

  def initial_params(self):
    return np.tile(np.asarray(self.initial, np.float64), self.spec.num_values)


# The 1/√d_k grid written for train_sqrt_optimal: rates 2^-12, 2^-10, 2^-8 (the middle one best, interior), and its
# refinement around 2^-10 at the midpoints 2^-11 and 2^-9: 2^-9's loss is within two standard errors of the best
# (differences 0.05 and −0.01 per seed: mean 0.02, standard error 0.03), 2^-11's is not. Per member: (final loss,
# logit variance after training); the best rate's variance is the case's.
SQRT_RATES, SQRT_REFINED = (-12.0, -10.0, -8.0), (-11.0, -9.0)
SQRT_REFINED_GRID = ([2.3, 2.3, 2.05, 1.99], [50.0, 50.0, 4.0, 4.0])


def _sqrt_optimal_row(monkeypatch, loss_of_c, var_init, var_final=(1.0, 1.0)):
  """train_sqrt_optimal on written grids (``SQRT_RATES``, refined at ``SQRT_REFINED``): its logit variance per seed
  ``var_init`` at initialization and ``var_final`` after training at the best rate; each multiplier 2^c of 1/√d_k ends
  at loss ``loss_of_c(c)``. Returns (the row, the multipliers (log2 c) of each grid trained, the rates of each
  refinement trained)."""
  trained, refined = [], []

  def fake(spec):
    if spec.attn_mults is not None:
      c = np.log2(np.asarray(spec.attn_mults) / math.sqrt(8))  # α = c·√d_k, d_k 8
      trained.append(tuple(float(x) for x in np.round(c, 9)))
      return _fake_grid(np.repeat([loss_of_c(x) for x in c], 2), log2_lrs=spec.log2_lrs, attn_mults=spec.attn_mults)
    if spec.label.endswith(best_lr.REFINED):
      refined.append(spec.log2_lrs)
      assert spec.log2_lrs == SQRT_REFINED
      loss, var = SQRT_REFINED_GRID
      return _fake_grid(loss, spec=spec, final_params=np.asarray(var))
    grid = _fake_grid([3.0, 3.0, 2.0, 2.0, 3.0, 3.0], cls=_ParamsGrid, spec=spec,
                      final_params=np.asarray([99.0, 99.0, *var_final, 99.0, 99.0]))
    grid.initial = var_init
    return grid

  monkeypatch.setitem(sizes_lib.SIZES, "fake", dict(sizes_lib.SIZES["test"], log2_lrs=SQRT_RATES))
  monkeypatch.setattr(scale_claims, "logit_variance_fn",
                      lambda config: lambda params, tokens: np.asarray(params)[:, None, None] * np.ones((1, 1, 2)))
  ctx = types.SimpleNamespace(mode="fake", seed=0, num_seeds=2, text_file=None, planner=_Written(fake))
  row = next(c for c in TRAINING_CLAIMS if c.id == "train_sqrt_optimal").evaluate(ctx)
  return row, trained, refined


# Per seed, the 1/√d_k logits' variance at initialization; the multipliers' loss (a parabola in log2 c with its vertex
# at 0.5: inside √2, so that part holds; at −1.6: past the grid's edge −1, widened to −3, a different optimum); the
# parts score (each part decided on the seeds' mean; holds > 1.5, fails < 0.5) and the verdict.
PARTS_CASES = (("holds", (1.1, 0.9), 0.5, 2.0, 0.0, verdicts.HOLDS),
               ("partly", (16.5, 15.5), 0.5, 1.0, 0.0, verdicts.PARTLY),  # log2 16 = 4: the variance part fails
               ("fails", (16.5, 15.5), -1.6, 0.0, 0.0, verdicts.FAILS),
               # log2 2.2 = 1.14 (partly) on the mean; per seed log2 1.5 = 0.58 (holds), log2 2.9 = 1.54 (partly):
               # scores 2 and 1.5, standard error 0.25, so 1.5 ± 0.5 reaches the holds threshold.
               ("inconclusive", (1.5, 2.9), 0.5, 1.5, 0.25, verdicts.INCONCLUSIVE))


@pytest.mark.parametrize("var_init, vertex, value, se, verdict", [c[1:] for c in PARTS_CASES],
                         ids=[c[0] for c in PARTS_CASES])
def test_sqrt_optimal_reads_the_variance_at_initialization_and_the_optimal_multiplier(monkeypatch, var_init, vertex,
                                                                                       value, se, verdict):
  row, trained, refined = _sqrt_optimal_row(monkeypatch, lambda c: 2.0 + (c - vertex) ** 2, var_init)
  assert row["statistic"] == "parts_holding"
  assert (row["value"], row["standard_error"], row["verdict"]) == (pytest.approx(value), pytest.approx(se), verdict)
  numbers = row["numbers"]
  assert numbers["abs_log2_logit_variance_init"] == pytest.approx(abs(math.log2(np.mean(var_init))), abs=1e-3)
  assert numbers["abs_optimal_log2_multiplier"] == pytest.approx(abs(vertex), abs=1e-6)
  assert trained[0] == (-1.0, 0.0, 1.0) and refined == [SQRT_REFINED]
  assert numbers["learning_rate"] == f"{2.0 ** -10:.3g}"  # the multipliers run at the best rate of the refined grid
  # Beside: the variance after training (1 at the best rate): holds.
  (other,) = row["beside"]
  assert (other["statistic"], other["value"], other["verdict"]) == ("abs_log2_logit_variance_final", 0.0,
                                                                    verdicts.HOLDS)
  assert "Beside, the variance after training" in row["finding"]


def test_sqrt_optimal_says_how_the_choice_of_rate_enters(monkeypatch):
  """The refined grid's rates within the seeds' noise of the best (2^-10 and 2^-9) and |log2 Var| after training
  over them: 0 at 2^-10, log2 4 = 2 at 2^-9."""
  row, _, _ = _sqrt_optimal_row(monkeypatch, lambda c: 2.0 + (c - 0.5) ** 2, (1.0, 1.0))
  numbers = row["numbers"]
  assert numbers["refined_lrs_by"] == [f"{2.0 ** x:.3g}" for x in SQRT_REFINED]
  assert numbers["near_best_learning_rates"] == [f"{2.0 ** x:.3g}" for x in (-10.0, -9.0)]
  assert numbers["abs_log2_logit_variance_final_near_best"] == {"min": 0.0, "max": pytest.approx(2.0)}
  assert "ranges from 0 to 2" in row["finding"]


def test_sqrt_optimal_widens_the_multipliers_past_an_edge(monkeypatch):
  # The optimum at log2 c = -1.6 lies past the grid's edge (-1): widened by 2 octaves (-2, -3), it is interior.
  row, trained, _ = _sqrt_optimal_row(monkeypatch, lambda c: 2.0 + (c + 1.6) ** 2, (1.0, 1.0))
  assert trained == [(-1.0, 0.0, 1.0), (-2.0, -3.0)]
  assert row["numbers"]["abs_optimal_log2_multiplier"] == pytest.approx(1.6, abs=1e-6)
  assert not row["numbers"]["optimum_at_edge"]
  assert row["numbers"]["part_verdicts"] == {p.name: v for p, v in zip(scale_claims.SQRT_OPTIMAL_PARTS,
                                                                       (verdicts.HOLDS, verdicts.FAILS))}
  assert row["numbers"]["widened_by"] == [-2.0, -3.0]
  # Still falling at the widened edge: the optimum is not located, so the claim is inconclusive.
  row, trained, _ = _sqrt_optimal_row(monkeypatch, lambda c: 2.0 + 0.01 * c, (1.0, 1.0))
  assert trained == [(-1.0, 0.0, 1.0), (-2.0, -3.0)]
  assert (row["numbers"]["optimum_at_edge"], row["verdict"]) == (True, verdicts.INCONCLUSIVE_EDGE)
  assert row["beside"][0]["verdict"] == verdicts.HOLDS  # the variance after training has no multiplier edge


def test_logit_variance_fn_matches_the_models_own_logit_rms():
  """The variance per head, with the mean, gives back the RMS the attention sows (√mean(var + mean²))."""
  ctx = _ctx()
  dataset = sizes_lib.dataset_of(ctx)
  config = grids_lib.grid_spec(ctx, rule="sqrt", depth=2, steps=4).model_config
  params = _init_params(jax.random.PRNGKey(0), config)
  tokens = dataset.eval_batch(0, 0)["inputs"]
  stacked = jax.tree.map(lambda p: np.asarray(p)[None], params)  # on the host: no program per leaf
  var = np.asarray(scale_claims.logit_variance_fn(config)(stacked, tokens))[0]  # [depth, N]

  # One compiled forward pass with every block's rotated projections (op by op, each of its operations would
  # compile a program of its own).
  @jax.jit
  def forward(p, t):
    _, state = model_lib.Transformer(config).apply({"params": p}, t, mutable=["metrics", "intermediates"])
    rotated = [tuple(rope_lib.apply_rope(state["intermediates"][f"block_{i}"]["attn"][n][0], base=config.rope_base)
                     for n in ("q_projected", "k_projected")) for i in range(config.depth)]
    return state["metrics"], rotated

  metrics, rotated = forward(params, tokens)
  for i in range(config.depth):
    rms = float(np.asarray(jax.tree.leaves(metrics[f"block_{i}"]["attn"]["attn_logits_rms"])[0]))
    q, k = rotated[i]
    z = np.einsum("btnh,bsnh->bnts", np.asarray(q, np.float64), np.asarray(k, np.float64)) / math.sqrt(8)
    visible = np.tril(np.ones(z.shape[-2:], bool))
    means = np.array([z[:, h][:, visible].mean() for h in range(z.shape[1])])
    np.testing.assert_allclose(var[i], [z[:, h][:, visible].var() for h in range(z.shape[1])], rtol=1e-4)
    np.testing.assert_allclose(math.sqrt(np.mean(var[i] + means**2)), rms, rtol=1e-4)


def _transfer_row(monkeypatch, optima, slopes, from_step=1):
  """train_mup_lr_transfer on written transfer grids (widths 16 and 64, rates 2^-10, 2^-8, 2^-6, 10 steps, 2 seeds):
  each (parametrization, width) ends at loss 2 + 0.01 (log2 lr − ``optima[(name, width)]``)²; every layer output's
  RMS is 1 before step ``from_step`` and (width / 16)^``slopes[name][seed]`` from it on. Returns (the row, the widened
  grids trained)."""
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
    size[from_step:] = np.tile([(width / 16) ** slopes[name][j] for j in range(len(spec.seeds))], len(spec.log2_lrs))
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


def test_mup_coordinate_check_reads_the_whole_run(monkeypatch):
  """μP's layer outputs grow like width^0.8 only at the last step (9), after the warmup: the whole run is read."""
  row, _ = _transfer_row(monkeypatch, FLAT, {"mup": (0.8, 0.8), "sp": (1.0, 1.0)}, from_step=9)
  assert row["numbers"]["warmup_steps"] < 9 and row["numbers"]["coord_check_steps"] == 10
  assert (row["value"], row["verdict"]) == (pytest.approx(0.8), verdicts.FAILS)
  assert row["numbers"]["coord"]["mup"]["at"].endswith("step 9")
  assert row["numbers"]["coord"]["mup"]["max_slope_warmup"] == pytest.approx(0.0)


def test_mup_transfer_says_mup_scales_the_logits_by_d_head(monkeypatch):
  """The logit scale read from the models: μP's α/d_head with α = √8 (1/√d_head at the base width 16, d_head 8; heads
  of width / 2), SP's 1/√d_head."""
  row, _ = _transfer_row(monkeypatch, FLAT, {"mup": (0.0, 0.0), "sp": (1.0, 1.0)})
  scales = row["numbers"]["logit_scale_by_width"]
  for width, d_head in ((16, 8), (64, 32)):
    mup, sp = scales["mup"][str(width)], scales["sp"][str(width)]
    assert mup["head_dim"] == d_head
    assert mup["logit_scale"] == pytest.approx(math.sqrt(8) / d_head, rel=1e-3)
    assert sp["logit_scale"] == pytest.approx(1 / math.sqrt(d_head), rel=1e-3)
  assert "μP here scales the logits by α/d_head (α = 2.828)" in row["finding"]
  assert "SP here scales the logits by α/√d_head (α = 1)" in row["finding"]
  assert "both notes call a pitfall" in row["finding"]
  assert mup_claims.scale_rule_words({"8": {"logit_scale": 0.5, "head_dim": 8, "times_head_dim": 4.0,
                                            "times_sqrt_head_dim": 1.41},
                                      "32": {"logit_scale": 0.2, "head_dim": 32, "times_head_dim": 6.4,
                                             "times_sqrt_head_dim": 1.13}}) == "0.5 at d_head 8, 0.2 at d_head 32"


def test_mup_transfer_at_the_widened_edge_is_inconclusive(monkeypatch):
  row, widened = _transfer_row(monkeypatch, {**FLAT, ("mup", 64): -1.0}, {"mup": (0.0, 0.0), "sp": (1.0, 1.0)})
  assert ("mup", 64, (-4.0,)) in widened
  (other,) = row["beside"]
  assert (other["at_edge"], other["verdict"]) == (True, verdicts.INCONCLUSIVE_EDGE)
  assert row["verdict"] == verdicts.HOLDS


# (decades spanned with 1/√d_k, without it; parts holding (stable: <= 1 decade; more stable than unscaled: by >= 0.5
# decade), verdict, the two parts' verdicts).
STABLE_CASES = (
    (0.5, 2.5, 2.0, verdicts.HOLDS, (verdicts.HOLDS, verdicts.HOLDS)),
    (0.5, 0.5, 1.0, verdicts.PARTLY, (verdicts.HOLDS, verdicts.FAILS)),  # stable, but as stable without the scale
    (2.5, 2.5, 0.0, verdicts.FAILS, (verdicts.FAILS, verdicts.FAILS)),
    (1.5, 2.5, 1.5, verdicts.PARTLY, (verdicts.PARTLY, verdicts.HOLDS)),  # 1.5 is not above 2 − ½
)


@pytest.mark.parametrize("sqrt_decades, none_decades, value, verdict, parts", STABLE_CASES)
def test_scaled_grads_stable_needs_stable_and_more_stable_than_unscaled(sqrt_decades, none_decades, value, verdict,
                                                                        parts):
  def fake(spec):
    grad = np.ones((10, 6))
    grad[0] = 10.0 ** (sqrt_decades if _rule(spec) == "sqrt" else none_decades)  # max / min over steps
    return _fake_grid([3.0, 3.0, 2.0, 2.0, 3.0, 3.0], log2_lrs=(-12.0, -10.0, -8.0), records={"grad_norm": grad})
  row = next(c for c in TRAINING_CLAIMS if c.id == "train_scaled_grads_stable").evaluate(_ctx(_Written(fake)))
  assert (row["value"], row["standard_error"], row["verdict"]) == (value, 0.0, verdict)
  assert row["numbers"]["unscaled"]["max_decades"] == pytest.approx(none_decades)
  assert row["numbers"]["decades_gap"] == pytest.approx(none_decades - sqrt_decades)
  assert tuple(b["verdict"] for b in row["beside"]) == parts
  assert f"without the scale spans {none_decades:.2f} decades" in row["finding"]


def test_clipped_optimizer_clips_the_global_norm():
  family = ModelFamily(depth=1, num_heads=2, head_dim=8, rule="sqrt", base_width=16)
  config = family.model_config("sp", 16, vocab_size=10, max_len=8)
  params = _init_params(jax.random.PRNGKey(0), config)
  grads = jax.tree.map(lambda p: 3.0 * np.ones_like(p), params)
  norm = math.sqrt(sum(9.0 * np.size(p) for p in jax.tree.leaves(params)))
  plain = OptimizerConfig(optimizer="sgd", learning_rate=0.1).build(model_lib.parametrized(config))
  clipped = depth_claims.ClippedOptimizerConfig(optimizer="sgd", learning_rate=0.1, clip=1.0).build(
      model_lib.parametrized(config))
  # Each update one compiled program (op by op, every leaf's every operation would compile its own).
  want, _ = jax.jit(plain.update)(jax.tree.map(lambda g: g / norm, grads), plain.init(params), params)  # by hand
  got, _ = jax.jit(clipped.update)(grads, clipped.init(params), params)
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


# ----------------------------------------------------------------------------
# The loss curve's swings (train_depth6_oscillates), the NaN fraction per precision (train_nan_within_100_steps) and
# the attention early in training (train_attention_hard_selection).


def test_window_means_swings_and_their_noise_floor():
  losses = np.array([[9.0, 5.0], [9.0, 5.0],  # first half: left out of the swings
                     [4.0, 3.0], [2.0, 3.0], [5.0, 2.0], [5.0, 2.0], [2.0, 1.0], [4.0, 1.0]])
  np.testing.assert_allclose(curves.window_means(losses[2:], 2), [[3.0, 3.0], [5.0, 2.0], [3.0, 1.0]])
  # Second half (steps 4..7) in windows of 2: run 0 means 5, 3 (a fall: no swing); in windows of 1: 5, 5, 2, 4 rises 2.
  np.testing.assert_allclose(curves.swings(losses, 2), [0.0, 0.0])
  np.testing.assert_allclose(curves.swings(losses, 1), [2.0, 0.0])
  # Within-window variances (ddof 1): run 0 windows (5, 5), (2, 4): 0 and 2, so σ_w = √(1 / 2); one pair of windows.
  np.testing.assert_allclose(curves.swing_noise_floor(losses, 2), [math.sqrt(0.5) / math.sqrt(math.pi), 0.0])
  with pytest.raises(ValueError, match="two windows"):
    curves.swings(losses, 3)
  with pytest.raises(ValueError, match="width"):
    curves.window_means(losses, 0)


def test_swings_of_a_noisy_falling_curve_stay_at_its_noise_floor():
  """Batch noise alone (iid around a falling line) swings about as much as ``swing_noise_floor`` predicts, and far
  less than the step-to-step RMS: the smoothed statistic is not the noise."""
  rng = np.random.default_rng(0)
  steps, runs, sigma = 400, 2000, 0.1
  losses = np.linspace(4.0, 3.8, steps)[:, None] + sigma * rng.standard_normal((steps, runs))
  width = 20
  got = float(np.mean(curves.swings(losses, width)))
  pairs = steps // 2 // width - 1
  # E max(0, X) for X ~ N(−slope·width, 2σ²/width): the mean rise of two window means of a falling noisy line.
  drift, sd = 0.2 / (steps - 1) * width, math.sqrt(2.0 / width) * sigma
  want = pairs * (sd / math.sqrt(2 * math.pi) * math.exp(-drift ** 2 / (2 * sd ** 2))
                  - drift * 0.5 * math.erfc(drift / (sd * math.sqrt(2))))
  assert got == pytest.approx(want, rel=0.05)
  floor = float(np.mean(curves.swing_noise_floor(losses, width)))
  assert floor == pytest.approx(pairs * sigma / math.sqrt(width) / math.sqrt(math.pi), rel=0.05)
  assert got <= floor < 0.2 * float(np.mean(curves.roughness(losses))) * pairs


def _curve_grid(spec, curves_by_rate):
  """A GridRun of ``spec`` (rates × 2 seeds) whose members' losses are the given [steps] curves, one per rate."""
  loss = np.stack([np.asarray(c, np.float64) for c in curves_by_rate for _ in range(len(spec.seeds))], axis=1)
  return grid_run.GridRun(spec=spec, records={"loss": loss}, final_params=None, wall_time=0.0)


def test_oscillation_reads_the_smoothed_swings_at_the_best_rate(monkeypatch):
  """40 steps: windows of 2, second half (20 steps) in 10 windows. At the best rate (the middle one, lowest final
  loss) the unscaled loss alternates 3, 4 by window (5 rises of 1), the 1/√d_k loss 2.5, 2.9 (5 rises of 0.4)."""
  monkeypatch.setitem(sizes_lib.SIZES, "fake", dict(sizes_lib.SIZES["test"], steps={1: 40}))
  rates = (-12.0, -10.0, -8.0)

  def fake(spec):
    low, high = (3.0, 4.0) if _rule(spec) == "none" else (2.5, 2.9)
    best = np.repeat([5.0] * 10 + [low, high] * 5, 2)  # windows of 2 steps
    return _curve_grid(dataclasses.replace(spec, log2_lrs=rates), (best + 1.0, best, best + 1.0))

  ctx = types.SimpleNamespace(mode="fake", seed=0, num_seeds=2, text_file=None, planner=_Written(fake))
  row = next(c for c in TRAINING_CLAIMS if c.id == "train_depth6_oscillates").evaluate(ctx)
  assert row["numbers"]["window_steps"] == 2
  assert row["numbers"]["swings"]["none"]["mean"] == pytest.approx(5.0)
  assert row["numbers"]["swings"]["sqrt"]["mean"] == pytest.approx(2.0)
  assert (row["value"], row["standard_error"], row["verdict"]) == (2.5, 0.0, verdicts.HOLDS)
  (raw,) = row["beside"]  # step to step: |1| and |0.4| at every other step, ratio 2.5 too
  assert (raw["statistic"], raw["value"]) == ("roughness_ratio", 2.5)


def test_nan_fraction_is_decided_in_low_precision_with_each_precision_beside():
  """Written grids (2 rates × 2 seeds) at depth 1: float32 never NaN; bfloat16 always NaN unscaled; float16 NaN at
  the first rate. 1/√d_k stays finite, so every rate counts."""
  asked = []

  def fake(spec):
    dtype, rule = spec.model_config.dtype, _rule(spec)
    asked.append((dtype, rule, spec.steps))
    finals = {"float32": [2.0] * 4, "bfloat16": [NAN] * 4, "float16": [NAN, NAN, 2.0, 2.0]}[dtype]
    return _fake_grid(finals if rule == "none" else [2.0] * 4, steps=spec.steps, spec=spec)
  row = next(c for c in TRAINING_CLAIMS if c.id == "train_nan_within_100_steps").evaluate(_ctx(_Written(fake)))
  assert sorted(asked) == sorted((d, r, 4) for d in ("float32", "bfloat16", "float16") for r in ("none", "sqrt"))
  assert (row["value"], row["standard_error"], row["verdict"]) == (0.75, 0.0, verdicts.HOLDS)  # (4 + 2) of 8
  assert row["numbers"]["nan_fraction_low_precision_runs"] == 8
  beside = {b["statistic"]: (b["value"], b["verdict"]) for b in row["beside"]}
  assert beside == {"nan_fraction_float32": (0.0, verdicts.FAILS), "nan_fraction_bfloat16": (1.0, verdicts.HOLDS),
                    "nan_fraction_float16": (0.5, verdicts.HOLDS)}


def test_nan_grids_train_the_low_precisions_for_the_window_only(monkeypatch):
  monkeypatch.setitem(sizes_lib.SIZES, "fake", dict(sizes_lib.SIZES["test"], steps={1: 300}, nan_window=100))
  ctx = types.SimpleNamespace(mode="fake", seed=0, num_seeds=2, text_file=None, planner=grid_run.GridPlanner())
  grids = nan_claims.nan_grids(ctx)
  assert {k: g.steps for k, g in grids.items()} == {
      (1, "float32", "none"): 300, (1, "float32", "sqrt"): 300, (1, "bfloat16", "none"): 100,
      (1, "bfloat16", "sqrt"): 100, (1, "float16", "none"): 100, (1, "float16", "sqrt"): 100}
  assert grids[(1, "float16", "none")].model_config.dtype == "float16"
  monkeypatch.setitem(sizes_lib.SIZES, "fake", dict(sizes_lib.SIZES["fake"], nan_low_dtypes=()))
  assert set(nan_claims.nan_grids(ctx)) == {(1, "float32", "none"), (1, "float32", "sqrt")}


def test_early_steps_uniform_max_prob_and_early_max_prob():
  assert [hard_claims.early_steps(n) for n in (1, 4, 10, 11, 100, 300)] == [1, 1, 1, 2, 10, 30]
  assert hard_claims.uniform_max_prob(1) == 1.0
  assert hard_claims.uniform_max_prob(4) == pytest.approx((1 + 1 / 2 + 1 / 3 + 1 / 4) / 4)
  max_prob = np.arange(2 * 3 * 2, dtype=np.float64).reshape(2, 3, 2)  # [steps, M, depth]
  step0, early = hard_claims.early_max_prob(max_prob, 2)
  np.testing.assert_allclose(step0, [0.5, 2.5, 4.5])
  np.testing.assert_allclose(early, [3.5, 5.5, 7.5])  # (0 + 1 + 6 + 7) / 4, ...
  for bad in (lambda: hard_claims.early_steps(0), lambda: hard_claims.uniform_max_prob(0),
              lambda: hard_claims.early_max_prob(max_prob, 3)):
    with pytest.raises(ValueError):
      bad()


def test_hard_selection_on_written_grids(monkeypatch):
  """20 steps: the first 2 are early. At the best rate (the middle one), unscaled max p is 0.96 then 0.92 (early mean
  0.94), 1/√d_k 0.4 then 0.3; the other rates (worse losses) are not read."""
  monkeypatch.setitem(sizes_lib.SIZES, "fake", dict(sizes_lib.SIZES["test"], steps={1: 20}))
  rates = (-12.0, -10.0, -8.0)

  def fake(spec):
    first, second = (0.96, 0.92) if _rule(spec) == "none" else (0.4, 0.3)
    prob = np.full((20, 6, 1), 0.1)
    prob[0], prob[1] = first, second
    prob[:, [0, 1, 4, 5]] = 0.0  # the other rates
    spec = dataclasses.replace(spec, log2_lrs=rates)
    return _fake_grid([3.0, 3.0, 2.0, 2.0, 3.0, 3.0], steps=20, spec=spec, records={"attn_max_prob": prob})
  ctx = types.SimpleNamespace(mode="fake", seed=0, num_seeds=2, text_file=None, planner=_Written(fake))
  row = next(c for c in TRAINING_CLAIMS if c.id == "train_attention_hard_selection").evaluate(ctx)
  assert (row["value"], row["standard_error"], row["verdict"]) == (0.94, 0.0, verdicts.HOLDS)
  beside = {b["statistic"]: (b["value"], b["verdict"]) for b in row["beside"]}
  assert beside == {"step0_max_prob_none": (0.96, verdicts.HOLDS), "early_max_prob_gap": (0.59, verdicts.HOLDS)}
  assert row["numbers"]["early_max_prob_sqrt"] == 0.35
  assert row["numbers"]["uniform_max_prob"] == pytest.approx(stats.round_finite(hard_claims.uniform_max_prob(8)))


@pytest.mark.parametrize("rule", ["none", "sqrt"])
def test_recorded_max_prob_is_that_of_the_models_attention_at_step_0(rule):
  """The grid's recorded attn_max_prob at step 0 against softmax(scale · q·kᵀ) by hand (numpy, causal) from the
  model's query and key projections at the initial parameters, on each member's first batch."""
  ctx = _ctx()
  spec = grids_lib.grid_spec(ctx, rule=rule, depth=1, steps=1)
  run = ctx.planner.train(spec)
  config = spec.model_config
  model = model_lib.Transformer(config)
  params = run.initial_params()
  dataset = sizes_lib.dataset_of(ctx)
  _, seeds, _ = spec.member_arrays()
  scale = 1.0 if rule == "none" else 1.0 / math.sqrt(config.head_dim)

  # The rotated projections of every member in one compiled program (op by op, the forward pass and the rotation
  # would each compile a program per operation).
  @jax.jit
  @jax.vmap
  def rotated(member, tokens):
    _, state = model.apply({"params": member}, tokens, mutable=["intermediates"])
    attn = state["intermediates"]["block_0"]["attn"]
    return tuple(rope_lib.apply_rope(attn[n][0], base=config.rope_base) for n in ("q_projected", "k_projected"))

  tokens = np.stack([dataset.batch(0, int(seed))["inputs"] for seed in seeds])
  qs, ks = (np.asarray(x, np.float64) for x in rotated(params, tokens))
  for m in range(len(seeds)):
    q, k = qs[m], ks[m]
    logits = scale * np.einsum("bthd,bshd->bhts", q, k)
    t = logits.shape[-1]
    logits = np.where(np.tril(np.ones((t, t), bool)), logits, -np.inf)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(run.records["attn_max_prob"][0, m, 0], p.max(-1).mean(), rtol=1e-4)
