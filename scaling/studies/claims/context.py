"""What the claims about attention logit scaling are measured on, and how their measured values are worded.

``Context`` holds the mode (``MODES``: the sizes of ``--mode=quick``, ``cpu_hour`` and ``paper``), the head dims,
sequence length, seeds and text file, and caches measurements that several claims share (the d_k sweep of
``SWEEP_RULES``; the training grids, each trained once by its ``GridPlanner``). The formatting helpers below turn
per-seed values into the numbers and sentences of a ``scaling.studies.claims.verdicts.Measurement``; the measurements
themselves are in the random-input families (gathered in ``scaling.studies.claims.table``) and
``scaling.studies.claims.training.families``.
"""

from __future__ import annotations

import os
import shlex
import zlib
from typing import Any, Callable

import jax
import numpy as np

from scaling.base import compilation
from scaling.studies.grid import run as grid_run
from scaling.studies import stats
from scaling.studies import sweep as sweep_lib
from scaling.base.validation import ConfigError


MODES: dict[str, dict[str, Any]] = {
    "quick": {"d_k": (16, 64, 128, 1024), "seq_len": 128, "num_seeds": 2, "widths": (64, 256, 1024)},
    "cpu_hour": {"d_k": (16, 32, 64, 128, 256, 512, 1024), "seq_len": 128, "num_seeds": 4,
                 "widths": (64, 256, 1024, 2048)},
    "paper": {"d_k": (16, 32, 64, 128, 256, 512, 1024), "seq_len": 256, "num_seeds": 4,
              "widths": (64, 256, 512, 1024, 2048)},
    "paper_8min": {"d_k": (16, 32, 64, 128, 256, 512, 1024), "seq_len": 256, "num_seeds": 4,
                   "widths": (64, 256, 512, 1024, 2048)},
}
"""Sizes per mode: head dims and sequence length of the random-input sweeps, seeds, and the model widths of the
fixed-head-dim claim. "quick" keeps the ends of the d_k range and the two head dims the notes name; "cpu_hour" is the
largest setting planned for about an hour on two CPU cores; "paper" the notes' sequences of 256 (its training sizes
are ``scaling.studies.claims.training.sizes.SIZES["paper"]``); "paper_8min" the same random inputs with the training cut
to fit 8 minutes on one H200 (``SIZES["paper_8min"]``, what ``scripts/device_claims.sh`` runs)."""



def hardware() -> str:
  """The device the claims run on, in words (backend, device kind and count, host CPU cores)."""
  devices = jax.devices()
  return (f"{jax.default_backend()}: {len(devices)} × {devices[0].device_kind}, {os.cpu_count()} host CPU cores")

BATCH, HEADS = 4, 2  # sequences and heads per seed (as the d_k sweep's defaults)
COMPUTE_DTYPES = ("float32", "bfloat16")
"""The training models' compute precisions (``ModelConfig.dtype``: projections, MLP and residual stream; parameters,
attention logits and softmax stay float32) a run may choose; the default first."""
SWEEP_RULES = ("none", "sqrt", "linear", "quadratic")


class Context:
  """What the claims are measured on (mode, sizes, seeds, text file), with measurements shared between claims.

  ``d_k``, ``seq_len`` and ``num_seeds`` default to the mode's (``MODES``);
  ``text_file`` is read only by the training claims, whose grids ``planner`` plans and trains (each once), in
  ``compute_dtype`` (one of ``COMPUTE_DTYPES``) unless a grid names its own precision.
  """

  def __init__(self, *, mode: str = "quick", d_k: tuple[int, ...] | None = None, seq_len: int | None = None,
               num_seeds: int | None = None, seed: int = 0, text_file: str | None = None,
               compute_dtype: str = "float32"):
    if mode not in MODES:
      raise ConfigError(f"unknown mode {mode!r}; known: {', '.join(MODES)}")
    if compute_dtype not in COMPUTE_DTYPES:
      raise ConfigError(f"unknown compute_dtype {compute_dtype!r}; known: {', '.join(COMPUTE_DTYPES)}")
    sizes = MODES[mode]
    self.mode, self.seed, self.text_file, self.compute_dtype = mode, int(seed), text_file, compute_dtype
    self.d_k = tuple(sorted(set(d_k or sizes["d_k"])))
    self.seq_len = int(seq_len or sizes["seq_len"])
    self.num_seeds = int(num_seeds or sizes["num_seeds"])
    self.widths = tuple(sizes["widths"])
    self._cache: dict[Any, Any] = {}
    self.planner = grid_run.GridPlanner()

  def sizes(self) -> dict[str, Any]:
    """The sizes this context measures at (JSON-ready)."""
    return {"mode": self.mode, "d_k": list(self.d_k), "seq_len": self.seq_len, "num_seeds": self.num_seeds,
            "seed": self.seed, "widths": list(self.widths), "batch": BATCH, "heads": HEADS,
            "text_file": self.text_file, "compute_dtype": self.compute_dtype, "hardware": hardware()}

  def overrides(self) -> list[str]:
    """The flags that differ from the mode's sizes (so that a command reproduces this context)."""
    sizes, flags = MODES[self.mode], []
    if self.d_k != tuple(sizes["d_k"]):
      flags.append("--d_k=" + ",".join(str(d) for d in self.d_k))
    if self.seq_len != sizes["seq_len"]:
      flags.append(f"--seq_len={self.seq_len}")
    if self.num_seeds != sizes["num_seeds"]:
      flags.append(f"--num_seeds={self.num_seeds}")
    if self.seed:
      flags.append(f"--seed={self.seed}")
    if self.text_file is not None:
      flags.append(f"--text_file={shlex.quote(str(self.text_file))}")
    if self.compute_dtype != COMPUTE_DTYPES[0]:
      flags.append(f"--compute_dtype={self.compute_dtype}")
    return flags

  def cached(self, key: Any, compute: Callable[[], Any]) -> Any:
    """``compute()`` once per context and key."""
    if key not in self._cache:
      self._cache[key] = compute()
    return self._cache[key]

  def require_d_k(self, *dims: int) -> None:
    """ValueError unless the context's head dims include ``dims``."""
    missing = [d for d in dims if d not in self.d_k]
    if missing:
      raise ConfigError(f"this claim needs d_k {', '.join(map(str, missing))} among the context's d_k {self.d_k}")

  def sweep(self) -> dict[tuple[str, int], dict[str, np.ndarray]]:
    """{(rule, d_k): {metric: [num_seeds] values}}: the d_k sweep of ``SWEEP_RULES`` on iid q, k, v, per seed.

    The same programs and keys as ``scaling.studies.sweep.run_sweep`` (which reports only mean and std), so that
    derived statistics (ratios, differences) get their spread over seeds.
    """

    def compute():
      config = sweep_lib.SweepConfig(d_k=self.d_k, rules=SWEEP_RULES, seq_len=self.seq_len, batch=BATCH,
                                     num_heads=HEADS, num_seeds=self.num_seeds, seed=self.seed)
      base, out = jax.random.key(self.seed), {}
      for d in self.d_k:
        values = sweep_lib.make_shape_fn(config, d)(jax.random.fold_in(base, d))
        for rule, metrics in values.items():
          out[(rule, d)] = {m: np.asarray(v, np.float64)[:, 0] for m, v in metrics.items()}  # the one qk_std
      return out

    return self.cached("sweep", compute)

  def rngs(self, tag: str, *salt: int) -> list[np.random.Generator]:
    """One numpy generator per seed for the measurement ``tag`` (and ``salt``), whatever else runs and in what order.

    Inputs are drawn in numpy and only the attention math is jitted: on CPU, compiling JAX's random number
    programs would take longer than these small measurements themselves.
    """
    return [np.random.default_rng([self.seed, zlib.crc32(tag.encode()), *salt, i]) for i in range(self.num_seeds)]

  def per_seed(self, tag: str, draw: Callable[[np.random.Generator], tuple], compute: Callable[..., Any],
               *salt: int) -> Any:
    """``compute(*draw(rng))`` for each seed's generator (``compute`` jitted once), stacked over seeds in numpy."""
    jitted = compilation.jit(compute)
    out = [jax.device_get(jitted(*draw(rng))) for rng in self.rngs(tag, *salt)]
    return jax.tree.map(lambda *xs: np.stack([np.asarray(x, np.float64) for x in xs]), *out)


# ----------------------------------------------------------------------------
# Formatting of measured values.


def seed_mean(values: np.ndarray) -> float:
  """The mean over seeds."""
  return float(np.mean(values))


def n_seeds_text(ctx: Context) -> str:
  """The number of seeds, in words."""
  return f"{ctx.num_seeds} seed{'s' if ctx.num_seeds > 1 else ''}"


def seeds_text(ctx: Context) -> str:
  """How many seeds the means are over, in words."""
  return f"mean of {n_seeds_text(ctx)}"


def pm(values: np.ndarray, spec: str = ".3g") -> str:
  """mean ± std over seeds, formatted."""
  return stats.format_mean_std(np.mean(values), np.std(values), spec)


def span(values: list[float], spec: str = ".3f") -> str:
  """min–max of values, formatted."""
  return f"{format(min(values), spec)}–{format(max(values), spec)}"


def by_d_k(series: dict[int, np.ndarray], digits: int = 4) -> dict[int, dict[str, float]]:
  """{d_k: {"mean", "std"}} of per-seed values by head dim (rounded to ``digits`` significant digits)."""
  return {d: stats.mean_std(v, digits) for d, v in series.items()}


def sweep_series(ctx: Context, rule: str, metric: str) -> dict[int, np.ndarray]:
  """{d_k: per-seed values} of one metric of one rule in the context's d_k sweep."""
  return {d: ctx.sweep()[(rule, d)][metric] for d in ctx.d_k}
