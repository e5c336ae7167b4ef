"""Devices: a 1-D mesh over every visible device and helpers that spread a leading axis of independent work over it.

Independent work (the seeds of a sweep, the members of a learning-rate × seed
grid, the sequences of a batch) is laid out along one mesh axis, ``"data"``.
A leading axis whose length does not divide the device count is padded by
repeating its last entry (``pad``), placed with a ``NamedSharding``
(``shard``), computed on, gathered back to the host (``to_host``) and cut back
to its length (``unpad``). With several processes (``jax.distributed``) the
mesh spans the devices of every process: each process holds and computes its
own rows, and ``to_host`` gathers every row onto every process. On one device
everything here is the identity, so results do not depend on the device count
beyond float rounding.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from scaling.base.validation import ConfigError

AXIS = "data"
"""The name of the mesh axis that independent work is spread over."""


def make_mesh() -> Mesh:
  """A 1-D mesh over all devices (of every process), axis ``AXIS``.

  Returns:
    A ``jax.sharding.Mesh`` of shape [device_count].
  """
  return Mesh(np.asarray(jax.devices()), (AXIS,))


def num_devices() -> int:
  """The number of devices over all processes."""
  return jax.device_count()


def padded_size(n: int, multiple: int | None = None) -> int:
  """``n`` rounded up to a multiple of ``multiple`` (default: the device count)."""
  multiple = num_devices() if multiple is None else multiple
  return multiple * math.ceil(n / multiple)


def pad(tree: Any, multiple: int | None = None) -> tuple[Any, int]:
  """Pads the leading axis of every leaf to a multiple of ``multiple`` by repeating its last entry.

  Args:
    tree: a pytree of host (numpy) arrays sharing the leading length n >= 1.
    multiple: default the device count.

  Returns:
    (padded tree, n).
  """
  leaves = jax.tree.leaves(tree)
  n = int(np.shape(leaves[0])[0])
  if n < 1 or any(np.shape(x)[0] != n for x in leaves):
    raise ConfigError(f"pad needs leaves with the same positive leading length, got {[np.shape(x) for x in leaves]}")
  size = padded_size(n, multiple)

  def one(x):
    x = np.asarray(x)
    return np.concatenate([x, np.repeat(x[-1:], size - n, axis=0)]) if size > n else x

  return jax.tree.map(one, tree), n


def unpad(tree: Any, n: int) -> Any:
  """The first ``n`` entries of the leading axis of every leaf (undoes ``pad``)."""
  return jax.tree.map(lambda x: x[:n], tree)


def leading(mesh: Mesh | None = None) -> NamedSharding:
  """The sharding of an array split along its leading axis over the mesh."""
  return NamedSharding(mesh or make_mesh(), P(AXIS))


def replicated(mesh: Mesh | None = None) -> NamedSharding:
  """The sharding of an array held whole by every device."""
  return NamedSharding(mesh or make_mesh(), P())


def place(x: Any, sharding: jax.sharding.Sharding) -> jax.Array:
  """A global array with ``sharding`` from a host value that every process holds whole."""
  x = np.asarray(x)
  return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])


def shard(tree: Any, mesh: Mesh | None = None) -> tuple[Any, int]:
  """Pads the leading axis of host arrays to a multiple of the mesh size and splits it over the mesh.

  Args:
    tree: a pytree of host arrays with a common leading length n (every process
      passes the same values).
    mesh: default ``make_mesh()``.

  Returns:
    (tree of global jax.Arrays sharded along the leading axis, n).
  """
  mesh = mesh or make_mesh()
  padded, n = pad(tree, mesh.size)
  sharding = leading(mesh)
  return jax.tree.map(lambda x: place(x, sharding), padded), n


def replicate(tree: Any, mesh: Mesh | None = None) -> Any:
  """Host arrays placed whole on every device of the mesh."""
  sharding = replicated(mesh)
  return jax.tree.map(lambda x: place(x, sharding), tree)


def to_host(tree: Any) -> Any:
  """Every leaf as a numpy array on this process, gathered from all processes when it spans several."""

  def one(x):
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
      return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(jax.device_get(x))

  return jax.tree.map(one, tree)


def fsdp_spec(shape: tuple[int, ...], size: int) -> P:
  """FSDP layout of one array: its largest axis divisible by ``size`` split over ``AXIS``, else replicated."""
  axes = [i for i in np.argsort(shape, kind="stable")[::-1] if shape[i] % size == 0 and shape[i] >= size]
  if size == 1 or not axes:
    return P()
  spec = [None] * len(shape)
  spec[axes[0]] = AXIS
  return P(*spec)


def fsdp_shardings(tree: Any, mesh: Mesh | None = None) -> Any:
  """A ``NamedSharding`` per leaf of ``tree`` (arrays or shape structs) following ``fsdp_spec``.

  Args:
    tree: a pytree of arrays or ``jax.ShapeDtypeStruct``.
    mesh: default ``make_mesh()``.

  Returns:
    A pytree of shardings with the structure of ``tree``.
  """
  mesh = mesh or make_mesh()
  return jax.tree.map(lambda x: NamedSharding(mesh, fsdp_spec(tuple(np.shape(x)), mesh.size)), tree)


def batch_spec(shape: tuple[int, ...], size: int) -> P:
  """The leading (batch) axis split over ``AXIS`` when it divides ``size``, else replicated."""
  return P(AXIS) if shape and shape[0] % size == 0 else P()
