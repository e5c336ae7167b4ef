"""The μP coordinate check: RMS of each layer's output against width over the first training steps.

  python -m experiments.coord_check                                   # sp and mup, widths 64..1024, 4 steps
  python -m experiments.coord_check --parametrizations=sp,mup,umup --widths=32,64,128 --steps=8
  python -m experiments.coord_check --task=text --text_file=data.txt --optimizer=sgd --learning_rate=0.1

For each parametrization and width, trains --num_seeds models (vmapped) for
--steps steps on one fixed batch and records the RMS of the embedding output,
each block's attention logits, attention output and MLP output, and the
readout logits at steps 0..k (as microsoft/mup's get_coord_data; Tensor
Programs V §D.1). Writes results.jsonl (one row per parametrization, width,
step and layer), slopes.jsonl and slopes.csv (least-squares slope of log2 RMS
against log2 width), coord_check.png (rows: parametrizations, columns: steps)
and config.json into --out_dir, and prints the slopes. Under μP the slopes
stay ≈ 0 (or negative) at every step; under SP they grow once training starts.
"""

from __future__ import annotations

import dataclasses
import time

from absl import flags

from experiments import common
from scaling import coord_check as coord_lib
from scaling import data as data_lib
from scaling import io
from scaling import optim
from scaling import parametrization as parametrization_lib
from scaling import plotting
from scaling import transfer as transfer_lib

_PARAMETRIZATIONS = common.define_enum_list("parametrizations", "sp,mup",
                                            parametrization_lib.available_parametrizations,
                                            "Parametrizations to check (rows of the figure).")
_WIDTHS = common.define_int_list("widths", "64,128,256,512,1024", "Model widths d_model.")
_STEPS = flags.DEFINE_integer("steps", 4, "Training steps k; RMS is recorded at steps 0..k.", lower_bound=1)
_DEPTH = flags.DEFINE_integer("depth", 2, "Transformer blocks.", lower_bound=1)
_NUM_HEADS = flags.DEFINE_integer("num_heads", None, "Fixed number of heads; the head dim is width / num_heads "
                                  f"(default when --head_dim is not given: {transfer_lib.DEFAULT_NUM_HEADS}).",
                                  lower_bound=1)
_HEAD_DIM = flags.DEFINE_integer("head_dim", None, "Fixed head dim; the number of heads is width / head_dim "
                                 "(exclusive with --num_heads).", lower_bound=1)
_BASE_WIDTH = flags.DEFINE_integer("base_width", None, "Width at which muP equals SP (default: the smallest "
                                   "width).", lower_bound=1)
_LEARNING_RATE = common.define_finite_float("learning_rate", 1e-2, "Global learning rate.", positive=True)
_OPTIMIZER = flags.DEFINE_enum("optimizer", "adam", list(optim.OPTIMIZERS), "Optimizer.")
_NUM_SEEDS = flags.DEFINE_integer("num_seeds", 2, "Seeds averaged (vmapped).", lower_bound=1)
_SEQ_LEN = flags.DEFINE_integer("seq_len", 32, "Sequence length T.", lower_bound=1)
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 8, "Sequences per batch.", lower_bound=1)
_TASK = flags.DEFINE_enum("task", "recall", list(data_lib.DATASET_NAMES), "Training data ('text' needs "
                          "--text_file).")
_TEXT_FILE = flags.DEFINE_string("text_file", None, "UTF-8 text file for --task=text (character level).")
_SEED = flags.DEFINE_integer("seed", 0, "First seed (seeds are seed .. seed + num_seeds - 1).", lower_bound=0)
_FIXED_BATCH = flags.DEFINE_boolean("fixed_batch", True, "Train every step on the same batch (as mup's "
                                    "fix_data); false: a new batch each step.")
_ZERO_QUERY = flags.DEFINE_boolean("zero_query", False, "Zero-initialize W_q (muP option).")
_ZERO_READOUT = flags.DEFINE_boolean("zero_readout", False, "Zero-initialize the readout (muP option; its RMS is "
                                     "then 0 at step 0).")
_OUT_DIR = flags.DEFINE_string("out_dir", "runs/coord_check", "Output directory.")


@dataclasses.dataclass(frozen=True)
class CoordCheckRun:
  """Everything a run needs: the library config and the data flags."""

  config: coord_lib.CoordCheckConfig
  task: str
  text_file: str | None
  seq_len: int
  batch_size: int
  out_dir: str


def family_from_flags() -> transfer_lib.WidthFamily:
  """The WidthFamily of --depth, --num_heads, --head_dim, --base_width, --zero_query, --zero_readout."""
  if _NUM_HEADS.value is not None and _HEAD_DIM.value is not None:
    common.fail("--num_heads and --head_dim: give at most one (the other follows from the width)")
  return transfer_lib.WidthFamily(depth=_DEPTH.value, num_heads=_NUM_HEADS.value, head_dim=_HEAD_DIM.value,
                                  base_width=_BASE_WIDTH.value, zero_query=_ZERO_QUERY.value,
                                  zero_readout=_ZERO_READOUT.value)


def _run_from_flags():
  """Validates every flag (nothing is written yet) and returns (run, dataset)."""
  widths = tuple(dict.fromkeys(_WIDTHS.value))
  parametrizations = tuple(dict.fromkeys(_PARAMETRIZATIONS.value))
  family = family_from_flags().with_base_width(widths)
  dataset = common.make_dataset_or_fail(_TASK.value, _TEXT_FILE.value, seq_len=_SEQ_LEN.value,
                                        batch_size=_BATCH_SIZE.value, seed=_SEED.value)
  common.check_width_family(family, parametrizations, widths, dataset)
  try:
    config = coord_lib.CoordCheckConfig(parametrizations=parametrizations, widths=widths, steps=_STEPS.value,
                                        family=family, learning_rate=_LEARNING_RATE.value,
                                        optimizer=_OPTIMIZER.value, num_seeds=_NUM_SEEDS.value, seed=_SEED.value,
                                        fixed_batch=_FIXED_BATCH.value)
  except ValueError as e:
    common.fail(str(e))
  run = CoordCheckRun(config=config, task=_TASK.value, text_file=_TEXT_FILE.value, seq_len=_SEQ_LEN.value,
                      batch_size=_BATCH_SIZE.value, out_dir=_OUT_DIR.value)
  return run, dataset


def write_figure(path, rows, slope_rows) -> None:
  """A grid like mup's: rows = parametrizations, columns = steps; RMS against width (log-log), one line per layer.

  Every panel shares one y range; the legend gives each layer's fitted slope.
  """
  params = list(dict.fromkeys(r["parametrization"] for r in rows))
  steps = sorted({r["step"] for r in rows})
  layers = list(dict.fromkeys(r["layer"] for r in rows))
  slope = {(s["parametrization"], s["layer"], s["step"]): s["slope"] for s in slope_rows}
  fig, axes = plotting.grid_figure(len(params), len(steps), width=3.6, height=3.0)
  positive = [r["rms"] for r in rows if r["rms"] is not None and r["rms"] > 0]
  for i, name in enumerate(params):
    for j, step in enumerate(steps):
      ax = axes[i][j]
      series = {}
      for layer in layers:
        points = sorted((r["width"], r["rms"]) for r in rows
                        if r["parametrization"] == name and r["step"] == step and r["layer"] == layer
                        and r["rms"] is not None and r["rms"] > 0)
        if points:
          s = slope.get((name, layer, step))
          label = layer if s is None else f"{layer} ({s:+.2f})"
          series[label] = ([w for w, _ in points], [v for _, v in points])
      plotting.line_plot(None, series, xlabel="width", ylabel="RMS" if j == 0 else "", logx2=True, logy=True,
                         title=f"{name}, step {step}", ax=ax)
      ax.legend(fontsize=5, loc="best")
      if positive:  # one y range for every panel, so growth across steps and parametrizations is comparable
        ax.set_ylim(min(positive) / 1.3, max(positive) * 1.3)
  plotting.save_figure(fig, path)


def slope_table(slope_rows, steps: int) -> str:
  """Slopes as a table: one row per (parametrization, layer), one column per step."""
  table = {}
  for s in slope_rows:
    row = table.setdefault((s["parametrization"], s["layer"]),
                           {"parametrization": s["parametrization"], "layer": s["layer"]})
    row[f"step{s['step']}"] = "-" if s["slope"] is None else f"{s['slope']:+.2f}"
  return common.format_table(list(table.values()),
                             ("parametrization", "layer", *(f"step{t}" for t in range(steps + 1))))


def main(argv):
  common.reject_extra_args(argv)
  run, dataset = _run_from_flags()
  config = run.config
  out_dir = common.prepare_out_dir(run.out_dir)
  io.write_json(out_dir / "config.json", {"flags": common.flag_values(__name__),
                                          "config": dataclasses.asdict(config),
                                          "dataset": data_lib.describe(dataset)})
  partial = out_dir / "results.partial.jsonl"
  partial.unlink(missing_ok=True)
  progress = common.Progress(len(config.parametrizations) * len(config.widths), "coord_check")
  start = time.perf_counter()

  def on_width(name, width, rows):
    for r in rows:
      io.append_jsonl(partial, r)
    progress.update(f"{name} width={width}")

  rows = coord_lib.run_coord_check(config, dataset, on_width=on_width)
  slope_rows = coord_lib.slopes(rows)
  io.write_jsonl(out_dir / "results.jsonl", rows)
  io.write_jsonl(out_dir / "slopes.jsonl", slope_rows)
  io.write_csv(out_dir / "slopes.csv", [{k: v for k, v in s.items() if k != "widths"} for s in slope_rows])
  partial.unlink(missing_ok=True)
  write_figure(out_dir / "coord_check.png", rows, slope_rows)
  print(f"slope of log2 RMS against log2 width (widths {', '.join(map(str, config.widths))}; "
        f"{config.optimizer} lr={config.learning_rate:g}, {config.num_seeds} seeds):")
  print(slope_table(slope_rows, config.steps))
  print(f"\n{len(rows)} rows in {time.perf_counter() - start:.1f}s; wrote results.jsonl, slopes.jsonl, "
        f"slopes.csv, coord_check.png and config.json to {out_dir}")


if __name__ == "__main__":
  common.run(main)
