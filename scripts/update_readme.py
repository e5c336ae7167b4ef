"""Replaces a generated section of README.md or docs/*.md with a file that a run wrote.

  python scripts/update_readme.py claims runs/claims/claims_readme.md
  python scripts/update_readme.py NAME FILE [TARGET]

The section sits between ``<!-- BEGIN generated: NAME -->`` and
``<!-- END generated: NAME -->`` in the file that ``scaling.runs.report.GENERATED_SECTIONS``
names for it (or in TARGET when given); nothing outside the markers changes.
"""

import pathlib
import sys

from scaling.runs import report

ROOT = pathlib.Path(__file__).resolve().parents[1]
USAGE = "usage: python scripts/update_readme.py NAME FILE [TARGET]"


def main(argv: list[str], root: pathlib.Path = ROOT) -> int:
  if len(argv) not in (3, 4):
    sys.stderr.write(USAGE + "\n")
    return 2
  name, source = argv[1], pathlib.Path(argv[2])
  target = argv[3] if len(argv) == 4 else None
  try:
    path = report.update_generated(root, name, source.read_text(), target)
  except (OSError, ValueError) as e:
    sys.stderr.write(f"error: {e}\n")
    return 2
  resolved, base = path.resolve(), pathlib.Path(root).resolve()
  shown = resolved.relative_to(base) if resolved.is_relative_to(base) else path
  print(f"{shown}: section {name!r} replaced by {source}")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
