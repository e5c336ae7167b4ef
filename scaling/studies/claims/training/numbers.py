"""How a training claim reports its numbers: the data, mode and seeds first, each statistic's spread over seeds,
and the learning rates and values of its sentence.

Every verdict carries the seeds' spread: each measurement reports its statistic's standard error over seeds
(``<statistic>_se``, from the per-seed values ``<statistic>_seeds``, ``spread``), and a threshold within two standard
errors makes the verdict inconclusive (``scaling.studies.claims.verdicts.Criterion.noise``).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from scaling.studies import stats
from scaling.studies.claims.context import Context
from scaling.studies.claims.training.sizes import data_name
from scaling.studies.claims.training.sizes import seeds_of


def about(ctx: Context) -> dict[str, Any]:
  """The numbers every training claim reports first: the data, the mode and the seeds."""
  return {"data": data_name(ctx), "mode": ctx.mode, "seeds": list(seeds_of(ctx))}


def spread(statistic: str, per_seed: Sequence[float] | np.ndarray) -> dict[str, Any]:
  """The numbers of a statistic's spread over seeds: ``<statistic>_se`` (``standard_error``, what a criterion with
  ``noise`` reads) and ``<statistic>_seeds`` (the per-seed values, None for a non-finite one)."""
  values = np.asarray(per_seed, np.float64).ravel()
  return {f"{statistic}_se": stats.round_finite(stats.standard_error(values)),
          f"{statistic}_seeds": [stats.round_finite(v) for v in values]}


def seed_values(values: Sequence[float | None], n: int) -> np.ndarray:
  """Per-seed values reported as a list (None: not finite) as float64 [n] (NaN for None; all NaN when empty)."""
  return np.array([np.nan if v is None else v for v in values], np.float64) if values else np.full(n, np.nan)


def lr_label(log2_lr: float) -> str:
  """A learning rate given by its log2, as the numbers write it (3 significant digits)."""
  return f"{2.0 ** log2_lr:.3g}"


def fmt(x: float | None, spec: str = ".3g") -> str:
  """``x`` formatted by ``spec`` ("n/a" when None)."""
  return "n/a" if x is None else format(x, spec)


def pm(x: float | None, se: float | None, spec: str = ".3g") -> str:
  """"x ± se" (just x when the standard error is unknown)."""
  return fmt(x, spec) + ("" if se is None or x is None else f" ± {se:.2g}")
