"""The verdict of every module of a coordinate check, and ``CoordCheckResult``, what the check of any model returns.

μP keeps every activation Θ(1) in width at initialization and moves it by Θ(1) with the updates (Tensor Programs
V, §D.1; Tensor Programs IV: the maximal update, neither blowing up nor vanishing, the output logits' change
included). A module breaks μP when a slope exceeds the tolerance (default ``TOLERANCE``), of its output at
initialization (step 0) or of its change since initialization after updates (any step ≥ 1), or when the slope of
its change stays below ``VANISHING`` (−0.25) at every step ≥ 1 where μP expects the change Θ(1) (``THETA_ONE_CHANGE``: the
modules whose weights are an embedding, an input, hidden or attention layer, the readout, or a gain or bias): a
change vanishing with width is lazy, as under NTK. Falling curves at initialization pass (μP's readout shrinks like
1/√width at initialization by design). The likely cause follows from when it grows and from the layer kind of the
module's weights (``likely_cause``): a readout growing after updates lacks its 1/width output multiplier; hidden
activations growing after updates get an Adam learning rate not scaled by 1/width; growth at initialization is an
init std not scaled with the fan-in; a change that vanishes has a learning rate or a multiplier (often one inside
the model) that μP does not know of. A module without weights of its own (a block, the whole model) grows because a
layer inside or before it does; whether its change should stay Θ(1) is not known, so only its growth is judged.

A module whose RMS is not finite at some width and step (its output holds ``-inf`` or ``finfo.min``, as a mask added
to a position bias, whose square overflows; or the run diverged) has no slope: it is ``NOT_MEASURABLE``, with the
width and step where it first is, and is left out of the figure.

``from_rows`` makes a ``CoordCheckResult`` (rows, slopes, verdicts) of measured rows; ``combine`` joins several.
"""

from __future__ import annotations

import dataclasses
import math
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
NOT_MEASURABLE = "not measurable"
TOLERANCE = 0.1
"""A module breaks μP when a slope of log2 RMS against log2 width exceeds this (growth faster than width^0.1)."""
VANISHING = -0.25
"""Where μP expects a module's change since initialization Θ(1), it vanishes with width when the largest slope of
the change over the steps ≥ 1 is below this, by more than two standard errors: halfway between μP's 0 and NTK's
−1/2 (under NTK the change of the readout's output falls like width^−1/2). Not −``TOLERANCE``: at small widths a
correct μP model's change has a finite-width part that falls like 1/√width beside its Θ(1) part (A + B/√m), whose
slope lies between 0 and −1/2 (measured under μP at widths 32–128: GPT-2's lm_head −0.13 ± 0.02, an nnx model's tied
logits −0.16 ± 0.02); a multiplier inside the model that μP does not know of falls like it (−0.49 for width^−1/2,
T5's tied logits −0.81)."""
THETA_ONE_CHANGE = ("input", "hidden", "readout", "vector")
"""The layer groups (``scaling.mup.schemes.kind_group``) of the modules whose change since initialization μP keeps
Θ(1) in width (Tensor Programs V, §D.1; IV, the maximal update: embedding and input outputs, hidden and attention
activations, the readout logits, normalized or shifted activations): their change is judged in both directions."""

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
  """The likely cause of a module whose output grows with width, or whose change vanishes with it.

  Args:
    role: the layer kind of the module's weights (``scaling.mup.schemes.LAYER_KINDS``) or None (no weights of
      its own, or no roles given).
    when: "init" (it grows at step 0), "update" (flat at step 0, grows after updates) or "vanish" (its change
      since initialization falls with width).
    slope: the largest slope (of the change, negative, for "vanish").

  Returns:
    One sentence.
  """
  role = None if role is None else param_lib.kind_group(role)
  if when == "vanish":
    where = {"readout": "the readout's learning rate or output multiplier falls with width",
             "hidden": "the hidden weights' learning rate falls faster than 1/width",
             "input": "the input layer's learning rate falls with width",
             "vector": "its input, or its gain's or bias's learning rate, moves less at larger width"}.get(
                 role, "a layer inside or before it moves less at larger width")
    return (f"its change since initialization vanishes with width (slope {slope:+.2f}): lazy, as under NTK; e.g. "
            f"a multiplier inside the model that μP does not know of, or {where}")
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
             roles: Mapping[str, Any] | None = None, tolerance: float = TOLERANCE, vanishing: float = VANISHING,
             unmeasurable: Mapping[tuple[str, str], str] | None = None) -> list[dict[str, Any]]:
  """The verdict of every (parametrization, module) from its slopes.

  μP keeps every module's output at initialization and its change since initialization Θ(1) in width (Tensor
  Programs V, §D.1; the updates are what μP scales): a module breaks μP when the slope of its RMS at step 0, or
  of its change at any step ≥ 1, exceeds ``tolerance`` by more than two standard errors of the slope over the
  seeds (``slopes``' ``slope_se``; none known: by any margin), or when the largest slope of its change over the
  steps ≥ 1 is below ``vanishing`` by more than two standard errors where μP expects the change Θ(1) (its role's
  group in ``THETA_ONE_CHANGE``): the change vanishes with width at every step, lazy, as under NTK. (A change that
  is Θ(1) after the first update and falls later, as when the rest of an SP model overshoots and its gradients
  turn, is not lazy.) Beyond the tolerance by less, it is "inconclusive (seed noise)". The RMS
  after updates is not judged: it mixes the two, and where the initial part shrinks (μP's readout, ∝ 1/√width)
  while the optimizer cancels it, its slope passes through positive values at small widths although neither part
  grows; for the same reason only growth is judged when no change since initialization is given.

  Args:
    slope_rows: ``scaling.studies.coord_check.slopes.slopes`` of the RMS rows (step 0 counts).
    delta_slope_rows: the same of the change since initialization (steps ≥ 1 count); when empty, the RMS slopes
      at steps ≥ 1 are judged instead (growth only).
    roles: module -> kind, or a parameter tree of kinds or roles (``module_roles``).
    tolerance: a slope above it is growth.
    vanishing: a largest slope of the change below it, where μP expects the change Θ(1), vanishes (``VANISHING``).
    unmeasurable: {(parametrization, layer): why} of the modules whose RMS is not finite (``not_finite``): their
      verdict is ``NOT_MEASURABLE``, the reason their cause.

  Returns:
    One row per (parametrization, layer) in order: parametrization, layer, role, slope_init (step 0),
    slope_update (the largest slope of the change at steps ≥ 1), their standard errors slope_init_se and
    slope_update_se, verdict ("ok", "inconclusive (seed noise)",
    "breaks μP" or "not measurable") and cause ("" when ok).
  """
  by_module = module_roles(roles)
  unmeasurable = dict(unmeasurable or {})
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
  for key, row in out.items():
    row.update(verdict="ok", cause="")
    if key in unmeasurable:  # no slope is trusted: an infinite RMS at one width or step leaves the others too few
      row.update(slope_init=None, slope_init_se=None, slope_update=None, slope_update_se=None,
                 verdict=NOT_MEASURABLE, cause=unmeasurable[key])
      continue
    theta_one = bool(delta_slope_rows) and row["role"] is not None and (
        param_lib.kind_group(row["role"]) in THETA_ONE_CHANGE)
    checks = [("init", row["slope_init"], row["slope_init_se"]),
              ("update", row["slope_update"], row["slope_update_se"])]
    bounds = {"init": tolerance, "update": tolerance}
    if theta_one and row["slope_update"] is not None:  # its change falls with width at every step ≥ 1
      checks.append(("vanish", -row["slope_update"], row["slope_update_se"]))
      bounds["vanish"] = -vanishing
    for when, slope, se in checks:  # slope: how far it grows (or, for "vanish", how fast the change falls)
      if slope is not None and slope > bounds[when]:
        noisy = se is not None and slope - bounds[when] <= 2 * se
        row.update(verdict=INCONCLUSIVE if noisy else BREAKS,
                   cause=likely_cause(row["role"], when, -slope if when == "vanish" else slope))
        if not noisy:
          break
  return list(out.values())


def not_finite(rows: Sequence[dict[str, Any]]) -> dict[tuple[str, str], str]:
  """{(parametrization, layer): why} of the modules whose RMS, or that of their change since initialization, is not
  finite at some width and step (the first, by width then step, named): they cannot be measured.

  Args:
    rows: ``CoordCheckResult.rows`` (rms, rms_seeds, delta_rms, delta_rms_seeds; a value that is None at a step
      ≥ 1, or None for rms, was not finite when written).
  """
  found: dict[tuple[str, str], tuple[Any, int, str]] = {}
  axis = "depth" if rows and "depth" in rows[0] else "width"
  for r in rows:
    key = (r["parametrization"], r["layer"])
    for what, mean, seeds in (("output", r.get("rms"), r.get("rms_seeds")),
                              ("change", r.get("delta_rms") if r["step"] else 0.0, r.get("delta_rms_seeds"))):
      bad = [v for v in [mean, *(seeds or [])] if v is None or not math.isfinite(v)]
      if not bad:
        continue
      value = next((f"{v}" for v in bad if v is not None), "not finite")
      if key not in found or (r[axis], r["step"]) < found[key][:2]:
        found[key] = (r[axis], r["step"], what, value)
  out = {}
  for key, (where, step, what, value) in found.items():
    thing = ("its output holds non-finite values" if what == "output"
             else "its change since initialization is not finite")
    out[key] = f"{thing} (RMS {value} at {axis} {where}, step {step})"
  return out


def _role_of(layer: str, by_module: dict[str, str]) -> str | None:
  """The role of a recorded output's module ("Dense_0[1]" and "Embed_0.attend" are those of Dense_0, Embed_0)."""
  name = layer.split("[", 1)[0].split(".", 1)[0]
  return by_module.get(name)


@dataclasses.dataclass(frozen=True)
class CoordCheckResult:
  """What ``coord_check`` measured (combine several with ``combine``).

  Attributes:
    rows: one per (parametrization, width, step, layer): rms (mean over seeds), rms_std, rms_seeds, delta_rms (of
      the change since initialization, mean over seeds), delta_rms_seeds, loss (mean over seeds).
    slopes: ``scaling.studies.coord_check.slopes.slopes`` of rms: per (parametrization, layer, step) the slope against
      log2 width.
    delta_slopes: the same of delta_rms (None at step 0, where the change is 0).
    verdicts: ``verdicts`` per (parametrization, layer).
    steps: k (RMS at steps 0..k).
    tolerance: the slope above which a module grows.
    vanishing: the largest slope of a change below which it vanishes, where μP expects it Θ(1) (``VANISHING``).
  """

  rows: list[dict[str, Any]]
  slopes: list[dict[str, Any]]
  delta_slopes: list[dict[str, Any]]
  verdicts: list[dict[str, Any]]
  steps: int
  tolerance: float
  vanishing: float = VANISHING

  @property
  def ok(self) -> bool:
    """Whether no module breaks μP or is inconclusive, and at least one could be measured (those that could not,
    ``unmeasurable``, are left out)."""
    measured = [v for v in self.verdicts if v["verdict"] != NOT_MEASURABLE]
    return bool(measured) and all(v["verdict"] == "ok" for v in measured)

  @property
  def broken(self) -> list[dict[str, Any]]:
    """The verdict rows of the modules that break μP."""
    return [v for v in self.verdicts if v["verdict"] == BREAKS]

  @property
  def inconclusive(self) -> list[dict[str, Any]]:
    """The verdict rows of the modules above the tolerance by less than two standard errors."""
    return [v for v in self.verdicts if v["verdict"] == INCONCLUSIVE]

  @property
  def unmeasurable(self) -> list[dict[str, Any]]:
    """The verdict rows of the modules whose RMS is not finite somewhere (``not_finite``; the cause says where)."""
    return [v for v in self.verdicts if v["verdict"] == NOT_MEASURABLE]

  def slope(self, layer: str, step: int, parametrization: str | None = None, *, delta: bool = False) -> float | None:
    """The fitted slope of one module at one step (of its change since initialization with ``delta``)."""
    for s in self.delta_slopes if delta else self.slopes:
      if s["layer"] == layer and s["step"] == step and parametrization in (None, s["parametrization"]):
        return s["slope"]
    raise KeyError(f"no slope for layer {layer!r} at step {step}")

  def write_figure(self, path: str | pathlib.Path, *, delta: bool = False) -> None:
    """mup's plot: one row of panels per parametrization, one panel per step, RMS against width (log-log), one
    line per module with its slope in the legend (the change since initialization at steps ≥ 1 with ``delta``). The
    modules that cannot be measured (``unmeasurable``) are left out."""
    left_out = {(v["parametrization"], v["layer"]) for v in self.unmeasurable}
    kept = lambda r: (r["parametrization"], r["layer"]) not in left_out
    rows = [r for r in self.rows if kept(r)]
    rows = rows if not delta else [{**r, "rms": r["delta_rms"]} for r in rows if r["step"] > 0]
    write_figure(path, rows, [s for s in (self.delta_slopes if delta else self.slopes) if kept(s)])

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
      mine = [v for v in self.verdicts if v["parametrization"] == name]
      broken = [v["layer"] for v in mine if v["verdict"] == BREAKS]
      noisy = [v["layer"] for v in mine if v["verdict"] == INCONCLUSIVE]
      lost = [v["layer"] for v in mine if v["verdict"] == NOT_MEASURABLE]
      line = (f"{len(broken)} module(s) break μP ({', '.join(broken)})." if broken else
              "no module breaks μP." if noisy else
              "no module could be measured." if len(lost) == len(mine) else
              "every measured module within the tolerance (μP holds for them)." if lost else
              "every module within the tolerance (μP holds).")
      if noisy:
        line += f" {len(noisy)} inconclusive within the seeds' noise ({', '.join(noisy)})."
      if lost:
        line += f" {len(lost)} not measurable, left out of the figure ({', '.join(lost)}: RMS not finite)."
      lines.append(f"- {name}: {line}")
    lines.append(f"- Criterion: a module breaks μP when the slope of log2 RMS against log2 width exceeds "
                 f"{self.tolerance:g} at initialization (its output) or at a step ≥ 1 (its change since "
                 f"initialization), or when the largest slope of its change is below −{-self.vanishing:g} (it "
                 "vanishes with width at every step ≥ 1: lazy, as under NTK) where μP expects the change Θ(1) (the "
                 "modules of embedding, input, hidden, attention, readout, gain or bias weights), by more than two "
                 "standard errors of the slope over the seeds; by less, it is inconclusive. A module whose RMS is "
                 "not finite at some width and step is not measurable.")
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
  return CoordCheckResult(rows, slope_rows, delta_rows,
                          verdicts(slope_rows, delta_rows, roles=roles, tolerance=tolerance,
                                   unmeasurable=not_finite(rows)), steps, float(tolerance))
