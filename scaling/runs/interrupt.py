"""Stopping a run at a safe point when it gets SIGINT (Ctrl-C) or SIGTERM.

Inside ``stop_at_safe_points()`` (an entry point wraps its run in it) the first SIGINT or SIGTERM only records a
request and says so on stderr; the run stops at its next safe point, where ``check()`` raises ``Interrupted``. The
safe points are the moments a unit of results has been written to disk (``scaling.runs.results``: a group of rows
appended, a streamed row), so what a stopped run leaves is whole and a rerun resumes from it. A second signal stops
at once (Python's ``KeyboardInterrupt`` where the program is). Outside the block, and off the main thread, signals
keep their usual handlers and ``check()`` does nothing.

``Interrupted`` is a ``KeyboardInterrupt``, so code that cleans up after Ctrl-C cleans up after it too; its
``exit_status`` is the shell's: 130 for SIGINT, 143 for SIGTERM.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from typing import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)

_requested: list[int] = []
"""The signal numbers received inside the block (the first decides)."""


class Interrupted(KeyboardInterrupt):
  """A run stopped at a safe point by a signal."""

  def __init__(self, signum: int):
    super().__init__(signal.Signals(signum).name)
    self.signum = int(signum)

  @property
  def signal_name(self) -> str:
    return signal.Signals(self.signum).name

  @property
  def exit_status(self) -> int:
    """The status a shell gives a program the signal ended: 128 + the signal's number."""
    return 128 + self.signum


def _handler(signum, frame) -> None:
  del frame
  if _requested:  # a second signal: stop now
    raise Interrupted(signum)
  _requested.append(signum)
  print(f"\n{signal.Signals(signum).name}: stopping once what is running now is written "
        "(send it again to stop at once)", file=sys.stderr, flush=True)


@contextlib.contextmanager
def stop_at_safe_points() -> Iterator[None]:
  """Within the block, SIGINT and SIGTERM request a stop that ``check()`` raises (a second one stops at once)."""
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  previous = {s: signal.signal(s, _handler) for s in SIGNALS}
  try:
    yield
  finally:
    for s, handler in previous.items():
      signal.signal(s, handler)
    _requested.clear()


def requested() -> int | None:
  """The signal that asked the run to stop, or None."""
  return _requested[0] if _requested else None


def check() -> None:
  """A safe point: raises ``Interrupted`` when a stop was requested.

  Raises:
    Interrupted: SIGINT or SIGTERM arrived inside ``stop_at_safe_points``.
  """
  if _requested:
    raise Interrupted(_requested[0])
