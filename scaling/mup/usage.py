"""How a model uses each of its parameters, read from its computation: the jaxpr of one call.

``read_usage(fn, params, *args)`` traces ``fn(params, *args)`` once (``jax.make_jaxpr``; nothing is computed) and
follows every parameter through the program. A parameter keeps its identity through the operations that only lay
it out (transpose, reshape, broadcast, squeeze, slicing, concatenation, dtype casts, a product with a constant),
each axis of the laid-out value remembering the parameter axes it came from; nested programs (``jit``, custom
derivatives, ``remat``, ``scan``, ``while``, ``cond``) are followed inside, a scanned parameter losing its leading
(layer) axis. What then consumes it says how it is used:

* a ``dot_general`` (``@``, ``jnp.dot``, ``einsum``, ``lax.dot_general``) sums over some of its axes: those are its
  **fan-in** axes, whatever the layout ([in, out], [out, in], [in, heads, head_dim], a fused q/k/v kernel);
* a ``conv_general_dilated``: its input-feature and spatial axes are its fan-in, the output-feature axis its
  fan-out;
* a ``gather`` (``jnp.take``, ``table[ids]``, ``nn.Embed``, Equinox's ``Embedding`` under ``vmap``): it is
  **looked up** along the axes the ids select one entry of (a slice of size 1); an axis indexed by a slice as wide
  as itself is read whole (``vmap`` of a row lookup indexes the feature axis too, from 0), and a gather that looks
  nothing up only lays the parameter out (a window);
* an elementwise ``add``/``sub`` (a shift: a bias, an additive table such as learned positions) or
  ``mul``/``div`` (a gain);
* a concatenation with activations (a class token);
* anything else (a norm of the weights, a custom op) is recorded by name.

A contraction is **terminal** when nothing computed from its product is later contracted with a parameter: the
product reaches the output (the logits, then the loss) through parameter-free operations only. The readout's product
is terminal; so is the tied readout ``h @ E.T`` of a table E that is also gathered at the input.

``scaling.mup.roles`` combines these uses with the shapes at two widths (what grows) into each parameter's role.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Iterable, Sequence

import jax
from jax.extend import core as jax_core

from scaling.mup import shapes as shapes_lib
from scaling.base.validation import ConfigError

# Axes of a laid-out parameter: for each axis of the value, the parameter axes it came from (empty: a new axis).
Axes = tuple[frozenset[int], ...]

_IDENTITY = frozenset({"convert_element_type", "copy", "copy_p", "reduce_precision", "optimization_barrier",
                       "device_put", "sharding_constraint", "pvary", "neg", "real", "imag", "mesh_cast",
                       "reshard"})
_SLICES = frozenset({"slice", "dynamic_slice", "pad", "rev", "tile"})
_SCALINGS = frozenset({"mul", "div"})
_SHIFTS = frozenset({"add", "sub", "add_any"})
_ELEMENTWISE = _SCALINGS | _SHIFTS | frozenset({"max", "min", "select_n", "pow"})


@dataclasses.dataclass(frozen=True)
class Usage:
  """How one parameter is used by the computation (the module docstring).

  Attributes:
    contracted: per contraction (``dot_general`` or convolution), the parameter's axes summed over: its fan-in.
    batched: per contraction, the parameter's axes that are batch dimensions of a ``dot_general`` (neither in nor
      out).
    gathered: per lookup (``gather``), the axes the ids select one entry of (not those read whole).
    elementwise: the elementwise primitives applied to it ("add", "mul", ...).
    concatenated: it is concatenated with activations (a class token).
    other: names of any other primitive that reads it.
    terminal: a contraction of it produces a value that reaches the output with no parameter contracted after it.
  """

  contracted: tuple[frozenset[int], ...] = ()
  batched: tuple[frozenset[int], ...] = ()
  gathered: tuple[frozenset[int], ...] = ()
  elementwise: tuple[str, ...] = ()
  concatenated: bool = False
  other: tuple[str, ...] = ()
  terminal: bool = False

  @property
  def used(self) -> bool:
    """Whether the computation reads the parameter at all."""
    return bool(self.contracted or self.gathered or self.elementwise or self.concatenated or self.other)

  @property
  def fan_in_axes(self) -> frozenset[int] | None:
    """The axes summed over by its contractions (None if it is never contracted; ConfigError if they differ)."""
    if not self.contracted:
      return None
    first = self.contracted[0]
    if any(axes != first for axes in self.contracted[1:]):
      raise ConfigError(f"contracted over different axes in different places: {[sorted(a) for a in self.contracted]}")
    return first

  @property
  def lookup_axes(self) -> frozenset[int] | None:
    """The axes its lookups index (None if it is never gathered)."""
    if not self.gathered:
      return None
    return frozenset().union(*self.gathered)


def path_key(path: Sequence[Any]) -> str:
  """"a/b/kernel" for a jax key path (an nnx Variable's trailing ``.value`` dropped)."""
  names = list(shapes_lib.path_names(path))
  if path and isinstance(path[-1], jax.tree_util.GetAttrKey) and names[-1] == "value":
    names = names[:-1]
  return "/".join(names)


@dataclasses.dataclass
class _View:
  """A value that is a laid-out parameter: which leaf, and the parameter axes behind each of its axes."""

  leaf: int
  axes: Axes


class _Reader:
  """Walks a jaxpr, recording parameter uses and the data-flow graph between values (node ids in creation order)."""

  def __init__(self, num_leaves: int):
    self.count = 0
    self.successors: list[list[int]] = []
    self.records: list[dict[str, Any]] = [dict(contracted=[], batched=[], gathered=[], elementwise=[],
                                               concatenated=False, other=[]) for _ in range(num_leaves)]
    # Contractions: (leaf, output node, input nodes of the other operands, the equation, the equations enclosing it).
    self.contractions: list[tuple[int, int, list[int], Any, tuple[Any, ...]]] = []
    self.enclosing: list[Any] = []
    # Lookups: (leaf, the equation, the equations enclosing it).
    self.lookups: list[tuple[int, Any, tuple[Any, ...]]] = []

  def node(self, inputs: Iterable[int | None] = ()) -> int:
    """A new node fed by ``inputs``."""
    n = self.count
    self.count += 1
    self.successors.append([])
    for i in inputs:
      if i is not None:
        self.successors[i].append(n)
    return n

  def walk(self, jaxpr: Any, in_nodes: list[int | None], in_views: list[list[_View]]) -> tuple[list[int | None],
                                                                                              list[list[_View]]]:
    """Reads ``jaxpr`` (a Jaxpr or ClosedJaxpr) given its inputs' nodes and views; returns its outputs'."""
    if isinstance(jaxpr, jax_core.ClosedJaxpr):
      jaxpr = jaxpr.jaxpr
    env: dict[Any, tuple[int | None, list[_View]]] = {}
    for v in jaxpr.constvars:
      env[v] = (self.node(), [])
    for v, n, views in zip(jaxpr.invars, in_nodes, in_views):
      env[v] = (n, views)

    def read(v):
      if isinstance(v, jax_core.Literal):
        return None, []
      return env.get(v, (None, []))

    for eqn in jaxpr.eqns:
      ins = [read(v) for v in eqn.invars]
      outs = self.equation(eqn, [n for n, _ in ins], [views for _, views in ins])
      for v, out in zip(eqn.outvars, outs):
        if not isinstance(v, jax_core.DropVar):
          env[v] = out
    results = [read(v) for v in jaxpr.outvars]
    return [n for n, _ in results], [views for _, views in results]

  def equation(self, eqn: Any, nodes: list[int | None], views: list[list[_View]]) -> list[tuple[int, list[_View]]]:
    """The (node, views) of each output of one equation, recording the uses of the parameters it reads."""
    name = eqn.primitive.name
    params = eqn.params
    if name in ("scan", "while"):
      self.enclosing.append(eqn)
      try:
        return self._scan(eqn, nodes, views) if name == "scan" else self._loop(eqn, nodes, views)
      finally:
        self.enclosing.pop()
    self.enclosing.append(eqn)
    try:
      if name == "cond":
        branch_outs = [self.walk(b, nodes[1:], views[1:])[0] for b in params["branches"]]
        return [(self.node([nodes[0], *[o[i] for o in branch_outs]]), []) for i in range(len(eqn.outvars))]
      sub = _subjaxpr(params)
      if sub is not None:
        out_nodes, out_views = self.walk(sub, nodes, views)
        return [(self.node([n]), v) for n, v in zip(out_nodes, out_views)]
    finally:
      self.enclosing.pop()
    viewed = [i for i, vs in enumerate(views) if vs]
    if not viewed:
      return [(self.node(nodes), []) for _ in eqn.outvars]
    out_views = self._use(eqn, nodes, views, viewed)
    outs = []
    for i in range(len(eqn.outvars)):
      n = self.node(nodes)
      outs.append((n, out_views[i] if out_views else []))
    if name in ("dot_general", "conv_general_dilated"):
      out_node = outs[0][0]
      for i in viewed:
        others = [m for j, m in enumerate(nodes) if j != i and m is not None and not views[j]]
        for view in views[i]:
          self.contractions.append((view.leaf, out_node, others, eqn, tuple(self.enclosing)))
    return outs

  def _use(self, eqn: Any, nodes: list[int | None], views: list[list[_View]],
           viewed: list[int]) -> list[list[_View]] | None:
    """Records how the viewed operands are used; returns the outputs' views when the op only lays them out."""
    name = eqn.primitive.name
    params = eqn.params
    shapes = [tuple(getattr(v.aval, "shape", ())) for v in eqn.invars]
    out_shapes = [tuple(getattr(v.aval, "shape", ())) for v in eqn.outvars]
    if name == "dot_general":
      (contract_l, contract_r), (batch_l, batch_r) = params["dimension_numbers"]
      for i in viewed:
        contract, batch = (contract_l, batch_l) if i == 0 else (contract_r, batch_r)
        for view in views[i]:
          self.records[view.leaf]["contracted"].append(_union(view.axes, contract))
          self.records[view.leaf]["batched"].append(_union(view.axes, batch))
      return None
    if name == "conv_general_dilated":
      rhs_spec = params["dimension_numbers"].rhs_spec  # (out feature, in feature, *spatial)
      for i in viewed:
        for view in views[i]:
          if i == 1:
            self.records[view.leaf]["contracted"].append(_union(view.axes, rhs_spec[1:]))
            self.records[view.leaf]["batched"].append(frozenset())
          else:
            self.records[view.leaf]["other"].append("conv_general_dilated (as the input)")
      return None
    if name == "gather" and viewed == [0]:
      looked_up = _looked_up(params["dimension_numbers"], params["slice_sizes"], shapes[0])
      if not looked_up:  # every indexed axis read whole or through a window: a slice of the parameter
        return [[_View(v.leaf, _gathered_axes(v.axes, params["dimension_numbers"], len(out_shapes[0])))
                 for v in views[0]]]
      for view in views[0]:
        self.records[view.leaf]["gathered"].append(_union(view.axes, looked_up))
        self.lookups.append((view.leaf, eqn, tuple(self.enclosing)))
      return None
    if name in _IDENTITY and len(eqn.outvars) == len(eqn.invars):
      return [list(v) for v in views]
    if len(viewed) == 1 and name in _IDENTITY | _SLICES | {"transpose", "reshape", "broadcast_in_dim", "squeeze",
                                                            "split"}:
      source = views[viewed[0]]
      if name in _IDENTITY | _SLICES or name == "split":
        return [list(source) for _ in eqn.outvars]
      if name == "transpose":
        return [[_View(v.leaf, tuple(v.axes[p] for p in params["permutation"])) for v in source]]
      if name == "squeeze":
        dropped = {d % len(shapes[0]) for d in params["dimensions"]}
        return [[_View(v.leaf, tuple(a for i, a in enumerate(v.axes) if i not in dropped)) for v in source]]
      if name == "broadcast_in_dim":
        return [[_View(v.leaf, _broadcast(v.axes, params["broadcast_dimensions"], len(out_shapes[0])))
                 for v in source]]
      if name == "reshape":
        return [[_View(v.leaf, _reshape(v.axes, shapes[0], out_shapes[0])) for v in source]]
    if name == "concatenate":
      if len(viewed) == len(eqn.invars):
        return [[view for i in viewed for view in views[i]]]
      for i in viewed:
        for view in views[i]:
          self.records[view.leaf]["concatenated"] = True
      return None
    if name in _ELEMENTWISE:
      scalar_others = all(i in viewed or math.prod(shapes[i]) == 1 for i in range(len(eqn.invars)))
      if name in _SCALINGS and len(viewed) == 1 and scalar_others and (name == "mul" or viewed == [0]):
        # A constant multiple of the parameter (a forward multiplier): still the parameter.
        return [list(views[viewed[0]])]
      for i in viewed:
        for view in views[i]:
          self.records[view.leaf]["elementwise"].append(name)
      return None
    for i in viewed:
      for view in views[i]:
        self.records[view.leaf]["other"].append(name)
    return None

  def _scan(self, eqn: Any, nodes: list[int | None], views: list[list[_View]]) -> list[tuple[int, list[_View]]]:
    """A scan: constants keep their views, scanned inputs lose their leading (iteration) axis."""
    params = eqn.params
    consts, carry = params["num_consts"], params["num_carry"]
    body_views = [list(v) for v in views[:consts]] + [[] for _ in range(carry)]
    body_views += [[_View(x.leaf, x.axes[1:]) for x in v] for v in views[consts + carry:]]
    out_nodes, _ = self.walk(params["jaxpr"], nodes, body_views)
    carried = out_nodes[:carry]
    outs = []
    for i in range(len(eqn.outvars)):
      sources = [out_nodes[i]] + (carried if i < carry else [])
      outs.append((self.node(sources + [n for n in nodes[consts:consts + carry]]), []))
    return outs

  def _loop(self, eqn: Any, nodes: list[int | None], views: list[list[_View]]) -> list[tuple[int, list[_View]]]:
    """A while loop: its constants keep their views in the body and the condition."""
    params = eqn.params
    nc, nb = params["cond_nconsts"], params["body_nconsts"]
    carry_nodes, carry_views = nodes[nc + nb:], [[] for _ in nodes[nc + nb:]]
    self.walk(params["cond_jaxpr"], nodes[:nc] + carry_nodes, views[:nc] + carry_views)
    out_nodes, _ = self.walk(params["body_jaxpr"], nodes[nc:nc + nb] + carry_nodes, views[nc:nc + nb] + carry_views)
    return [(self.node([n, *carry_nodes]), []) for n in out_nodes]

  def terminal(self) -> list[tuple[int, Any, tuple[Any, ...]]]:
    """(leaf, equation, enclosing equations) of every contraction whose product never feeds a parameter
    contraction."""
    feeds = [False] * self.count
    for _, _, inputs, _, _ in self.contractions:
      for n in inputs:
        feeds[n] = True
    for n in range(self.count - 1, -1, -1):
      if not feeds[n] and any(feeds[s] for s in self.successors[n]):
        feeds[n] = True
    return [(leaf, eqn, outer) for leaf, out, _, eqn, outer in self.contractions if not feeds[out]]


def _subjaxpr(params: dict[str, Any]) -> Any:
  """The nested program of a call-like equation (jit, custom_jvp/vjp, remat, closed_call, shard_map), or None."""
  for key in ("jaxpr", "call_jaxpr", "fun_jaxpr"):
    sub = params.get(key)
    if isinstance(sub, (jax_core.ClosedJaxpr, jax_core.Jaxpr)):
      return sub
  return None


def _union(axes: Axes, dims: Iterable[int]) -> frozenset[int]:
  """The parameter axes behind the value axes ``dims``."""
  return frozenset().union(*(axes[d] for d in dims)) if dims else frozenset()


def _looked_up(dimension_numbers: Any, slice_sizes: Sequence[int], shape: Sequence[int]) -> tuple[int, ...]:
  """The operand axes a gather looks up: those its indices select one entry of (a slice of size 1), not the whole
  axis. ``jax.vmap`` of a row lookup (Equinox's ``Embedding``, ``lax.dynamic_slice``) indexes every axis, the
  feature axis by a slice as wide as the axis (read whole, from index 0): that axis is not looked up."""
  return tuple(d for d in dimension_numbers.start_index_map if slice_sizes[d] == 1 and shape[d] != 1)


def _gathered_axes(axes: Axes, dimension_numbers: Any, rank: int) -> Axes:
  """Axes of a gather's output that only slices its operand: the operand's kept (not collapsed, not batching) axes
  land at ``offset_dims`` in order; the batch axes are new."""
  dropped = set(dimension_numbers.collapsed_slice_dims) | set(getattr(dimension_numbers, "operand_batching_dims", ()))
  kept = [a for i, a in enumerate(axes) if i not in dropped]
  out = [frozenset()] * rank
  for k, d in enumerate(dimension_numbers.offset_dims):
    out[d] = kept[k]
  return tuple(out)


def _broadcast(axes: Axes, dims: Sequence[int], rank: int) -> Axes:
  """Axes after ``broadcast_in_dim``: operand axis i lands at dims[i], the others are new."""
  out = [frozenset()] * rank
  for i, d in enumerate(dims):
    out[d] = axes[i]
  return tuple(out)


def _reshape(axes: Axes, shape: Sequence[int], new_shape: Sequence[int]) -> Axes:
  """Axes after a reshape: the axes of size > 1 grouped into the smallest blocks of equal size on both sides, each
  new axis getting its block's parameter axes (new axes of size 1 get none)."""
  src = [(size, a) for size, a in zip(shape, axes) if size != 1]
  dst = [k for k, size in enumerate(new_shape) if size != 1]
  out = [frozenset()] * len(new_shape)
  i = k = 0
  while k < len(dst):
    size_in, size_out, block, start = 1, 1, frozenset(), k
    while True:
      if size_out <= size_in and k < len(dst) and (size_out < size_in or k == start):
        size_out *= new_shape[dst[k]]
        k += 1
      elif i < len(src) and size_in < size_out:
        size_in *= src[i][0]
        block |= src[i][1]
        i += 1
      else:
        break
    for kk in range(start, k):
      out[dst[kk]] = block
  return tuple(out)


def _read(closed: Any, num_params: int) -> _Reader:
  """A reader that has walked ``closed``, whose first ``num_params`` inputs are the parameter leaves."""
  reader = _Reader(num_params)
  in_views = [[_View(i, tuple(frozenset({d}) for d in range(len(v.aval.shape))))]
              for i, v in enumerate(closed.jaxpr.invars[:num_params])]
  in_views += [[] for _ in closed.jaxpr.invars[num_params:]]
  in_nodes = [reader.node() for _ in closed.jaxpr.invars]
  reader.walk(closed, in_nodes, in_views)
  return reader


def read_usage(fn: Callable[..., Any], params: Any, *args: Any, **kwargs: Any) -> dict[str, Usage]:
  """How ``fn(params, *args, **kwargs)`` uses each array of ``params``, read from its jaxpr (nothing computed).

  Args:
    fn: a function whose first argument is the parameter tree (a loss or a forward pass).
    params: the parameters (arrays or ``jax.ShapeDtypeStruct``), a tree.
    *args: the other arguments (e.g. a batch; arrays or shapes).
    **kwargs: keyword arguments of ``fn`` (static).

  Returns:
    {parameter path ("a/b/kernel"): ``Usage``} for every array of ``params``.
  """
  leaves, _ = jax.tree_util.tree_flatten_with_path(params)
  closed = jax.make_jaxpr(lambda p, *a: fn(p, *a, **kwargs))(params, *args)
  reader = _read(closed, len(leaves))
  terminal = {leaf for leaf, _, _ in reader.terminal()}
  out = {}
  for i, (path, _) in enumerate(leaves):
    r = reader.records[i]
    out[path_key(path)] = Usage(contracted=tuple(r["contracted"]), batched=tuple(r["batched"]),
                                gathered=tuple(r["gathered"]), elementwise=tuple(dict.fromkeys(r["elementwise"])),
                                concatenated=r["concatenated"], other=tuple(dict.fromkeys(r["other"])),
                                terminal=i in terminal)
  return out


_CALLS = frozenset({"jit", "pjit", "closed_call", "core_call", "remat", "checkpoint"})


class _Plan:
  """A traced function and the equations to scale or record when it is evaluated (``_evaluate``)."""

  def __init__(self, fn: Callable[..., Any], params: Any, args: Sequence[Any], factors: dict[str, float],
               record: bool):
    closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(params, *args)
    self.jaxpr, self.consts = closed.jaxpr, closed.consts
    self.out_tree = jax.tree.structure(out_shape)
    leaves, _ = jax.tree_util.tree_flatten_with_path(params)
    paths = [path_key(p) for p, _ in leaves]
    unknown = sorted(set(factors) - set(paths))
    if unknown:
      raise ConfigError(f"no parameter {unknown[0]!r}; parameters: {', '.join(paths[:8])}, ...")
    reader = _read(closed, len(leaves))
    self.targets: dict[int, float] = {}
    self.holders: set[int] = set()
    scaled = set()
    for leaf, eqn, outer in reader.terminal():
      if paths[leaf] not in factors:
        continue
      blocked = [e.primitive.name for e in outer if e.primitive.name not in _CALLS]
      if blocked:
        raise ConfigError(f"cannot multiply the product of {paths[leaf]!r}: it is computed inside {blocked[0]}")
      self.targets[id(eqn)] = factors[paths[leaf]]
      self.holders.update(id(e) for e in outer)
      scaled.add(paths[leaf])
    missing = sorted(set(factors) - scaled)
    if missing:
      raise ConfigError(f"{missing[0]!r} has no terminal product (it is not a readout)")
    self.names: dict[int, str] = {}
    if record:
      uses = [(leaf, eqn, outer) for leaf, _, _, eqn, outer in reader.contractions] + reader.lookups
      counts: dict[str, int] = {}
      for leaf, eqn, outer in uses:
        if any(e.primitive.name not in _CALLS for e in outer) or id(eqn) in self.names:
          continue
        module = paths[leaf].rsplit("/", 1)[0] if "/" in paths[leaf] else paths[leaf]
        counts[module] = counts.get(module, 0) + 1
        self.names[id(eqn)] = module if counts[module] == 1 else f"{module}[{counts[module] - 1}]"
        self.holders.update(id(e) for e in outer)

  def __call__(self, params: Any, args: Sequence[Any]) -> tuple[Any, dict[str, Any]]:
    recorded: dict[str, Any] = {}
    outs = _evaluate(self.jaxpr, self.consts, jax.tree.leaves((params, args)), self, recorded)
    return jax.tree.unflatten(self.out_tree, outs), recorded


def _planned(fn: Callable[..., Any], factors: dict[str, float], record: bool) -> Callable[..., Any]:
  """(params, *args) -> (fn's outputs, recorded products), traced once per argument shapes."""
  cache: dict[Any, _Plan] = {}

  def run(params, *args):
    flat = jax.tree.leaves((params, args))
    key = (jax.tree.structure((params, args)), tuple((jax.numpy.shape(x), jax.numpy.result_type(x)) for x in flat))
    if key not in cache:
      cache[key] = _Plan(fn, params, args, factors, record)
    return cache[key](params, args)

  return run


def scale_products(fn: Callable[..., Any], factors: dict[str, float]) -> Callable[..., Any]:
  """``fn(params, *args)`` with the terminal products of the named parameters multiplied by their factors.

  The forward multiplier of a readout applied by the library, without changing the model: ``fn`` is traced for
  the shapes it is called with (once per shapes, cached), and its jaxpr is evaluated with the output of every
  terminal contraction of a named parameter (the tied readout ``h @ E.T``, the readout ``h @ W``) multiplied by
  the factor, so everything computed from it (the logits the loss sees, a recorded module output) sees the
  scaled product. Works under ``jit``, ``vmap``, ``grad`` and ``scan`` like ``fn``.

  Args:
    fn: a function of (params, *args), e.g. a loss.
    factors: {parameter path: factor} (paths as ``read_usage`` names them).

  Returns:
    The function, same signature and outputs.
  """
  factors = {path: float(f) for path, f in factors.items() if float(f) != 1.0}
  if not factors:
    return fn
  run = _planned(fn, factors, record=False)
  return lambda params, *args: run(params, *args)[0]


def record_products(fn: Callable[..., Any], factors: dict[str, float] | None = None) -> Callable[..., Any]:
  """``fn(params, *args) -> (outputs, {module: product})``: the output of every parameter's product or lookup.

  The "module outputs" of a model given as a plain function (no Flax modules to capture): each contraction or
  lookup of a parameter, named by the parameter's path without its last key ("layer_1" for "layer_1/w"; a second
  use of the same module "layer_1[1]"), outside loops and custom derivatives. ``factors`` as in ``scale_products``.
  """
  return _planned(fn, {p: float(f) for p, f in (factors or {}).items() if float(f) != 1.0}, record=True)


def _evaluate(jaxpr: Any, consts: Sequence[Any], args: Sequence[Any], plan: _Plan,
              recorded: dict[str, Any]) -> list[Any]:
  """``jax.core.eval_jaxpr`` with the plan's target outputs scaled and its named outputs recorded."""
  env: dict[Any, Any] = {}

  def read(v):
    return v.val if isinstance(v, jax_core.Literal) else env[v]

  for v, x in zip(jaxpr.constvars, consts):
    env[v] = x
  for v, x in zip(jaxpr.invars, args):
    env[v] = x
  for eqn in jaxpr.eqns:
    invals = [read(v) for v in eqn.invars]
    if id(eqn) in plan.holders:
      sub = _subjaxpr(eqn.params)
      closed = sub if isinstance(sub, jax_core.ClosedJaxpr) else jax_core.ClosedJaxpr(sub, ())
      outs = _evaluate(closed.jaxpr, closed.consts, invals, plan, recorded)
    else:
      bind_params = eqn.primitive.get_bind_params(eqn.params)
      subfuns = []
      if isinstance(bind_params, tuple):  # older jax: (subfuns, params)
        subfuns, bind_params = bind_params
      with eqn.ctx.manager:
        outs = eqn.primitive.bind(*subfuns, *invals, **bind_params)
      if not eqn.primitive.multiple_results:
        outs = [outs]
      if id(eqn) in plan.targets:
        outs = [o * jax.numpy.asarray(plan.targets[id(eqn)], o.dtype) for o in outs]
      if id(eqn) in plan.names:
        recorded[plan.names[id(eqn)]] = outs[0]
    for v, x in zip(eqn.outvars, outs):
      if not isinstance(v, jax_core.DropVar):
        env[v] = x
  return [read(v) for v in jaxpr.outvars]
