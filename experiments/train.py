"""Trains a small decoder-only transformer and logs loss, gradient norms and attention statistics.

  python -m experiments.train                                   # associative recall
  python -m experiments.train --parametrization=mup --width=256 --rule=qk_norm
  python -m experiments.train --text_file=input.txt --steps=2000 --seq_len=64
  python -m experiments.train --text_file=input.txt --learning_rate=3e-2 --z_loss=1e-3 --optimizer=adam_atan2

Writes into --out_dir: run.json and config.json (first), metrics.jsonl (one object
per logged step, streamed so an interrupted run keeps its log), summary.json (final
and held-out loss/accuracy, divergence step), timings.json (wall time, steps/s) and
PNG curves:
loss.png, grad_norm.png and attention.png (per-layer entropy and max logit
against step). Training stops early when the loss is non-finite or above
--divergence_factor x the initial loss; a diverged run is evaluated on its last
finite state; plots are written in every case. With --checkpoint_every=N a
checkpoint is saved every N steps; rerun with the same flags and --out_dir, an
interrupted run resumes from the newest one (--overwrite starts afresh).
"""

import sys

from experiments import cli
from scaling.runs import distributed
from scaling.studies import train as training


def main(argv=None) -> int:
  return cli.main(training.TrainConfig, distributed.initialized(training.run), argv, __doc__)


if __name__ == "__main__":
  sys.exit(main())
