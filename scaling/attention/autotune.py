"""Attention autotune: measure the exact paths once per shape and remember the fastest on disk.

``dot_product_attention(..., implementation="auto")`` looks its case up here:
the key (``cache_key``) names the query and key shapes, the dtype, the backend
and device kind, the masking (causal, local window and its size, bias, mask,
lengths) and the logit options that change the blockwise code (the rule's
name and whether it prepares q and k, soft cap, clamp, float32 softmax,
subtracting the maximum). On a miss ``tune_attention`` times forward+backward
(value and gradients w.r.t. q, k, v of the output's sum; each candidate jitted
and compiled once, then the fastest of ``repeats`` interleaved calls (``interleaved_times``) on random
inputs of exactly that shape) of dense and of blockwise at each candidate tile
(``TILE_CANDIDATES`` that fit T and S, plus the fixed rule's own tiles, which
the dispatcher passes in), and stores the fastest; then the forward pass alone
of the same candidates, and where another one is faster there, stores it as the
choice's forward (what calls that are not differentiated run). The default
``implementation=None`` never reads the cache: its fixed rule
(``scaling.attention.dispatch.select_implementation``) is deterministic whatever the
machine's timing noise.

The cache is one JSON file, ``attention_autotune.json`` in the user's cache
folder (``cache_root()``, the folder of JAX's compilation cache too), or the
path in the environment variable ``SCALING_AUTOTUNE_CACHE``, or the one set by
``cache_file(path)``. Writes go to a temporary file that replaces the cache
(``os.replace``), and a missing or unreadable file counts as empty (with one
warning).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import datetime
import functools
import json
import os
import pathlib
import tempfile
import time
import warnings
from typing import Any, Callable, Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from scaling.attention import blockwise as blockwise_lib
from scaling.attention import dense as dense_lib
from scaling.attention import logits as logits_lib
from scaling.attention.logits import LogitOptions
from scaling.base.validation import ConfigError

CACHE_ENV = "SCALING_AUTOTUNE_CACHE"
CACHE_NAME = "attention_autotune.json"
TILE_CANDIDATES = ((64, 128), (128, 128), (128, 256), (256, 256), (256, 512))
"""(block_q, block_k) tiles tuned (those within T and S), besides dense and the fixed rule's tiles."""
DENSE_MAX_TUNE_LOGITS = 2**26
"""Dense is a candidate while its B·N·T·S float32 logits hold at most this many elements (256 MiB)."""
REPEATS = 3
"""Timed calls per candidate of an automatic tuning (the fastest counts: noise from other work on the machine
only adds time, so the minimum is the steadiest estimate of a path's own cost)."""
FORWARD_MARGIN = 1.05
"""A tuning's choice gets a forward of its own only when that is faster alone by more than this factor."""
PRUNE_FACTOR = 2.0
"""Candidates whose second warm-up call took more than this times the fastest one are not timed further."""
SEED = 0
COMPILE_THREADS = max(1, min(4, os.cpu_count() or 1))
"""Candidates compiled side by side (compilation is most of a tuning's time)."""

_override: list[pathlib.Path] = []
_warned: set[str] = set()


@dataclasses.dataclass(frozen=True)
class Choice:
  """What ``dot_product_attention`` runs: an implementation, its blocks, and why.

  ``forward``: for a blockwise choice, the dense or blockwise path its undifferentiated calls run instead
  (``scaling.attention.dispatch.split_forward``); None = this path itself.
  """

  implementation: str
  block_q: int | None = None
  block_k: int | None = None
  reason: str = ""
  forward: Choice | None = None


@dataclasses.dataclass(frozen=True)
class Tuned:
  """What ``tune_attention`` measured: the fastest choice, each candidate's ms and the tuning's wall time.

  ``ms`` is forward+backward; ``forward_ms`` the forward pass alone (empty when not timed).

  A candidate's ms is the fastest of its timed calls, or, when its second warm-up call took over ``PRUNE_FACTOR``
  times the fastest one (so it was not timed further), that call's time.
  """

  choice: Choice
  ms: dict[str, float]
  tune_s: float
  forward_ms: dict[str, float] = dataclasses.field(default_factory=dict)


def cache_root() -> pathlib.Path:
  """$XDG_CACHE_HOME/scaling, or ~/.cache/scaling: the folder of the autotune and compilation caches."""
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return pathlib.Path(base) / "scaling"


def cache_path() -> pathlib.Path:
  """The cache file in use: ``cache_file``'s, else $SCALING_AUTOTUNE_CACHE, else ``cache_root()/CACHE_NAME``."""
  if _override:
    return _override[-1]
  env = os.environ.get(CACHE_ENV)
  return pathlib.Path(env).expanduser() if env else cache_root() / CACHE_NAME


@contextlib.contextmanager
def cache_file(path: str | os.PathLike) -> Iterator[pathlib.Path]:
  """Uses the cache file ``path`` inside the block (e.g. one per benchmark run)."""
  _override.append(pathlib.Path(path))
  try:
    yield _override[-1]
  finally:
    _override.pop()


def cache_key(query_shape: Sequence[int], key_shape: Sequence[int], dtype: Any, opts: LogitOptions, *,
              is_causal: bool, local_window_size: int | tuple[int, int] | None = None, has_bias: bool = False,
              has_mask: bool = False, has_lengths: bool = False, backend: str | None = None,
              device_kind: str | None = None) -> str:
  """A stable string naming one attention case: everything that changes which path is fastest.

  Args:
    query_shape: [B, T, N, H] (or [T, N, H]).
    key_shape: [B, S, K, H] (or [S, K, H]).
    dtype: the input dtype.
    opts: the resolved logit options (``scaling.attention.logits.resolve_logit_options``).
    is_causal: causal masking.
    local_window_size: the local window (an int or (left, right)), or None.
    has_bias: a bias is given.
    has_mask: a mask is given.
    has_lengths: query or key/value sequence lengths are given.
    backend: "cpu", "gpu" or "tpu"; None = ``jax.default_backend()``.
    device_kind: the device's kind; None = that of ``jax.devices(backend)[0]``.

  Returns:
    The key, e.g. "cpu|cpu|float32|q1x2048x8x64|k1x2048x2x64|causal|window=none|...".
  """
  backend = jax.default_backend() if backend is None else backend
  device_kind = jax.devices(backend)[0].device_kind if device_kind is None else device_kind
  window = "none" if local_window_size is None else "x".join(map(str, np.atleast_1d(local_window_size).tolist()))
  parts = (backend, device_kind, jnp.dtype(dtype).name, "q" + "x".join(map(str, query_shape)),
           "k" + "x".join(map(str, key_shape)), "causal" if is_causal else "full", f"window={window}",
           f"bias={int(has_bias)}", f"mask={int(has_mask)}", f"lengths={int(has_lengths)}",
           f"rule={type(opts.rule).__name__}", f"prepare={int(opts.rule.has_prepare)}",
           f"cap={opts.logit_soft_cap}", f"clamp={opts.logit_clamp}", f"f32softmax={int(opts.float32_softmax)}",
           f"submax={int(opts.subtract_max)}")
  return "|".join(parts)


def load(path: pathlib.Path | None = None) -> dict[str, dict]:
  """The cache's entries {key: entry}; a missing file is empty, an unreadable one too (warned once)."""
  path = cache_path() if path is None else path
  try:
    data = json.loads(path.read_text())
  except FileNotFoundError:
    return {}
  except (OSError, ValueError) as e:
    data = e
  if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
    if str(path) not in _warned:
      _warned.add(str(path))
      why = data if isinstance(data, Exception) else "not a JSON object of entries"
      warnings.warn(f"the attention autotune cache {path} is unreadable ({why}); treating it as empty")
    return {}
  return data


def store(key: str, entry: dict, path: pathlib.Path | None = None) -> None:
  """Adds ``entry`` under ``key`` to the cache: read, update, write a temporary file, replace the cache with it."""
  path = cache_path() if path is None else path
  path.parent.mkdir(parents=True, exist_ok=True)
  data = load(path)
  data[key] = entry
  fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
  try:
    with os.fdopen(fd, "w") as f:
      json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)
  except BaseException:
    with contextlib.suppress(OSError):
      os.remove(tmp)
    raise


def _path_choice(c: Any, query_shape: Sequence[int], key_shape: Sequence[int]) -> Choice | None:
  """The dense or blockwise path a cache entry's {implementation, block_q, block_k} names; None when malformed."""
  if not isinstance(c, dict):
    return None
  impl, bq, bk = c.get("implementation"), c.get("block_q"), c.get("block_k")
  if impl == "dense":
    return Choice("dense", reason="autotuned")
  ints = all(isinstance(n, int) and not isinstance(n, bool) for n in (bq, bk))
  if impl == "blockwise" and ints and 1 <= bq <= query_shape[-3] and 1 <= bk <= key_shape[-3]:
    return Choice("blockwise", bq, bk, reason="autotuned")
  return None


def _path_entry(choice: Choice) -> dict:
  """A path as the cache stores it."""
  return {"implementation": choice.implementation, "block_q": choice.block_q, "block_k": choice.block_k}


def entry_choice(entry: dict, query_shape: Sequence[int], key_shape: Sequence[int]) -> Choice | None:
  """The choice a cache entry records (with its forward, if any), or None when malformed or a tile does not fit."""
  c = entry.get("choice") if isinstance(entry, dict) else None
  choice = _path_choice(c, query_shape, key_shape)
  if choice is None or c.get("forward") is None:
    return choice
  forward = _path_choice(c["forward"], query_shape, key_shape)
  if forward is None or choice.implementation != "blockwise":
    return None
  return dataclasses.replace(choice, forward=forward)


def candidates_for(query_shape: Sequence[int], key_shape: Sequence[int],
                   tiles: Sequence[tuple[int, int]] | None = None,
                   fixed_blocks: Sequence[tuple[int, int]] = ()) -> list[Choice]:
  """Dense (while its logits are small enough), blockwise at each tile within T and S, and the fixed rule's tiles.

  Args:
    query_shape: [B, T, N, H] (or [T, N, H]).
    key_shape: [B, S, K, H] (or [S, K, H]).
    tiles: (block_q, block_k) candidates; None = ``TILE_CANDIDATES``.
    fixed_blocks: the fixed rule's (block_q, block_k) tiles (``scaling.attention.dispatch.fixed_tiles``), also candidates.

  Returns:
    The choices, without repeats.
  """
  tiles = TILE_CANDIDATES if tiles is None else tiles
  t, s, n = query_shape[-3], key_shape[-3], query_shape[-2]
  b = query_shape[0] if len(query_shape) == 4 else 1
  out = [Choice("dense")] if b * n * t * s <= DENSE_MAX_TUNE_LOGITS else []
  for bq, bk in (*[tile for tile in tiles if tile[0] <= t and tile[1] <= s], *fixed_blocks):
    choice = Choice("blockwise", bq, bk)
    if choice not in out:
      out.append(choice)
  return out


FORWARD = ", forward "
"""Separates ``choice_name``'s path from that of the choice's own forward (``Choice.forward``)."""


def choice_name(choice: Choice) -> str:
  """ "dense", "blockwise BQxBK", or with a forward of its own "blockwise BQxBK, forward dense" (or another tile)."""
  name = choice.implementation + (f" {choice.block_q}x{choice.block_k}" if choice.implementation == "blockwise"
                                  else "")
  return name + (FORWARD + choice_name(choice.forward) if choice.forward is not None else "")


def path_function(choice: Choice, **kwargs) -> Callable[..., jax.Array]:
  """(q, k, v, ...) -> output of the dense or blockwise path ``choice`` names, ``kwargs`` (logit and mask options)
  bound."""
  if choice.implementation == "blockwise":
    return functools.partial(blockwise_lib.blockwise_attention, block_q=choice.block_q, block_k=choice.block_k,
                             **kwargs)
  return functools.partial(dense_lib.dense_attention, **kwargs)


def unchecked_path_function(choice: Choice, opts: LogitOptions, **mask_kwargs) -> Callable[..., jax.Array]:
  """(q, k, v) -> output of the dense or blockwise path ``choice`` names, for checked 4-D inputs and resolved
  options (no bias or mask; ``mask_kwargs`` checked)."""
  if choice.implementation == "blockwise":
    return functools.partial(blockwise_lib.blockwise_attention_unchecked, bias=None, mask=None, opts=opts,
                             block_q=choice.block_q, block_k=choice.block_k, **mask_kwargs)
  return functools.partial(dense_lib.dense_attention_unchecked, bias=None, mask=None, opts=opts, **mask_kwargs)


def attention_function(choice: Choice, opts: LogitOptions, **mask_kwargs) -> Callable[..., jax.Array]:
  """(q, k, v) -> output of the path ``choice`` names with the options' scale, cap and clamp (no prepare)."""
  return path_function(choice, scale=opts.scale, logit_soft_cap=opts.logit_soft_cap, logit_clamp=opts.logit_clamp,
                       float32_softmax=opts.float32_softmax, subtract_max=opts.subtract_max, **mask_kwargs)


def _seconds(fn: Callable, args: tuple) -> float:
  """Seconds of one ``fn(*args)``, until its outputs are ready."""
  start = time.perf_counter()
  jax.block_until_ready(fn(*args))
  return time.perf_counter() - start


def interleaved_times(fns: dict[str, Callable], args: tuple, rounds: int) -> dict[str, list[float]]:
  """Seconds of ``rounds`` timed calls of each function, interleaved: round after round, each function in turn.

  Each timed call directly follows an untimed call of the same function, so every function is timed with its own
  data in the caches: timed right after another one (a dense path that streams its T × S logits through memory,
  say), a blockwise call took up to 1.35x its time after itself.

  Args:
    fns: {name: function of ``args``} (compiled, warmed up).
    args: their arguments.
    rounds: timed calls per function.

  Returns:
    {name: [seconds of each timed call]}.
  """
  times = {name: [] for name in fns}
  for _ in range(rounds):
    for name, fn in fns.items():
      _seconds(fn, args)
      times[name].append(_seconds(fn, args))
  return times


def _fastest_times(fns: dict[str, Callable], args: tuple, repeats: int) -> dict[str, float]:
  """Fastest seconds per call of each function: two warm-up calls each (the second prunes), then ``repeats`` rounds."""
  warm = {}
  for name, fn in fns.items():  # the first call of each pays one-time costs; the second, right after it, prunes
    _seconds(fn, args)
    warm[name] = _seconds(fn, args)
  fastest = min(warm.values())
  times = interleaved_times({name: fn for name, fn in fns.items() if warm[name] <= PRUNE_FACTOR * fastest}, args,
                            repeats)
  return {name: min(times[name]) if name in times else warm[name] for name in fns}


def measure(choices: Sequence[Choice], query_shape: Sequence[int], key_shape: Sequence[int],
            dtype: Any, opts: LogitOptions, *, repeats: int, differentiated: bool = True,
            **mask_kwargs) -> dict[str, float]:
  """Fastest seconds of each choice on random inputs of these shapes ({choice_name: s}).

  Forward+backward (value and gradients w.r.t. q, k, v of the output's sum) when ``differentiated``, else the
  forward pass alone. Runs eagerly even when called while a function is being traced (jit, grad): inputs and
  executables are concrete, compiled ahead of time, so compilation is not timed.
  """
  with jax.ensure_compile_time_eval():
    keys = jax.random.split(jax.random.PRNGKey(SEED), 3)
    args = tuple(jax.random.normal(k, tuple(shape), dtype)
                 for k, shape in zip(keys, (query_shape, key_shape, key_shape)))
    lowered = {}
    for choice in choices:
      fn = attention_function(choice, opts, **mask_kwargs)
      step = (jax.value_and_grad(lambda q, k, v, fn=fn: jnp.sum(fn(q, k, v).astype(jnp.float32)), argnums=(0, 1, 2))
              if differentiated else fn)
      lowered[choice_name(choice)] = jax.jit(step).lower(*args)
    with concurrent.futures.ThreadPoolExecutor(COMPILE_THREADS) as pool:  # XLA compiles without holding the GIL
      fns = dict(zip(lowered, pool.map(lambda low: low.compile(), lowered.values())))
    return _fastest_times(fns, args, repeats)


def tune_attention(query_shape: Sequence[int], key_shape: Sequence[int], dtype: Any = jnp.float32, *,
                   is_causal: bool = False, local_window_size: int | tuple[int, int] | None = None,
                   opts: LogitOptions | None = None, candidates: Sequence[Choice] | None = None,
                   fixed_blocks: Sequence[tuple[int, int]] = (),
                   repeats: int | None = None, save: bool = True, forward: bool = True) -> Tuned:
  """Times dense and blockwise at each candidate tile and stores the fastest under the case's key.

  The choice is the fastest forward+backward; with ``forward``, the forward pass alone is timed too, and where
  another candidate is faster there (by more than ``FORWARD_MARGIN``) the choice carries it as its ``forward``
  (what undifferentiated calls run).

  Args:
    query_shape: [B, T, N, H] (or [T, N, H]).
    key_shape: [B, S, K, H] (or [S, K, H]).
    dtype: the input dtype.
    is_causal: causal masking.
    local_window_size: the local window, or None.
    opts: the resolved logit options (default: 1/√H, nothing else). A rule's ``prepare`` runs once on q and k
      whatever the path, so it is left out of the measurement (the key still names the rule).
    candidates: the choices to time; None = ``candidates_for(query_shape, key_shape, fixed_blocks=fixed_blocks)``.
    fixed_blocks: the fixed rule's tiles, also timed when ``candidates`` is None.
    repeats: timed calls per candidate (the fastest counts); None = ``REPEATS``.
    save: store the result in the cache (``cache_path()``).
    forward: also time the forward pass alone (see above).

  Returns:
    A ``Tuned``: the fastest choice, each candidate's fastest ms (forward+backward, and forward alone) and the
    wall time of the tuning.
  """
  start = time.perf_counter()
  repeats = REPEATS if repeats is None else repeats
  query_shape, key_shape = tuple(query_shape), tuple(key_shape)
  if (len(query_shape) not in (3, 4) or len(key_shape) != len(query_shape) or query_shape[-1] != key_shape[-1]
      or query_shape[-2] % key_shape[-2] or query_shape[:-3] != key_shape[:-3]):
    raise ConfigError(f"query_shape must be [B, T, N, H] (or [T, N, H]) and key_shape [B, S, K, H] with the same B "
                      f"and H and K dividing N, got {query_shape} and {key_shape}")
  if not isinstance(repeats, int) or repeats < 1:
    raise ConfigError(f"repeats must be a positive integer, got {repeats!r}")
  opts = opts if opts is not None else logits_lib.resolve_logit_options(
      query_shape[-1], scale=None, rule=None, logit_soft_cap=None, logit_clamp=None, float32_softmax=True,
      subtract_max=True)
  choices = list(candidates_for(query_shape, key_shape, fixed_blocks=fixed_blocks) if candidates is None
                 else candidates)
  if not choices or any(c.implementation not in ("dense", "blockwise") for c in choices):
    raise ConfigError(f"candidates must be dense or blockwise Choices, at least one, got {choices!r}")
  mask_kwargs = dict(is_causal=is_causal, local_window_size=local_window_size)
  seconds = measure(choices, query_shape, key_shape, dtype, opts, repeats=repeats, **mask_kwargs)
  best = min(choices, key=lambda c: seconds[choice_name(c)])
  forward_seconds = {}
  if forward and best.implementation == "blockwise" and len(choices) > 1:
    forward_seconds = measure(choices, query_shape, key_shape, dtype, opts, repeats=repeats, differentiated=False,
                              **mask_kwargs)
    fastest = min(choices, key=lambda c: forward_seconds[choice_name(c)])
    if forward_seconds[choice_name(best)] > FORWARD_MARGIN * forward_seconds[choice_name(fastest)]:
      best = dataclasses.replace(best, forward=dataclasses.replace(fastest, reason="autotuned forward"))
  ms = {name: s * 1e3 for name, s in seconds.items()}
  forward_ms = {name: s * 1e3 for name, s in forward_seconds.items()}
  tuned = Tuned(dataclasses.replace(best, reason=f"autotuned: fastest of {len(choices)} measured"), ms,
                time.perf_counter() - start, forward_ms)
  if save:
    key = cache_key(query_shape, key_shape, dtype, opts, is_causal=is_causal, local_window_size=local_window_size)
    path = _path_entry(best)
    if best.forward is not None:
      path["forward"] = _path_entry(best.forward)
    store(key, {"choice": path, "ms": ms, "forward_ms": forward_ms, "repeats": repeats, "tune_s": tuned.tune_s,
                "jax": jax.__version__,
                "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")})
  return tuned
