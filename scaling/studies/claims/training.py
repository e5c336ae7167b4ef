"""Claims about training from the notes, measured by training small transformers (``Claim(training=True)``).

The claims come from note 2 §4, follow-up 1 (``shared/seeds/004_383f650843b84e3b.txt``: without 1/√d_k scaling
the loss is NaN within 100 steps, attention gradient norms decay below 1e-6, 6 layers converge to a worse loss, very
slowly, with an oscillating loss, or only with a tiny learning rate and clipping, 12+ layers cannot converge), note 2
§2 (dividing by d_k loses expressiveness, √d_k is the optimal variance normalization, LayerNorm and RMSNorm do not
replace the scale) and note 1 §2, §3, §4 ② and ⑤ (``shared/seeds/000_ae59428f9015f76d.txt``: with the scale
gradients are stable; in training q and k become correlated; μP's initialization and scaling are consistent across
width; the division belongs before the softmax).

Every verdict carries the seeds' spread: each measurement reports its statistic's standard error over seeds
(``<statistic>_se``, from the per-seed values ``<statistic>_seeds``), and a threshold within two standard errors
makes the verdict inconclusive (``scaling.studies.claims.verdicts.Criterion.noise``). An optimum located on a grid (the
loss-optimal logit multiplier, each width's optimal learning rate), and the best learning rate a comparison is read at
("each at its best learning rate"), whose argmin sits at the grid's edge widens the grid once, up to ``edge_octaves``
past that edge (``locate_optimum``, ``widened_at_best``); still at the edge, its verdict is inconclusive
(``Criterion.edge``). Those widenings are trained when found, so a plan does not count them.

Every measurement trains on ``ctx.text_file`` (character level, e.g. tiny Shakespeare) or, when it is None, on the
built-in synthetic recall task; the numbers say which (``data``). Runs are vmapped grids of learning rates × seeds
(``scaling.studies.grid.run.GridSpec``, trained by ``scaling.training.train.run_training`` with a seed list, never stopped on
divergence, every step recorded). Each claim declares the grids it trains (``Claim.grids``: a function of the
context mapping names to specs, the same one its measurement trains from), so a run is planned from the
declarations without training or measuring anything; the context's ``GridPlanner`` (``ctx.planner``) trains each
grid once, so the depth-6 grid of the unscaled model, say, serves every claim that reads it.

``SIZES`` holds the sizes of each mode (quick, cpu_hour, paper, and test for the unit tests); ``describe_sizes``
puts them in words for the tables' headings.

Divergence follows ``scaling.training.train``: a run diverges at a non-finite loss or one above 3 × its step-0 loss; a run
stalls when its final loss stays above ``stall_fraction`` (0.9) × its step-0 loss.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from scaling.attention import dispatch as attention_lib
from scaling.training import data as data_lib
from scaling.attention import metrics as metrics_lib
from scaling.training import model as model_lib
from scaling.mup import optim
from scaling.attention import rope as rope_lib
from scaling.training import train as train_lib
from scaling.base.config import option
from scaling.studies.coord_check import study as coord_check
from scaling.studies.grid import optimum
from scaling.studies import stats
from scaling.studies.grid.run import GridRun
from scaling.studies.grid.run import GridSpec
from scaling.studies.grid.run import join_runs
from scaling.studies.claims.verdicts import Claim
from scaling.studies.claims.verdicts import Criterion
from scaling.studies.claims.verdicts import Measurement
from scaling.studies.claims.verdicts import Reading

RECORD = ("loss", "grad_norm", "layer_grad_norm", "attn_max_logit", "attn_entropy")
QK_RULES = ("none", "sqrt", "linear", "qk_norm")
DIVERGENCE_FACTOR = train_lib.DEFAULT_DIVERGENCE_FACTOR

SCAN_FROM_DEPTH = 4
"""Grids of models this deep or deeper run their blocks as one scan (``ModelConfig.scan_layers``: the same function,
compiled once for every block). Compiling a quick-mode grid's step (6 members) took 5.1 s unrolled and 5.4 s scanned at
depth 2, 7.0 s and 4.2 s at depth 6, 10.3 s and 5.0 s at depth 12 on two CPU cores."""

_OCTAVES_FROM_1E4 = tuple(math.log2(1e-4) + k for k in range(7))  # 1e-4 .. 6.4e-3
_COMMON = dict(nan_window=100, stall_fraction=0.9, warmup_fraction=0.1, clip=1.0, tiny_octaves_below=(2.0, 4.0),
               qk_rules=QK_RULES, qk_lr=1e-3, coord_lr=1e-2, edge_octaves=2.0,
               transfer_depth=2, transfer_parametrizations=("sp", "mup"), attn_log2_mults=(-2.0, -1.0, 0.0, 1.0, 2.0),
               dtypes=("float32",))

SIZES: dict[str, dict[str, Any]] = {
    "paper": dict(_COMMON, width=512, num_heads=8, head_dim=64, seq_len=256, batch_size=8, num_seeds=3,
                  depth_small=2, depth_converge=6, depth_diverge=12, steps={2: 2000, 6: 2000, 12: 2000},
                  log2_lrs=_OCTAVES_FROM_1E4[:6], fixed_step=500, qk_widths=(256, 512), transfer_widths=(128, 256, 512),
                  transfer_log2_lrs=tuple(float(x) for x in range(-14, -5)), transfer_steps=2000,
                  dtypes=("float32", "bfloat16")),
    "paper_8min": dict(_COMMON, width=512, num_heads=8, head_dim=64, seq_len=256, batch_size=8, num_seeds=3,
                       depth_small=2, depth_converge=6, depth_diverge=12, steps={2: 300, 6: 600, 12: 300},
                       log2_lrs=_OCTAVES_FROM_1E4[2:5], fixed_step=250, qk_widths=(512,), qk_rules=("sqrt",),
                       transfer_widths=(128, 512), transfer_log2_lrs=(-13.0, -12.0, -11.0, -10.0, -9.0),
                       transfer_steps=300, transfer_parametrizations=("mup",),
                       depth12_setups=((True, False), (False, False), (False, True))),
    "cpu_hour": dict(_COMMON, width=64, num_heads=2, head_dim=32, seq_len=32, batch_size=8, num_seeds=3,
                     depth_small=2, depth_converge=6, depth_diverge=12, steps={2: 300, 6: 300, 12: 200},
                     log2_lrs=_OCTAVES_FROM_1E4[::2] + (math.log2(1e-2),), fixed_step=100, qk_widths=(64, 128),
                     transfer_widths=(32, 64, 128),
                     transfer_log2_lrs=tuple(float(x) for x in range(-13, -3)), transfer_steps=300),
    "quick": dict(_COMMON, width=32, num_heads=2, head_dim=16, seq_len=32, batch_size=8, num_seeds=None,
                  depth_small=2, depth_converge=6, depth_diverge=12, steps={2: 100, 6: 100, 12: 100},
                  log2_lrs=(math.log2(1e-4), math.log2(1e-3), math.log2(1e-2)), fixed_step=30, qk_widths=(32, 64),
                  transfer_widths=(32, 128),
                  transfer_log2_lrs=(-12.0, -10.0, -8.0, -6.0, -4.0), transfer_steps=100),
    "test": dict(_COMMON, width=16, num_heads=2, head_dim=8, seq_len=8, batch_size=2, num_seeds=2,
                 depth_small=1, depth_converge=1, depth_diverge=1, steps={1: 4},
                 log2_lrs=(-10.0, -2.0), fixed_step=2,
                 qk_widths=(16,), qk_rules=("sqrt",), transfer_widths=(16,), transfer_log2_lrs=(-10.0, -6.0, -2.0),
                 transfer_steps=4, transfer_parametrizations=("mup",), attn_log2_mults=(-1.0, 0.0, 1.0)),
}
"""The training sizes of each mode. "paper" is the notes' setting (d_k 64, width 512 = 8 heads, sequences of 256,
depths 2, 6 and 12, about 2,000 steps, learning rates in octaves, 3 seeds, float32 and bfloat16); "paper_8min" keeps
its model (d_k 64, width 512 = 8 heads, sequences of 256, depths 2, 6 and 12, pre- and post-LN, 3 seeds) and cuts what
the claims' words do not need, to fit 8 minutes on one H200 (``scaling.studies.claims.study.accelerator_plan``): 3 learning
rates, the octaves around 1e-3 (8e-4 and its neighbours), instead of 6; 300 steps where the claim is about early
training (NaN within 100 steps; depth 12 "cannot converge" at the start of training; depth 2), 600 at depth 6 whose
claims are about the whole curve (slow, oscillating, worse); depth 12 pre-LN without warmup and post-LN with and
without it (warmup is what post-LN needs, Xiong et al. 2020; pre-LN with warmup is left out); float32 only (no training claim's words are about
precision; the low-precision claims are random-input ones); q-k alignment at width 512 with 1/√d_k only, and μP
transfer at widths 128 and 512 without SP beside it; "cpu_hour" the
largest setting planned for about an hour on two CPU cores; "quick" keeps every claim at minutes (100 steps at every
depth: "within 100 steps" is run as written); "test" is tiny, for the unit tests only.

In every mode: ``coord_lr``, the learning rate of the coordinate check read from the transfer grids (the rate of
``experiments.coord_check``); ``edge_octaves``, how far a grid is widened past the edge its optimum sits at."""


# ----------------------------------------------------------------------------
# Post-processing helpers (pure numpy; known-answer tests in tests/test_training_claims.py).


def diverged(losses: np.ndarray, factor: float = DIVERGENCE_FACTOR, window: int | None = None) -> np.ndarray:
  """Per run, whether its loss diverged within the first ``window`` steps (all steps when None).

  Args:
    losses: [steps, M] training losses.
    factor: a loss above factor × the run's step-0 loss counts as diverged, as does a non-finite one.
    window: how many initial steps to look at.

  Returns:
    bool [M].
  """
  losses = np.asarray(losses, np.float64)[:window]
  with np.errstate(invalid="ignore"):
    grown = losses > factor * losses[:1]
  return np.any(~np.isfinite(losses) | grown, axis=0)


def nonfinite_within(losses: np.ndarray, window: int | None = None) -> np.ndarray:
  """Per run, whether its loss was non-finite (NaN or inf) in the first ``window`` steps: bool [M]."""
  return np.any(~np.isfinite(np.asarray(losses, np.float64)[:window]), axis=0)


def smallest_finite(values: np.ndarray) -> float:
  """The smallest finite value of an array (NaN when there is none)."""
  values = np.asarray(values, np.float64)
  finite = values[np.isfinite(values)]
  return float(finite.min()) if finite.size else float("nan")


def final_losses(losses: np.ndarray, last: int) -> np.ndarray:
  """Per run, the mean of its last ``last`` losses, NaN for a run whose loss was ever non-finite: [M]."""
  losses = np.asarray(losses, np.float64)
  ok = np.all(np.isfinite(losses), axis=0)
  with np.errstate(invalid="ignore"):
    return np.where(ok, np.mean(losses[-last:], axis=0), np.nan)


def window_mean(losses: np.ndarray, step: int, width: int) -> np.ndarray:
  """Per run, the mean loss of steps (step − width, step]: [M] (NaN if any of them is non-finite)."""
  losses = np.asarray(losses, np.float64)
  step = min(step, losses.shape[0] - 1)
  chunk = losses[max(0, step - width + 1):step + 1]
  return np.where(np.all(np.isfinite(chunk), axis=0), np.mean(chunk, axis=0), np.nan)


def best_index(per_lr_seed: np.ndarray) -> int | None:
  """The learning rate (row) with the lowest seed-mean of a [L, S] array; rows with a NaN seed are out (None: all)."""
  per_lr_seed = np.asarray(per_lr_seed, np.float64)
  means = np.where(np.all(np.isfinite(per_lr_seed), axis=1), np.mean(per_lr_seed, axis=1), np.inf)
  return int(np.argmin(means)) if np.isfinite(means).any() else None


def spread(statistic: str, per_seed: Sequence[float] | np.ndarray) -> dict[str, Any]:
  """The numbers of a statistic's spread over seeds: ``<statistic>_se`` (``standard_error``, what a criterion with
  ``noise`` reads) and ``<statistic>_seeds`` (the per-seed values, None for a non-finite one)."""
  values = np.asarray(per_seed, np.float64).ravel()
  return {f"{statistic}_se": stats.round_finite(stats.standard_error(values)),
          f"{statistic}_seeds": [stats.round_finite(v) for v in values]}


def widened_values(values: Sequence[float], best: int, octaves: float) -> tuple[float, ...]:
  """The values a grid is widened by when its optimum sits at an edge: past that edge, in steps of the grid's
  spacing there (at most ``octaves``), up to ``octaves`` beyond it, nearest first.

  Args:
    values: the grid's values (log2), ascending, at least two.
    best: the index of the optimum.
    octaves: how far past the edge to go (> 0).

  Returns:
    The new values; () when ``best`` is interior.
  """
  values = [float(v) for v in values]
  if len(values) < 2 or not octaves > 0:
    raise ValueError(f"values needs at least two values and octaves must be > 0; got {values} and {octaves}")
  if 0 < best < len(values) - 1:
    return ()
  low = best == 0
  step = min(values[1] - values[0] if low else values[-1] - values[-2], float(octaves))
  n = max(1, int(math.floor(octaves / step + 1e-9)))
  edge = values[0] if low else values[-1]
  return tuple(edge - k * step if low else edge + k * step for k in range(1, n + 1))


def _seed_values(values: Sequence[float | None], n: int) -> np.ndarray:
  """Per-seed values reported as a list (None: not finite) as float64 [n] (NaN for None; all NaN when empty)."""
  return np.array([np.nan if v is None else v for v in values], np.float64) if values else np.full(n, np.nan)


def _fmt(x: float | None, spec: str = ".3g") -> str:
  return "n/a" if x is None else format(x, spec)


def _pm(x: float | None, se: float | None, spec: str = ".3g") -> str:
  """"x ± se" (just x when the standard error is unknown)."""
  return _fmt(x, spec) + ("" if se is None or x is None else f" ± {se:.2g}")


# ----------------------------------------------------------------------------
# Contexts, data and the grids (``GridSpec`` s declared per claim, trained by the context's ``GridPlanner``).


def sizes(ctx: Any) -> dict[str, Any]:
  """The sizes of ``ctx.mode`` (KeyError naming the modes when it has none)."""
  try:
    return SIZES[ctx.mode]
  except KeyError:
    raise KeyError(f"no training sizes for mode {ctx.mode!r}; known: {', '.join(SIZES)}") from None


def follows_num_seeds(ctx: Any) -> bool:
  """Whether the grids train ``ctx.num_seeds`` seeds (the mode sets none of its own)."""
  return sizes(ctx)["num_seeds"] is None


def seeds_of(ctx: Any) -> range:
  """The seeds of the grids: ctx.seed .. (the mode's num_seeds, else ctx.num_seeds, at least 1); a range, so that
  planning grids of too many seeds (refused for their memory) holds no list of them."""
  n = (getattr(ctx, "num_seeds", 2) if follows_num_seeds(ctx) else sizes(ctx)["num_seeds"]) or 1
  return range(int(ctx.seed), int(ctx.seed) + max(1, int(n)))


def data_name(ctx: Any) -> str:
  """What the claims train on, for the numbers: the text file's name or the synthetic task."""
  text = getattr(ctx, "text_file", None)
  return f"text file {os.path.basename(text)} (characters)" if text else "synthetic recall task"


def describe_sizes(ctx: Any) -> str:
  """The training sizes of ``ctx.mode`` in words, for the tables' headings (read from ``SIZES``)."""
  s = sizes(ctx)
  depths = _depths(ctx)
  lrs = [2.0 ** x for x in s["log2_lrs"]]
  t_lrs = s["transfer_log2_lrs"]
  return (f"width {s['width']}, {s['num_heads']} heads of d_k {s['head_dim']}, sequences of {s['seq_len']}, batch "
          f"{s['batch_size']}; depths {', '.join(map(str, depths))} for "
          f"{', '.join(str(s['steps'][d]) for d in depths)} steps of constant-rate Adam at {len(lrs)} learning rates "
          f"{lrs[0]:.3g} .. {lrs[-1]:.3g}; {len(seeds_of(ctx))} seeds; {' and '.join(s['dtypes'])}; depth "
          f"{s['depth_diverge']} {'; '.join(_setup_name(*x) for x in s.get('depth12_setups', NORM_SETUPS))} (warmup: "
          f"{s['warmup_fraction']:.0%} of the steps); tiny learning "
          f"rates {' and '.join(f'{o:g}' for o in s['tiny_octaves_below'])} octaves below 1/√d_k's best at depth "
          f"{s['depth_converge']}, with clipping at {s['clip']:g}; q-k at widths "
          f"{', '.join(map(str, s['qk_widths']))} (learning rate {s['qk_lr']:g}); transfer at widths "
          f"{', '.join(map(str, s['transfer_widths']))}, learning rates 2^{t_lrs[0]:g} .. 2^{t_lrs[-1]:g} "
          f"({len(t_lrs)}), {s['transfer_steps']} cosine-scheduled steps")


def data_config(ctx: Any) -> data_lib.DataConfig:
  """The training data of ``ctx``: its text file (None: the synthetic task) at the mode's sequence and batch."""
  s = sizes(ctx)
  return data_lib.DataConfig(text_file=getattr(ctx, "text_file", None), seq_len=s["seq_len"],
                             batch_size=s["batch_size"])


def dataset_of(ctx: Any) -> data_lib.Dataset:
  """The training data of ``ctx`` (made once, by its ``GridPlanner``)."""
  return ctx.planner.dataset(data_config(ctx), int(ctx.seed))


def grid_spec(ctx: Any, *, rule: str, depth: int, width: int | None = None, parametrization: str = "sp",
              log2_lrs: Sequence[float] | None = None, steps: int | None = None, base_width: int | None = None,
              fixed_head_dim: bool = True, schedule: str = "constant", pre_ln: bool = True, warmup: bool = False,
              clip: float | None = None, norm: str = "layer", dtype: str = "float32",
              attn_mults: Sequence[float] | None = None, label: str | None = None,
              record: Sequence[str] = RECORD) -> GridSpec:
  """The grid of learning rates × seeds of one model, at the sizes of ``ctx.mode``.

  Args:
    ctx: the context (mode, seed, num_seeds, text_file, planner).
    rule: the logit-scale rule ("default": the parametrization's own).
    depth: number of blocks.
    width: the width (default: the mode's).
    parametrization: "sp", "mup", ...
    log2_lrs: the learning rates (default: the mode's).
    steps: training steps (default: the mode's steps at ``depth``).
    base_width: the parametrization's base width (default: ``width``).
    fixed_head_dim: keep the mode's heads and head dim (else the mode's number of heads, head dim width / heads).
    schedule: "constant" (no warmup) or "cosine" (warmup, then decay to 0.1 × the peak).
    pre_ln: pre-LN blocks (False: post-LN, as the original Transformer).
    warmup: a linear warmup over the mode's ``warmup_fraction`` of the steps (constant schedule).
    clip: clip each gradient to this global norm (``ClippedOptimizerConfig``); None: no clipping.
    norm: the blocks' normalization, "layer" or "rms".
    dtype: the model's compute dtype.
    attn_mults: α of the logit scale α/d_head the grid sweeps at the one learning rate of ``log2_lrs`` (None: the
      rule's, and the grid sweeps the learning rates).
    label: the grid in words (default: "depth-{depth} training grids").
    record: the metrics recorded at every step.

  Returns:
    The ``GridSpec``.
  """
  s = sizes(ctx)
  width = s["width"] if width is None else width
  log2_lrs = tuple(float(x) for x in (s["log2_lrs"] if log2_lrs is None else log2_lrs))
  steps = s["steps"][depth] if steps is None else steps
  dataset = dataset_of(ctx)
  family = model_lib.ModelFamily(depth=depth, num_heads=s["num_heads"],
                                 head_dim=s["head_dim"] if fixed_head_dim else None, rule=rule,
                                 base_width=width if base_width is None else base_width, pre_ln=pre_ln, dtype=dtype,
                                 scan_layers=depth >= SCAN_FROM_DEPTH)
  model_config = family.model_config(parametrization, width, vocab_size=dataset.vocab_size, max_len=dataset.seq_len)
  if norm != model_config.norm:
    model_config = dataclasses.replace(model_config, norm=norm)
  kwargs = dict(optimizer="adam", learning_rate=1e-3, steps=steps, schedule=schedule,
                end_factor=0.1 if schedule == "cosine" else 0.0,
                warmup_steps=max(1, int(s["warmup_fraction"] * steps)) if warmup else None)
  opt_config = optim.OptimizerConfig(**kwargs) if clip is None else ClippedOptimizerConfig(**kwargs, clip=clip)
  return GridSpec(model_config=model_config, opt_config=opt_config, data=data_config(ctx), data_seed=int(ctx.seed),
                  log2_lrs=log2_lrs, seeds=seeds_of(ctx), attn_mults=attn_mults, record=tuple(record),
                  label=f"depth-{depth} training grids" if label is None else label)


def trained(ctx: Any, grids: dict[Any, GridSpec]) -> dict[Any, GridRun]:
  """The trained grid of each spec of ``grids`` (a claim's declaration), by the same names: each trained once per
  context (``ctx.planner``)."""
  return {name: ctx.planner.train(spec) for name, spec in grids.items()}


def rule_grids(ctx: Any, rules: Sequence[str], depth: int, **options: Any) -> dict[str, GridSpec]:
  """{rule: its ``grid_spec``} of each rule at ``depth``, with ``options`` (``grid_spec``'s) alike."""
  return {rule: grid_spec(ctx, rule=rule, depth=depth, **options) for rule in rules}


def _lr_label(log2_lr: float) -> str:
  return f"{2.0 ** log2_lr:.3g}"



def _about(ctx: Any) -> dict[str, Any]:
  """The numbers every training claim reports first: the data, the mode and the seeds."""
  return {"data": data_name(ctx), "mode": ctx.mode, "seeds": list(seeds_of(ctx))}

# ----------------------------------------------------------------------------
# Note 2 §4, follow-up 1: without scaling, NaN within 100 steps.


def _depths(ctx: Any) -> tuple[int, ...]:
  s = sizes(ctx)
  return tuple(dict.fromkeys((s["depth_small"], s["depth_converge"], s["depth_diverge"])))


def nan_grids(ctx: Any) -> dict[tuple[int, str, str], GridSpec]:
  """{(depth, dtype, rule): spec}: unscaled and 1/√d_k at every depth and dtype."""
  s = sizes(ctx)
  return {(depth, dtype, rule): grid_spec(ctx, rule=rule, depth=depth, dtype=dtype)
          for depth in _depths(ctx) for dtype in s["dtypes"] for rule in ("none", "sqrt")}


def measure_nan_within_100(ctx: Any) -> Measurement:
  """The fraction of unscaled runs whose loss is non-finite within the first 100 steps (at learning rates where the
  1/√d_k runs of the same depth stay finite there), pooled over depths."""
  s = sizes(ctx)
  seeds = seeds_of(ctx)
  runs = trained(ctx, nan_grids(ctx))
  per_depth, hits, counted = {}, [], []
  per_seed_hits = np.zeros(len(seeds))
  per_seed_counted = np.zeros(len(seeds))
  for depth, dtype in ((d, t) for d in _depths(ctx) for t in s["dtypes"]):
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
        "nonfinite_none_by_lr": {_lr_label(x): int(bad_none[i].sum()) for i, x in enumerate(none.log2_lrs)},
        "nonfinite_sqrt_by_lr": {_lr_label(x): int(bad_sqrt[i].sum()) for i, x in enumerate(sqrt.log2_lrs)},
    }
  total = sum(counted)
  fraction = sum(hits) / total if total else float("nan")
  with np.errstate(invalid="ignore", divide="ignore"):
    per_seed = per_seed_hits / per_seed_counted
  windows = {d: min(s["nan_window"], s["steps"][d]) for d in _depths(ctx)}
  numbers = {
      **_about(ctx),
      "learning_rates": [_lr_label(x) for x in s["log2_lrs"]], "depths": list(_depths(ctx)), "dtypes": s["dtypes"],
      "steps_checked_by_depth": {str(d): w for d, w in windows.items()},
      "nan_fraction_none": stats.round_finite(fraction) if total else None,
      "nan_fraction_none_per_seed": stats.finite_mean_std(per_seed),
      **spread("nan_fraction_none", per_seed),
      "runs_counted": total,
      "per_depth": per_depth,
  }
  steps_words = (f"the first {windows[_depths(ctx)[0]]} steps" if len(set(windows.values())) == 1 else
                 "the first " + ", ".join(f"{w} steps at depth {d}" for d, w in windows.items()))
  short = [d for d, w in windows.items() if w < s["nan_window"]]
  finding = (f"On the {data_name(ctx)}, {sum(hits)} of {total} unscaled runs (depths "
             f"{', '.join(map(str, _depths(ctx)))}; {' and '.join(s['dtypes'])}; learning rates where the 1/√d_k runs "
             f"stay finite) had a non-finite loss within {steps_words} "
             f"(fraction {_fmt(numbers['nan_fraction_none'])})"
             + (f"; depth {', '.join(map(str, short))} ran fewer than {s['nan_window']} steps, so only the steps run "
                "are judged" if short else "") + ".")
  return Measurement(numbers, finding)


# ----------------------------------------------------------------------------
# Note 2 §4, follow-up 1: without scaling, gradient norms decay below 1e-6.


def depth_grids(ctx: Any) -> dict[tuple[str, int], GridSpec]:
  """{(rule, depth): spec}: unscaled and 1/√d_k at every depth (float32)."""
  return {(rule, depth): grid_spec(ctx, rule=rule, depth=depth) for rule in ("none", "sqrt") for depth in _depths(ctx)}


def measure_grad_norm_decay(ctx: Any) -> Measurement:
  """The smallest attention-path gradient norm (dL/dW_q, dL/dW_k) of any unscaled run at its initial or final
  parameters (log10), with the 1/√d_k value and the global and per-block norms of every step beside it."""
  seeds = seeds_of(ctx)
  runs = trained(ctx, depth_grids(ctx))
  out: dict[str, Any] = {}
  log10_seeds: dict[str, np.ndarray] = {}
  for rule in ("none", "sqrt"):
    attn_min, global_min, layer_min, per_seed = [], [], [], np.full(len(seeds), np.inf)
    by_depth = {}
    for depth in _depths(ctx):
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
  numbers = {**_about(ctx), "depths": list(_depths(ctx)),
             "attention_path": "global norm of dL/dW_q and dL/dW_k over all blocks, on a held-out batch, at the "
                               "initial and the final parameters of every (learning rate, seed)",
             "log10_min_attention_grad_norm_none": out["none"]["log10_min_attention_grad_norm"],
             **spread("log10_min_attention_grad_norm_none", log10_seeds["none"]),
             "none": out["none"], "sqrt": out["sqrt"]}
  none, sqrt = out["none"], out["sqrt"]
  finding = (f"On the {data_name(ctx)}, the smallest attention-path gradient norm (dL/dW_q, dL/dW_k; initial or "
             f"final parameters) of any unscaled run was {_fmt(none['min_attention_grad_norm'])}, with 1/√d_k "
             f"{_fmt(sqrt['min_attention_grad_norm'])}; the smallest global norm at any step was "
             f"{_fmt(none['min_global_grad_norm_any_step'])} unscaled and "
             f"{_fmt(sqrt['min_global_grad_norm_any_step'])} "
             f"with 1/√d_k.")
  return Measurement(numbers, finding)


# ----------------------------------------------------------------------------
# Note 2 §4, follow-up 1: 6 layers without scaling converge, but slowly and worse.


def depth6_grids(ctx: Any) -> dict[str, GridSpec]:
  """{rule: spec}: unscaled and 1/√d_k at depth 6 (the mode's ``depth_converge``)."""
  return rule_grids(ctx, ("none", "sqrt"), sizes(ctx)["depth_converge"])


def compare_at_best_lr(ctx: Any, runs: dict[str, GridRun], rule: str, reference: str, depth: int) -> dict[str, Any]:
  """Final losses of ``rule`` and ``reference`` at ``depth``, each at its own best learning rate, and their gaps.

  Args:
    ctx: the context.
    runs: the trained grids by rule, ``rule`` and ``reference`` among them.
    rule: the rule compared.
    reference: the rule it is compared with.
    depth: number of blocks (the mode's steps at this depth).

  Returns:
    the numbers: steps, the window of the final loss, per rule its best learning rate (each grid widened past an
    edge its best rate sits at, ``widened_at_best``; whether it still sits there, and "best_lr_at_edge" if either
    does), final loss (mean and std over seeds), loss at the mode's fixed step, initial loss and final loss per
    learning rate; the relative gaps (rule − reference) / reference of the final loss (mean, and per seed) and at the
    fixed step.
  """
  s = sizes(ctx)
  steps = s["steps"][depth]
  last = max(1, steps // 10)
  fixed = min(s["fixed_step"], steps - 1)
  rows, finals, fixeds = {}, {}, {}
  for name in (rule, reference):
    found = at_best_lr(ctx, runs[name], last)
    run, best, final = found["run"], found["best"], found["final_at_best"]
    loss = run.records["loss"]
    at_fixed = run.by_lr(window_mean(loss, fixed, last))
    finals[name] = final
    fixeds[name] = None if best is None else at_fixed[best]
    rows[name] = {
        "best_learning_rate": found["best_learning_rate"], "best_at_grid_edge": found["best_at_grid_edge"],
        "widened_by": found["widened_by"],
        "final_loss": stats.finite_mean_std([] if final is None else final),
        "final_loss_seeds": None if final is None else [stats.round_finite(v) for v in final],
        "loss_at_fixed_step": stats.finite_mean_std([] if best is None else at_fixed[best]),
        "initial_loss": stats.finite_mean_std(run.by_lr(loss[0]).ravel()),
        "final_loss_by_lr": found["final_loss_by_lr"],
    }
  gap = gap_fixed = None
  per_seed = np.array([])
  a, b = finals[rule], finals[reference]
  if a is not None and b is not None:
    gap = float(np.mean(a) - np.mean(b)) / float(np.mean(b))
    gap_fixed = float(np.mean(fixeds[rule]) - np.mean(fixeds[reference])) / float(np.mean(fixeds[reference]))
    per_seed = (a - b) / b  # paired: seed i of each starts from the same initialization seed
  return {"depth": depth, "steps": steps, "final_loss_mean_of_last": last, "fixed_step": fixed,
          "best_lr_at_edge": bool(rows[rule]["best_at_grid_edge"] or rows[reference]["best_at_grid_edge"]),
          "relative_final_gap": stats.round_finite(gap), "relative_final_gap_per_seed": stats.finite_mean_std(per_seed),
          **spread("relative_final_gap", per_seed),
          "relative_gap_at_fixed_step": stats.round_finite(gap_fixed), rule: rows[rule], reference: rows[reference]}


def edge_words(c: dict[str, Any], names: dict[str, str]) -> str:
  """" (... grid widened to ...; best learning rate still at the grid's edge for ...)" for the rules of a
  ``compare_at_best_lr`` result whose grid was widened past an edge, or whose best rate still is the grid's smallest or
  largest (their optimum may lie outside the grid); "" when neither."""
  widened = [f"{words}'s grid widened to {', '.join(c[rule]['widened_by'])}" for rule, words in names.items()
             if c[rule].get("widened_by")]
  at_edge = [words for rule, words in names.items() if c[rule]["best_at_grid_edge"]]
  parts = widened + ([f"best learning rate still at the grid's edge for {' and '.join(at_edge)}"] if at_edge else [])
  return f" ({'; '.join(parts)})" if parts else ""


def measure_depth6_converges_worse(ctx: Any) -> Measurement:
  """Final loss of the unscaled model minus the 1/√d_k model at depth 6, each at its best learning rate, relative."""
  c = compare_at_best_lr(ctx, trained(ctx, depth6_grids(ctx)), "none", "sqrt", sizes(ctx)["depth_converge"])
  none, sqrt = c["none"], c["sqrt"]
  none_drop = None
  if none["final_loss"]["mean"] is not None:
    none_drop = stats.round_finite(none["initial_loss"]["mean"] - none["final_loss"]["mean"])
  numbers = {**_about(ctx), **c, "none_loss_drop_from_init": none_drop}
  finding = (f"Depth {c['depth']}, {c['steps']} steps on the {data_name(ctx)}: at its best learning rate the "
             f"unscaled model reached a final loss of {_fmt(none['final_loss']['mean'])} (from "
             f"{_fmt(none['initial_loss']['mean'])}) vs {_fmt(sqrt['final_loss']['mean'])} with 1/√d_k, a relative "
             f"gap of {_fmt(c['relative_final_gap'])}{edge_words(c, {'none': 'unscaled', 'sqrt': '1/√d_k'})}; at step "
             f"{c['fixed_step']} the gap was {_fmt(c['relative_gap_at_fixed_step'])}.")
  return Measurement(numbers, finding)


# ----------------------------------------------------------------------------
# Note 1 §4 ⑤, §5: the division belongs before the softmax; after it, training suffers.


def post_softmax_grids(ctx: Any) -> dict[str, GridSpec]:
  """{rule: spec}: the division after the softmax, 1/√d_k and unscaled at the small depth."""
  return rule_grids(ctx, ("post_softmax", "sqrt", "none"), sizes(ctx)["depth_small"])


def measure_post_softmax_training(ctx: Any) -> Measurement:
  """Loss of softmax(q·k)·v/√d_k against softmax(q·k/√d_k)·v after training, each at its best learning rate."""
  runs = trained(ctx, post_softmax_grids(ctx))
  c = compare_at_best_lr(ctx, runs, "post_softmax", "sqrt", sizes(ctx)["depth_small"])
  unscaled = compare_at_best_lr(ctx, runs, "post_softmax", "none", sizes(ctx)["depth_small"])
  c["relative_final_gap_over_unscaled"] = unscaled["relative_final_gap"]
  c["none"] = unscaled["none"]
  post, sqrt = c["post_softmax"], c["sqrt"]
  finding = (f"Depth {c['depth']}, {c['steps']} steps on the {data_name(ctx)}: dividing after the softmax reached a "
             f"final loss of {_fmt(post['final_loss']['mean'])} (best learning rate {post['best_learning_rate']}) vs "
             f"{_fmt(sqrt['final_loss']['mean'])} with the division inside the logits (best learning rate "
             f"{sqrt['best_learning_rate']}): a relative gap of {_fmt(c['relative_final_gap'])}"
             f"{edge_words(c, {'post_softmax': 'the division after the softmax', 'sqrt': 'inside the logits'})}; "
             f"at step "
             f"{c['fixed_step']} the gap was {_fmt(c['relative_gap_at_fixed_step'])}. Its logits are unscaled "
             f"(softmax(q·k)·v/√d_k = the unscaled model with its attention output divided by √d_k), so most of the "
             f"gap is 'no scaling': against the unscaled model ({_fmt(c['none']['final_loss']['mean'])}) the gap is "
             f"{_fmt(c['relative_final_gap_over_unscaled'])}.")
  return Measurement({**_about(ctx), **c}, finding)


# ----------------------------------------------------------------------------
# Note 1 §3: in training q and k become correlated.


def qk_alignment_fn(model_config: model_lib.ModelConfig):
  """A jitted (stacked params [M, ...], tokens [B, T]) -> [M, depth, N]: per layer and head, the mean over tokens
  of cos(q_t, k_t), the query and key of the same position (before RoPE, which rotates both alike, and before any
  QK-norm), from the query and key projections of a forward pass."""
  model = model_lib.Transformer(model_config)
  n, kv = model_config.num_heads, model_config.kv_heads

  def one(params, tokens):
    _, state = model.apply({"params": params}, tokens, mutable=["intermediates"])
    inter = state["intermediates"]
    out = []
    for i in range(model_config.depth):
      attn = inter[f"block_{i}"]["attn"]
      q = attn["q_projected"][0].astype(jnp.float32)  # [B, T, N, H]
      k = jnp.repeat(attn["k_projected"][0].astype(jnp.float32), n // kv, axis=2)
      cos = jnp.sum(q * k, -1) / (jnp.linalg.norm(q, axis=-1) * jnp.linalg.norm(k, axis=-1) + 1e-12)
      out.append(jnp.mean(cos, axis=(0, 1)))
    return jnp.stack(out)

  return jax.jit(jax.vmap(one, in_axes=(0, None)))


def qk_alignment(per_head_cos: np.ndarray) -> np.ndarray:
  """|mean cos(q_t, k_t)| averaged over layers and heads: [M, depth, N] -> [M] (NaN for a NaN member)."""
  return np.mean(np.abs(np.asarray(per_head_cos, np.float64)), axis=(1, 2))


def max_logit_growth(max_logit: np.ndarray, last: int) -> np.ndarray:
  """Per run, the largest |attention logit| over layers, mean of the last ``last`` steps over step 0:
  [steps, M, depth] -> [M]."""
  m = np.max(np.asarray(max_logit, np.float64), axis=-1)
  with np.errstate(invalid="ignore", divide="ignore"):
    return np.mean(m[-last:], axis=0) / m[0]


def qk_log2_lr(ctx: Any) -> float:
  """The learning rate of the mode's grid nearest ``qk_lr`` (log2)."""
  s = sizes(ctx)
  grid = tuple(float(x) for x in s["log2_lrs"])
  return grid[int(np.argmin([abs(x - math.log2(s["qk_lr"])) for x in grid]))]


def qk_grids(ctx: Any) -> dict[tuple[int, str], GridSpec]:
  """{(width, rule): spec}: each q-k width and rule at the small depth and the one learning rate ``qk_log2_lr``."""
  s = sizes(ctx)
  return {(width, rule): grid_spec(ctx, rule=rule, depth=s["depth_small"], width=width, log2_lrs=(qk_log2_lr(ctx),))
          for width in s["qk_widths"] for rule in s["qk_rules"]}


def measure_qk_correlate(ctx: Any) -> Measurement:
  """The increase of the q-k alignment |mean cos(q_t, k_t)| during training with 1/√d_k, and the growth of the
  largest attention logit, per rule and width, at the learning rate nearest ``qk_lr``."""
  s = sizes(ctx)
  depth = s["depth_small"]
  steps = s["steps"][depth]
  last = max(1, steps // 10)
  log2_lr = qk_log2_lr(ctx)
  tokens = dataset_of(ctx).eval_batch(0, int(ctx.seed))["inputs"]
  table: dict[str, dict[str, Any]] = {}
  increases, by_seed = [], []
  for (width, rule), run in trained(ctx, qk_grids(ctx)).items():
    fn = qk_alignment_fn(run.model_config)
    before = qk_alignment(jax.device_get(fn(run.initial_params(), tokens)))
    after = qk_alignment(jax.device_get(fn(run.final_params, tokens)))
    max_logit = run.records["attn_max_logit"]
    growth = max_logit_growth(max_logit, last)
    entry = {name: stats.finite_mean_std(v) for name, v in (
        ("alignment_init", before), ("alignment_final", after), ("alignment_increase", after - before),
        ("max_logit_growth", growth), ("max_logit_init", np.max(max_logit[0], -1)),
        ("max_logit_final", np.max(np.mean(max_logit[-last:], 0), -1)))}
    table[f"{rule} width {width}"] = entry
    if rule == "sqrt":
      increases.extend(after - before)
      by_seed.append(after - before)  # [S]: one learning rate
  stat = stats.finite_mean_std(increases)
  numbers = {**_about(ctx), "depth": depth, "steps": steps,
             "learning_rate": _lr_label(log2_lr), "widths": list(s["qk_widths"]),
             "alignment": "|mean over tokens of cos(q_t, k_t)| per layer and head, averaged (pre-RoPE, pre-norm)",
             "alignment_increase_sqrt": stat["mean"], "alignment_increase_sqrt_std": stat["std"],
             **spread("alignment_increase_sqrt", np.mean(by_seed, axis=0) if by_seed else []),
             "by_rule_width": table}
  parts = [f"{k}: {_fmt(v['alignment_init']['mean'], '.2f')} -> {_fmt(v['alignment_final']['mean'], '.2f')}, "
           f"max logit x{_fmt(v['max_logit_growth']['mean'], '.2g')}" for k, v in table.items()]
  finding = (f"Depth {depth}, {steps} steps at learning rate {_lr_label(log2_lr)} on the {data_name(ctx)}: "
             f"the q-k alignment |mean cos(q_t, k_t)| rose by {_fmt(stat['mean'])} on average with 1/√d_k "
             f"(init -> final, and growth of the largest |logit|: {'; '.join(parts)}).")
  return Measurement(numbers, finding)


# ----------------------------------------------------------------------------
# Note 1 §4 ②: μP lets hyperparameters transfer across width.


def transfer_spec(ctx: Any, parametrization: str, width: int, log2_lrs: Sequence[float] | None = None,
                  label: str | None = None) -> GridSpec:
  """The transfer grid of one parametrization and width (``log2_lrs``: the mode's transfer learning rates): base
  width the smallest transfer width, heads of width / heads, cosine-scheduled, the coordinate check's RMS recorded."""
  s = sizes(ctx)
  return grid_spec(ctx, rule="default", depth=s["transfer_depth"], width=width, parametrization=parametrization,
                   log2_lrs=s["transfer_log2_lrs"] if log2_lrs is None else log2_lrs, steps=s["transfer_steps"],
                   base_width=min(s["transfer_widths"]), fixed_head_dim=False, schedule="cosine",
                   label=label or f"width-{width} transfer grid", record=RECORD + coord_check.RMS_METRICS)


def transfer_grids(ctx: Any) -> dict[tuple[str, int], GridSpec]:
  """{(parametrization, width): spec}: ``transfer_spec`` at every transfer width."""
  s = sizes(ctx)
  return {(name, width): transfer_spec(ctx, name, width) for name in s["transfer_parametrizations"]
          for width in s["transfer_widths"]}


def _axis_rows(parts: Sequence[tuple[Sequence[float], GridRun]], last: int, x: str,
               seed: int | None = None) -> list[dict[str, Any]]:
  """``optimum.summarize_grid``'s rows of every (values, grid) part of one swept axis (one seed's, given ``seed``)."""
  rows = []
  for values, run in parts:
    loss, n = run.records["loss"], len(run.seeds)
    if seed is not None:
      loss, n = loss[:, seed::n], 1
    rows += optimum.summarize_grid(loss, values, n, last, x_name=x)
  return rows


def locate_optimum(parts: Sequence[tuple[Sequence[float], GridRun]], *, last: int, x: str = "log2_lr",
                   widen: Callable[[tuple[float, ...]], GridRun] | None = None,
                   octaves: float = 2.0) -> dict[str, Any]:
  """The optimum of a swept axis (learning rates, or logit multipliers) over trained grids, the grid widened once past
  the edge the optimum sits at.

  Args:
    parts: (values, trained grid) pairs covering the axis: the grid's rows (``GridRun.by_lr``) are the values.
    last: the final loss is the mean of the last ``last`` steps.
    x: the swept value's name in the rows.
    widen: trains the grid of the values ``widened_values`` adds past the edge (None: no widening).
    octaves: how far past the edge (``widened_values``).

  Returns:
    {"optimum": the parabola vertex, else the grid argmin, of the seed-mean final loss (None: every value diverged),
    "optimum_seeds": each seed's, "at_edge": the optimum still sits at the edge after widening, "widened_by": the
    values added, "final_loss_by_value": the seed-mean final loss of each value}.
  """
  parts = list(parts)
  top = optimum.find_optimum(_axis_rows(parts, last, x), x=x, keys=())[0]
  added: tuple[float, ...] = ()
  if widen is not None and top["at_edge"]:
    values = sorted(float(v) for vs, _ in parts for v in vs)
    added = widened_values(values, values.index(top[x]), octaves)
    parts.append((added, widen(added)))
  rows = _axis_rows(parts, last, x)
  top = optimum.find_optimum(rows, x=x, keys=())[0]
  seeds = []
  for j in range(len(parts[0][1].seeds)):
    seeds.append(optimum.optimum_log2_lr(optimum.find_optimum(_axis_rows(parts, last, x, seed=j), x=x, keys=())[0],
                                         x=x))
  return {"optimum": optimum.optimum_log2_lr(top, x=x), "optimum_seeds": [np.nan if v is None else v for v in seeds],
          "at_edge": bool(top["at_edge"]), "widened_by": list(added),
          "final_loss_by_value": {f"{r[x]:g}": stats.round_finite(r["final_loss"])
                                  for r in sorted(rows, key=lambda r: r[x])}}


def coord_log2_lr(ctx: Any) -> float:
  """The transfer learning rate nearest ``coord_lr`` (log2): the coordinate check's."""
  s = sizes(ctx)
  grid = tuple(float(x) for x in s["transfer_log2_lrs"])
  return grid[int(np.argmin([abs(x - math.log2(s["coord_lr"])) for x in grid]))]


def coord_check_slopes(runs: dict[tuple[str, int], GridRun], log2_lr: float) -> list[dict[str, Any]]:
  """``scaling.studies.coord_check.study.slopes`` of the transfer grids at one learning rate: per parametrization, layer
  and step, the slope of log2 RMS against log2 width of every recorded layer output (with its standard error over
  seeds)."""
  rows = []
  for (name, width), run in runs.items():
    i = run.log2_lrs.index(log2_lr)
    rms = coord_check.rms_by_layer(run.records, run.model_config.depth)  # layer -> [steps, M]
    per_seed = {layer: run.by_lr(v.T)[i].T for layer, v in rms.items()}  # [steps, S]
    rows += coord_check.coord_rows({"parametrization": name, "width": width}, {"rms": per_seed})
  return coord_check.slopes(rows)


def largest_slope(slope_rows: Sequence[dict[str, Any]], parametrization: str, up_to: int | None = None
                  ) -> dict[str, Any] | None:
  """The slope row of ``parametrization`` with the largest slope at steps 0..``up_to`` (all: None), or None."""
  rows = [r for r in slope_rows if r["parametrization"] == parametrization and r["slope"] is not None
          and (up_to is None or r["step"] <= up_to)]
  return max(rows, key=lambda r: r["slope"]) if rows else None


def measure_mup_transfer(ctx: Any) -> Measurement:
  """The coordinate check of μP (the largest slope of log2 RMS against log2 width of any layer output over the first
  steps, at the learning rate nearest ``coord_lr``), SP's beside it; and the spread over widths of the optimal log2
  learning rate under μP (each width's grid widened past an edge its optimum sits at), with SP's."""
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
  early = [r for r in slope_rows if r["step"] <= upto]
  modules = coord_check.verdicts(early, tolerance=coord_check.TOLERANCE)
  coord: dict[str, Any] = {}
  for name in ("mup", "sp"):
    top, whole = largest_slope(slope_rows, name, upto), largest_slope(slope_rows, name)
    coord[name] = {
        "max_slope": None if top is None else stats.round_finite(top["slope"]),
        "max_slope_se": None if top is None else stats.round_finite(top["slope_se"]),
        "at": None if top is None else f"{top['layer']}, step {top['step']}",
        "max_slope_all_steps": None if whole is None else stats.round_finite(whole["slope"]),
        "at_all_steps": None if whole is None else f"{whole['layer']}, step {whole['step']}",
        "modules_above_tolerance": [m["layer"] for m in modules
                                    if m["parametrization"] == name and m["verdict"] != "ok"]}
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
  numbers = {**_about(ctx), "widths": list(widths), "depth": s["transfer_depth"], "steps": steps,
             "log2_lrs": list(log2_lrs),
             "coord_check": f"slope of log2 RMS against log2 width of every layer output (embedding, each block's "
                            f"attention logits, attention and MLP outputs, readout) at steps 0..{upto} (the warmup, up "
                            f"to the peak rate) at learning rate {_lr_label(coord_lr)}; its standard error over seeds",
             "coord_check_learning_rate": _lr_label(coord_lr), "coord_check_steps": upto,
             "mup_max_coord_slope": coord["mup"]["max_slope"], "mup_max_coord_slope_se": coord["mup"]["max_slope_se"],
             "sp_max_coord_slope": coord["sp"]["max_slope"], "coord": coord,
             "optimum": "parabola vertex through the best grid point and its neighbours, else the grid argmin; a "
                        f"grid whose optimum sits at an edge is widened up to {s['edge_octaves']:g} octaves past it",
             "mup_optimal_log2_lr_spread": mup["spread"], "mup_optimal_log2_lr_spread_se": mup["spread_se"],
             "mup_optimum_at_edge": any(mup["at_edge"]),
             "sp_optimal_log2_lr_spread": None if sp is None else sp["spread"], **out}
  fmt_opt = lambda name: ", ".join(_fmt(v, ".2f") for v in out[name]["optimal_log2_lr"])
  widened = "; ".join(f"{name} width {w} widened to 2^{', 2^'.join(f'{v:g}' for v in vs)}"
                      for name in names for w, vs in out[name]["widened_by"].items())
  shown = [(label, coord[name]) for name, label in (("mup", "μP"), ("sp", "SP")) if name in names]
  finding = (f"Widths {', '.join(map(str, widths))}, {steps} steps on the {data_name(ctx)}. Coordinate check (the "
             f"note's reading) at learning rate {_lr_label(coord_lr)}, steps 0..{upto}: the largest slope of log2 RMS "
             "against log2 width is " + ", ".join(f"{_pm(c['max_slope'], c['max_slope_se'], '.2f')} under {label} "
                                                   f"({c['at']})" for label, c in shown)
             + f"; over all {steps} steps " + ", ".join(f"{_fmt(c['max_slope_all_steps'], '.2f')} under {label} "
                                                        f"({c['at_all_steps']})" for label, c in shown)
             + ". Learning-rate transfer (another reading): the optimal log2 learning rate was "
             + " and ".join(f"{fmt_opt(name)} under {label} (spread {_fmt(out[name]['spread'], '.2f')} octaves)"
                            for name, label in (("mup", "μP"), ("sp", "SP")) if name in names)
             + (f" ({widened})" if widened else "") + ".")
  return Measurement(numbers, finding)


# ----------------------------------------------------------------------------
# Note 2 §4, follow-up 1: "cannot converge" at 12+ layers, pre-LN and post-LN, with and without warmup.


@dataclasses.dataclass(frozen=True)
class ClippedOptimizerConfig(optim.OptimizerConfig):
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


def stalled(losses: np.ndarray, fraction: float, last: int) -> np.ndarray:
  """Per run, whether its final loss (mean of the last ``last`` steps) stays above ``fraction`` × its step-0 loss.

  Args:
    losses: [steps, M] training losses.
    fraction: a run that does not get below fraction × its initial loss made no progress.
    last: the final-loss window.

  Returns:
    bool [M] (False for a run with a non-finite loss: that one diverged).
  """
  losses = np.asarray(losses, np.float64)
  final = final_losses(losses, last)
  with np.errstate(invalid="ignore"):
    return np.isfinite(final) & (final > fraction * losses[0])


NORM_SETUPS = ((True, False), (True, True), (False, False), (False, True))  # (pre_ln, warmup)


def _setup_name(pre_ln: bool, warmup: bool) -> str:
  return f"{'pre' if pre_ln else 'post'}-LN, {'with' if warmup else 'no'} warmup"


def depth12_grids(ctx: Any) -> dict[tuple[bool, bool, str], GridSpec]:
  """{(pre_ln, warmup, rule): spec}: unscaled and 1/√d_k at depth 12 (the mode's ``depth_diverge``) in each setup."""
  s = sizes(ctx)
  return {(pre_ln, warmup, rule): grid_spec(ctx, rule=rule, depth=s["depth_diverge"], pre_ln=pre_ln, warmup=warmup)
          for pre_ln, warmup in s.get("depth12_setups", NORM_SETUPS) for rule in ("none", "sqrt")}


def measure_depth12_cannot_converge(ctx: Any) -> Measurement:
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
    table[_setup_name(pre_ln, warmup)] = {
        "none_failed_fraction": stats.round_finite(float(failed["none"][fair].mean())) if n else None,
        "runs_counted": n, "none_diverged_all_lrs": stats.round_finite(float(div["none"].mean())),
        "none_stalled_all_lrs": stats.round_finite(float(stall["none"].mean())),
        "sqrt_failed_all_lrs": stats.round_finite(float(failed["sqrt"].mean()))}
  fraction = hits / counted if counted else float("nan")
  numbers = {**_about(ctx), "depth": depth, "steps": steps,
             "cannot_converge": f"diverged (non-finite or > {DIVERGENCE_FACTOR:g}x the step-0 loss) or stalled "
                                f"(final loss > {s['stall_fraction']:g}x the step-0 loss)",
             "failed_fraction_none": stats.round_finite(fraction) if counted else None, "runs_counted": counted,
             **spread("failed_fraction_none", seed_hits / np.where(seed_counted > 0, seed_counted, np.nan)),
             "by_setup": table}
  finding = (f"Depth {depth}, {steps} steps on the {data_name(ctx)}: {hits} of {counted} unscaled runs diverged or "
             f"stalled at the learning rates where 1/√d_k did neither; by setup (unscaled failed at fair rates / "
             f"diverged / stalled at all rates; 1/√d_k failed at all rates): " + "; ".join(
                 f"{k}: {_fmt(v['none_failed_fraction'], '.2f')} / {_fmt(v['none_diverged_all_lrs'], '.2f')} / "
                 f"{_fmt(v['none_stalled_all_lrs'], '.2f')}; {_fmt(v['sqrt_failed_all_lrs'], '.2f')}"
                 for k, v in table.items()) + ".")
  return Measurement(numbers, finding)


# ----------------------------------------------------------------------------
# Note 2 §4, follow-up 1: at 6 layers, "very oscillating", "very slow", "with a tiny learning rate and clipping".


def roughness(losses: np.ndarray) -> np.ndarray:
  """Per run, the RMS of the step-to-step loss change over the second half of training: [steps, M] -> [M]."""
  losses = np.asarray(losses, np.float64)
  half = losses[losses.shape[0] // 2:]
  return np.sqrt(np.mean(np.square(np.diff(half, axis=0)), axis=0))


def steps_to_reach(losses: np.ndarray, target: np.ndarray, width: int) -> np.ndarray:
  """Per run, the first step whose ``width``-step window mean is at or below ``target`` [M] (NaN: never)."""
  losses = np.asarray(losses, np.float64)
  kernel = np.ones(width) / width
  out = np.full(losses.shape[1], np.nan)
  for m in range(losses.shape[1]):
    smooth = np.convolve(losses[:, m], kernel, mode="valid")  # smooth[i] = mean of steps i .. i + width − 1
    hit = np.nonzero(smooth <= np.asarray(target)[m])[0]
    if hit.size:
      out[m] = hit[0] + width - 1
  return out


def _best(run: GridRun) -> int | None:
  """The learning rate (index) with the lowest seed-mean final loss of a trained grid (``best_index``)."""
  last = max(1, run.records["loss"].shape[0] // 10)
  return best_index(run.by_lr(final_losses(run.records["loss"], last)))


def widened_at_best(ctx: Any, run: GridRun) -> tuple[GridRun, int | None, bool]:
  """A learning-rate grid widened past the edge its best rate sits at (up to the mode's ``edge_octaves``,
  ``widened_values``; the widening trained by ``ctx.planner``), its best rate's index and whether that rate still
  sits at the grid's edge (the optimum may lie beyond it: a verdict read at it is inconclusive).

  Returns:
    (the grid, joined with its widening when there is one; ``_best`` of it; at the edge).
  """
  best = _best(run)
  if best is None or len(run.log2_lrs) < 2:
    return run, best, False
  if best in (0, len(run.log2_lrs) - 1):
    added = widened_values(run.log2_lrs, best, sizes(ctx)["edge_octaves"])
    wider = ctx.planner.train(dataclasses.replace(run.spec, log2_lrs=added, label=f"{run.spec.label}, widened"),
                              like=run.spec)
    run = join_runs(run, wider)
    best = _best(run)
  return run, best, best is not None and best in (0, len(run.log2_lrs) - 1)


def at_best_lr(ctx: Any, grid: GridRun, last: int) -> dict[str, Any]:
  """A trained grid read at its best learning rate, the grid widened past an edge its best rate sits at
  (``widened_at_best``).

  Args:
    ctx: the context (its planner trains the widening).
    grid: the trained grid.
    last: the final loss is the mean of the last ``last`` steps.

  Returns:
    {"run": the grid joined with its widening, "best": the best rate's index (None: no rate kept every seed
    finite), "final_at_best": the final losses [S] at the best rate (None when there is none), "best_learning_rate",
    "best_at_grid_edge" (None when there is no best), "widened_by" (the rates the widening added),
    "final_loss_by_lr" (the seed mean at each rate)}; rates as ``_lr_label`` writes them.
  """
  run, best, at_edge = widened_at_best(ctx, grid)
  final = run.by_lr(final_losses(run.records["loss"], last))  # [L, S]
  return {"run": run, "best": best, "final_at_best": None if best is None else final[best],
          "best_learning_rate": None if best is None else _lr_label(run.log2_lrs[best]),
          "best_at_grid_edge": None if best is None else at_edge,
          "widened_by": [_lr_label(x) for x in run.log2_lrs if x not in grid.log2_lrs],
          "final_loss_by_lr": {_lr_label(x): stats.finite_mean_std(final[i])["mean"]
                               for i, x in enumerate(run.log2_lrs)}}


def _still_at_edge(rules: Sequence[str]) -> str:
  """"; the best learning rate stays at the edge of its widened grid for ..." (those ``rules``), or ""."""
  names = {"none": "unscaled", "sqrt": "1/√d_k"}
  words = " and ".join(names.get(r, r) for r in rules)
  return f"; the best learning rate stays at the edge of its widened grid for {words}" if rules else ""


def _at_best(run: GridRun, best: int | None, values: np.ndarray) -> np.ndarray:
  """The per-seed values [S] of a per-member array [L·S] at learning rate ``best`` (NaN when None)."""
  return np.full(len(run.seeds), np.nan) if best is None else run.by_lr(values)[best]


def measure_depth6_oscillates(ctx: Any) -> Measurement:
  """Roughness (RMS step-to-step change in the second half) of the unscaled depth-6 loss over 1/√d_k's."""
  depth = sizes(ctx)["depth_converge"]
  rough, edges = {}, []
  for rule, run in trained(ctx, depth6_grids(ctx)).items():
    run, best, at_edge = widened_at_best(ctx, run)
    edges += [rule] if at_edge else []
    rough[rule] = _at_best(run, best, roughness(run.records["loss"]))
  with np.errstate(invalid="ignore", divide="ignore"):
    ratio = float(np.mean(rough["none"]) / np.mean(rough["sqrt"]))
    per_seed = rough["none"] / rough["sqrt"]  # paired by initialization seed
  numbers = {**_about(ctx), "depth": depth, "roughness_ratio": stats.round_finite(ratio),
             "best_lr_at_edge": bool(edges),
             **spread("roughness_ratio", per_seed),
             "roughness": {r: stats.finite_mean_std(v) for r, v in rough.items()}}
  return Measurement(numbers, (
      f"Depth {depth} on the {data_name(ctx)}, each rule at its best learning rate: the RMS step-to-step loss change "
      f"in the second half of training is {_fmt(numbers['roughness']['none']['mean'])} unscaled and "
      f"{_fmt(numbers['roughness']['sqrt']['mean'])} with 1/√d_k (ratio {_fmt(stats.round_finite(ratio))})"
      + _still_at_edge(edges) + "."))


def measure_depth6_slow(ctx: Any) -> Measurement:
  """Steps the unscaled depth-6 model needs to reach the loss 1/√d_k reaches at a quarter of training, relative."""
  depth = sizes(ctx)["depth_converge"]
  steps = sizes(ctx)["steps"][depth]
  width = max(1, steps // 20)
  quarter = max(width, steps // 4)
  runs = trained(ctx, depth6_grids(ctx))
  (sqrt, sb, sqrt_edge), (none, nb, none_edge) = (widened_at_best(ctx, runs[r]) for r in ("sqrt", "none"))
  target = _at_best(sqrt, sb, window_mean(sqrt.records["loss"], quarter - 1, width))
  reached = np.full(len(none.seeds), np.nan)
  if nb is not None:
    reached = steps_to_reach(none.by_lr(none.records["loss"].T)[nb].T, target, width)  # from [steps, S]
  capped = np.where(np.isfinite(reached), reached + 1, steps)  # never: at least the whole run
  ratio = float(np.mean(capped) / quarter)
  numbers = {**_about(ctx), "depth": depth, "steps": steps, "quarter_steps": quarter,
             "slowdown": stats.round_finite(ratio), **spread("slowdown", capped / quarter),
             "best_lr_at_edge": bool(sqrt_edge or none_edge),
             "target_loss": stats.finite_mean_std(target),
             "none_steps_to_target": [None if not np.isfinite(x) else int(x) + 1 for x in reached]}
  return Measurement(numbers, (
      f"Depth {depth} on the {data_name(ctx)}: 1/√d_k reaches loss {_fmt(numbers['target_loss']['mean'])} in {quarter} "
      f"steps; the unscaled model (each at its best learning rate) needs "
      f"{', '.join('never' if x is None else str(x) for x in numbers['none_steps_to_target'])} steps "
      f"(per seed; 'never' counted as {steps}): {_fmt(stats.round_finite(ratio))}× as many"
      + _still_at_edge([r for r, e in (("sqrt", sqrt_edge), ("none", none_edge)) if e]) + "."))


def converged(losses: np.ndarray, stall_fraction: float, last: int) -> np.ndarray:
  """Per run, whether it converged: finite, never above ``DIVERGENCE_FACTOR`` × its step-0 loss, and its final loss
  (mean of the last ``last`` steps) at most ``stall_fraction`` × its step-0 loss: [steps, M] -> bool [M]."""
  return ~diverged(losses) & ~stalled(losses, stall_fraction, last)


def tiny_log2_lrs(best_log2_lr: float, octaves_below: Sequence[float]) -> tuple[float, ...]:
  """The tiny learning rates (log2): ``octaves_below`` octaves below the best one, largest first."""
  return tuple(float(best_log2_lr) - float(o) for o in sorted(octaves_below))


def tiny_grids(ctx: Any, anchor: float | None = None) -> dict[Any, GridSpec]:
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
  return {**base, **{("tiny", rule): grid_spec(ctx, rule=rule, depth=s["depth_converge"], log2_lrs=log2_lrs,
                                               clip=s["clip"]) for rule in ("none", "sqrt")}}


def measure_depth6_tiny_lr_clipping(ctx: Any) -> Measurement:
  """What a tiny learning rate and clipping add to the convergence of the unscaled depth-6 model: the fraction of
  its runs that converge at tiny rates (octaves below 1/√d_k's best rate of the depth-6 grid) with gradients clipped,
  counted where the 1/√d_k runs so trained converge, minus the fraction that converge without them (at 1/√d_k's best
  rate, unclipped); beside it, the unscaled model at its own best rate without clipping."""
  s = sizes(ctx)
  depth, steps = s["depth_converge"], s["steps"][s["depth_converge"]]
  last = max(1, steps // 10)
  base = trained(ctx, depth6_grids(ctx))
  sqrt_grid, none_grid = base["sqrt"], base["none"]
  sqrt_best, none_best = _best(sqrt_grid), _best(none_grid)
  none_ok = converged(none_grid.records["loss"], s["stall_fraction"], last)
  own_ok = _at_best(none_grid, none_best, none_ok)
  own = {"best_learning_rate": None if none_best is None else _lr_label(none_grid.log2_lrs[none_best]),
         "converged_fraction": None if none_best is None else stats.round_finite(float(np.mean(own_ok)))}
  untuned_ok = _at_best(none_grid, sqrt_best, none_ok).astype(np.float64)  # [S]: at 1/√d_k's best rate, unclipped
  untuned = {"learning_rate": None if sqrt_best is None else _lr_label(sqrt_grid.log2_lrs[sqrt_best]),
             "converged_fraction": None if sqrt_best is None else stats.round_finite(float(np.mean(untuned_ok)))}
  numbers = {**_about(ctx), "depth": depth, "steps": steps, "clip": s["clip"],
             "octaves_below_best": list(s["tiny_octaves_below"]),
             "sqrt_best_learning_rate": untuned["learning_rate"],
             "converged": f"finite, never > {DIVERGENCE_FACTOR:g}x and final loss <= {s['stall_fraction']:g}x step 0",
             "tuning_gain": None, **spread("tuning_gain", []), "converged_fraction": None,
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
    by_lr[rule] = {_lr_label(x): int(ok[rule][i].sum()) for i, x in enumerate(log2_lrs)}
    if rule == "none":
      initial = stats.finite_mean_std(loss[0])
  fair = ok["sqrt"].all(axis=1)
  tuned = float(ok["none"][fair].mean()) if fair.any() else None
  n_fair = int(ok["none"][fair].size)
  gain = None if tuned is None else tuned - float(np.mean(untuned_ok))
  gain_seeds = ok["none"][fair].mean(axis=0) - untuned_ok if fair.any() else []
  numbers.update({
      "learning_rates": [_lr_label(x) for x in log2_lrs],
      "tuning_gain": stats.round_finite(gain), **spread("tuning_gain", gain_seeds),
      "converged_fraction": stats.round_finite(tuned), "runs_counted": n_fair,
      "converged_by_lr": by_lr, "converged_fraction_sqrt": stats.round_finite(float(ok["sqrt"].mean())),
      "initial_loss_none": initial, "final_loss": final})
  if tuned is None:
    words = "1/√d_k does not converge at the tiny rates either, so these steps cannot tell"
  else:
    words = (f"without them, at 1/√d_k's best rate {untuned['learning_rate']} unclipped, "
             f"{int(untuned_ok.sum())} of {untuned_ok.size} unscaled runs converge: the tiny rate and clipping change "
             f"the fraction that converges by {_fmt(gain, '+.2f')} ({_fmt(tuned, '.2f')} with them, "
             f"{_fmt(untuned['converged_fraction'], '.2f')} without)")
  return Measurement(numbers, (
      f"Depth {depth}, {steps} steps on the {data_name(ctx)} at learning rates {', '.join(numbers['learning_rates'])} "
      f"({' and '.join(f'{o:g}' for o in s['tiny_octaves_below'])} octaves below 1/√d_k's best, "
      f"{numbers['sqrt_best_learning_rate']}) with gradients clipped to norm {s['clip']:g}: {int(ok['none'].sum())} of "
      f"{ok['none'].size} unscaled runs converged (loss {_fmt(initial['mean'])} -> {_fmt(final['none']['mean'])}; "
      f"{n_fair} at rates where every 1/√d_k run converged) and {int(ok['sqrt'].sum())} of {ok['sqrt'].size} with "
      f"1/√d_k (-> {_fmt(final['sqrt']['mean'])}); {words}. At its own best rate {own['best_learning_rate'] or 'n/a'} "
      f"without clipping, {_fmt(own['converged_fraction'], '.2f')} of the unscaled runs converge."))


# ----------------------------------------------------------------------------
# Note 2 §2.2, §4: dividing by d_k, √d_k optimal, norms beside the scale, stable gradients with the scale.


def linear_grids(ctx: Any) -> dict[str, GridSpec]:
  """{rule: spec}: 1/d_k and 1/√d_k at the small depth."""
  return rule_grids(ctx, ("linear", "sqrt"), sizes(ctx)["depth_small"])


def measure_linear_expressiveness(ctx: Any) -> Measurement:
  """Final loss with 1/d_k against 1/√d_k at the small depth, each at its best learning rate, relative."""
  c = compare_at_best_lr(ctx, trained(ctx, linear_grids(ctx)), "linear", "sqrt", sizes(ctx)["depth_small"])
  return Measurement({**_about(ctx), **c}, (
      f"Depth {c['depth']}, {c['steps']} steps on the {data_name(ctx)}: 1/d_k reached a final loss of "
      f"{_fmt(c['linear']['final_loss']['mean'])} vs {_fmt(c['sqrt']['final_loss']['mean'])} with 1/√d_k (each at its "
      f"best learning rate): a relative gap of {_fmt(c['relative_final_gap'])}"
      f"{edge_words(c, {'linear': '1/d_k', 'sqrt': '1/√d_k'})}."))


def multiplier_spec(ctx: Any, log2_lr: float, log2_mults: Sequence[float], label: str | None = None) -> GridSpec:
  """1/√d_k at the small depth with each logit multiplier c·(1/√d_k), log2 c in ``log2_mults``, at the one learning
  rate ``log2_lr``."""
  s = sizes(ctx)
  alphas = [2.0 ** c * math.sqrt(s["head_dim"]) for c in log2_mults]  # α/d_head = c/√d_head
  return grid_spec(ctx, rule="sqrt", depth=s["depth_small"], log2_lrs=(log2_lr,), attn_mults=alphas, label=label)


def sqrt_optimal_grids(ctx: Any, log2_lr: float | None = None) -> dict[str, GridSpec]:
  """{"sqrt": 1/√d_k at the small depth, "multipliers": ``multiplier_spec`` of the octaves ``attn_log2_mults`` at the
  one learning rate ``log2_lr``}.

  ``log2_lr`` is 1/√d_k's best learning rate, read from its grid's records; None (a plan, before anything is
  trained, or a grid whose every rate had a NaN seed): the grid's first rate.
  """
  s = sizes(ctx)
  sqrt = grid_spec(ctx, rule="sqrt", depth=s["depth_small"])
  log2_lr = sqrt.log2_lrs[0] if log2_lr is None else log2_lr
  return {"sqrt": sqrt, "multipliers": multiplier_spec(ctx, log2_lr, s["attn_log2_mults"])}


def logit_variance_fn(model_config: model_lib.ModelConfig):
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
      _, logits, _, mask = attention_lib.attention_with_aux(q, k, k, rule=model_config.attention_rule,
                                                            is_causal=model_config.causal,
                                                            logit_soft_cap=model_config.logit_soft_cap)
      out.append(metrics_lib.logit_stats_per_head(logits, mask)["var"])
    return jnp.stack(out)

  return jax.jit(jax.vmap(one, in_axes=(0, None)))


def measure_sqrt_optimal(ctx: Any) -> Measurement:
  """The note's reading: the variance of the 1/√d_k logits after training at 1/√d_k's best learning rate (|log2 Var|);
  another reading beside it: the loss-optimal logit multiplier c·(1/√d_k) over c in octaves at that rate (log2 c),
  the grid widened past an edge its optimum sits at."""
  s = sizes(ctx)
  depth = s["depth_small"]
  steps = s["steps"][depth]
  last = max(1, steps // 10)
  sqrt, best, best_at_edge = widened_at_best(ctx, ctx.planner.train(sqrt_optimal_grids(ctx)["sqrt"]))
  log2_lr = sqrt.log2_lrs[0 if best is None else best]
  # The note's reading: 1/√d_k normalizes the logits' variance to 1 (here in training).
  tokens = dataset_of(ctx).eval_batch(0, int(ctx.seed))["inputs"]
  fn = logit_variance_fn(sqrt.model_config)
  var = {when: _at_best(sqrt, best, np.mean(np.asarray(jax.device_get(fn(params, tokens)), np.float64), axis=(1, 2)))
         for when, params in (("init", sqrt.initial_params()), ("final", sqrt.final_params))}  # [S] each
  with np.errstate(invalid="ignore", divide="ignore"):
    log2_var = np.log2(var["final"])
    stat = abs(float(np.log2(np.mean(var["final"]))))
  # Another reading: the multiplier of 1/√d_k with the lowest final loss.
  log2_c = tuple(float(x) for x in s["attn_log2_mults"])
  run = trained(ctx, sqrt_optimal_grids(ctx, log2_lr))["multipliers"]
  found = locate_optimum([(log2_c, run)], last=last, x="log2_mult", octaves=s["edge_octaves"],
                         widen=lambda values: ctx.planner.train(multiplier_spec(
                             ctx, log2_lr, values, f"depth-{depth} logit multipliers, widened"), like=run.spec))
  opt = found["optimum"]
  numbers = {**_about(ctx), "depth": depth, "steps": steps, "learning_rate": _lr_label(log2_lr),
             "best_lr_at_edge": best_at_edge,
             "logit_variance": "variance of the visible attention logits (after RoPE and 1/√d_k) of a held-out batch, "
                               "per layer and head, averaged",
             "logit_variance_init": stats.finite_mean_std(var["init"]),
             "logit_variance_final": stats.finite_mean_std(var["final"]),
             "abs_log2_logit_variance": stats.round_finite(stat), **spread("abs_log2_logit_variance", log2_var),
             "log2_multipliers": list(log2_c), "widened_by": found["widened_by"],
             "optimal_log2_multiplier": stats.round_finite(opt),
             "abs_optimal_log2_multiplier": stats.round_finite(abs(opt)) if opt is not None else None,
             **spread("abs_optimal_log2_multiplier", found["optimum_seeds"]),
             "multiplier_optimum_at_edge": found["at_edge"],
             "final_loss_by_log2_multiplier": found["final_loss_by_value"]}
  init, final = numbers["logit_variance_init"], numbers["logit_variance_final"]
  widened = (f" (widened to 2^{', 2^'.join(f'{v:g}' for v in found['widened_by'])} past the edge its optimum sat at)"
             if found["widened_by"] else "")
  return Measurement(numbers, (
      f"Depth {depth}, {steps} steps on the {data_name(ctx)} at 1/√d_k's best learning rate {_lr_label(log2_lr)}. "
      f"Variance normalization (the note's reading): the variance of the 1/√d_k logits of a held-out batch is "
      f"{_pm(init['mean'], init['std'])} at initialization and {_pm(final['mean'], final['std'])} after training "
      f"(mean ± std over seeds). Loss-optimal multiplier (another reading): over logit multipliers 2^{log2_c[0]:g} .. "
      f"2^{log2_c[-1]:g} × 1/√d_k{widened} the final loss is lowest at 2^{_fmt(opt, '.2f')} × 1/√d_k "
      f"(final losses " + ", ".join(f"{_fmt(v)} at 2^{c}" for c, v in found["final_loss_by_value"].items()) + ")."))


NORM_NAMES = {"layer": "LayerNorm", "rms": "RMSNorm"}


def norm_grids(ctx: Any) -> dict[tuple[str, str], GridSpec]:
  """{(norm, rule): spec}: unscaled and 1/√d_k at the small depth with LayerNorm and with RMSNorm blocks."""
  depth = sizes(ctx)["depth_small"]
  return {(norm, rule): grid_spec(ctx, rule=rule, depth=depth, norm=norm) for norm in NORM_NAMES
          for rule in ("none", "sqrt")}


def measure_norms_dont_replace_scaling(ctx: Any) -> Measurement:
  """The relative final-loss gap of unscaled over 1/√d_k with LayerNorm blocks and with RMSNorm blocks (the smaller)."""
  depth = sizes(ctx)["depth_small"]
  runs = trained(ctx, norm_grids(ctx))
  per = {norm: compare_at_best_lr(ctx, {rule: runs[(norm, rule)] for rule in ("none", "sqrt")}, "none", "sqrt", depth)
         for norm in NORM_NAMES}
  gaps = [c["relative_final_gap"] for c in per.values()]
  stat = min(g for g in gaps if g is not None) if any(g is not None for g in gaps) else None
  n = len(seeds_of(ctx))
  per_seed = np.min([_seed_values(c["relative_final_gap_seeds"], n) for c in per.values()], axis=0)
  return Measurement(
      {**_about(ctx), "depth": depth, "min_relative_final_gap": stat, **spread("min_relative_final_gap", per_seed),
       "best_lr_at_edge": any(c["best_lr_at_edge"] for c in per.values()),
       "by_norm": {n: {k: c[k] for k in ("relative_final_gap", "relative_final_gap_per_seed", "none", "sqrt")}
                   for n, c in per.items()}},
      f"Depth {depth} on the {data_name(ctx)}, each at its best learning rate: removing 1/√d_k raises the final loss "
      "by " + " and ".join(f"{_fmt(c['relative_final_gap'])} (relative) with {NORM_NAMES[n]}" for n, c in per.items())
      + " blocks" + "".join(edge_words(c, {"none": f"unscaled {NORM_NAMES[n]}", "sqrt": f"1/√d_k {NORM_NAMES[n]}"})
                            for n, c in per.items()) + ".")


def measure_scaled_grads_stable(ctx: Any) -> Measurement:
  """Decades spanned by the global gradient norm over training with 1/√d_k at its best learning rate (its grid widened
  past an edge that rate sits at), per depth (the largest over depths decides), and the same measurement without the
  scale beside it (at the best rate of its grid)."""
  runs = trained(ctx, depth_grids(ctx))
  spans: dict[str, dict[int, np.ndarray]] = {}
  edges = []
  for rule in ("sqrt", "none"):
    spans[rule] = {}
    for depth in _depths(ctx):
      run = runs[(rule, depth)]
      if rule == "sqrt":  # the verdict reads 1/√d_k's spans (its grid widened); the unscaled ones are beside them
        run, best, at_edge = widened_at_best(ctx, run)
        edges += [f"depth {depth}"] if at_edge else []
      else:
        best = _best(run)
      g = run.records["grad_norm"]
      with np.errstate(invalid="ignore", divide="ignore"):
        decades = np.log10(np.nanmax(g, axis=0) / np.nanmin(g, axis=0))
      spans[rule][depth] = _at_best(run, best, decades)  # [S]
  per_seed = {rule: np.max(np.stack(list(by_depth.values())), axis=0) for rule, by_depth in spans.items()}  # [S]
  largest = {rule: max(float(np.mean(v)) for v in by_depth.values()) for rule, by_depth in spans.items()}
  with np.errstate(invalid="ignore"):
    difference = per_seed["none"] - per_seed["sqrt"]  # paired by initialization seed
  numbers = {**_about(ctx), "max_decades": stats.round_finite(largest["sqrt"]),
             **spread("max_decades", per_seed["sqrt"]), "best_lr_at_edge": bool(edges),
             "decades_by_depth": {str(d): stats.finite_mean_std(v) for d, v in spans["sqrt"].items()},
             "unscaled": {"max_decades": stats.round_finite(largest["none"]), **spread("max_decades", per_seed["none"]),
                          "decades_by_depth": {str(d): stats.finite_mean_std(v) for d, v in spans["none"].items()}},
             "max_decades_unscaled_minus_scaled": stats.finite_mean_std(difference),
             "max_decades_unscaled_minus_scaled_se": stats.round_finite(stats.standard_error(difference))}
  words = lambda rule: ", ".join(_fmt(float(np.mean(v)), ".2f") for v in spans[rule].values())
  depths = ", ".join(map(str, spans["sqrt"]))
  diff = numbers["max_decades_unscaled_minus_scaled"]["mean"]
  return Measurement(numbers, (
      f"On the {data_name(ctx)}, each at its best learning rate, the global gradient norm spans {words('sqrt')} "
      f"decades at depths {depths} with 1/√d_k over training (max / min over steps, mean over seeds); the same "
      f"measurement without the scale spans {words('none')} decades (the largest over depths, unscaled minus scaled: "
      f"{_pm(diff, numbers['max_decades_unscaled_minus_scaled_se'], '.2f')} per seed)"
      + (f"; 1/√d_k's best learning rate stays at the edge of its widened grid at {', '.join(edges)}" if edges else "")
      + "."))


# ----------------------------------------------------------------------------
# The attention path's gradient (W_q, W_k) of a trained grid, at its initial and final parameters.


def attention_grad_norm_fn(model_config: model_lib.ModelConfig, opt_config: optim.OptimizerConfig):
  """A (stacked params [M, ...] with one ``block_{i}`` per block, batch) -> [M]: the global norm of dL/dW_q and
  dL/dW_k over all blocks. Models whose rule is only a logit factor share one compiled function, their α passed as a
  value, as in their training program (``scaling.training.train.as_program``)."""
  program = train_lib.as_program(model_config, opt_config)
  fn = _attention_grad_norm(program.model_config)
  alpha = None if program.logit_alpha is None else np.float32(program.logit_alpha)
  return lambda params, batch: fn(params, batch, alpha)


@functools.lru_cache(maxsize=16)
def _attention_grad_norm(model_config: model_lib.ModelConfig):
  """``attention_grad_norm_fn``'s jitted function of (params, batch, alpha) (alpha: None, or α of every layer's
  logit scale α/d_head)."""

  def one(params, batch, alpha):
    model = model_lib.Transformer(model_config, attn_mult=alpha)
    grads = jax.grad(lambda p: train_lib.loss_fn(p, batch, model=model)[0])(params)
    return optax.tree.norm([grads[f"block_{i}"]["attn"][n] for i in range(model_config.depth)
                            for n in ("query", "key")])

  return jax.jit(jax.vmap(one, in_axes=(0, None, None)))


def attention_grad_norms(ctx: Any, run: GridRun) -> dict[str, np.ndarray]:
  """{"init", "final"}: per member [M], the attention-path gradient norm on the first held-out batch."""
  batch = dataset_of(ctx).eval_batch(0, int(ctx.seed))
  fn = attention_grad_norm_fn(run.model_config, run.opt_config)
  return {"init": np.asarray(jax.device_get(fn(run.initial_params(), batch)), np.float64),
          "final": np.asarray(jax.device_get(fn(run.final_params, batch)), np.float64)}


# ----------------------------------------------------------------------------
# The claims.


def _relative_gap_criterion(rule: str, reference: str, denominator: str, depth: int, holds: float = 0.02,
                            fails: float = 0.0, reason: str = "'worse' = at least 2% higher final loss at the best "
                            "learning rate of each; equal or better is not worse") -> Criterion:
  """The criterion of ``compare_at_best_lr``'s relative final-loss gap of ``rule`` over ``reference`` at ``depth``."""
  return Criterion("relative_final_gap", f"(final loss {rule} − final loss {reference}) / {denominator} at depth "
                   f"{depth}, each at its best learning rate, mean over seeds", holds=(">=", holds),
                   fails=("<=", fails), reason=reason, noise=True, edge="best_lr_at_edge")


TRAINING_CLAIMS: tuple[Claim, ...] = (
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
        "train_depth6_converges_worse", "note 2 §4, follow-up 1",
        "Without scaling a 6-layer model may converge, but to a worse loss.",
        _relative_gap_criterion("unscaled", "1/√d_k", "final loss 1/√d_k", 6),
        measure_depth6_converges_worse, training=True, grids=depth6_grids),
    Claim(
        "train_depth6_oscillates", "note 2 §4, follow-up 1",
        "Without scaling the 6-layer loss curve oscillates strongly.",
        Criterion("roughness_ratio", "RMS of the step-to-step loss change in the second half of training, unscaled "
                  "over 1/√d_k, depth 6, each at its best learning rate", holds=(">=", 2.0), fails=("<=", 1.0),
                  noise=True, edge="best_lr_at_edge",
                  reason="'very oscillating' = at least twice as jagged as the scaled curve; no more jagged is not"),
        measure_depth6_oscillates, training=True, grids=depth6_grids),
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
        "Without scaling a 6-layer model can still converge with careful tuning: a tiny learning rate and gradient "
        "clipping are what make it converge.",
        Criterion("tuning_gain", "fraction of unscaled depth-6 (learning rate, seed) runs that converge (finite, never "
                  "above 3 × the initial loss, final loss at most 0.9 × the initial) with a tiny learning rate and "
                  "clipping (2 and 4 octaves below 1/√d_k's best rate of the depth-6 grid, gradients clipped to norm "
                  "1; counted at the rates where every 1/√d_k run so trained converges) minus the fraction that "
                  "converge without them (at 1/√d_k's best rate, unclipped), paired by seed",
                  holds=(">=", 0.5), fails=("<=", 0.0), noise=True,
                  reason="the note offers the tiny rate and clipping as the careful tuning under which the unscaled "
                         "model can still converge, i.e. what makes it converge: it holds if they turn at least half "
                         "the runs from not converging into converging, and does not hold if the model converges as "
                         "often without them (or not with them either); 'tiny' is relative to the rate that works "
                         "(4× and 16× below it), the only reading that applies at every size"),
        measure_depth6_tiny_lr_clipping, training=True, grids=tiny_grids),
    Claim(
        "train_post_softmax_worse", "note 1 §4 ⑤, §5",
        "The division belongs inside the logits: applied after the softmax it is a mistake (in training; its logits "
        "are unscaled, so this mostly measures 'no scaling': the gap to the unscaled model is reported beside).",
        _relative_gap_criterion("with softmax(q·k)·v/√d_k", "with softmax(q·k/√d_k)·v", "the latter", 2),
        measure_post_softmax_training, training=True, grids=post_softmax_grids),
    Claim(
        "train_depth12_cannot_converge", "note 2 §4, follow-up 1; §5",
        "Without scaling, models of 12 or more layers cannot converge (they almost certainly diverge).",
        Criterion("failed_fraction_none", "fraction of unscaled depth-12 (learning rate, seed) runs that diverge or "
                  "stall (final loss > 0.9 × the initial), pooled over pre-/post-LN with and without warmup, at "
                  "learning rates where no 1/√d_k run of the same setup does either", holds=(">=", 0.8),
                  fails=("<=", 0.2), noise=True,
                  reason="'almost certainly' = at least 4 runs in 5; at most 1 in 5 contradicts it"),
        measure_depth12_cannot_converge, training=True, grids=depth12_grids),
    Claim(
        "train_linear_less_expressive", "note 2 §2.2",
        "Dividing by d_k makes attention nearly uniform, so the model loses focus: expressiveness drops severely.",
        _relative_gap_criterion("1/d_k", "1/√d_k", "final loss 1/√d_k", 2, holds=0.05, fails=0.01,
                                reason="'severely' = at least 5% higher final loss; within 1% is no loss"),
        measure_linear_expressiveness, training=True, grids=linear_grids),
    Claim(
        "train_sqrt_optimal", "note 2 §2.2",
        "Dividing by √d_k is the optimal solution for variance normalization: it keeps the logits' variance at 1, "
        "neither saturated nor uniform.",
        Criterion("abs_log2_logit_variance", "|log2 Var| of the attention logits with 1/√d_k after training (the "
                  "note's reading: variance normalization; visible logits of a held-out batch after RoPE and the "
                  "scale, per layer and head, averaged; depth 2, at 1/√d_k's best learning rate, mean over seeds)",
                  holds=("<=", 1.0), fails=(">=", 3.0), noise=True, edge="best_lr_at_edge",
                  reason="the note's words: √d_k is the optimal solution for variance normalization, keeping the "
                         "logits' variance at 1 (std about 1); '~1' = within a factor 2 (std within √2); a factor 8 "
                         "(std off by 2^1.5, as far as the multiplier the other reading calls a different optimum) is "
                         "not normalized"),
        measure_sqrt_optimal, training=True, grids=sqrt_optimal_grids,
        beside=(Reading("the loss-optimal multiplier (another reading: 'the optimal choice of logit scale', not the "
                        "note's words)",
                        Criterion("abs_optimal_log2_multiplier", "|log2 c| of the logit multiplier c × 1/√d_k with "
                                  "the lowest final loss (parabola vertex over c in octaves; depth 2, at 1/√d_k's "
                                  "best learning rate)", holds=("<=", 0.5), fails=(">=", 1.5), noise=True,
                                  edge="multiplier_optimum_at_edge",
                                  reason="'optimal' = the best multiplier within √2 of 1/√d_k; 2^1.5 away is a "
                                         "different optimum")),)),
    Claim(
        "train_norms_dont_replace_scaling", "note 2 §2.4, follow-up 2",
        "LayerNorm and RMSNorm do not replace the attention scaling.",
        Criterion("min_relative_final_gap", "the smaller over LayerNorm and RMSNorm blocks of (final loss unscaled − "
                  "final loss 1/√d_k) / final loss 1/√d_k at depth 2, each at its best learning rate",
                  holds=(">=", 0.02), fails=("<=", 0.0), noise=True, edge="best_lr_at_edge",
                  reason="with either norm, removing the scale must still cost at least 2% loss; no cost = replaced"),
        measure_norms_dont_replace_scaling, training=True, grids=norm_grids),
    Claim(
        "train_scaled_grads_stable", "note 1 §2",
        "With √d_k scaling the gradients are stable.",
        Criterion("max_decades", "largest over depths of log10(max / min over steps) of the global gradient norm with "
                  "1/√d_k at its best learning rate (mean over seeds; the same without the scale beside it)",
                  holds=("<=", 1.0), fails=(">=", 2.0), noise=True, edge="best_lr_at_edge",
                  reason="'stable' = within one decade over training; two decades is not stable"),
        measure_scaled_grads_stable, training=True, grids=depth_grids),
    Claim(
        "train_qk_correlate", "note 1 §3",
        "In training, q and k become correlated (so the independence behind Var(q·k) = d_k stops holding).",
        Criterion("alignment_increase_sqrt", "increase during training of |mean cos(q_t, k_t)| (same position, per "
                  "layer and head, averaged) with 1/√d_k, mean over widths and seeds", holds=(">=", 0.1),
                  fails=("<=", 0.02), noise=True,
                  reason="a rise of 0.1 in cosine is a correlation; 0.02 is within init noise"),
        measure_qk_correlate, training=True, grids=qk_grids),
    Claim(
        "train_mup_lr_transfer", "note 1 §3, §4 ②",
        "μP gives initialization and scaling rules that are consistent across width (Q/K initialization and the "
        "scale matched at every width).",
        Criterion("mup_max_coord_slope", "the coordinate check of μP (the note's reading: width-consistent "
                  "initialization and scaling): the largest slope of log2 RMS against log2 width of any layer output "
                  "(embedding, each block's attention logits, attention and MLP outputs, readout) at any step of the "
                  "warmup, at the learning rate nearest 1e-2 (SP's beside it)", holds=("<=", coord_check.TOLERANCE),
                  fails=(">=", 0.5), noise=True,
                  reason="'consistent across width' = every layer's output keeps its size as the width grows: slopes "
                         f"at most {coord_check.TOLERANCE:g} (the coordinate check's tolerance, Tensor Programs V "
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
