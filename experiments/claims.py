"""Measures the claims of the notes this project started from and decides each verdict from its criterion.

  python -m experiments.claims                                  # every claim, quick mode (reduced sizes)
  python -m experiments.claims --mode=full --text_file=../shared/data/tinyshakespeare.txt
  python -m experiments.claims --ids=gradients_vanish,rope_changes_norms

Each claim declares a criterion (a statistic and the thresholds for holds /
does not hold; partly in between); the verdict is computed from the measured
statistic. Random-input claims take about a minute; the training claims train
grids of learning rates x seeds per rule and depth (quick mode: minutes on 2
CPU cores; full mode: the sizes of docs/claims.md, hours on CPU). Writes claims.jsonl
(per claim: id, source, claim, criterion, statistic, value, verdict, finding,
numbers with spread over seeds, and the command that reproduces the row),
claims.md, claims_readme.md (the tables docs/claims.md shows) and config.json.
"""

import sys

from experiments import cli
from scaling import distributed
from scaling.studies import claims


def main(argv=None) -> int:
  return cli.main(claims.ClaimsConfig, distributed.initialized(claims.run), argv, __doc__)


if __name__ == "__main__":
  sys.exit(main())
