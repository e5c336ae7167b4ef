"""Timing helpers shared by the benchmark suites: one call, one function, the matmul peak, the machine's load."""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp

from scaling.base.validation import ConfigError


def time_call(fn: Callable[..., Any], args: Sequence[Any]) -> float:
  """Seconds of one ``fn(*args)``, until its outputs are ready."""
  start = time.perf_counter()
  jax.block_until_ready(fn(*args))
  return time.perf_counter() - start


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
  """(fn(), seconds)."""
  start = time.perf_counter()
  out = fn()
  return out, time.perf_counter() - start


def matmul_call(size: int, dtype: str = "float32") -> tuple[Callable[..., Any], tuple[Any, Any]]:
  """(a compiled, warmed-up [size, size] jnp.dot in ``dtype``, its two arguments): the peak's matmul, to time.

  Args:
    size: the side of both square matrices.
    dtype: the matrices' dtype (e.g. "bfloat16" for an accelerator's low-precision peak).
  """
  if isinstance(size, bool) or not isinstance(size, int) or size < 1:
    raise ConfigError(f"size must be a positive integer, got {size!r}")
  a, b = (jax.random.normal(k, (size, size), jnp.float32).astype(dtype)
          for k in jax.random.split(jax.random.PRNGKey(1)))
  dot = jax.jit(jnp.dot).lower(a, b).compile()
  jax.block_until_ready(dot(a, b))
  return dot, (a, b)


def matmul_flops(size: int) -> float:
  """Multiply-adds × 2 of one [size, size] × [size, size] matmul."""
  return 2.0 * size**3


def measure_matmul_peak(size: int, repeats: int = 5, dtype: str = "float32") -> dict:
  """Best GFLOP/s of a [size, size] jnp.dot in ``dtype`` (compiled, warmed up).

  Args:
    size: the side of both square matrices.
    repeats: timed calls; the fastest counts.
    dtype: the matrices' dtype (e.g. "bfloat16" for an accelerator's low-precision peak).

  Returns:
    {"size", "seconds" (the fastest call), "gflops"}.
  """
  if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
    raise ConfigError(f"repeats must be a positive integer, got {repeats!r}")
  dot, args = matmul_call(size, dtype)
  best = min(time_call(dot, args) for _ in range(repeats))
  return {"size": size, "seconds": best, "gflops": matmul_flops(size) / best / 1e9}


def load_note(results: dict[str, Any]) -> str:
  """The machine's 1-minute load average at a suite's start and end, as a parenthesis for its Markdown.

  Args:
    results: a suite's results, with ``load_average`` [start, end] where it recorded them.

  Returns:
    " (1-minute load average ...)", or "" without ``load_average``.
  """
  if "load_average" not in results:
    return ""
  start, end = results["load_average"]
  return f" (1-minute load average {start:.1f} at the start of the suite, {end:.1f} at its end)"
