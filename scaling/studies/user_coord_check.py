"""The μP coordinate check of any Flax model (``scaling.coord_check``), as ``microsoft/mup``'s ``get_coord_data``
and ``plot_coord_data`` do for PyTorch, with a verdict per module.

Yang et al. 2022 (Tensor Programs V, §D.1 and Fig. 5): train models of several widths for a few steps on the same
data and plot the size of every module's output against width at each step; under μP every curve is flat (or
falls) with width, under SP some grow once the weights have moved. Here the model is the user's own
(``scaling.user_model``: a linen or nnx module factory of the width and a loss); every module's output is recorded
without changing the model, as the root mean square of its coordinates and of its change since initialization
(the same batch through the initial parameters), at steps 0..k (step t at the parameters after t updates), for
several seeds vmapped in one compiled program per width. The slopes are least-squares fits of log2 RMS against
log2 width (``scaling.studies.coord_check.fit_slope``; ≈ 0 flat, 0.5 ∝ √width, 1 ∝ width).

Verdict per module (``verdicts``): it breaks μP when a slope exceeds the tolerance (default ``TOLERANCE``), of its
output at initialization (step 0) or of its change since initialization after updates (any step ≥ 1); falling
curves pass (μP's readout shrinks like 1/√width at initialization by design). The likely cause follows
from when it grows and, when roles are given (``scaling.infer_kinds``'s roles, or a module -> role mapping), from
the role of the module's weights: a readout growing after updates lacks its 1/width output multiplier; hidden
activations growing after updates get an Adam learning rate not scaled by 1/width; growth at initialization is an
init std not scaled with the fan-in. A module without weights of its own (a block, the whole model) grows because
a layer inside or before it does.
"""

from __future__ import annotations

import dataclasses
import io
import math
import pathlib
from typing import Any, Mapping, Sequence

import jax
import numpy as np

from scaling import report
from scaling import user_model
from scaling import width_parametrization
from scaling.studies import coord_check as study
from scaling.studies import stats
from scaling.validation import ConfigError
from scaling.validation import ConfigTypeError

TOLERANCE = 0.1
"""A module breaks μP when a slope of log2 RMS against log2 width exceeds this (growth faster than width^0.1)."""

ROLES = ("input", "hidden", "readout", "vector", "fixed")
# Layer kinds (``scaling.parametrization.LAYER_KINDS``, the kinds of ``scaling.infer_kinds``) and other role names
# -> ours; a name not listed is matched by the first alias it contains ("final_norm" -> "norm").
_ROLE_ALIASES = {"embedding": "input", "embed": "input", "input": "input", "hidden": "hidden", "readout": "readout",
                 "output": "readout", "unembed": "readout", "attn_q": "hidden", "attn_k": "hidden",
                 "attn_v": "hidden", "attn_o": "hidden", "mlp": "hidden", "vector": "vector", "bias": "vector",
                 "norm": "vector", "gain": "vector", "scale": "vector", "fixed": "fixed"}
# When a module holds parameters of several roles, the one that names it.
_ROLE_PRIORITY = ("readout", "hidden", "input", "vector", "fixed")


def normalize_role(role: Any) -> str | None:
  """One of ``ROLES`` for a role name (ours, a layer kind or a Kinded value), None when unknown."""
  text = str(getattr(role, "kind", role)).lower()
  if text in _ROLE_ALIASES:
    return _ROLE_ALIASES[text]
  for alias, ours in _ROLE_ALIASES.items():
    if alias in text:
      return ours
  return None


def module_roles(roles: Mapping[str, Any] | None) -> dict[str, str]:
  """{module name: role} from ``scaling.infer_kinds``'s roles (parameter path -> role), a nested parameter tree of
  kinds (``Roles.kinds()``), or a flat {module name: role name} mapping.

  The module of a parameter is its path without the last key ("Dense_0" for "Dense_0/kernel"); a module with
  parameters of several roles takes the first of ``_ROLE_PRIORITY`` (a Dense layer's kernel, not its bias).
  """
  if roles is None:
    return {}
  if not isinstance(roles, Mapping):
    raise ConfigTypeError(f"roles must be a mapping (scaling.infer_kinds's roles, a tree of kinds, or module name -> "
                    f"role), got {type(roles).__name__}")
  by_param: list[tuple[list[str], Any]] = []
  if any(isinstance(v, Mapping) for v in roles.values()):
    for path, leaf in jax.tree_util.tree_flatten_with_path(dict(roles))[0]:
      by_param.append(([str(getattr(k, "key", getattr(k, "name", k))) for k in path], leaf))
  elif all(hasattr(v, "kind") for v in roles.values()):
    by_param = [(str(path).split("/"), role.kind) for path, role in roles.items()]
  else:
    return {str(k): r for k, v in roles.items() if (r := normalize_role(v)) is not None}
  found: dict[str, list[str]] = {}
  for keys, leaf in by_param:
    if keys and keys[0] == "params":
      keys = keys[1:]
    role = normalize_role(leaf)
    if role is not None:
      found.setdefault("/".join(keys[:-1]) or "model", []).append(role)
  return {m: min(rs, key=_ROLE_PRIORITY.index) for m, rs in found.items()}


def _growth(slope: float) -> str:
  """"like √width" / "like width" / "like width^0.3" for a positive slope."""
  if abs(slope - 0.5) < 0.15:
    return "like √width"
  if abs(slope - 1.0) < 0.2:
    return "like width"
  return f"like width^{slope:.2f}"


def likely_cause(role: str | None, when: str, slope: float) -> str:
  """The likely cause of a module whose output grows with width.

  Args:
    role: the role of the module's weights (``ROLES``) or None (no weights of its own, or no roles given).
    when: "init" (it grows at step 0) or "update" (flat at step 0, grows after updates).
    slope: the largest slope.

  Returns:
    One sentence.
  """
  grows = _growth(slope)
  if when == "init":
    if role == "readout":
      return (f"grows {grows} at initialization: the readout's init std is not ∝ 1/fan_in (nor ∝ 1/√fan_in with "
              f"a 1/width multiplier)")
    if role in ("hidden", "input"):
      return f"grows {grows} at initialization: init std not ∝ 1/√fan_in"
    if role == "vector":
      return f"grows {grows} at initialization: a gain or bias initialized larger at larger width"
    return f"grows {grows} at initialization: a layer inside or before it has an init std too large for its fan-in"
  if role == "readout":
    return (f"grows {grows} after updates: missing 1/width output multiplier (or the readout's learning rate is "
            f"not scaled by 1/width)")
  if role == "hidden":
    return f"grows {grows} after updates: learning rate of the hidden weights not scaled by 1/width (Adam: η/fan_in)"
  if role == "input":
    return f"grows {grows} after updates: the input layer's learning rate grows with width"
  if role == "vector":
    return (f"grows {grows} after updates: its input changes more at larger width (a layer before it), or a gain or "
            f"bias learning rate grows with width")
  return (f"grows {grows} after updates: a layer inside or before it has a learning rate or output multiplier not "
          f"scaled with width")


def verdicts(slope_rows: Sequence[dict[str, Any]], delta_slope_rows: Sequence[dict[str, Any]] = (), *,
             roles: Mapping[str, Any] | None = None, tolerance: float = TOLERANCE) -> list[dict[str, Any]]:
  """The verdict of every (parametrization, module) from its slopes.

  μP keeps every module's output at initialization and its change since initialization Θ(1) in width (Tensor
  Programs V, §D.1; the updates are what μP scales): a module breaks μP when the slope of its RMS at step 0, or
  of its change at any step ≥ 1, exceeds ``tolerance``. The RMS after updates is not judged: it mixes the two,
  and where the initial part shrinks (μP's readout, ∝ 1/√width) while the optimizer cancels it, its slope
  passes through positive values at small widths although neither part grows.

  Args:
    slope_rows: ``scaling.studies.coord_check.slopes`` of the RMS rows (step 0 counts).
    delta_slope_rows: the same of the change since initialization (steps ≥ 1 count); when empty, the RMS slopes
      at steps ≥ 1 are judged instead.
    roles: module -> role, or a parameter tree of roles (``module_roles``).
    tolerance: a slope above it is growth.

  Returns:
    One row per (parametrization, layer) in order: parametrization, layer, role, slope_init (step 0),
    slope_update (the largest slope of the change at steps ≥ 1), verdict ("ok" or "breaks μP") and cause
    ("" when ok).
  """
  by_module = module_roles(roles)
  out: dict[tuple[str, str], dict[str, Any]] = {}
  updates = delta_slope_rows if delta_slope_rows else [s for s in slope_rows if s["step"] > 0]
  for s in slope_rows:
    row = out.setdefault((s["parametrization"], s["layer"]), {
        "parametrization": s["parametrization"], "layer": s["layer"], "role": _role_of(s["layer"], by_module),
        "slope_init": None, "slope_update": None})
    if s["step"] == 0 and s["slope"] is not None:
      row["slope_init"] = s["slope"]
  for s in updates:
    key = (s["parametrization"], s["layer"])
    if key in out and s["step"] > 0 and s["slope"] is not None:
      out[key]["slope_update"] = _max(out[key]["slope_update"], s["slope"])
  for row in out.values():
    init, update = row["slope_init"], row["slope_update"]
    if init is not None and init > tolerance:
      row.update(verdict="breaks μP", cause=likely_cause(row["role"], "init", init))
    elif update is not None and update > tolerance:
      row.update(verdict="breaks μP", cause=likely_cause(row["role"], "update", update))
    else:
      row.update(verdict="ok", cause="")
  return list(out.values())


def _max(a: float | None, b: float) -> float:
  return b if a is None else max(a, b)


def _role_of(layer: str, by_module: dict[str, str]) -> str | None:
  """The role of a recorded output's module ("Dense_0[1]" and "Embed_0.attend" are those of Dense_0, Embed_0)."""
  name = layer.split("[", 1)[0].split(".", 1)[0]
  return by_module.get(name)


@dataclasses.dataclass(frozen=True)
class CoordCheckResult:
  """What ``coord_check`` measured (combine several with ``combine``).

  Attributes:
    rows: one per (parametrization, width, step, layer): rms (mean over seeds), rms_std, rms_seeds, delta_rms (of
      the change since initialization, mean over seeds), loss (mean over seeds).
    slopes: ``scaling.studies.coord_check.slopes`` of rms: per (parametrization, layer, step) the slope against
      log2 width.
    delta_slopes: the same of delta_rms (None at step 0, where the change is 0).
    verdicts: ``verdicts`` per (parametrization, layer).
    steps: k (RMS at steps 0..k).
    tolerance: the slope above which a module grows.
  """

  rows: list[dict[str, Any]]
  slopes: list[dict[str, Any]]
  delta_slopes: list[dict[str, Any]]
  verdicts: list[dict[str, Any]]
  steps: int
  tolerance: float

  @property
  def ok(self) -> bool:
    """Whether no module breaks μP."""
    return all(v["verdict"] == "ok" for v in self.verdicts)

  @property
  def broken(self) -> list[dict[str, Any]]:
    """The verdict rows of the modules that break μP."""
    return [v for v in self.verdicts if v["verdict"] != "ok"]

  def slope(self, layer: str, step: int, parametrization: str | None = None, *, delta: bool = False) -> float | None:
    """The fitted slope of one module at one step (of its change since initialization with ``delta``)."""
    for s in self.delta_slopes if delta else self.slopes:
      if s["layer"] == layer and s["step"] == step and parametrization in (None, s["parametrization"]):
        return s["slope"]
    raise KeyError(f"no slope for layer {layer!r} at step {step}")

  def write_figure(self, path: str | pathlib.Path, *, delta: bool = False) -> None:
    """mup's plot: one row of panels per parametrization, one panel per step, RMS against width (log-log), one
    line per module with its slope in the legend (the change since initialization at steps ≥ 1 with ``delta``)."""
    rows = self.rows if not delta else [{**r, "rms": r["delta_rms"]} for r in self.rows if r["step"] > 0]
    study.write_figure(path, rows, self.delta_slopes if delta else self.slopes)

  def slope_markdown(self, heading: str) -> str:
    """``heading``, the slopes per (parametrization, module) and step as a Markdown table."""
    return study.slope_markdown(self.slopes, self.steps, heading)

  def verdict_markdown(self, heading: str) -> str:
    """``heading``, the verdict of every module as a Markdown table, then one line per parametrization."""
    fmt = lambda v: "–" if v is None else f"{v:+.2f}"
    cells = [[v["parametrization"], v["layer"], v["role"] or "–", fmt(v["slope_init"]), fmt(v["slope_update"]),
              v["verdict"], v["cause"] or "–"] for v in self.verdicts]
    columns = ["parametrization", "module", "role", "slope at init", "largest slope of the change", "verdict",
               "likely cause"]
    lines = [heading, "", report.markdown_table(columns, cells).rstrip(), ""]
    for name in dict.fromkeys(v["parametrization"] for v in self.verdicts):
      broken = [v["layer"] for v in self.verdicts if v["parametrization"] == name and v["verdict"] != "ok"]
      lines.append(f"- {name}: " + (f"{len(broken)} module(s) break μP ({', '.join(broken)})." if broken else
                                    "every module within the tolerance (μP holds)."))
    lines.append(f"- Criterion: a module breaks μP when the slope of log2 RMS against log2 width exceeds "
                 f"{self.tolerance:g} at initialization (its output) or at a step ≥ 1 (its change since "
                 "initialization).")
    return "\n".join(lines) + "\n"


def combine(*results: CoordCheckResult, roles: Mapping[str, Any] | None = None) -> CoordCheckResult:
  """Several results (e.g. SP and μP of one model) as one: one figure with a row of panels per parametrization."""
  if not results:
    raise ConfigError("combine needs at least one CoordCheckResult")
  steps = {r.steps for r in results}
  if len(steps) != 1:
    raise ConfigError(f"results must have the same number of steps, got {sorted(steps)}")
  rows = [row for r in results for row in r.rows]
  slopes = [row for r in results for row in r.slopes]
  delta = [row for r in results for row in r.delta_slopes]
  return CoordCheckResult(rows, slopes, delta, [v for r in results for v in r.verdicts], steps.pop(),
                          results[0].tolerance)


def coord_check(model: user_model.ModelFactory, loss_fn: user_model.LossFn, batches: Any,
                optimizer: user_model.OptimizerFactory | None = None, *, schemes: Sequence[Any] = ("sp", "mup"),
                widths: Sequence[int] = (64, 128, 256, 512), base_width: int | None = None,
                init: str | user_model.InitFn | None = None, steps: int = 3, learning_rate: float = 1e-2,
                seeds: Sequence[int] = (0, 1, 2), roles: Mapping[str, Any] | None = None, name: str = "model",
                tolerance: float = TOLERANCE, progress: bool = True, **options: Any) -> CoordCheckResult:
  """The coordinate check of any model: every module's output RMS against width over the first steps.

  Tensor Programs V (Yang et al. 2022), §D.1 and Fig. 5; ``microsoft/mup``'s ``get_coord_data``. One call infers
  the roles (``scaling.WidthParametrization``: the computation and the shapes), parametrizes each width under each
  scheme and runs them all::

    result = scaling.coord_check(model, loss_fn, batch, schemes=("sp", "mup"), widths=(64, 128, 256, 512))

  With an ``optimizer`` factory instead, the model is trained as given under that optimizer (custom
  per-parameter learning rates; ``init`` may then be an ``init(width, params, key)`` function), one run named
  ``name``.

  Args:
    model: ``model(width) -> flax.linen.Module | scaling.PureModel`` or ``model(width, rngs) -> flax.nnx.Module``.
    loss_fn: ``loss_fn(model, batch) -> scalar``.
    batches: a fixed batch (as mup's ``fix_data``), a function ``batches(step) -> batch``, or an iterator.
    optimizer: None (each scheme's optimizer), or ``optimizer(width, params, learning_rate) ->
      optax.GradientTransformation`` (params: the shapes of the parameter tree).
    schemes: parametrizations compared: names ("sp", "mup", ...), ``scaling.Parametrization`` objects or ready
      ``scaling.WidthParametrization`` s.
    widths: at least two widths.
    base_width: the schemes' base width (default: the smallest width).
    init: "base" (None), "paper" or "rescale" (``scaling.WidthParametrization``); with ``optimizer``, an optional
      ``init(width, params, key) -> params`` applied after the model's own initialization.
    steps: k ≥ 1: RMS at steps 0..k (k updates).
    learning_rate: the (Adam) learning rate.
    seeds: the seeds (initialization keys), trained together as one vmapped program per width.
    roles: with ``optimizer``, the role of each module's weights for the likely causes (``module_roles``); the
      schemes' own roles otherwise.
    name: the run's name with ``optimizer``.
    tolerance: the slope above which a module grows.
    progress: show progress (``scaling.report.Progress``) on stderr.
    **options: further options of ``scaling.WidthParametrization`` (overrides, tied_embedding, blocks, forward,
      optimizer name as ``optimizer_name``, its options).

  Returns:
    A ``CoordCheckResult`` of every scheme (one row of panels each in its figure).
  """
  widths = user_model.check_widths(widths)
  if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
    raise ConfigError(f"steps must be a positive int, got {steps!r}")
  if not isinstance(learning_rate, (int, float)) or not math.isfinite(learning_rate) or learning_rate < 0:
    raise ConfigError(f"learning_rate must be a finite number >= 0, got {learning_rate!r}")
  seeds = np.asarray(list(seeds), np.int32)
  if seeds.ndim != 1 or not seeds.size:
    raise ConfigError(f"seeds must be a non-empty sequence of ints, got {seeds!r}")
  if not isinstance(tolerance, (int, float)) or not tolerance > 0:
    raise ConfigError(f"tolerance must be a positive number, got {tolerance!r}")
  stacked = user_model.materialize_batches(batches, steps + 1)
  example = jax.tree.map(lambda x: x[0], stacked)
  if optimizer is not None:
    if init is not None and not callable(init):
      raise ConfigTypeError(f"with an optimizer factory, init must be a function init(width, params, key) -> params "
                            f"or None, got {init!r}")
    user_model.model_kind(model)
    at = lambda width: user_model.functional_model(model, loss_fn, width, example, init=init)
    rows = _measure(name, at, optimizer, widths, steps, learning_rate, seeds, stacked, progress)
    return from_rows(rows, steps, roles=roles, tolerance=tolerance)
  if "optimizer_name" in options:
    options["optimizer"] = options.pop("optimizer_name")
  results = []
  for wp in width_parametrization.for_schemes(model, loss_fn, example, schemes, widths=widths, base_width=base_width,
                     init=init or "base", **options):
    rows = _measure(wp.parametrization.name, wp.model_at, wp.optimizer, widths, steps, learning_rate, seeds, stacked,
                    progress)
    results.append(from_rows(rows, steps, roles=wp.roles(max(widths)), tolerance=tolerance))
  return combine(*results)


def _measure(name: str, model_at: Any, optimizer: Any, widths: Sequence[int], steps: int, learning_rate: float,
             seeds: np.ndarray, stacked: Any, progress: bool) -> list[dict[str, Any]]:
  """The coordinate-check rows of one scheme: every width trained for ``steps`` updates, seeds vmapped."""
  lrs = np.full(seeds.shape, learning_rate, np.float32)
  rows = []
  with report.Progress(len(widths), f"coord_check {name}", stream=None if progress else io.StringIO()) as bar:
    for width in widths:
      fm = model_at(width)
      records = jax.device_get(user_model.training_program(fm, optimizer, record_outputs=True)(seeds, lrs, stacked))
      point = {"parametrization": name, "width": width}
      rms_rows = study.coord_rows(point, {"rms": {k: np.asarray(v).T for k, v in records["rms"].items()}})
      delta = {k: np.asarray(v).mean(axis=0) for k, v in records["delta_rms"].items()}
      loss = np.asarray(records["loss"]).mean(axis=0)
      rows += [{**r, "delta_rms": stats.finite_or_none(float(delta[r["layer"]][r["step"]])),
                "loss": stats.finite_or_none(float(loss[r["step"]]))} for r in rms_rows]
      bar.update(f"width {width}")
  return rows


def from_rows(rows: list[dict[str, Any]], steps: int, *, roles: Mapping[str, Any] | None = None,
              tolerance: float = TOLERANCE) -> CoordCheckResult:
  """The result of measured rows (``CoordCheckResult.rows``, e.g. read back from a file): slopes and verdicts.

  Args:
    rows: one per (parametrization, width, step, layer) with rms and delta_rms.
    steps: k (steps 0..k).
    roles: as in ``coord_check``.
    tolerance: as in ``coord_check``.

  Returns:
    A ``CoordCheckResult``.
  """
  slope_rows = study.slopes(rows)
  delta_rows = study.slopes([{**r, "rms": r["delta_rms"] if r["step"] else None} for r in rows])
  return CoordCheckResult(rows, slope_rows, delta_rows, verdicts(slope_rows, delta_rows, roles=roles,
                                                                 tolerance=tolerance), steps, float(tolerance))

