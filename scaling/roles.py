"""The role of every parameter of any Flax model, inferred from its shapes at two widths.

``infer_kinds(base, delta, target)`` compares the parameter shapes of one model built at a base width and at a
second width (microsoft/mup's ``set_base_shapes(model, base, delta=delta)``): the dimensions that differ are the
ones that grow with width. From them and Flax's kernel layouts each parameter gets a role, one of the layer kinds
of ``scaling.parametrization`` (``LAYER_KINDS``):

==================================================  ====================================================
what grows                                          kind
==================================================  ====================================================
an Embed table [vocab, features]: features          ``embedding`` (one-hot input)
a kernel: fan-out only (fan-in fixed)               ``input`` (a Dense layer with a dense input)
a kernel: fan-in and fan-out                        ``hidden`` (``attn_q``/``attn_k``/``attn_v``/``attn_o`` by override)
a kernel: fan-in only (fan-out fixed)               ``readout``
a bias or gain (``bias``, ``scale``, rank <= 1)     ``bias`` / ``norm`` (``final_bias`` / ``final_norm``
                                                    outside ``blocks`` when ``blocks`` is given)
nothing, in a bias, gain or scalar                  ``fixed`` (e.g. a bias over the vocabulary)
==================================================  ====================================================

Kernel layouts (Flax's): Dense [in, out]; DenseGeneral and nnx.LinearGeneral [in..., out...], split after the first
axis for the modules named ``query``/``key``/``value`` ([D, N, H], as ``nn.MultiHeadDotProductAttention`` and
``nnx.MultiHeadAttention`` make them) and before the last for ``out`` ([N, H, D]); Conv [..., in, out] (the
leading spatial axes fixed; fan-in includes them). Embed and nnx.Embed store ``embedding`` [vocab, features];
LayerNorm/RMSNorm ``scale`` and ``bias``.

Where shapes cannot tell, the user says (``overrides``: a path pattern -> kind, or -> (kind, in_axes) for a kernel
whose input axes are not the above), and the parameters our own layers made (``scaling.layers.Kinded``) keep their
kind. What needs a word always: which projections are the attention's q and k (only ``zero_query`` and the
logit rule ``make_attention_fn(rule="linear")`` care; ``FLAX_ATTENTION`` names them for Flax's attention modules);
an embedding that is also the readout (``tied_embedding``); a kernel none of whose dimensions grows (``fixed``
or a delta that changes it).

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

from scaling import layers
from scaling import parametrization as param_lib

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
    kind: its layer kind (``scaling.parametrization.LAYER_KINDS``).
    shape: its shape in the target model.
    base_shape: its shape in the base model.
    grown: the axes that grow with width (differ between base and delta).
    in_axes: the number of leading input axes of a kernel (None: the layout of ``parametrization.fans``).
    in_block: whether it is inside the residual blocks (depth scaling touches it).
  """

  kind: str
  shape: tuple[int, ...]
  base_shape: tuple[int, ...]
  grown: tuple[int, ...]
  in_axes: int | None = None
  in_block: bool = True

  @property
  def fans(self) -> tuple[int, int]:
    """(fan_in, fan_out) in the target model."""
    return param_lib.fans(self.kind, self.shape, self.in_axes)

  @property
  def mult(self) -> float:
    """The parameter's width multiplier m: fan-in (matrices) or fan-out (the rest) of target over base."""
    if self.kind == "fixed":
      return 1.0
    target, base = self.fans, param_lib.fans(self.kind, self.base_shape, self.in_axes)
    side = 0 if self.kind in _FAN_IN_KINDS else 1
    return target[side] / base[side]

  def spec(self, parametrization: param_lib.Parametrization) -> param_lib.LayerSpec:
    """Its LayerSpec under ``parametrization`` (forward multiplier not folded)."""
    return parametrization.layer_at(self.kind, *self.fans, self.mult)


class Roles(Mapping[str, Role]):
  """The role of every parameter, by path ("a/b/kernel"), in the order and tree structure of the target.

  A read-only mapping path -> ``Role``; ``kinds()`` is the tree of kind strings (the structure of the target's
  plain parameter tree) for APIs taking kinds (``scaling.make_optimizer``); ``tied_embedding`` is the path of an
  embedding that is also the readout (or None).
  """

  def __init__(self, roles: dict[str, Role], treedef: Any, tied_embedding: str | None = None):
    self._roles = dict(roles)
    self._treedef = treedef
    self.tied_embedding = tied_embedding

  def __getitem__(self, path: str) -> Role:
    return self._roles[path]

  def __iter__(self) -> Iterator[str]:
    return iter(self._roles)

  def __len__(self) -> int:
    return len(self._roles)

  def __repr__(self) -> str:
    return "Roles(" + ", ".join(f"{p}: {r.kind}" for p, r in self._roles.items()) + ")"

  def kinds(self) -> Any:
    """The kind of every parameter as a tree with the structure of the target's plain parameters."""
    return jax.tree.unflatten(self._treedef, [r.kind for r in self._roles.values()])

  def tree(self, params: Any, fn: Callable[[str, Role, Any], Any]) -> Any:
    """``fn(path, role, leaf)`` for every leaf of ``params`` (a dict, FrozenDict or nnx State), by its path."""
    def leaf_fn(path, leaf):
      key = path_key(path)
      if key not in self._roles:
        raise ValueError(f"parameter {key!r} has no role (known: {', '.join(list(self._roles)[:8])}, ...); infer "
                         "the roles from the same model")
      return fn(key, self._roles[key], leaf)
    return jax.tree_util.tree_map_with_path(leaf_fn, params)


def path_key(path: Sequence[Any]) -> str:
  """"a/b/kernel" for a jax key path (an nnx Variable's trailing ``.value`` dropped)."""
  names = list(param_lib.path_names(path))
  if path and isinstance(path[-1], jax.tree_util.GetAttrKey) and names[-1] == "value":
    names = names[:-1]
  return "/".join(names)


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
      raise TypeError(f"{name}: parameter {path_key(path)!r} is a {type(value).__name__}, not an array or "
                      "jax.ShapeDtypeStruct; pass params, jax.eval_shape(...) of them, or an nnx Module")
    out[path_key(path)] = (tuple(int(d) for d in value.shape), kind)
  treedef = jax.tree.structure(jax.tree.map(lambda x: 0, tree, is_leaf=_is_box))
  return out, treedef


def _match(path: str, patterns: Any) -> bool:
  return any(fnmatch.fnmatchcase(path, p) for p in patterns)


def _override(path: str, overrides: Mapping[str, Any]) -> tuple[str, int | None] | None:
  """(kind, in_axes) of the first pattern of ``overrides`` matching ``path``, or None."""
  for pattern, value in overrides.items():
    if fnmatch.fnmatchcase(path, pattern):
      kind, in_axes = (value, None) if isinstance(value, str) else tuple(value)
      try:
        return param_lib.check_kind(kind), in_axes
      except ValueError as e:
        raise ValueError(f"overrides[{pattern!r}] (matching {path!r}): {e}") from None
  return None


def _kernel_in_axes(path: str, shape: tuple[int, ...], grown: tuple[int, ...]) -> int:
  """The number of leading input axes of a kernel (Flax layouts; module docstring)."""
  rank = len(shape)
  if rank == 2:
    return 1
  module = path.split("/")[-2] if "/" in path else ""
  if module in _SPLIT_AFTER_FIRST:
    return 1
  if module in _SPLIT_BEFORE_LAST or not any(axis < rank - 2 for axis in grown):
    return rank - 1  # DenseGeneral over trailing axes (MHA's out), or Conv [..., in, out] with fixed spatial axes
  raise ValueError(
      f"parameter {path!r} {list(shape)}: cannot tell its input axes from its shape (axes {list(grown)} grow); "
      f"pass overrides={{{path!r}: (kind, in_axes)}} with in_axes the number of its leading input axes")


def _role(path: str, shapes: tuple[tuple[int, ...], ...], marked: str | None, overrides: Mapping[str, Any],
          blocks: Sequence[str] | None) -> Role:
  """The role of one parameter from its base, delta and target shapes (or its override or Kinded kind)."""
  base, delta, target = shapes
  if not len(base) == len(delta) == len(target):
    raise ValueError(f"parameter {path!r} has rank {len(base)}, {len(delta)} and {len(target)} in base, delta and "
                     "target: they must be the same model at different widths")
  grown = tuple(i for i, (b, d) in enumerate(zip(base, delta)) if b != d)
  moved = [i for i, (b, t) in enumerate(zip(base, target)) if b != t and i not in grown]
  if moved:
    raise ValueError(f"parameter {path!r}: axes {moved} differ between base {list(base)} and target {list(target)} "
                     f"but not between base and delta {list(delta)}; the delta must change every width-like axis")
  in_block = blocks is None or _match(path, blocks)
  found = _override(path, overrides)
  if found is None and marked is not None:
    found = (marked, None)
  if found is not None:
    kind, in_axes = found
    if len(target) >= 3 and in_axes is None and kind in _FAN_IN_KINDS + ("input",) and kind != "attn_o":
      in_axes = _kernel_in_axes(path, target, grown)
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
      raise ValueError(f"parameter {path!r}: an embedding table [vocab, features] whose vocabulary axis grows "
                       f"(base {list(base)}, delta {list(delta)}); keep the vocabulary fixed or pass "
                       f"overrides={{{path!r}: kind}}")
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


def _checked(path: str, role: Role) -> Role:
  """``role`` if its kind fits its shape (``parametrization.fans``), else a ValueError naming ``path``."""
  try:
    param_lib.fans(role.kind, role.base_shape, role.in_axes)
    param_lib.fans(role.kind, role.shape, role.in_axes)
  except ValueError as e:
    raise ValueError(f"parameter {path!r} as {role.kind}: {e}") from None
  return role


def _fixed_matrix_error(path: str, base: tuple[int, ...], delta: tuple[int, ...]) -> ValueError:
  return ValueError(
      f"parameter {path!r}: no axis changes between base {list(base)} and delta {list(delta)}, so its role cannot "
      f"be decided; if it does not depend on width pass overrides={{{path!r}: 'fixed'}}, otherwise build the delta "
      "model so that its width-like axes differ from the base's")


def infer_kinds(base: Any, delta: Any, target: Any = None, *, overrides: Mapping[str, Any] | None = None,
                tied_embedding: str | None = None, blocks: str | Sequence[str] | None = None) -> Roles:
  """The role (layer kind, grown axes, width multiplier) of every parameter of a model, from shapes.

  microsoft/mup's ``set_base_shapes(target, base, delta=delta)`` for Flax: the axes that differ between ``base``
  and ``delta`` grow with width; ``target`` is the model to train (the roles' fans and multipliers are its own).
  Rules and Flax layouts in the module docstring.

  Args:
    base: the parameters of the model at its base width: a params tree (arrays, ``jax.eval_shape`` results, or
      boxed ones whose ``scaling.layers.Kinded`` kinds are kept), a ``{"params": ...}`` variables dict, or an
      ``nnx.Module`` / ``nnx.State`` (``nnx.eval_shape`` makes an abstract one).
    delta: the same model at another width (every width-like axis different from the base's).
    target: the model to train (default: ``delta``).
    overrides: path pattern (``fnmatch`` on "a/b/kernel") -> kind, or -> (kind, in_axes) for a kernel whose first
      ``in_axes`` axes are its input; the first matching pattern wins, before any ``Kinded`` kind
      (e.g. ``scaling.FLAX_ATTENTION`` for Flax's attention modules).
    tied_embedding: the path of an embedding that is also the readout (``Embed.attend``); required when the model
      has an embedding and no readout.
    blocks: path pattern(s) of the parameters inside the residual blocks; biases and gains outside them are
      ``final_bias``/``final_norm`` (depth scaling leaves them alone). None: every bias and gain is in-block.

  Returns:
    ``Roles``: path -> ``Role``, with ``kinds()`` the tree of kinds.

  Raises:
    ValueError: naming the parameter and what to pass, for a role that shapes cannot decide, trees that differ,
      no axis growing anywhere, or a tied embedding that was not named.
  """
  overrides = dict(overrides or {})
  if isinstance(blocks, str):
    blocks = (blocks,)
  trees = [_leaves(tree, name) for tree, name in ((base, "base"), (delta, "delta"),
                                                   (delta if target is None else target, "target"))]
  (b, _), (d, _), (t, treedef) = trees
  if not set(b) == set(d) == set(t):
    diff = sorted((set(b) | set(d) | set(t)) - (set(b) & set(d) & set(t)))
    raise ValueError(f"base, delta and target have different parameters: {', '.join(diff[:6])}; they must be the "
                     "same model at different widths")
  if all(b[p][0] == d[p][0] for p in b):
    raise ValueError("base and delta have the same parameter shapes: build the delta model at another width")
  roles = {}
  for path in t:
    marked = next((tree[path][1] for tree in (t, b, d) if tree[path][1] is not None), None)
    roles[path] = _role(path, (b[path][0], d[path][0], t[path][0]), marked, overrides, blocks)
  if tied_embedding is not None:
    if tied_embedding not in roles or roles[tied_embedding].kind != "embedding":
      raise ValueError(f"tied_embedding={tied_embedding!r} is not an embedding of the model; embeddings: "
                       f"{', '.join(p for p, r in roles.items() if r.kind == 'embedding') or 'none'}")
  elif not any(r.kind == "readout" for r in roles.values()):
    embeddings = [p for p, r in roles.items() if r.kind == "embedding"]
    if embeddings:
      raise ValueError(
          f"the model has no readout (no kernel whose fan-in grows and fan-out is fixed) but has the embedding "
          f"{embeddings[0]!r}: if it is also the readout (tied, Embed.attend), pass "
          f"tied_embedding={embeddings[0]!r} and multiply the tied logits by the readout multiplier "
          "(UserParametrization.tied_readout_multiplier)")
  return Roles(roles, treedef, tied_embedding)


def check_roles(roles: Any) -> Roles:
  """Returns ``roles`` if it is a ``Roles`` (from ``infer_kinds``), else raises TypeError."""
  if not isinstance(roles, Roles):
    raise TypeError(f"roles must be the Roles that scaling.infer_kinds returns, got {type(roles).__name__}")
  return roles
