"""μTransfer of the learning rate: a grid of learning rates × seeds per width, trained in one vmapped program.

Tensor Programs V (Yang et al. 2022, "Tuning Large Neural Networks via
Zero-Shot Hyperparameter Transfer", §1 and Fig. 1) shows that under μP the
optimal learning rate of a Transformer hardly moves as the width grows, so it
can be tuned on a small proxy model, whereas under SP it shrinks with width
(roughly ∝ 1/width for Adam). This module measures that: for each
parametrization and width it trains every (learning rate, seed) pair of a
grid and records the final training loss.

Training a grid. ``scaling.train.run_training`` trains every (learning rate, seed)
member of a width in one vmapped program (the learning rate lives in the
optimizer state), so each width compiles one init and one step whatever the
size of the grid. Member i = (learning rate i // S, seed i % S) is initialized
with ``PRNGKey(seed)`` and trained on ``dataset.batch(t, seed)`` at step t,
exactly as a single run would be; all learning rates share the same seeds
(common random numbers), so differences between learning rates are not
sampling noise of the data or init.

Divergence: a member whose loss is ever non-finite has diverged; its final
loss is None (reported as null, treated as +inf by ``find_optimum``), and a
learning rate at which any seed diverged has no mean loss.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import time
from typing import Any, Callable, Sequence

import numpy as np

from scaling import data as data_lib
from scaling import distributed
from scaling import model as model_lib
from scaling import optim
from scaling import parametrization as param_lib
from scaling import plotting
from scaling import report
from scaling import resources
from scaling import results
from scaling import train as train_lib
from scaling.config import option
from scaling.config import Options
from scaling.config import Seeds

OPTIMUM_COLUMNS = ("parametrization", "width", "log2_lr", "final_loss", "log2_lr_interp", "at_edge", "num_diverged")


@dataclasses.dataclass(frozen=True)
class WidthGrid(Options):
  """The parametrizations and widths a width study compares."""

  parametrizations: tuple[str, ...] = option(("sp", "mup"), "Parametrizations to compare (panels of the figure).",
                                             choices=param_lib.available_parametrizations)
  widths: tuple[int, ...] = option((32, 64, 128, 256), "Model widths d_model.", lower=1)

  def __post_init__(self):
    object.__setattr__(self, "parametrizations", tuple(dict.fromkeys(self.parametrizations)))
    object.__setattr__(self, "widths", tuple(dict.fromkeys(self.widths)))
    super().__post_init__()

  def check(self, family: model_lib.ModelFamily, dataset: data_lib.Dataset) -> None:
    """ValueError unless every (parametrization, width) of the grid gives a valid model of ``family``."""
    try:
      family.check(self.parametrizations, self.widths, vocab_size=dataset.vocab_size, max_len=dataset.seq_len)
    except ValueError as e:
      raise ValueError(f"--widths: {e}") from None


def lr_grid(log2_lrs: Sequence[float], seeds: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
  """The members of a grid: (learning rates float32 [L·S], seeds int32 [L·S]); member i = (lr i // S, seed i % S)."""
  log2_lrs = np.asarray(log2_lrs, np.float64)
  seeds = np.asarray(seeds, np.int32)
  lrs = np.repeat(np.exp2(log2_lrs), len(seeds)).astype(np.float32)
  return lrs, np.tile(seeds, len(log2_lrs))


# ----------------------------------------------------------------------------
# The transfer experiment.


@dataclasses.dataclass(frozen=True)
class TransferConfig(Options):
  """A learning-rate sweep at several widths (the options of ``experiments.transfer``)."""

  HIDDEN = ("learning_rate",)

  grid: WidthGrid = option(WidthGrid(), "Parametrizations and widths.")
  log2_lrs: tuple[float, ...] = option(tuple(float(x) for x in range(-14, -3)),
                                       "Base-2 logarithms of the learning rates tried.", lower=-125.0, upper=63.0)
  average_last: int | None = option(None, "Final loss = mean training loss of the last this many steps (default: "
                                    "steps // 10, at least 1).", lower=1)
  seeds: Seeds = option(Seeds(), "Seeds per learning rate.")
  data: data_lib.DataConfig = option(data_lib.DataConfig(), "Training data.")
  model: model_lib.ModelFamily = option(model_lib.ModelFamily(), "The models.")
  optim: optim.OptimizerConfig = option(optim.OptimizerConfig(steps=200, schedule="cosine", end_factor=0.1),
                                        "Optimizer and schedule.")
  output: results.OutputConfig = option(results.OutputConfig("runs/transfer"), "Output.")
  cluster: distributed.DistributedConfig = option(distributed.DistributedConfig(), "Several processes.")

  def __post_init__(self):
    object.__setattr__(self, "log2_lrs", tuple(dict.fromkeys(float(x) for x in self.log2_lrs)))
    super().__post_init__()

  def validate(self):
    if self.average_last is not None and self.average_last > self.optim.steps:
      raise ValueError(f"--average_last={self.average_last} exceeds --steps={self.optim.steps}")

  @property
  def family(self) -> model_lib.ModelFamily:
    """The models, with the base width defaulting to the smallest width."""
    return self.model.with_base_width(self.grid.widths)

  @property
  def members(self) -> tuple[int, tuple[str, ...]]:
    """(models vmapped per width, the options that set it): learning rates x seeds."""
    return len(self.log2_lrs) * self.seeds.num_seeds, ("log2_lrs", "num_seeds")

  @property
  def last(self) -> int:
    """The number of final steps averaged."""
    return self.average_last if self.average_last is not None else max(1, self.optim.steps // 10)


def prepare(config: Any, out_dir: pathlib.Path, outputs: Sequence[str] = ()) -> data_lib.Dataset:
  """For a width study (``data``, ``seeds``, ``grid``, ``family``): the dataset, every model checked, then
  the output folder opened (``results.open_run``: resumed, or refused if made with other options, unless
  --overwrite; ``outputs`` are the study's files) and config.json written; bad input fails before anything is
  written."""
  dataset = config.data.make(config.seeds.seed)
  config.grid.check(config.family, dataset)
  resources.check(memory_estimate(config, dataset), resources.option_values(config))
  results.open_run(out_dir, config, overwrite=config.output.overwrite, outputs=outputs,
                   extra={"dataset": data_lib.describe(dataset)})
  results.write_json(out_dir / "config.json", {"config": dataclasses.asdict(config),
                                               "dataset": data_lib.describe(dataset)})
  return dataset


def memory_estimate(config: Any, dataset: data_lib.Dataset) -> resources.Estimate:
  """For a width study: the largest (parametrization, width) program, its ``config.members`` models vmapped."""
  members, member_flags = config.members
  family = config.family
  models = [(f"at width {w} ({p})", family.model_config(p, w, vocab_size=dataset.vocab_size, max_len=dataset.seq_len))
            for p in config.grid.parametrizations for w in config.grid.widths]
  return resources.training_estimate(models, optimizer=config.optim.optimizer, momentum=config.optim.momentum,
                                     batch_size=dataset.batch_size, seq_len=dataset.seq_len, members=members,
                                     member_flags=member_flags, data_bytes=resources.dataset_bytes(dataset))


def _or_none(x: float) -> float | None:
  """x if finite, else None."""
  return float(x) if math.isfinite(x) else None


def summarize_grid(losses: np.ndarray, log2_lrs: Sequence[float], num_seeds: int, last: int) -> list[dict[str, Any]]:
  """Final losses of a grid from its loss history.

  Args:
    losses: [steps, L·S] training losses, member i = (lr i // S, seed i % S).
    log2_lrs: the L log2 learning rates.
    num_seeds: S.
    last: the final loss of a member is the mean of its last ``last`` losses.

  Returns:
    One row per learning rate: log2_lr, learning_rate, final_loss (mean over
    seeds; None if any seed diverged), final_loss_std, final_loss_seeds (None
    for a diverged seed), diverged_seeds (count), initial_loss (mean step-0 loss).
  """
  losses = np.asarray(losses, np.float64)
  steps, m = losses.shape
  if m != len(log2_lrs) * num_seeds:
    raise ValueError(f"losses have {m} members, expected {len(log2_lrs)} x {num_seeds}")
  if not 1 <= last <= steps:
    raise ValueError(f"last must be in [1, {steps}], got {last}")
  diverged = ~np.all(np.isfinite(losses), axis=0)
  final = np.where(diverged, np.nan, np.mean(losses[-last:], axis=0)).reshape(len(log2_lrs), num_seeds)
  initial = losses[0].reshape(len(log2_lrs), num_seeds)
  diverged = diverged.reshape(len(log2_lrs), num_seeds)
  rows = []
  for i, x in enumerate(log2_lrs):
    ok = not diverged[i].any()
    rows.append({
        "log2_lr": float(x),
        "learning_rate": float(2.0**x),
        "final_loss": float(np.mean(final[i])) if ok else None,
        "final_loss_std": float(np.std(final[i])) if ok else None,
        "final_loss_seeds": [_or_none(v) for v in final[i]],
        "diverged_seeds": int(diverged[i].sum()),
        "initial_loss": _or_none(float(np.nanmean(initial[i])) if np.isfinite(initial[i]).any() else float("nan")),
    })
  return rows


def parabola_vertex(x: Sequence[float], y: Sequence[float]) -> float | None:
  """The x of the vertex of the parabola through three points, or None unless it opens upwards."""
  (x0, x1, x2), (y0, y1, y2) = x, y
  denom = (x0 - x1) * (x0 - x2) * (x1 - x2)
  if denom == 0:
    return None
  a = (x2 * (y1 - y0) + x1 * (y0 - y2) + x0 * (y2 - y1)) / denom
  b = (x2**2 * (y0 - y1) + x1**2 * (y2 - y0) + x0**2 * (y1 - y2)) / denom
  if not a > 0:
    return None
  return float(-b / (2 * a))


def find_optimum(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
  """The best learning rate of each (parametrization, width).

  Args:
    rows: rows with parametrization, width, log2_lr and final_loss (None or
      non-finite = diverged = +inf).

  Returns:
    One row per (parametrization, width), in order of first appearance:
    ``log2_lr`` (the grid argmin; None if every run diverged), ``final_loss``
    there, ``at_edge`` (the argmin is the smallest or largest learning rate
    tried, so the optimum may lie outside the grid), ``log2_lr_interp`` (vertex
    of the parabola through the argmin and its two neighbours in log2 LR, when
    both are finite and the parabola opens upwards; else None) and
    ``num_diverged`` (learning rates with a diverged seed).
  """
  groups: dict[tuple[str, int], list[tuple[float, float]]] = {}
  for r in rows:
    loss = r["final_loss"]
    loss = float("inf") if loss is None or not math.isfinite(loss) else float(loss)
    groups.setdefault((r["parametrization"], r["width"]), []).append((float(r["log2_lr"]), loss))
  out = []
  for (name, width), points in groups.items():
    points.sort()
    xs = [x for x, _ in points]
    ys = [y for _, y in points]
    best = int(np.argmin(ys))
    row = {"parametrization": name, "width": width, "log2_lr": None, "final_loss": None, "at_edge": None,
           "log2_lr_interp": None, "num_diverged": sum(not math.isfinite(y) for y in ys)}
    if math.isfinite(ys[best]):
      row.update(log2_lr=xs[best], final_loss=ys[best], at_edge=best in (0, len(xs) - 1))
      if 0 < best < len(xs) - 1 and all(math.isfinite(v) for v in ys[best - 1:best + 2]):
        row["log2_lr_interp"] = parabola_vertex(xs[best - 1:best + 2], ys[best - 1:best + 2])
    out.append(row)
  return out


def run_width(config: TransferConfig, parametrization: str, width: int, dataset: Any) -> list[dict[str, Any]]:
  """Trains the whole learning-rate × seed grid of one (parametrization, width) and summarizes it.

  Returns:
    ``summarize_grid`` rows with parametrization, width and steps added.
  """
  model_config = config.family.model_config(parametrization, width, vocab_size=dataset.vocab_size,
                                            max_len=dataset.seq_len)
  lrs, seeds = lr_grid(config.log2_lrs, config.seeds.seeds)
  result = train_lib.run_training(model_config, config.optim, dataset, seed=seeds, learning_rates=lrs, record=("loss",),
                           stop_on_divergence=False)
  rows = summarize_grid(result.records["loss"], config.log2_lrs, config.seeds.num_seeds, config.last)
  return [{"parametrization": parametrization, "width": width, **r, "steps": config.optim.steps,
           "average_last": config.last} for r in rows]


def run_transfer(config: TransferConfig, dataset: Any, *,
                 on_width: Callable[[str, int, list[dict[str, Any]]], None] | None = None) -> list[dict[str, Any]]:
  """The learning-rate sweep at every parametrization and width.

  Args:
    config: the sweep.
    dataset: a ``scaling.data.Dataset``.
    on_width: called as ``on_width(parametrization, width, rows)`` when a width
      is done (to append results as they come).

  Returns:
    All ``run_width`` rows.
  """
  rows = []
  for name in config.grid.parametrizations:
    for width in config.grid.widths:
      new = run_width(config, name, width, dataset)
      rows += new
      if on_width is not None:
        on_width(name, width, new)
  return rows


def _y_range(rows) -> tuple[float, float] | None:
  """A shared loss range: from the best loss up to the loss at initialization (higher losses are clipped)."""
  losses = [r["final_loss"] for r in rows if r["final_loss"] is not None]
  if not losses:
    return None
  initial = sorted(r["initial_loss"] for r in rows if r["initial_loss"] is not None)
  lo, hi = min(losses), max(losses)
  if initial:
    hi = min(hi, initial[len(initial) // 2])
  pad = 0.05 * max(hi - lo, 1e-3)
  return lo - pad, hi + pad


def write_figure(path, rows, optimum_rows) -> None:
  """Final loss against log2 learning rate, one curve per width; parametrizations side by side, shared y range."""
  params = list(dict.fromkeys(r["parametrization"] for r in rows))
  fig, axes = plotting.grid_figure(1, len(params), width=4.6, height=3.6)
  ylim = _y_range(rows)
  for j, name in enumerate(params):
    ax = axes[0][j]
    series = {}
    for width in dict.fromkeys(r["width"] for r in rows if r["parametrization"] == name):
      points = sorted((r["log2_lr"], r["final_loss"]) for r in rows
                      if r["parametrization"] == name and r["width"] == width and r["final_loss"] is not None)
      if points:
        series[f"width {width}"] = ([x for x, _ in points], [y for _, y in points])
    plotting.line_plot(None, series, xlabel="log2 learning rate", ylabel="final training loss" if j == 0 else "",
                       title=name, ax=ax)
    for line, (label, _) in zip(ax.get_lines(), series.items()):
      width = int(label.split()[1])
      best = [o for o in optimum_rows if o["parametrization"] == name and o["width"] == width]
      if best and best[0]["log2_lr"] is not None:
        ax.plot([best[0]["log2_lr"]], [best[0]["final_loss"]], marker="*", markersize=11, color=line.get_color(),
                markeredgecolor="black", linestyle="none")
    if ylim is not None:
      ax.set_ylim(*ylim)
  plotting.save_figure(fig, path)


def loss_grid_table(rows, log2_lrs) -> str:
  """Final loss per (parametrization, width) and learning rate ('div' = a seed diverged)."""
  grid = {}
  for r in rows:
    row = grid.setdefault((r["parametrization"], r["width"]),
                          {"parametrization": r["parametrization"], "width": r["width"]})
    row[f"{r['log2_lr']:g}"] = "div" if r["final_loss"] is None else f"{r['final_loss']:.3f}"
  return report.table(list(grid.values()), ("parametrization", "width", *(f"{x:g}" for x in log2_lrs)))


OUTPUTS = ("results.jsonl", "optimum.jsonl", "transfer.png", "config.json", "timings.jsonl")
"""The files ``run`` writes into the output folder (besides run.json)."""


def group_key(row: dict[str, Any]) -> tuple[str, int]:
  """The group of a result row: (parametrization, width), one vmapped learning-rate x seed grid."""
  return row["parametrization"], row["width"]


def run(config: TransferConfig, out_dir: pathlib.Path) -> list[dict[str, Any]]:
  """The study as ``experiments.transfer`` runs it: trains, streams results, plots and prints; returns the optima.

  Each width's rows are appended whole to results.partial.jsonl when its grid is
  trained; rerun with the same options into the same folder, a killed run trains
  only the widths it has not finished. optimum.jsonl and the figure are made from
  the complete rows at the end; wall times go to timings.jsonl.
  """
  dataset = prepare(config, out_dir, OUTPUTS)
  members = len(config.log2_lrs) * config.seeds.num_seeds
  print(f"{len(config.grid.parametrizations)} parametrizations x {len(config.grid.widths)} widths; each width trains "
        f"{len(config.log2_lrs)} learning rates x {config.seeds.num_seeds} seeds = {members} runs vmapped, "
        f"{config.optim.steps} steps", flush=True)
  start = time.perf_counter()
  plan = [((name, width), len(config.log2_lrs)) for name in config.grid.parametrizations
          for width in config.grid.widths]
  stream = results.GroupedRows(out_dir / "results.jsonl", plan, group_key)
  missing = stream.missing()
  if len(missing) < len(plan):
    print(f"resuming: {len(plan) - len(missing)} of {len(plan)} widths already in {out_dir}", flush=True)
  with report.Progress(len(missing), "transfer") as progress:
    for name, width in missing:
      began = time.perf_counter()
      rows = stream.add((name, width), run_width(config, name, width, dataset))
      results.append_timing(out_dir, {"parametrization": name, "width": width,
                                      "seconds": time.perf_counter() - began})
      best = find_optimum(rows)[0]
      where = ("all diverged" if best["log2_lr"] is None
               else f"best log2 lr {best['log2_lr']:g}, loss {best['final_loss']:.3f}")
      progress.update(f"{name} width={width}: {where}")
  rows = stream.finish()
  optimum_rows = find_optimum(rows)
  results.write_jsonl(out_dir / "optimum.jsonl", optimum_rows)
  write_figure(out_dir / "transfer.png", rows, optimum_rows)
  print(f"final training loss (mean of the last {config.last} steps, mean over {config.seeds.num_seeds} seeds):")
  print(loss_grid_table(rows, config.log2_lrs))
  print("\noptimal learning rate per width:")
  print(report.table(optimum_rows, OPTIMUM_COLUMNS, floatfmt=".3f"))
  print(f"\n{len(rows)} rows in {time.perf_counter() - start:.1f}s; wrote results.jsonl, optimum.jsonl, "
        f"transfer.png and config.json to {out_dir}")
  return optimum_rows
