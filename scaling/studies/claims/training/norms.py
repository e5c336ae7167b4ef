"""Training claims about the blocks' normalization (``Claim(training=True)``): RMSNorm against LayerNorm.

Note 2 §4, follow-up 2 (``shared/seeds/004_383f650843b84e3b.txt``) says that RMSNorm performs on par with LayerNorm
in large-scale training. Its measurement trains the depth-2 model of the training claims
(``scaling.studies.claims.training.grids``) with 1/√d_k and either norm, on the same grids of learning rates × seeds
(``rmsnorm_grids``: the same grids as the claim that the norms do not replace the scale, trained once), and compares
their final losses, each at its best learning rate.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from scaling.studies import stats
from scaling.studies.grid.run import GridRun
from scaling.studies.grid.run import GridSpec
from scaling.studies.claims.training.best_learning_rate import at_best_lr
from scaling.studies.claims.context import Context
from scaling.studies.claims.training.grids import grid_spec
from scaling.studies.claims.training.grids import NORM_NAMES
from scaling.studies.claims.training.grids import trained
from scaling.studies.claims.training.numbers import about
from scaling.studies.claims.training.sizes import data_name
from scaling.studies.claims.training.sizes import sizes
from scaling.studies.claims.verdicts import Claim
from scaling.studies.claims.verdicts import Criterion
from scaling.studies.claims.verdicts import Measurement

NORMS = tuple(NORM_NAMES)  # ("layer", "rms")


def on_par_gap(layer: np.ndarray, rms: np.ndarray) -> dict[str, float]:
  """How far RMSNorm's final losses are from LayerNorm's, relative, per seed, and its bound within seed noise.

  Args:
    layer: [S] final losses with LayerNorm blocks (one per seed, at LayerNorm's best learning rate).
    rms: [S] final losses with RMSNorm blocks (the same seeds, at RMSNorm's best learning rate).

  Returns:
    {"gap": mean over seeds of (rms − layer) / layer, "gap_sample_std": its sample std over seeds (NaN with one
    seed), "max_abs_gap_within_noise": |gap| + 2 × gap_sample_std (NaN with one seed or a non-finite loss)}.
  """
  layer, rms = np.asarray(layer, np.float64), np.asarray(rms, np.float64)
  if layer.shape != rms.shape or layer.ndim != 1 or not layer.size:
    raise ValueError(f"layer and rms must be [S] final losses of the same seeds, got shapes {layer.shape} and "
                     f"{rms.shape}")
  gaps = (rms - layer) / layer
  gap = float(np.mean(gaps))
  spread = float(np.std(gaps, ddof=1)) if gaps.size > 1 else math.nan
  return {"gap": gap, "gap_sample_std": spread, "max_abs_gap_within_noise": abs(gap) + 2 * spread}


def rmsnorm_grids(ctx: Context) -> dict[str, GridSpec]:
  """{norm: spec}: 1/√d_k at the small depth with LayerNorm and with RMSNorm blocks."""
  depth = sizes(ctx)["depth_small"]
  return {norm: grid_spec(ctx, rule="sqrt", depth=depth, norm=norm) for norm in NORMS}


def _final_at_best(ctx: Context, run: GridRun) -> dict[str, Any]:
  """A trained grid at its best learning rate (``scaling.studies.claims.training.best_learning_rate.at_best_lr``, the final
  loss the mean of the last tenth of the steps), with "last" the steps averaged."""
  last = max(1, run.records["loss"].shape[0] // 10)
  return {**at_best_lr(ctx, run, last), "last": last}


def measure_rmsnorm_on_par(ctx: Context) -> Measurement:
  """RMSNorm's final loss against LayerNorm's at depth 2 with 1/√d_k, each at its best learning rate: the relative gap
  and its bound within seed noise."""
  depth = sizes(ctx)["depth_small"]
  runs = {norm: _final_at_best(ctx, run) for norm, run in trained(ctx, rmsnorm_grids(ctx)).items()}
  numbers: dict[str, Any] = {**about(ctx), "depth": depth, "final_loss_mean_of_last": runs["layer"]["last"],
                             "max_abs_gap_within_noise": None,
                             "best_lr_at_edge": any(r["best_at_grid_edge"] for r in runs.values())}
  for norm, r in runs.items():
    numbers[norm] = {"best_learning_rate": r["best_learning_rate"], "best_at_grid_edge": r["best_at_grid_edge"],
                     "widened_by": r["widened_by"],
                     "final_loss": stats.finite_mean_std([] if r["final_at_best"] is None else r["final_at_best"]),
                     "final_loss_by_lr": r["final_loss_by_lr"]}
  where = f"Depth {depth} with 1/√d_k on the {data_name(ctx)}"
  if any(r["final_at_best"] is None for r in runs.values()):
    failed = " and ".join(NORM_NAMES[n] for n, r in runs.items() if r["final_at_best"] is None)
    return Measurement(numbers, f"{where}: no learning rate of the {failed} grid kept every seed finite, so there "
                       "is no best run to compare.")
  gap = on_par_gap(runs["layer"]["final_at_best"], runs["rms"]["final_at_best"])
  numbers.update({"max_abs_gap_within_noise": stats.round_finite(gap["max_abs_gap_within_noise"]),
                  "relative_gap": stats.round_finite(gap["gap"]),
                  "relative_gap_sample_std": stats.round_finite(gap["gap_sample_std"])})
  noise = (f"|gap| + twice its sample std over seeds is {gap['max_abs_gap_within_noise']:.3g}"
           if math.isfinite(gap["gap_sample_std"]) else "one seed, so no spread to bound it with")
  fmt = lambda n: (f"{np.mean(runs[n]['final_at_best']):.4f} (best learning rate {runs[n]['best_learning_rate']}"
                   + (f", its grid widened to {', '.join(runs[n]['widened_by'])}" if runs[n]["widened_by"] else "")
                   + (", still at the grid's edge" if runs[n]["best_at_grid_edge"] else "") + ")")
  return Measurement(numbers, (
      f"{where}, each at its best learning rate: final loss {fmt('rms')} with RMSNorm blocks against {fmt('layer')} "
      f"with LayerNorm blocks (mean of {len(runs['layer']['final_at_best'])} seeds): a relative gap of "
      f"{gap['gap']:+.4f}; {noise}."))


NORM_CLAIMS: tuple[Claim, ...] = (
    Claim("train_rmsnorm_on_par", "note 2 §4, follow-up 2",
          "RMSNorm performs on par with LayerNorm in (large-scale) training.",
          Criterion("max_abs_gap_within_noise", "|(final loss RMSNorm − final loss LayerNorm) / final loss LayerNorm| "
                    "plus twice the sample std over seeds of that per-seed gap, depth 2, 1/√d_k, each norm at its best "
                    "learning rate (needs 2 or more seeds)", holds=("<=", 0.02), fails=(">", 0.05),
                    edge="best_lr_at_edge",
                    reason="'on par' = final losses within 2% even at the edge of seed noise; a gap that can reach 5% "
                    "is a visible difference"),
          measure_rmsnorm_on_par, training=True, grids=rmsnorm_grids),
)
"""The normalization claims trained here, in the order of their table."""
