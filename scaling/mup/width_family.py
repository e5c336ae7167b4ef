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
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

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


class ModelWidths:
  """One model at several widths: its functional form, shapes, usage and own init stds, computed once and shared by
  the ``WidthParametrization`` s of several schemes (``for_schemes``)."""

  def __init__(self, model: user_model.ModelFactory, loss_fn: user_model.LossFn, example_batch: Any):
    user_model.model_kind(model)
    if not callable(loss_fn):
      raise ConfigTypeError(f"loss_fn must be a function loss_fn(model, batch) -> scalar, got {type(loss_fn).__name__}")
    self.model = model
    self.loss_fn = loss_fn
    self.example_batch = example_batch

  @functools.cache  # pylint: disable=method-cache-max-size-none
  def functional(self, width: int) -> user_model.FunctionalModel:
    """The model at ``width`` as pure functions, with its own initialization (nothing of a scheme applied)."""
    return user_model.functional_model(self.model, self.loss_fn, width, self.example_batch)

  @functools.cache  # pylint: disable=method-cache-max-size-none
  def shapes(self, width: int) -> Any:
    """The parameter shapes at ``width`` (nothing computed)."""
    return user_model.abstract_params(self.functional(width))

  @functools.cache  # pylint: disable=method-cache-max-size-none
  def usage(self, width: int) -> dict[str, usage_lib.Usage]:
    """How the loss uses each parameter, read from its computation at ``width`` (``scaling.mup.usage.read_usage``)."""
    fm = self.functional(width)
    params, state = jax.eval_shape(fm.init, jax.random.key(0))
    return usage_lib.read_usage(fm.loss, params, state, self.example_batch)

  @functools.cache  # pylint: disable=method-cache-max-size-none
  def own_stds(self, width: int) -> dict[str, float]:
    """The std of every parameter of the model's own initialization at ``width`` (key 0), by path."""
    with jax.ensure_compile_time_eval():  # concrete even when first asked for inside a trace
      params, _ = jax.jit(self.functional(width).init)(jax.random.key(0))
    leaves = jax.tree_util.tree_flatten_with_path(params)[0]
    return {usage_lib.path_key(path): _std(leaf) for path, leaf in leaves}


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

  @functools.cache  # pylint: disable=method-cache-max-size-none
  def roles(self, width: int) -> roles_lib.Roles:
    """The roles of the parameters at ``width``."""
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

  @functools.cache  # pylint: disable=method-cache-max-size-none
  def model_at(self, width: int) -> user_model.FunctionalModel:
    """The parametrized model at ``width``: the scheme's init, and the tied readout's multiplier applied."""
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
      shared = ModelWidths(model, loss_fn, example) if shared is None else shared
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
    user_model.model_kind(model)
    return [Run(name, lambda width: user_model.functional_model(model, loss_fn, width, example, init=init), optimizer,
                None)]
  if "optimizer_name" in options:
    options["optimizer"] = options.pop("optimizer_name")
  return [Run(wp.parametrization.name, wp.model_at, wp.optimizer, wp.roles(max(widths))) for wp in for_schemes(
      model, loss_fn, example, schemes, widths=widths, base_width=base_width, init=init or "base", **options)]
