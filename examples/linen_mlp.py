"""A flax.linen MLP on a synthetic regression task, made μP from its shapes, coordinate-checked and transferred.

  python -m examples.linen_mlp --out_dir=runs/examples/linen_mlp

The task: inputs x ~ N(0, I_16), targets y = tanh(x A) B of a fixed random teacher; a new batch every step.
"""

from __future__ import annotations

import sys

import flax.linen as nn
import jax
import jax.numpy as jnp

from examples import common

D_IN, D_OUT = 16, 8


class MLP(nn.Module):
  """A plain Flax MLP of any width: nothing in it knows about μP."""

  width: int
  depth: int = 3

  @nn.compact
  def __call__(self, x):
    for i in range(self.depth):
      x = nn.relu(nn.Dense(self.width, name=f"dense_{i}")(x))
    return nn.Dense(D_OUT, name="readout")(x)


def loss_fn(model, batch):
  """Mean squared error."""
  return jnp.mean((model(batch["x"]) - batch["y"]) ** 2)


def make_batches(batch_size: int, seed: int = 0):
  """batches(step) -> {"x" [B, 16], "y" [B, 8]} of the teacher task."""
  ka, kb = jax.random.split(jax.random.key(seed))
  a = jax.random.normal(ka, (D_IN, 64)) / jnp.sqrt(D_IN)
  b = jax.random.normal(kb, (64, D_OUT)) / 8.0

  @jax.jit
  def batch(step):
    x = jax.random.normal(jax.random.fold_in(jax.random.key(seed + 1), step), (batch_size, D_IN))
    return {"x": x, "y": jnp.tanh(x @ a) @ b}

  return batch


def main(argv=None):
  args = common.parser(__doc__.splitlines()[0]).parse_args(argv)
  return common.main("linen_mlp", args, lambda scheme: MLP, loss_fn, make_batches(args.batch_size),
                     data="a synthetic teacher task")


if __name__ == "__main__":
  main(sys.argv[1:])
