"""Training claims about the choice of logit scale: the division belongs before the softmax (note 1 §4 ⑤, §5),
dividing by d_k loses expressiveness and √d_k is the optimal variance normalization (note 2 §2.2), and LayerNorm and
RMSNorm do not replace the scale (note 2 §2.4, follow-up 2).

The comparisons "each at its best learning rate" refine each grid around its best rate in a mode with
``refine_best_lr`` and say how the choice enters (``scaling.studies.claims.training.best_learning_rate``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from scaling.base import compilation
from scaling.attention import dense as dense_lib
from scaling.attention import metrics as metrics_lib
from scaling.attention import rope as rope_lib
from scaling.training.model import transformer as model_lib
from scaling.training.model.config import ModelConfig
from scaling.studies import stats
from scaling.studies.grid.run import GridSpec
from scaling.studies.claims.training.best_learning_rate import at_best_lr
from scaling.studies.claims.training.best_learning_rate import choice_words
from scaling.studies.claims.training.best_learning_rate import compare_at_best_lr
from scaling.studies.claims.training.best_learning_rate import edge_words
from scaling.studies.claims.training.best_learning_rate import fmt_range
from scaling.studies.claims.training.best_learning_rate import locate_optimum
from scaling.studies.claims.training.best_learning_rate import refined_plan_spec
from scaling.studies.claims.training.best_learning_rate import relative_gap_criterion
from scaling.studies.claims.training.best_learning_rate import value_range
from scaling.studies.claims.training.best_learning_rate import values_at_best
from scaling.studies.claims.context import Context
from scaling.studies.claims.parts import Part
from scaling.studies.claims.parts import parts_criterion
from scaling.studies.claims.parts import parts_text
from scaling.studies.claims.parts import score_parts
from scaling.studies.claims.training.grids import grid_spec
from scaling.studies.claims.training.grids import NORM_NAMES
from scaling.studies.claims.training.grids import rule_grids
from scaling.studies.claims.training.grids import trained
from scaling.studies.claims.training.numbers import about
from scaling.studies.claims.training.numbers import fmt
from scaling.studies.claims.training.numbers import lr_label
from scaling.studies.claims.training.numbers import pm
from scaling.studies.claims.training.numbers import seed_values
from scaling.studies.claims.training.numbers import spread
from scaling.studies.claims.training.sizes import data_name
from scaling.studies.claims.training.sizes import dataset_of
from scaling.studies.claims.training.sizes import seeds_of
from scaling.studies.claims.training.sizes import sizes
from scaling.studies.claims.verdicts import Claim
from scaling.studies.claims.verdicts import Criterion
from scaling.studies.claims.verdicts import Measurement
from scaling.studies.claims.verdicts import Reading


def with_refinements(ctx: Context, grids: dict[Any, GridSpec]) -> dict[Any, GridSpec]:
  """A claim's declared grids: ``grids`` (what its measurement trains first) and, in a mode with ``refine_best_lr``,
  each one's refinement around its best rate as a plan counts it (``refined_plan_spec``), under (name, "refined")."""
  out = dict(grids)
  for name, spec in grids.items():
    finer = refined_plan_spec(ctx, spec)
    if finer is not None:
      out[(name, "refined")] = finer
  return out


# ----------------------------------------------------------------------------
# Note 1 §4 ⑤, §5: the division belongs before the softmax; after it, training suffers.


def post_softmax_grids(ctx: Context) -> dict[str, GridSpec]:
  """{rule: spec}: the division after the softmax, 1/√d_k and unscaled at the small depth."""
  return rule_grids(ctx, ("post_softmax", "sqrt", "none"), sizes(ctx)["depth_small"])


def post_softmax_plan(ctx: Context) -> dict[Any, GridSpec]:
  """The grids train_post_softmax_worse declares: ``post_softmax_grids`` with their refinements."""
  return with_refinements(ctx, post_softmax_grids(ctx))


def measure_post_softmax_training(ctx: Context) -> Measurement:
  """Loss of softmax(q·k)·v/√d_k against softmax(q·k/√d_k)·v after training, each at its best learning rate (each
  grid refined around it in a mode with ``refine_best_lr``)."""
  runs = trained(ctx, post_softmax_grids(ctx))
  c = compare_at_best_lr(ctx, runs, "post_softmax", "sqrt", sizes(ctx)["depth_small"], refine=True)
  unscaled = compare_at_best_lr(ctx, runs, "post_softmax", "none", sizes(ctx)["depth_small"], refine=True)
  c["relative_final_gap_over_unscaled"] = unscaled["relative_final_gap"]
  c["none"] = unscaled["none"]
  post, sqrt = c["post_softmax"], c["sqrt"]
  finding = (f"Depth {c['depth']}, {c['steps']} steps on the {data_name(ctx)}: dividing after the softmax reached a "
             f"final loss of {fmt(post['final_loss']['mean'])} (best learning rate {post['best_learning_rate']}) vs "
             f"{fmt(sqrt['final_loss']['mean'])} with the division inside the logits (best learning rate "
             f"{sqrt['best_learning_rate']}): a relative gap of {fmt(c['relative_final_gap'])}"
             f"{edge_words(c, {'post_softmax': 'the division after the softmax', 'sqrt': 'inside the logits'})}; "
             f"at step "
             f"{c['fixed_step']} the gap was {fmt(c['relative_gap_at_fixed_step'])}. Its logits are unscaled "
             f"(softmax(q·k)·v/√d_k = the unscaled model with its attention output divided by √d_k), so most of the "
             f"gap is 'no scaling': against the unscaled model ({fmt(c['none']['final_loss']['mean'])}) the gap is "
             f"{fmt(c['relative_final_gap_over_unscaled'])}."
             + choice_words(c, {"post_softmax": "after the softmax", "sqrt": "inside the logits"}))
  return Measurement({**about(ctx), **c}, finding)


# ----------------------------------------------------------------------------
# Note 2 §2.2: dividing by d_k loses expressiveness; √d_k is the optimal variance normalization.


def linear_grids(ctx: Context) -> dict[str, GridSpec]:
  """{rule: spec}: 1/d_k and 1/√d_k at the small depth."""
  return rule_grids(ctx, ("linear", "sqrt"), sizes(ctx)["depth_small"])


def linear_plan(ctx: Context) -> dict[Any, GridSpec]:
  """The grids train_linear_less_expressive declares: ``linear_grids`` with their refinements."""
  return with_refinements(ctx, linear_grids(ctx))


def measure_linear_expressiveness(ctx: Context) -> Measurement:
  """Final loss with 1/d_k against 1/√d_k at the small depth, each at its best learning rate (each grid refined
  around it in a mode with ``refine_best_lr``), relative."""
  c = compare_at_best_lr(ctx, trained(ctx, linear_grids(ctx)), "linear", "sqrt", sizes(ctx)["depth_small"],
                         refine=True)
  names = {"linear": "1/d_k", "sqrt": "1/√d_k"}
  return Measurement({**about(ctx), **c}, (
      f"Depth {c['depth']}, {c['steps']} steps on the {data_name(ctx)}: 1/d_k reached a final loss of "
      f"{fmt(c['linear']['final_loss']['mean'])} vs {fmt(c['sqrt']['final_loss']['mean'])} with 1/√d_k (each at its "
      f"best learning rate): a relative gap of {fmt(c['relative_final_gap'])}{edge_words(c, names)}."
      + choice_words(c, names)))


def multiplier_spec(ctx: Context, log2_lr: float, log2_mults: Sequence[float], label: str | None = None) -> GridSpec:
  """1/√d_k at the small depth with each logit multiplier c·(1/√d_k), log2 c in ``log2_mults``, at the one learning
  rate ``log2_lr``."""
  s = sizes(ctx)
  alphas = [2.0 ** c * math.sqrt(s["head_dim"]) for c in log2_mults]  # α/d_head = c/√d_head
  return grid_spec(ctx, rule="sqrt", depth=s["depth_small"], log2_lrs=(log2_lr,), attn_mults=alphas, label=label)


def sqrt_optimal_grids(ctx: Context, log2_lr: float | None = None) -> dict[str, GridSpec]:
  """{"sqrt": 1/√d_k at the small depth, "multipliers": ``multiplier_spec`` of the octaves ``attn_log2_mults`` at the
  one learning rate ``log2_lr``}.

  ``log2_lr`` is 1/√d_k's best learning rate, read from its grid's records; None (a plan, before anything is
  trained, or a grid whose every rate had a NaN seed): the grid's first rate.
  """
  s = sizes(ctx)
  sqrt = grid_spec(ctx, rule="sqrt", depth=s["depth_small"])
  log2_lr = sqrt.log2_lrs[0] if log2_lr is None else log2_lr
  return {"sqrt": sqrt, "multipliers": multiplier_spec(ctx, log2_lr, s["attn_log2_mults"])}


def logit_variance_fn(model_config: ModelConfig):
  """A jitted (stacked params [M, ...], tokens [B, T]) -> [M, depth, N]: per layer and head, the variance of the
  visible attention logits on ``tokens`` (after RoPE and the rule's scale: the logits the softmax sees), from the
  query and key projections of a forward pass."""
  model = model_lib.Transformer(model_config)
  n, kv = model_config.num_heads, model_config.kv_heads

  def one(params, tokens):
    _, state = model.apply({"params": params}, tokens, mutable=["intermediates"])
    out = []
    for i in range(model_config.depth):
      attn = state["intermediates"][f"block_{i}"]["attn"]
      q = attn["q_projected"][0].astype(jnp.float32)  # [B, T, N, H]
      k = jnp.repeat(attn["k_projected"][0].astype(jnp.float32), n // kv, axis=2)
      if model_config.positions == "rope":
        q, k = (rope_lib.apply_rope(x, base=model_config.rope_base) for x in (q, k))
      _, logits, _, mask = dense_lib.attention_with_aux(q, k, k, rule=model_config.attention_rule,
                                                        is_causal=model_config.causal,
                                                        logit_soft_cap=model_config.logit_soft_cap)
      out.append(metrics_lib.logit_stats_per_head(logits, mask)["var"])
    return jnp.stack(out)

  return compilation.jit(jax.vmap(one, in_axes=(0, None)))


def sqrt_optimal_plan(ctx: Context) -> dict[Any, GridSpec]:
  """The grids train_sqrt_optimal declares: ``sqrt_optimal_grids`` (the multipliers at a placeholder rate) with the
  1/√d_k grid's refinement."""
  grids = sqrt_optimal_grids(ctx)
  out = with_refinements(ctx, {"sqrt": grids["sqrt"]})
  out["multipliers"] = grids["multipliers"]
  return out


SQRT_OPTIMAL_PARTS = (
    Part("variance 1 (at initialization, the premise's setting)", Criterion(
        "abs_log2_logit_variance_init", "|log2 Var| of the 1/√d_k attention logits at initialization (mean over "
        "seeds)", holds=("<=", 1.0), fails=(">=", 3.0))),
    Part("the optimal scale (loss-optimal multiplier near 1×)", Criterion(
        "abs_optimal_log2_multiplier", "|log2 c| of the logit multiplier c × 1/√d_k with the lowest final loss",
        holds=("<=", 0.5), fails=(">=", 1.5))),
)
"""The two things note 2 §2.2 says of 1/√d_k: it normalizes the logits' variance to 1 (under its premise, iid q, k of
unit variance: the model at initialization) and it is the optimal choice (no other multiplier of it trains better)."""


def measure_sqrt_optimal(ctx: Context) -> Measurement:
  """Note 2 §2.2's two parts: the variance of the 1/√d_k logits at initialization (|log2 Var|) and the loss-optimal
  logit multiplier c·(1/√d_k) over c in octaves at 1/√d_k's best learning rate (|log2 c|, the grid widened past an
  edge its optimum sits at); their score per seed gives the standard error. Beside: the variance after training at
  that rate, with its range over the rates within the seeds' noise of the best (1/√d_k's grid refined around its
  best rate in a mode with ``refine_best_lr``)."""
  s = sizes(ctx)
  depth = s["depth_small"]
  steps = s["steps"][depth]
  last = max(1, steps // 10)
  base = ctx.planner.train(sqrt_optimal_grids(ctx)["sqrt"])
  found_lr = at_best_lr(ctx, base, last, refine=True)
  sqrt, best, best_at_edge = found_lr["run"], found_lr["best"], bool(found_lr["best_at_grid_edge"])
  log2_lr = sqrt.log2_lrs[0 if best is None else best]
  n_seeds = len(sqrt.seeds)
  tokens = dataset_of(ctx).eval_batch(0, int(ctx.seed))["inputs"]
  fn = logit_variance_fn(sqrt.model_config)
  member_var = lambda params: np.mean(np.asarray(jax.device_get(fn(params, tokens)), np.float64), axis=(1, 2))
  # At initialization the parameters depend on the seed only: the first rate's members.
  var_init = base.by_lr(member_var(base.initial_params()))[0]  # [S]
  var_final_by_lr = sqrt.by_lr(member_var(sqrt.final_params))  # [L, S]
  var_final = values_at_best(sqrt, best, var_final_by_lr.reshape(-1))
  with np.errstate(invalid="ignore", divide="ignore"):
    log2_init, log2_final = np.log2(var_init), np.log2(var_final)
    stat_init = abs(float(np.log2(np.mean(var_init))))
    stat_final = abs(float(np.log2(np.mean(var_final))))
    final_near = [abs(float(np.log2(np.mean(var_final_by_lr[i])))) for i in found_lr["near_best"]]
  # The loss-optimal multiplier of 1/√d_k at that rate.
  log2_c = tuple(float(x) for x in s["attn_log2_mults"])
  run = trained(ctx, sqrt_optimal_grids(ctx, log2_lr))["multipliers"]
  found = locate_optimum([(log2_c, run)], last=last, x="log2_mult", octaves=s["edge_octaves"],
                         widen=lambda values: ctx.planner.train(multiplier_spec(
                             ctx, log2_lr, values, f"depth-{depth} logit multipliers, widened"), like=run.spec))
  opt = found["optimum"]
  opt_seeds = np.asarray(found["optimum_seeds"], np.float64)
  # The parts: on the seed means (the verdict), and per seed (its standard error).
  names = [p.name for p in SQRT_OPTIMAL_PARTS]
  score, part_verdicts = score_parts(SQRT_OPTIMAL_PARTS, {
      names[0]: stat_init, names[1]: math.nan if opt is None else abs(opt)})
  per_seed = [score_parts(SQRT_OPTIMAL_PARTS, {names[0]: abs(float(log2_init[j])),
                                                names[1]: abs(float(opt_seeds[j]))})[0] for j in range(n_seeds)]
  numbers = {**about(ctx), "depth": depth, "steps": steps, "learning_rate": lr_label(log2_lr),
             "best_lr_at_edge": best_at_edge, "widened_lrs_by": found_lr["widened_by"],
             "refined_lrs_by": found_lr["refined_by"], "near_best_learning_rates": found_lr["near_best_learning_rates"],
             "final_loss_by_lr": found_lr["final_loss_by_lr"],
             "parts_holding": stats.round_finite(score), **spread("parts_holding", per_seed),
             "part_verdicts": part_verdicts,
             "optimum_at_edge": bool(found["at_edge"] or best_at_edge),
             "logit_variance": "variance of the visible attention logits (after RoPE and 1/√d_k) of a held-out batch, "
                               "per layer and head, averaged",
             "logit_variance_init": stats.finite_mean_std(var_init),
             "logit_variance_final": stats.finite_mean_std(var_final),
             "abs_log2_logit_variance_init": stats.round_finite(stat_init),
             **spread("abs_log2_logit_variance_init", np.abs(log2_init)),
             "abs_log2_logit_variance_final": stats.round_finite(stat_final),
             **spread("abs_log2_logit_variance_final", np.abs(log2_final)),
             "abs_log2_logit_variance_final_near_best": value_range(final_near),
             "log2_multipliers": list(log2_c), "widened_by": found["widened_by"],
             "optimal_log2_multiplier": stats.round_finite(opt),
             "abs_optimal_log2_multiplier": stats.round_finite(abs(opt)) if opt is not None else None,
             **spread("abs_optimal_log2_multiplier", np.abs(opt_seeds)),
             "multiplier_optimum_at_edge": found["at_edge"],
             "final_loss_by_log2_multiplier": found["final_loss_by_value"]}
  init, final = numbers["logit_variance_init"], numbers["logit_variance_final"]
  widened = (f" (widened to 2^{', 2^'.join(f'{v:g}' for v in found['widened_by'])} past the edge its optimum sat at)"
             if found["widened_by"] else "")
  refined = (f"; its grid refined around the best rate at {', '.join(found_lr['refined_by'])}"
             if found_lr["refined_by"] else "")
  return Measurement(numbers, (
      f"Depth {depth}, {steps} steps on the {data_name(ctx)}, 1/√d_k's best learning rate {lr_label(log2_lr)}"
      f"{refined}. Variance 1 (the premise's setting, initialization): the variance of the 1/√d_k logits of a "
      f"held-out batch is {pm(init['mean'], init['std'])} (mean ± std over seeds; |log2 Var| = {fmt(stat_init)}). "
      f"The optimal scale: over logit multipliers 2^{log2_c[0]:g} .. 2^{log2_c[-1]:g} × 1/√d_k{widened} at that "
      f"rate the final loss is lowest at 2^{fmt(opt, '.2f')} × 1/√d_k (final losses "
      + ", ".join(f"{fmt(v)} at 2^{c}" for c, v in found["final_loss_by_value"].items()) + "). Parts: "
      f"{parts_text(part_verdicts)}; per seed the parts score {', '.join(fmt(v, '.1f') for v in per_seed)}. After "
      f"training at that rate the variance is {pm(final['mean'], final['std'])} (|log2 Var| = {fmt(stat_final)}); "
      f"at the rates whose final loss is within 2 standard errors (over seeds) of the best "
      f"({', '.join(found_lr['near_best_learning_rates']) or 'none'}) |log2 Var| after training ranges from "
      f"{fmt_range(numbers['abs_log2_logit_variance_final_near_best'])}; the multipliers were trained at the best "
      f"rate only."))


# ----------------------------------------------------------------------------
# Note 2 §2.4, follow-up 2: LayerNorm and RMSNorm do not replace the scale.


def norm_grids(ctx: Context) -> dict[tuple[str, str], GridSpec]:
  """{(norm, rule): spec}: unscaled and 1/√d_k at the small depth with LayerNorm and with RMSNorm blocks."""
  depth = sizes(ctx)["depth_small"]
  return {(norm, rule): grid_spec(ctx, rule=rule, depth=depth, norm=norm) for norm in NORM_NAMES
          for rule in ("none", "sqrt")}


def norm_plan(ctx: Context) -> dict[Any, GridSpec]:
  """The grids train_norms_dont_replace_scaling declares: ``norm_grids`` with their refinements."""
  return with_refinements(ctx, norm_grids(ctx))


def measure_norms_dont_replace_scaling(ctx: Context) -> Measurement:
  """The relative final-loss gap of unscaled over 1/√d_k with LayerNorm blocks and with RMSNorm blocks (the smaller)."""
  depth = sizes(ctx)["depth_small"]
  runs = trained(ctx, norm_grids(ctx))
  per = {norm: compare_at_best_lr(ctx, {rule: runs[(norm, rule)] for rule in ("none", "sqrt")}, "none", "sqrt", depth,
                                  refine=True)
         for norm in NORM_NAMES}
  gaps = [c["relative_final_gap"] for c in per.values()]
  stat = min(g for g in gaps if g is not None) if any(g is not None for g in gaps) else None
  n = len(seeds_of(ctx))
  per_seed = np.min([seed_values(c["relative_final_gap_seeds"], n) for c in per.values()], axis=0)
  numbers = {**about(ctx), "depth": depth, "min_relative_final_gap": stat, **spread("min_relative_final_gap", per_seed),
             "best_lr_at_edge": any(c["best_lr_at_edge"] for c in per.values()),
             "by_norm": {n: {k: c[k] for k in ("relative_final_gap", "relative_final_gap_per_seed", "none", "sqrt",
                                               "relative_final_gap_near_best") if k in c}
                         for n, c in per.items()}}
  choice = ""
  if all("relative_final_gap_near_best" in c for c in per.values()):
    # The smaller gap over the norms, for the rates of each within the seeds' noise of its best.
    ranges = [c["relative_final_gap_near_best"] for c in per.values()]
    lo, hi = ([r[k] for r in ranges] for k in ("min", "max"))
    near = ({"min": None, "max": None} if None in lo or None in hi else
            {"min": stats.round_finite(min(lo)), "max": stats.round_finite(min(hi))})
    numbers["min_relative_final_gap_near_best"] = near
    choice = "".join(choice_words(c, {"none": f"unscaled {NORM_NAMES[k]}", "sqrt": f"1/√d_k {NORM_NAMES[k]}"},
                                  f"the {NORM_NAMES[k]} gap") for k, c in per.items())
    choice += f" The smaller gap over the two norms so ranges from {fmt_range(near)}."
  return Measurement(numbers, (
      f"Depth {depth} on the {data_name(ctx)}, each at its best learning rate: removing 1/√d_k raises the final loss "
      "by " + " and ".join(f"{fmt(c['relative_final_gap'])} (relative) with {NORM_NAMES[n]}" for n, c in per.items())
      + " blocks" + "".join(edge_words(c, {"none": f"unscaled {NORM_NAMES[n]}", "sqrt": f"1/√d_k {NORM_NAMES[n]}"})
                            for n, c in per.items()) + "." + choice))


# ----------------------------------------------------------------------------
# The claims.


SCALE_RULE_CLAIMS: tuple[Claim, ...] = (
    Claim(
        "train_post_softmax_worse", "note 1 §4 ⑤, §5",
        "The division belongs inside the logits: applied after the softmax it is a mistake (in training; its logits "
        "are unscaled, so this mostly measures 'no scaling': the gap to the unscaled model is reported beside).",
        relative_gap_criterion("with softmax(q·k)·v/√d_k", "with softmax(q·k/√d_k)·v", "the latter", 2),
        measure_post_softmax_training, training=True, grids=post_softmax_plan),
    Claim(
        "train_linear_less_expressive", "note 2 §2.2",
        "Dividing by d_k makes attention nearly uniform, so the model loses focus: expressiveness drops severely.",
        relative_gap_criterion("1/d_k", "1/√d_k", "final loss 1/√d_k", 2, holds=0.05, fails=0.01,
                                reason="'severely' = at least 5% higher final loss; within 1% is no loss"),
        measure_linear_expressiveness, training=True, grids=linear_plan),
    Claim(
        "train_sqrt_optimal", "note 2 §2.2",
        "Dividing by √d_k is the optimal solution for variance normalization: it keeps the logits' variance at 1, "
        "neither saturated nor uniform (under the premise of iid q, k of unit variance).",
        dataclasses.replace(parts_criterion(
            "parts_holding", "parts of the claim that hold (depth 2; the multipliers at 1/√d_k's best learning rate; "
            "each part decided on the mean over seeds)", SQRT_OPTIMAL_PARTS,
            reason="the sentence says two things: the variance is 1 where its premise holds (the model at "
                   "initialization; '~1' = within a factor 2, a factor 8, as far as the multiplier the second part "
                   "calls a different optimum, is not normalized), and √d_k is the optimal scale (the best multiplier "
                   "within √2 of 1/√d_k; 2^1.5 away is a different optimum)"),
            noise=True, edge="optimum_at_edge"),
        measure_sqrt_optimal, training=True, grids=sqrt_optimal_plan,
        beside=(Reading("the variance after training (not the premise's setting: training correlates q and k)",
                        Criterion("abs_log2_logit_variance_final", "|log2 Var| of the attention logits with 1/√d_k "
                                  "after training (visible logits of a held-out batch after RoPE and the scale, per "
                                  "layer and head, averaged; depth 2, at 1/√d_k's best learning rate, mean over "
                                  "seeds)", holds=("<=", 1.0), fails=(">=", 3.0), noise=True, edge="best_lr_at_edge",
                                  reason="the same thresholds as at initialization: within a factor 2 of 1 is "
                                         "normalized, a factor 8 is not")),)),
    Claim(
        "train_norms_dont_replace_scaling", "note 2 §2.4, follow-up 2",
        "LayerNorm and RMSNorm do not replace the attention scaling.",
        Criterion("min_relative_final_gap", "the smaller over LayerNorm and RMSNorm blocks of (final loss unscaled − "
                  "final loss 1/√d_k) / final loss 1/√d_k at depth 2, each at its best learning rate",
                  holds=(">=", 0.02), fails=("<=", 0.0), noise=True, edge="best_lr_at_edge",
                  reason="with either norm, removing the scale must still cost at least 2% loss; no cost = replaced"),
        measure_norms_dont_replace_scaling, training=True, grids=norm_plan),
)
"""The claims of this module, in the order of their table (``scaling.studies.claims.training.families``)."""
