"""Output-logit growth with and without z-loss, and Adam against Adam-atan2 over learning rates.

The options and run of ``python -m experiments.stability`` (its docstring
describes the measurements): log Z of the readout with and without z-loss,
and the final loss of Adam, Adam with μP-scaled ε and Adam-atan2 at each
learning rate.
"""

from __future__ import annotations

import dataclasses
import pathlib

import numpy as np

from scaling.training.data.config import DataConfig
from scaling.training.model.family import ModelFamily
from scaling.training.optimizer import OptimizerConfig
from scaling.mup import schemes as param_lib
from scaling.runs import run_lock
from scaling.runs import report
from scaling.runs import results
from scaling.training.loop import run as loop_lib
from scaling.base.config import option
from scaling.base.config import Options
from scaling.base.validation import ConfigError
from scaling.base.validation import ConfigTypeError

OPTIMIZERS = (("adam", "adam", "none"), ("adam, eps_scaling=mup", "adam", "mup"), ("adam_atan2", "adam_atan2", "none"))
"""(label, --optimizer, --eps_scaling) of the compared optimizers."""


@dataclasses.dataclass(frozen=True)
class StabilityConfig(Options):
  """The options of experiments.stability."""

  HIDDEN = ("optimizer", "learning_rate", "eps_scaling", "z_loss", "weight_decay", "momentum")

  parametrization: str = option("mup", "Parametrization.", choices=param_lib.available_parametrizations)
  width: int = option(128, "Model width.", lower=1)
  seed: int = option(0, "Seed of the initialization and the data.", lower=0)
  log_z_learning_rate: float = option(3e-2, "Adam learning rate of the log Z runs.", positive=True)
  z_loss: float = option(1e-3, "z-loss coefficient compared with none.", positive=True)
  learning_rates: tuple[float, ...] = option((3e-3, 1e-2, 3e-2, 1e-1), "Learning rates of the optimizer comparison.",
                                             positive=True)
  final_window: int = option(20, "Steps averaged for the final loss.", lower=1)
  data: DataConfig = option(DataConfig(seq_len=64, batch_size=16), "Training data.")
  model: ModelFamily = option(ModelFamily(base_width=32), "The model.")
  optim: OptimizerConfig = option(OptimizerConfig(steps=200), "Steps and schedule.")
  output: results.OutputConfig = option(results.OutputConfig("runs/stability"), "Output.")

  def validate(self):
    if self.final_window > self.optim.steps:
      raise ConfigError(f"final_window={self.final_window} exceeds steps={self.optim.steps}")


OUTPUTS = ("runs.jsonl", "results.json", "stability.md")
"""The files ``run`` writes into the output folder (besides run.json)."""


def _final(values: np.ndarray, window: int) -> np.ndarray:
  """Mean over the last ``window`` steps of a [steps, ...] record (NaN where a step was not finite)."""
  return np.mean(values[-window:], axis=0)


@run_lock.held_while_running
def run(config: StabilityConfig, out_dir: pathlib.Path) -> dict:
  """Trains the runs, prints the tables and writes results.json and stability.md into ``out_dir``.

  Args:
    config: the study's options.
    out_dir: the output folder (created once the data and model are known to be valid).

  Returns:
    What results.json holds: the config, what was trained, the log Z rows and the optimizer rows.
  """
  if not isinstance(config, StabilityConfig):
    raise ConfigTypeError(f"config must be a StabilityConfig, got {type(config).__name__}")
  dataset = config.data.make(config.seed)
  family = config.model.with_base_width([config.width])
  model_config = family.model_config(config.parametrization, config.width, vocab_size=dataset.vocab_size,
                                     max_len=dataset.seq_len)
  results.open_run(out_dir, config, overwrite=config.output.overwrite, outputs=OUTPUTS)
  what = (f"{config.parametrization}, width {config.width} (base {family.base_width}), depth {family.depth}, "
          f"{config.optim.steps} steps, batch {dataset.batch_size} x {dataset.seq_len} of {dataset.name}")
  print(f"training {what}", flush=True)
  window = config.final_window
  lrs = tuple(config.learning_rates)
  z_losses = (0.0, config.z_loss)
  # One row per training run, each written when it ends: a stopped run resumes with the runs it finished.
  plan = [(("log_z", i), 1) for i in range(len(z_losses))] + [(("optimizer", i), 1) for i in range(len(OPTIMIZERS))]
  stream = results.GroupedRows(out_dir / "runs.jsonl", plan, lambda row: (row["part"], row["index"]))
  if stream.reused:
    print(f"resuming: {stream.reused} of {len(plan)} runs reused from {out_dir}", flush=True)

  for i, c in enumerate(z_losses):
    if ("log_z", i) in stream.done:
      continue
    opt = dataclasses.replace(config.optim, optimizer="adam", learning_rate=config.log_z_learning_rate, z_loss=c)
    r = loop_lib.run_training(model_config, opt, dataset, loop_lib.Runs(seed=config.seed),
                              loop_lib.RunOptions(stop_on_divergence=False, record=("loss", "log_z_mean", "log_z_max")))
    rec = r.records
    row = {"z_loss": c, "log_z_mean_start": float(rec["log_z_mean"][0]),
           "log_z_mean_end": float(_final(rec["log_z_mean"], window)),
           "log_z_max_end": float(_final(rec["log_z_max"], window)),
           "loss_end": float(_final(rec["loss"], window)), "diverged": bool(r.diverged)}
    print(report.table([row], list(row)), flush=True)
    stream.add(("log_z", i), [{"part": "log_z", "index": i, **row}])

  for i, (label, name, eps_scaling) in enumerate(OPTIMIZERS):
    if ("optimizer", i) in stream.done:
      continue
    opt = dataclasses.replace(config.optim, optimizer=name, eps_scaling=eps_scaling, z_loss=0.0)
    r = loop_lib.run_training(model_config, opt, dataset,
                              loop_lib.Runs(seed=[config.seed] * len(lrs), learning_rates=lrs),
                              loop_lib.RunOptions(stop_on_divergence=False, record=("loss",)))
    final = _final(r.records["loss"], window)
    row = {"optimizer": label, **{f"{lr:g}": float(v) for lr, v in zip(lrs, final)},
           "diverged_at": [int(s) for s in r.divergence_step]}
    print(report.table([row], list(row)), flush=True)
    stream.add(("optimizer", i), [{"part": "optimizer", "index": i, **row}])

  done = stream.finish()
  strip = lambda row: {k: v for k, v in row.items() if k not in ("part", "index")}
  log_z_rows = [strip(r) for r in done if r["part"] == "log_z"]
  opt_rows = [strip(r) for r in done if r["part"] == "optimizer"]

  fmt = lambda x: f"{x:.3f}"
  md = [f"Trained: {what}; loss = cross-entropy (nats), mean over the last {window} steps.\n",
        f"log Z of the readout, Adam at learning rate {config.log_z_learning_rate:g}:\n",
        report.markdown_table(
            ("z-loss c", "mean log Z, step 0", f"mean log Z, last {window} steps", f"max log Z, last {window} steps",
             "final loss"),
            [(f"{row['z_loss']:g}", fmt(row["log_z_mean_start"]), fmt(row["log_z_mean_end"]),
              fmt(row["log_z_max_end"]), fmt(row["loss_end"])) for row in log_z_rows]),
        "Final loss by optimizer and learning rate (— : diverged):\n",
        report.markdown_table(
            ("optimizer", *(f"lr {lr:g}" for lr in lrs)),
            [(row["optimizer"], *(fmt(row[f"{lr:g}"]) if s < 0 and np.isfinite(row[f"{lr:g}"]) else "—"
                                  for lr, s in zip(lrs, row["diverged_at"]))) for row in opt_rows])]
  results.write_text(out_dir / "stability.md", "\n".join(md))
  out = {"config": dataclasses.asdict(config), "trained": what, "log_z": log_z_rows, "optimizers": opt_rows}
  results.write_json(out_dir / "results.json", out)
  print(f"wrote results.json and stability.md to {out_dir}")
  return out

