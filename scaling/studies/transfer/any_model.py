"""The learning-rate transfer of any model: ``transfer`` (``scaling.transfer``).

``transfer(model, loss_fn, batches, schemes=("sp", "mup"), widths=...)`` takes a factory of the width, made each
scheme at each width by ``scaling.WidthParametrization``; each width's learning-rate × seed grid is trained by the
same ``scaling.training.loop.run.run_training`` as the built-in model (a ``scaling.training.loop.programs.FunctionalProgram``),
one program per width, resumable in ``out_dir``; the optimum per width, its spread, the sensitivity, figure and
tables as for the built-in model (``scaling.studies.grid.optimum``, ``scaling.studies.transfer.report``).
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
from typing import Any, Sequence

from scaling.training.optimizer import OptimizerConfig
from scaling.training.loop import run as loop_lib
from scaling.training.loop import programs as programs_lib
from scaling.mup import user_model
from scaling.mup import width_family
from scaling.studies.grid.points import lr_grid
from scaling.studies.grid import run as grid_run
from scaling.studies.grid.optimum import find_optimum
from scaling.studies.grid.optimum import optimum_log2_lr
from scaling.studies.grid.optimum import sensitivity_rows
from scaling.studies.grid.optimum import spread
from scaling.studies.grid.optimum import summarize_grid
from scaling.studies.transfer.report import TRANSFER_OCTAVES
from scaling.studies.transfer.report import loss_grid_table
from scaling.studies.transfer.report import optimum_markdown
from scaling.studies.transfer.report import write_figure
from scaling.base.validation import ConfigError


KEYS = ("parametrization", "width")


@dataclasses.dataclass(frozen=True)
class TransferResult:
  """What ``transfer`` measured (combine several, e.g. SP and μP, with ``combine``).

  Attributes:
    rows: one per (parametrization, width, learning rate): ``scaling.studies.grid.optimum.summarize_grid``'s fields
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
    return spread([optimum_log2_lr(o) for o in self.optimum
                               if parametrization in (None, o["parametrization"])])

  def transfers(self, parametrization: str | None = None) -> bool:
    """Whether the optimum moves at most ``TRANSFER_OCTAVES`` over the widths."""
    moved = self.moved(parametrization)
    return moved is not None and moved <= TRANSFER_OCTAVES

  def optimum_markdown(self, heading: str) -> str:
    """``heading``, the optimum per width as a Markdown table and per parametrization how far it moves."""
    return optimum_markdown(self.optimum, heading, keys=KEYS)

  def loss_table(self) -> str:
    """Final loss per (parametrization, width) and learning rate as plain text ('div' = a seed diverged)."""
    return loss_grid_table(self.rows, self.log2_lrs, keys=KEYS)

  def write_figure(self, path: str | pathlib.Path) -> None:
    """Final loss against log2 learning rate, one curve per width, one panel per parametrization."""
    write_figure(path, self.rows, self.optimum, keys=KEYS)


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
             average_last: int | None = None, progress: bool = True, out_dir: str | pathlib.Path | None = None,
             **options: Any) -> TransferResult:
  """The learning-rate × width (× seed) grid of any model under each scheme; one vmapped program per width.

  Tensor Programs V (Yang et al. 2022), §1 and Fig. 1. One call infers the roles, parametrizes each width under
  each scheme (``scaling.WidthParametrization``) and trains every grid, each width's (learning rate, seed) members
  vmapped in one program by ``scaling.training.loop.run.run_training`` (as the built-in model's grids)::

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
    widths: the widths (at least two, increasing).
    base_width: the schemes' base width (default: the smallest width).
    log2_lrs: base-2 logarithms of the learning rates tried.
    steps: training steps per run.
    seeds: initialization seeds per learning rate.
    init: "base" (None), "paper" or "rescale"; with ``optimizer``, an optional ``init(width, params, key)`` function.
    name: the run's name with ``optimizer``.
    average_last: final loss = mean training loss of the last this many steps (default steps // 10, at least 1).
    progress: show progress (``scaling.runs.report.Progress``) on stderr.
    out_dir: optional folder: each (scheme, width)'s rows are appended to ``results.jsonl`` when its grid is
      trained, and a rerun with the same options into it trains only what a killed run had not finished.
    **options: further options of ``scaling.WidthParametrization`` (overrides, tied_embedding, forward, the
      optimizer name as ``optimizer_name`` and its options).

  Returns:
    A ``TransferResult`` of every scheme.

  Raises:
    ConfigError: (a ValueError; ``ConfigTypeError`` also a TypeError) one line naming the argument, before anything
      is trained: a factory that raises, builds different parameters at different widths or none that grows; a
      loss that raises on the batch or returns no floating scalar; batches that differ in structure; widths that
      are not increasing or repeat; an optimizer factory of the wrong signature or result
      (``scaling.mup.width_family.runs``). These compile nothing; an init that draws NaN or a loss that is not
      finite at initialization is found from the model's init and loss at the smallest width, computed once.
  """
  widths = user_model.check_widths(widths)
  if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
    raise ConfigError(f"steps must be a positive int, got {steps!r}")
  log2_lrs = tuple(dict.fromkeys(float(x) for x in log2_lrs))
  if not log2_lrs or not all(math.isfinite(x) and -125 <= x <= 63 for x in log2_lrs):
    raise ConfigError(f"log2_lrs must be finite base-2 logarithms in [-125, 63], got {log2_lrs!r}")
  seeds = list(user_model.check_seeds(seeds))
  last = max(1, steps // 10) if average_last is None else average_last
  if isinstance(last, bool) or not isinstance(last, int) or not 1 <= last <= steps:
    raise ConfigError(f"average_last must be an int in [1, steps={steps}], got {average_last!r}")
  batches = user_model.Batches.of(batches, steps)
  runs = width_family.runs(model, loss_fn, batches.example, optimizer=optimizer, init=init, name=name,
                                    schemes=schemes, widths=widths, base_width=base_width, **options)
  rows = _train_grids(runs, widths, log2_lrs, seeds, steps, last, batches, progress, out_dir)
  optimum = find_optimum(rows, keys=KEYS)
  for o, sens in zip(optimum, sensitivity_rows(rows, KEYS)):
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

def _train_grids(runs: Sequence[width_family.Run], widths: Sequence[int], log2_lrs: tuple[float, ...],
                 seeds: Sequence[int], steps: int, last: int, batches: user_model.Batches, progress: bool,
                 out_dir: str | pathlib.Path | None) -> list[dict[str, Any]]:
  """The ``summarize_grid`` rows of every (name, model_at(width), optimizer factory) run at every width."""
  by_name = {run.name: (run.model_at, run.optimizer) for run in runs}
  if len(by_name) != len(runs):
    raise ConfigError(f"the schemes must have distinct names, got {[run.name for run in runs]}")
  lrs, member_seeds = lr_grid(log2_lrs, seeds)
  opt = OptimizerConfig(steps=steps)

  def compute(point):
    model_at, optimizer = by_name[point["parametrization"]]
    program = programs_lib.FunctionalProgram(model_at(point["width"]), optimizer)
    result = loop_lib.run_training(program, opt, batches, loop_lib.Runs(seed=member_seeds, learning_rates=lrs),
                                   loop_lib.RunOptions(record=("loss",), stop_on_divergence=False))
    rows = summarize_grid(result.records["loss"], log2_lrs, len(seeds), last)
    return [{**point, **r, "steps": steps, "average_last": last} for r in rows]

  def describe(rows):
    best = find_optimum(rows, keys=())[0]
    return ("all diverged" if best["log2_lr"] is None else
            f"best log2 lr {best['log2_lr']:g}, loss {best['final_loss']:.3f}")

  points = [{"parametrization": run.name, "width": w} for run in runs for w in widths]
  return grid_run.run_rows(points, compute, "transfer", out_dir=out_dir, progress=progress, describe=describe,
                           count=lambda point: len(log2_lrs),
                           options={"study": "transfer", "schemes": list(by_name), "widths": list(widths),
                                    "log2_lrs": list(log2_lrs), "seeds": list(seeds), "steps": steps,
                                    "average_last": last})
