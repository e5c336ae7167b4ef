"""Writes the "wider is better" comparison of transfer runs as Markdown (for the generated section of docs/transfer.md).

  python scripts/wider_is_better.py OUT.md LABEL=RUN_DIR [LABEL=RUN_DIR ...]

Each RUN_DIR is the --out_dir of an ``experiments.transfer`` run at two or more widths; the table holds each
width at its best learning rate, and one line per run says whether the wider model is worse beyond the seed
spread (``scaling.studies.transfer.report.width_comparison_markdown`` states the criterion).
"""

import json
import pathlib
import sys

from scaling.runs import results
from scaling.studies.transfer import report as transfer_report


def main(argv: list[str]) -> int:
  if len(argv) < 3 or any("=" not in a for a in argv[2:]):
    sys.stderr.write("usage: python scripts/wider_is_better.py OUT.md LABEL=RUN_DIR [LABEL=RUN_DIR ...]\n")
    return 2
  runs = []
  try:
    for arg in argv[2:]:
      label, folder = arg.split("=", 1)
      runs.append((label, results.read_jsonl(pathlib.Path(folder) / "results.jsonl")))
      config = json.loads((pathlib.Path(folder) / "config.json").read_text())["config"]
      runs[-1] = (f"{label} ({config['optim']['steps']} steps, {config['seeds']['num_seeds']} seeds)", runs[-1][1])
  except (OSError, ValueError, KeyError) as e:
    sys.stderr.write(f"error: {e}\n")
    return 2
  heading = ("μP's final training loss per width at that width's best learning rate (mean of the last steps; "
             "criterion: the wider model is not worse if its mean loss is at most the narrower one's plus twice "
             "the standard error of the difference over seeds):")
  pathlib.Path(argv[1]).write_text(transfer_report.width_comparison_markdown(runs, heading))
  print(f"wrote {argv[1]}")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
