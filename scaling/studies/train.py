"""One training run: loss, gradient norms and attention statistics logged as it trains, plots and a summary.

Writes into the output folder run.json and config.json (first), metrics.jsonl
(one object per logged step, streamed so an interrupted run keeps its log),
summary.json (final and held-out loss/accuracy, divergence step), timings.json
and timings.jsonl (wall times, steps/s), checkpoints/ (``checkpoint_every``) and
PNG curves: loss.png, grad_norm.png and attention.png (per-layer entropy and max
logit against step). Training stops early when the loss is non-finite or above
``divergence_factor`` × the initial loss; a diverged run is evaluated on its
last finite state, and plots are written in every case.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import pathlib
import sys
import time
from typing import Any

import jax

from scaling.training.data.config import DataConfig
from scaling.training.data.dataset import Dataset
from scaling.training.data import dataset as dataset_lib
from scaling.training.model import transformer as model_lib
from scaling.training.model.family import ModelFamily
from scaling.training.model.config import ModelConfig
from scaling.training.optimizer import OptimizerConfig
from scaling.mup import schemes as param_lib
from scaling.runs import run_lock
from scaling.runs import plotting
from scaling.runs import report
from scaling.runs import distributed
from scaling.training import resources
from scaling.runs import results
from scaling.runs import tracking
from scaling.training.loop import evaluation as evaluation_lib
from scaling.training.loop import run as loop_lib
from scaling.training.loop import sharded as sharded_lib
from scaling.training.loop import state as state_lib
from scaling.base.config import option
from scaling.base.config import Options
from scaling.base.config import Seeds
from scaling.base.validation import ConfigError

SUMMARY_COLUMNS = ("status", "steps_run", "initial_loss", "final_loss", "eval_loss", "eval_accuracy",
                   "steps_per_sec", "wall_time")


@dataclasses.dataclass(frozen=True)
class TrainOutputConfig(results.OutputConfig):
  """Where a training run writes, and the trackers that get its metrics too."""

  log_to: tuple[str, ...] | None = option(
      None, "Also send the numbers of metrics.jsonl to these trackers, comma-separated: tensorboard (event files in "
      "<out_dir>/tensorboard; pip install tensorboardX), wandb (pip install wandb; "
      "WANDB_MODE=offline needs no network).", choices=tuple(tracking.TRACKERS))

  def validate(self):
    super().validate()
    tracking.check_available(self.log_to or ())


@dataclasses.dataclass(frozen=True)
class TrainConfig(Options):
  """A training run (the options of ``experiments.train``)."""

  HIDDEN = ("num_seeds",)
  NOT_IN_RESULTS = ("print_every", "checkpoint_every")
  """Options that change no result file (left out of run.json and of the run directory's name)."""

  parametrization: str = option("sp", "Parametrization: init, multipliers and per-layer learning rates.",
                                choices=param_lib.available_parametrizations)
  width: int = option(64, "Model width d_model.", lower=1)
  log_every: int = option(10, "Write a metrics.jsonl row every this many steps.", lower=1)
  print_every: int = option(100, "Print a progress line every this many steps.", lower=1)
  eval_batches: int = option(8, "Held-out batches for the final evaluation.", lower=1)
  divergence_factor: float = option(loop_lib.DEFAULT_DIVERGENCE_FACTOR, "Stop when the loss exceeds this times "
                                    "the initial loss.", positive=True)
  checkpoint_every: int = option(0, "Save a checkpoint (params, optimizer state, step = data position, data key) "
                                 "into --out_dir/checkpoints every this many steps; a rerun with the same options "
                                 "resumes from the newest one. 0: no checkpoints.", lower=0)
  shard_params: bool = option(False, "On several devices, shard parameters and optimizer state over them (FSDP) "
                              "instead of replicating them; the batch is split over the devices either way.")
  seeds: Seeds = option(Seeds(num_seeds=1), "Seed of the initialization and the data.")
  data: DataConfig = option(DataConfig(seq_len=24, batch_size=32), "Training data.")
  model: ModelFamily = option(ModelFamily(), "The model.")
  optim: OptimizerConfig = option(OptimizerConfig(), "Optimizer and schedule.")
  output: TrainOutputConfig = option(TrainOutputConfig("runs/train"), "Output and trackers.")
  cluster: distributed.DistributedConfig = option(distributed.DistributedConfig(), "Several processes.")

  def validate(self):
    if self.divergence_factor <= 1:
      raise ConfigError(f"divergence_factor={self.divergence_factor:g} must exceed 1 (the initial loss itself would "
                        "count as diverged)")

  def model_config(self, dataset: Dataset) -> ModelConfig:
    """The model for ``dataset`` (the base width defaults to the width: μP = SP)."""
    family = self.model.with_base_width([self.width])
    return family.model_config(self.parametrization, self.width, vocab_size=dataset.vocab_size,
                               max_len=dataset.seq_len)


def memory_estimate(config: TrainConfig, dataset: Dataset,
                    model_config: ModelConfig) -> resources.Estimate:
  """What the run needs: one model, its optimizer state, the kept last finite state, a step's activations."""
  return resources.training_estimate(
      [(f"at width={config.width}", model_config)], optimizer=config.optim.optimizer,
      momentum=config.optim.momentum, batch_size=dataset.batch_size, seq_len=dataset.seq_len, state_copies=3,
      data_bytes=resources.dataset_bytes(dataset))


def _finite(values):
  return [v if v is not None and math.isfinite(v) else float("nan") for v in values]


def write_plots(out_dir, rows: list[dict[str, Any]], depth: int) -> list[str]:
  """loss.png, grad_norm.png and attention.png (entropy and max |logit| per layer) from logged rows."""
  if not rows:
    return []
  steps = [r["step"] for r in rows]
  get = lambda key: _finite([r.get(key) for r in rows])
  per_layer = lambda key, i: _finite([(r.get(key) or [None] * depth)[i] for r in rows])
  positive = lambda ys: all(y > 0 for y in ys if math.isfinite(y)) and any(math.isfinite(y) for y in ys)
  loss = get("loss")
  plotting.line_plot(out_dir / "loss.png", {"train loss": (steps, loss)}, xlabel="step", ylabel="loss (nats)",
                     title="training loss", logy=positive(loss))
  grads = {"global": (steps, get("grad_norm"))}
  grads.update({f"block {i}": (steps, per_layer("layer_grad_norm", i)) for i in range(depth)})
  plotting.line_plot(out_dir / "grad_norm.png", grads, xlabel="step", ylabel="gradient norm",
                     title="gradient norms", logy=all(positive(y) for _, y in grads.values()))
  fig, axes = plotting.grid_figure(1, 2)
  for ax, key, label in ((axes[0][0], "attn_entropy", "attention entropy (nats)"),
                         (axes[0][1], "attn_max_logit", "max |attention logit|")):
    plotting.line_plot(None, {f"layer {i}": (steps, per_layer(key, i)) for i in range(depth)}, ax=ax,
                       xlabel="step", ylabel=label, title=f"{label} per layer")
  plotting.save_figure(fig, out_dir / "attention.png")
  return ["loss.png", "grad_norm.png", "attention.png"]


CHECKPOINTS = "checkpoints"
OUTPUTS = ("config.json", "metrics.jsonl", "summary.json", "timings.jsonl", "timings.json", "loss.png",
           "grad_norm.png", "attention.png", CHECKPOINTS, tracking.TENSORBOARD_DIR, "wandb")
"""The files ``run`` writes into the output folder (besides run.json)."""
NOT_IN_RESULTS = TrainConfig.NOT_IN_RESULTS
"""Options that change no result file (left out of run.json, so a rerun may change them)."""


def _resume(config: TrainConfig, out_dir: pathlib.Path, model_config: ModelConfig, dataset: Any):
  """(checkpoints or None, restored state or None, step-0 loss or None) for a run in ``out_dir``."""
  directory = out_dir / CHECKPOINTS
  if not config.checkpoint_every and not directory.exists():
    return None, None, None
  from scaling.training.loop import checkpoint as checkpoint_lib  # pylint: disable=g-import-not-at-top  (orbax only when used)

  checkpoints = checkpoint_lib.Checkpoints(directory, depth=model_config.depth)
  if checkpoints.latest_step() is None:
    return checkpoints, None, None
  seed = config.seeds.seed
  init = sharded_lib.make_run_init(model_config, config.optim, shard_params=config.shard_params)
  target = init(seed, config.optim.learning_rate)
  state, record = checkpoints.restore(target, seed=seed)
  return checkpoints, state, record["initial_loss"]


def _finished(out_dir: pathlib.Path) -> dict[str, Any] | None:
  """The summary of a run that finished in ``out_dir`` (completed or diverged), else None."""
  path = out_dir / "summary.json"
  if not path.exists() or not (out_dir / "metrics.jsonl").exists():
    return None
  summary = json.loads(path.read_text())
  return summary if summary.get("status") in ("completed", "diverged") else None


@run_lock.held_while_running
def run(config: TrainConfig, out_dir: pathlib.Path) -> dict[str, Any]:
  """The study as ``experiments.train`` runs it: trains, logs, evaluates, plots; returns the summary.

  Rerun with the same options into the same folder, a finished run is not trained
  again and an interrupted one resumes from its newest checkpoint (``checkpoint_every``),
  or from step 0 without one; metrics.jsonl keeps the rows before that step and
  gets the rest, so it ends as in one uninterrupted run. Wall times and throughput
  go to timings.jsonl (per logged step) and timings.json, not into metrics.jsonl or
  summary.json.
  """
  seed = config.seeds.seed
  dataset = config.data.make(seed)
  model_config = config.model_config(dataset)
  resources.check(memory_estimate(config, dataset, model_config), resources.option_values(config))
  results.open_run(out_dir, config, overwrite=config.output.overwrite, ignore=NOT_IN_RESULTS, outputs=OUTPUTS,
                   extra={"dataset": dataset_lib.describe(dataset)})
  results.write_json(out_dir / "config.json", {"config": dataclasses.asdict(config),
                                               "model": dataclasses.asdict(model_config),
                                               "dataset": dataset_lib.describe(dataset)})
  shapes = jax.eval_shape(functools.partial(model_lib.init_params, config=model_config), jax.random.PRNGKey(seed))
  num_params = model_lib.count_params(shapes)
  steps = config.optim.steps
  finished = _finished(out_dir)
  if not distributed.agree(finished is not None):  # process 0 decides for the job
    finished = None
  elif finished is None:  # finished by process 0's files, which this process does not see
    finished = {"status": "finished", "steps_run": steps}
  if finished is not None:  # its plots were written before its summary
    print(report.table([finished], SUMMARY_COLUMNS[:-2]))
    print(f"already finished in {out_dir} ({finished['status']} after {finished['steps_run']} steps); "
          "nothing to train")
    return finished
  checkpoints, state, initial_loss = _resume(config, out_dir, model_config, dataset)
  first = 0 if state is None else int(state.step)
  print(f"training {num_params:,} parameters on {dataset.name} (vocab {dataset.vocab_size}, T={dataset.seq_len}, "
        f"B={dataset.batch_size}) for {steps} steps; writing to {out_dir}"
        + (f"; resuming from the checkpoint after {first} steps" if first else ""), flush=True)
  metrics = results.RowStream(out_dir / "metrics.jsonl", keep=lambda row: row["step"] < first)
  trackers = tracking.Trackers(config.output.log_to or () if distributed.is_writer() else (), out_dir, out_dir.name,
                               dataclasses.asdict(config))
  start = time.perf_counter()
  last_print = {"time": start, "step": first}
  progress = {"initial_loss": initial_loss, "diverged": False, "done": first}
  # On a terminal a bar with ETA; off one the step lines below are the progress (whole lines, every print_every).
  bar = report.Progress(steps - first, "train", lines=False)

  def callback(step: int, row: dict[str, Any]) -> None:
    now = time.perf_counter()
    diverged = row.get("diverged", False)
    progress["diverged"] |= diverged
    if step == 0:
      progress["initial_loss"] = row["loss"]
    final = step == steps - 1
    bar.update(f"step {step}  loss {row['loss']:.4f}", n=step + 1 - progress["done"])
    progress["done"] = step + 1
    if step % config.log_every == 0 or final or diverged:
      metrics.write({**row, "step": step})
      trackers.log(step, results.to_jsonable(metrics.rows[-1]))
      results.append_timing(out_dir, {"step": step, "time": now - start, "resumed_from": first})
    if step % config.print_every == 0 or final or diverged:
      elapsed = now - last_print["time"]
      rate = (f"{(step - last_print['step']) / elapsed:.1f} steps/s" if step > last_print["step"] and elapsed > 0
              else "compiled")
      last_print.update(time=now, step=step)
      print(f"step {step:>6}/{steps}  loss {row['loss']:.4f}  acc {row['accuracy']:.3f}  "
            f"lr {row['learning_rate']:.3g}  grad {row['grad_norm']:.3g}  {rate}", flush=True)

  def after_step(done: int, state: state_lib.TrainState) -> None:
    if config.checkpoint_every and done % config.checkpoint_every == 0 and done < steps and not progress["diverged"]:
      checkpoints.save(state, seed=seed, initial_loss=progress["initial_loss"])

  try:
    with bar:
      result = loop_lib.run_training(model_config, config.optim, dataset, loop_lib.Runs(seed=seed), loop_lib.RunOptions(
          log_every=math.gcd(config.log_every, config.print_every), callback=callback,
          divergence_factor=config.divergence_factor, keep_last_finite=True, state=state, initial_loss=initial_loss,
          after_step=after_step, shard_params=config.shard_params))
    evaluation = evaluation_lib.evaluate(result.last_finite_state.params, model_config, dataset, config.eval_batches)
  except KeyboardInterrupt:
    metrics.close()
    write_plots(out_dir, metrics.rows, model_config.depth)
    last = metrics.rows[-1] if metrics.rows else {}
    results.write_json(out_dir / "summary.json", {
        "status": "interrupted", "steps_logged": len(metrics.rows), "last_logged_step": last.get("step"),
        "last_logged_loss": last.get("loss")})
    results.write_json(out_dir / "timings.json", {"wall_time": time.perf_counter() - start, "resumed_from": first})
    print(f"\ninterrupted; partial metrics.jsonl, plots and summary.json are in {out_dir}", file=sys.stderr)
    raise
  finally:
    trackers.close()
    if checkpoints is not None:
      checkpoints.close()
  metrics.close()
  plots = write_plots(out_dir, metrics.rows, model_config.depth)
  summary = {
      "status": "diverged" if result.diverged else "completed",
      "stop_reason": result.stop_reason,
      "divergence_step": result.divergence_step,
      "steps_run": result.steps_run,
      "initial_loss": result.initial_loss,
      "final_loss": result.final_loss,
      "final_accuracy": result.history[-1]["accuracy"],
      "eval_loss": evaluation["loss"],
      "eval_accuracy": evaluation["accuracy"],
      "evaluated_after_updates": int(result.last_finite_state.step),
      "chance_accuracy": dataset.chance_accuracy,
      "num_params": num_params,
  }
  timings = {"wall_time": time.perf_counter() - start, "train_time": result.wall_time,
             "steps_per_sec": result.steps_per_sec, "resumed_from": first}
  results.write_json(out_dir / "timings.json", timings)
  results.write_json(out_dir / "summary.json", summary)
  print(report.table([{**summary, **timings}], SUMMARY_COLUMNS))
  if result.diverged:
    print(f"diverged at step {result.divergence_step}: {result.stop_reason}; evaluated on the last state whose "
          f"loss was finite (after {int(result.last_finite_state.step)} updates)")
  print(f"wrote config.json, metrics.jsonl ({len(metrics.rows)} rows), summary.json, timings.json and "
        f"{len(plots)} plots to {out_dir}")
  return summary
