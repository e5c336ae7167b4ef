"""Two claims runs side by side: each claim's statistic and verdict in both, and the seconds each spent on it.

  python -m experiments.claims --mode=quick --text_file=shakespeare --ids=... --out_dir=runs/claims_float32
  python -m experiments.claims --mode=quick --text_file=shakespeare --ids=... --compute_dtype=bfloat16 \
      --out_dir=runs/claims_bfloat16
  python scripts/compare_claims.py runs/claims_float32 runs/claims_bfloat16 float32 bfloat16 OUT.md

Reads each folder's claims.jsonl, timings.jsonl and config.json (the code, day, mode and hardware of each run, named
above the table); the table comes from
``scaling.studies.claims.compare.comparison_markdown``.
"""

import json
import pathlib
import sys

from scaling.runs import results
from scaling.studies.claims import compare

USAGE = "usage: python scripts/compare_claims.py RUN_A RUN_B LABEL_A LABEL_B OUT.md"


def main(argv: list[str]) -> int:
  if len(argv) != 6:
    sys.stderr.write(USAGE + "\n")
    return 2
  run_a, run_b, label_a, label_b, out = (*map(pathlib.Path, argv[1:3]), argv[3], argv[4], pathlib.Path(argv[5]))
  try:
    rows = [results.read_jsonl(run / "claims.jsonl") for run in (run_a, run_b)]
    seconds = [compare.seconds_by_claim(results.read_jsonl(run / "timings.jsonl"))
               if (run / "timings.jsonl").exists() else None for run in (run_a, run_b)]
    configs = [json.loads((run / "config.json").read_text()) for run in (run_a, run_b)]
    text = compare.comparison_markdown(compare.compare_rows(rows[0], rows[1], *seconds), label_a, label_b)
    runs = " and ".join(f"{label} run on {c.get('code', 'unknown code')}, {c.get('date', '')} (mode "
                        f"{c['config']['mode']}, hardware {c['sizes']['hardware']})"
                        for label, c in ((label_a, configs[0]), (label_b, configs[1])))
    text = f"The {label_a} run against the {label_b} run: {runs}.\n\n{text}"
  except (OSError, ValueError) as e:
    sys.stderr.write(f"error: {e}\n")
    return 2
  out.write_text(text)
  print(f"{out}: {text.strip().splitlines()[-1]}")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
