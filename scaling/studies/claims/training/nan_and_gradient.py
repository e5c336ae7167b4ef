"""Training claims about the first steps and the gradients without the scale, at every depth: a NaN loss within 100
steps, attention gradient norms decaying below 1e-6 (note 2 §4, follow-up 1), and stable gradients with it (note 1 §2).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import numpy as np
import optax

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
from scaling.studies.claims.verdicts import Claim
from scaling.studies.claims.verdicts import Criterion
from scaling.studies.claims.verdicts import Measurement


# ----------------------------------------------------------------------------
# Note 2 §4, follow-up 1: without scaling, NaN within 100 steps.


def nan_grids(ctx: Context) -> dict[tuple[int, str, str], GridSpec]:
  """{(depth, dtype, rule): spec}: unscaled and 1/√d_k at every depth and dtype."""
  s = sizes(ctx)
  return {(depth, dtype, rule): grid_spec(ctx, rule=rule, depth=depth, dtype=dtype)
          for depth in depths_of(ctx) for dtype in s["dtypes"] for rule in ("none", "sqrt")}


def measure_nan_within_100(ctx: Context) -> Measurement:
  """The fraction of unscaled runs whose loss is non-finite within the first 100 steps (at learning rates where the
  1/√d_k runs of the same depth stay finite there), pooled over depths."""
  s = sizes(ctx)
  seeds = seeds_of(ctx)
  runs = trained(ctx, nan_grids(ctx))
  per_depth, hits, counted = {}, [], []
  per_seed_hits = np.zeros(len(seeds))
  per_seed_counted = np.zeros(len(seeds))
  for depth, dtype in ((d, t) for d in depths_of(ctx) for t in s["dtypes"]):
    window = min(s["nan_window"], s["steps"][depth])
    none, sqrt = (runs[(depth, dtype, r)] for r in ("none", "sqrt"))
    bad_none = none.by_lr(nonfinite_within(none.records["loss"], window))  # [L, S]
    bad_sqrt = sqrt.by_lr(nonfinite_within(sqrt.records["loss"], window))
    fair = ~bad_sqrt.any(axis=1)  # learning rates where scaled training stays finite
    hits.append(int(bad_none[fair].sum()))
    counted.append(int(fair.sum()) * len(seeds))
    per_seed_hits += bad_none[fair].sum(axis=0)
    per_seed_counted += fair.sum()
    per_depth[f"{depth} {dtype}"] = {
        "steps_checked": window,
        "nonfinite_fraction_none": stats.round_finite(float(bad_none.mean())),
        "nonfinite_fraction_sqrt": stats.round_finite(float(bad_sqrt.mean())),
        "nonfinite_none_by_lr": {lr_label(x): int(bad_none[i].sum()) for i, x in enumerate(none.log2_lrs)},
        "nonfinite_sqrt_by_lr": {lr_label(x): int(bad_sqrt[i].sum()) for i, x in enumerate(sqrt.log2_lrs)},
    }
  total = sum(counted)
  fraction = sum(hits) / total if total else float("nan")
  with np.errstate(invalid="ignore", divide="ignore"):
    per_seed = per_seed_hits / per_seed_counted
  windows = {d: min(s["nan_window"], s["steps"][d]) for d in depths_of(ctx)}
  numbers = {
      **about(ctx),
      "learning_rates": [lr_label(x) for x in s["log2_lrs"]], "depths": list(depths_of(ctx)), "dtypes": s["dtypes"],
      "steps_checked_by_depth": {str(d): w for d, w in windows.items()},
      "nan_fraction_none": stats.round_finite(fraction) if total else None,
      "nan_fraction_none_per_seed": stats.finite_mean_std(per_seed),
      **spread("nan_fraction_none", per_seed),
      "runs_counted": total,
      "per_depth": per_depth,
  }
  steps_words = (f"the first {windows[depths_of(ctx)[0]]} steps" if len(set(windows.values())) == 1 else
                 "the first " + ", ".join(f"{w} steps at depth {d}" for d, w in windows.items()))
  short = [d for d, w in windows.items() if w < s["nan_window"]]
  finding = (f"On the {data_name(ctx)}, {sum(hits)} of {total} unscaled runs (depths "
             f"{', '.join(map(str, depths_of(ctx)))}; {' and '.join(s['dtypes'])}; learning rates where the 1/√d_k "
             f"runs stay finite) had a non-finite loss within {steps_words} "
             f"(fraction {fmt(numbers['nan_fraction_none'])})"
             + (f"; depth {', '.join(map(str, short))} ran fewer than {s['nan_window']} steps, so only the steps run "
                "are judged" if short else "") + ".")
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

  return jax.jit(jax.vmap(one, in_axes=(0, None, None)))


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


def measure_scaled_grads_stable(ctx: Context) -> Measurement:
  """Decades spanned by the global gradient norm over training with 1/√d_k at its best learning rate (its grid widened
  past an edge that rate sits at), per depth (the largest over depths decides), and the same measurement without the
  scale beside it (at the best rate of its grid)."""
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
  numbers = {**about(ctx), "max_decades": stats.round_finite(largest["sqrt"]),
             **spread("max_decades", per_seed["sqrt"]), "best_lr_at_edge": bool(edges),
             "decades_by_depth": {str(d): stats.finite_mean_std(v) for d, v in spans["sqrt"].items()},
             "unscaled": {"max_decades": stats.round_finite(largest["none"]), **spread("max_decades", per_seed["none"]),
                          "decades_by_depth": {str(d): stats.finite_mean_std(v) for d, v in spans["none"].items()}},
             "max_decades_unscaled_minus_scaled": stats.finite_mean_std(difference),
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
      + "."))


# ----------------------------------------------------------------------------
# The claims.


NAN_AND_GRADIENT_CLAIMS: tuple[Claim, ...] = (
    Claim(
        "train_nan_within_100_steps", "note 2 §4, follow-up 1",
        "Without scaling, training on tiny Shakespeare gives a NaN loss within 100 steps (with scaling the loss "
        "falls normally).",
        Criterion("nan_fraction_none", "fraction of unscaled (learning rate, seed) runs, pooled over depths and "
                  "dtypes, whose loss is non-finite within the first 100 steps, at learning rates where every 1/√d_k "
                  "run stays finite", holds=(">=", 0.5), fails=("<=", 0.1), noise=True,
                  reason="the note states it as what happens: in most runs to hold, in at most 1 in 10 it does not"),
        measure_nan_within_100, training=True, grids=nan_grids),
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
        "With √d_k scaling the gradients are stable.",
        Criterion("max_decades", "largest over depths of log10(max / min over steps) of the global gradient norm with "
                  "1/√d_k at its best learning rate (mean over seeds; the same without the scale beside it)",
                  holds=("<=", 1.0), fails=(">=", 2.0), noise=True, edge="best_lr_at_edge",
                  reason="'stable' = within one decade over training; two decades is not stable"),
        measure_scaled_grads_stable, training=True, grids=depth_grids),
)
"""The claims of this module, in the order of their table (``scaling.studies.claims.training.families``)."""
