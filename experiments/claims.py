"""Measures the claims of the notes this project started from and prints a verdict for each.

  python -m experiments.claims                      # every claim, ~1 minute on 2 CPU cores
  python -m experiments.claims --ids=gradients_vanish,rope_changes_norms

Writes claims.jsonl (one object per claim: id, source, claim, verdict, finding,
numbers), claims.md (a Markdown table) and config.json into --out_dir.
"""

import sys

from experiments import cli
from scaling.studies import claims


def main(argv=None) -> int:
  return cli.main(claims.ClaimsConfig, claims.run, argv, __doc__)


if __name__ == "__main__":
  sys.exit(main())
