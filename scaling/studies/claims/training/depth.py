"""Training claims about unscaled models at depth 6 and 12 (note 2 §4, follow-up 1): at 6 layers they converge, but
to a worse loss, very slowly, with an oscillating loss, or only with a tiny learning rate and gradient clipping
(``ClippedOptimizerConfig``); at 12 layers, pre- or post-LN, with or without warmup, they cannot converge.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np
import optax

from scaling.base.config import option
from scaling.training.optimizer import OptimizerConfig
from scaling.studies import stats
from scaling.studies.grid.run import GridSpec
from scaling.studies.claims.training.best_learning_rate import best_rate
from scaling.studies.claims.training.best_learning_rate import compare_at_best_lr
from scaling.studies.claims.training.best_learning_rate import edge_words
from scaling.studies.claims.training.best_learning_rate import relative_gap_criterion
from scaling.studies.claims.training.best_learning_rate import still_at_edge_words
from scaling.studies.claims.training.best_learning_rate import values_at_best
from scaling.studies.claims.training.best_learning_rate import widened_at_best
from scaling.studies.claims.context import Context
from scaling.studies.claims.training.loss_curves import converged
from scaling.studies.claims.training.loss_curves import DIVERGENCE_FACTOR
from scaling.studies.claims.training.loss_curves import diverged
from scaling.studies.claims.training.loss_curves import final_losses
from scaling.studies.claims.training.loss_curves import roughness
from scaling.studies.claims.training.loss_curves import stalled
from scaling.studies.claims.training.loss_curves import steps_to_reach
from scaling.studies.claims.training.loss_curves import swing_noise_floor
from scaling.studies.claims.training.loss_curves import swings
from scaling.studies.claims.training.loss_curves import window_mean
from scaling.studies.claims.training.grids import grid_spec
from scaling.studies.claims.training.grids import rule_grids
from scaling.studies.claims.training.grids import trained
from scaling.studies.claims.training.numbers import about
from scaling.studies.claims.training.numbers import fmt
from scaling.studies.claims.training.numbers import lr_label
from scaling.studies.claims.training.numbers import spread
from scaling.studies.claims.training.sizes import data_name
from scaling.studies.claims.training.sizes import NORM_SETUPS
from scaling.studies.claims.training.sizes import seeds_of
from scaling.studies.claims.training.sizes import setup_name
from scaling.studies.claims.training.sizes import sizes
from scaling.studies.claims.verdicts import Claim
from scaling.studies.claims.verdicts import Criterion
from scaling.studies.claims.verdicts import Measurement
from scaling.studies.claims.verdicts import Reading


# ----------------------------------------------------------------------------
# Note 2 §4, follow-up 1: 6 layers without scaling converge, but worse, very slowly, oscillating.


def depth6_grids(ctx: Context) -> dict[str, GridSpec]:
  """{rule: spec}: unscaled and 1/√d_k at depth 6 (the mode's ``depth_converge``)."""
  return rule_grids(ctx, ("none", "sqrt"), sizes(ctx)["depth_converge"])


def measure_depth6_converges_worse(ctx: Context) -> Measurement:
  """Final loss of the unscaled model minus the 1/√d_k model at depth 6, each at its best learning rate, relative."""
  c = compare_at_best_lr(ctx, trained(ctx, depth6_grids(ctx)), "none", "sqrt", sizes(ctx)["depth_converge"])
  none, sqrt = c["none"], c["sqrt"]
  none_drop = None
  if none["final_loss"]["mean"] is not None:
    none_drop = stats.round_finite(none["initial_loss"]["mean"] - none["final_loss"]["mean"])
  numbers = {**about(ctx), **c, "none_loss_drop_from_init": none_drop}
  finding = (f"Depth {c['depth']}, {c['steps']} steps on the {data_name(ctx)}: at its best learning rate the "
             f"unscaled model reached a final loss of {fmt(none['final_loss']['mean'])} (from "
             f"{fmt(none['initial_loss']['mean'])}) vs {fmt(sqrt['final_loss']['mean'])} with 1/√d_k, a relative "
             f"gap of {fmt(c['relative_final_gap'])}{edge_words(c, {'none': 'unscaled', 'sqrt': '1/√d_k'})}; at step "
             f"{c['fixed_step']} the gap was {fmt(c['relative_gap_at_fixed_step'])}.")
  return Measurement(numbers, finding)


def swing_width(steps: int) -> int:
  """The window the depth-6 loss is smoothed over for its swings: a twentieth of the steps, at most half of the
  second half (so that it holds two windows), at least one step."""
  return max(1, min(steps // 20, (steps - steps // 2) // 2))


def measure_depth6_oscillates(ctx: Context) -> Measurement:
  """How far the unscaled depth-6 loss, smoothed over windows, climbs back up in the second half of training
  (``swings``), over 1/√d_k's, each at its best learning rate; the raw step-to-step RMS ratio beside it."""
  depth = sizes(ctx)["depth_converge"]
  steps = sizes(ctx)["steps"][depth]
  width = swing_width(steps)
  swing, floor, rough, edges = {}, {}, {}, []
  for rule, run in trained(ctx, depth6_grids(ctx)).items():
    run, best, at_edge = widened_at_best(ctx, run)
    edges += [rule] if at_edge else []
    loss = run.records["loss"]
    swing[rule] = values_at_best(run, best, swings(loss, width))
    floor[rule] = values_at_best(run, best, swing_noise_floor(loss, width) if width >= 2 else np.full(loss.shape[1],
                                                                                                        np.nan))
    rough[rule] = values_at_best(run, best, roughness(loss))
  with np.errstate(invalid="ignore", divide="ignore"):
    ratio = float(np.mean(swing["none"]) / np.mean(swing["sqrt"]))
    per_seed = swing["none"] / swing["sqrt"]  # paired by seed: the same batches in the same order
    rough_ratio = float(np.mean(rough["none"]) / np.mean(rough["sqrt"]))
    rough_seeds = rough["none"] / rough["sqrt"]
  numbers = {**about(ctx), "depth": depth, "steps": steps, "window_steps": width,
             "swing_ratio": stats.round_finite(ratio), **spread("swing_ratio", per_seed),
             "best_lr_at_edge": bool(edges),
             "swings": {r: stats.finite_mean_std(v) for r, v in swing.items()},
             "swing_noise_floor": {r: stats.finite_mean_std(v) for r, v in floor.items()},
             "roughness_ratio": stats.round_finite(rough_ratio), **spread("roughness_ratio", rough_seeds),
             "roughness": {r: stats.finite_mean_std(v) for r, v in rough.items()}}
  sw, fl = numbers["swings"], numbers["swing_noise_floor"]
  return Measurement(numbers, (
      f"Depth {depth}, {steps} steps on the {data_name(ctx)}, each rule at its best learning rate: averaged over "
      f"windows of {width} steps, the loss climbs back up by {fmt(sw['none']['mean'])} in total over the second half "
      f"unscaled and by {fmt(sw['sqrt']['mean'])} with 1/√d_k (ratio {fmt(stats.round_finite(ratio))}; batch noise "
      f"alone would give about {fmt(fl['none']['mean'])} and {fmt(fl['sqrt']['mean'])}); the raw step-to-step RMS "
      f"change is {fmt(numbers['roughness']['none']['mean'])} and {fmt(numbers['roughness']['sqrt']['mean'])} (ratio "
      f"{fmt(numbers['roughness_ratio'])})" + still_at_edge_words(edges) + "."))


def measure_depth6_slow(ctx: Context) -> Measurement:
  """Steps the unscaled depth-6 model needs to reach the loss 1/√d_k reaches at a quarter of training, relative."""
  depth = sizes(ctx)["depth_converge"]
  steps = sizes(ctx)["steps"][depth]
  width = max(1, steps // 20)
  quarter = max(width, steps // 4)
  runs = trained(ctx, depth6_grids(ctx))
  (sqrt, sb, sqrt_edge), (none, nb, none_edge) = (widened_at_best(ctx, runs[r]) for r in ("sqrt", "none"))
  target = values_at_best(sqrt, sb, window_mean(sqrt.records["loss"], quarter - 1, width))
  reached = np.full(len(none.seeds), np.nan)
  if nb is not None:
    reached = steps_to_reach(none.by_lr(none.records["loss"].T)[nb].T, target, width)  # from [steps, S]
  capped = np.where(np.isfinite(reached), reached + 1, steps)  # never: at least the whole run
  ratio = float(np.mean(capped) / quarter)
  numbers = {**about(ctx), "depth": depth, "steps": steps, "quarter_steps": quarter,
             "slowdown": stats.round_finite(ratio), **spread("slowdown", capped / quarter),
             "best_lr_at_edge": bool(sqrt_edge or none_edge),
             "target_loss": stats.finite_mean_std(target),
             "none_steps_to_target": [None if not np.isfinite(x) else int(x) + 1 for x in reached]}
  return Measurement(numbers, (
      f"Depth {depth} on the {data_name(ctx)}: 1/√d_k reaches loss {fmt(numbers['target_loss']['mean'])} in {quarter} "
      f"steps; the unscaled model (each at its best learning rate) needs "
      f"{', '.join('never' if x is None else str(x) for x in numbers['none_steps_to_target'])} steps "
      f"(per seed; 'never' counted as {steps}): {fmt(stats.round_finite(ratio))}× as many"
      + still_at_edge_words([r for r, e in (("sqrt", sqrt_edge), ("none", none_edge)) if e]) + "."))


# ----------------------------------------------------------------------------
# Note 2 §4, follow-up 1: at 6 layers, "with a tiny learning rate and clipping".


@dataclasses.dataclass(frozen=True)
class ClippedOptimizerConfig(OptimizerConfig):
  """``OptimizerConfig`` whose gradients are first clipped to a global norm (``optax.clip_by_global_norm``).

  The optimizer state is the unclipped optimizer's (clipping keeps none), so its learning rate stays settable.
  """

  clip: float = option(1.0, "Clip each gradient to this global norm before the optimizer.", positive=True)

  def build(self, parametrized, learning_rate=None) -> optax.GradientTransformation:
    inner = super().build(parametrized, learning_rate)
    clip = optax.clip_by_global_norm(self.clip)

    def update(updates, state, params=None):
      updates, _ = clip.update(updates, optax.EmptyState())
      return inner.update(updates, state, params)

    return optax.GradientTransformation(inner.init, update)


def clipped(spec: GridSpec, clip: float) -> GridSpec:
  """``spec`` with each gradient clipped to the global norm ``clip`` before its optimizer (``ClippedOptimizerConfig``
  of the same options)."""
  opt = spec.opt_config
  options = {f.name: getattr(opt, f.name) for f in dataclasses.fields(opt) if f.init}
  return dataclasses.replace(spec, opt_config=ClippedOptimizerConfig(**options, clip=clip))


def tiny_log2_lrs(best_log2_lr: float, octaves_below: Sequence[float]) -> tuple[float, ...]:
  """The tiny learning rates (log2): ``octaves_below`` octaves below the best one, largest first."""
  return tuple(float(best_log2_lr) - float(o) for o in sorted(octaves_below))


def tiny_grids(ctx: Context, anchor: float | None = None) -> dict[Any, GridSpec]:
  """The depth-6 grids ({"none", "sqrt"}: ``depth6_grids``) and the tiny-rate grids ({("tiny", rule)}: unscaled and
  1/√d_k at ``tiny_octaves_below`` octaves below ``anchor``, gradients clipped to the mode's ``clip``).

  ``anchor`` is 1/√d_k's best log2 learning rate of the depth-6 grid, read from its records; None (a plan, before
  anything is trained): the depth-6 grid's middle rate stands in (what a grid costs does not depend on its rates).
  """
  s = sizes(ctx)
  base = depth6_grids(ctx)
  if anchor is None:
    rates = base["sqrt"].log2_lrs
    anchor = rates[len(rates) // 2]
  log2_lrs = tiny_log2_lrs(anchor, s["tiny_octaves_below"])
  return {**base, **{("tiny", rule): clipped(grid_spec(ctx, rule=rule, depth=s["depth_converge"], log2_lrs=log2_lrs),
                                             s["clip"]) for rule in ("none", "sqrt")}}


def measure_depth6_tiny_lr_clipping(ctx: Context) -> Measurement:
  """Whether a tiny learning rate and clipping suffice for the unscaled depth-6 model to converge: the fraction of
  its runs that converge at tiny rates (octaves below 1/√d_k's best rate of the depth-6 grid) with gradients clipped,
  counted where the 1/√d_k runs so trained converge; beside it, whether they are needed (that fraction minus the one
  converging without them, at 1/√d_k's best rate unclipped) and the unscaled model at its own best rate unclipped."""
  s = sizes(ctx)
  depth, steps = s["depth_converge"], s["steps"][s["depth_converge"]]
  last = max(1, steps // 10)
  base = trained(ctx, depth6_grids(ctx))
  sqrt_grid, none_grid = base["sqrt"], base["none"]
  sqrt_best, none_best = best_rate(sqrt_grid), best_rate(none_grid)
  none_ok = converged(none_grid.records["loss"], s["stall_fraction"], last)
  own_ok = values_at_best(none_grid, none_best, none_ok)
  own = {"best_learning_rate": None if none_best is None else lr_label(none_grid.log2_lrs[none_best]),
         "converged_fraction": None if none_best is None else stats.round_finite(float(np.mean(own_ok)))}
  untuned_ok = values_at_best(none_grid, sqrt_best, none_ok).astype(np.float64)  # [S]: at 1/√d_k's best rate, unclipped
  untuned = {"learning_rate": None if sqrt_best is None else lr_label(sqrt_grid.log2_lrs[sqrt_best]),
             "converged_fraction": None if sqrt_best is None else stats.round_finite(float(np.mean(untuned_ok)))}
  numbers = {**about(ctx), "depth": depth, "steps": steps, "clip": s["clip"],
             "octaves_below_best": list(s["tiny_octaves_below"]),
             "sqrt_best_learning_rate": untuned["learning_rate"],
             "converged": f"finite, never > {DIVERGENCE_FACTOR:g}x and final loss <= {s['stall_fraction']:g}x step 0",
             "tuning_gain": None, **spread("tuning_gain", []), "converged_fraction": None,
             **spread("converged_fraction", []),
             "without_tuning": untuned, "none_own_best_no_clipping": own}
  if sqrt_best is None:
    return Measurement(numbers, f"Depth {depth}, {steps} steps on the {data_name(ctx)}: no 1/√d_k learning rate "
                       "trained without a NaN seed, so there is no best rate to take the tiny ones from.")
  runs = trained(ctx, tiny_grids(ctx, sqrt_grid.log2_lrs[sqrt_best]))
  log2_lrs = runs[("tiny", "sqrt")].log2_lrs
  ok, final, by_lr = {}, {}, {}
  for rule in ("none", "sqrt"):
    run = runs[("tiny", rule)]
    loss = run.records["loss"]
    ok[rule] = run.by_lr(converged(loss, s["stall_fraction"], last))  # [L, S]
    final[rule] = stats.finite_mean_std(final_losses(loss, last))
    by_lr[rule] = {lr_label(x): int(ok[rule][i].sum()) for i, x in enumerate(log2_lrs)}
    if rule == "none":
      initial = stats.finite_mean_std(loss[0])
  fair = ok["sqrt"].all(axis=1)
  tuned = float(ok["none"][fair].mean()) if fair.any() else None
  n_fair = int(ok["none"][fair].size)
  gain = None if tuned is None else tuned - float(np.mean(untuned_ok))
  gain_seeds = ok["none"][fair].mean(axis=0) - untuned_ok if fair.any() else []
  numbers.update({
      "learning_rates": [lr_label(x) for x in log2_lrs],
      "tuning_gain": stats.round_finite(gain), **spread("tuning_gain", gain_seeds),
      "converged_fraction": stats.round_finite(tuned), "runs_counted": n_fair,
      **spread("converged_fraction", ok["none"][fair].mean(axis=0) if fair.any() else []),
      "converged_by_lr": by_lr, "converged_fraction_sqrt": stats.round_finite(float(ok["sqrt"].mean())),
      "initial_loss_none": initial, "final_loss": final})
  if tuned is None:
    words = "1/√d_k does not converge at the tiny rates either, so these steps cannot tell"
  else:
    words = (f"of the {n_fair} unscaled runs counted, a fraction {fmt(tuned, '.2f')} converge with the tiny rate and "
             f"clipping; without them, at 1/√d_k's best rate {untuned['learning_rate']} unclipped, "
             f"{int(untuned_ok.sum())} of {untuned_ok.size} converge, so the tuning changes the fraction that "
             f"converges by {fmt(gain, '+.2f')}")
  return Measurement(numbers, (
      f"Depth {depth}, {steps} steps on the {data_name(ctx)} at learning rates {', '.join(numbers['learning_rates'])} "
      f"({' and '.join(f'{o:g}' for o in s['tiny_octaves_below'])} octaves below 1/√d_k's best, "
      f"{numbers['sqrt_best_learning_rate']}) with gradients clipped to norm {s['clip']:g}: {int(ok['none'].sum())} of "
      f"{ok['none'].size} unscaled runs converged (loss {fmt(initial['mean'])} -> {fmt(final['none']['mean'])}; "
      f"{n_fair} at rates where every 1/√d_k run converged) and {int(ok['sqrt'].sum())} of {ok['sqrt'].size} with "
      f"1/√d_k (-> {fmt(final['sqrt']['mean'])}); {words}. At its own best rate {own['best_learning_rate'] or 'n/a'} "
      f"without clipping, {fmt(own['converged_fraction'], '.2f')} of the unscaled runs converge."))


# ----------------------------------------------------------------------------
# Note 2 §4, follow-up 1: "cannot converge" at 12+ layers, pre-LN and post-LN, with and without warmup.


def depth12_grids(ctx: Context) -> dict[tuple[bool, bool, str], GridSpec]:
  """{(pre_ln, warmup, rule): spec}: unscaled and 1/√d_k at depth 12 (the mode's ``depth_diverge``) in each setup."""
  s = sizes(ctx)
  return {(pre_ln, warmup, rule): grid_spec(ctx, rule=rule, depth=s["depth_diverge"], pre_ln=pre_ln, warmup=warmup)
          for pre_ln, warmup in s.get("depth12_setups", NORM_SETUPS) for rule in ("none", "sqrt")}


def measure_depth12_cannot_converge(ctx: Context) -> Measurement:
  """The fraction of unscaled depth-12 runs that diverge or stall, at learning rates where no 1/√d_k run of the same
  norm placement and warmup does either, pooled over pre-/post-LN and with/without warmup."""
  s = sizes(ctx)
  runs = trained(ctx, depth12_grids(ctx))
  depth, steps = s["depth_diverge"], s["steps"][s["depth_diverge"]]
  last = max(1, steps // 10)
  hits = counted = 0
  seed_hits, seed_counted = np.zeros(len(seeds_of(ctx))), np.zeros(len(seeds_of(ctx)))
  table = {}
  for pre_ln, warmup in s.get("depth12_setups", NORM_SETUPS):
    failed, div, stall = {}, {}, {}
    for rule in ("none", "sqrt"):
      run = runs[(pre_ln, warmup, rule)]
      loss = run.records["loss"]
      div[rule] = run.by_lr(diverged(loss))
      stall[rule] = run.by_lr(stalled(loss, s["stall_fraction"], last))
      failed[rule] = div[rule] | stall[rule]
    fair = ~failed["sqrt"].any(axis=1)
    n = int(fair.sum()) * len(seeds_of(ctx))
    hits += int(failed["none"][fair].sum())
    counted += n
    seed_hits += failed["none"][fair].sum(axis=0)
    seed_counted += fair.sum()
    table[setup_name(pre_ln, warmup)] = {
        "none_failed_fraction": stats.round_finite(float(failed["none"][fair].mean())) if n else None,
        "runs_counted": n, "none_diverged_all_lrs": stats.round_finite(float(div["none"].mean())),
        "none_stalled_all_lrs": stats.round_finite(float(stall["none"].mean())),
        "sqrt_failed_all_lrs": stats.round_finite(float(failed["sqrt"].mean()))}
  fraction = hits / counted if counted else float("nan")
  numbers = {**about(ctx), "depth": depth, "steps": steps,
             "cannot_converge": f"diverged (non-finite or > {DIVERGENCE_FACTOR:g}x the step-0 loss) or stalled "
                                f"(final loss > {s['stall_fraction']:g}x the step-0 loss)",
             "failed_fraction_none": stats.round_finite(fraction) if counted else None, "runs_counted": counted,
             **spread("failed_fraction_none", seed_hits / np.where(seed_counted > 0, seed_counted, np.nan)),
             "by_setup": table}
  finding = (f"Depth {depth}, {steps} steps on the {data_name(ctx)}: {hits} of {counted} unscaled runs diverged or "
             f"stalled at the learning rates where 1/√d_k did neither; by setup (unscaled failed at fair rates / "
             f"diverged / stalled at all rates; 1/√d_k failed at all rates): " + "; ".join(
                 f"{k}: {fmt(v['none_failed_fraction'], '.2f')} / {fmt(v['none_diverged_all_lrs'], '.2f')} / "
                 f"{fmt(v['none_stalled_all_lrs'], '.2f')}; {fmt(v['sqrt_failed_all_lrs'], '.2f')}"
                 for k, v in table.items()) + ".")
  return Measurement(numbers, finding)


# ----------------------------------------------------------------------------
# The claims.


DEPTH_CLAIMS: tuple[Claim, ...] = (
    Claim(
        "train_depth6_converges_worse", "note 2 §4, follow-up 1",
        "Without scaling a 6-layer model may converge, but to a worse loss.",
        relative_gap_criterion("unscaled", "1/√d_k", "final loss 1/√d_k", 6),
        measure_depth6_converges_worse, training=True, grids=depth6_grids),
    Claim(
        "train_depth6_oscillates", "note 2 §4, follow-up 1",
        "Without scaling the 6-layer loss curve oscillates strongly.",
        Criterion("swing_ratio", "total rise of the loss averaged over windows of a twentieth of the steps (the sum "
                  "of the increases between consecutive window means) in the second half of training, unscaled over "
                  "1/√d_k, depth 6, each at its best learning rate, paired by seed", holds=(">=", 2.0),
                  fails=("<=", 1.0), noise=True, edge="best_lr_at_edge",
                  reason="'oscillates strongly' = the smoothed curve swings back up at least twice as much as the "
                         "scaled one, no more is not; it is not batch noise: averaging a window of w steps divides "
                         "the step-to-step noise's standard deviation by √w, the two arms of a seed see the same "
                         "batches in the same order, and a curve that only falls has no rises at all (the noise floor "
                         "is reported beside)"),
        measure_depth6_oscillates, training=True, grids=depth6_grids,
        beside=(Reading("raw step-to-step jaggedness (batch noise included)", Criterion(
            "roughness_ratio", "RMS of the step-to-step minibatch loss change in the second half of training, "
            "unscaled over 1/√d_k, depth 6, each at its best learning rate", holds=(">=", 2.0), fails=("<=", 1.0),
            noise=True, edge="best_lr_at_edge",
            reason="at least twice as jagged step to step as the scaled curve; mostly batch noise, so shown only "
                   "beside")),)),
    Claim(
        "train_depth6_slow", "note 2 §4, follow-up 1",
        "Without scaling the 6-layer model converges very slowly.",
        Criterion("slowdown", "steps the unscaled depth-6 model needs to reach the loss 1/√d_k reaches at a quarter of "
                  "training, over that quarter (never = the whole run; each at its best learning rate)",
                  holds=(">=", 2.0), fails=("<=", 1.25), noise=True, edge="best_lr_at_edge",
                  reason="'very slow' = at least twice the steps; within 25% more it is not slow"),
        measure_depth6_slow, training=True, grids=depth6_grids),
    Claim(
        "train_depth6_tiny_lr_clipping", "note 2 §4, follow-up 1",
        "Without scaling, a 6-layer model may barely converge under careful tuning (e.g. a tiny learning rate and "
        "gradient clipping).",
        Criterion("converged_fraction", "fraction of unscaled depth-6 (learning rate, seed) runs that converge "
                  "(finite, never above 3 × the initial loss, final loss at most 0.9 × the initial) with a tiny learning rate "
                  "and clipping (2 and 4 octaves below 1/√d_k's best rate of the depth-6 grid, gradients clipped to "
                  "norm 1; counted at the rates where every 1/√d_k run so trained converges)",
                  holds=(">=", 0.5), fails=("<=", 0.1), noise=True,
                  reason="the note says the tuning is enough for the model to (barely) converge: it holds if at "
                         "least half the tuned runs converge, and does not hold if at most 1 in 10 does; 'tiny' is "
                         "relative to the rate that works (4× and 16× below it), the only reading that applies at "
                         "every size"),
        measure_depth6_tiny_lr_clipping, training=True, grids=tiny_grids,
        beside=(Reading("the tuning is needed (the model does not converge without it)", Criterion(
            "tuning_gain", "the fraction converging with the tiny rate and clipping minus the fraction converging "
            "without them (at 1/√d_k's best rate, unclipped), paired by seed", holds=(">=", 0.5), fails=("<=", 0.0),
            noise=True,
            reason="needed = it turns at least half the runs from not converging into converging; not needed if "
                   "the model converges as often without it")),)),
    Claim(
        "train_depth12_cannot_converge", "note 2 §4, follow-up 1; §5",
        "Without scaling, models of 12 or more layers cannot converge (they almost certainly diverge).",
        Criterion("failed_fraction_none", "fraction of unscaled depth-12 (learning rate, seed) runs that diverge or "
                  "stall (final loss > 0.9 × the initial), pooled over pre-/post-LN with and without warmup, at "
                  "learning rates where no 1/√d_k run of the same setup does either", holds=(">=", 0.8),
                  fails=("<=", 0.2), noise=True,
                  reason="'almost certainly' = at least 4 runs in 5; at most 1 in 5 contradicts it"),
        measure_depth12_cannot_converge, training=True, grids=depth12_grids),
)
"""The claims of this module, in the order of their table (``scaling.studies.claims.training.families``)."""
