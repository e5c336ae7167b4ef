"""Measures the scale of a u-μP model at initialization and writes it as a Markdown table.

  python scripts/unit_scale_check.py --out=OUT.md [--umup_scales=paper|covariance]
      [--widths=64,1024 --depths=2,16 --seq_lens=64,1024]
  python scripts/unit_scale_check.py --out=OUT.md --merge=A.json,B.json   # pool runs made separately

For every (width, depth, sequence length) it initializes a u-μP model (4 heads, vocabulary 65, one sequence
of random tokens, u-μP's cross-entropy) with the op scales of --umup_scales (paper: the paper's fixed closed
forms; covariance: corrected for positions correlated at init) and records the RMS of every probed
activation, of the gradient arriving at it and of every weight gradient. The table gives, per quantity
(blocks pooled), the smallest and largest RMS over all blocks and models, and the model each comes from;
rows outside [0.5, 2] are marked. Its last lines are the verdict over all quantities (every one in [0.5, 2],
or which are not) with the overall extremes, and the mean |ln RMS| over all measurements. The measurements
are also written to OUT.json (with the setting), which ``--merge`` pools with others of the same setting.
"""

import collections
import dataclasses
import json
import math
import pathlib
import re
import sys

from experiments import cli
from scaling.base import config as config_lib
from scaling.training.model.family import ModelFamily
from scaling.training.model.config import ModelConfig
from scaling.training.model import init_rms as init_rms_lib
from scaling.mup import schemes as param_lib
from scaling.runs import report
from scaling.base.config import option
from scaling.base.validation import ConfigError

VOCAB = 65
_UMUP_SCALES = {f.name: f for f in dataclasses.fields(ModelFamily)}["umup_scales"]


@dataclasses.dataclass(frozen=True)
class Options(config_lib.Options):
  """The options of the unit-scale check."""

  out: str = option("unit_scale.md", "Markdown table to write; the measurements go to the same path with .json.")
  widths: tuple[int, ...] = option((64, 1024), "Model widths (4 heads).", lower=1)
  depths: tuple[int, ...] = option((2, 16), "Numbers of blocks.", lower=1)
  seq_lens: tuple[int, ...] = option((64, 1024), "Sequence lengths T (batch 1).", lower=1)
  umup_scales: str = option(_UMUP_SCALES.default, _UMUP_SCALES.metadata["help"],
                            choices=_UMUP_SCALES.metadata["choices"])
  merge: tuple[str, ...] | None = option(None, "Pool these OUT.json files (of the same --umup_scales) instead of "
                                         "measuring.")

  def validate(self):
    if any(width % 4 for width in self.widths):
      raise ConfigError(f"--widths must be multiples of the 4 heads, got {','.join(map(str, self.widths))}")


def model_scales(width: int, depth: int, seq_len: int, seed: int = 0, umup_scales: str = "paper") -> dict[str, float]:
  """{"activation/NAME" | "gradient/NAME" | "weight gradient/NAME": RMS} of one u-μP model at init (per block)."""
  cfg = ModelConfig(vocab_size=VOCAB, width=width, depth=depth, num_heads=4, head_dim=width // 4,
                              max_len=seq_len,
                              parametrization=param_lib.get_parametrization("umup", umup_scales=umup_scales))
  return init_rms_lib.rms_at_init(cfg, seq_len, seed)


def _load(paths: tuple[str, ...], umup_scales: str) -> dict[str, dict[str, float]]:
  """The runs of several OUT.json files (ConfigError when one was made with another setting)."""
  runs = {}
  for path in paths:
    saved = json.loads(pathlib.Path(path).read_text())
    if saved.get("umup_scales") != umup_scales:
      raise ConfigError(f"--merge: {path} holds umup_scales={saved.get('umup_scales')!r}, not {umup_scales!r}")
    runs.update(saved["runs"])
  return runs


def run(options: Options, out_dir: None) -> None:
  """Measures (or pools) and writes the table."""
  del out_dir
  pathlib.Path(options.out).parent.mkdir(parents=True, exist_ok=True)  # before the measurements, not after
  if options.merge:
    runs = _load(options.merge, options.umup_scales)
  else:
    runs = {}
    for width in options.widths:
      for depth in options.depths:
        for seq_len in options.seq_lens:
          runs[f"{width}/{depth}/{seq_len}"] = model_scales(width, depth, seq_len, umup_scales=options.umup_scales)
          print(f"width {width} depth {depth} T {seq_len} measured", flush=True)
    saved = {"umup_scales": options.umup_scales, "runs": runs}
    pathlib.Path(options.out).with_suffix(".json").write_text(json.dumps(saved, indent=1))
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
    cells.append([kind, f"`{name}`", f"{lo:.3g} ({lo_at})", f"{hi:.3g} ({hi_at})",
                  "yes" if 0.5 <= lo and hi <= 2.0 else "**no**"])
  heading = (f"RMS at initialization of u-μP models with `--umup_scales={options.umup_scales}` (widths "
             f"{', '.join(map(str, widths))}; depths {', '.join(map(str, depths))}; sequence lengths "
             f"{', '.join(map(str, seq_lens))}; batch 1, vocabulary {VOCAB}, random tokens; blocks pooled; in "
             f"brackets width/depth/T of the extreme):")
  table = report.markdown_table(["quantity", "tensor", "min RMS", "max RMS", "in [0.5, 2]"], cells)
  values = [(value, key, point) for key, pairs in pooled.items() for value, point in pairs]
  (lo, lo_key, lo_at), (hi, hi_key, hi_at) = min(values), max(values)
  outside = [f"`{c[1][1:-1]}` ({c[0]})" for c in cells if c[-1] != "yes"]
  verdict = (f"all {len(cells)} quantities are in [0.5, 2]" if not outside
             else f"{len(outside)} of {len(cells)} quantities leave [0.5, 2]: {', '.join(outside)}")
  summary = (f"- {verdict}; the smallest RMS is {lo:.3g} ({lo_key.replace('/', ' `', 1)}` at {lo_at}), the "
             f"largest {hi:.3g} ({hi_key.replace('/', ' `', 1)}` at {hi_at}).")
  per_model = []
  for point, scales in runs.items():
    per_model.append((sum(abs(math.log(v)) for v in scales.values()) / len(scales), point))
  deviation = (f"- mean |ln RMS| over every tensor of a model: {min(per_model)[0]:.3f} ({min(per_model)[1]}) to "
               f"{max(per_model)[0]:.3f} ({max(per_model)[1]}).")
  pathlib.Path(options.out).write_text(f"{heading}\n\n{table}\n\n{summary}\n{deviation}\n")
  print(f"wrote {options.out}")


def main(argv: list[str] | None = None) -> int:
  return cli.main(Options, run, argv, __doc__, needs_out_dir=False)


if __name__ == "__main__":
  sys.exit(main())
