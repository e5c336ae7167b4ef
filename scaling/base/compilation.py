"""How the library compiles its programs: ``jit`` is ``jax.jit`` with XLA's backend optimization level chosen for a
CPU.

On a CPU the studies compile hundreds of small programs (a training step per model and grid, a measurement per
shape), and most of XLA's compile time goes to LLVM optimizing machine code. ``jit`` asks XLA's CPU backend for
level ``CPU_BACKEND_OPTIMIZATION_LEVEL`` instead of XLA's default (3): the same operations in the same order (no
fast-math either way), their machine code optimized less. The studies benchmark (``python -m experiments.benchmark
--suite=studies``) measures it beside XLA's default on the coordinate check: compile and compute time, and the
largest relative difference between their results (machine code optimized otherwise may round differently in the
last bits). On other backends ``jit`` is ``jax.jit``.

A level given in the environment's ``XLA_FLAGS`` (``--xla_backend_optimization_level=N``) wins, for these programs
as for every other; ``XLA_FLAGS=--xla_backend_optimization_level=3`` restores XLA's default. What is timed as the
point of a measurement (the claims' RMSNorm-against-LayerNorm timing, the matmul peak, the attention autotuner)
keeps ``jax.jit``.

XLA takes compiler options only for a program compiled on its own: a function of ``jit`` called inside another
trace (``jax.jit``, ``jax.eval_shape``, ``jax.vmap``, a scan) runs as a plain ``jax.jit`` there, part of the outer
program and compiled with its options.
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable

import jax
from jax._src import core as jax_core  # trace_state_clean: whether a call is at the top level (no public API)

CPU_BACKEND_OPTIMIZATION_LEVEL = 1
"""XLA's backend optimization level for programs compiled by ``jit`` on a CPU (XLA's own default is 3)."""
LEVEL_FLAG = "xla_backend_optimization_level"
_LEVEL_IN_FLAGS = re.compile(rf"--{LEVEL_FLAG}=(\d+)")


def compiler_options() -> dict[str, Any] | None:
  """The ``compiler_options`` of ``jit``'s programs: on a CPU, {LEVEL_FLAG: the level of ``XLA_FLAGS`` if it sets one,
  else ``CPU_BACKEND_OPTIMIZATION_LEVEL``}; None on other backends."""
  if jax.default_backend() != "cpu":
    return None
  given = _LEVEL_IN_FLAGS.findall(os.environ.get("XLA_FLAGS", ""))
  return {LEVEL_FLAG: int(given[-1]) if given else CPU_BACKEND_OPTIMIZATION_LEVEL}


def _at_top_level() -> bool:
  """Whether JAX traces nothing around this call (False when it cannot tell: the plain jit is always safe)."""
  clean = getattr(jax_core, "trace_state_clean", None)
  return bool(clean()) if clean is not None else False


class Jitted:
  """A function jitted twice: with compiler options where it is called (or lowered) at the top level, as a plain
  ``jax.jit`` inside another trace. Calls, ``lower``, ``trace`` and ``eval_shape`` go to the one that applies."""

  def __init__(self, fun: Callable[..., Any], options: dict[str, Any], **kwargs: Any):
    self.__wrapped__ = fun
    self.__name__ = getattr(fun, "__name__", type(fun).__name__)
    self.__doc__ = getattr(fun, "__doc__", None)
    self._top = jax.jit(fun, compiler_options=options, **kwargs)
    self._nested = jax.jit(fun, **kwargs)

  def _here(self) -> Any:
    return self._top if _at_top_level() else self._nested

  def __call__(self, *args: Any, **kwargs: Any) -> Any:
    return self._here()(*args, **kwargs)

  def lower(self, *args: Any, **kwargs: Any) -> Any:
    return self._here().lower(*args, **kwargs)

  def trace(self, *args: Any, **kwargs: Any) -> Any:
    return self._here().trace(*args, **kwargs)

  def eval_shape(self, *args: Any, **kwargs: Any) -> Any:
    return self._nested.eval_shape(*args, **kwargs)

  def _cache_size(self) -> int:
    """Programs compiled and cached by both (as ``jax.jit``'s, which tests use to count compilations)."""
    return self._top._cache_size() + self._nested._cache_size()  # pylint: disable=protected-access

  def clear_cache(self) -> None:
    """Forgets both's compiled programs (as ``jax.jit``'s)."""
    self._top.clear_cache()
    self._nested.clear_cache()


def jit(fun: Callable[..., Any], **kwargs: Any) -> Callable[..., Any]:
  """``jax.jit(fun, **kwargs)``, its programs compiled with ``compiler_options()`` (module docstring).

  Args:
    fun: the function.
    **kwargs: ``jax.jit``'s other arguments (``static_argnums``, ``donate_argnums``, ``out_shardings``, ...).

  Returns:
    A ``Jitted`` on a CPU, else ``jax.jit(fun, **kwargs)``.
  """
  if "compiler_options" in kwargs:
    raise TypeError("jit chooses compiler_options itself; call jax.jit for other options")
  options = compiler_options()
  if options is None:
    return jax.jit(fun, **kwargs)
  return Jitted(fun, options, **kwargs)
