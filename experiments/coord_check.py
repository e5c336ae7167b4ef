"""The muP coordinate check: RMS of each layer's output against width over the first training steps.

  python -m experiments.coord_check                                   # sp and mup, widths 64..1024, 4 steps
  python -m experiments.coord_check --parametrizations=sp,mup,umup --widths=32,64,128 --steps=8
  python -m experiments.coord_check --text_file=data.txt --optimizer=sgd --learning_rate=0.1
  python -m experiments.coord_check --axis=depth --depths=2,4,8,16,32 --parametrizations=mup \\
      --depth_alphas=0,0.5,1                                          # depth at width 128 (CompleteP)

For each parametrization and width, trains --num_seeds models (vmapped) for
--steps steps on one fixed batch and records the RMS of the embedding output,
each block's attention logits, attention output and MLP output, and the
readout logits at steps 0..k (as microsoft/mup's get_coord_data; Tensor
Programs V, D.1). Writes results.jsonl (one row per parametrization, width,
step and layer), slopes.jsonl and slopes.csv (least-squares slope of log2 RMS
against log2 width), coord_check.png (rows: parametrizations, columns: steps)
and config.json into --out_dir, and prints the slopes. Under muP the slopes
stay near 0 (or negative) at every step; under SP they grow once training starts.
With --axis=depth the points are depths at one --width, per --depth_alphas value
(residual branches scaled by (depth/base_depth)^-alpha), the layers are comparable
across depths (embed, mean branch outputs, final residual stream, readout) and
the slopes are against log2 depth.
"""

import sys

from experiments import cli
from scaling.runs import distributed
from scaling.studies.coord_check import study as coord_check


def main(argv=None) -> int:
  return cli.main(coord_check.CoordCheckConfig, distributed.initialized(coord_check.run), argv, __doc__)


if __name__ == "__main__":
  sys.exit(main())
