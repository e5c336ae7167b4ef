"""u-μP for your own model: a flax.linen MLP built from scaling.mup.unit_scaling's ops, its roles inferred from shapes.

  python -m examples.umup_mlp --widths=64,128,256,512 --steps=200

The model computes every matmul with u-μP's unit-scaled linear (Blake et al. 2024: forward scale 1/√fan_in,
1/fan_in for the readout; backward scales of unit_scaling's ``linear`` and ``linear_readout``), a unit-scaled GELU
and u-μP's cross-entropy. Its parameters are plain arrays, so ``scaling.infer_kinds`` finds their roles (input,
hidden, readout) from the shapes at two widths, and ``scaling.parametrize(roles, "umup", forward="model")`` gives
their init (unit normal) and per-parameter Adam learning rates; the forward scales stay in the ops
(``forward="model"``). The task: x ~ N(0, I_16), the label the argmax of a fixed random teacher's 10 logits, a new
batch every step. Printed per width: each layer's output RMS at init (u-μP's claim: about 1 at every width), the
check that the ops' forward scales are the parametrization's multipliers, and the loss after training at one
learning rate.
"""

from __future__ import annotations

import argparse
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp

import scaling
from scaling.mup import unit_scaling as unit

D_IN, CLASSES = 16, 10


class UnitDense(nn.Module):
  """x @ W with u-μP's unit-scaled linear: ``readout=True`` uses the readout's scales (``linear_readout``)."""

  features: int
  readout: bool = False

  @nn.compact
  def __call__(self, x):
    """x [B, fan_in] -> [B, features]."""
    kernel = self.param("kernel", nn.initializers.normal(1.0), (x.shape[-1], self.features))
    scales = (unit.readout_scales if self.readout else unit.unit_linear_scales)(x.shape[-1], self.features,
                                                                                x.shape[0])
    return unit.linear(x, kernel, *scales)


class UnitMlp(nn.Module):
  """input -> (depth − 1) hidden layers -> readout, unit-scaled GELU between; sows each layer's output."""

  width: int
  depth: int = 3

  @nn.compact
  def __call__(self, x):
    """x [B, D_IN] -> logits [B, CLASSES]."""
    for i in range(self.depth):
      x = UnitDense(self.width, name=f"dense_{i}")(x)
      self.sow("intermediates", f"out_{i}", x)
      x = unit.gelu(x)
    return UnitDense(CLASSES, readout=True, name="readout")(x)


def forward_scales(width: int, depth: int, batch: int) -> dict[str, float]:
  """The forward scale each layer's op applies (path -> scale)."""
  fans = [(D_IN, width)] + [(width, width)] * (depth - 1)
  out = {f"dense_{i}/kernel": unit.unit_linear_scales(*f, batch).output for i, f in enumerate(fans)}
  out["readout/kernel"] = unit.readout_scales(width, CLASSES, batch).output
  return out


def batch_at(step, batch_size: int, seed: int = 0):
  """(x [B, D_IN], labels [B]) of the teacher task at ``step``."""
  teacher = jax.random.normal(jax.random.key(seed), (D_IN, CLASSES))
  x = jax.random.normal(jax.random.fold_in(jax.random.key(seed + 1), step), (batch_size, D_IN))
  return x, jnp.argmax(x @ teacher, axis=-1)


def run(widths=(64, 128, 256, 512), *, depth: int = 3, steps: int = 200, batch_size: int = 64,
        learning_rate: float = 0.1, seed: int = 0) -> dict[int, dict[str, object]]:
  """Per width: {"init_rms": {layer: RMS at init}, "loss": [steps] training losses, "scales_match": bool}."""
  model = lambda w: UnitMlp(w, depth)
  x0 = jnp.zeros((batch_size, D_IN))
  shapes = lambda w: jax.eval_shape(lambda: model(w).init(jax.random.key(0), x0))["params"]
  base, delta = shapes(widths[0]), shapes(2 * widths[0])
  out = {}
  for width in widths:
    roles = scaling.infer_kinds(base, delta, shapes(width))
    p = scaling.parametrize(roles, "umup", forward="model")
    params = p.init(jax.random.key(seed), model(width).init(jax.random.key(seed), x0)["params"])
    expected = forward_scales(width, depth, batch_size)
    scales_match = all(abs(p.multiplier(path) - scale) <= 1e-12 * scale for path, scale in expected.items())
    x, _ = batch_at(0, batch_size, seed)
    _, sown = model(width).apply({"params": params}, x, mutable=["intermediates"])
    init_rms = {name: float(jnp.sqrt(jnp.mean(v[0] ** 2))) for name, v in sown["intermediates"].items()}
    opt = p.optimizer("adam", learning_rate)

    def step(carry, i, width=width, opt=opt):
      params, state = carry
      x, labels = batch_at(i, batch_size, seed)
      loss_of = lambda q: unit.cross_entropy(model(width).apply({"params": q}, x), labels, jnp.ones(labels.shape))
      loss, grads = jax.value_and_grad(loss_of)(params)
      updates, state = opt.update(grads, state, params)
      return (jax.tree.map(jnp.add, params, updates), state), loss

    _, losses = jax.jit(lambda params: jax.lax.scan(step, (params, opt.init(params)), jnp.arange(steps)))(params)
    out[width] = {"init_rms": init_rms, "loss": [float(v) for v in losses], "scales_match": scales_match}
  return out


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--widths", default="64,128,256,512", help="Comma-separated widths (the first is the base).")
  parser.add_argument("--depth", type=int, default=3, help="Dense layers before the readout.")
  parser.add_argument("--steps", type=int, default=200, help="Adam steps per width.")
  parser.add_argument("--batch_size", type=int, default=64, help="Examples per step.")
  parser.add_argument("--learning_rate", type=float, default=0.1, help="One Adam learning rate for every width.")
  args = parser.parse_args(argv)
  widths = tuple(int(w) for w in args.widths.split(","))
  result = run(widths, depth=args.depth, steps=args.steps, batch_size=args.batch_size,
               learning_rate=args.learning_rate)
  for width, row in result.items():
    rms = "  ".join(f"{name} {value:.3f}" for name, value in row["init_rms"].items())
    tail = sum(row["loss"][-10:]) / len(row["loss"][-10:])
    print(f"width {width:5d}  RMS at init: {rms}  ops' scales = multipliers: {row['scales_match']}  "
          f"loss {row['loss'][0]:.3f} -> {tail:.3f} (mean of the last 10 steps)")
  return result


if __name__ == "__main__":
  main(sys.argv[1:])
