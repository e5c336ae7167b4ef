"""Benchmark suite `train`: training throughput against the matmul peak, and the vmapped learning-rate grid.

Two measurements, each side by side in one run:

* Throughput. Train steps per second of one model on a fixed batch
  (compilation excluded), and the model FLOP/s they achieve as a fraction of
  the machine's float32 matmul peak, the best of several large ``jnp.dot``
  calls timed in the same rounds as the steps (each round: the matmul calls,
  then each variant's steps), so that a machine whose speed drifts from minute
  to minute slows both alike. Two variants of the step, timed in
  interleaved rounds (best round each): the step that returns every metric
  (what a logged step runs) and the step that returns only the loss and takes
  over the old state's buffers (``donate_argnums``; what
  ``scaling.training.loop.run.run_training`` runs between logged steps). Model FLOPs per
  step (forward + backward):

      6 · P_matmul · B · T  +  12 · depth · B · T² · N · H

  where P_matmul counts every parameter except the embedding tables (a lookup
  does no multiply-adds; the readout is a matmul and counts), 6 = 2 (multiply +
  add) × 3 (forward, gradient of the input, gradient of the weight), and the
  second term is the attention's two [T, T] matmuls (q·kᵀ and weights·v,
  2 · B · N · T² · H FLOPs each, forward + backward = 3×) counted over the full
  T × T square that dense attention computes, causal mask or not (Kaplan et al.
  2020, "Scaling Laws for Neural Language Models", §2.1, count the causal half;
  that would be 6 · depth · B · T² · N · H). Norms, softmax, the loss and the
  optimizer are not counted.

* The profile of the loss-only, donating step (``benchmarks.profile``): the time of XLA's ops
  in ``profile_calls`` traced calls, by category (matmul, layout copies and transposes, other) and the largest
  source ops: where the FLOP/s short of the matmul peak go.

* The learning-rate grid. The same runs (learning rates × seeds, same steps,
  same data) trained as one vmapped program (``scaling.training.loop.run.run_training`` with a grid, its members in
  chunks by ``default_grid_chunk``; where that makes chunks, the grid vmapped all at once is timed too)
  and one at a time, each with its own jitted init and step, as separate
  scripts would: cold (compilation included) and warm (compiled functions
  reused; the best of ``timed_rounds`` rounds, each calling every method in
  turn). A third row, one at a time with a single shared compiled step (the
  learning rate is data in the optimizer state), separates what vmapping saves
  in compilation from what it saves in execution. Both methods must give the
  same losses (``max_rel_diff``). Every method runs the loss-only, donating
  step, and the grid logs only its first and last steps. The per-step table
  puts the warm times side by side: one step of the whole grid against one
  step of every run in a loop.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import pathlib
import tempfile
import textwrap
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from scaling.training.data.config import DataConfig
from scaling.training.model import transformer as model_lib
from scaling.training.model.config import ModelConfig
from scaling.training.model.family import ModelFamily
from scaling.training.optimizer import OptimizerConfig
from scaling.runs import plotting
from scaling.runs import report
from scaling.runs import results as results_lib
from scaling.training.loop import initialization as init_lib
from scaling.training.loop import run as loop_lib
from scaling.training.loop import programs as programs_lib
from scaling.training.loop import step as step_lib
from scaling.training.loop import transformer_step
from scaling.base.config import option
from scaling.base.config import Options
from benchmarks import profile as profile_lib
from benchmarks import timing
from scaling.studies.grid.points import lr_grid
from scaling.base.validation import ConfigTypeError

EMBEDDING_TABLES = ("embed", "pos_embed")


@dataclasses.dataclass(frozen=True)
class TrainBenchConfig(Options):
  """Sizes of the two measurements."""

  # Throughput.
  width: int = option(256, "Width of the model whose throughput is timed.", lower=1)
  depth: int = option(4, "Depth of that model.", lower=1)
  num_heads: int = option(4, "Heads of that model.", lower=1)
  seq_len: int = option(128, "Sequence length of its batch.", lower=1)
  batch_size: int = option(16, "Sequences in its batch.", lower=1)
  timed_steps: int = option(5, "Steps per timed round.", lower=1)
  timed_rounds: int = option(5, "Timed rounds, each timing the peak's matmul and then every step variant; also rounds "
                              "of warm calls of the grid's methods (the best counts).", lower=1)
  matmul_size: int = option(2048, "Side of the float32 matmul whose FLOP/s is the peak.", lower=1)
  matmul_repeats: int = option(5, "Timed calls of that matmul per round (the best of all counts).", lower=1)
  profile_calls: int = option(3, "Calls of the loss-only step traced by the profile.", lower=1)
  # Learning-rate grid: learning rates × seeds, and the model they train.
  grid_log2_lrs: tuple[float, ...] = option((-12.0, -11.0, -10.0, -9.0, -8.0, -7.0, -6.0, -5.0),
                                            "log2 of the grid's learning rates.")
  grid_seeds: tuple[int, ...] = option((0, 1), "Seeds of the grid.", lower=0)
  grid_width: int = option(64, "Width of the grid's model.", lower=1)
  grid_depth: int = option(2, "Depth of the grid's model.", lower=1)
  grid_seq_len: int = option(32, "Sequence length of the grid's batches.", lower=1)
  grid_batch_size: int = option(8, "Sequences in the grid's batches.", lower=1)
  grid_steps: int = option(30, "Training steps of every run of the grid.", lower=1)
  shared_compile_row: bool = option(True, "Also time the runs one at a time sharing one compiled step.")


QUICK = TrainBenchConfig(width=32, depth=1, num_heads=2, seq_len=16, batch_size=4, timed_steps=2, timed_rounds=2,
                         matmul_size=512, matmul_repeats=3, profile_calls=1, grid_width=16, grid_depth=1, grid_seq_len=8,
                         grid_batch_size=2, grid_log2_lrs=(-8.0, -6.0), grid_seeds=(0,), grid_steps=5,
                         shared_compile_row=False)
"""Tiny sizes for a smoke run, not a measurement."""


def matmul_params(params: Any) -> int:
  """Parameters that take part in matmuls: all but the embedding tables."""
  return sum(int(v.size) for k, v in params.items() if k not in EMBEDDING_TABLES for v in jax.tree.leaves(v))


def flops_per_step(config: ModelConfig, params: Any, batch_size: int, seq_len: int) -> dict[str, float]:
  """Model FLOPs of one training step (module docstring): dense, attention and total."""
  tokens = batch_size * seq_len
  dense = 6.0 * matmul_params(params) * tokens
  attention = 12.0 * config.depth * batch_size * seq_len**2 * config.num_heads * config.head_dim
  return {"dense": dense, "attention": attention, "total": dense + attention}


STEP_VARIANTS = {"every_metric": dict(metrics=None, donate=False), "loss_only_donated": dict(metrics=("loss",),
                                                                                           donate=True)}
"""The train steps timed by ``throughput``: ``scaling.training.loop.step.make_train_step`` options."""


def _throughput_model(config: TrainBenchConfig):
  """(model config, optimizer config, the fixed batch) of the throughput measurement."""
  family = ModelFamily(depth=config.depth, num_heads=config.num_heads, base_width=config.width)
  dataset = DataConfig(task="induction", seq_len=config.seq_len, batch_size=config.batch_size).make()
  model_config = family.model_config("sp", config.width, vocab_size=dataset.vocab_size, max_len=config.seq_len)
  return model_config, OptimizerConfig(learning_rate=1e-3), dataset.batch(0)


def throughput(config: TrainBenchConfig) -> dict[str, Any]:
  """Steps/s and FLOP/s of one model on a fixed batch, compilation excluded, for each of ``STEP_VARIANTS``, against
  the matmul peak timed between them.

  In each of ``timed_rounds`` rounds, ``matmul_repeats`` calls of the peak's matmul, then ``timed_steps`` steps of
  each variant in turn; the fastest matmul call of all rounds is the peak and the fastest round of each variant
  its step time, so that peak and steps are timed over the same minutes of a machine whose speed drifts.

  Returns:
    The loss-only, donating step's values at the top level, both variants under ``variants``,
    ``matmul_peak_flops_per_s`` and, per round, ``rounds`` (the round's peak and each variant's fraction of it).
  """
  model_config, opt, batch = _throughput_model(config)
  dot, dot_args = timing.matmul_call(config.matmul_size)
  steps, states, first_step_s = {}, {}, {}
  for name, options in STEP_VARIANTS.items():
    steps[name] = step_lib.make_train_step(model_config, opt, **options)
    start = time.perf_counter()
    states[name], metrics = steps[name](init_lib.make_init(model_config, opt)(0, 1e-3), batch)
    jax.block_until_ready(metrics)
    first_step_s[name] = time.perf_counter() - start
  params = states["every_metric"].params
  flops = flops_per_step(model_config, params, config.batch_size, config.seq_len)
  rounds = []
  for _ in range(config.timed_rounds):  # interleaved, so that the peak and both variants see the same machine
    peak_s = min(timing.time_call(dot, dot_args) for _ in range(config.matmul_repeats))
    row = {"peak_flops_per_s": timing.matmul_flops(config.matmul_size) / peak_s, "step_s": {}}
    for name, step in steps.items():
      start = time.perf_counter()
      for _ in range(config.timed_steps):
        states[name], metrics = step(states[name], batch)
      jax.block_until_ready((states[name], metrics))
      row["step_s"][name] = (time.perf_counter() - start) / config.timed_steps
    row["fraction_of_peak"] = {name: flops["total"] / t / row["peak_flops_per_s"] for name, t in row["step_s"].items()}
    rounds.append(row)
  peak = max(r["peak_flops_per_s"] for r in rounds)
  best = {name: min(r["step_s"][name] for r in rounds) for name in STEP_VARIANTS}
  variants = {name: {"first_step_s": first_step_s[name], "step_s": best[name], "steps_per_s": 1.0 / best[name],
                     "tokens_per_s": config.batch_size * config.seq_len / best[name],
                     "flops_per_s": flops["total"] / best[name], "fraction_of_peak": flops["total"] / best[name] / peak,
                     "median_round_fraction": float(np.median([r["fraction_of_peak"][name] for r in rounds]))}
              for name in STEP_VARIANTS}
  return {"model": {"width": config.width, "depth": config.depth, "num_heads": model_config.num_heads,
                    "head_dim": model_config.head_dim, "vocab_size": model_config.vocab_size,
                    "batch_size": config.batch_size, "seq_len": config.seq_len,
                    "params": model_lib.count_params(params), "matmul_params": matmul_params(params)},
          "flops_per_step": flops, "matmul_peak_flops_per_s": peak, "rounds": rounds, "variants": variants,
          **variants["loss_only_donated"]}


def profile(config: TrainBenchConfig, trace_dir: pathlib.Path) -> dict[str, Any]:
  """Op time of the loss-only step of the throughput model by category and source op (``profile.profile_ops``).

  The step is compiled without donation, so that the traced calls can reuse one state.
  """
  model_config, opt, batch = _throughput_model(config)
  state = init_lib.make_init(model_config, opt)(0, 1e-3)
  step = jax.jit(functools.partial(transformer_step.train_step, model=model_lib.Transformer(model_config),
                                   optimizer=programs_lib.optimizer_for(model_config, opt), opt_config=opt,
                                   metrics=("loss",))).lower(state, batch).compile()
  jax.block_until_ready(step(state, batch))
  return profile_lib.profile_ops(step, (state, batch), config.profile_calls, trace_dir)


def _fresh_fns(model_config, opt):
  """A newly jitted (init, step) pair of one run, as a separate script would compile it (loss-only, donating step)."""
  init = jax.jit(lambda seed, lr: init_lib.init_train_state(seed, model_config, opt, lr))
  step = jax.jit(functools.partial(transformer_step.train_step, model=model_lib.Transformer(model_config),
                                   optimizer=programs_lib.optimizer_for(model_config, opt), opt_config=opt,
                                   metrics=("loss",)), donate_argnums=0)
  return init, step


def _one_at_a_time(model_config, opt, dataset, lrs, seeds, steps, fns=None):
  """Trains each (lr, seed) on its own; ``fns`` reuses compiled (init, step) pairs, None compiles new ones per run.

  Returns:
    (losses [steps, M], the (init, step) pairs used).
  """
  losses, used = [], []
  for i, (lr, seed) in enumerate(zip(lrs, seeds)):
    init, step = _fresh_fns(model_config, opt) if fns is None else fns[i]
    used.append((init, step))
    state = init(jnp.int32(seed), jnp.float32(lr))
    run = []
    for t in range(steps):
      state, metrics = step(state, dataset.batch(t, int(seed)))
      run.append(metrics["loss"])
    losses.append(jnp.stack(run))
  return np.asarray(jax.device_get(jnp.stack(losses, axis=1)), np.float64), used


def grid_comparison(config: TrainBenchConfig) -> dict[str, Any]:
  """The vmapped grid against the same runs one at a time, cold and warm."""
  family = ModelFamily(depth=config.grid_depth, base_width=config.grid_width, num_heads=2)
  dataset = DataConfig(task="recall", seq_len=config.grid_seq_len, batch_size=config.grid_batch_size).make()
  model_config = family.model_config("mup", config.grid_width, vocab_size=dataset.vocab_size,
                                     max_len=config.grid_seq_len)
  steps = config.grid_steps
  opt = OptimizerConfig(steps=steps)
  lrs, seeds = lr_grid(config.grid_log2_lrs, config.grid_seeds)
  chunk = step_lib.default_grid_chunk(model_config, len(lrs), devices=jax.device_count())

  def vmapped(grid_chunk=None):
    runs = loop_lib.Runs(seed=seeds, learning_rates=lrs, chunk=grid_chunk)
    options = loop_lib.RunOptions(record=("loss",), log_every=steps, stop_on_divergence=False)
    return loop_lib.run_training(model_config, opt, dataset, runs, options).records["loss"]

  timings = {}
  loop_lib.clear_caches()
  jax.clear_caches()
  # Both methods' data samplers are compiled outside the timings (they are shared by every width).
  dataset.batch(0)
  step_lib.grid_batches(dataset, 0, jnp.asarray(seeds))
  fast, cold = timing.timed(vmapped)
  timings["vmapped"] = {"cold_s": cold}
  all_at_once = functools.partial(vmapped, len(lrs))
  if chunk is not None:  # the default runs the members in chunks: all of them at once beside it
    _, cold = timing.timed(all_at_once)
    timings["vmapped_all_at_once"] = {"cold_s": cold}
  (slow, fns), cold = timing.timed(lambda: _one_at_a_time(model_config, opt, dataset, lrs, seeds, steps))
  timings["one_at_a_time"] = {"cold_s": cold}
  warm_fns = {"vmapped": vmapped,
              "one_at_a_time": lambda: _one_at_a_time(model_config, opt, dataset, lrs, seeds, steps, fns)}
  if "vmapped_all_at_once" in timings:
    warm_fns["vmapped_all_at_once"] = all_at_once
  if config.shared_compile_row:
    shared = [_fresh_fns(model_config, opt)] * len(lrs)
    _, cold = timing.timed(lambda: _one_at_a_time(model_config, opt, dataset, lrs, seeds, steps, shared))
    timings["one_at_a_time_shared_compile"] = {"cold_s": cold}
    warm_fns["one_at_a_time_shared_compile"] = lambda: _one_at_a_time(model_config, opt, dataset, lrs, seeds, steps,
                                                                      shared)
  # Warm: the best of timed_rounds rounds, each calling every method in turn (so that all see the same machine;
  # other work on it only adds time).
  for name in warm_fns:
    timings[name]["warm_s"] = float("inf")
  for _ in range(config.timed_rounds):
    for name, fn in warm_fns.items():
      timings[name]["warm_s"] = min(timings[name]["warm_s"], timing.timed(fn)[1])
  finite = np.isfinite(slow) & np.isfinite(fast)
  max_rel = float(np.max(np.abs(fast - slow)[finite] / (np.abs(slow[finite]) + 1e-12))) if finite.any() else 0.0
  shared = timings.get("one_at_a_time_shared_compile")
  per_step = {"vmapped_grid_step_s": timings["vmapped"]["warm_s"] / steps,
              "loop_of_runs_step_s": timings["one_at_a_time"]["warm_s"] / steps}
  per_step["loop_over_vmapped"] = per_step["loop_of_runs_step_s"] / per_step["vmapped_grid_step_s"]
  if "vmapped_all_at_once" in timings:
    per_step["all_at_once_step_s"] = timings["vmapped_all_at_once"]["warm_s"] / steps
    per_step["loop_over_all_at_once"] = per_step["loop_of_runs_step_s"] / per_step["all_at_once_step_s"]
  if shared:
    per_step["loop_shared_compile_step_s"] = shared["warm_s"] / steps
    per_step["loop_shared_compile_over_vmapped"] = per_step["loop_shared_compile_step_s"] / per_step[
        "vmapped_grid_step_s"]
  return {"per_step": per_step, "grid": {"width": config.grid_width, "depth": config.grid_depth, "seq_len": config.grid_seq_len,
                   "batch_size": config.grid_batch_size, "log2_lrs": list(config.grid_log2_lrs),
                   "seeds": list(config.grid_seeds), "runs": len(lrs), "steps": steps, "chunk": chunk},
          "timings": timings, "max_rel_diff": max_rel,
          "speedup_cold": timings["one_at_a_time"]["cold_s"] / timings["vmapped"]["cold_s"],
          "speedup_warm": timings["one_at_a_time"]["warm_s"] / timings["vmapped"]["warm_s"],
          "speedup_cold_vs_shared_compile": shared["cold_s"] / timings["vmapped"]["cold_s"] if shared else None}


def _figure(path: pathlib.Path, peak: float, thr: dict[str, Any], grid: dict[str, Any]) -> None:
  """Left: achieved FLOP/s against the matmul peak. Right: grid wall times, cold and warm."""
  fig, axes = plotting.grid_figure(1, 2, width=5.0, height=3.6)
  ax = axes[0][0]
  ax.bar([0, 1], [thr["flops_per_s"] / 1e9, peak / 1e9], color=["tab:blue", "tab:gray"])
  ax.set_xticks([0, 1], ["training step", "matmul peak"])
  ax.set_ylabel("GFLOP/s (float32)")
  ax.set_title(f"{thr['steps_per_s']:.2f} steps/s = {100 * thr['fraction_of_peak']:.0f}% of peak")
  ax = axes[0][1]
  names = list(grid["timings"])
  x = np.arange(len(names))
  ax.bar(x - 0.2, [grid["timings"][n]["cold_s"] for n in names], 0.4, label="cold (incl. compilation)")
  ax.bar(x + 0.2, [grid["timings"][n]["warm_s"] for n in names], 0.4, label="warm")
  ax.set_xticks(x, [textwrap.fill(n.replace("one_at_a_time", "1-at-a-time").replace("_", " "), 12) for n in names],
                fontsize=8)
  ax.set_ylabel("wall time (s)")
  ax.legend(fontsize=7)
  ax.set_title(f"{grid['grid']['runs']} runs: vmapped {grid['speedup_cold']:.1f}x cold, "
               f"{grid['speedup_warm']:.1f}x warm", fontsize=9)
  plotting.save_figure(fig, path)


def run(config: TrainBenchConfig, out_dir: pathlib.Path) -> dict:
  """Runs both measurements, prints tables, writes train.json, train.md and train.png into ``out_dir``.

  Args:
    config: the sizes (``QUICK`` for a smoke run).
    out_dir: the output folder (it must exist).

  Returns:
    The headline numbers: steps/s and fraction of peak, the grid's speedups and its per-step ratio.
  """
  if not isinstance(config, TrainBenchConfig):
    raise ConfigTypeError(f"config must be a TrainBenchConfig, got {type(config).__name__}")
  load_before = os.getloadavg()[0]
  thr = throughput(config)
  peak = thr["matmul_peak_flops_per_s"]
  with tempfile.TemporaryDirectory() as trace_dir:
    prof = profile(config, pathlib.Path(trace_dir))
  grid = grid_comparison(config)
  results = {"config": dataclasses.asdict(config), "devices": [str(d) for d in jax.devices()],
             "device_kind": jax.devices()[0].device_kind, "matmul_peak_flops_per_s": peak,
             "matmul_size": config.matmul_size, "throughput": thr,
             "profile": prof, **grid,
             "load_average": [load_before, os.getloadavg()[0]]}
  m = thr["model"]
  print(f"throughput: width {m['width']}, depth {m['depth']}, {m['num_heads']} heads x {m['head_dim']}, "
        f"batch {m['batch_size']} x {m['seq_len']} tokens, {m['params']} params")
  print(report.table([{"step": name, "steps_per_s": v["steps_per_s"], "tokens_per_s": v["tokens_per_s"],
                       "model_GFLOP_per_s": v["flops_per_s"] / 1e9, "peak_GFLOP_per_s": peak / 1e9,
                       "fraction_of_peak": v["fraction_of_peak"]} for name, v in thr["variants"].items()],
                     ("step", "steps_per_s", "tokens_per_s", "model_GFLOP_per_s", "peak_GFLOP_per_s",
                      "fraction_of_peak"), floatfmt=".3g"))
  print(_profile_sentence(prof))
  rows = [{"method": k, **v} for k, v in grid["timings"].items()]
  g = grid["grid"]
  print(f"\nlearning-rate grid: {len(g['log2_lrs'])} learning rates x {len(g['seeds'])} seeds = {g['runs']} runs, "
        f"{g['steps']} steps, width {g['width']}")
  print(report.table(rows, ("method", "cold_s", "warm_s"), floatfmt=".2f"))
  print(f"train: the vmapped grid is {grid['speedup_cold']:.1f}x faster cold (compilation included) and "
        f"{grid['speedup_warm']:.1f}x faster warm than one run at a time (max relative loss difference "
        f"{grid['max_rel_diff']:.1e})")
  ps = grid["per_step"]
  rows = [(f"vmapped grid in chunks of {g['chunk']}" if g["chunk"] else "vmapped grid", "vmapped_grid_step_s"),
          ("vmapped grid, all members at once", "all_at_once_step_s"), ("loop of runs", "loop_of_runs_step_s"),
          ("loop, one shared compiled step", "loop_shared_compile_step_s")]
  print(report.table([{"method": label, "ms_per_step_of_all_runs": 1e3 * ps[key]} for label, key in rows if key in ps],
                     ("method", "ms_per_step_of_all_runs"), floatfmt=".1f"))
  print(f"train: per step (warm), the loop of separate runs takes {ps['loop_over_vmapped']:.2f}x the time of the "
        f"vmapped grid" + (f" ({ps['loop_shared_compile_over_vmapped']:.2f}x with one shared compiled step)"
                           if "loop_shared_compile_over_vmapped" in ps else "")
        + (f"; {ps['loop_over_all_at_once']:.2f}x the time of the grid vmapped all at once"
           if "loop_over_all_at_once" in ps else ""))
  if grid["speedup_cold_vs_shared_compile"] is not None:
    print(f"train: against one run at a time sharing one compiled step, the vmapped grid is "
          f"{grid['speedup_cold_vs_shared_compile']:.1f}x faster cold")
  results_lib.write_json(out_dir / "train.json", results)
  _figure(out_dir / "train.png", peak, thr, grid)
  markdown = readme_markdown(results)
  (out_dir / "train.md").write_text(markdown)
  return {"steps_per_s": thr["steps_per_s"], "fraction_of_peak": thr["fraction_of_peak"],
          "speedup_cold": grid["speedup_cold"], "speedup_warm": grid["speedup_warm"],
          "grid_loop_over_vmapped_per_step": grid["per_step"]["loop_over_vmapped"]}


_VARIANT_LABELS = {"every_metric": "every metric", "loss_only_donated": "loss only, state donated"}
_GRID_LABELS = {"vmapped": "vmapped grid", "vmapped_all_at_once": "vmapped grid, all members at once",
                "one_at_a_time": "one run at a time",
                "one_at_a_time_shared_compile": "one at a time, one shared compiled step"}


def readme_markdown(results: dict[str, Any]) -> str:
  """The measurements of ``results`` (train.json) as Markdown for the docs' generated section."""
  thr, peak = results["throughput"], results["matmul_peak_flops_per_s"]
  m, g = thr["model"], results["grid"]
  lines = [f"**train**: a width-{m['width']}, depth-{m['depth']} model ({m['num_heads']} heads × {m['head_dim']}, "
           f"batch {m['batch_size']} × {m['seq_len']} tokens, {m['params'] / 1e6:.1f} M parameters); model FLOPs = "
           f"6·params·tokens + attention, {thr['flops_per_step']['total'] / 1e9:.1f} GFLOP per step; peak = the "
           f"best {results['matmul_size']}² float32 matmul of {len(thr['rounds'])} rounds that time it between the steps, "
           f"{peak / 1e9:.0f} GFLOP/s" + timing.load_note(results) + ":", ""]
  lines.append(report.markdown_table(
      ("train step", "steps/s", "GFLOP/s", "fraction of peak", "median of the rounds' fractions"),
      [(_VARIANT_LABELS.get(name, name), f"{v['steps_per_s']:.2f}", f"{v['flops_per_s'] / 1e9:.0f}",
        f"{v['fraction_of_peak']:.2f}", f"{v['median_round_fraction']:.2f}") for name, v in thr["variants"].items()]))
  if "profile" in results:
    lines.append(_profile_sentence(results["profile"]))
    lines.append("")
  lines.append(f"Learning-rate grid: {len(g['log2_lrs'])} learning rates × {len(g['seeds'])} seeds = {g['runs']} "
               f"runs of {g['steps']} steps, width {g['width']}, depth {g['depth']} (same losses to "
               f"{results['max_rel_diff']:.0e} relative):")
  lines.append("")
  rows = []
  labels = {**_GRID_LABELS, **({"vmapped": f"vmapped grid in chunks of {g['chunk']} (default)"}
                               if g.get("chunk") is not None else {})}
  for name, t in results["timings"].items():
    per_step = f"{1e3 * t['warm_s'] / g['steps']:.1f}"
    rows.append((labels.get(name, name), f"{t['cold_s']:.1f}", f"{t['warm_s']:.2f}", per_step))
  lines.append(report.markdown_table(("method", "cold s (with compilation)", "warm s", "warm ms per step of all runs"),
                                     rows))
  lines.append(f"Vmapped, the grid is **{results['speedup_cold']:.1f}× faster cold** and "
               f"{results['speedup_warm']:.2f}× faster warm than one run at a time; per step (warm) the loop of "
               f"separate runs takes **{results['per_step']['loop_over_vmapped']:.2f}×** the time of the vmapped grid"
               + (f" ({results['per_step']['loop_shared_compile_over_vmapped']:.2f}× when the runs share one "
                  f"compiled step)" if "loop_shared_compile_over_vmapped" in results["per_step"] else "")
               + (f"; it takes {results['per_step']['loop_over_all_at_once']:.2f}× the time of the grid vmapped "
                  f"all at once (whose cold time was taken right after the default's, reusing its compiled init)"
                  if "loop_over_all_at_once" in results["per_step"] else "") + ".")
  return "\n".join(lines) + "\n"



def _profile_sentence(prof: dict[str, Any]) -> str:
  """The profile in one paragraph: op time by category, then the largest source ops."""
  cats = prof["categories"]
  parts = ", ".join(f"{name} {cats[name]['share']:.0%} ({cats[name]['ms_per_call']:.3g} ms)"
                    for name in profile_lib.CATEGORIES)
  ops = "; ".join(f"`{r['op']}` ({r['category']}) {r['share']:.0%}" for r in prof["top_ops"])
  return (f"Profile of the loss-only step ({prof['calls']} traced call(s), {prof['op_ms_per_call']:.3g} ms of XLA op "
          f"time per call in {prof['wall_ms_per_call']:.3g} ms of wall time; matmul = dot and matmul-library "
          f"fusions, layout = copies and transposes into another layout): {parts}. Largest source ops (per JAX op, "
          f"blocks together): {ops}.")
