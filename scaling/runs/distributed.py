"""Several hosts: ``jax.distributed`` started from options, and the one process that writes results.

With ``--distributed`` every process of a job runs the same command; before
any JAX work each calls ``jax.distributed.initialize`` (``initialize``), after
which ``jax.devices()`` lists the devices of every process and the mesh of
``scaling.training.sharding`` spans them all: each process computes the rows of the
work that lie on its own devices, results are gathered onto every process, and
only process 0 writes result files (``is_writer``). ``coordinator_address``,
``num_processes`` and ``process_id`` are passed to
``jax.distributed.initialize`` under the same names; left unset, it reads them
from the cluster environment (Cloud TPU, Slurm, Open MPI, ...). On CPU the
processes exchange data through gloo collectives.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import jax
import numpy as np

from scaling.base.config import option
from scaling.base.config import Options
from scaling.base.validation import ConfigError


@dataclasses.dataclass(frozen=True)
class DistributedConfig(Options):
  """How this process joins a multi-process job (the arguments of ``jax.distributed.initialize``)."""

  distributed: bool = option(False, "Run as one process of several (jax.distributed.initialize before any JAX "
                             "work); only process 0 writes results.")
  coordinator_address: str | None = option(None, "With --distributed: host:port of process 0's coordinator; "
                                           "default: from the cluster environment.")
  num_processes: int | None = option(None, "With --distributed: number of processes; default: from the cluster "
                                     "environment.", lower=1)
  process_id: int | None = option(None, "With --distributed: this process's index, 0 .. num_processes - 1; "
                                  "default: from the cluster environment.", lower=0)

  def validate(self):
    given = [n for n in ("coordinator_address", "num_processes", "process_id") if getattr(self, n) is not None]
    if given and not self.distributed:
      raise ConfigError(f"{given[0]} needs distributed=True")
    if self.num_processes is not None and self.process_id is not None and self.process_id >= self.num_processes:
      raise ConfigError(f"process_id must be below num_processes, got {self.process_id} and {self.num_processes}",
                        fields=("num_processes",))


def initialize(config: DistributedConfig) -> None:
  """Joins the job described by ``config`` (nothing without ``config.distributed``); call before any JAX work.

  Args:
    config: the options; unset fields are detected by ``jax.distributed.initialize`` from the environment.
  """
  if not config.distributed or jax.distributed.is_initialized():
    return
  jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU devices of several processes
  jax.distributed.initialize(coordinator_address=config.coordinator_address, num_processes=config.num_processes,
                             process_id=config.process_id)


def is_writer() -> bool:
  """Whether this process writes result files: process 0 of a job (always true for a single process)."""
  return jax.process_index() == 0


def agree(value: int) -> int:
  """Process 0's ``value`` on every process of a job (``value`` itself in a single process).

  A decision that each process could make differently from what it reads on
  disk (the newest checkpoint, whether the run already finished) is made once,
  by process 0, so that all processes restore the same state and run the same
  collectives. Every process must call it at the same point.

  Args:
    value: this process's value (an integer, e.g. a step, -1 for none, or 0/1).

  Returns:
    Process 0's value.
  """
  if jax.process_count() == 1:
    return int(value)
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top

  return int(multihost_utils.broadcast_one_to_all(np.asarray(value, np.int64)))


def initialized(run: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
  """``run(config, out_dir)`` preceded by ``initialize(config.cluster)`` (for the experiments' mains).

  Args:
    run: a study's ``run``; its config has a ``cluster`` field (a DistributedConfig).

  Returns:
    The wrapped function.
  """

  @functools.wraps(run)
  def wrapped(config, out_dir):
    initialize(config.cluster)
    return run(config, out_dir)

  return wrapped
