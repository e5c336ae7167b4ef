"""Measures the scale of a u-μP model at initialization and writes it as a Markdown table.

  python scripts/unit_scale_check.py OUT.md [--widths=64,1024 --depths=2,16 --seq_lens=64,1024]
  python scripts/unit_scale_check.py OUT.md --merge A.json B.json   # pool runs made separately

For every (width, depth, sequence length) it initializes a u-μP model (4 heads, vocabulary 65, one sequence
of random tokens, u-μP's cross-entropy) and records the RMS of every probed activation, of the gradient
arriving at it and of every weight gradient. The table gives, per quantity (blocks pooled), the smallest and
largest RMS over all blocks and models, and the model each comes from; rows outside [0.5, 2] are marked. Its last
line is the verdict over all quantities (every one in [0.5, 2], or which are not) with the overall extremes.
The measurements are also written to OUT.json, which ``--merge`` pools with others.
"""

import argparse
import collections
import json
import pathlib
import re
import sys


from scaling import model as model_lib
from scaling import parametrization as param_lib
from scaling import report

VOCAB = 65


def model_scales(width: int, depth: int, seq_len: int, seed: int = 0) -> dict[str, float]:
  """{"activation/NAME" | "gradient/NAME" | "weight gradient/NAME": RMS} of one u-μP model at init (per block)."""
  cfg = model_lib.ModelConfig(vocab_size=VOCAB, width=width, depth=depth, num_heads=4, head_dim=width // 4,
                              max_len=seq_len, parametrization=param_lib.get_parametrization("umup"))
  return model_lib.rms_at_init(cfg, seq_len, seed)


def main(argv: list[str]) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("out")
  ints = lambda s: [int(v) for v in s.split(",")]
  parser.add_argument("--widths", type=ints, default=[64, 1024])
  parser.add_argument("--depths", type=ints, default=[2, 16])
  parser.add_argument("--seq_lens", type=ints, default=[64, 1024])
  parser.add_argument("--merge", nargs="+", default=None, help="pool these OUT.json files instead of measuring")
  args = parser.parse_args(argv[1:])
  runs = {}
  if args.merge:
    for path in args.merge:
      runs.update(json.loads(pathlib.Path(path).read_text()))
  else:
    for width in args.widths:
      for depth in args.depths:
        for seq_len in args.seq_lens:
          runs[f"{width}/{depth}/{seq_len}"] = model_scales(width, depth, seq_len)
          print(f"width {width} depth {depth} T {seq_len} measured", flush=True)
    pathlib.Path(args.out).with_suffix(".json").write_text(json.dumps(runs, indent=1))
  pooled = collections.defaultdict(list)
  for point, scales in runs.items():
    for key, value in scales.items():
      pooled[re.sub(r"block_[0-9]+", "block_i", key)].append((value, point))
  shape = lambda i: sorted({int(point.split("/")[i]) for point in runs})
  widths, depths, seq_lens = shape(0), shape(1), shape(2)
  cells = []
  for key in sorted(pooled):
    (lo, lo_at), (hi, hi_at) = min(pooled[key]), max(pooled[key])
    kind, name = key.split("/", 1)
    cells.append([kind, f"`{name}`", f"{lo:.2f} ({lo_at})", f"{hi:.2f} ({hi_at})",
                  "yes" if 0.5 <= lo and hi <= 2.0 else "**no**"])
  heading = (f"RMS at initialization of u-μP models (widths {', '.join(map(str, widths))}; depths "
             f"{', '.join(map(str, depths))}; sequence lengths {', '.join(map(str, seq_lens))}; batch 1, "
             f"vocabulary {VOCAB}, random tokens; blocks pooled; in brackets width/depth/T of the extreme):")
  table = report.markdown_table(["quantity", "tensor", "min RMS", "max RMS", "in [0.5, 2]"], cells)
  values = [(value, key, point) for key, pairs in pooled.items() for value, point in pairs]
  (lo, lo_key, lo_at), (hi, hi_key, hi_at) = min(values), max(values)
  outside = [f"`{c[1][1:-1]}` ({c[0]})" for c in cells if c[-1] != "yes"]
  verdict = (f"all {len(cells)} quantities are in [0.5, 2]" if not outside
             else f"{len(outside)} of {len(cells)} quantities leave [0.5, 2]: {', '.join(outside)}")
  summary = (f"- {verdict}; the smallest RMS is {lo:.2f} ({lo_key.replace('/', ' `', 1)}` at {lo_at}), the "
             f"largest {hi:.2f} ({hi_key.replace('/', ' `', 1)}` at {hi_at}).")
  pathlib.Path(args.out).write_text(f"{heading}\n\n{table}\n\n{summary}\n")
  print(f"wrote {args.out}")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
