"""One writer per run folder: a lock file that names its holder, taken when a run opens its folder.

``acquire(folder)`` creates ``folder/.lock`` exclusively with the holder's pid, host and start time. A second run
into the folder is refused with one line naming the holder (``RunLocked``, a ``ConfigError``). A lock whose holder
is gone (its host is this one and no process has its pid: a run killed by SIGKILL or a power cut) is stale: it is
taken over, with a line saying so. A process may take its own lock again (a study that opens its folder twice).
``release(folder)`` removes it; a study's ``run`` decorated with ``held_while_running`` removes the lock of its
``out_dir`` when it returns or raises, and the locks a process holds are removed at its exit too.
"""

from __future__ import annotations

import atexit
import datetime
import functools
import json
import os
import pathlib
import socket
import sys

from typing import Any, Callable

from scaling.base.validation import ConfigError

LOCK = ".lock"
"""The lock file in a run folder."""

_held: set[pathlib.Path] = set()


class RunLocked(ConfigError):
  """Another live run holds the folder."""


def _holder(path: pathlib.Path) -> dict | None:
  """The holder a lock file names, or None for a file that cannot be read (torn while it was written)."""
  try:
    holder = json.loads(path.read_text())
  except (OSError, ValueError):
    return None
  return holder if isinstance(holder, dict) else None


def _alive(pid: int) -> bool:
  """Whether a process with this pid exists on this host."""
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True  # another user's process
  return True


def describe(holder: dict) -> str:
  """``pid 123 on host h, started 2026-12-05 08:00:00``."""
  return f"pid {holder.get('pid')} on host {holder.get('host')}, started {holder.get('started')}"


def acquire(folder: str | os.PathLike) -> pathlib.Path:
  """Takes the folder's lock for this process (the folder exists).

  Returns:
    The lock file.

  Raises:
    RunLocked: a live process (or one on another host, which cannot be checked) holds it.
  """
  path = pathlib.Path(folder).absolute() / LOCK
  me = {"pid": os.getpid(), "host": socket.gethostname(),
        "started": datetime.datetime.now().isoformat(sep=" ", timespec="seconds")}
  for _ in range(3):
    try:
      fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
      holder = _holder(path)
      if holder is not None and holder.get("pid") == me["pid"] and holder.get("host") == me["host"]:
        _held.add(path)
        return path
      if holder is not None and (holder.get("host") != me["host"] or _alive(int(holder.get("pid", -1)))):
        raise RunLocked(f"out_dir={str(folder)!r} is being written by another run ({describe(holder)}); wait for "
                        f"it to end or use another out_dir (if that run is gone, remove {path})") from None
      if _holder(path) != holder:  # someone else took it over meanwhile: read it again
        continue
      print(f"run lock: took over the stale lock of {describe(holder) if holder else 'an unreadable lock file'} "
            f"in {folder} (that run is gone)", file=sys.stderr, flush=True)
      path.unlink(missing_ok=True)
      continue
    with os.fdopen(fd, "w") as f:
      f.write(json.dumps(me))
    _held.add(path)
    return path
  raise RunLocked(f"out_dir={str(folder)!r}: cannot take its lock {path} (another run keeps taking it)")


def release(folder: str | os.PathLike) -> None:
  """Removes the folder's lock if this process holds it."""
  path = pathlib.Path(folder).absolute() / LOCK
  if path in _held:
    _held.discard(path)
    holder = _holder(path)
    if holder is not None and holder.get("pid") == os.getpid():
      path.unlink(missing_ok=True)


def release_all() -> None:
  """Removes every lock this process holds."""
  for path in list(_held):
    release(path.parent)


def held_while_running(run: Callable[..., Any]) -> Callable[..., Any]:
  """A study's ``run(config, out_dir)`` that releases ``out_dir``'s lock (taken when it opened it) at its end."""

  @functools.wraps(run)
  def wrapped(config: Any, out_dir: Any = None, *args, **kwargs):
    out_dir = kwargs.pop("out_dir", out_dir)
    try:
      return run(config, out_dir, *args, **kwargs)
    finally:
      if out_dir is not None:
        release(out_dir)

  return wrapped


atexit.register(release_all)
