"""Output-logit growth with and without z-loss, and Adam against Adam-atan2 over learning rates.

  python -m experiments.stability --text_file=shakespeare --out_dir=runs/stability

Trains one model (default: μP, width 128 at base width 32, depth 2) on the
data of ``--text_file`` and measures

* log Z (the logsumexp of the output logits, mean and max over tokens) at the
  start and end of training at ``--log_z_learning_rate``, with z-loss 0 and
  ``--z_loss``;
* the final loss (mean over the last ``--final_window`` steps) of Adam,
  Adam with ε scaled as μP prescribes (train's ε scaling ``mup``) and Adam-atan2
  at each of ``--learning_rates`` (one vmapped program per optimizer).

Writes runs.jsonl (one row per training run, as each ends: a stopped run
resumes from it), results.json and stability.md (two Markdown tables, for the generated
docs/stability.md section: ``python scripts/update_readme.py stability runs/stability/stability.md``).
"""

import sys

from experiments import cli
from scaling.studies import stability


def main(argv=None) -> int:
  return cli.main(stability.StabilityConfig, stability.run, argv, __doc__)


if __name__ == "__main__":
  sys.exit(main())
