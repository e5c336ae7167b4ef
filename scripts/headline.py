"""Writes the README's headline (verdict counts and one-line answers) from the output of a claims run.

  python -m experiments.claims --out_dir=runs/claims
  python scripts/headline.py runs/claims runs/claims/headline.md
  python scripts/update_readme.py headline runs/claims/headline.md

Reads CLAIMS_DIR/claims.jsonl and CLAIMS_DIR/config.json; the text comes from
``scaling.runs.report.claims_headline``.
"""

import json
import pathlib
import sys

from scaling.runs import report
from scaling.runs import results


def main(argv: list[str]) -> int:
  if len(argv) != 3:
    sys.stderr.write("usage: python scripts/headline.py CLAIMS_DIR OUT.md\n")
    return 2
  claims_dir, out = pathlib.Path(argv[1]), pathlib.Path(argv[2])
  try:
    rows = results.read_jsonl(claims_dir / "claims.jsonl")
    config = json.loads((claims_dir / "config.json").read_text())
    out.write_text(report.claims_headline(rows, config))
  except (OSError, ValueError) as e:
    sys.stderr.write(f"error: {e}\n")
    return 2
  print(f"{out}: headline of {len(rows)} claims from {claims_dir}")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
