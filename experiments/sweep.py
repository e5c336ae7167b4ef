"""Sweeps head dimension d_k and logit-scale rule; measures logits, entropy, saturation and gradients.

  python -m experiments.sweep                       # defaults: d_k 16..1024, rules none,sqrt,linear,qk_norm
  python -m experiments.sweep --rules=sqrt,quadratic,post_softmax --causal --out_dir=runs/sweep2
  python -m experiments.sweep --parametrization=sp,mup --width=256,1024 --d_k=16,64,256

Writes results.jsonl, results.csv, config.json and PNG plots into --out_dir and
prints a table. Each head dimension compiles once (rules and seeds vmapped).
"""

import sys

from experiments import cli
from scaling.runs import distributed
from scaling.studies import sweep


def main(argv=None) -> int:
  return cli.main(sweep.SweepConfig, distributed.initialized(sweep.run), argv, __doc__)


if __name__ == "__main__":
  sys.exit(main())
