"""The training claim that μP's initialization and scaling are consistent across width (note 1 §3, §4 ②): the
coordinate check of μP on grids of several widths over every step of their run, with the logit scale μP's models apply
(α/d_head, the scaling by d_k that note 1 §5 and note 2 §2.2 call a pitfall), and beside it the spread over widths of
the optimal learning rate.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from scaling.studies import stats
from scaling.studies.coord_check import layers as coord_layers
from scaling.studies.coord_check import slopes as coord_slopes
from scaling.studies.coord_check import verdicts as coord_verdicts
from scaling.studies.grid import optimum
from scaling.studies.grid.run import GridRun
from scaling.studies.grid.run import GridSpec
from scaling.studies.claims.training.best_learning_rate import locate_optimum
from scaling.studies.claims.context import Context
from scaling.studies.claims.training.grids import grid_spec
from scaling.studies.claims.training.grids import RECORD
from scaling.studies.claims.training.grids import trained
from scaling.studies.claims.training.numbers import about
from scaling.studies.claims.training.numbers import fmt
from scaling.studies.claims.training.numbers import lr_label
from scaling.studies.claims.training.numbers import pm
from scaling.studies.claims.training.numbers import spread
from scaling.studies.claims.training.sizes import data_name
from scaling.studies.claims.training.sizes import seeds_of
from scaling.studies.claims.training.sizes import sizes
from scaling.studies.claims.verdicts import Claim
from scaling.studies.claims.verdicts import Criterion
from scaling.studies.claims.verdicts import Measurement
from scaling.studies.claims.verdicts import Reading


def transfer_spec(ctx: Context, parametrization: str, width: int, log2_lrs: Sequence[float] | None = None,
                  label: str | None = None) -> GridSpec:
  """The transfer grid of one parametrization and width (``log2_lrs``: the mode's transfer learning rates): base
  width the smallest transfer width, heads of width / heads, cosine-scheduled, the coordinate check's RMS recorded."""
  s = sizes(ctx)
  return grid_spec(ctx, rule="default", depth=s["transfer_depth"], width=width, parametrization=parametrization,
                   log2_lrs=s["transfer_log2_lrs"] if log2_lrs is None else log2_lrs, steps=s["transfer_steps"],
                   base_width=min(s["transfer_widths"]), fixed_head_dim=False, schedule="cosine",
                   label=label or f"width-{width} transfer grid", record=RECORD + coord_layers.RMS_METRICS)


def transfer_grids(ctx: Context) -> dict[tuple[str, int], GridSpec]:
  """{(parametrization, width): spec}: ``transfer_spec`` at every transfer width."""
  s = sizes(ctx)
  return {(name, width): transfer_spec(ctx, name, width) for name in s["transfer_parametrizations"]
          for width in s["transfer_widths"]}


def coord_log2_lr(ctx: Context) -> float:
  """The transfer learning rate nearest ``coord_lr`` (log2): the coordinate check's."""
  s = sizes(ctx)
  grid = tuple(float(x) for x in s["transfer_log2_lrs"])
  return grid[int(np.argmin([abs(x - math.log2(s["coord_lr"])) for x in grid]))]


def coord_check_slopes(runs: dict[tuple[str, int], GridRun], log2_lr: float) -> list[dict[str, Any]]:
  """``scaling.studies.coord_check.slopes.slopes`` of the transfer grids at one learning rate: per parametrization,
  layer and step, the slope of log2 RMS against log2 width of every recorded layer output (with its standard error
  over seeds)."""
  rows = []
  for (name, width), run in runs.items():
    i = run.log2_lrs.index(log2_lr)
    rms = coord_layers.rms_by_layer(run.records, run.model_config.depth)  # layer -> [steps, M]
    per_seed = {layer: run.by_lr(v.T)[i].T for layer, v in rms.items()}  # [steps, S]
    rows += coord_slopes.coord_rows({"parametrization": name, "width": width}, {"rms": per_seed})
  return coord_slopes.slopes(rows)


def largest_slope(slope_rows: Sequence[dict[str, Any]], parametrization: str, up_to: int | None = None
                  ) -> dict[str, Any] | None:
  """The slope row of ``parametrization`` with the largest slope at steps 0..``up_to`` (all: None), or None."""
  rows = [r for r in slope_rows if r["parametrization"] == parametrization and r["slope"] is not None
          and (up_to is None or r["step"] <= up_to)]
  return max(rows, key=lambda r: r["slope"]) if rows else None


def logit_scales(runs: dict[tuple[str, int], GridRun], parametrization: str) -> dict[str, dict[str, float]]:
  """The logit scale each width's model of ``parametrization`` applies, read from its model: per width, its head
  dimension d_head, the scale s (softmax(s·q·k)), s·d_head (constant over widths for a rule α/d_head) and s·√d_head
  (constant for α/√d_head)."""
  out = {}
  for (name, width), run in sorted(runs.items(), key=lambda kv: kv[0][1]):
    if name != parametrization:
      continue
    config = run.model_config
    scale = float(config.attention_rule.logit_scale(config.head_dim))
    out[str(width)] = {"head_dim": int(config.head_dim), "logit_scale": stats.round_finite(scale),
                       "times_head_dim": stats.round_finite(scale * config.head_dim),
                       "times_sqrt_head_dim": stats.round_finite(scale * math.sqrt(config.head_dim))}
  return out


def scale_rule_words(scales: dict[str, dict[str, float]]) -> str:
  """What ``logit_scales`` shows of one parametrization's rule, in words: "α/d_head (α = ...)" when s·d_head is the
  same at every width, "α/√d_head (α = ...)" when s·√d_head is, else the scales themselves."""
  if not scales:
    return "n/a"
  for key, form in (("times_head_dim", "α/d_head"), ("times_sqrt_head_dim", "α/√d_head")):
    values = [v[key] for v in scales.values()]
    if len(values) > 1 and np.allclose(values, values[0], rtol=1e-6):
      return f"{form} (α = {values[0]:.4g})"
  return ", ".join(f"{v['logit_scale']:.4g} at d_head {v['head_dim']}" for v in scales.values())


def measure_mup_transfer(ctx: Context) -> Measurement:
  """The coordinate check of μP (the largest slope of log2 RMS against log2 width of any layer output at any step of
  the whole run, at the learning rate nearest ``coord_lr``), SP's beside it, and the logit scale μP's models apply;
  and the spread over widths of the optimal log2 learning rate under μP (each width's grid widened past an edge its
  optimum sits at), with SP's."""
  s = sizes(ctx)
  runs = trained(ctx, transfer_grids(ctx))
  names = tuple(s["transfer_parametrizations"])
  widths = tuple(s["transfer_widths"])
  log2_lrs = tuple(float(x) for x in s["transfer_log2_lrs"])
  steps = s["transfer_steps"]
  last = max(1, steps // 10)
  # The note's reading: width-consistent initialization and scaling, the coordinate check (Tensor Programs V, §D.1).
  coord_lr = coord_log2_lr(ctx)
  upto = min(steps - 1, max(1, runs[(names[0], widths[0])].opt_config.warmup))
  slope_rows = coord_check_slopes(runs, coord_lr)
  modules = coord_verdicts.verdicts(slope_rows, tolerance=coord_verdicts.TOLERANCE)
  coord: dict[str, Any] = {}
  for name in ("mup", "sp"):
    whole, early = largest_slope(slope_rows, name), largest_slope(slope_rows, name, upto)
    coord[name] = {
        "max_slope": None if whole is None else stats.round_finite(whole["slope"]),
        "max_slope_se": None if whole is None else stats.round_finite(whole["slope_se"]),
        "at": None if whole is None else f"{whole['layer']}, step {whole['step']}",
        "max_slope_warmup": None if early is None else stats.round_finite(early["slope"]),
        "at_warmup": None if early is None else f"{early['layer']}, step {early['step']}",
        "modules_above_tolerance": [m["layer"] for m in modules
                                    if m["parametrization"] == name and m["verdict"] != "ok"]}
  scales = {name: logit_scales(runs, name) for name in names}
  # Another reading: the learning rate tuned at one width carries over.
  out: dict[str, Any] = {}
  for name in names:
    found = {w: locate_optimum([(log2_lrs, runs[(name, w)])], last=last, octaves=s["edge_octaves"],
                               widen=lambda values, name=name, w=w: ctx.planner.train(
                                   transfer_spec(ctx, name, w, values, f"width-{w} transfer grid, widened"),
                                   like=runs[(name, w)].spec))
             for w in widths}
    optima = [found[w]["optimum"] for w in widths]
    per_seed = [optimum.spread([found[w]["optimum_seeds"][j] for w in widths]) for j in range(len(seeds_of(ctx)))]
    per_seed = [np.nan if v is None else v for v in per_seed]
    out[name] = {"optimal_log2_lr": [stats.round_finite(v) for v in optima],
                 "at_edge": [found[w]["at_edge"] for w in widths],
                 "widened_by": {str(w): found[w]["widened_by"] for w in widths if found[w]["widened_by"]},
                 "spread": stats.round_finite(optimum.spread(optima)),
                 "spread_per_seed": stats.finite_mean_std(per_seed), **spread("spread", per_seed),
                 "final_loss_by_width_lr": {str(w): found[w]["final_loss_by_value"] for w in widths}}
  mup, sp = out.get("mup"), out.get("sp")
  numbers = {**about(ctx), "widths": list(widths), "depth": s["transfer_depth"], "steps": steps,
             "log2_lrs": list(log2_lrs),
             "coord_check": f"slope of log2 RMS against log2 width of every layer output (embedding, each block's "
                            f"attention logits, attention and MLP outputs, readout) at every step 0..{steps - 1} of the "
                            f"run at learning rate {lr_label(coord_lr)}; its standard error over seeds",
             "coord_check_learning_rate": lr_label(coord_lr), "coord_check_steps": steps, "warmup_steps": upto,
             "logit_scale_by_width": scales,
             "mup_max_coord_slope": coord["mup"]["max_slope"], "mup_max_coord_slope_se": coord["mup"]["max_slope_se"],
             "sp_max_coord_slope": coord["sp"]["max_slope"], "coord": coord,
             "optimum": "parabola vertex through the best grid point and its neighbours, else the grid argmin; a "
                        f"grid whose optimum sits at an edge is widened up to {s['edge_octaves']:g} octaves past it",
             "mup_optimal_log2_lr_spread": mup["spread"], "mup_optimal_log2_lr_spread_se": mup["spread_se"],
             "mup_optimum_at_edge": any(mup["at_edge"]),
             "sp_optimal_log2_lr_spread": None if sp is None else sp["spread"], **out}
  fmt_opt = lambda name: ", ".join(fmt(v, ".2f") for v in out[name]["optimal_log2_lr"])
  widened = "; ".join(f"{name} width {w} widened to 2^{', 2^'.join(f'{v:g}' for v in vs)}"
                      for name in names for w, vs in out[name]["widened_by"].items())
  shown = [(label, coord[name]) for name, label in (("mup", "μP"), ("sp", "SP")) if name in names]
  finding = (f"Widths {', '.join(map(str, widths))}, {steps} steps on the {data_name(ctx)}. Coordinate check (the "
             f"note's reading) at learning rate {lr_label(coord_lr)}, over all {steps} steps: the largest slope of "
             "log2 RMS against log2 width is " + ", ".join(f"{pm(c['max_slope'], c['max_slope_se'], '.2f')} under "
                                                            f"{label} ({c['at']})" for label, c in shown)
             + f"; over the warmup (steps 0..{upto}) " + ", ".join(f"{fmt(c['max_slope_warmup'], '.2f')} under "
                                                                    f"{label} ({c['at_warmup']})" for label, c in shown)
             + ". " + "".join(f"{label} here scales the logits by {scale_rule_words(scales[name])}: "
                              + ", ".join(f"{v['logit_scale']:.4g} at width {w} (d_head {v['head_dim']})"
                                          for w, v in scales[name].items()) + ". "
                              for name, label in (("mup", "μP"), ("sp", "SP")) if name in names)
             + ("Scaling by d_k (α/d_head) is the rule both notes call a pitfall (note 1 §5 '用 d_k 或 d_k² 缩放', "
                "note 2 §2.2 '如果除以 d_k，方差会变成 1/d_k'), so the width-consistent rules checked here are μP's, "
                "not the notes' 1/√d_k. " if scale_rule_words(scales.get("mup", {})).startswith("α/d_head") else "")
             + "Learning-rate transfer (another reading): the optimal log2 learning rate was "
             + " and ".join(f"{fmt_opt(name)} under {label} (spread {fmt(out[name]['spread'], '.2f')} octaves)"
                            for name, label in (("mup", "μP"), ("sp", "SP")) if name in names)
             + (f" ({widened})" if widened else "") + ".")
  return Measurement(numbers, finding)


MUP_TRANSFER_CLAIMS: tuple[Claim, ...] = (
    Claim(
        "train_mup_lr_transfer", "note 1 §3, §4 ②",
        "μP gives initialization and scaling rules that are consistent across width (Q/K initialization and the "
        "scale matched at every width).",
        Criterion("mup_max_coord_slope", "the coordinate check of μP (the note's reading: width-consistent "
                  "initialization and scaling): the largest slope of log2 RMS against log2 width of any layer output "
                  "(embedding, each block's attention logits, attention and MLP outputs, readout) at any step of the "
                  "whole run, at the learning rate nearest 1e-2 (SP's beside it)",
                  holds=("<=", coord_verdicts.TOLERANCE),
                  fails=(">=", 0.5), noise=True,
                  reason="'consistent across width' = every layer's output keeps its size as the width grows: slopes "
                         f"at most {coord_verdicts.TOLERANCE:g} (the coordinate check's tolerance, Tensor Programs V "
                         "§D.1); growing like √width (0.5) or faster is not consistent"),
        measure_mup_transfer, training=True, grids=transfer_grids,
        beside=(Reading("learning-rate transfer (another reading: what width-consistent rules are for, not the note's "
                        "words)",
                        Criterion("mup_optimal_log2_lr_spread", "max − min over widths of μP's optimal log2 learning "
                                  "rate (octaves; each width's grid widened past an edge its optimum sits at)",
                                  holds=("<=", 1.0), fails=(">=", 2.0), noise=True, edge="mup_optimum_at_edge",
                                  reason="'carry over' = the optimum moves at most one octave; two octaves means "
                                         "retuning")),)),
)
"""The claims of this module, in the order of their table (``scaling.studies.claims.training.families``)."""
