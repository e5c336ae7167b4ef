"""How a study's run goes in its process: inside JAX's persistent compilation cache and a time split.

``run(study_run, config, out_dir, options)`` is the one path every run of a
study takes, whether an experiment's main started it (``experiments/cli.py``,
after parsing the flags) or a benchmark suite that needs a fresh process
(``benchmarks.worker``): the compilation cache of
``ProcessOptions`` for every compilation of the run, a ``scaling.runs.timesplit.TimeSplit``
around it, and at the end (process 0) the split's line on stderr and, when the
run's folder exists, its ``time_split.json``.

The cache is on by default, under the user's cache folder, so a rerun reads the
programs an earlier run compiled instead of compiling them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
import sys
from typing import Any, Callable, Iterator

import jax
from jax.experimental.compilation_cache import compilation_cache

from scaling.attention import autotune
from scaling.runs import distributed
from scaling.runs import results
from scaling.runs import timesplit
from scaling.base.config import option
from scaling.base.config import Options
from scaling.base.validation import ConfigTypeError

CACHE_OFF = ("", "none")
"""Values of ``compilation_cache_dir`` that turn the persistent compilation cache off."""


@dataclasses.dataclass(frozen=True)
class ProcessOptions(Options):
  """Options of the process rather than of a study; every entry point has them and ``run`` applies them."""

  compilation_cache_dir: str | None = option(
      None, "Folder of JAX's persistent compilation cache (a rerun reads the programs an earlier run compiled); "
      "default: $XDG_CACHE_HOME/scaling/jax, or ~/.cache/scaling/jax; '' or 'none' turns the cache off.")


def default_compilation_cache_dir() -> pathlib.Path:
  """$XDG_CACHE_HOME/scaling/jax, or ~/.cache/scaling/jax when XDG_CACHE_HOME is not set (beside the autotune's)."""
  return autotune.cache_root() / "jax"


def compilation_cache_dir(value: str | None) -> pathlib.Path | None:
  """The cache folder a ``compilation_cache_dir`` value stands for: None = the default, '' or 'none' = off (None).

  Args:
    value: the option's value.

  Returns:
    The folder, or None when the cache is off.
  """
  if value is None:
    return default_compilation_cache_dir()
  if value.strip().lower() in CACHE_OFF:
    return None
  return pathlib.Path(value).expanduser()


@contextlib.contextmanager
def persistent_compilation_cache(path: pathlib.Path | None) -> Iterator[None]:
  """JAX's persistent compilation cache in ``path`` (None: off) for every compilation inside the block.

  Every compiled program is written (no minimum compile time or size): a
  rerun's many small programs add up. The previous setting is restored after
  the block (which matters only when several runs share one process, as in tests).

  Args:
    path: the cache folder (created by JAX on the first write), or None to turn the cache off.

  Yields:
    Nothing.
  """
  names = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
           "jax_persistent_cache_min_entry_size_bytes")
  before = {name: getattr(jax.config, name) for name in names}
  values = {names[0]: None} if path is None else {names[0]: str(path), names[1]: 0.0, names[2]: -1}
  _set_cache_options(values)
  try:
    yield
  finally:
    _set_cache_options(before)


def _set_cache_options(values: dict[str, Any]) -> None:
  """Sets JAX's cache options and makes the next compilation open the cache afresh."""
  for name, value in values.items():
    jax.config.update(name, value)
  compilation_cache.reset_cache()


def run(study_run: Callable[[Any, pathlib.Path | None], Any], config: Any, out_dir: pathlib.Path | None,
        options: ProcessOptions = ProcessOptions()) -> Any:
  """Calls ``study_run(config, out_dir)`` inside the compilation cache of ``options`` and a time split.

  After the run, process 0 prints the split's line on stderr (stdout stays the
  study's: some print JSON) and writes it to ``out_dir / timesplit.FILE`` when
  ``out_dir`` exists (a dry run writes nothing).

  Args:
    study_run: a study's ``run(config, out_dir)``.
    config: its config.
    out_dir: the run's folder, or None for a run that writes none.
    options: the options of the process.

  Returns:
    What ``study_run`` returned.
  """
  if not callable(study_run):
    raise ConfigTypeError(f"study_run must be callable, got {type(study_run).__name__}")
  if not isinstance(options, ProcessOptions):
    raise ConfigTypeError(f"options must be a ProcessOptions, got {type(options).__name__}")
  with persistent_compilation_cache(compilation_cache_dir(options.compilation_cache_dir)), \
      timesplit.TimeSplit() as split:
    result = study_run(config, out_dir)
  if distributed.is_writer():
    print(split.summary(), file=sys.stderr, flush=True)
    if out_dir is not None and pathlib.Path(out_dir).is_dir():
      results.write_json(pathlib.Path(out_dir) / timesplit.FILE, split.as_dict())
  return result
