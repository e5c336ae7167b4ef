"""The accelerator check: the GPU attention paths run for real, then the attention and train-step throughput.

  scripts/device_check.sh [OUT_DIR]                         # on one GPU, under 8 minutes
  python scripts/device_check.py --out_dir=OUT [--dry_run]  # --dry_run: the same checks at tiny sizes on CPU

Three parts, each printed and written to OUT/device_check.json and OUT/device_check.md:

* Exactness. For every rule that is a plain scale after ``rule.prepare`` (sqrt, linear, quadratic, temperature,
  qk_norm), causal and not, GQA (N = 2K): the Pallas kernel compiled (``interpret=False``), jax.nn's cuDNN kernel
  (``implementation="cudnn"``, given q and k prepared by the rule and the rule's logit scale; half precision only)
  and the default dispatch, each against the dense path on the same inputs in float32: the output and the gradients
  w.r.t. q, k and v of ⟨out, ct⟩, as the largest absolute difference over the largest absolute reference value
  (criterion: at most ``tolerance`` for the input dtype).
* Attention throughput. Forward+backward of causal attention at ``bench_shapes``, in bfloat16 and float32: ours
  (the default dispatch), blockwise, Pallas, jax.nn's XLA and cuDNN paths (median of ``repeats`` interleaved calls,
  compilation excluded), each as a fraction of the chip's matmul peak in the same dtype, measured in this run as the
  best of several [``matmul_size``]² ``jnp.dot`` calls. FLOPs as in ``benchmarks.implementations``.
* Train-step throughput: ``benchmarks.train.throughput`` at ``train_width`` / ``train_depth`` /
  ``train_seq_len`` / ``train_batch_size``, against the float32 matmul peak timed in the same rounds.

--dry_run runs it all on the default backend (CPU) at tiny sizes, with the Pallas kernel interpreted and the cuDNN
rows skipped: it checks this script, not a GPU. Without --dry_run it stops at once unless the backend is a GPU.
"""

from __future__ import annotations

import dataclasses
import pathlib
import statistics
import sys
from typing import Any, Callable

import jax
import jax.numpy as jnp

from experiments import cli
from scaling.attention import dispatch as attention_lib
from scaling.attention import logits as logits_lib
from scaling.base import config as config_lib
from scaling.attention import pallas as pallas_lib
from scaling.runs import report
from scaling.runs import results as results_lib
from scaling.attention import rules as rules_lib
from scaling.base.config import option
from benchmarks import timing
from benchmarks import train as train_bench
from benchmarks.implementations import attention_flops

RULES = ("sqrt", "linear", "quadratic", "temperature", "qk_norm")
"""The rules that are a plain scale once ``rule.prepare`` has run: those the Pallas and cuDNN kernels compute."""
TOLERANCE = {"float32": 1e-2, "bfloat16": 3e-2, "float16": 1e-2}
"""Largest difference / largest reference value accepted per input dtype (float32 matmuls may run as TF32)."""
PATHS = ("pallas", "cudnn", "default")


@dataclasses.dataclass(frozen=True)
class Options(config_lib.Options):
  """The options of the accelerator check."""

  out_dir: str = option("runs/device_check", "Directory of device_check.json and device_check.md.")
  dry_run: bool = option(False, "Tiny sizes on the default backend (CPU), Pallas interpreted, no cuDNN.")
  check_shape: str = option("2x512x8x4x64", "BxTxNxKxH (T = S) of the exactness checks.")
  rules: tuple[str, ...] = option(RULES, "Rules of the exactness checks.", choices=RULES)
  dtypes: tuple[str, ...] = option(("bfloat16", "float32"), "Input dtypes of the checks and the benchmark.",
                                   choices=("bfloat16", "float16", "float32"))
  bench_shapes: tuple[str, ...] = option(("4x2048x16x16x64", "4x2048x16x4x128", "4x8192x16x4x128"),
                                         "BxTxNxKxH (T = S) of the timed cases.")
  repeats: int = option(5, "Timed calls per implementation (the median counts).", lower=1)
  matmul_size: int = option(8192, "Side of the matmul whose FLOP/s is the peak.", lower=1)
  train_width: int = option(1024, "Width of the model of the train-step throughput.", lower=1)
  train_depth: int = option(8, "Depth of that model.", lower=1)
  train_num_heads: int = option(8, "Heads of that model.", lower=1)
  train_seq_len: int = option(1024, "Sequence length of its batch.", lower=1)
  train_batch_size: int = option(16, "Sequences in its batch.", lower=1)

  def validate(self):
    for text in (self.check_shape, *self.bench_shapes):
      parse_shape(text)


def parse_shape(text: str) -> tuple[int, int, int, int, int]:
  """"BxTxNxKxH" -> (B, T, N, K, H); ValueError unless five positive integers with K dividing N."""
  parts = text.split("x")
  if len(parts) != 5 or not all(p.isdigit() and int(p) > 0 for p in parts):
    raise ValueError(f"a shape must be BxTxNxKxH (five positive integers), got {text!r}")
  b, t, n, k, h = map(int, parts)
  if n % k:
    raise ValueError(f"in {text!r} the key/value heads K = {k} must divide the query heads N = {n}")
  return b, t, n, k, h


DRY_RUN = dict(check_shape="1x32x4x2x16", dtypes=("float32",), bench_shapes=("1x64x4x2x16",), repeats=2,
               matmul_size=128, train_width=32, train_depth=1, train_num_heads=2, train_seq_len=16,
               train_batch_size=4)
"""The sizes --dry_run replaces."""


def _inputs(shape, dtype, seed=0):
  """q [B, T, N, H], k and v [B, T, K, H], ct [B, T, N, H]."""
  b, t, n, k, h = shape
  keys = jax.random.split(jax.random.PRNGKey(seed), 4)
  sizes = ((b, t, n, h), (b, t, k, h), (b, t, k, h), (b, t, n, h))
  return tuple(jax.random.normal(key, size, jnp.float32).astype(dtype) for key, size in zip(keys, sizes))


def jax_nn_fn(rule: str, implementation: str = "cudnn") -> Callable[..., jax.Array]:
  """jax.nn's kernel (cuDNN by default) on q and k prepared by ``rule``, at its logit and weight scale."""
  rule_obj = rules_lib.get_rule(rule)

  def fn(q, k, v, *, is_causal):
    h = q.shape[-1]
    q, k = rule_obj.prepare(q, k)
    out = jax.nn.dot_product_attention(q, k, v, scale=float(rule_obj.logit_scale(h)), is_causal=is_causal,
                                       implementation=implementation)
    return out * jnp.asarray(rule_obj.weight_scale(h), out.dtype)
  return fn


def attention_fn(path: str, rule: str, *, interpret: bool) -> Callable[..., jax.Array]:
  """(q, k, v, is_causal=) -> output of one path: "dense", "pallas", "cudnn", "default" or "blockwise"."""
  if path == "pallas":
    return lambda q, k, v, is_causal: pallas_lib.pallas_attention(q, k, v, rule=rule, is_causal=is_causal,
                                                                  interpret=interpret)
  if path == "cudnn":
    return jax_nn_fn(rule)
  implementation = {"dense": "dense", "blockwise": "blockwise", "default": None}[path]
  return lambda q, k, v, is_causal: attention_lib.dot_product_attention(q, k, v, rule=rule, is_causal=is_causal,
                                                                        implementation=implementation)


def _value_and_grads(fn, q, k, v, ct, is_causal):
  """(out, (dq, dk, dv)) of ⟨fn(q, k, v), ct⟩, in float32."""
  out, vjp = jax.vjp(lambda q, k, v: fn(q, k, v, is_causal=is_causal), q, k, v)
  grads = vjp(ct.astype(out.dtype))
  return jax.tree.map(lambda x: x.astype(jnp.float32), (out, grads))


def exactness(config: Options, *, gpu: bool) -> list[dict[str, Any]]:
  """One row per (dtype, rule, causal, path): the relative error of output and gradients against dense float32."""
  rows = []
  for dtype in config.dtypes:
    q, k, v, ct = _inputs(parse_shape(config.check_shape), jnp.dtype(dtype))
    upcast = tuple(x.astype(jnp.float32) for x in (q, k, v, ct))
    for rule in config.rules:
      for causal in (False, True):
        ref = jax.jit(lambda *a, rule=rule, causal=causal: _value_and_grads(
            attention_fn("dense", rule, interpret=not gpu), *a, causal))(*upcast)
        for path in PATHS:
          row = {"dtype": dtype, "rule": rule, "causal": causal, "path": path}
          if path == "cudnn" and (not gpu or dtype == "float32"):
            rows.append({**row, "status": "skipped", "reason": "no GPU" if not gpu else "cuDNN takes half precision"})
            continue
          if path == "default":
            row["chosen"] = attention_lib.select_implementation(
                q.shape, k.shape, logits_lib.resolve_logit_options(
                    q.shape[-1], scale=None, rule=rule, logit_soft_cap=None, logit_clamp=None, float32_softmax=True,
                    subtract_max=True), dtype=q.dtype, is_causal=causal).implementation
          try:
            got = jax.jit(lambda *a, path=path, rule=rule, causal=causal: _value_and_grads(
                attention_fn(path, rule, interpret=not gpu), *a, causal))(q, k, v, ct)
          except Exception as e:  # pylint: disable=broad-except  (a failing path is a result of the check)
            rows.append({**row, "status": "error", "reason": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"})
            continue
          errors = {}
          for name, a, b in zip(("out", "dq", "dk", "dv"), (got[0], *got[1]), (ref[0], *ref[1])):
            errors[name] = float(jnp.max(jnp.abs(a - b)) / jnp.maximum(jnp.max(jnp.abs(b)), 1e-30))
          worst = max(errors.values())
          rows.append({**row, "status": "ok" if worst <= TOLERANCE[dtype] else "FAILED", "relative_error": errors,
                       "worst": worst})
  return rows


def _median_s(compiled: dict[str, Any], args, repeats: int) -> dict[str, float]:
  """Median seconds per call of each compiled function, calls interleaved."""
  for fn in compiled.values():
    jax.block_until_ready(fn(*args))
  times = {name: [] for name in compiled}
  for _ in range(repeats):
    for name, fn in compiled.items():
      times[name].append(timing.time_call(fn, args))
  return {name: statistics.median(t) for name, t in times.items()}


def attention_throughput(config: Options, peaks: dict[str, float], *, gpu: bool) -> list[dict[str, Any]]:
  """Forward+backward of causal attention per (shape, dtype, implementation): ms and fraction of the dtype's peak."""
  rows = []
  for shape in map(parse_shape, config.bench_shapes):
    b, t, n, kh, h = shape
    for dtype in config.dtypes:
      args = _inputs(shape, jnp.dtype(dtype))
      fns = {"ours": attention_fn("default", "sqrt", interpret=not gpu),
             "blockwise": attention_fn("blockwise", "sqrt", interpret=not gpu),
             "pallas": attention_fn("pallas", "sqrt", interpret=not gpu),
             "jax_nn_xla": lambda q, k, v, is_causal: jax.nn.dot_product_attention(q, k, v, is_causal=is_causal)}
      if gpu and dtype != "float32":
        fns["jax_nn_cudnn"] = attention_fn("cudnn", "sqrt", interpret=False)
      compiled, failed = {}, {}
      for name, fn in fns.items():
        step = jax.value_and_grad(lambda q, k, v, ct, fn=fn: jnp.vdot(fn(q, k, v, is_causal=True).astype(jnp.float32),
                                                                      ct.astype(jnp.float32)), argnums=(0, 1, 2))
        try:
          compiled[name] = jax.jit(step).lower(*args).compile()
        except Exception as e:  # pylint: disable=broad-except  (reported as the row's result)
          failed[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
      seconds = _median_s(compiled, args, config.repeats)
      flops = attention_flops(b, t, n, h, causal=True, mode="fwd+bwd")
      for name in fns:
        row = {"batch": b, "seq_len": t, "num_heads": n, "num_kv_heads": kh, "head_dim": h, "dtype": dtype,
               "impl": name}
        if name in failed:
          rows.append({**row, "status": "error", "reason": failed[name]})
          continue
        s = seconds[name]
        rows.append({**row, "status": "ok", "ms": s * 1e3, "tflops": flops / s / 1e12,
                     "fraction_of_peak": flops / s / peaks[dtype]})
  return rows


def markdown(results: dict[str, Any]) -> str:
  """The three parts as Markdown tables."""
  peaks = ", ".join(f"{d} {p / 1e12:.1f} TFLOP/s" for d, p in results["matmul_peak_flops"].items())
  text = (f"device: {results['device']} ({results['backend']}{', dry run' if results['dry_run'] else ''}); "
          f"matmul peak ({results['matmul_size']}² jnp.dot, best of 5): {peaks}\n\n")
  exact = [[r["dtype"], r["rule"], "causal" if r["causal"] else "none", r["path"], r.get("chosen", ""), r["status"],
            "" if "worst" not in r else f"{r['worst']:.1e}", r.get("reason", "")] for r in results["exactness"]]
  text += report.markdown_table(("dtype", "rule", "mask", "path", "chosen", "status", "max rel. error", "reason"),
                                exact)
  text += ("\nmax rel. error = largest |difference| over largest |value| of the output and of dq, dk, dv against "
           "the dense path in float32 (criterion: at most " + ", ".join(f"{t:g} in {d}" for d, t in TOLERANCE.items())
           + ").\n\n")
  bench = [[r["batch"], r["seq_len"], r["num_heads"], r["num_kv_heads"], r["head_dim"], r["dtype"], r["impl"],
            f"{r['ms']:.3g}" if "ms" in r else r["status"],
            f"{r['fraction_of_peak']:.2f}" if "fraction_of_peak" in r else r.get("reason", "")]
           for r in results["attention"]]
  text += report.markdown_table(("B", "T", "N", "K", "d_k", "dtype", "impl", "fwd+bwd ms", "fraction of peak"),
                                bench)
  text += "\ncausal; median of interleaved calls; fraction of the matmul peak in the same dtype.\n\n"
  thr = results["train"]
  model = thr["model"]
  text += (f"train step (width {model['width']}, depth {model['depth']}, batch {model['batch_size']} × "
           f"{model['seq_len']} tokens, float32): {thr['step_s'] * 1e3:.3g} ms, {thr['tokens_per_s']:.0f} tokens/s, "
           f"{thr['fraction_of_peak']:.2f} of the float32 matmul peak\n")
  return text


def run(config: Options, out_dir: pathlib.Path | None = None) -> dict[str, Any]:
  """Runs the three parts; writes device_check.json and device_check.md; raises ValueError when a check failed."""
  del out_dir  # the script's own --out_dir
  backend = jax.default_backend()
  gpu = backend == "gpu"
  if config.dry_run:
    config = dataclasses.replace(config, **DRY_RUN)
  elif not gpu:
    raise ValueError(f"the default backend is {backend!r}, not a GPU: run with --dry_run to check the script on CPU")
  out = pathlib.Path(config.out_dir)
  out.mkdir(parents=True, exist_ok=True)
  print(f"device {jax.devices()[0].device_kind} ({backend}){', dry run' if config.dry_run else ''}", flush=True)
  exact = exactness(config, gpu=gpu)
  for r in exact:
    detail = f"{r['worst']:.1e}" if "worst" in r else r.get("reason", "")
    print(f"exactness {r['dtype']} {r['rule']} causal={r['causal']} {r['path']}: {r['status']} {detail}", flush=True)
  peaks = {dtype: timing.measure_matmul_peak(config.matmul_size, dtype=dtype)["gflops"] * 1e9
           for dtype in dict.fromkeys((*config.dtypes, "float32"))}
  print("matmul peak: " + ", ".join(f"{d} {p / 1e12:.2f} TFLOP/s" for d, p in peaks.items()), flush=True)
  bench = attention_throughput(config, peaks, gpu=gpu)
  train_config = dataclasses.replace(train_bench.TrainBenchConfig(), width=config.train_width,
                                     depth=config.train_depth, num_heads=config.train_num_heads,
                                     seq_len=config.train_seq_len, batch_size=config.train_batch_size,
                                     matmul_size=config.matmul_size)
  thr = train_bench.throughput(train_config)
  results = {"device": jax.devices()[0].device_kind, "backend": backend, "dry_run": config.dry_run,
             "jax": jax.__version__, "config": dataclasses.asdict(config), "matmul_size": config.matmul_size,
             "matmul_peak_flops": peaks, "exactness": exact, "attention": bench, "train": thr}
  results_lib.write_json(out / "device_check.json", results)
  text = markdown(results)
  (out / "device_check.md").write_text(text)
  print(text, flush=True)
  failed = [r for r in exact if r["status"] in ("FAILED", "error")]
  if failed:
    raise ValueError(f"{len(failed)} exactness check(s) failed; see {out / 'device_check.md'}")
  return results


def main(argv: list[str] | None = None) -> int:
  return cli.main(Options, run, argv, __doc__, needs_out_dir=False)


if __name__ == "__main__":
  sys.exit(main())
