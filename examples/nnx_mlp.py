"""A flax.nnx MLP on the synthetic regression task of ``examples.linen_mlp``, made μP from its shapes,
coordinate-checked and transferred.

  python -m examples.nnx_mlp --out_dir=runs/examples/nnx_mlp
"""

from __future__ import annotations

import sys

from flax import nnx

from examples import common
from examples import linen_mlp


class MLP(nnx.Module):
  """A plain nnx MLP of any width: nothing in it knows about μP."""

  def __init__(self, width: int, rngs: nnx.Rngs, depth: int = 3):
    sizes = [linen_mlp.D_IN] + [width] * depth
    self.layers = nnx.List([nnx.Linear(a, b, rngs=rngs) for a, b in zip(sizes, sizes[1:])])
    self.readout = nnx.Linear(width, linen_mlp.D_OUT, rngs=rngs)

  def __call__(self, x):
    for layer in self.layers:
      x = nnx.relu(layer(x))
    return self.readout(x)


def main(argv=None):
  args = common.parser(__doc__.splitlines()[0]).parse_args(argv)
  return common.main("nnx_mlp", args, lambda scheme: MLP, linen_mlp.loss_fn, linen_mlp.make_batches(args.batch_size),
                     data="a synthetic teacher task")


if __name__ == "__main__":
  main(sys.argv[1:])
