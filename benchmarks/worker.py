"""One study run, or one memory measurement, in a fresh process: ``python -m benchmarks.worker JOB``.

The suites that need a process of their own (a cold compilation cache, a peak
memory that no earlier measurement inflated) start this module through
``command`` with one argument, a JSON object: ``kind`` (a key of ``KINDS``),
``config`` (the job's config as ``scaling.base.config.to_dict`` writes it) and
``compilation_cache_dir`` (a ``scaling.studies.process.ProcessOptions`` value). The job
runs as an experiment's main runs it: ``scaling.studies.process.run`` around the
study's ``run`` (after joining the config's cluster) into the config's
``output.out_dir``; ``memory`` prints its measurement as one JSON line instead
(``memory.print_measurement``). Only library code runs, so an installed package
runs its suites from any folder.
"""

from __future__ import annotations

import importlib
import json
import os
import pathlib
import site
import sys
from typing import Any, Callable

import scaling
from scaling.base import config as config_lib
from scaling.runs import distributed
from scaling.studies import process
from scaling.base import validation
from scaling.base.config import Options
from scaling.base.validation import ConfigError
from scaling.base.validation import ConfigTypeError

KINDS = {
    "sweep": ("scaling.studies.sweep", "SweepConfig"),
    "claims": ("scaling.studies.claims.study", "ClaimsConfig"),
    "coord_check": ("scaling.studies.coord_check.study", "CoordCheckConfig"),
    "transfer": ("scaling.studies.transfer.study", "TransferConfig"),
    "train": ("scaling.studies.train", "TrainConfig"),
    "memory": ("benchmarks.memory", "MemoryConfig"),
}
"""Job kind: (its module, the name of its config class there). Imported when a job runs, not before (a memory
measurement's baseline stays that of the library it needs)."""


def job(kind: str) -> tuple[type, Callable[[Any, pathlib.Path | None], Any], bool]:
  """(the config class, the run, whether it writes into ``config.output.out_dir``) of a job kind.

  Args:
    kind: a key of ``KINDS``.

  Returns:
    A study's config class and its ``run`` preceded by ``distributed.initialize`` (as the experiments' mains
    call it), or the memory measurement's config class and ``print_measurement``.
  """
  if kind not in KINDS:
    raise ConfigError(f"kind {validation.must_be_one_of(kind, tuple(KINDS))}")
  module_name, class_name = KINDS[kind]
  module = importlib.import_module(module_name)
  if kind == "memory":
    return getattr(module, class_name), module.print_measurement, False
  return getattr(module, class_name), distributed.initialized(module.run), True


def command(kind: str, config: Options, compilation_cache_dir: str | os.PathLike | None = None) -> list[str]:
  """The command line of one job: this interpreter running this module on the job's JSON.

  Args:
    kind: a key of ``KINDS``.
    config: the job's config (a study's carries its output folder in ``output.out_dir``).
    compilation_cache_dir: JAX's persistent compilation cache (None: the default; '' or 'none': off).

  Returns:
    The arguments, for ``subprocess`` with ``environment()``.
  """
  cls, _, _ = job(kind)
  if not isinstance(config, cls):
    raise ConfigTypeError(f"config of a {kind} job must be a {cls.__name__}, got {type(config).__name__}")
  cache = None if compilation_cache_dir is None else os.fspath(compilation_cache_dir)
  spec = {"kind": kind, "config": config_lib.to_dict(config), "compilation_cache_dir": cache}
  return [sys.executable, "-m", __name__, json.dumps(spec)]


def environment() -> dict[str, str]:
  """This process's environment, with the folder this ``scaling`` was imported from first on PYTHONPATH unless it
  is a site-packages folder (there a fresh interpreter finds it anyway): the job runs the same library."""
  env = dict(os.environ)
  folder = str(pathlib.Path(scaling.__file__).resolve().parents[1])
  site_folders = {str(pathlib.Path(p).resolve()) for p in [*site.getsitepackages(), site.getusersitepackages()]}
  if folder not in site_folders:
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [folder, env.get("PYTHONPATH")]))
  return env


def main(argv: list[str]) -> Any:
  """Runs the job whose JSON is ``argv[1]``; returns what its run returned."""
  if len(argv) != 2:
    raise ConfigError(f"usage: python -m {__name__} JOB_JSON (got {len(argv) - 1} arguments)")
  spec = json.loads(argv[1])
  cls, run, writes = job(spec["kind"])
  config = config_lib.from_dict(cls, spec["config"])
  out_dir = pathlib.Path(config.output.out_dir) if writes else None
  return process.run(run, config, out_dir, process.ProcessOptions(spec["compilation_cache_dir"]))


if __name__ == "__main__":
  main(sys.argv)
