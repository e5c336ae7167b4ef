"""Replaces a generated section of README.md with a file that a run wrote.

  python scripts/update_readme.py claims runs/claims/claims_readme.md

The section sits between ``<!-- BEGIN generated: NAME -->`` and
``<!-- END generated: NAME -->`` in README.md; nothing outside it changes.
"""

import pathlib
import sys

from scaling import report

ROOT = pathlib.Path(__file__).resolve().parents[1]


def main(argv: list[str]) -> int:
  if len(argv) != 3:
    sys.stderr.write("usage: python scripts/update_readme.py NAME FILE\n")
    return 2
  name, source = argv[1], pathlib.Path(argv[2])
  readme = ROOT / "README.md"
  try:
    readme.write_text(report.replace_generated(readme.read_text(), name, source.read_text()))
  except (OSError, ValueError) as e:
    sys.stderr.write(f"error: {e}\n")
    return 2
  print(f"README.md: section {name!r} replaced by {source}")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
