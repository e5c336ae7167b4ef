"""Measures the claims of the notes this project started from and decides each verdict from its criterion.

  python -m experiments.claims                                  # every claim, quick mode (minutes on 2 CPU cores)
  python -m experiments.claims --mode=cpu_hour --text_file=shakespeare   # about an hour
  python -m experiments.claims --mode=paper --dry_run            # the notes' setting: its plan and expected time
  python -m experiments.claims --ids=gradients_vanish,rope_changes_norms

Each measured claim declares a criterion (a statistic, the thresholds for
holds / does not hold, partly in between, and the reason the thresholds follow
from the claim's words); the verdict is computed from the measured statistic.
The notes' citations are checked against their sources instead (verdict
"source agrees", "source contradicts", "not stated in the source" or "not
found in the passage checked", with the passage quoted), never measured.
Supporting measurements (no claim of the notes) are decided like claims and
counted apart. Random-input claims take about a minute; the training claims train
grids of learning rates x seeds per logit rule, depth and setup. Modes: quick
(reduced sizes, minutes), cpu_hour (the largest sizes planned for an hour on 2
CPU cores) and paper (the notes' setting, for an accelerator:
scripts/device_claims.sh); the planned training and its expected time on the
present device are printed before anything runs. Writes claims.jsonl (per
claim: id, kind, source, claim, criterion, reason, statistic, value, verdict,
margin, finding, numbers with spread over seeds, and the command that
reproduces the row), claims.md, claims_readme.md (the tables docs/claims.md
shows) and config.json.
"""

import sys

from experiments import cli
from scaling.runs import distributed
from scaling.studies.claims import study as claims


def main(argv=None) -> int:
  return cli.main(claims.ClaimsConfig, distributed.initialized(claims.run), argv, __doc__)


if __name__ == "__main__":
  sys.exit(main())
