"""μTransfer of the learning rate: final loss against learning rate at several widths, SP beside μP.

  python -m experiments.transfer                                       # recall task, widths 32..256
  python -m experiments.transfer --task=text --text_file=tinyshakespeare.txt \\
      --widths=32,64,128,256 --log2_lrs=-14,-13,-12,-11,-10,-9,-8,-7,-6 --steps=300

For each parametrization and width, trains every (learning rate, seed) pair of
the grid in one vmapped program (the learning rate lives in the optimizer
state, so each width compiles once) and records the mean training loss of the
last steps (Tensor Programs V, Fig. 1). Diverged runs (a non-finite loss) get
a null loss and never win. Writes, into --out_dir, results.jsonl (one row per
parametrization, width and learning rate) and optimum.jsonl (the best learning
rate per parametrization and width), both appended as each width finishes, then
transfer.png and config.json; prints the loss grid and the optimum per width.
Under μP the optimum stays put as the width grows; under SP it moves to
smaller learning rates.
"""

from __future__ import annotations

import dataclasses
import time

from absl import flags

from experiments import common
from scaling import data as data_lib
from scaling import io
from scaling import optim
from scaling import parametrization as parametrization_lib
from scaling import plotting
from scaling import transfer as transfer_lib

_PARAMETRIZATIONS = common.define_enum_list("parametrizations", "sp,mup",
                                            parametrization_lib.available_parametrizations,
                                            "Parametrizations to compare (panels of the figure).")
_WIDTHS = common.define_int_list("widths", "32,64,128,256", "Model widths d_model.")
_LOG2_LRS = common.define_float_list("log2_lrs", "-14,-13,-12,-11,-10,-9,-8,-7,-6,-5,-4",
                                     "Base-2 logarithms of the learning rates tried.")
_NUM_SEEDS = flags.DEFINE_integer("num_seeds", 2, "Seeds per learning rate.", lower_bound=1)
_STEPS = flags.DEFINE_integer("steps", 200, "Training steps per run.", lower_bound=1)
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 16, "Sequences per batch.", lower_bound=1)
_SEQ_LEN = flags.DEFINE_integer("seq_len", 64, "Sequence length T.", lower_bound=1)
_DEPTH = flags.DEFINE_integer("depth", 2, "Transformer blocks.", lower_bound=1)
_HEAD_DIM = flags.DEFINE_integer("head_dim", None, "Fixed head dim; the number of heads is width / head_dim "
                                 "(exclusive with --num_heads).", lower_bound=1)
_NUM_HEADS = flags.DEFINE_integer("num_heads", None, "Fixed number of heads; the head dim is width / num_heads "
                                  f"(default when --head_dim is not given: {transfer_lib.DEFAULT_NUM_HEADS}).",
                                  lower_bound=1)
_BASE_WIDTH = flags.DEFINE_integer("base_width", None, "Width at which muP equals SP (default: the smallest "
                                   "width).", lower_bound=1)
_OPTIMIZER = flags.DEFINE_enum("optimizer", "adam", list(optim.OPTIMIZERS), "Optimizer.")
_SCHEDULE = flags.DEFINE_enum("schedule", "cosine", list(transfer_lib.SCHEDULES),
                              "Learning-rate schedule: 'cosine' (linear warmup, cosine decay to --end_factor) or "
                              "'constant'.")
_WARMUP_STEPS = flags.DEFINE_integer("warmup_steps", None, "Warmup steps of the cosine schedule (default: "
                                     "steps // 10).", lower_bound=0)
_END_FACTOR = common.define_finite_float("end_factor", 0.1, "Final learning rate of the cosine schedule, as a "
                                         "fraction of the peak.", lower_bound=0.0)
_AVERAGE_LAST = flags.DEFINE_integer("average_last", None, "Final loss = mean training loss of the last this many "
                                     "steps (default: steps // 10, at least 1).", lower_bound=1)
_TASK = flags.DEFINE_enum("task", "recall", list(data_lib.DATASET_NAMES), "Training data ('text' needs "
                          "--text_file).")
_TEXT_FILE = flags.DEFINE_string("text_file", None, "UTF-8 text file for --task=text (character level).")
_SEED = flags.DEFINE_integer("seed", 0, "First seed (seeds are seed .. seed + num_seeds - 1).", lower_bound=0)
_ZERO_QUERY = flags.DEFINE_boolean("zero_query", False, "Zero-initialize W_q (muP option).")
_ZERO_READOUT = flags.DEFINE_boolean("zero_readout", False, "Zero-initialize the readout (muP option).")
_OUT_DIR = flags.DEFINE_string("out_dir", "runs/transfer", "Output directory.")

OPTIMUM_COLUMNS = ("parametrization", "width", "log2_lr", "final_loss", "log2_lr_interp", "at_edge", "num_diverged")


def _config_from_flags():
  """Validates every flag (nothing is written yet) and returns (TransferConfig, dataset)."""
  if _NUM_HEADS.value is not None and _HEAD_DIM.value is not None:
    common.fail("--num_heads and --head_dim: give at most one (the other follows from the width)")
  widths = tuple(dict.fromkeys(_WIDTHS.value))
  parametrizations = tuple(dict.fromkeys(_PARAMETRIZATIONS.value))
  steps = _STEPS.value
  for x in _LOG2_LRS.value:
    if not -126 < x < 64:
      common.fail(f"--log2_lrs: {x:g} is out of range; the learning rate 2**x must be a positive float32 "
                  "(-126 < x < 64)")
  if _AVERAGE_LAST.value is not None and _AVERAGE_LAST.value > steps:
    common.fail(f"--average_last={_AVERAGE_LAST.value} exceeds --steps={steps}")
  warmup = _WARMUP_STEPS.value if _WARMUP_STEPS.value is not None else steps // 10
  if _SCHEDULE.value == "cosine" and warmup >= steps:
    common.fail(f"--warmup_steps={warmup} must be smaller than --steps={steps}")
  if _SCHEDULE.value == "constant" and _WARMUP_STEPS.value:
    common.fail("--warmup_steps needs --schedule=cosine")
  family = transfer_lib.WidthFamily(depth=_DEPTH.value, num_heads=_NUM_HEADS.value, head_dim=_HEAD_DIM.value,
                                    base_width=_BASE_WIDTH.value, zero_query=_ZERO_QUERY.value,
                                    zero_readout=_ZERO_READOUT.value).with_base_width(widths)
  dataset = common.make_dataset_or_fail(_TASK.value, _TEXT_FILE.value, seq_len=_SEQ_LEN.value,
                                        batch_size=_BATCH_SIZE.value, seed=_SEED.value)
  common.check_width_family(family, parametrizations, widths, dataset)
  try:
    spec = transfer_lib.OptimizerSpec(
        _OPTIMIZER.value, schedule=_SCHEDULE.value, warmup_steps=warmup if _SCHEDULE.value == "cosine" else 0,
        total_steps=steps if _SCHEDULE.value == "cosine" else None,
        end_factor=_END_FACTOR.value if _SCHEDULE.value == "cosine" else 0.0)
    config = transfer_lib.TransferConfig(parametrizations=parametrizations, widths=widths,
                                         log2_lrs=tuple(_LOG2_LRS.value), num_seeds=_NUM_SEEDS.value,
                                         steps=steps, family=family, optimizer=spec, seed=_SEED.value,
                                         average_last=_AVERAGE_LAST.value)
  except ValueError as e:
    common.fail(str(e))
  return config, dataset


def _y_range(rows) -> tuple[float, float] | None:
  """A shared loss range: from the best loss up to the loss at initialization (higher losses are clipped)."""
  losses = [r["final_loss"] for r in rows if r["final_loss"] is not None]
  if not losses:
    return None
  initial = sorted(r["initial_loss"] for r in rows if r["initial_loss"] is not None)
  lo = min(losses)
  hi = max(losses)
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
  table = {}
  for r in rows:
    row = table.setdefault((r["parametrization"], r["width"]),
                           {"parametrization": r["parametrization"], "width": r["width"]})
    row[f"{r['log2_lr']:g}"] = "div" if r["final_loss"] is None else f"{r['final_loss']:.3f}"
  return common.format_table(list(table.values()), ("parametrization", "width", *(f"{x:g}" for x in log2_lrs)))


def main(argv):
  common.reject_extra_args(argv)
  config, dataset = _config_from_flags()
  out_dir = common.prepare_out_dir(_OUT_DIR.value)
  io.write_json(out_dir / "config.json", {"flags": common.flag_values(__name__),
                                          "config": dataclasses.asdict(config),
                                          "dataset": data_lib.describe(dataset)})
  results, optimum = out_dir / "results.jsonl", out_dir / "optimum.jsonl"
  results.unlink(missing_ok=True)
  optimum.unlink(missing_ok=True)
  progress = common.Progress(len(config.parametrizations) * len(config.widths), "transfer")
  start = time.perf_counter()
  optimum_rows = []

  def on_width(name, width, rows):
    for r in rows:
      io.append_jsonl(results, r)
    best = transfer_lib.find_optimum(rows)[0]
    io.append_jsonl(optimum, best)
    optimum_rows.append(best)
    where = "all diverged" if best["log2_lr"] is None else f"best log2 lr {best['log2_lr']:g}, " \
        f"loss {best['final_loss']:.3f}"
    progress.update(f"{name} width={width}: {where}")

  members = len(config.log2_lrs) * config.num_seeds
  print(f"{len(config.parametrizations)} parametrizations x {len(config.widths)} widths; each width trains "
        f"{len(config.log2_lrs)} learning rates x {config.num_seeds} seeds = {members} runs vmapped, "
        f"{config.steps} steps", flush=True)
  rows = transfer_lib.run_transfer(config, dataset, on_width=on_width)
  write_figure(out_dir / "transfer.png", rows, optimum_rows)
  print(f"final training loss (mean of the last {config.last} steps, mean over {config.num_seeds} seeds):")
  print(loss_grid_table(rows, config.log2_lrs))
  print("\noptimal learning rate per width:")
  print(common.format_table(optimum_rows, OPTIMUM_COLUMNS, floatfmt=".3f"))
  print(f"\n{len(rows)} rows in {time.perf_counter() - start:.1f}s; wrote results.jsonl, optimum.jsonl, "
        f"transfer.png and config.json to {out_dir}")


if __name__ == "__main__":
  common.run(main)
