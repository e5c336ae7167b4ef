"""Where a run's wall time goes: compilation, compute and the rest, measured while it runs.

``TimeSplit`` (a context manager) listens to JAX's compilation events (``jax.monitoring``: tracing to a jaxpr,
lowering to MLIR, backend compilation; each one the duration JAX itself measured) and to the regions that run
compiled work (``computing()``, around the training loop of ``scaling.training.loop.run.run_training`` and a study's other
loops of compiled calls). At the end::

    wall = compilation + compute + rest

with compilation the sum of those events, compute the time inside ``computing()`` regions less the compilation that
happened inside them (a first call compiles), and rest everything else (data, Python, files, figures). It also
counts the backend compilations (one per new program; a program loaded from the persistent compilation cache counts
too, and is also counted as a cache hit). Splits nest: every active one sees every event.

Programs compiled ahead in another thread (``compiling_ahead()``, while the run goes on) are counted apart
(``ahead_s``, ``ahead_compiles``): they overlap the wall time rather than add to it. The time the run waits for
one of them (``waiting_for_compilation()``) is compilation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from typing import Any, Callable, Iterator

import jax

# JAX's own durations of the three stages of compiling one program.
COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration",
                  "/jax/core/compile/backend_compile_duration")
BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
CACHE_HIT = "/jax/compilation_cache/cache_hits"
FILE = "time_split.json"
"""Where an experiment writes its split (``TimeSplit.as_dict``) in its output folder."""

_LOCK = threading.Lock()
_THREAD = threading.local()  # .ahead: this thread compiles ahead (``compiling_ahead``)
_ACTIVE: list[TimeSplit] = []  # jax.monitoring's listeners are process-wide: the splits open now
_LISTENING = [False]


def _listen(event: str, duration: float, **_: Any) -> None:
  if event not in COMPILE_EVENTS:
    return
  ahead = getattr(_THREAD, "ahead", False)
  with _LOCK:
    for split in _ACTIVE:
      split.record_compile(event, duration, ahead=ahead)


def _count(event: str, **_: Any) -> None:
  if event != CACHE_HIT:
    return
  with _LOCK:
    for split in _ACTIVE:
      split.cache_hits += 1


@dataclasses.dataclass
class TimeSplit:
  """Wall time split into compilation, compute and the rest (module docstring); use as a context manager.

  Attributes:
    compile_s: seconds JAX spent tracing, lowering and compiling programs.
    compute_s: seconds inside ``computing()`` regions, less the compilation inside them.
    wall_s: seconds from entering to leaving (so far, while open).
    compiles: backend compilations (a program loaded from the persistent compilation cache included).
    cache_hits: programs loaded from the persistent compilation cache.
    ahead_s: seconds of compilation in threads that compiled ahead (not part of the wall time's split).
    ahead_compiles: backend compilations in those threads.
  """

  compile_s: float = 0.0
  compute_s: float = 0.0
  compiles: int = 0
  cache_hits: int = 0
  ahead_s: float = 0.0
  ahead_compiles: int = 0
  _start: float = 0.0
  _end: float | None = None
  _region_compile: float = 0.0
  _depth: int = 0

  def __enter__(self) -> TimeSplit:
    with _LOCK:
      if not _LISTENING[0]:
        jax.monitoring.register_event_duration_secs_listener(_listen)
        jax.monitoring.register_event_listener(_count)
        _LISTENING[0] = True
      _ACTIVE.append(self)
    self._start = time.perf_counter()
    return self

  def __exit__(self, *exc: Any) -> None:
    self._end = time.perf_counter()
    with _LOCK:
      if self in _ACTIVE:
        _ACTIVE.remove(self)

  def enter_region(self) -> None:
    """A ``computing()`` region opens (the outermost one starts counting its compilation)."""
    self._depth += 1
    if self._depth == 1:
      self._region_compile = 0.0

  def leave_region(self, elapsed: float) -> None:
    """A ``computing()`` region of ``elapsed`` seconds closes (the outermost one adds its compute)."""
    self._depth -= 1
    if self._depth == 0:
      self.compute_s += max(0.0, elapsed - self._region_compile)

  def record_wait(self, seconds: float) -> None:
    """``seconds`` spent waiting for a program compiled ahead: compilation (not the region's compute)."""
    self.compile_s += seconds
    if self._depth:
      self._region_compile += seconds

  def record_compile(self, event: str, duration: float, ahead: bool = False) -> None:
    """One compilation event of ``duration`` seconds (from JAX's listener; ``ahead``: in a thread compiling ahead)."""
    if ahead:
      self.ahead_s += duration
      self.ahead_compiles += event == BACKEND_COMPILE
      return
    self.compile_s += duration
    if self._depth:
      self._region_compile += duration
    if event == BACKEND_COMPILE:
      self.compiles += 1

  @property
  def wall_s(self) -> float:
    return (time.perf_counter() if self._end is None else self._end) - self._start

  @property
  def rest_s(self) -> float:
    """The wall time that is neither compilation nor compute."""
    return self.wall_s - self.compile_s - self.compute_s

  def summary(self) -> str:
    """One line: wall time and its split, with each part's share."""
    wall = self.wall_s
    share = lambda s: f"{100 * s / wall:.0f}%" if wall > 0 else "–"
    return (f"time split: wall {wall:.1f}s = compilation {self.compile_s:.1f}s ({share(self.compile_s)}, "
            f"{self.compiles} programs, {self.cache_hits} from the cache) + compute {self.compute_s:.1f}s ({share(self.compute_s)}) + rest "
            f"{self.rest_s:.1f}s ({share(self.rest_s)})"
            + (f"; and {self.ahead_s:.1f}s compiling {self.ahead_compiles} programs ahead in a thread beside it"
               if self.ahead_compiles else ""))

  def as_dict(self) -> dict[str, float]:
    """{"wall_s", "compile_s", "compute_s", "rest_s", "compiles", "cache_hits", "ahead_s", "ahead_compiles"}."""
    return {"wall_s": self.wall_s, "compile_s": self.compile_s, "compute_s": self.compute_s,
            "rest_s": self.rest_s, "compiles": self.compiles, "cache_hits": self.cache_hits,
            "ahead_s": self.ahead_s, "ahead_compiles": self.ahead_compiles}


@contextlib.contextmanager
def _timed(done: Callable[[float], None]) -> Iterator[None]:
  """Calls ``done(seconds)`` with the time the block took, however it ends."""
  start = time.perf_counter()
  try:
    yield
  finally:
    done(time.perf_counter() - start)


def _for_splits(splits: list[TimeSplit], method: str) -> Callable[[float], None]:
  """``split.<method>(seconds)`` of every split in ``splits``, under the lock."""
  def call(seconds: float) -> None:
    with _LOCK:
      for split in splits:
        getattr(split, method)(seconds)
  return call


@contextlib.contextmanager
def computing() -> Iterator[None]:
  """Marks a region that runs compiled work: its time, less the compilation inside it, is every open split's
  compute (nested regions count once). In a thread working ahead (``compiling_ahead``) it is not part of the split:
  that thread runs beside the run."""
  if getattr(_THREAD, "ahead", False):
    yield
    return
  with _LOCK:
    splits = list(_ACTIVE)
    for split in splits:
      split.enter_region()
  with _timed(_for_splits(splits, "leave_region")):
    yield


@contextlib.contextmanager
def compiling_ahead() -> Iterator[None]:
  """Marks this thread as working ahead, beside the run: its compilations count as compiled ahead
  (``TimeSplit.ahead_s``), and its ``computing()`` regions (grids trained ahead) are not part of the split."""
  _THREAD.ahead = True
  try:
    yield
  finally:
    _THREAD.ahead = False


@contextlib.contextmanager
def waiting_for_compilation() -> Iterator[None]:
  """Marks a wait for a program compiled ahead: its time is every open split's compilation."""
  with _LOCK:
    splits = list(_ACTIVE)
  with _timed(_for_splits(splits, "record_wait")):
    yield
