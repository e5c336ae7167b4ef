"""Runs ``experiments.train`` and SIGKILLs this very process while it writes the checkpoint of a given step.

  python tests/kill_mid_save.py STEP --out_dir=... [train flags]

When the save of checkpoint STEP begins, a thread starts watching
``<out_dir>/checkpoints`` and kills the process (SIGKILL: nothing is cleaned up)
as soon as orbax's temporary folder of that checkpoint exists, that is in the
middle of that save. (Watching only then keeps the polling from taking CPU time
from the run before it.) Used by test_sharding.py.
"""

import os
import pathlib
import signal
import sys
import threading
import time

from experiments import train
from scaling.training.loop import checkpoint as checkpoint_lib


def _watch(directory: pathlib.Path, step: int) -> None:
  prefix = f"{step}."
  while True:
    if directory.is_dir() and any(p.name.startswith(prefix) and "tmp" in p.name for p in directory.iterdir()):
      os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.0005)


def main(argv):
  step, flags = int(argv[1]), argv[2:]
  out_dir = next(f.split("=", 1)[1] for f in flags if f.startswith("--out_dir="))
  save = checkpoint_lib.Checkpoints.save

  def watched_save(self, state, **kwargs):
    if int(state.step) == step:
      threading.Thread(target=_watch, args=(pathlib.Path(out_dir) / "checkpoints", step), daemon=True).start()
    return save(self, state, **kwargs)

  checkpoint_lib.Checkpoints.save = watched_save
  return train.main(["train", *flags])


if __name__ == "__main__":
  sys.exit(main(sys.argv))
