"""A model's initial parameters drawn as Flax's ``Module.init`` draws them, in one draw per shape.

Flax gives the parameter that the module at path m₁/…/m_k creates n-th the key ``fold_in(rng, h)``, h the first four
bytes (big-endian) of the SHA-1 of m₁, …, m_k and n (``flax.core.scope.LazyRng``), so ``Module.init`` traces one
``fold_in`` and one draw per parameter: a program that grows with the number of blocks, and compiles for seconds at
depth 12. ``draw_params`` computes every key in one vmapped ``fold_in`` and draws all the parameters of one shape and
one init in one vmapped draw: the numbers of ``Module.init``, bit for bit (tests/test_param_draws.py checks them
against it), from a program whose size does not grow with depth.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
from typing import Any, Sequence

import flax
import flax.traverse_util
import jax
import jax.numpy as jnp
import numpy as np

from scaling.mup import layers

Array = jax.Array


def flax_key_hash(scope: Sequence[str], count: int) -> int:
  """The integer Flax folds into the root key for the ``count``-th key drawn in the module at path ``scope``.

  Args:
    scope: the module's path, outermost first (``("block_0", "attn", "query")``).
    count: 1 for the module's first parameter, 2 for its second, ...

  Returns:
    The hash as an unsigned 32-bit integer.
  """
  digest = hashlib.sha1()
  for part in (*scope, count):
    if flax.config.flax_fix_rng_separator:
      digest.update(b"\0")
    digest.update(part.encode("utf-8") if isinstance(part, str)
                  else part.to_bytes((part.bit_length() + 7) // 8, byteorder="big"))
  return int.from_bytes(digest.digest()[:4], byteorder="big")


@dataclasses.dataclass(frozen=True)
class DrawPlan:
  """Which key and which draw each parameter gets.

  Attributes:
    paths: every parameter's path ("block_0/attn/query/kernel"), in creation order.
    hashes: uint32 [P], what Flax folds into the root key for each path.
    groups: (shape, std, mean, indices into ``paths``): the parameters drawn together.
  """

  paths: tuple[str, ...]
  hashes: np.ndarray
  groups: tuple[tuple[tuple[int, ...], float, float, tuple[int, ...]], ...]


def draw_plan(created: Sequence[tuple[str, str, tuple[int, ...]]], specs: Any) -> DrawPlan:
  """The plan of a model's parameters.

  Args:
    created: (path, kind, shape) of every parameter in the order its layers create it (a parameter listed twice, its
      module called twice, is created once).
    specs: the layers' spec source (``specs.layer(path, kind, shape)`` gives each one's init std and mean).

  Returns:
    The ``DrawPlan``.
  """
  counts: dict[str, int] = {}
  paths, hashes, groups = [], [], {}
  for path, kind, shape in dict.fromkeys(created):
    scope, _, _ = path.rpartition("/")
    counts[scope] = counts.get(scope, 0) + 1
    hashes.append(flax_key_hash(tuple(scope.split("/")) if scope else (), counts[scope]))
    spec = specs.layer(path, kind, shape)
    groups.setdefault((tuple(shape), float(spec.init_std), float(spec.init_mean)), []).append(len(paths))
    paths.append(path)
  # Within a group, each block parameter's copies in consecutive blocks lie side by side (a stacked layout slices them).
  order = lambda i: (_block_of(paths[i])[1], _block_of(paths[i])[0])
  return DrawPlan(tuple(paths), np.asarray(hashes, np.uint32),
                  tuple((shape, std, mean, tuple(sorted(idx, key=order))) for (shape, std, mean), idx in groups.items()))


def _block_of(path: str) -> tuple[int, str]:
  """(i, the rest of the path) for a path under ``block_{i}``; (-1, path) for any other."""
  head, _, rest = path.partition("/")
  if head.startswith("block_") and head[len("block_"):].isdigit() and rest:
    return int(head[len("block_"):]), rest
  return -1, path


def draw_params(rng: Array, plan: DrawPlan, *, depth: int = 0) -> dict[str, Any]:
  """The parameters of ``plan`` from the root key ``rng`` (may be traced), as the nested dict ``Module.init`` gives.

  Args:
    rng: the key given to ``Module.init`` (a ``jax.random.PRNGKey`` or a typed key).
    plan: ``draw_plan`` of the model.
    depth: with depth > 1, the parameters of ``block_0`` … ``block_{depth-1}`` come stacked under ``block_0``
      (leaves [depth, ...], the layout of ``scanned_blocks.stack_blocks``); 0 for one ``block_{i}`` per block.

  Returns:
    {module: {...: {name: float32 array}}}, every value that of ``Module.init(rng, ...)["params"]``, unboxed.
  """
  keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(rng, jnp.asarray(plan.hashes))
  leaves: dict[str, Array] = {}
  for shape, std, mean, idx in plan.groups:
    drawn = jax.vmap(lambda key, shape=shape, std=std, mean=mean: layers.draw(key, shape, std, mean))(
        keys[np.asarray(idx)])
    # The plan keeps one parameter's copies in consecutive blocks side by side: all ``depth`` of them are one slice.
    start = 0
    for rest, run in itertools.groupby(idx, key=lambda i: _block_of(plan.paths[i])[1]):
      run = list(run)
      if depth > 1 and [_block_of(plan.paths[i])[0] for i in run] == list(range(depth)):
        leaves[f"block_0/{rest}"] = drawn[start:start + depth]
      else:
        leaves.update({plan.paths[i]: drawn[start + j] for j, i in enumerate(run)})
      start += len(run)
  return flax.traverse_util.unflatten_dict(leaves, sep="/")
