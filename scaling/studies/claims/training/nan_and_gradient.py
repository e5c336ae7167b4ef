"""Training claims about the first steps and the gradients without the scale, at every depth: a NaN loss within 100
steps (in float32 at every depth, and in bfloat16 and float16 compute at depth 6), attention gradient norms decaying
below 1e-6 (note 2 §4, follow-up 1), and gradients stable with the scale and more stable than without it (note 1 §2).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import jax
import numpy as np
import optax

from scaling.base import compilation
from scaling.training.loop import losses as losses_lib
from scaling.training.model import transformer as model_lib
from scaling.training.model.config import ModelConfig
from scaling.training.loop import programs as programs_lib
from scaling.training.optimizer import OptimizerConfig
from scaling.studies import stats
from scaling.studies.grid.run import GridRun
from scaling.studies.grid.run import GridSpec
from scaling.studies.claims.training.best_learning_rate import best_rate
from scaling.studies.claims.training.best_learning_rate import values_at_best
from scaling.studies.claims.training.best_learning_rate import widened_at_best
from scaling.studies.claims.context import Context
from scaling.studies.claims.training.loss_curves import nonfinite_within
from scaling.studies.claims.training.loss_curves import smallest_finite
from scaling.studies.claims.training.grids import grid_spec
from scaling.studies.claims.training.grids import trained
from scaling.studies.claims.training.numbers import about
from scaling.studies.claims.training.numbers import fmt
from scaling.studies.claims.training.numbers import lr_label
from scaling.studies.claims.training.numbers import pm
from scaling.studies.claims.training.numbers import spread
from scaling.studies.claims.training.sizes import data_name
from scaling.studies.claims.training.sizes import dataset_of
from scaling.studies.claims.training.sizes import depths_of
from scaling.studies.claims.training.sizes import seeds_of
from scaling.studies.claims.training.sizes import sizes
from scaling.studies.claims.parts import Part
from scaling.studies.claims.parts import parts_criterion
from scaling.studies.claims.parts import parts_text
from scaling.studies.claims.parts import score_parts
from scaling.studies.claims.verdicts import Claim
from scaling.studies.claims.verdicts import Criterion
from scaling.studies.claims.verdicts import Measurement
from scaling.studies.claims.verdicts import Reading


# ----------------------------------------------------------------------------
# Note 2 §4, follow-up 1: without scaling, NaN within 100 steps.


LOW_PRECISION = ("bfloat16", "float16")
"""The low-precision compute dtypes of the NaN claim (``ModelConfig.dtype``): the projections, MLP and residual stream
compute in them, the parameters stay float32, and the attention logits and softmax stay float32 and max-subtracted
(the model's attention offers no lower-precision softmax)."""

PRECISIONS = ("float32",) + LOW_PRECISION


def nan_grids(ctx: Context) -> dict[tuple[int, str, str], GridSpec]:
  """{(depth, dtype, rule): spec}: unscaled and 1/√d_k at every depth in each of the mode's ``dtypes`` (the whole
  run), and at the converging depth (6) in each of its ``nan_low_dtypes`` not among them, for the first
  ``nan_window`` steps only (all the claim reads)."""
  s = sizes(ctx)
  out = {(depth, dtype, rule): grid_spec(ctx, rule=rule, depth=depth, dtype=dtype)
         for depth in depths_of(ctx) for dtype in s["dtypes"] for rule in ("none", "sqrt")}
  depth = s["depth_converge"]
  steps = min(s["nan_window"], s["steps"][depth])
  for dtype in (d for d in s["nan_low_dtypes"] if d not in s["dtypes"]):
    for rule in ("none", "sqrt"):
      out[(depth, dtype, rule)] = grid_spec(ctx, rule=rule, depth=depth, dtype=dtype, steps=steps,
                                            label=f"depth-{depth} {dtype} grids, first {steps} steps")
  return out


def _nan_statistic(numbers: dict[str, Any], name: str, hits: int, counted: int, seed_hits: np.ndarray,
                   seed_counted: np.ndarray) -> None:
  """Puts the pooled fraction ``name`` (None when nothing was counted), its spread over seeds and its run count into
  ``numbers``."""
  with np.errstate(invalid="ignore", divide="ignore"):
    per_seed = seed_hits / np.where(seed_counted > 0, seed_counted, np.nan)
  numbers[name] = stats.round_finite(hits / counted) if counted else None
  numbers.update(spread(name, per_seed if counted else []))
  numbers[f"{name}_runs"] = counted


def measure_nan_within_100(ctx: Context) -> Measurement:
  """The fraction of unscaled runs whose loss is non-finite within the first 100 steps (at learning rates where the
  1/√d_k runs of the same depth and dtype stay finite there): in low precision (bfloat16 and float16 pooled, the
  verdict) and in each precision alone."""
  s = sizes(ctx)
  seeds = seeds_of(ctx)
  runs = trained(ctx, nan_grids(ctx))
  per_depth: dict[str, Any] = {}
  tally = {d: [0, 0, np.zeros(len(seeds)), np.zeros(len(seeds))] for d in PRECISIONS}  # hits, counted, per seed
  for depth, dtype in dict.fromkeys((d, t) for d, t, _ in runs):
    window = min(s["nan_window"], s["steps"][depth])
    none, sqrt = (runs[(depth, dtype, r)] for r in ("none", "sqrt"))
    bad_none = none.by_lr(nonfinite_within(none.records["loss"], window))  # [L, S]
    bad_sqrt = sqrt.by_lr(nonfinite_within(sqrt.records["loss"], window))
    fair = ~bad_sqrt.any(axis=1)  # learning rates where scaled training stays finite
    t = tally.setdefault(dtype, [0, 0, np.zeros(len(seeds)), np.zeros(len(seeds))])
    t[0] += int(bad_none[fair].sum())
    t[1] += int(fair.sum()) * len(seeds)
    t[2] += bad_none[fair].sum(axis=0)
    t[3] += fair.sum()
    per_depth[f"{depth} {dtype}"] = {
        "steps_checked": window, "steps_trained": none.records["loss"].shape[0],
        "nonfinite_fraction_none": stats.round_finite(float(bad_none.mean())),
        "nonfinite_fraction_sqrt": stats.round_finite(float(bad_sqrt.mean())),
        "nonfinite_none_by_lr": {lr_label(x): int(bad_none[i].sum()) for i, x in enumerate(none.log2_lrs)},
        "nonfinite_sqrt_by_lr": {lr_label(x): int(bad_sqrt[i].sum()) for i, x in enumerate(sqrt.log2_lrs)},
    }
  low = [tally[d] for d in tally if d != "float32"]
  numbers: dict[str, Any] = {
      **about(ctx), "learning_rates": [lr_label(x) for x in s["log2_lrs"]],
      "grids": sorted(per_depth), "nan_window": s["nan_window"],
      "attention_logits": "float32 and max-subtracted in every dtype (ModelConfig.dtype sets the projections', MLP's "
                          "and residual stream's precision; parameters stay float32)"}
  _nan_statistic(numbers, "nan_fraction_low_precision", sum(t[0] for t in low), sum(t[1] for t in low),
                 sum((t[2] for t in low), np.zeros(len(seeds))), sum((t[3] for t in low), np.zeros(len(seeds))))
  for dtype, t in tally.items():
    _nan_statistic(numbers, f"nan_fraction_{dtype}", *t)
  numbers["per_depth"] = per_depth
  depths = {dtype: [k.split()[0] for k in per_depth if k.split()[1] == dtype] for dtype in tally}
  each = "; ".join(f"{dtype}, depth {', '.join(depths[dtype])}: {tally[dtype][0]} of {tally[dtype][1]}"
                   for dtype in tally if depths[dtype])
  finding = (f"On the {data_name(ctx)}, unscaled runs with a non-finite loss within the first "
             f"{s['nan_window']} steps (or all the steps run, if fewer), at learning rates where the 1/√d_k runs of "
             f"the same depth and dtype stay finite: {each}; in low precision (bfloat16 and float16 pooled) a "
             f"fraction {fmt(numbers['nan_fraction_low_precision'])}, in float32 "
             f"{fmt(numbers['nan_fraction_float32'])}. The attention logits and softmax run in float32, "
             f"max-subtracted, in every dtype (the model offers no lower-precision softmax).")
  return Measurement(numbers, finding)


# ----------------------------------------------------------------------------
# The attention path's gradient (W_q, W_k) of a trained grid, at its initial and final parameters.


def attention_grad_norm_fn(model_config: ModelConfig, opt_config: OptimizerConfig):
  """A (stacked params [M, ...] with one ``block_{i}`` per block, batch) -> [M]: the global norm of dL/dW_q and
  dL/dW_k over all blocks. Models whose rule is only a logit factor share one compiled function, their α passed as a
  value, as in their training program (``scaling.training.loop.programs.as_program``)."""
  program = programs_lib.as_program(model_config, opt_config)
  fn = _attention_grad_norm(program.model_config)
  alpha = None if program.logit_alpha is None else np.float32(program.logit_alpha)
  return lambda params, batch: fn(params, batch, alpha)


@functools.lru_cache(maxsize=16)
def _attention_grad_norm(model_config: ModelConfig):
  """``attention_grad_norm_fn``'s jitted function of (params, batch, alpha) (alpha: None, or α of every layer's
  logit scale α/d_head)."""

  def one(params, batch, alpha):
    model = model_lib.Transformer(model_config, attn_mult=alpha)
    grads = jax.grad(lambda p: losses_lib.loss_fn(p, batch, model=model)[0])(params)
    return optax.tree.norm([grads[f"block_{i}"]["attn"][n] for i in range(model_config.depth)
                            for n in ("query", "key")])

  return compilation.jit(jax.vmap(one, in_axes=(0, None, None)))


def attention_grad_norms(ctx: Context, run: GridRun) -> dict[str, np.ndarray]:
  """{"init", "final"}: per member [M], the attention-path gradient norm on the first held-out batch."""
  batch = dataset_of(ctx).eval_batch(0, int(ctx.seed))
  fn = attention_grad_norm_fn(run.model_config, run.opt_config)
  return {"init": np.asarray(jax.device_get(fn(run.initial_params(), batch)), np.float64),
          "final": np.asarray(jax.device_get(fn(run.final_params, batch)), np.float64)}


# ----------------------------------------------------------------------------
# Note 2 §4, follow-up 1: without scaling, gradient norms decay below 1e-6; note 1 §2: with it they are
# stable.


def depth_grids(ctx: Context) -> dict[tuple[str, int], GridSpec]:
  """{(rule, depth): spec}: unscaled and 1/√d_k at every depth (float32)."""
  return {(rule, depth): grid_spec(ctx, rule=rule, depth=depth) for rule in ("none", "sqrt")
          for depth in depths_of(ctx)}


def measure_grad_norm_decay(ctx: Context) -> Measurement:
  """The smallest attention-path gradient norm (dL/dW_q, dL/dW_k) of any unscaled run at its initial or final
  parameters (log10), with the 1/√d_k value and the global and per-block norms of every step beside it."""
  seeds = seeds_of(ctx)
  runs = trained(ctx, depth_grids(ctx))
  out: dict[str, Any] = {}
  log10_seeds: dict[str, np.ndarray] = {}
  for rule in ("none", "sqrt"):
    attn_min, global_min, layer_min, per_seed = [], [], [], np.full(len(seeds), np.inf)
    by_depth = {}
    for depth in depths_of(ctx):
      run = runs[(rule, depth)]
      attn = attention_grad_norms(ctx, run)
      both = np.minimum(attn["init"], attn["final"])  # [L·S]
      attn_min.append(smallest_finite(both))
      by_depth[str(depth)] = {k: stats.round_finite(smallest_finite(v)) for k, v in attn.items()}
      global_min.append(smallest_finite(run.records["grad_norm"]))
      layer_min.append(smallest_finite(run.records["layer_grad_norm"]))
      per_seed = np.minimum(per_seed, [smallest_finite(run.by_lr(both)[:, j]) for j in range(len(seeds))])
    smallest = smallest_finite(attn_min)
    log10_seeds[rule] = np.log10(np.where(per_seed > 0, per_seed, np.nan))
    out[rule] = {
        "min_attention_grad_norm": stats.round_finite(smallest),
        "log10_min_attention_grad_norm": stats.round_finite(math.log10(smallest)) if smallest > 0 else None,
        "log10_min_attention_grad_norm_per_seed": stats.finite_mean_std(log10_seeds[rule]),
        "min_attention_grad_norm_by_depth": by_depth,
        "min_global_grad_norm_any_step": stats.round_finite(smallest_finite(global_min)),
        "min_block_grad_norm_any_step": stats.round_finite(smallest_finite(layer_min)),
    }
  numbers = {**about(ctx), "depths": list(depths_of(ctx)),
             "attention_path": "global norm of dL/dW_q and dL/dW_k over all blocks, on a held-out batch, at the "
                               "initial and the final parameters of every (learning rate, seed)",
             "log10_min_attention_grad_norm_none": out["none"]["log10_min_attention_grad_norm"],
             **spread("log10_min_attention_grad_norm_none", log10_seeds["none"]),
             "none": out["none"], "sqrt": out["sqrt"]}
  none, sqrt = out["none"], out["sqrt"]
  finding = (f"On the {data_name(ctx)}, the smallest attention-path gradient norm (dL/dW_q, dL/dW_k; initial or "
             f"final parameters) of any unscaled run was {fmt(none['min_attention_grad_norm'])}, with 1/√d_k "
             f"{fmt(sqrt['min_attention_grad_norm'])}; the smallest global norm at any step was "
             f"{fmt(none['min_global_grad_norm_any_step'])} unscaled and "
             f"{fmt(sqrt['min_global_grad_norm_any_step'])} "
             f"with 1/√d_k.")
  return Measurement(numbers, finding)


STABLE_PARTS = (
    Part("stable", Criterion(
        "max_decades", "largest over depths of log10(max / min over steps) of the global gradient norm with 1/√d_k at "
        "its best learning rate", holds=("<=", 1.0), fails=(">=", 2.0))),
    Part("more stable than unscaled", Criterion(
        "decades_gap", "that largest span without the scale minus with it (at each grid's best rate), paired by seed",
        holds=(">=", 0.5), fails=("<=", 0.0))),
)
"""The parts of "with the scale the gradients are stable": stable with it, and more stable than without it."""


def measure_scaled_grads_stable(ctx: Context) -> Measurement:
  """Whether the gradients are stable with 1/√d_k and more stable than without it: decades spanned by the global
  gradient norm over training with 1/√d_k at its best learning rate (its grid widened past an edge that rate sits
  at), per depth (the largest over depths), and without the scale (at the best rate of its grid); each seed scores
  the parts (``STABLE_PARTS``) that hold, and the claim's statistic is the mean score."""
  runs = trained(ctx, depth_grids(ctx))
  spans: dict[str, dict[int, np.ndarray]] = {}
  edges = []
  for rule in ("sqrt", "none"):
    spans[rule] = {}
    for depth in depths_of(ctx):
      run = runs[(rule, depth)]
      if rule == "sqrt":  # the verdict reads 1/√d_k's spans (its grid widened); the unscaled ones are beside them
        run, best, at_edge = widened_at_best(ctx, run)
        edges += [f"depth {depth}"] if at_edge else []
      else:
        best = best_rate(run)
      g = run.records["grad_norm"]
      with np.errstate(invalid="ignore", divide="ignore"):
        decades = np.log10(np.nanmax(g, axis=0) / np.nanmin(g, axis=0))
      spans[rule][depth] = values_at_best(run, best, decades)  # [S]
  per_seed = {rule: np.max(np.stack(list(by_depth.values())), axis=0) for rule, by_depth in spans.items()}  # [S]
  largest = {rule: max(float(np.mean(v)) for v in by_depth.values()) for rule, by_depth in spans.items()}
  with np.errstate(invalid="ignore"):
    difference = per_seed["none"] - per_seed["sqrt"]  # paired by initialization seed
  scores = [score_parts(STABLE_PARTS, {"stable": per_seed["sqrt"][j], "more stable than unscaled": difference[j]})
            for j in range(len(difference))]
  score = float(np.mean([sc for sc, _ in scores])) if scores else float("nan")
  part_values = {"stable": stats.round_finite(largest["sqrt"]),
                 "more stable than unscaled": stats.round_finite(float(np.mean(difference)))}
  part_verdicts = {p.name: p.criterion.verdict(part_values[p.name]) for p in STABLE_PARTS}
  numbers = {**about(ctx), "parts_holding": stats.round_finite(score),
             **spread("parts_holding", [sc for sc, _ in scores]),
             "part_verdicts": part_verdicts, "part_verdicts_per_seed": [v for _, v in scores],
             "max_decades": stats.round_finite(largest["sqrt"]),
             **spread("max_decades", per_seed["sqrt"]), "best_lr_at_edge": bool(edges),
             "decades_by_depth": {str(d): stats.finite_mean_std(v) for d, v in spans["sqrt"].items()},
             "unscaled": {"max_decades": stats.round_finite(largest["none"]), **spread("max_decades", per_seed["none"]),
                          "decades_by_depth": {str(d): stats.finite_mean_std(v) for d, v in spans["none"].items()}},
             "max_decades_unscaled_minus_scaled": stats.finite_mean_std(difference),
             "decades_gap": stats.round_finite(float(np.mean(difference))), **spread("decades_gap", difference),
             "max_decades_unscaled_minus_scaled_se": stats.round_finite(stats.standard_error(difference))}
  words = lambda rule: ", ".join(fmt(float(np.mean(v)), ".2f") for v in spans[rule].values())
  depths = ", ".join(map(str, spans["sqrt"]))
  diff = numbers["max_decades_unscaled_minus_scaled"]["mean"]
  return Measurement(numbers, (
      f"On the {data_name(ctx)}, each at its best learning rate, the global gradient norm spans {words('sqrt')} "
      f"decades at depths {depths} with 1/√d_k over training (max / min over steps, mean over seeds); the same "
      f"measurement without the scale spans {words('none')} decades (the largest over depths, unscaled minus scaled: "
      f"{pm(diff, numbers['max_decades_unscaled_minus_scaled_se'], '.2f')} per seed)"
      + (f"; 1/√d_k's best learning rate stays at the edge of its widened grid at {', '.join(edges)}" if edges else "")
      + f". Parts (at the seed means): {parts_text(part_verdicts)}; parts holding per seed "
      f"{', '.join(fmt(sc, '.1f') for sc, _ in scores)}."))


# ----------------------------------------------------------------------------
# The claims.


NAN_AND_GRADIENT_CLAIMS: tuple[Claim, ...] = (
    Claim(
        "train_nan_within_100_steps", "note 2 §4, follow-up 1",
        "Without scaling, training on tiny Shakespeare gives a NaN loss within 100 steps (with scaling the loss "
        "falls normally).",
        Criterion("nan_fraction_low_precision", "fraction of unscaled (learning rate, seed) runs in low precision "
                  "(bfloat16 and float16 compute, pooled; attention logits and softmax in float32) whose loss is "
                  "non-finite within the first 100 steps, at learning rates where every 1/√d_k run of the same depth "
                  "and dtype stays finite", holds=(">=", 0.5), fails=("<=", 0.1), noise=True,
                  reason="the note states it as what happens: in most runs to hold, in at most 1 in 10 it does not; "
                         "the NaN it reports is a low-precision failure (note 2 §3: in FP16/BF16 training overflow "
                         "makes the softmax NaN), so low precision decides and float32 is shown beside"),
        measure_nan_within_100, training=True, grids=nan_grids,
        beside=tuple(Reading(f"in {dtype} alone", Criterion(
            f"nan_fraction_{dtype}", f"the same fraction in {dtype} compute", holds=(">=", 0.5), fails=("<=", 0.1),
            noise=True, reason="as the verdict's, in one precision")) for dtype in PRECISIONS)),
    Claim(
        "train_grad_norm_below_1e-6", "note 2 §4, follow-up 1",
        "Without scaling, softmax saturates and the attention gradient norms decay below 1e-6.",
        Criterion("log10_min_attention_grad_norm_none", "log10 of the smallest attention-path gradient norm "
                  "(dL/dW_q, dL/dW_k) of any unscaled run, at its initial or final parameters, any learning rate, "
                  "seed and depth", holds=("<", -6.0), fails=(">", -4.0), noise=True,
                  reason="the note names 1e-6; two decades above it (1e-4) is not 'below 1e-6' by any rounding"),
        measure_grad_norm_decay, training=True, grids=depth_grids),
    Claim(
        "train_scaled_grads_stable", "note 1 §2",
        "Scaling by 1/√d_k (keeping the logits' variance near 1) makes the gradients stable.",
        dataclasses.replace(
            parts_criterion("parts_holding", "parts of the claim that hold per seed, mean over seeds", STABLE_PARTS,
                            reason="the note credits the scale with stable gradients, a cause: the scaled arm must "
                                   "be stable (within one decade over training; two decades is not) and more stable "
                                   "than the unscaled arm by at least half a decade (a factor √10; none is no "
                                   "effect of the scale)"),
            noise=True, edge="best_lr_at_edge"),
        measure_scaled_grads_stable, training=True, grids=depth_grids,
        beside=(Reading("the scaled arm alone is stable", dataclasses.replace(
            STABLE_PARTS[0].criterion, description=STABLE_PARTS[0].criterion.description + " (mean over seeds)",
            noise=True, edge="best_lr_at_edge", reason="'stable' = within one decade over training; two is not")),
                Reading("the scale makes them more stable", dataclasses.replace(
                    STABLE_PARTS[1].criterion, noise=True, edge="best_lr_at_edge",
                    reason="the scale's effect: at least half a decade less span; none is no effect")))),
)
"""The claims of this module, in the order of their table (``scaling.studies.claims.training.families``)."""
