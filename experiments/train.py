"""Trains a small decoder-only transformer and logs loss, gradient norms and attention statistics.

  python -m experiments.train                                   # associative recall, about half a minute on CPU
  python -m experiments.train --parametrization=mup --width=256 --rule=qk_norm
  python -m experiments.train --text_file=input.txt --steps=2000 --seq_len=64

Writes into --out_dir: config.json (first), metrics.jsonl (one object per logged
step, appended line by line so an interrupted run keeps its log), summary.json
(final and eval loss/accuracy, divergence step, wall time, steps/s) and PNG
curves: loss.png, grad_norm.png and attention.png (per-layer entropy and max
logit against step). Training stops early when the loss is non-finite or above
--divergence_factor × the initial loss; plots are written in every case.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from typing import Any

from absl import flags
import jax

from experiments import common
from scaling import data as data_lib
from scaling import io
from scaling import model as model_lib
from scaling import optim as optim_lib
from scaling import parametrization as parametrization_lib
from scaling import plotting
from scaling import rules as rules_lib
from scaling import train as train_lib

DEFAULT_RULE = "default"

_RULE = flags.DEFINE_enum("rule", DEFAULT_RULE, [DEFAULT_RULE, *rules_lib.available_rules()],
                          "Attention logit-scale rule; 'default' = the parametrization's own.")
_TAU = common.define_finite_float("tau", 1.0, "Temperature of --rule=temperature.", positive=True)
_PARAMETRIZATION = flags.DEFINE_enum("parametrization", "sp", list(parametrization_lib.available_parametrizations()),
                                     "Parametrization: init, multipliers and per-layer learning rates.")
_BASE_WIDTH = flags.DEFINE_integer("base_width", 64, "Width at which the parametrization is tuned.", lower_bound=1)
_BASE_HEAD_DIM = flags.DEFINE_integer("base_head_dim", 64, "Head dim at which muP's alpha/d_k equals 1/sqrt(d_k).",
                                      lower_bound=1)
_ZERO_QUERY = flags.DEFINE_boolean("zero_query", False, "Zero-initialize W_q (muP option).")
_ZERO_READOUT = flags.DEFINE_boolean("zero_readout", False, "Zero-initialize the readout (muP option).")
_OPTIMIZER = flags.DEFINE_enum("optimizer", "adam", list(optim_lib.OPTIMIZERS), "Optimizer.")
_LEARNING_RATE = common.define_finite_float("learning_rate", 3e-3, "Global learning rate.", positive=True)
_WEIGHT_DECAY = common.define_finite_float("weight_decay", 0.0, "Weight decay (adamw: decoupled; sgd: L2).",
                                           lower_bound=0.0)
_MOMENTUM = common.define_finite_float("momentum", 0.0, "SGD momentum in [0, 1).", lower_bound=0.0)
_WARMUP = flags.DEFINE_integer("warmup_steps", 0, "Linear warmup steps; > 0 switches to warmup + cosine decay.",
                               lower_bound=0)
_WIDTH = flags.DEFINE_integer("width", 64, "Model width d_model.", lower_bound=1)
_DEPTH = flags.DEFINE_integer("depth", 2, "Transformer blocks.", lower_bound=1)
_NUM_HEADS = flags.DEFINE_integer("num_heads", 4, "Query heads.", lower_bound=1)
_NUM_KV_HEADS = flags.DEFINE_integer("num_kv_heads", None, "Key/value heads (GQA); default: --num_heads.",
                                     lower_bound=1)
_HEAD_DIM = flags.DEFINE_integer("head_dim", None, "Head dim d_k; default: --width / --num_heads (which must "
                                 "divide).", lower_bound=1)
_MLP_RATIO = common.define_finite_float("mlp_ratio", 4.0, "MLP hidden width / model width.", positive=True)
_POSITIONS = flags.DEFINE_enum("positions", "rope", list(model_lib.POSITIONS), "Position encoding.")
_PRE_LN = flags.DEFINE_boolean("pre_ln", True, "Pre-LN blocks (false: post-LN).")
_LOGIT_SOFT_CAP = common.define_finite_float("logit_soft_cap", None, "Attention logit soft cap c (c*tanh(z/c)); "
                                             "default: none.", positive=True)
_DTYPE = flags.DEFINE_enum("dtype", "float32", list(model_lib.DTYPES), "Compute dtype (parameters stay float32).")
_ATTENTION = flags.DEFINE_enum("attention", "dense", list(model_lib.ATTENTION_IMPLEMENTATIONS),
                               "Attention implementation (blockwise logs no entropy/max-logit metrics).")
_BLOCK_SIZE = flags.DEFINE_integer("block_size", 64, "Query and key tile length of blockwise attention.",
                                   lower_bound=1)
_TASK = flags.DEFINE_enum("task", "recall", list(data_lib.DATASET_NAMES),
                          "Training data: synthetic associative recall, induction copying, or text (--text_file).")
_TEXT_FILE = flags.DEFINE_string("text_file", None, "UTF-8 text file for character-level training (implies "
                                 "--task=text).")
_VOCAB_SIZE = flags.DEFINE_integer("vocab_size", None, "Vocabulary size; default: 32 (or the task's minimum) for "
                                   "synthetic tasks, the file's characters for text.", lower_bound=1)
_NUM_PAIRS = flags.DEFINE_integer("num_pairs", None, "Recall: key-value pairs (default: half of what fits).",
                                  lower_bound=1)
_NUM_QUERIES = flags.DEFINE_integer("num_queries", None, "Recall: queries per sequence (default: what fits "
                                    "after the pairs).", lower_bound=1)
_PREFIX_LEN = flags.DEFINE_integer("prefix_len", None, "Induction: period of the repeated prefix.", lower_bound=2)
_SEQ_LEN = flags.DEFINE_integer("seq_len", 24, "Sequence length T.", lower_bound=1)
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 32, "Sequences per batch.", lower_bound=1)
_STEPS = flags.DEFINE_integer("steps", 600, "Training steps.", lower_bound=1)
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the initialization and the data.", lower_bound=0)
_LOG_EVERY = flags.DEFINE_integer("log_every", 10, "Write a metrics.jsonl row every this many steps.",
                                  lower_bound=1)
_PRINT_EVERY = flags.DEFINE_integer("print_every", 100, "Print a progress line every this many steps.",
                                    lower_bound=1)
_EVAL_BATCHES = flags.DEFINE_integer("eval_batches", 8, "Held-out batches for the final evaluation.",
                                     lower_bound=1)
_DIVERGENCE_FACTOR = common.define_finite_float("divergence_factor", train_lib.DEFAULT_DIVERGENCE_FACTOR,
                                                "Stop when the loss exceeds this times the initial loss.",
                                                positive=True)
_OUT_DIR = flags.DEFINE_string("out_dir", "runs/train", "Output directory.")

SYNTHETIC_VOCAB = 32
LOGGED_LAYER_METRICS = ("layer_grad_norm", *model_lib.LAYER_AUX_KEYS)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """Everything a run depends on, resolved from the flags."""

  model: model_lib.ModelConfig
  task: str
  text_file: str | None
  task_options: tuple[tuple[str, Any], ...]
  seq_len: int
  batch_size: int
  optimizer: str
  learning_rate: float
  weight_decay: float
  momentum: float
  warmup_steps: int
  steps: int
  seed: int
  log_every: int
  print_every: int
  eval_batches: int
  divergence_factor: float


def _task_options(task: str, seq_len: int) -> dict[str, Any]:
  """Task options from the flags; recall defaults split the sequence evenly between pairs and queries."""
  if task == "recall":
    slots = (seq_len + 1) // 2  # pairs + queries that fit
    queries = _NUM_QUERIES.value
    pairs = _NUM_PAIRS.value
    if pairs is None and queries is None:
      queries = max(1, slots // 2)
    if pairs is None:
      pairs = max(1, slots - queries)
    if queries is None:
      queries = max(1, slots - pairs)
    return {"num_pairs": pairs, "num_queries": queries}
  for holder in (_NUM_PAIRS, _NUM_QUERIES):
    if holder.value is not None:
      common.fail(f"--{holder.name} only applies to --task=recall")
  if task == "induction":
    return {} if _PREFIX_LEN.value is None else {"prefix_len": _PREFIX_LEN.value}
  if _PREFIX_LEN.value is not None:
    common.fail("--prefix_len only applies to --task=induction")
  return {}


def _vocab_size(task: str, options: dict[str, Any]) -> int | None:
  """The --vocab_size, or the default: 32 for synthetic tasks unless the task needs more; None for text."""
  if _VOCAB_SIZE.value is not None or task == "text":
    return _VOCAB_SIZE.value
  if task == "recall":
    need = data_lib.recall_min_vocab(options["num_pairs"])
  else:
    prefix = options.get("prefix_len", (_SEQ_LEN.value + 1) // 2)
    need = data_lib.induction_min_vocab(prefix, True)
  return max(SYNTHETIC_VOCAB, 1 << (need - 1).bit_length())


def _build() -> tuple[TrainConfig, data_lib.Dataset, Any]:
  """Validates every flag and builds (config, dataset, optimizer); fails with one line on bad input."""
  task = _TASK.value
  text_file = _TEXT_FILE.value
  if text_file is not None:
    if _TASK.present and task != "text":
      common.fail(f"--text_file implies --task=text, but --task={task} was given")
    task = "text"
  elif task == "text":
    common.fail("--task=text needs --text_file")
  width, num_heads = _WIDTH.value, _NUM_HEADS.value
  head_dim = _HEAD_DIM.value
  if head_dim is None:
    if width % num_heads:
      common.fail(f"--width={width} is not divisible by --num_heads={num_heads}; pass --head_dim explicitly")
    head_dim = width // num_heads
  if _POSITIONS.value == "rope" and head_dim % 2:
    common.fail(f"--positions=rope needs an even head dim, got {head_dim} (set --head_dim or --positions)")
  if _NUM_KV_HEADS.value is not None and num_heads % _NUM_KV_HEADS.value:
    common.fail(f"--num_heads={num_heads} must be a multiple of --num_kv_heads={_NUM_KV_HEADS.value}")
  if _OPTIMIZER.value == "adam" and _WEIGHT_DECAY.value:
    common.fail("--weight_decay needs --optimizer=adamw or sgd")
  if _MOMENTUM.value >= 1 or (_MOMENTUM.value and _OPTIMIZER.value != "sgd"):
    common.fail("--momentum must be in [0, 1) and only applies to --optimizer=sgd")
  if _WARMUP.value >= _STEPS.value:
    common.fail(f"--warmup_steps={_WARMUP.value} must be smaller than --steps={_STEPS.value}")
  if _RULE.value != "temperature" and _TAU.present:
    common.fail("--tau only applies to --rule=temperature")
  options = _task_options(task, _SEQ_LEN.value)
  dataset = common.make_dataset_or_fail(task, text_file, seq_len=_SEQ_LEN.value, batch_size=_BATCH_SIZE.value,
                                        seed=_SEED.value, vocab_size=_vocab_size(task, options), **options)
  rule = None if _RULE.value == DEFAULT_RULE else _RULE.value
  rule_options = (("tau", _TAU.value),) if rule == "temperature" else ()
  block = _BLOCK_SIZE.value
  try:
    model = model_lib.ModelConfig(
        vocab_size=dataset.vocab_size, width=width, depth=_DEPTH.value, num_heads=num_heads, head_dim=head_dim,
        num_kv_heads=_NUM_KV_HEADS.value, mlp_ratio=_MLP_RATIO.value, max_len=_SEQ_LEN.value, rule=rule,
        rule_options=rule_options, positions=_POSITIONS.value, pre_ln=_PRE_LN.value,
        parametrization=_PARAMETRIZATION.value, base_width=_BASE_WIDTH.value, base_head_dim=_BASE_HEAD_DIM.value,
        zero_query=_ZERO_QUERY.value, zero_readout=_ZERO_READOUT.value, dtype=_DTYPE.value,
        attention=_ATTENTION.value, block_q=block, block_k=block, logit_soft_cap=_LOGIT_SOFT_CAP.value)
  except ValueError as e:
    common.fail(f"invalid model flags: {e}")
  config = TrainConfig(
      model=model, task=task, text_file=text_file, task_options=tuple(sorted(options.items())),
      seq_len=_SEQ_LEN.value, batch_size=_BATCH_SIZE.value, optimizer=_OPTIMIZER.value,
      learning_rate=_LEARNING_RATE.value, weight_decay=_WEIGHT_DECAY.value, momentum=_MOMENTUM.value,
      warmup_steps=_WARMUP.value, steps=_STEPS.value, seed=_SEED.value, log_every=_LOG_EVERY.value,
      print_every=_PRINT_EVERY.value, eval_batches=_EVAL_BATCHES.value,
      divergence_factor=_DIVERGENCE_FACTOR.value)
  try:
    optimizer = make_optimizer(config)
  except ValueError as e:
    common.fail(f"--optimizer={config.optimizer}: {e}")
  return config, dataset, optimizer


def make_optimizer(config: TrainConfig):
  """The optax optimizer of a run: per-layer LRs of the parametrization, optional warmup + cosine."""
  schedule = None
  if config.warmup_steps:
    schedule = optim_lib.warmup_cosine_schedule(1.0, config.warmup_steps, config.steps)
  kwargs = {}
  if config.optimizer != "adam":
    kwargs["weight_decay"] = config.weight_decay
  if config.optimizer == "sgd":
    kwargs["momentum"] = config.momentum
  return optim_lib.make_optimizer(config.optimizer, config.learning_rate, config.model.make_parametrization(),
                                  config.model.width, schedule=schedule, **kwargs)


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
  names = []
  loss = get("loss")
  plotting.line_plot(out_dir / "loss.png", {"train loss": (steps, loss)}, xlabel="step", ylabel="loss (nats)",
                     title="training loss", logy=positive(loss))
  names.append("loss.png")
  grads = {"global": (steps, get("grad_norm"))}
  grads.update({f"block {i}": (steps, per_layer("layer_grad_norm", i)) for i in range(depth)})
  plotting.line_plot(out_dir / "grad_norm.png", grads, xlabel="step", ylabel="gradient norm",
                     title="gradient norms", logy=all(positive(y) for _, y in grads.values()))
  names.append("grad_norm.png")
  fig, axes = plotting.grid_figure(1, 2)
  for ax, key, label in ((axes[0][0], "attn_entropy", "attention entropy (nats)"),
                         (axes[0][1], "attn_max_logit", "max |attention logit|")):
    plotting.line_plot(None, {f"layer {i}": (steps, per_layer(key, i)) for i in range(depth)}, ax=ax,
                       xlabel="step", ylabel=label, title=f"{label} per layer")
  plotting.save_figure(fig, out_dir / "attention.png")
  names.append("attention.png")
  return names


def main(argv):
  common.reject_extra_args(argv)
  config, dataset, optimizer = _build()
  out_dir = common.prepare_out_dir(_OUT_DIR.value)
  io.write_json(out_dir / "config.json", {"flags": common.flag_values(__name__), "config": dataclasses.asdict(config),
                                          "dataset": data_lib.describe(dataset)})
  metrics_path = out_dir / "metrics.jsonl"
  metrics_path.write_text("")  # a fresh log for this run
  num_params = model_lib.count_params(model_lib.init_params(jax.random.PRNGKey(config.seed), config.model))
  print(f"training {num_params:,} parameters on {dataset.name} (vocab {dataset.vocab_size}, T={config.seq_len}, "
        f"B={config.batch_size}) for {config.steps} steps; writing to {out_dir}", flush=True)
  rows: list[dict[str, Any]] = []
  start = time.perf_counter()
  last_print = {"time": start, "step": 0}

  def callback(step: int, metrics: dict[str, Any]) -> None:
    now = time.perf_counter()
    diverged = bool(rows) and train_lib.check_divergence(metrics["loss"], rows[0]["loss"], config.divergence_factor)
    final = step == config.steps - 1
    if step % config.log_every == 0 or final or diverged:
      row = {"step": step, "time": now - start, **metrics}
      rows.append(row)
      io.append_jsonl(metrics_path, row)
    if step % config.print_every == 0 or final or diverged:
      elapsed = now - last_print["time"]
      rate = (f"{(step - last_print['step']) / elapsed:.1f} steps/s" if step > last_print["step"] and elapsed > 0
              else "compiled")
      last_print.update(time=now, step=step)
      print(f"step {step:>6}/{config.steps}  loss {metrics['loss']:.4f}  acc {metrics['accuracy']:.3f}  "
            f"grad {metrics['grad_norm']:.3g}  {rate}", flush=True)

  try:
    result = train_lib.run_training(config.model, optimizer, dataset, steps=config.steps, seed=config.seed,
                                    log_every=math.gcd(config.log_every, config.print_every), callback=callback,
                                    divergence_factor=config.divergence_factor)
    evaluation = train_lib.evaluate(result.state.params, config.model, dataset, config.eval_batches)
  except KeyboardInterrupt:
    write_plots(out_dir, rows, config.model.depth)
    io.write_json(out_dir / "summary.json", {
        "status": "interrupted", "steps_logged": len(rows), "last_logged_step": rows[-1]["step"] if rows else None,
        "last_logged_loss": rows[-1]["loss"] if rows else None, "wall_time": time.perf_counter() - start})
    print(f"\ninterrupted; partial metrics.jsonl, plots and summary.json are in {out_dir}", file=sys.stderr)
    raise SystemExit(130) from None
  plots = write_plots(out_dir, rows, config.model.depth)
  last_row = result.history[-1]
  summary = {
      "status": "diverged" if result.diverged else "completed",
      "stop_reason": result.stop_reason,
      "divergence_step": result.divergence_step,
      "steps_run": result.steps_run,
      "initial_loss": result.initial_loss,
      "final_loss": result.final_loss,
      "final_accuracy": last_row["accuracy"],
      "eval_loss": evaluation["loss"],
      "eval_accuracy": evaluation["accuracy"],
      "chance_accuracy": dataset.chance_accuracy,
      "num_params": num_params,
      "wall_time": time.perf_counter() - start,
      "train_time": result.wall_time,
      "steps_per_sec": result.steps_per_sec,
  }
  io.write_json(out_dir / "summary.json", summary)
  print(common.format_table([summary], ("status", "steps_run", "initial_loss", "final_loss", "eval_loss",
                                        "eval_accuracy", "steps_per_sec", "wall_time")))
  if result.diverged:
    print(f"diverged at step {result.divergence_step}: {result.stop_reason}")
  print(f"wrote config.json, metrics.jsonl ({len(rows)} rows), summary.json and {len(plots)} plots to {out_dir}")


if __name__ == "__main__":
  common.run(main)
