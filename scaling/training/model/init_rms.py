"""The RMS of every activation, activation gradient and weight gradient of a freshly initialized built-in model.

The check of u-μP's unit scale (Blake et al. 2024, "u-μP", §4: every tensor of a unit-scaled model should start at
RMS ≈ 1), for any parametrization.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from scaling.base import compilation
from scaling.mup import layers
from scaling.mup import shapes as shapes_lib
from scaling.mup import unit_scaling as unit
from scaling.training.model.transformer import Transformer
from scaling.training.model.transformer import init_params
from scaling.training.model.config import ModelConfig

def rms_at_init(config: ModelConfig, seq_len: int, seed: int = 0) -> dict[str, float]:
  """RMS of every probed activation, of the gradient arriving at it and of every weight gradient at initialization.

  One sequence of random tokens through a freshly initialized model; the loss is u-μP's unit-scaled
  cross-entropy (``unit_scaling.cross_entropy``), whose backward pass gives the logits a unit-scale gradient
  (Blake et al. 2024, "u-μP", §4: every tensor of a unit-scaled model should start at RMS ≈ 1).

  Args:
    config: the model (any parametrization; u-μP is the one meant to give unit scale).
    seq_len: T.
    seed: the key of the initialization and of the tokens.

  Returns:
    {"activation/NAME" | "gradient/NAME" | "weight gradient/NAME": RMS}, NAME the probe or parameter path.
  """
  model = Transformer(config)
  init_key, data_key = jax.random.split(jax.random.PRNGKey(seed))
  tokens = jax.random.randint(data_key, (1, seq_len + 1), 0, config.vocab_size)
  params = compilation.jit(init_params, static_argnums=1)(init_key, config)
  zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype),
                       jax.eval_shape(model.init, init_key, tokens[:, :-1])[layers.PERTURBATIONS])

  def loss(params, perturbations):
    logits, state = model.apply({"params": params, layers.PERTURBATIONS: perturbations}, tokens[:, :-1],
                                mutable=[layers.ACTIVATIONS])
    return unit.cross_entropy(logits, tokens[:, 1:], jnp.ones((1, seq_len))), state[layers.ACTIVATIONS]

  def rms_trees(params, perturbations):
    (_, acts), (grads, act_grads) = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(params, perturbations)
    rms = lambda x: jnp.sqrt(jnp.mean(jnp.square(x.astype(jnp.float32))))
    return [jax.tree.map(rms, tree) for tree in (acts, act_grads, grads)]

  trees = jax.device_get(compilation.jit(rms_trees)(params, zeros))
  out = {}
  for prefix, tree in zip(("activation", "gradient", "weight gradient"), trees):
    for path, x in jax.tree_util.tree_leaves_with_path(tree):
      name = "/".join(n for n in shapes_lib.path_names(path) if not n.isdigit())
      out[f"{prefix}/{name}"] = float(x)
  return out
