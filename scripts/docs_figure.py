"""Copies a run's figure into docs/, palette-compressed (64 colours), so the pages' figures stay small.

  python scripts/docs_figure.py runs/coord_check/coord_check.png docs/coord_check.png
"""

import pathlib
import sys

from PIL import Image

COLORS = 64
"""The palette: the figures' lines, markers and text use far fewer colours; anti-aliasing is what the rest holds."""


def main(argv: list[str]) -> int:
  if any(a in ("-h", "--help") for a in argv[1:]):
    print(__doc__.strip())
    return 0
  if len(argv) != 3:
    print("usage: python scripts/docs_figure.py SOURCE.png DEST.png", file=sys.stderr)
    return 2
  source, dest = pathlib.Path(argv[1]), pathlib.Path(argv[2])
  if not source.is_file():
    print(f"error: {source} does not exist", file=sys.stderr)
    return 2
  image = Image.open(source).convert("RGB").quantize(colors=COLORS, method=Image.Quantize.MEDIANCUT)
  image.save(dest, optimize=True)
  print(f"{dest}: {dest.stat().st_size // 1024} KiB from {source}")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
