"""The role of every parameter of any model, read from its computation and its shapes at two widths.

``infer_kinds(base, delta, target, usage=...)`` decides each parameter's role (a layer kind of
``scaling.mup.schemes``, ``LAYER_KINDS``) from two things:

* **How the computation uses it** (``usage``: ``scaling.mup.usage.read_usage`` of the model's loss or forward pass, its
  jaxpr): the axes a ``dot_general`` or convolution sums over are its fan-in axes, whatever the layout ([in, out],
  [out, in] as Conv1D-style layers store it, [in, heads, head_dim], a fused q/k/v kernel, an ``einsum`` weight, a
  Conv kernel); a table that is gathered is an embedding looked up along the indexed axes; one that is gathered
  *and* contracted with the last hidden state (its product terminal, reaching the output with no parameter
  contracted after it) is a **tied** embedding, also the readout; an elementwise shift is a bias, an elementwise
  gain a norm gain, an additive table of rank ≥ 2 (learned positions, a class token) an embedding.
* **What grows** (microsoft/mup's ``set_base_shapes(target, base, delta=delta)``): the axes that differ between the
  base and the delta model grow with width.

==================================================  ====================================================
use and growth                                      kind
==================================================  ====================================================
gathered (a lookup): features grow                  ``embedding``
gathered and contracted, terminal                   ``embedding``, tied (``Roles.tied_embedding``)
contracted: fan-out grows only (fan-in fixed)       ``input`` (a dense layer with a dense input)
contracted: fan-in and fan-out grow                 ``hidden`` (``attn_q``/``attn_k``/``attn_v``/``attn_o`` by override)
contracted: fan-in grows only                       ``readout``
contracted: nothing grows                           ``fixed`` (a finite matrix: SP's init and learning rate)
elementwise shift / gain, rank <= 1, grows          ``bias`` / ``norm`` (``final_bias`` / ``final_norm``
                                                    outside ``blocks`` when ``blocks`` is given)
elementwise or concatenated, rank >= 2, grows       ``embedding`` (an additive table, fan-in its fixed
                                                    axes; ``bias``/``scale`` by name are vectors)
nothing grows, in a bias, gain or table             ``fixed`` (e.g. a bias over the vocabulary)
==================================================  ====================================================

Without ``usage`` (or for a parameter the computation does not read), Flax's layouts decide as before: Dense
[in, out]; DenseGeneral and nnx.LinearGeneral [in..., out...], split after the first axis for the modules named
``query``/``key``/``value`` ([D, N, H]) and before the last for ``out`` ([N, H, D]); Conv [..., in, out]; Embed
``embedding`` [vocab, features]; ``bias`` and ``scale`` vectors.

Where the computation cannot tell, the user says (``overrides``: a path pattern -> kind, or -> (kind, in_axes),
in_axes an int (the first axes are the input) or a tuple of axis indices), and the parameters our own layers made
(``scaling.mup.layers.Kinded``) keep their kind. An override the computation contradicts (input axes it does not sum
over, a matrix kind for a table it only gathers, a vector kind for a matrix it contracts, a tie it never uses) is
one error naming the path. An error that asks for an override shows the forms that work for that parameter, each
tried on the rule before it is shown (e.g. ``overrides={'embed/weight': ('embedding', (0,))}`` for a table looked up
along axis 0), to paste as they are. What needs a word always: which projections are the attention's q and k (only
``zero_query`` cares; ``FLAX_ATTENTION`` names them for Flax's attention modules).

Every role carries the parameter's own width multiplier m: target over base of its fan-in (hidden, attention,
readout: ``mup``'s fan-in ``width_mult``) or of its fan-out (embedding, input, vectors), so that layers growing
at different rates (d_model, d_ff, heads) each get theirs.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from typing import Any, Callable, Iterator, Mapping, Sequence

import flax.linen as nn
import jax

from scaling.mup import layers
from scaling.mup import schemes as param_lib
from scaling.mup import shapes as shapes_lib
from scaling.mup import usage as usage_lib
from scaling.mup.usage import path_key  # pylint: disable=unused-import
from scaling.base.validation import ConfigError
from scaling.base.validation import ConfigTypeError

# The attention projections of flax.linen.MultiHeadDotProductAttention and flax.nnx.MultiHeadAttention.
FLAX_ATTENTION = {"*/query/kernel": "attn_q", "*/key/kernel": "attn_k", "*/value/kernel": "attn_v",
                  "*/out/kernel": "attn_o"}
_FAN_IN_KINDS = ("hidden", "attn_q", "attn_k", "attn_v", "attn_o", "readout")
_GAIN_NAMES = ("scale",)
_VECTOR_NAMES = ("bias", "scale")
_SPLIT_AFTER_FIRST = ("query", "key", "value")
_SPLIT_BEFORE_LAST = ("out",)
# Flax variable collections besides "params" that a variables dict may hold (dropped by infer_kinds).
_COLLECTIONS = {"batch_stats", "cache", "intermediates", "metrics", "losses", "perturbations", "activations"}


@dataclasses.dataclass(frozen=True)
class Role:
  """The role of one parameter.

  Attributes:
    kind: its layer kind (``scaling.mup.schemes.LAYER_KINDS``).
    shape: its shape in the target model.
    base_shape: its shape in the base model.
    grown: the axes that grow with width (differ between base and delta).
    in_axes: its input axes: None (the layout of ``parametrization.fans``), an int n (the first n axes) or a
      tuple of axis indices (as the computation sums over them, or a table's looked-up axes).
    in_block: whether it is inside the residual blocks (depth scaling touches it).
    tied: an embedding that is also the readout (gathered at the input, contracted at the output).
    width_mult: its width multiplier when given directly (one global width, ``from_kinds``); None: from the
      fans of ``shape`` over ``base_shape``.
  """

  kind: str
  shape: tuple[int, ...]
  base_shape: tuple[int, ...]
  grown: tuple[int, ...]
  in_axes: int | tuple[int, ...] | None = None
  in_block: bool = True
  tied: bool = False
  width_mult: float | None = None

  @property
  def fans(self) -> tuple[int, int]:
    """(fan_in, fan_out) in the target model."""
    return shapes_lib.fans(self.kind, self.shape, self.in_axes)

  @property
  def mult(self) -> float:
    """The parameter's width multiplier m: fan-in (matrices) or fan-out (the rest) of target over base."""
    if self.kind == "fixed":
      return 1.0
    if self.width_mult is not None:
      return self.width_mult
    target, base = self.fans, shapes_lib.fans(self.kind, self.base_shape, self.in_axes)
    side = 0 if self.kind in _FAN_IN_KINDS else 1
    return target[side] / base[side]

  def spec(self, parametrization: param_lib.Parametrization) -> param_lib.LayerSpec:
    """Its LayerSpec under ``parametrization`` (forward multiplier not folded)."""
    return parametrization.layer_at(self.kind, *self.fans, self.mult)


class Roles(Mapping[str, Role]):
  """The role of every parameter, by path ("a/b/kernel"), in the order and tree structure of the target.

  A read-only mapping path -> ``Role``; ``kinds()`` is the tree of kind strings (the structure of the target's
  plain parameter tree); ``tied_embedding`` is the path of the embedding that is also the readout (or None).
  """

  def __init__(self, roles: dict[str, Role], treedef: Any, tied_embedding: str | None = None):
    self._roles = dict(roles)
    self._treedef = treedef
    tied = [p for p, r in self._roles.items() if r.tied]
    if tied_embedding is not None and tied_embedding not in tied:
      self._roles[tied_embedding] = dataclasses.replace(self._roles[tied_embedding], tied=True)
      tied.append(tied_embedding)
    if len(tied) > 1:
      raise ConfigError(f"more than one tied embedding ({', '.join(tied)}); one table may be both the embedding "
                        "and the readout")
    self.tied_embedding = tied[0] if tied else None

  def __getitem__(self, path: str) -> Role:
    return self._roles[path]

  def __iter__(self) -> Iterator[str]:
    return iter(self._roles)

  def __len__(self) -> int:
    return len(self._roles)

  def __repr__(self) -> str:
    return "Roles(" + ", ".join(f"{p}: {r.kind}{' (tied)' if r.tied else ''}" for p, r in self._roles.items()) + ")"

  def kinds(self) -> Any:
    """The kind of every parameter as a tree with the structure of the target's plain parameters."""
    return jax.tree.unflatten(self._treedef, [r.kind for r in self._roles.values()])

  def tree(self, params: Any, fn: Callable[[str, Role, Any], Any]) -> Any:
    """``fn(path, role, leaf)`` for every leaf of ``params`` (a dict, FrozenDict or nnx State), by its path."""
    def leaf_fn(path, leaf):
      key = path_key(path)
      if key not in self._roles:
        raise ConfigError(f"parameter {key!r} has no role (known: {', '.join(list(self._roles)[:8])}, ...); infer "
                         "the roles from the same model")
      return fn(key, self._roles[key], leaf)
    return jax.tree_util.tree_map_with_path(leaf_fn, params)


def _is_box(x: Any) -> bool:
  return isinstance(x, nn.meta.AxisMetadata)


def _plain(tree: Any) -> Any:
  """The parameter tree of a params dict, a variables dict (its "params"), an nnx Module or State."""
  try:
    from flax import nnx  # pylint: disable=g-import-not-at-top
  except ImportError:  # pragma: no cover
    nnx = None
  if nnx is not None and isinstance(tree, nnx.Module):
    tree = nnx.state(tree, nnx.Param)
  if nnx is not None and isinstance(tree, nnx.State):
    tree = nnx.to_pure_dict(tree)
  if isinstance(tree, Mapping) and "params" in tree and set(tree) - {"params"} <= _COLLECTIONS:
    tree = tree["params"]
  return tree


def _leaves(tree: Any, name: str) -> tuple[dict[str, tuple[tuple[int, ...], str | None]], Any]:
  """{path: (shape, Kinded kind or None)} and the treedef of the plain values."""
  tree = _plain(tree)
  flat, _ = jax.tree_util.tree_flatten_with_path(tree, is_leaf=_is_box)
  out = {}
  for path, leaf in flat:
    kind = leaf.kind if isinstance(leaf, layers.Kinded) else None
    value = leaf.unbox() if _is_box(leaf) else leaf
    if not hasattr(value, "shape"):
      raise ConfigTypeError(f"{name}: parameter {path_key(path)!r} is a {type(value).__name__}, not an array or "
                      "jax.ShapeDtypeStruct; pass params, jax.eval_shape(...) of them, or an nnx Module")
    out[path_key(path)] = (tuple(int(d) for d in value.shape), kind)
  treedef = jax.tree.structure(jax.tree.map(lambda x: 0, tree, is_leaf=_is_box))
  return out, treedef


def _match(path: str, patterns: Any) -> bool:
  return any(fnmatch.fnmatchcase(path, p) for p in patterns)


def _override(path: str, overrides: Mapping[str, Any]) -> tuple[str, Any] | None:
  """(kind, in_axes) of the first pattern of ``overrides`` matching ``path``, or None."""
  for pattern, value in overrides.items():
    if fnmatch.fnmatchcase(path, pattern):
      kind, in_axes = (value, None) if isinstance(value, str) else tuple(value)
      try:
        return param_lib.check_kind(kind), in_axes
      except ValueError as e:
        raise ConfigError(f"overrides[{pattern!r}] (matching {path!r}): {e}") from None
  return None


def _kernel_in_axes(path: str, shape: tuple[int, ...], grown: tuple[int, ...], kind: str | None = None) -> int:
  """The number of leading input axes of a kernel (Flax layouts; module docstring)."""
  rank = len(shape)
  if rank == 2:
    return 1
  module = path.split("/")[-2] if "/" in path else ""
  if module in _SPLIT_AFTER_FIRST:
    return 1
  if module in _SPLIT_BEFORE_LAST or not any(axis < rank - 2 for axis in grown):
    return rank - 1  # DenseGeneral over trailing axes (MHA's out), or Conv [..., in, out] with fixed spatial axes
  options = [((kind or _growth_kind(tuple(range(n)), grown), n),
              "if its first axis is its input" if n == 1 else f"if its first {n} axes are its input")
             for n in range(1, rank)]
  raise ConfigError(f"parameter {path!r} {list(shape)}: cannot tell its input axes from its shape (axes "
                    f"{list(grown)} grow); pass {_choices(path, options)}")


def _growth_kind(fan_in: Sequence[int], grown: Sequence[int]) -> str:
  """The kind of a matrix summed over ``fan_in`` from which of its axes grow (module docstring's table)."""
  grows_in = any(axis in fan_in for axis in grown)
  grows_out = any(axis not in fan_in for axis in grown)
  return {(False, True): "input", (True, True): "hidden", (True, False): "readout",
          (False, False): "fixed"}[grows_in, grows_out]


def _pattern(path: str) -> str:
  """An ``overrides`` pattern matching exactly ``path`` (fnmatch's special characters bracketed)."""
  return "".join(f"[{c}]" if c in "*?[" else c for c in path)


def _override_text(path: str, value: Any) -> str:
  """``overrides={'path': value}``, as it is passed."""
  return f"overrides={{{_pattern(path)!r}: {value!r}}}"


def _choices(path: str, options: Sequence[tuple[Any, str]]) -> str:
  """``overrides={'path': value} (when), or {'path': value} (when)``: the override forms to paste."""
  texts = [f"{_override_text(path, value)}" + (f" ({when})" if when else "") for value, when in options]
  return texts[0] + "".join(f", or {t[len('overrides='):]}" for t in texts[1:])


def _accepted(path: str, shapes: tuple[tuple[int, ...], ...], use: usage_lib.Usage | None,
              blocks: Sequence[str] | None, options: Sequence[tuple[Any, str]]) -> list[tuple[Any, str]]:
  """The ``options`` (override value, when it applies) that the role rule takes for ``path`` without an error, one
  per resulting role, so that an error shows only forms that work when pasted (``'fixed'`` if none does)."""
  out, made = [], []
  for value, when in list(options) + [("fixed", "if it does not depend on width")]:
    try:
      if use is None or not use.used:
        role = _shape_role(path, shapes, None, {_pattern(path): value}, blocks)
      else:
        role = _role_from_usage(path, shapes, use, _override(path, {_pattern(path): value}), blocks)
    except ValueError:
      continue
    if role not in made:
      made.append(role)
      out.append((value, when))
  return [o for o in out if o[0] != "fixed"] or out


def _check_shapes(path: str, shapes: tuple[tuple[int, ...], ...]) -> None:
  """ConfigError unless base, delta and target have one rank and the target differs only where the delta does."""
  base, delta, target = shapes
  if not len(base) == len(delta) == len(target):
    raise ConfigError(f"parameter {path!r} has rank {len(base)}, {len(delta)} and {len(target)} in base, delta and "
                     "target: they must be the same model at different widths")
  grown = tuple(i for i, (b, d) in enumerate(zip(base, delta)) if b != d)
  moved = [i for i, (b, t) in enumerate(zip(base, target)) if b != t and i not in grown]
  if moved:
    raise ConfigError(f"parameter {path!r}: axes {moved} differ between base {list(base)} and target {list(target)} "
                     f"but not between base and delta {list(delta)}; the delta must change every width-like axis")


def _role(path: str, shapes: tuple[tuple[int, ...], ...], marked: str | None, overrides: Mapping[str, Any],
          blocks: Sequence[str] | None, use: usage_lib.Usage | None) -> Role:
  """The role of one parameter: from the computation when it reads the parameter, else from shapes and layouts."""
  _check_shapes(path, shapes)
  if use is None or not use.used:
    return _shape_role(path, shapes, marked, overrides, blocks)
  found = _override(path, overrides)
  if found is None and marked is not None:
    found = (marked, None)
  return _role_from_usage(path, shapes, use, found, blocks)


def _shape_role(path: str, shapes: tuple[tuple[int, ...], ...], marked: str | None, overrides: Mapping[str, Any],
                blocks: Sequence[str] | None) -> Role:
  """The role of one parameter from its base, delta and target shapes and Flax's layouts (no computation)."""
  base, delta, target = shapes
  grown = tuple(i for i, (b, d) in enumerate(zip(base, delta)) if b != d)
  in_block = blocks is None or _match(path, blocks)
  found = _override(path, overrides)
  if found is None and marked is not None:
    found = (marked, None)
  if found is not None:
    kind, in_axes = found
    if len(target) >= 3 and in_axes is None and kind in _FAN_IN_KINDS + ("input",) and kind != "attn_o":
      in_axes = _kernel_in_axes(path, target, grown, kind)
    return _checked(path, Role(kind, target, base, grown, in_axes, in_block))
  name = path.rsplit("/", 1)[-1]
  if name != "embedding" and (name in _VECTOR_NAMES or len(target) <= 1):
    if not grown:
      return Role("fixed", target, base, grown, None, in_block)
    kind = "norm" if name in _GAIN_NAMES else "bias"
    if not in_block:
      kind = "final_" + kind
    return Role(kind, target, base, grown, None, in_block)
  if name == "embedding":
    if len(target) != 2 or 0 in grown:
      fixed_axes = tuple(a for a in range(len(target)) if a not in grown)
      options = [(("embedding", fixed_axes), f"looked up along axes {_axes_text(fixed_axes)}, which stay fixed"),
                 (("embedding", (0,)), "looked up along axis 0")]
      what = ("whose vocabulary axis grows" if len(target) == 2 else f"of rank {len(target)}, not [vocab, features]")
      raise ConfigError(f"parameter {path!r}: an embedding table {what} (base {list(base)}, delta {list(delta)}); "
                        "keep the vocabulary fixed or pass "
                        f"{_choices(path, _accepted(path, shapes, None, blocks, options))}")
    if not grown:
      raise _fixed_matrix_error(path, base, delta)
    return Role("embedding", target, base, grown, None, in_block)
  in_axes = _kernel_in_axes(path, target, grown)
  grows_in = any(axis < in_axes for axis in grown)
  grows_out = any(axis >= in_axes for axis in grown)
  if not (grows_in or grows_out):
    raise _fixed_matrix_error(path, base, delta)
  kind = {(False, True): "input", (True, True): "hidden", (True, False): "readout"}[grows_in, grows_out]
  return Role(kind, target, base, grown, in_axes, in_block)


def _axes_text(axes: Any) -> str:
  return "(" + ", ".join(str(a) for a in sorted(axes)) + ")"


def _role_from_usage(path: str, shapes: tuple[tuple[int, ...], ...], use: usage_lib.Usage, found: Any,
                     blocks: Sequence[str] | None) -> Role:
  """The role of one parameter from how the computation uses it and what grows (module docstring)."""
  base, delta, target = shapes
  grown = tuple(i for i, (b, d) in enumerate(zip(base, delta)) if b != d)
  in_block = blocks is None or _match(path, blocks)
  rank = len(target)
  lookup = use.lookup_axes
  try:
    fan_in = use.fan_in_axes
  except ValueError as e:
    options = list(dict.fromkeys(frozenset(a) for a in use.contracted))
    said = None
    if found is not None and found[1] is not None and rank >= 2:
      said = frozenset(shapes_lib.input_axes(found[1], rank))
    if said in options:
      fan_in = said  # the override names which of its contractions is its input
    elif found is not None and found[0] not in _FAN_IN_KINDS + ("input",) and (found[0] != "embedding"
                                                                                or lookup is not None):
      fan_in = None if found[0] == "embedding" else options[0]  # a kind that needs no input axes from them
    else:
      choices = [((found[0] if found is not None else _growth_kind(a, grown), tuple(sorted(a))),
                  f"if axes {_axes_text(a)} are its input") for a in options]
      raise ConfigError(f"parameter {path!r}: {e}; pass "
                        f"{_choices(path, _accepted(path, shapes, use, blocks, choices))}") from None
  tied = lookup is not None and fan_in is not None and use.terminal
  if found is not None:
    kind, in_axes = found
    if in_axes is not None and fan_in is not None and rank >= 2 and not (kind == "embedding" and lookup is not None):
      said = set(shapes_lib.input_axes(in_axes, rank))
      if said != set(fan_in):
        raise ConfigError(f"parameter {path!r} {list(target)}: overrides say its input axes are {_axes_text(said)}, "
                          f"but the computation sums over axes {_axes_text(fan_in)}")
    if kind in param_lib.VECTOR_KINDS and fan_in is not None:
      raise ConfigError(f"parameter {path!r} {list(target)}: overrides say {kind!r} (a vector), but the computation "
                        f"contracts it over axes {_axes_text(fan_in)} (a matrix)")
    if kind in param_lib.MATRIX_KINDS and kind != "embedding" and lookup is not None and fan_in is None:
      raise ConfigError(f"parameter {path!r} {list(target)}: overrides say {kind!r}, but the computation only looks "
                        f"it up (gathers along axes {_axes_text(lookup)}): an embedding")
    if in_axes is None and rank >= 2 and kind in param_lib.MATRIX_KINDS:
      in_axes = tuple(sorted(lookup if kind == "embedding" and lookup is not None else fan_in or ())) or None
    return _checked(path, Role(kind, target, base, grown, in_axes, in_block, tied and kind == "embedding"))
  if lookup is not None:
    fixed_lookup = tuple(sorted(set(lookup) - set(grown)))
    fixed_axes = tuple(a for a in range(rank) if a not in grown)
    table = [(("embedding", fixed_lookup), f"looked up along axes {_axes_text(fixed_lookup)} only"),
             (("embedding", fixed_axes), f"looked up along axes {_axes_text(fixed_axes)}, which stay fixed"),
             (("embedding", tuple(sorted(lookup))), "its vocabulary grows with width"),
             ("embedding", "")]
    if set(lookup) & set(grown):
      raise ConfigError(f"parameter {path!r}: a table looked up along axes {_axes_text(lookup)}, which grow with width "
                        f"(base {list(base)}, delta {list(delta)}); keep the vocabulary fixed or pass "
                        f"{_choices(path, _accepted(path, shapes, use, blocks, table))}")
    if fan_in is not None:
      if set(lookup) & set(fan_in):
        raise ConfigError(f"parameter {path!r}: looked up and summed over the same axes {_axes_text(lookup)}; pass "
                          f"{_choices(path, _accepted(path, shapes, use, blocks, table))}")
      if not use.terminal:
        options = [("embedding", "an embedding whose product is not the readout")]
        raise ConfigError(f"parameter {path!r}: looked up at the input and contracted, but its product feeds other "
                          f"layers (not a tied readout); pass "
                          f"{_choices(path, _accepted(path, shapes, use, blocks, options))}")
    if not grown:
      return Role("fixed", target, base, grown, None, in_block)
    return Role("embedding", target, base, grown, tuple(sorted(lookup)), in_block, tied)
  if fan_in is not None:
    if rank < 2:
      return _shape_role(path, shapes, None, {}, blocks)
    return Role(_growth_kind(fan_in, grown), target, base, grown, tuple(sorted(fan_in)), in_block)
  if use.elementwise or use.concatenated:
    if not grown:
      return Role("fixed", target, base, grown, None, in_block)
    name = path.rsplit("/", 1)[-1]
    if rank >= 2 and name not in _VECTOR_NAMES:  # an additive table (a DenseGeneral's [N, H] bias is a bias)
      fixed_axes = tuple(a for a in range(rank) if a not in grown)
      if not fixed_axes:
        gain = any(op in ("mul", "div") for op in use.elementwise)
        options = [("norm" if gain else "bias", "a gain" if gain else "a shift, like a bias")]
        raise ConfigError(f"parameter {path!r} {list(target)}: added to activations with every axis growing; pass "
                          f"{_choices(path, _accepted(path, shapes, use, blocks, options))}")
      return Role("embedding", target, base, grown, fixed_axes, in_block)
    gain = any(op in ("mul", "div") for op in use.elementwise)
    shift = any(op in ("add", "sub", "add_any") for op in use.elementwise)
    if gain == shift:  # both or neither: the name decides
      gain = name in _GAIN_NAMES
    kind = "norm" if gain else "bias"
    return Role(kind if in_block else "final_" + kind, target, base, grown, None, in_block)
  return _shape_role(path, shapes, None, {}, blocks)


def _checked(path: str, role: Role) -> Role:
  """``role`` if its kind fits its shape (``parametrization.fans``), else a ValueError naming ``path``."""
  try:
    shapes_lib.fans(role.kind, role.base_shape, role.in_axes)
    shapes_lib.fans(role.kind, role.shape, role.in_axes)
  except ValueError as e:
    raise ConfigError(f"parameter {path!r} as {role.kind}: {e}") from None
  return role


def _fixed_matrix_error(path: str, base: tuple[int, ...], delta: tuple[int, ...]) -> ValueError:
  return ValueError(
      f"parameter {path!r}: no axis changes between base {list(base)} and delta {list(delta)}, so its role cannot "
      f"be decided; if it does not depend on width pass {_override_text(path, 'fixed')}, otherwise build the delta "
      "model so that its width-like axes differ from the base's")


def infer_kinds(base: Any, delta: Any, target: Any = None, *, usage: Mapping[str, usage_lib.Usage] | None = None,
                overrides: Mapping[str, Any] | None = None, tied_embedding: str | None = None,
                blocks: str | Sequence[str] | None = None) -> Roles:
  """The role (layer kind, input axes, width multiplier) of every parameter of a model.

  microsoft/mup's ``set_base_shapes(target, base, delta=delta)``, with the computation read as well: the axes that
  differ between ``base`` and ``delta`` grow with width; how the model uses each parameter (``usage``) gives its
  fan-in axes, its lookups and a tied readout; ``target`` is the model to train (the roles' fans and multipliers
  are its own). The rule is in the module docstring.

  Args:
    base: the parameters of the model at its base width: a params tree (arrays, ``jax.eval_shape`` results, or
      boxed ones whose ``scaling.mup.layers.Kinded`` kinds are kept), a ``{"params": ...}`` variables dict, or an
      ``nnx.Module`` / ``nnx.State`` (``nnx.eval_shape`` makes an abstract one).
    delta: the same model at another width (every width-like axis different from the base's).
    target: the model to train (default: ``delta``).
    usage: {path: ``scaling.mup.usage.Usage``}, how the model's computation uses each parameter
      (``scaling.mup.usage.read_usage`` of its loss at any width); None: shapes and Flax's layouts alone decide.
    overrides: path pattern (``fnmatch`` on "a/b/kernel") -> kind, or -> (kind, in_axes) with in_axes an int (the
      first axes are the input) or a tuple of axis indices (an embedding's: the looked-up axes); the first matching
      pattern wins, before any ``Kinded`` kind (e.g. ``scaling.FLAX_ATTENTION`` for Flax's attention modules).
      E.g. ``{"embed/weight": ("embedding", (0,))}`` (a table looked up along axis 0), ``{"*/c_fc/kernel":
      ("hidden", (1,))}`` (a kernel stored [out, in]), ``{"stem/kernel": "fixed"}``. An error that asks for one
      shows the forms that work for that parameter.
    tied_embedding: the path of an embedding that is also the readout (``Embed.attend``); found from ``usage``
      without it.
    blocks: path pattern(s) of the parameters inside the residual blocks; biases and gains outside them are
      ``final_bias``/``final_norm`` (depth scaling leaves them alone). None: every bias and gain is in-block.

  Returns:
    ``Roles``: path -> ``Role``, with ``kinds()`` the tree of kinds.

  Raises:
    ValueError: naming the parameter and what to pass, for a role that neither the computation nor shapes can
      decide, an override the computation contradicts, trees that differ, no axis growing anywhere, or (without
      ``usage``) a tied embedding that was not named.
  """
  overrides = dict(overrides or {})
  if isinstance(blocks, str):
    blocks = (blocks,)
  trees = [_leaves(tree, name) for tree, name in ((base, "base"), (delta, "delta"),
                                                   (delta if target is None else target, "target"))]
  (b, _), (d, _), (t, treedef) = trees
  if not set(b) == set(d) == set(t):
    diff = sorted((set(b) | set(d) | set(t)) - (set(b) & set(d) & set(t)))
    raise ConfigError(f"base, delta and target have different parameters: {', '.join(diff[:6])}; they must be the "
                     "same model at different widths")
  if not t:
    raise ConfigError("base, delta and target hold no parameters: pass the parameters of the model at its base and "
                      "delta widths (a params tree, jax.eval_shape of one, or an nnx Module)")
  if all(b[p][0] == d[p][0] for p in b):
    raise ConfigError("base and delta have the same parameter shapes: build the delta model at another width")
  if usage is not None:
    usage = dict(usage)
    missing = sorted(set(t) - set(usage))
    if missing:
      raise ConfigError(f"usage has no entry for {', '.join(missing[:4])}: read it from the same model "
                        "(scaling.mup.usage.read_usage)")
  roles = {}
  for path in t:
    marked = next((tree[path][1] for tree in (t, b, d) if tree[path][1] is not None), None)
    use = None if usage is None else usage[path]
    roles[path] = _role(path, (b[path][0], d[path][0], t[path][0]), marked, overrides, blocks, use)
  if tied_embedding is not None:
    if tied_embedding not in roles or roles[tied_embedding].kind != "embedding":
      raise ConfigError(f"tied_embedding={tied_embedding!r} is not an embedding of the model; embeddings: "
                       f"{', '.join(p for p, r in roles.items() if r.kind == 'embedding') or 'none'}")
    if usage is not None and usage[tied_embedding].used and not usage[tied_embedding].contracted:
      raise ConfigError(f"tied_embedding={tied_embedding!r}: the computation only looks it up, it never uses it as "
                        "the readout")
    found = [p for p, r in roles.items() if r.tied and p != tied_embedding]
    if found:
      raise ConfigError(f"tied_embedding={tied_embedding!r}, but the computation uses {found[0]!r} as the tied "
                        "readout")
  elif usage is None and not any(r.kind == "readout" for r in roles.values()):
    embeddings = [p for p, r in roles.items() if r.kind == "embedding"]
    if embeddings:
      raise ConfigError(
          f"the model has no readout (no kernel whose fan-in grows and fan-out is fixed) but has the embedding(s) "
          f"{', '.join(embeddings)}: if one is also the readout (tied, Embed.attend), pass tied_embedding=<its path>, "
          "or pass usage=scaling.mup.usage.read_usage(loss, params, batch) so that the computation finds it")
  return Roles(roles, treedef, tied_embedding)


def from_kinds(params: Any, kinds: Any, width_mult: float) -> Roles:
  """Roles of every parameter from a tree of kinds and one width multiplier m shared by all (no base shapes).

  The form of a model whose every width-like dimension grows by the same m = width / base_width (the
  parametrization's own base width), e.g. ``scaling.parametrize(from_kinds(params, kinds, m), scheme,
  forward="model")``.

  Args:
    params: the parameters (arrays or anything with ``.shape``).
    kinds: the kind of every parameter, same structure.
    width_mult: m.

  Returns:
    ``Roles`` whose fans are the parameters' and whose multipliers are m.
  """
  if jax.tree.structure(params) != jax.tree.structure(kinds):
    raise ConfigError("params and kinds must have the same tree structure (kinds from scaling.training.model.transformer.param_kinds)")
  roles = {}
  for (path, leaf), kind in zip(jax.tree_util.tree_flatten_with_path(params)[0], jax.tree.leaves(kinds)):
    key = path_key(path)
    shape = tuple(int(d) for d in getattr(leaf, "shape", ()))
    try:
      kind = param_lib.check_kind(kind)
    except ValueError as e:
      raise ConfigError(f"parameter {key!r}: {e}") from None
    roles[key] = _checked(key, Role(kind, shape, shape, (), width_mult=float(width_mult)))
  return Roles(roles, jax.tree.structure(kinds))


class GlobalWidth:
  """The spec source (``layers.kind_param``) of a model built from ``scaling.mup.layers`` at one global width: every
  parameter's spec is its role's at m = width / base_width (``from_kinds``' rule, one parameter at a time)."""

  def __init__(self, parametrization: param_lib.Parametrization, width: int):
    if not isinstance(parametrization, param_lib.Parametrization):
      raise ConfigTypeError(f"parametrization must be a Parametrization object, got {parametrization!r}")
    self.parametrization = parametrization
    self.width_mult = parametrization.width_mult(width)

  def layer(self, path: str, kind: str, shape: tuple[int, ...]) -> param_lib.LayerSpec:
    """The spec of parameter ``path`` of ``kind`` and ``shape``."""
    role = _checked(path, Role(param_lib.check_kind(kind), tuple(shape), tuple(shape), (), width_mult=self.width_mult))
    return role.spec(self.parametrization)


def check_roles(roles: Any) -> Roles:
  """Returns ``roles`` if it is a ``Roles`` (from ``infer_kinds``), else raises TypeError."""
  if not isinstance(roles, Roles):
    raise ConfigTypeError(f"roles must be the Roles that scaling.infer_kinds returns, got {type(roles).__name__}")
  return roles
