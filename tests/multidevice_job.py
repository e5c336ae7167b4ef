"""Runs a tiny sweep, a learning-rate x seed grid and a short training run on the visible devices (the built-in model,
and a user's Flax model through the same loop); writes JSON.

Used by test_sharding.py in a subprocess (the device count is fixed when JAX starts):
  XLA_FLAGS=--xla_force_host_platform_device_count=4 python tests/multidevice_job.py out.json
"""

import json
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from scaling.training.data.config import DataConfig
from scaling.training.model.family import ModelFamily
from scaling.training.optimizer import OptimizerConfig
from scaling.training.loop import run as loop_lib
from scaling.training.loop import programs as programs_lib
from scaling.mup import user_model
from scaling.studies import sweep

SWEEP = dict(d_k=(4,), rules=("sqrt", "qk_norm"), seq_len=(8,), qk_std=(0.5, 2.0), num_seeds=3, batch=1)
"""The sweep; test_sharding.py passes the same values as flags to experiments.sweep."""


def _specs(tree):
  """The distinct layouts of the arrays of ``tree`` as lists (one entry per axis: None or the mesh axis)."""
  specs = {tuple(getattr(x.sharding, "spec", ())) for x in jax.tree.leaves(tree)}
  return sorted((list(s) for s in specs), key=str)


def main(path: str) -> None:
  out = {"devices": jax.device_count(), "sweep": sweep.run_sweep(sweep.SweepConfig(**SWEEP))}
  dataset = DataConfig(seq_len=8, batch_size=4).make(0)
  family = ModelFamily(depth=1, num_heads=2, base_width=16)
  model_config = family.model_config("sp", 16, vocab_size=dataset.vocab_size, max_len=dataset.seq_len)
  opt = OptimizerConfig(steps=3, learning_rate=1e-2)
  grid_runs = loop_lib.Runs(seed=[0, 1, 2], learning_rates=[1e-3, 1e-2, 3e-2])
  grid = loop_lib.run_training(model_config, opt, dataset, grid_runs, loop_lib.RunOptions(record=("loss",)))
  out["grid_loss"] = grid.records["loss"].tolist()
  out["grid_final_loss"] = grid.final_loss.tolist()
  out["grid_members"] = [x.shape[0] for x in jax.tree.leaves(grid.state.params)]
  out["grid_state_devices"] = [len(x.sharding.device_set) for x in jax.tree.leaves(grid.state.params)]
  for shard_params in (False, True):
    run = loop_lib.run_training(model_config, opt, dataset, loop_lib.Runs(seed=0),
                                loop_lib.RunOptions(record=("loss",), shard_params=shard_params))
    out[f"single_loss_{shard_params}"] = run.records["loss"].tolist()
    out[f"single_specs_{shard_params}"] = _specs(run.state.params)
  # A user's model (a plain Flax MLP and its optax factory) through the same loop: members over the devices, FSDP.
  mlp = lambda width: nn.Sequential([nn.Dense(width), nn.relu, nn.Dense(3)])
  loss = lambda model, batch: jnp.mean((model(batch["x"]) - batch["y"]) ** 2)
  x = jax.random.normal(jax.random.key(0), (3, 8, 4))
  batches = user_model.Batches({"x": x, "y": jnp.tanh(x[..., :3])})
  fm = user_model.functional_model(mlp, loss, 16, batches.example)
  program = programs_lib.FunctionalProgram(fm, lambda width, params, lr: optax.adam(lr))
  user = loop_lib.run_training(program, opt, batches, grid_runs, loop_lib.RunOptions(record=("loss",)))
  out["user_grid_loss"] = user.records["loss"].tolist()
  out["user_grid_state_devices"] = [len(x.sharding.device_set) for x in jax.tree.leaves(user.state.params)]
  user_fsdp = loop_lib.run_training(program, opt, batches, loop_lib.Runs(seed=0),
                                    loop_lib.RunOptions(record=("loss",), shard_params=True))
  out["user_single_loss"] = user_fsdp.records["loss"].tolist()
  with open(path, "w") as f:
    json.dump(out, f)


if __name__ == "__main__":
  main(sys.argv[1])
