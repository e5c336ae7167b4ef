"""A model given as a factory of its width, made SP, μP (or any scheme) at every width: the one engine.

``WidthParametrization(model, loss_fn, batch, "mup", base_width=64)`` is what microsoft/mup's
``set_base_shapes`` + ``MuReadout``/``MuSharedReadout`` + ``MuAdam`` do for a PyTorch model, for any JAX model:

1. **Roles, once.** The loss is traced at the base width (``scaling.mup.usage.read_usage``: which axes each parameter is
   summed over, which tables are looked up, which table is also the readout) and the parameter shapes at the base
   and delta widths say what grows (``scaling.infer_kinds``).
2. **Per width**, ``parametrize(roles, scheme)``: the per-parameter learning rates (``optimizer``), the init
   (``init``) and the forward multipliers, folded into init and learning rate (``forward="fold"``) except where a
   parameter is shared: a **tied readout**'s multiplier (μP: base/width) is applied by the library to the product
   ``h @ E.T`` itself (``scaling.mup.usage.scale_products`` rewrites the traced loss), so the loss and every recorded
   output see the logits the model computes, and the table stays the embedding everywhere else.
3. **The init**, by ``init``:

   * ``"base"`` (default; mup's ``set_base_shapes`` keeps the model's own initializers): each matrix keeps the
     model's own initializer, scaled so that its std is the base model's times the scheme's law from the base
     width: std(w, width) = σ_base · S(width)/S(base), S the scheme's init std as trained (μP's hidden 1/√fan_in,
     its readout (base/width)·1/√fan_in_base folded, an embedding constant). At the base width the model is the
     model as written (same parameters, same outputs); σ_base and the model's own std at each width are measured on
     one draw (key 0) of each, so any initializer (GPT-2's 0.02, Flax's fan-in defaults) is followed. Biases, gains
     and fixed parameters are the model's own.
   * ``"paper"``: every matrix redrawn as init_mean + S·N(0, 1) with the paper's constants (embedding std 1: the
     base model changes).
   * ``"rescale"``: every matrix's own distribution scaled to std S (the paper's constants, the model's shapes).

A model is ``model(width) -> flax.linen.Module``, ``model(width, rngs) -> flax.nnx.Module`` or ``model(width) ->
scaling.PureModel(init, apply)`` (any JAX function of a parameter tree: hand-written, Equinox, Haiku); the loss is
``loss_fn(model, batch) -> scalar`` calling the model as the user would.

**The boundary** (``ModelWidths.check``, ``check_values``, ``runs``): a bad model is one ``ConfigError`` naming the
argument, never a JAX traceback from inside a training program. Traced, nothing compiled: the factory at every
width (an exception it raises, with its traceback kept as the cause), the same parameters at every width and some
of them growing between each two, floating parameters, the loss on the batch (an exception, or an output that is
not one floating scalar), an optimizer factory's signature and its transformation on the parameters. Computed
once, at the smallest width: the model's init (a non-finite parameter, named by its path) and the loss there.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from scaling.base import compilation
from scaling.mup import schemes as param_lib
from scaling.mup import roles as roles_lib
from scaling.mup import usage as usage_lib
from scaling.mup import user_model
from scaling.mup import parametrize as parametrize_lib
from scaling.base.validation import check_positive_int
from scaling.base.validation import ConfigError
from scaling.base.validation import ConfigTypeError

INIT_MODES = ("base", "paper", "rescale")


def _std(x: Any) -> float:
  """The std of an array's entries (float64 on the host)."""
  return float(np.std(np.asarray(jax.device_get(x), np.float64)))


def _shapes_key(batch: Any) -> Any:
  """The structure, shapes and dtypes of a batch (what tracing the loss on it depends on), hashable."""
  leaves, treedef = jax.tree.flatten(batch)
  return treedef, tuple((tuple(np.shape(x)), str(getattr(x, "dtype", type(x).__name__))) for x in leaves)


def _paths(tree: Any) -> dict[str, Any]:
  """{path: leaf} of a parameter tree."""
  return {usage_lib.path_key(path): leaf for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


class ModelWidths:
  """One model at several widths: its functional form, shapes, usage and own init stds, computed once and shared by
  the ``WidthParametrization`` s of several schemes (``for_schemes``).

  ``check`` and ``check_values`` are the boundary of every study of the model: each user mistake (a factory that
  raises or builds different parameters at different widths, or nothing that grows; a loss that raises on the
  batch or returns no floating scalar; an init that draws NaN, a loss that is not finite at initialization) is one
  ``ConfigError`` naming the argument, raised before any training program is compiled (``check`` compiles nothing).
  """

  def __init__(self, model: user_model.ModelFactory, loss_fn: user_model.LossFn, example_batch: Any,
               batch_name: str = "example_batch"):
    user_model.model_kind(model)
    user_model.check_loss_fn(loss_fn)
    self.model = model
    self.loss_fn = loss_fn
    self.example_batch = example_batch
    self.batch_name = batch_name  # what the errors call the example batch: the argument it came from
    self._checked = set()  # the (width, batch shapes) whose loss traced to a scalar
    self._stds = {}  # width -> own_stds

  @functools.cache  # pylint: disable=method-cache-max-size-none
  def functional(self, width: int) -> user_model.FunctionalModel:
    """The model at ``width`` as pure functions, with its own initialization (nothing of a scheme applied)."""
    try:
      return user_model.functional_model(self.model, self.loss_fn, width, self.example_batch)
    except ConfigError:
      raise
    except Exception as e:  # the user's factory: one line naming it, its traceback kept as the cause
      raise user_model.user_error(f"model({width}) raised {type(e).__name__}", e) from e

  @functools.cache  # pylint: disable=method-cache-max-size-none
  def abstract(self, width: int) -> tuple[Any, Any]:
    """The shapes of the parameters and state at ``width`` (nothing computed; errors name the model)."""
    fm = self.functional(width)
    try:
      params, state = user_model.abstract_init(fm)
    except ConfigError:
      raise
    except Exception as e:
      what = {"linen": f"initializing model({width}) (linen: loss_fn(model, batch) on {self.batch_name})",
              "nnx": f"model({width}, rngs)", "pure": f"model({width}).init(key)"}[fm.kind]
      raise user_model.user_error(f"model: {what} raised {type(e).__name__}", e) from e
    leaves = _paths(params)
    if not leaves:
      raise ConfigError(f"model: model({width}) has no parameters to train")
    for path, leaf in leaves.items():
      if not isinstance(leaf, jax.ShapeDtypeStruct) or not jnp.issubdtype(leaf.dtype, jnp.inexact):
        got = leaf.dtype if isinstance(leaf, jax.ShapeDtypeStruct) else type(leaf).__name__
        raise ConfigTypeError(f"model: parameter {path!r} of model({width}) is {got}; every trained parameter must "
                              "be a floating array (keep anything else out of the parameters)")
    return params, state

  def shapes(self, width: int) -> Any:
    """The parameter shapes at ``width`` (nothing computed)."""
    return self.abstract(width)[0]

  @functools.cache  # pylint: disable=method-cache-max-size-none
  def usage(self, width: int) -> dict[str, usage_lib.Usage]:
    """How the loss uses each parameter, read from its computation at ``width`` (``scaling.mup.usage.read_usage``)."""
    params, state = self.abstract(width)
    return usage_lib.read_usage(self.functional(width).loss, params, state, self.example_batch)

  def check(self, widths: Sequence[int], batch: Any, batch_name: str = "batches") -> None:
    """The model's boundary at ``widths`` on ``batch``, nothing compiled: the factory builds the same parameters at
    every width, some of them growing between each two widths, and the loss traces on the batch to one floating
    scalar (``ConfigError`` naming the argument otherwise)."""
    widths = sorted(dict.fromkeys(widths))
    leaves = {w: {p: tuple(x.shape) for p, x in _paths(self.shapes(w)).items()} for w in widths}
    for a, b in zip(widths, widths[1:]):
      only_a, only_b = sorted(set(leaves[a]) - set(leaves[b])), sorted(set(leaves[b]) - set(leaves[a]))
      if only_a or only_b:
        parts = [f"{', '.join(map(repr, only[:4]))} only at width {w}" for only, w in ((only_a, a), (only_b, b))
                 if only]
        raise ConfigError(f"model: model({a}) and model({b}) build different parameters ({'; '.join(parts)}); "
                          "model(width) must build the same parameters at every width, only their sizes following "
                          "the width")
      for path, shape in leaves[a].items():
        if len(shape) != len(leaves[b][path]):
          raise ConfigError(f"model: parameter {path!r} has shape {list(shape)} at width {a} but "
                            f"{list(leaves[b][path])} at width {b}; its rank must not change with the width")
      if leaves[a] == leaves[b]:
        raise ConfigError(f"model: no parameter changes shape between widths {a} and {b}: model(width) must build "
                          "parameters whose sizes follow the width (does it use its width argument?)")
    for width in widths:
      key = ("loss", width, _shapes_key(batch))
      if key in self._checked:
        continue
      fm = self.functional(width)
      params, state = self.abstract(width)
      try:
        out = jax.eval_shape(fm.loss, params, state, batch)
      except ConfigError:
        raise
      except Exception as e:
        raise user_model.user_error(f"loss_fn(model, batch) raised {type(e).__name__} on {batch_name} at width "
                                    f"{width}", e) from e
      user_model.check_loss_output(out, f"on {batch_name} at width {width}")
      self._checked.add(key)

  def own_init(self, width: int) -> tuple[Any, Any]:
    """The model's own initialization at ``width`` (key 0); a non-finite parameter is an error naming its path.
    Its stds are kept (``own_stds``), not the parameters."""
    self.abstract(width)
    with jax.ensure_compile_time_eval():  # concrete even when first asked for inside a trace
      params, state = compilation.jit(self.functional(width).init)(jax.random.key(0))
    check_finite_params(params, f"model: its initialization at width {width} (key 0)")
    self._stds[width] = {path: _std(leaf) for path, leaf in _paths(params).items()}
    return params, state

  def own_stds(self, width: int) -> dict[str, float]:
    """The std of every parameter of the model's own initialization at ``width`` (key 0), by path."""
    if width not in self._stds:
      self.own_init(width)
    return self._stds[width]

  def check_values(self, width: int, batch: Any, batch_name: str = "batches",
                   fm: user_model.FunctionalModel | None = None) -> None:
    """The model's initialization at ``width`` (key 0; ``fm``'s, default the model's own) is finite, and so is the
    loss there on ``batch``: one small program each, before any training (ConfigError naming the path otherwise)."""
    if fm is None:
      params, state = self.own_init(width)  # what init="base" computes anyway: its stds are kept
      fm = self.functional(width)
    else:
      with jax.ensure_compile_time_eval():
        params, state = compilation.jit(fm.init)(jax.random.key(0))
      check_finite_params(params, f"init(width, params, key) at width {width} (key 0)")
    with jax.ensure_compile_time_eval():
      loss = float(compilation.jit(fm.loss)(params, state, batch))
    if not np.isfinite(loss):
      raise ConfigError(f"loss_fn(model, batch) is {loss} at initialization (width {width}, key 0, the first batch of "
                        f"{batch_name}): every parameter is finite, so the loss or the model computes a non-finite "
                        "value from them")


def check_finite_params(params: Any, what: str) -> None:
  """ConfigError ``what draws non-finite values in parameter 'p' (n NaN, m inf of k)`` for the first such leaf."""
  for path, leaf in _paths(params).items():
    x = np.asarray(jax.device_get(leaf))
    if jnp.issubdtype(x.dtype, jnp.inexact) and not np.isfinite(x).all():
      nan, inf = int(np.isnan(x).sum()), int(np.isinf(x).sum())
      counts = ", ".join(t for t in (f"{nan} NaN" if nan else "", f"{inf} inf" if inf else "") if t)
      raise ConfigError(f"{what} draws non-finite values in parameter {path!r} ({counts} of {x.size})")


class WidthParametrization:
  """A scheme applied to a model at every width (module docstring).

  Attributes:
    model: the factory of the width.
    loss_fn: ``loss_fn(model, batch) -> scalar``.
    widths: the model at its widths (``ModelWidths``; shared between schemes by ``for_schemes``).
    parametrization: the scheme (a ``scaling.mup.schemes.Parametrization``).
    base_width: the width at which the scheme equals the model as written (μP, SP).
    delta_width: a second width; the parameter axes that differ between the two grow.
    init: "base", "paper" or "rescale" (module docstring).
    forward: "fold" or "readout" (``scaling.parametrize``; "model" for models that apply every multiplier).
    optimizer_name: "adam", "adamw", "sgd" or "adam_atan2" (``optimizer``).
    optimizer_options: keyword options of ``RoleParametrization.optimizer`` (eps_scaling, weight_decay, ...).
  """

  def __init__(self, model: user_model.ModelFactory, loss_fn: user_model.LossFn, example_batch: Any,
               scheme: str | param_lib.Parametrization = "mup", *, base_width: int, delta_width: int | None = None,
               init: str = "base", forward: str = "fold", overrides: Mapping[str, Any] | None = None,
               tied_embedding: str | None = None, blocks: str | Sequence[str] | None = None,
               read_computation: bool = True, optimizer: str = "adam", widths: ModelWidths | None = None,
               **optimizer_options: Any):
    self.widths = ModelWidths(model, loss_fn, example_batch) if widths is None else widths
    self.model = model
    self.loss_fn = loss_fn
    self.example_batch = example_batch
    if isinstance(scheme, str):
      scheme = param_lib.get_parametrization(scheme)
    if not isinstance(scheme, param_lib.Parametrization):
      raise ConfigTypeError(f"scheme must be a name or a scaling.mup.schemes.Parametrization, got {scheme!r}")
    self.parametrization = scheme
    self.base_width = check_positive_int("base_width", base_width)
    self.delta_width = 2 * self.base_width if delta_width is None else check_positive_int("delta_width", delta_width)
    if self.delta_width == self.base_width:
      raise ConfigError(f"delta_width must differ from base_width ({base_width})")
    if init not in INIT_MODES:
      raise ConfigError(f"init must be one of {', '.join(INIT_MODES)}; got {init!r}")
    if forward not in parametrize_lib.FORWARD:
      raise ConfigError(f"forward must be one of {', '.join(parametrize_lib.FORWARD)}; got {forward!r}")
    self.init_mode = init
    self.forward = forward
    self.overrides = dict(overrides or {})
    self.tied_embedding = tied_embedding
    self.blocks = blocks
    self.read_computation = bool(read_computation)
    param_lib.optimizer_family(optimizer)
    self.optimizer_name = optimizer
    self.optimizer_options = dict(optimizer_options)

  def __repr__(self) -> str:
    return (f"WidthParametrization({self.parametrization.name}, base_width={self.base_width}, "
            f"init={self.init_mode!r}, forward={self.forward!r})")

  @property
  def usage(self) -> dict[str, usage_lib.Usage] | None:
    """How the loss uses each parameter, read once from its computation at the base width (None if not read)."""
    return self.widths.usage(self.base_width) if self.read_computation else None

  def roles(self, width: int) -> roles_lib.Roles:
    """The roles of the parameters at ``width``."""
    return self._roles(check_positive_int("width", width))

  @functools.cache  # pylint: disable=method-cache-max-size-none
  def _roles(self, width: int) -> roles_lib.Roles:
    self.widths.check((self.base_width, self.delta_width, width), self.example_batch, "example_batch")
    shapes = self.widths.shapes
    return roles_lib.infer_kinds(shapes(self.base_width), shapes(self.delta_width), shapes(width),
                                 usage=self.usage, overrides=self.overrides, tied_embedding=self.tied_embedding,
                                 blocks=self.blocks)

  @functools.cache  # pylint: disable=method-cache-max-size-none
  def at(self, width: int) -> parametrize_lib.RoleParametrization:
    """``scaling.parametrize`` of the model at ``width``."""
    return parametrize_lib.parametrize(self.roles(width), self.parametrization, forward=self.forward)

  @functools.cache  # pylint: disable=method-cache-max-size-none
  def base_factors(self, width: int) -> dict[str, float]:
    """Per matrix, the factor ``init="base"`` multiplies the model's own draw by at ``width`` (1 at the base)."""
    base, target = self.at(self.base_width), self.at(width)
    own_base, own = self.widths.own_stds(self.base_width), self.widths.own_stds(width)
    factors = {}
    for path, role in target.roles.items():
      if role.kind not in param_lib.MATRIX_KINDS:
        continue
      std = own[path]
      law_base, law = base.spec(path).init_std, target.spec(path).init_std
      if law == 0.0 or std == 0.0:
        factors[path] = 0.0 if law == 0.0 else 1.0
      elif law_base == 0.0:
        raise ConfigError(f"parameter {path!r}: the scheme gives it std 0 at the base width but {law:g} at width "
                          f"{width}; init='base' cannot follow it (use init='paper')")
      else:
        factors[path] = own_base[path] / std * law / law_base
    return factors

  def init(self, width: int, params: Any, key: jax.Array) -> Any:
    """The scheme's initialization of the model's own ``params`` at ``width`` (``init`` mode; an ``InitFn``)."""
    p = self.at(width)
    if self.init_mode == "paper":
      return p.init(key, params)
    if self.init_mode == "rescale":
      return p.rescale(params)
    factors = self.base_factors(width)
    return p.roles.tree(params, lambda path, role, leaf: leaf if factors.get(path, 1.0) == 1.0
                        else (leaf * factors[path]).astype(leaf.dtype))

  def optimizer(self, width: int, params: Any, learning_rate: Any) -> optax.GradientTransformation:
    """The optimizer with the scheme's per-parameter learning rates at ``width`` (an ``OptimizerFactory``)."""
    del params
    return self.at(width).optimizer(self.optimizer_name, learning_rate, **self.optimizer_options)

  def readout_factors(self, width: int) -> dict[str, float]:
    """{path: multiplier} of the products the library multiplies at ``width``: a tied readout's (1: none)."""
    p = self.at(width)
    if p.roles.tied_embedding is None or self.forward == "model":
      return {}
    return {p.roles.tied_embedding: p.tied_readout_multiplier}

  def model_at(self, width: int) -> user_model.FunctionalModel:
    """The parametrized model at ``width``: the scheme's init, and the tied readout's multiplier applied."""
    return self._model_at(check_positive_int("width", width))

  @functools.cache  # pylint: disable=method-cache-max-size-none
  def _model_at(self, width: int) -> user_model.FunctionalModel:
    self.roles(width)  # the model's boundary at this width (ConfigError naming the argument), nothing compiled
    fm = user_model.functional_model(self.model, self.loss_fn, width, self.example_batch, init=self.init)
    factors = self.readout_factors(width)
    if not factors:
      return fm
    return user_model.FunctionalModel(fm.kind, fm.width, fm.init, usage_lib.scale_products(fm.loss, factors),
                                      usage_lib.scale_products(fm.captured, factors))


def for_schemes(model: Any, loss_fn: Any, example: Any, schemes: Sequence[Any], *, widths: Sequence[int],
                base_width: int | None, **options: Any) -> list[WidthParametrization]:
  """One ``WidthParametrization`` per scheme (a name, a ``Parametrization`` or a ready ``WidthParametrization``),
  the base width defaulting to the smallest of ``widths``."""
  if isinstance(schemes, (str, WidthParametrization)):
    schemes = (schemes,)
  out = []
  for scheme in schemes:
    if isinstance(scheme, WidthParametrization):
      out.append(scheme)
    else:
      shared = next((w.widths for w in out if w.model is model and w.loss_fn is loss_fn), None)
      shared = ModelWidths(model, loss_fn, example, "batches") if shared is None else shared
      out.append(WidthParametrization(model, loss_fn, example, scheme, widths=shared,
                                      base_width=min(widths) if base_width is None else base_width, **options))
  if not out:
    raise ConfigError("schemes must name at least one parametrization")
  return out


class Run(NamedTuple):
  """One run of a study of any model: its name, the model at a width, its optimizer factory and its roles (at the
  largest width; None for a model trained as given)."""

  name: str
  model_at: Callable[[int], user_model.FunctionalModel]
  optimizer: Callable[..., optax.GradientTransformation]
  roles: roles_lib.Roles | None


def runs(model: Any, loss_fn: Any, example: Any, *, optimizer: Any, init: Any, name: str, schemes: Sequence[Any],
         widths: Sequence[int], base_width: int | None, **options: Any) -> list[Run]:
  """The runs of a study of any model.

  With an ``optimizer`` factory: one run, the model trained as given (``init`` an optional ``init(width, params,
  key)``); otherwise one run per scheme (``for_schemes``; ``init`` a mode, None meaning "base"; the optimizer's name
  as ``optimizer_name``).
  """
  if optimizer is not None:
    if init is not None and not callable(init):
      raise ConfigTypeError(f"with an optimizer factory, init must be a function init(width, params, key) -> params "
                            f"or None, got {init!r}")
    user_model.check_optimizer(optimizer)
    own = ModelWidths(model, loss_fn, example, "batches")
    own.check(widths, example)

    @functools.cache
    def model_at(width):
      return user_model.functional_model(model, loss_fn, width, example, init=init)

    if init is not None:
      for width in widths:
        _check_init_fn(model_at(width), own.shapes(width))
    user_model.check_optimizer_on(optimizer, min(widths), own.shapes(min(widths)))  # a factory's one probe
    own.check_values(min(widths), example, fm=model_at(min(widths)) if init is not None else None)
    return [Run(name, model_at, optimizer, None)]
  if "optimizer_name" in options:
    options["optimizer"] = options.pop("optimizer_name")
  found = for_schemes(model, loss_fn, example, schemes, widths=widths, base_width=base_width, init=init or "base",
                      **options)
  for shared in {id(wp.widths): wp.widths for wp in found}.values():
    shared.check(widths, example)
    shared.check_values(min(widths), example)
  return [Run(wp.parametrization.name, wp.model_at, wp.optimizer, wp.roles(max(widths))) for wp in found]


def _check_init_fn(fm: user_model.FunctionalModel, shapes: Any) -> None:
  """ConfigError naming ``init`` unless ``init(width, params, key)`` traces at ``fm``'s width and returns parameters of
  the model's structure and shapes (nothing compiled)."""
  try:
    params, _ = user_model.abstract_init(fm)  # the trace the run's program reuses
  except ConfigError:
    raise
  except Exception as e:
    raise user_model.user_error(f"init(width, params, key) raised {type(e).__name__} at width {fm.width}", e) from e
  want = {p: (tuple(x.shape), x.dtype) for p, x in _paths(shapes).items()}
  got = {p: (tuple(getattr(x, "shape", ())), getattr(x, "dtype", None)) for p, x in _paths(params).items()}
  if got != want:
    path = next((p for p in sorted(set(want) | set(got)) if want.get(p) != got.get(p)))
    raise ConfigError(f"init(width, params, key) must return the parameters it is given, changed in value only; at "
                      f"width {fm.width} parameter {path!r} is {_describe_leaf(got.get(path))} where the model has "
                      f"{_describe_leaf(want.get(path))}")


def _describe_leaf(leaf: tuple[Any, Any] | None) -> str:
  return "missing" if leaf is None else f"{leaf[1]}{list(leaf[0])}"
