"""Layers whose parameters carry their layer kind, with init and multiplier from a parametrization.

Each parameter is created through ``kind_param``: it is drawn as
``init_mean + init_std · N(0, 1)`` from the ``LayerSpec`` that the layers' spec source gives it by its path
(``specs.layer(path, kind, shape)``: a ``scaling.mup.parametrize.RoleParametrization`` with
``forward="model"``, made by ``scaling.parametrize`` from the model's roles; a ``ShapesOnly`` while only the shapes
are wanted, to infer those roles), and it is stored boxed in ``Kinded(value, kind)``, a Flax ``AxisMetadata``. The
kind therefore travels with the parameter from the layer that made it: ``param_kinds`` reads it, and the
per-layer learning rates (``scaling.mup.optim``) use it. Renaming a module changes
nothing. ``module.param`` unboxes as usual, so the layers compute with plain
arrays; ``unbox`` strips the boxes of an initialized tree.

Per-layer measurements are written with ``record`` (``Module.sow`` into the
``"metrics"`` collection, one value per name).
"""

from __future__ import annotations

from typing import Any, Callable

import flax.linen as nn
from flax import struct
import jax
import jax.numpy as jnp

from scaling.mup import schemes as param_lib
from scaling.attention import rules as rules_lib
from scaling.mup import unit_scaling as unit
from scaling.base.validation import ConfigTypeError

Array = jax.Array

METRICS = "metrics"
ACTIVATIONS = "activations"
PERTURBATIONS = "perturbations"


class Kinded(struct.PyTreeNode, nn.meta.AxisMetadata):
  """A parameter value boxed with its layer kind (one of ``scaling.mup.schemes.LAYER_KINDS``)."""

  value: Any
  kind: str = struct.field(pytree_node=False)

  def unbox(self) -> Any:
    return self.value

  def replace_boxed(self, val: Any) -> Kinded:
    return self.replace(value=val)

  def add_axis(self, index: int, params: dict[str, Any]) -> Kinded:
    del index, params
    return self

  def remove_axis(self, index: int, params: dict[str, Any]) -> Kinded:
    del index, params
    return self


def _is_kinded(x: Any) -> bool:
  return isinstance(x, Kinded)


def param_kinds(boxed: Any) -> Any:
  """The kind of every parameter of a boxed tree (as made by ``Module.init``), as a tree of strings."""
  return jax.tree.map(lambda box: box.kind, boxed, is_leaf=_is_kinded)


def unbox(boxed: Any) -> Any:
  """The plain arrays of a boxed tree."""
  return nn.meta.unbox(boxed)


class ShapesOnly:
  """The spec source of a model built only for its parameter shapes: every parameter zero, multiplier 1.

  ``created`` lists (path, kind, shape) of every parameter in the order the layers created them (the order in which
  Flax gives each module's parameters their keys).
  """

  def __init__(self):
    self.created: list[tuple[str, str, tuple[int, ...]]] = []

  def layer(self, path: str, kind: str, shape: tuple[int, ...]) -> param_lib.LayerSpec:
    param_lib.check_kind(kind)
    self.created.append((path, kind, tuple(shape)))
    return param_lib.LayerSpec(init_std=0.0, multiplier=1.0, lr_adam=1.0, lr_sgd=1.0)


def draw(key: Array, shape: tuple[int, ...], std: float, mean: float, dtype: Any = jnp.float32) -> Array:
  """A parameter's initial value: mean + std · N(0, 1) from ``key`` (a constant when std is 0)."""
  x = std * jax.random.normal(key, shape, dtype) if std else jnp.zeros(shape, dtype)
  return x + mean if mean else x


def _initializer(spec: param_lib.LayerSpec, kind: str) -> Callable[..., Kinded]:
  """Initializer drawing init_mean + init_std · N(0, 1) (``draw``), boxed with ``kind``."""
  mean, std = float(spec.init_mean), float(spec.init_std)

  def init(key, shape, dtype=jnp.float32):
    return Kinded(draw(key, shape, std, mean, dtype), kind)

  return init


def kind_param(module: nn.Module, name: str, kind: str, shape: tuple[int, ...], specs: Any) -> tuple[Array, float]:
  """Creates (or reads) parameter ``name`` of ``kind``: returns (value float32, forward multiplier).

  Its spec is ``specs.layer(path, kind, shape)``, the path being the module's path and ``name`` ("block_0/mlp/fc_in/
  kernel").
  """
  spec = specs.layer("/".join((*module.path, name)), kind, tuple(shape))
  return module.param(name, _initializer(spec, kind), shape, jnp.float32), spec.multiplier


def scaled(x: Array, multiplier: float) -> Array:
  """x * multiplier, skipped when the multiplier is 1."""
  if multiplier == 1.0:
    return x
  return x * jnp.asarray(multiplier, x.dtype)


def rms(x: Array) -> Array:
  """Root mean square of all entries, in float32."""
  x = x.astype(jnp.float32)
  return jnp.sqrt(jnp.mean(x * x))


def record(module: nn.Module, name: str, value: Array) -> None:
  """Stores a measurement in the ``"metrics"`` collection (the latest value; read with ``mutable``)."""
  module.sow(METRICS, name, jnp.asarray(value, jnp.float32), init_fn=lambda: jnp.zeros((), jnp.float32),
             reduce_fn=lambda _, new: new)


def probe(module: nn.Module, name: str, x: Array) -> Array:
  """Marks an activation: sown into ``"activations"`` (when mutable) and perturbable (``Module.perturb``).

  ``jax.grad`` with respect to the ``"perturbations"`` collection gives the
  gradient arriving at the activation; without that collection x is returned as is.
  """
  module.sow(ACTIVATIONS, name, x)
  return module.perturb(name, x, collection=PERTURBATIONS)


def _rows(x: Array) -> int:
  """Number of rows of x (all axes but the last)."""
  return max(1, x.size // x.shape[-1])


DenseParts = tuple[Array, float, "Array | None", float]


def _dense_params(module: nn.Module, fan_in: int, features: int, kind: str, specs: Any,
                  use_bias: bool) -> DenseParts:
  """(kernel [fan_in, features], its multiplier, bias [features] or None, its multiplier) of a dense layer."""
  kernel, mult = kind_param(module, "kernel", kind, (fan_in, features), specs)
  bias, bmult = None, 1.0
  if use_bias:
    bias, bmult = kind_param(module, "bias", "bias", (features,), specs)
  return kernel, mult, bias, bmult


class ScaledDense(nn.Module):
  """y = A·(x @ W) [+ A_b·b]: W [fan_in, fan_out] of layer ``kind`` with multiplier A from the spec source."""

  features: int
  kind: str
  specs: Any
  use_bias: bool = False
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: Array) -> Array:
    """x [..., fan_in] -> [..., features] in ``dtype``."""
    parts = _dense_params(self, x.shape[-1], self.features, self.kind, self.specs, self.use_bias)
    return self._product(x, [parts])[0]

  def _product(self, x: Array, parts: list[DenseParts]) -> list[Array]:
    """The layer's product of x with its parameters (``fused_dense``)."""
    return fused_dense(x, parts, self.dtype)


class DenseKernel(nn.Module):
  """The parameters of a ``ScaledDense`` (same names, kinds and init) without its product, for ``fused_dense``."""

  features: int
  kind: str
  specs: Any
  use_bias: bool = False

  @nn.compact
  def __call__(self, fan_in: int) -> DenseParts:
    """(kernel [fan_in, features], its multiplier, bias [features] or None, its multiplier)."""
    return _dense_params(self, fan_in, self.features, self.kind, self.specs, self.use_bias)


def _concat_split(x: Array, parts: list[DenseParts], dtype: Any,
                  product: Callable[[Array, Array], Array]) -> list[tuple[Array, DenseParts]]:
  """product(x, [W_1 … W_n]) split into the n parts' outputs, each with its part.

  The product sees x as rows [prod(leading), fan_in]: on CPU, XLA then computes the weight gradient xᵀ·g without
  first transposing g (with [B, T, fan_in] it copied g, fused with its producer, into [features, B·T]).
  """
  kernel = jnp.concatenate([k.astype(dtype) for k, _, _, _ in parts], axis=1)
  lead = x.shape[:-1]
  y = product(x.astype(dtype).reshape(-1, x.shape[-1]), kernel)
  ends = [0]
  for k, _, _, _ in parts:
    ends.append(ends[-1] + k.shape[1])
  return [(y[:, start:end].reshape(*lead, end - start), part) for part, start, end in zip(parts, ends[:-1], ends[1:])]


def fused_dense(x: Array, parts: list[DenseParts], dtype: Any) -> list[Array]:
  """``ScaledDense`` of several layers of one input as one matmul: x @ [W_1 … W_n], split, each scaled by its A_i.

  Args:
    x: [..., fan_in].
    parts: ``DenseKernel`` outputs (kernel, multiplier, bias or None, bias multiplier) of each layer.
    dtype: the compute dtype.

  Returns:
    [A_i·(x @ W_i) (+ A_bi·b_i)] for each part, each [..., features_i] in ``dtype``.
  """
  out = []
  for y, (_, mult, bias, bmult) in _concat_split(x, parts, dtype, jnp.dot):
    y = scaled(y, mult)
    out.append(y if bias is None else y + scaled(bias.astype(dtype), bmult))
  return out


def unit_fused_dense(x: Array, parts: list[DenseParts], scales: unit.LinearScales, dtype: Any) -> list[Array]:
  """u-μP's linear of several layers of one input with the same scales as one ``unit_scaling.linear``.

  Args:
    x: [..., fan_in].
    parts: ``DenseKernel`` outputs of each layer; their multipliers are not used (``scales.output`` is the op's
      forward scale, the parametrization's A).
    scales: the op's (output, grad-input, grad-weight) scales.
    dtype: the compute dtype.

  Returns:
    [linear(x, W_i, *scales) (+ b_i with its gradient × 1/√rows)] for each part, each [..., features_i].
  """
  if not isinstance(scales, unit.LinearScales):
    raise ConfigTypeError(f"scales must be a unit_scaling.LinearScales, got {scales!r}")
  product = lambda x, kernel: unit.linear(x, kernel, *scales)
  out = []
  for y, (_, _, bias, bmult) in _concat_split(x, parts, dtype, product):
    out.append(y if bias is None else y + unit.scale(bias.astype(dtype), bmult, _rows(x)**-0.5))
  return out


class UnitDense(ScaledDense):
  """u-μP's linear layer: ``unit_scaling.linear`` with the given scales, parameters as ``ScaledDense``'s.

  The forward scale is ``scales.output`` (the parametrization's multiplier A of the kind); the input and
  weight gradients take ``scales.grad_input`` and ``scales.grad_weight``, a bias's gradient 1/√rows.
  """

  scales: unit.LinearScales | None = None

  def _product(self, x: Array, parts: list[DenseParts]) -> list[Array]:
    """``unit_fused_dense`` with the layer's scales."""
    return unit_fused_dense(x, parts, self.scales, self.dtype)


class ScaledEmbed(nn.Module):
  """Lookup A·E[ids] with E [num_embeddings, features] an "embedding" layer of the spec source.

  ``grad_scale`` multiplies the table's gradient (u-μP: ``unit_scaling.embedding_grad_scale``; 1 = none).
  """

  num_embeddings: int
  features: int
  specs: Any
  dtype: Any = jnp.float32
  grad_scale: float = 1.0

  @nn.compact
  def __call__(self, ids: Array) -> Array:
    """ids int [...] -> [..., features] in ``dtype``."""
    table, mult = kind_param(self, "embedding", "embedding", (self.num_embeddings, self.features), self.specs)
    if self.grad_scale != 1.0:
      table = unit.scale(table, 1.0, self.grad_scale)
    return scaled(jnp.take(table, ids, axis=0).astype(self.dtype), mult)


class Norm(nn.Module):
  """LayerNorm or RMSNorm over the last axis (in float32) with gain ``scale`` (and ``bias`` if use_bias).

  ``final=True`` marks the norm after the last block: its parameters are of the
  kinds "final_norm" and "final_bias", which depth scaling leaves alone. ``grad_scale``
  multiplies the gradients of the gain and bias (u-μP: ``unit_scaling.norm_grad_scale``; 1 = none).
  """

  kind: str
  specs: Any
  use_bias: bool = False
  dtype: Any = jnp.float32
  eps: float = 1e-6
  final: bool = False
  grad_scale: float = 1.0

  @nn.compact
  def __call__(self, x: Array) -> Array:
    d = x.shape[-1]
    gain_kind, bias_kind = ("final_norm", "final_bias") if self.final else ("norm", "bias")
    scale, mult = kind_param(self, "scale", gain_kind, (d,), self.specs)
    norm = rules_lib.layer_norm if self.kind == "layer" else rules_lib.rms_norm
    grad_scale = (lambda v: v) if self.grad_scale == 1.0 else (lambda v: unit.scale(v, 1.0, self.grad_scale))
    y = norm(x.astype(jnp.float32), self.eps) * scaled(grad_scale(scale), mult)
    if self.use_bias:
      bias, bmult = kind_param(self, "bias", bias_kind, (d,), self.specs)
      bias = grad_scale(bias)
      y = y + scaled(bias, bmult)
    return y.astype(self.dtype)
