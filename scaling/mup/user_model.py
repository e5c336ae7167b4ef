"""A user's own model (``flax.linen``, ``flax.nnx`` or a plain JAX function) as pure functions of its parameters,
for the studies that train it at several widths (``scaling.coord_check``, ``scaling.transfer``).

The model is given as a factory of the width: ``model(width) -> flax.linen.Module``,
``model(width, rngs) -> flax.nnx.Module`` (told apart by the number of parameters the factory takes) or
``model(width) -> PureModel(init, apply)`` (a parameter tree and a function of it: hand-written JAX, Equinox's
``eqx.partition``, Haiku's ``transform``), with a loss ``loss_fn(model, batch) -> scalar`` that calls the model as
the user would (a ``PureModel`` is called as ``model(*inputs)`` = ``apply(params, *inputs)``). ``functional_model`` turns them into
``init(key) -> (params, state)``, ``loss(params, state, batch)`` and ``captured(params, state, batch) -> (loss,
{module: output})``; the parameters are a plain nested dict (linen's ``params`` collection, or nnx's
``nnx.Param`` state as ``nnx.to_pure_dict``), so the same optimizers and parameter trees serve both APIs.

The output of every module is recorded without any change to the user's model: linen's ``capture_intermediates``,
nnx's ``nnx.capture(..., method_outputs=nnx.Intermediate)``, and for a plain function the product of every
parameter read from its computation (``scaling.mup.usage.record_products``). A module is named by its path ("Dense_0",
"block/attn"; "model" for the top module); a method other than ``__call__`` is appended (".attend"); a module
called more than once, or returning several arrays, gets one entry per array ("name[i]").

Batches: ``materialize_batches`` turns a batch source (a fixed batch, a function of the step, or an iterator)
into one array tree stacked over steps, scanned inside the compiled training program.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import sys
from typing import Any, Callable, Iterator, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from scaling.mup import usage
from scaling.base.validation import ConfigError
from scaling.base.validation import ConfigTypeError

Array = jax.Array
Params = Any
ModelFactory = Callable[..., Any]
LossFn = Callable[[Any, Any], Array]
InitFn = Callable[[int, Params, Array], Params]


@dataclasses.dataclass(frozen=True)
class PureModel:
  """A model as a plain JAX function: ``init(key) -> params`` and ``apply(params, *inputs) -> outputs``.

  What ``model(width)`` returns for a model that is not a Flax module; the loss calls it as ``model(*inputs)``.
  """

  init: Callable[[Array], Params]
  apply: Callable[..., Any]

  def __post_init__(self):
    for name in ("init", "apply"):
      if not callable(getattr(self, name)):
        raise ConfigTypeError(f"PureModel.{name} must be a function, got {type(getattr(self, name)).__name__}")


@dataclasses.dataclass(frozen=True)
class FunctionalModel:
  """A user's model at one width as pure functions (see the module docstring).

  Attributes:
    kind: "linen", "nnx" or "pure".
    width: the width it was built at.
    init: key -> (params, state): params a nested dict of arrays, state everything else the model holds
      (linen's other collections, nnx's non-Param state), held fixed.
    loss: (params, state, batch) -> scalar loss.
    captured: (params, state, batch) -> (loss, {module name: output array}).
  """

  kind: str
  width: int
  init: Callable[[Array], tuple[Params, Any]]
  loss: Callable[[Params, Any, Any], Array]
  captured: Callable[[Params, Any, Any], tuple[Array, dict[str, Array]]]


def model_kind(model: ModelFactory) -> str:
  """"linen" for a factory ``model(width)`` (a linen Module or a ``PureModel``), "nnx" for ``model(width, rngs)``
  (TypeError otherwise)."""
  if not callable(model):
    raise ConfigTypeError(f"model must be a factory of the width, model(width) -> flax.linen.Module or PureModel, or "
                    f"model(width, rngs) -> flax.nnx.Module, got {type(model).__name__}")
  try:  # a class: its __init__ without self (nnx's metaclass hides the class's own signature)
    params = (list(inspect.signature(model.__init__).parameters.values())[1:] if isinstance(model, type)
              else inspect.signature(model).parameters.values())
  except (TypeError, ValueError) as e:
    raise ConfigTypeError(f"model: cannot read the factory's signature ({e})") from e
  required = [p for p in params if p.default is p.empty
              and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
  if len(required) == 1:
    return "linen"
  if len(required) == 2:
    return "nnx"
  raise ConfigTypeError(f"model must take the width (linen: model(width)) or the width and an nnx.Rngs (nnx: "
                  f"model(width, rngs)); it takes {len(required)} required arguments")


def _is_nnx_variable(tree: Any) -> bool:
  """Whether ``tree`` is a ``flax.nnx.Variable`` (only once flax.nnx is loaded can there be one)."""
  nnx = sys.modules.get("flax.nnx")
  return nnx is not None and isinstance(tree, nnx.Variable)


def _walk(tree: Any, path: tuple[str, ...], out: dict[str, list[Array]]) -> None:
  """Collects the array leaves of captured outputs per module name, in the order the module wrote them."""
  if isinstance(tree, Mapping) or hasattr(tree, "items") and not isinstance(tree, (jax.Array, np.ndarray)):
    for key, value in tree.items():
      _walk(value, path + (str(key),), out)
  elif isinstance(tree, (tuple, list)):
    for value in tree:
      _walk(value, path, out)
  elif _is_nnx_variable(tree):
    _walk(tree.get_value() if hasattr(tree, "get_value") else tree.value, path, out)
  elif hasattr(tree, "dtype") and jnp.issubdtype(tree.dtype, jnp.inexact):
    *module, method = path if path else ("__call__",)
    name = "/".join(module) or "model"
    if method != "__call__":
      name += f".{method}"
    out.setdefault(name, []).append(tree)


def named_outputs(captured: Any) -> dict[str, Array]:
  """{module name: output} from linen's ``intermediates`` collection or nnx's captured ``Intermediate`` state."""
  groups: dict[str, list[Array]] = {}
  _walk(captured, (), groups)
  out = {}
  for name, leaves in groups.items():
    if len(leaves) == 1:
      out[name] = leaves[0]
    else:
      out.update({f"{name}[{i}]": leaf for i, leaf in enumerate(leaves)})
  return out


def _linen(model: nn.Module, loss_fn: LossFn, width: int, example: Any) -> FunctionalModel:
  """The linen form: ``init``/``apply`` with ``loss_fn`` as the method."""

  def init(key):
    variables = dict(model.init(key, example, method=loss_fn))
    if "params" not in variables:
      raise ConfigError("model: the linen module has no 'params' collection to train")
    params = variables.pop("params")
    return jax.tree.map(lambda x: x, dict(params)), variables

  def loss(params, state, batch):
    return model.apply({"params": params, **state}, batch, method=loss_fn)

  def captured(params, state, batch):
    value, inter = model.apply({"params": params, **state}, batch, method=loss_fn, capture_intermediates=True,
                               mutable=["intermediates"])
    return value, named_outputs(inter["intermediates"])

  return FunctionalModel("linen", width, init, loss, captured)


def _nnx(factory: ModelFactory, loss_fn: LossFn, width: int) -> FunctionalModel:
  """The nnx form: the graph of the module once, its ``nnx.Param`` state as a pure dict."""
  from flax import nnx  # imported here: flax.nnx (and the IPython it loads) costs every start-up half a second
  abstract = nnx.eval_shape(lambda: factory(width, nnx.Rngs(0)))
  if not isinstance(abstract, nnx.Module):
    raise ConfigTypeError(f"model(width, rngs) must return a flax.nnx.Module, got {type(abstract).__name__}")
  graphdef, param_template, _ = nnx.split(abstract, nnx.Param, ...)

  def init(key):
    _, params, rest = nnx.split(factory(width, nnx.Rngs(key)), nnx.Param, ...)
    return nnx.to_pure_dict(params), rest

  def merged(params, rest):
    state = jax.tree.map(lambda x: x, param_template)
    nnx.replace_by_pure_dict(state, params)
    return nnx.merge(graphdef, state, rest)

  def loss(params, rest, batch):
    return loss_fn(merged(params, rest), batch)

  def captured(params, rest, batch):
    value, inter = nnx.capture(loss_fn, nnx.Intermediate, method_outputs=nnx.Intermediate)(merged(params, rest),
                                                                                         batch)
    return value, named_outputs(nnx.to_pure_dict(inter))

  return FunctionalModel("nnx", width, init, loss, captured)


def _pure(model: PureModel, loss_fn: LossFn, width: int) -> FunctionalModel:
  """The plain-function form: the loss calls ``apply`` bound to the parameters; products recorded from the jaxpr."""
  def init(key):
    params = model.init(key)
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
      if not hasattr(leaf, "shape") and not isinstance(leaf, (int, float, np.number)):
        raise ConfigTypeError(f"model: PureModel.init(key) must return a tree of arrays; at width {width} parameter "
                              f"{usage.path_key(path)!r} is a {type(leaf).__name__}")
    return params, {}

  def loss(params, state, batch):
    del state
    return loss_fn(lambda *inputs, **kw: model.apply(params, *inputs, **kw), batch)

  recorded = usage.record_products(loss)

  def captured(params, state, batch):
    return recorded(params, state, batch)

  return FunctionalModel("pure", width, init, loss, captured)


def functional_model(model: ModelFactory, loss_fn: LossFn, width: int, example_batch: Any, *,
                     init: InitFn | None = None) -> FunctionalModel:
  """A user's model at ``width`` as pure functions of its parameters.

  Args:
    model: ``model(width) -> flax.linen.Module | PureModel`` or ``model(width, rngs) -> flax.nnx.Module``.
    loss_fn: ``loss_fn(module, batch) -> scalar``, calling the module as the user would.
    width: the width.
    example_batch: a batch (linen's ``init`` traces the loss on it).
    init: optional ``init(width, params, key) -> params``, applied to the default initialization (e.g. a
      parametrization's re-initialization or rescaling of each parameter).

  Returns:
    The ``FunctionalModel``.
  """
  kind = model_kind(model)
  check_loss_fn(loss_fn)
  if init is not None and not callable(init):
    raise ConfigTypeError(f"init must be a function init(width, params, key) -> params, got {type(init).__name__}")
  if kind == "linen":
    module = model(width)
    if isinstance(module, PureModel):
      fm = _pure(module, loss_fn, width)
    elif isinstance(module, nn.Module):
      fm = _linen(module, loss_fn, width, example_batch)
    else:
      raise ConfigTypeError(f"model(width) must return a flax.linen.Module or a scaling.PureModel, got "
                            f"{type(module).__name__}")
  else:
    fm = _nnx(model, loss_fn, width)
  if init is None:
    return fm

  def reinit(key):
    key_model, key_init = jax.random.split(key)
    params, state = fm.init(key_model)
    return init(width, params, key_init), state

  return dataclasses.replace(fm, init=reinit)


def rms(x: Array) -> Array:
  """Root mean square of every coordinate, in float32."""
  x = jnp.asarray(x, jnp.float32)
  return jnp.sqrt(jnp.mean(jnp.square(x)))


def materialize_batches(batches: Any, steps: int) -> Any:
  """The batches of steps 0..steps-1 stacked on a leading axis.

  Args:
    batches: a fixed batch (a tree of arrays, used at every step), a function ``batches(step) -> batch``, or an
      iterator of batches.
    steps: how many.

  Returns:
    A tree of arrays [steps, ...].

  Raises:
    ConfigError: naming ``batches``, for a source that raises, runs out, or gives a batch that is not a tree of
      arrays or differs from batch 0 in structure, shape or dtype.
  """
  if callable(batches):
    items = []
    for t in range(steps):
      try:
        items.append(batches(t))
      except ConfigError:
        raise
      except Exception as e:  # the user's function: one line naming it, its traceback kept as the cause
        raise user_error(f"batches(step) raised {type(e).__name__} at step {t}", e) from e
  elif isinstance(batches, Iterator):
    items = []
    for _ in range(steps):
      try:
        items.append(next(batches))
      except StopIteration:
        raise ConfigError(f"batches: the iterator ran out after {len(items)} of {steps} batches") from None
      except ConfigError:
        raise
      except Exception as e:
        raise user_error(f"batches: the iterator raised {type(e).__name__} at batch {len(items)}", e) from e
  else:
    _check_batch(batches, "batches must be a batch (a tree of arrays), a function of the step, or an iterator of "
                 "batches")
    return jax.tree.map(lambda x: jnp.broadcast_to(jnp.asarray(x), (steps, *jnp.shape(x))), batches)
  first = _check_batch(items[0], "batches: batch 0 must be a tree of arrays")
  for t, item in enumerate(items[1:], 1):
    if _check_batch(item, f"batches: batch {t} must be a tree of arrays") != first:
      raise ConfigError(f"batches: batch {t} differs from batch 0 ({_batch_difference(items[0], item)}); every "
                        "batch must have the same structure, shapes and dtypes")
  return jax.tree.map(lambda *xs: jnp.stack([jnp.asarray(x) for x in xs]), *items)


def _check_batch(batch: Any, what: str) -> Any:
  """The structure, shapes and dtypes of a batch (hashable), or ConfigTypeError ``what; got ...``."""
  leaves, treedef = jax.tree.flatten(batch)
  bad = next((x for x in leaves if not hasattr(x, "shape") and not isinstance(x, (int, float, np.number))), None)
  if not leaves or bad is not None or isinstance(batch, (str, bytes)):
    got = type(batch).__name__ if bad is None or not leaves else f"a leaf of type {type(bad).__name__}"
    raise ConfigTypeError(f"{what}; got {got}")
  return treedef, tuple((tuple(np.shape(x)), x.dtype if hasattr(x, "dtype") else type(x).__name__) for x in leaves)


def _batch_difference(first: Any, other: Any) -> str:
  """What differs between two batches, in words (the first leaf that does)."""
  a, b = jax.tree_util.tree_flatten_with_path(first), jax.tree_util.tree_flatten_with_path(other)
  if a[1] != b[1]:
    return f"structure {jax.tree.structure(other)} instead of {jax.tree.structure(first)}"
  for (path, x), (_, y) in zip(a[0], b[0]):
    name = usage.path_key(path) or "the batch"
    if np.shape(x) != np.shape(y):
      return f"{name!r} has shape {tuple(np.shape(y))} instead of {tuple(np.shape(x))}"
    dx, dy = (v.dtype if hasattr(v, "dtype") else type(v).__name__ for v in (x, y))
    if dx != dy:
      return f"{name!r} has dtype {dy} instead of {dx}"
  return "a leaf differs"


def user_error(what: str, e: BaseException) -> ConfigError:
  """``what: <e's first line>`` as one ConfigError (a ConfigTypeError for a TypeError), for an exception raised
  by the user's own code (their model, loss, batches or optimizer); raise it ``from e`` to keep their traceback."""
  lines = str(e).strip().splitlines()
  text = lines[0] if lines else type(e).__name__
  if len(text) > 300:
    text = text[:297] + "..."
  return (ConfigTypeError if isinstance(e, TypeError) else ConfigError)(f"{what}: {text}")


def check_widths(widths: Any, minimum: int = 2) -> tuple[int, ...]:
  """The widths as a tuple of at least ``minimum`` positive ints, increasing, none repeated (ConfigError naming
  ``widths`` otherwise)."""
  if isinstance(widths, (str, bytes)):
    raise ConfigTypeError(f"widths must be a sequence of positive ints, got {widths!r}")
  try:
    values = [w for w in widths]
  except TypeError:
    raise ConfigTypeError(f"widths must be a sequence of positive ints, got {widths!r}") from None
  if any(isinstance(w, bool) or not isinstance(w, (int, np.integer)) or w <= 0 for w in values):
    raise ConfigError(f"widths must be positive ints, got {widths!r}")
  out = tuple(int(w) for w in values)
  repeated = next((w for i, w in enumerate(out) if w in out[:i]), None)
  if repeated is not None:
    times = "twice" if out.count(repeated) == 2 else f"{out.count(repeated)} times"
    raise ConfigError(f"widths must not repeat a width: {repeated} is given {times} in {out}")
  if len(out) < minimum:
    raise ConfigError(f"widths must hold at least {minimum} distinct widths, got {widths!r}")
  if list(out) != sorted(out):
    raise ConfigError(f"widths must be increasing, got {out} (sorted: {tuple(sorted(out))})")
  return out


def check_seeds(seeds: Any) -> tuple[int, ...]:
  """The seeds as a non-empty tuple of ints that fit int32 (ConfigError naming ``seeds`` otherwise)."""
  if isinstance(seeds, (str, bytes)):
    raise ConfigTypeError(f"seeds must be a sequence of ints, got {seeds!r}")
  try:
    values = list(seeds)
  except TypeError:
    raise ConfigTypeError(f"seeds must be a sequence of ints, got {seeds!r}") from None
  if any(isinstance(s, bool) or not isinstance(s, (int, np.integer)) for s in values):
    raise ConfigTypeError(f"seeds must be ints, got {seeds!r}")
  if not values:
    raise ConfigError("seeds must hold at least one seed")
  bad = next((int(s) for s in values if not -2**31 <= s < 2**31), None)
  if bad is not None:
    raise ConfigError(f"seeds must fit in int32 [-2**31, 2**31), got {bad}")
  return tuple(int(s) for s in values)


def check_loss_fn(loss_fn: Any) -> None:
  """ConfigTypeError unless ``loss_fn`` is a function that takes (model, batch)."""
  if not callable(loss_fn):
    raise ConfigTypeError(f"loss_fn must be a function loss_fn(model, batch) -> scalar, got "
                          f"{type(loss_fn).__name__}")
  _check_arity("loss_fn", loss_fn, 2, "loss_fn(model, batch) -> scalar")


def _check_arity(name: str, fn: Callable[..., Any], count: int, form: str) -> None:
  """ConfigTypeError unless ``fn`` can be called with ``count`` positional arguments (unknown signatures pass)."""
  try:
    signature = inspect.signature(fn)
  except (TypeError, ValueError):
    return
  try:
    signature.bind(*range(count))
  except TypeError:
    raise ConfigTypeError(f"{name} must be a function {form}; {getattr(fn, '__name__', type(fn).__name__)} takes "
                          f"{signature}") from None


def check_optimizer(optimizer: Any) -> None:
  """ConfigTypeError unless ``optimizer`` is a factory ``optimizer(width, params, learning_rate)`` (or None)."""
  form = "optimizer(width, params, learning_rate) -> optax.GradientTransformation"
  if optimizer is None:
    return
  if isinstance(optimizer, optax.GradientTransformation):
    raise ConfigTypeError(f"optimizer must be a function {form}, got an optax.GradientTransformation itself: pass "
                          "lambda width, params, learning_rate: <the optimizer built from learning_rate>")
  if not callable(optimizer):
    raise ConfigTypeError(f"optimizer must be None or a function {form}, got {type(optimizer).__name__}")
  try:
    first = next(iter(inspect.signature(optimizer).parameters), None)
  except (TypeError, ValueError):
    first = None
  if first == "learning_rate":  # an optax constructor itself (optax.adam): its first argument is the rate
    name = getattr(optimizer, "__name__", "the optimizer")
    raise ConfigTypeError(f"optimizer must be a function {form}, got {name}, which takes the learning rate first: "
                          f"pass lambda width, params, learning_rate: {name}(learning_rate)")
  _check_arity("optimizer", optimizer, 3, form)


def check_optimizer_on(optimizer: OptimizerFactory, width: int, shapes: Params) -> None:
  """ConfigError naming ``optimizer`` unless ``optimizer(width, shapes, learning_rate)`` gives an optax
  transformation whose ``init`` and ``update`` trace on parameters of ``shapes`` (nothing compiled)."""
  form = "optimizer(width, params, learning_rate)"

  def probe(learning_rate, params):
    tx = optimizer(width, shapes, learning_rate)
    if not isinstance(tx, optax.GradientTransformation):
      raise ConfigTypeError(f"{form} must return an optax.GradientTransformation, got {type(tx).__name__} at width "
                            f"{width}")
    updates, _ = tx.update(params, tx.init(params), params)
    return updates

  try:
    updates = jax.eval_shape(probe, jax.ShapeDtypeStruct((), jnp.float32), shapes)
  except ConfigError:
    raise
  except Exception as e:
    raise user_error(f"{form} at width {width}: its transformation raised {type(e).__name__} on the model's "
                     "parameters", e) from e
  if jax.tree.structure(updates) != jax.tree.structure(shapes) or any(
      tuple(u.shape) != tuple(p.shape) for u, p in zip(jax.tree.leaves(updates), jax.tree.leaves(shapes))):
    raise ConfigError(f"{form} at width {width}: its updates do not have the parameters' structure and shapes")


def check_loss_output(out: Any, where: str) -> None:
  """ConfigError unless the loss's output (``jax.eval_shape``'s) is one floating scalar."""
  form = "loss_fn(model, batch) must return a scalar loss"
  if out is None:
    raise ConfigTypeError(f"{form}, got None {where}")
  leaves = jax.tree.leaves(out)
  if len(leaves) != 1 or not hasattr(out, "shape"):
    raise ConfigTypeError(f"{form}, got a {type(out).__name__} of {len(leaves)} values {where} (return the loss "
                          "alone)")
  if tuple(out.shape) != ():
    raise ConfigError(f"{form}, got an array of shape {tuple(out.shape)} {where} (reduce it to one number, e.g. "
                      "with jnp.mean)")
  if not jnp.issubdtype(out.dtype, jnp.floating):
    raise ConfigTypeError(f"{form} of a floating dtype, got {out.dtype} {where}")


OptimizerFactory = Callable[[int, Params, Array], optax.GradientTransformation]


@struct.dataclass
class Batches:
  """A batch source for ``scaling.training.loop.run.run_training``: batch t of every member is ``stacked[t]`` (the same for
  every seed), ``batches(steps)`` from a fixed batch, a function of the step or an iterator
  (``materialize_batches``)."""

  stacked: Any

  @classmethod
  def of(cls, batches: Any, steps: int) -> Batches:
    """The first ``steps`` batches of a source (see ``materialize_batches``)."""
    return cls(materialize_batches(batches, steps))

  @property
  def steps(self) -> int:
    return int(jax.tree.leaves(self.stacked)[0].shape[0])

  def batch(self, step: Any, seed: Any = None) -> Any:
    """Batch ``step`` (any seed: every member sees the same batches)."""
    del seed
    return jax.tree.map(lambda x: x[step], self.stacked)

  @property
  def example(self) -> Any:
    """Batch 0."""
    return self.batch(0)


@functools.lru_cache(maxsize=64)
def abstract_init(fm: FunctionalModel) -> tuple[Params, Any]:
  """The shapes and dtypes (``jax.ShapeDtypeStruct`` leaves) of the model's (parameters, state): its init traced once
  per model and shared by all who ask (a study's program and the outputs it records), nothing computed."""
  return jax.eval_shape(fm.init, jax.random.key(0))


def abstract_params(fm: FunctionalModel) -> Params:
  """The shapes and dtypes of the model's parameters (``jax.ShapeDtypeStruct`` leaves), nothing computed."""
  return abstract_init(fm)[0]
