"""The verdict of every module of a coordinate check, and ``CoordCheckResult``, what the check of any model returns.

A module breaks μP when a slope exceeds the tolerance (default ``TOLERANCE``), of its output at initialization
(step 0) or of its change since initialization after updates (any step ≥ 1); falling curves pass (μP's readout
shrinks like 1/√width at initialization by design). The likely cause follows from when it grows and from the layer
kind of the module's weights (``likely_cause``): a readout growing after updates lacks its 1/width output
multiplier; hidden activations growing after updates get an Adam learning rate not scaled by 1/width; growth at
initialization is an init std not scaled with the fan-in. A module without weights of its own (a block, the whole
model) grows because a layer inside or before it does.

``from_rows`` makes a ``CoordCheckResult`` (rows, slopes, verdicts) of measured rows; ``combine`` joins several.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Mapping, Sequence

import jax

from scaling.runs import report
from scaling.mup import schemes as param_lib
from scaling.mup import shapes as shapes_lib
from scaling.studies.coord_check.slopes import slope_markdown
from scaling.studies.coord_check.slopes import slopes
from scaling.studies.coord_check.slopes import write_figure
from scaling.base.validation import ConfigError
from scaling.base.validation import ConfigTypeError


BREAKS = "breaks μP"
INCONCLUSIVE = "inconclusive (seed noise)"
TOLERANCE = 0.1
"""A module breaks μP when a slope of log2 RMS against log2 width exceeds this (growth faster than width^0.1)."""

# When a module holds parameters of several kinds, the group that names it.
_GROUP_PRIORITY = ("readout", "hidden", "input", "vector", "fixed")


def module_roles(roles: Mapping[str, Any] | None) -> dict[str, str]:
  """{module name: layer kind} from ``scaling.infer_kinds``'s roles (parameter path -> ``Role``), a nested parameter
  tree of kinds (``Roles.kinds()``), or a flat {module name: kind} mapping (kinds of
  ``scaling.mup.schemes.LAYER_KINDS``).

  The module of a parameter is its path without the last key ("Dense_0" for "Dense_0/kernel"); a module with
  parameters of several kinds takes the first group of ``_GROUP_PRIORITY`` (a Dense layer's kernel, not its bias).
  """
  if roles is None:
    return {}
  if not isinstance(roles, Mapping):
    raise ConfigTypeError(f"roles must be a mapping (scaling.infer_kinds's roles, a tree of kinds, or module name -> "
                          f"kind), got {type(roles).__name__}")
  if any(isinstance(v, Mapping) for v in roles.values()):
    by_param = [(list(shapes_lib.path_names(path)), leaf)
                for path, leaf in jax.tree_util.tree_flatten_with_path(dict(roles))[0]]
  elif all(hasattr(v, "kind") for v in roles.values()):
    by_param = [(str(path).split("/"), role.kind) for path, role in roles.items()]
  else:
    return {str(k): param_lib.check_kind(v) for k, v in roles.items()}
  found: dict[str, list[str]] = {}
  for keys, kind in by_param:
    if keys and keys[0] == "params":
      keys = keys[1:]
    found.setdefault("/".join(keys[:-1]) or "model", []).append(param_lib.check_kind(kind))
  return {m: min(kinds, key=lambda k: _GROUP_PRIORITY.index(param_lib.kind_group(k))) for m, kinds in found.items()}


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
    role: the layer kind of the module's weights (``scaling.mup.schemes.LAYER_KINDS``) or None (no weights of
      its own, or no roles given).
    when: "init" (it grows at step 0) or "update" (flat at step 0, grows after updates).
    slope: the largest slope.

  Returns:
    One sentence.
  """
  grows = _growth(slope)
  role = None if role is None else param_lib.kind_group(role)
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
  of its change at any step ≥ 1, exceeds ``tolerance`` by more than two standard errors of the slope over the
  seeds (``slopes``' ``slope_se``; none known: by any margin); above the tolerance by less, it is "inconclusive
  (seed noise)". The RMS after updates is not judged: it mixes the two, and where the initial part shrinks (μP's
  readout, ∝ 1/√width) while the optimizer cancels it, its slope passes through positive values at small widths
  although neither part grows.

  Args:
    slope_rows: ``scaling.studies.coord_check.slopes.slopes`` of the RMS rows (step 0 counts).
    delta_slope_rows: the same of the change since initialization (steps ≥ 1 count); when empty, the RMS slopes
      at steps ≥ 1 are judged instead.
    roles: module -> kind, or a parameter tree of kinds or roles (``module_roles``).
    tolerance: a slope above it is growth.

  Returns:
    One row per (parametrization, layer) in order: parametrization, layer, role, slope_init (step 0),
    slope_update (the largest slope of the change at steps ≥ 1), their standard errors slope_init_se and
    slope_update_se, verdict ("ok", "inconclusive (seed noise)" or "breaks μP") and cause ("" when ok).
  """
  by_module = module_roles(roles)
  out: dict[tuple[str, str], dict[str, Any]] = {}
  updates = delta_slope_rows if delta_slope_rows else [s for s in slope_rows if s["step"] > 0]
  for s in slope_rows:
    row = out.setdefault((s["parametrization"], s["layer"]), {
        "parametrization": s["parametrization"], "layer": s["layer"], "role": _role_of(s["layer"], by_module),
        "slope_init": None, "slope_init_se": None, "slope_update": None, "slope_update_se": None})
    if s["step"] == 0 and s["slope"] is not None:
      row.update(slope_init=s["slope"], slope_init_se=s.get("slope_se"))
  for s in updates:
    key = (s["parametrization"], s["layer"])
    if key in out and s["step"] > 0 and s["slope"] is not None:
      if out[key]["slope_update"] is None or s["slope"] > out[key]["slope_update"]:
        out[key].update(slope_update=s["slope"], slope_update_se=s.get("slope_se"))
  for row in out.values():
    row.update(verdict="ok", cause="")
    for when, slope, se in (("init", row["slope_init"], row["slope_init_se"]),
                            ("update", row["slope_update"], row["slope_update_se"])):
      if slope is not None and slope > tolerance:
        noisy = se is not None and slope - tolerance <= 2 * se
        row.update(verdict=INCONCLUSIVE if noisy else BREAKS, cause=likely_cause(row["role"], when, slope))
        if not noisy:
          break
  return list(out.values())


def _role_of(layer: str, by_module: dict[str, str]) -> str | None:
  """The role of a recorded output's module ("Dense_0[1]" and "Embed_0.attend" are those of Dense_0, Embed_0)."""
  name = layer.split("[", 1)[0].split(".", 1)[0]
  return by_module.get(name)


@dataclasses.dataclass(frozen=True)
class CoordCheckResult:
  """What ``coord_check`` measured (combine several with ``combine``).

  Attributes:
    rows: one per (parametrization, width, step, layer): rms (mean over seeds), rms_std, rms_seeds, delta_rms (of
      the change since initialization, mean over seeds), delta_rms_seeds,
      the change since initialization, mean over seeds), loss (mean over seeds).
    slopes: ``scaling.studies.coord_check.slopes.slopes`` of rms: per (parametrization, layer, step) the slope against
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
    return [v for v in self.verdicts if v["verdict"] == BREAKS]

  @property
  def inconclusive(self) -> list[dict[str, Any]]:
    """The verdict rows of the modules above the tolerance by less than two standard errors."""
    return [v for v in self.verdicts if v["verdict"] == INCONCLUSIVE]

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
    write_figure(path, rows, self.delta_slopes if delta else self.slopes)

  def slope_markdown(self, heading: str) -> str:
    """``heading``, the slopes per (parametrization, module) and step as a Markdown table."""
    return slope_markdown(self.slopes, self.steps, heading)

  def verdict_markdown(self, heading: str) -> str:
    """``heading``, the verdict of every module as a Markdown table, then one line per parametrization."""
    fmt = lambda v: "–" if v is None else f"{v:+.2f}"
    cells = [[v["parametrization"], v["layer"], v["role"] or "–", fmt(v["slope_init"]), fmt(v["slope_update"]),
              v["verdict"], v["cause"] or "–"] for v in self.verdicts]
    columns = ["parametrization", "module", "role", "slope at init", "largest slope of the change", "verdict",
               "likely cause"]
    lines = [heading, "", report.markdown_table(columns, cells).rstrip(), ""]
    for name in dict.fromkeys(v["parametrization"] for v in self.verdicts):
      broken = [v["layer"] for v in self.verdicts if v["parametrization"] == name and v["verdict"] == BREAKS]
      noisy = [v["layer"] for v in self.verdicts if v["parametrization"] == name and v["verdict"] == INCONCLUSIVE]
      line = (f"{len(broken)} module(s) break μP ({', '.join(broken)})." if broken else
              "no module breaks μP." if noisy else "every module within the tolerance (μP holds).")
      if noisy:
        line += f" {len(noisy)} inconclusive within the seeds' noise ({', '.join(noisy)})."
      lines.append(f"- {name}: {line}")
    lines.append(f"- Criterion: a module breaks μP when the slope of log2 RMS against log2 width exceeds "
                 f"{self.tolerance:g} at initialization (its output) or at a step ≥ 1 (its change since "
                 "initialization) by more than two standard errors of the slope over the seeds; by less, it is "
                 "inconclusive.")
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
  slope_rows = slopes(rows)
  delta_rows = slopes([{**r, "rms": r["delta_rms"] if r["step"] else None, "rms_seeds": r.get("delta_rms_seeds")}
                       for r in rows])
  return CoordCheckResult(rows, slope_rows, delta_rows, verdicts(slope_rows, delta_rows, roles=roles,
                                                                 tolerance=tolerance), steps, float(tolerance))
