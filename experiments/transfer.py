"""muTransfer of the learning rate: final loss against learning rate at several widths, SP beside muP.

  python -m experiments.transfer                                       # recall task, widths 32..256
  python -m experiments.transfer --text_file=shakespeare \\
      --widths=32,64,128,256 --log2_lrs=-14,-13,-12,-11,-10,-9,-8,-7,-6 --steps=300
  python -m experiments.transfer --axis=depth --depths=2,4,8,16 --parametrizations=mup \\
      --depth_alphas=0,1 --text_file=shakespeare         # the optimum per depth
  python -m experiments.transfer --rules=none,sqrt,linear,qk_norm --parametrizations=mup \\
      --widths=16,32,64 --text_file=shakespeare          # LR sensitivity per rule and width
  python -m experiments.transfer --grid=attn_mult --log2_attn_mults=-2,0,2,4,6 --fixed_log2_lr=-6 \\
      --widths=32,64,128 --text_file=shakespeare         # the optimal attention multiplier
  python -m experiments.transfer --axis=batch --batch_sizes=4,8,16,32 --width=128 --base_width=32 \\
      --text_file=shakespeare                            # the optimum per batch size
  python -m experiments.transfer --axis=steps --step_counts=100,200,400 --width=128 --base_width=32 \\
      --text_file=shakespeare                            # the optimum per training length

For each parametrization and width, trains every (learning rate, seed) pair of
the grid in one vmapped program (the learning rate lives in the optimizer
state, so each width compiles once) and records the mean training loss of the
last steps (Tensor Programs V, Fig. 1). Diverged runs (a non-finite loss) get
a null loss and never win. Writes, into --out_dir, results.jsonl (one row per
parametrization, width and learning rate) and optimum.jsonl (the best learning
rate per parametrization and width); results.jsonl grows width by width, so a
rerun into the same --out_dir resumes; then transfer.png and config.json; prints
the loss grid and the optimum per width.
Under muP the optimum stays put as the width grows; under SP it moves to
smaller learning rates. With --axis=depth the grid is trained per depth (and
--depth_alphas value) at one --width, and the optimum is reported per depth;
--axis=batch (--batch_sizes) and --axis=steps (--step_counts) likewise per batch
size and per training length. --rules trains every point once per logit-scale
rule (one compiled program per point and rule; rows carry the rule).

A learning-rate grid also reports each point's learning-rate sensitivity
(Wortsman et al. 2023, §3: the mean over the grid of min(loss, initial loss)
minus the best loss, diverged runs at the initial loss), per seed and as mean
and std over the seeds, in optimum.jsonl and sensitivity.md, and plots it
against the axis (sensitivity.png). --grid=attn_mult sweeps instead the
multiplier alpha of the logit scale alpha/d_head at the learning rate
2^--fixed_log2_lr: alpha is a traced input of the vmapped step, so each point
still compiles once; optimum.jsonl then holds the optimal log2 alpha per point.
"""

import sys

from experiments import cli
from scaling.runs import distributed
from scaling.studies.transfer import study as transfer


def main(argv=None) -> int:
  return cli.main(transfer.TransferConfig, distributed.initialized(transfer.run), argv, __doc__)


if __name__ == "__main__":
  sys.exit(main())
