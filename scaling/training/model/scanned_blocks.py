"""Consecutive blocks of the built-in Transformer run as one ``jax.lax.scan`` over their stacked parameters.

``scan_groups`` finds the runs of blocks that may share one scan (scales equal but for u-μP's τ), ``scanned_blocks``
applies them, and ``stack_blocks`` / ``unstack_blocks`` convert between the two parameter layouts: one ``block_{i}``
per block, or every block's stacked under ``block_0`` ([depth, ...], the layout a scanned model trains in).
"""

from __future__ import annotations

from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from scaling.mup import layers
from scaling.mup import unit_scaling as unit
from scaling.training.model.blocks import Block
from scaling.training.model.config import ModelConfig

Array = jax.Array

def _without_taus(scales: unit.BlockScales | None) -> unit.BlockScales | None:
  """A block's scales but for its τ: what consecutive blocks must share to run in one scan."""
  return None if scales is None else scales._replace(tau_attn=0.0, tau_mlp=0.0)


def scan_groups(block_scales: Sequence[unit.BlockScales | None]) -> list[list[int]]:
  """The blocks in runs of consecutive blocks whose scales agree but for τ (one run for every non-u-μP model)."""
  groups: list[list[int]] = []
  for i, scales in enumerate(block_scales):
    if groups and _without_taus(block_scales[groups[-1][0]]) == _without_taus(scales):
      groups[-1].append(i)
    else:
      groups.append([i])
  return groups


class _ScannedBlock(nn.Module):
  """One block of a scanned run as its own program: the ``Block`` named ``block_name`` (so its layers find their
  specs by the same paths), its τ given as values."""

  config: ModelConfig
  specs: Any
  attn_mult: Any
  scales: unit.BlockScales | None
  block_name: str

  @nn.compact
  def __call__(self, x: Array, taus: Array | None) -> Array:
    scales = self.scales if taus is None else self.scales._replace(tau_attn=taus[0], tau_mlp=taus[1])
    return Block(self.config, self.specs, attn_mult=self.attn_mult, scales=scales, name=self.block_name)(x)


class _Sown(nn.Module):
  """Puts a scanned block's outputs (metrics, activations, intermediates) where the unrolled block sows them."""

  @nn.compact
  def __call__(self, collection: str, values: dict[str, Any]) -> None:
    for name, value in values.items():
      self.put_variable(collection, name, value)


_SCANNED_INPUTS = ("params", layers.PERTURBATIONS)
_SCANNED_OUTPUTS = (layers.METRICS, layers.ACTIVATIONS, "intermediates")


def scanned_blocks(module: nn.Module, x: Array, specs: Any, block_scales: Sequence[Any]) -> Array:
  """The blocks applied to x [B, T, D], each run of ``scan_groups`` as one ``jax.lax.scan`` over its blocks' stacked
  parameters (and perturbations); every output collection the caller made mutable is unstacked into ``block_{i}``."""
  cfg = module.config
  variables = module.variables
  stacked = is_stacked(variables.get("params", {}), cfg.depth)
  mutable = [c for c in _SCANNED_OUTPUTS if module.is_mutable_collection(c)]
  for group in scan_groups(block_scales):
    names = [f"block_{i}" for i in group]
    if len(group) == 1 and not stacked:
      x = Block(cfg, specs, attn_mult=module.attn_mult, scales=block_scales[group[0]], name=names[0])(x)
      continue
    given = [c for c in _SCANNED_INPUTS if c in variables and names[0] in variables[c]]
    inputs = {c: jax.tree.map(lambda *leaves: jnp.stack(leaves), *(layers.unbox(variables[c][n]) for n in names))
              for c in given if not (c == "params" and stacked)}
    if stacked:  # this run's slice of the stacked parameters (all of them for a single run)
      first, last = group[0], group[-1] + 1
      inputs["params"] = jax.tree.map(lambda a: a if (first, last) == (0, cfg.depth) else a[first:last],
                                      layers.unbox(variables["params"]["block_0"]))
    scales = block_scales[group[0]]
    taus = None if scales is None else jnp.asarray([[block_scales[i].tau_attn, block_scales[i].tau_mlp]
                                                     for i in group], jnp.float32)
    block = _ScannedBlock(cfg, specs, module.attn_mult, _without_taus(scales), names[0])

    def body(y, xs, block=block, name=names[0]):
      block_inputs, block_taus = xs
      block_variables = {c: {name: tree} for c, tree in block_inputs.items()}
      if not mutable:
        return block.apply(block_variables, y, block_taus), {}
      y, state = block.apply(block_variables, y, block_taus, mutable=mutable)
      return y, {c: state[c][name] for c in mutable if name in state.get(c, {})}

    x, outputs = jax.lax.scan(body, x, (inputs, taus))
    for j, name in enumerate(names):
      sown = _Sown(name=name)
      for collection, tree in outputs.items():
        sown(collection, jax.tree.map(lambda a, j=j: a[j], tree))
  return x


def is_stacked(params: Any, depth: int) -> bool:
  """Whether ``params`` hold the blocks stacked (``stack_blocks``) rather than one ``block_{i}`` per block."""
  return depth > 1 and "block_0" in params and "block_1" not in params


def stack_blocks(params: Any, depth: int) -> dict[str, Any]:
  """The parameters with every block's stacked under ``block_0`` (leaves [depth, ...]); as given if already so.

  The layout a scanned model (``scan_layers``) trains in: its scan reads them as they are, and the optimizer
  updates each stacked leaf once (the blocks' parameters share their specs, so their multipliers broadcast).
  """
  if depth == 1 or is_stacked(params, depth):
    return dict(params)
  names = [f"block_{i}" for i in range(depth)]
  rest = {k: v for k, v in params.items() if k not in names}
  return {**rest, "block_0": jax.tree.map(lambda *leaves: jnp.stack(leaves), *(params[n] for n in names))}


def unstack_blocks(params: Any, depth: int, *, leading: int = 0) -> dict[str, Any]:
  """The parameters with one ``block_{i}`` per block (the inverse of ``stack_blocks``); as given if not stacked.

  Args:
    params: a tree keyed like the model's parameters (the parameters, or an optimizer's moments of them); its leaves
      may be arrays or ``jax.ShapeDtypeStruct`` (then the blocks' shapes, dtypes and shardings).
    depth: the number of blocks.
    leading: axes before the depth axis (1 for a grid's members [M, depth, ...]). A stacked leaf with no depth axis
      (no more than ``leading`` axes: an optimizer's per-parameter scalar) is every block's.

  Returns:
    The tree with ``block_0`` … ``block_{depth-1}`` in place of the stacked ``block_0``.
  """
  if not is_stacked(params, depth):
    return dict(params)
  rest = {k: v for k, v in params.items() if k != "block_0"}
  return {**rest, **{f"block_{i}": jax.tree.map(lambda a, i=i: _block_leaf(a, i, leading), params["block_0"])
                     for i in range(depth)}}


def _block_leaf(a: Any, i: int, leading: int) -> Any:
  """Block i's part of a stacked leaf: its slice at axis ``leading``, or the leaf itself if it has no such axis; for a
  ``jax.ShapeDtypeStruct``, the slice's (a ``NamedSharding`` loses that axis of its spec)."""
  if len(a.shape) <= leading:
    return a
  if not isinstance(a, jax.ShapeDtypeStruct):
    return a[(slice(None),) * leading + (i,)]
  sharding = a.sharding
  if isinstance(sharding, jax.sharding.NamedSharding):
    spec = (*sharding.spec, *(None,) * (len(a.shape) - len(sharding.spec)))
    sharding = jax.sharding.NamedSharding(sharding.mesh,
                                          jax.sharding.PartitionSpec(*spec[:leading], *spec[leading + 1:]))
  return jax.ShapeDtypeStruct(a.shape[:leading] + a.shape[leading + 1:], a.dtype, sharding=sharding)
