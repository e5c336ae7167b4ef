"""Learning-rate transfer of any Flax model (``scaling.transfer``): the learning-rate × seed grid of
``scaling.studies.transfer`` at several widths, for a user's own linen or nnx model.

Tensor Programs V (Yang et al. 2022, §1 and Fig. 1): under μP the optimal learning rate hardly moves with width,
under SP it shrinks. For each width every (learning rate, seed) member trains in one vmapped program
(``scaling.user_model.training_program``: one compilation per width whatever the size of the grid); member i =
(learning rate i // S, seed i % S) as in ``scaling.studies.grid.lr_grid``, every member on the same batches. The
final loss of a member is the mean training loss of its last steps; the optimum per width (grid argmin and
parabola vertex), its spread over the widths, the learning-rate sensitivity, the figure and the tables are those of
the built-in study (``scaling.studies.optimum``, ``scaling.studies.transfer_report``): the optimum transfers when
it moves at most ``TRANSFER_OCTAVES`` over the widths.
"""

from __future__ import annotations

import dataclasses
import io
import math
import pathlib
from typing import Any, Sequence

import jax
import numpy as np

from scaling import report
from scaling import user_model
from scaling import width_parametrization
from scaling.studies import grid as grid_lib
from scaling.studies import optimum as optimum_lib
from scaling.studies import transfer_report
from scaling.validation import ConfigError
from scaling.validation import ConfigTypeError

KEYS = ("parametrization", "width")


@dataclasses.dataclass(frozen=True)
class TransferResult:
  """What ``transfer`` measured (combine several, e.g. SP and μP, with ``combine``).

  Attributes:
    rows: one per (parametrization, width, learning rate): ``scaling.studies.optimum.summarize_grid``'s fields
      (final_loss mean over seeds, None when a seed diverged; final_loss_seeds; initial_loss ...), steps,
      average_last.
    optimum: one per (parametrization, width): ``find_optimum``'s fields (log2_lr, log2_lr_interp, final_loss,
      at_edge, num_diverged) and the learning-rate sensitivity (``sensitivity_rows``).
    log2_lrs: the learning rates tried (base-2 logarithms).
    steps: training steps per run.
    num_seeds: seeds per learning rate.
  """

  rows: list[dict[str, Any]]
  optimum: list[dict[str, Any]]
  log2_lrs: tuple[float, ...]
  steps: int
  num_seeds: int

  def moved(self, parametrization: str | None = None) -> float | None:
    """How far the optimal log2 learning rate moves over the widths (max − min, octaves; None if one diverged)."""
    names = {o["parametrization"] for o in self.optimum}
    if parametrization is None and len(names) != 1:
      raise ConfigError(f"name one parametrization of {sorted(names)}")
    return optimum_lib.spread([optimum_lib.optimum_log2_lr(o) for o in self.optimum
                               if parametrization in (None, o["parametrization"])])

  def transfers(self, parametrization: str | None = None) -> bool:
    """Whether the optimum moves at most ``TRANSFER_OCTAVES`` over the widths."""
    moved = self.moved(parametrization)
    return moved is not None and moved <= transfer_report.TRANSFER_OCTAVES

  def optimum_markdown(self, heading: str) -> str:
    """``heading``, the optimum per width as a Markdown table and per parametrization how far it moves."""
    return transfer_report.optimum_markdown(self.optimum, heading, keys=KEYS)

  def loss_table(self) -> str:
    """Final loss per (parametrization, width) and learning rate as plain text ('div' = a seed diverged)."""
    return transfer_report.loss_grid_table(self.rows, self.log2_lrs, keys=KEYS)

  def write_figure(self, path: str | pathlib.Path) -> None:
    """Final loss against log2 learning rate, one curve per width, one panel per parametrization."""
    transfer_report.write_figure(path, self.rows, self.optimum, keys=KEYS)


def combine(*results: TransferResult) -> TransferResult:
  """Several results (e.g. SP and μP of one model, on the same grid) as one."""
  if not results:
    raise ConfigError("combine needs at least one TransferResult")
  if len({(r.log2_lrs, r.steps, r.num_seeds) for r in results}) != 1:
    raise ConfigError("results must share the learning rates, steps and seeds")
  first = results[0]
  return TransferResult([row for r in results for row in r.rows], [o for r in results for o in r.optimum],
                        first.log2_lrs, first.steps, first.num_seeds)


def transfer(model: user_model.ModelFactory, loss_fn: user_model.LossFn, batches: Any,
             optimizer: user_model.OptimizerFactory | None = None, *, schemes: Sequence[Any] = ("sp", "mup"),
             widths: Sequence[int] = (64, 128, 256, 512), base_width: int | None = None,
             log2_lrs: Sequence[float] = tuple(float(x) for x in range(-12, -3)), steps: int = 200,
             seeds: Sequence[int] = (0,), init: str | user_model.InitFn | None = None, name: str = "model",
             average_last: int | None = None, progress: bool = True, **options: Any) -> TransferResult:
  """The learning-rate × width (× seed) grid of any model under each scheme; one vmapped program per width.

  Tensor Programs V (Yang et al. 2022), §1 and Fig. 1. One call infers the roles, parametrizes each width under
  each scheme (``scaling.WidthParametrization``) and trains every grid::

    result = scaling.transfer(model, loss_fn, batches, schemes=("sp", "mup"), widths=(64, 128, 256, 512))

  With an ``optimizer`` factory instead, the model is trained as given under it (one run named ``name``; ``init``
  may then be an ``init(width, params, key)`` function).

  Args:
    model: ``model(width) -> flax.linen.Module | scaling.PureModel`` or ``model(width, rngs) -> flax.nnx.Module``.
    loss_fn: ``loss_fn(model, batch) -> scalar``.
    batches: a function ``batches(step) -> batch``, an iterator of batches, or one fixed batch.
    optimizer: None (each scheme's optimizer), or ``optimizer(width, params, learning_rate) ->
      optax.GradientTransformation`` (``learning_rate`` is traced: one program serves every learning rate).
    schemes: parametrizations compared (names, ``Parametrization`` objects or ``WidthParametrization`` s).
    widths: the widths (at least two).
    base_width: the schemes' base width (default: the smallest width).
    log2_lrs: base-2 logarithms of the learning rates tried.
    steps: training steps per run.
    seeds: initialization seeds per learning rate.
    init: "base" (None), "paper" or "rescale"; with ``optimizer``, an optional ``init(width, params, key)`` function.
    name: the run's name with ``optimizer``.
    average_last: final loss = mean training loss of the last this many steps (default steps // 10, at least 1).
    progress: show progress (``scaling.report.Progress``) on stderr.
    **options: further options of ``scaling.WidthParametrization`` (overrides, tied_embedding, forward, the
      optimizer name as ``optimizer_name`` and its options).

  Returns:
    A ``TransferResult`` of every scheme.
  """
  widths = user_model.check_widths(widths)
  if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
    raise ConfigError(f"steps must be a positive int, got {steps!r}")
  log2_lrs = tuple(dict.fromkeys(float(x) for x in log2_lrs))
  if not log2_lrs or not all(math.isfinite(x) and -125 <= x <= 63 for x in log2_lrs):
    raise ConfigError(f"log2_lrs must be finite base-2 logarithms in [-125, 63], got {log2_lrs!r}")
  seeds = [int(s) for s in seeds]
  if not seeds:
    raise ConfigError("seeds must hold at least one seed")
  last = max(1, steps // 10) if average_last is None else average_last
  if isinstance(last, bool) or not isinstance(last, int) or not 1 <= last <= steps:
    raise ConfigError(f"average_last must be an int in [1, steps={steps}], got {average_last!r}")
  stacked = user_model.materialize_batches(batches, steps)
  example = jax.tree.map(lambda x: x[0], stacked)
  if optimizer is not None:
    if init is not None and not callable(init):
      raise ConfigTypeError(f"with an optimizer factory, init must be a function init(width, params, key) -> params "
                            f"or None, got {init!r}")
    user_model.model_kind(model)
    runs = [(name, lambda width: user_model.functional_model(model, loss_fn, width, example, init=init), optimizer)]
  else:
    if "optimizer_name" in options:
      options["optimizer"] = options.pop("optimizer_name")
    runs = [(wp.parametrization.name, wp.model_at, wp.optimizer) for wp in width_parametrization.for_schemes(
        model, loss_fn, example, schemes, widths=widths, base_width=base_width, init=init or "base", **options)]
  lrs, member_seeds = grid_lib.lr_grid(log2_lrs, seeds)
  rows = []
  for run_name, model_at, opt in runs:
    with report.Progress(len(widths), f"transfer {run_name}", stream=None if progress else io.StringIO()) as bar:
      for width in widths:
        run = user_model.training_program(model_at(width), opt, record_outputs=False)
        losses = np.asarray(jax.device_get(run(member_seeds, lrs, stacked)["loss"])).T  # [steps, L·S]
        point = {"parametrization": run_name, "width": width}
        new = optimum_lib.summarize_grid(losses, log2_lrs, len(seeds), last)
        rows += [{**point, **r, "steps": steps, "average_last": last} for r in new]
        best = optimum_lib.find_optimum(new, keys=())[0]
        bar.update(f"width {width}: " + ("all diverged" if best["log2_lr"] is None else
                                         f"best log2 lr {best['log2_lr']:g}, loss {best['final_loss']:.3f}"))
  optimum = optimum_lib.find_optimum(rows, keys=KEYS)
  for o, sens in zip(optimum, optimum_lib.sensitivity_rows(rows, KEYS)):
    o.update({k: v for k, v in sens.items() if k not in KEYS})
  return TransferResult(rows, optimum, log2_lrs, steps, len(seeds))


def heading(result: TransferResult, data: str, optimizer: str, widths: Sequence[int] | None = None) -> str:
  """The heading of a result's optimum table: what was trained, on what, and the final-loss definition."""
  widths = widths or sorted({o["width"] for o in result.optimum})
  lrs = result.log2_lrs
  last = result.rows[0]["average_last"] if result.rows else 1
  return (f"Optimal log2 lr per width (widths {', '.join(map(str, widths))}; {len(lrs)} learning rates "
          f"2^{lrs[0]:g} .. 2^{lrs[-1]:g}, {result.num_seeds} seeds, {result.steps} {optimizer} steps on {data}; "
          f"final loss = mean training loss of the last {last} steps):")

