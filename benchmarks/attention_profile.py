"""Benchmark suite `attention_profile`: where blockwise forward+backward spends its time, against the matmul peak.

  python -m experiments.benchmark --suite=attention_profile

For each case (B, T, N, K, d_k, causal) the default path's blockwise tiles
(``scaling.attention.dispatch.blockwise_blocks``) run forward+backward (the loss
⟨out, ct⟩ with its gradients w.r.t. q, k and v, as the ``attention`` suite
times it); the suite reports the median time of ``repeats`` calls, its
fraction of the float32 matmul peak measured in the same run (FLOPs as the
``attention`` suite counts them), and a ``jax.profiler`` trace of
``profile_calls`` calls split by ``profile.profile_ops`` into matmul, layout
(copies and transposes into another layout) and other op time, with the
largest source ops. The split says why a case stays below the peak: op time
that is not matmul does no matmul FLOPs.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import statistics
import tempfile
from typing import Any

import jax

from scaling.attention import dispatch as attention_lib
from scaling.base import config as config_lib
from scaling.runs import results
from scaling.base.config import option
from scaling.base.config import Options
from benchmarks import profile as profile_lib
from benchmarks import timing
from benchmarks.implementations import attention_flops
from benchmarks.implementations import make_inputs
from benchmarks.implementations import make_step
from scaling.base.validation import ConfigError


@dataclasses.dataclass(frozen=True)
class AttentionProfileConfig(Options):
  """The profiled cases and how often each is timed and traced."""

  cases: tuple[tuple[int, int, int, int, int, bool], ...] = (
      (1, 2048, 4, 4, 64, True), (1, 2048, 4, 4, 64, False), (1, 2048, 4, 4, 128, True), (1, 2048, 8, 2, 64, True))
  """(B, T = S, N, K, d_k, causal) of each profiled case."""
  repeats: int = option(5, "Timed calls per case (the median counts).", lower=1)
  profile_calls: int = option(2, "Calls per case traced by the profiler.", lower=1)
  peak_matmul_size: int = option(2048, "Side of the float32 matmul whose GFLOP/s is the peak.", lower=1)
  seed: int = option(0, "Seed of the random inputs.", lower=0)

  def validate(self):
    for case in self.cases:
      if (not isinstance(case, tuple) or len(case) != 6 or not all(
          isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in case[:5])
          or not isinstance(case[5], bool) or case[2] % case[3]):
        raise ConfigError(f"cases must hold (B, T, N, K, d_k, causal) with K dividing N, got {case!r}")


QUICK = AttentionProfileConfig(cases=((1, 256, 2, 1, 32, True),), repeats=1, profile_calls=1, peak_matmul_size=256)
"""One tiny case for a smoke run, not a measurement."""


def profile_case(config: AttentionProfileConfig, case: tuple, peak_gflops: float, trace_dir: pathlib.Path) -> dict:
  """Time, fraction of the peak and op-time split of one case's blockwise forward+backward at the default tiles."""
  batch, seq_len, num_heads, num_kv_heads, head_dim, causal = case
  args = make_inputs(batch, seq_len, num_heads, head_dim, config.seed, num_kv_heads=num_kv_heads)
  block_q, block_k = attention_lib.blockwise_blocks(args[0].shape, args[1].shape, is_causal=causal)
  step = make_step("blockwise", "fwd+bwd", causal=causal, block_q=block_q, block_k=block_k)
  compiled = jax.jit(step).lower(*args).compile()
  jax.block_until_ready(compiled(*args))
  seconds = statistics.median(timing.time_call(compiled, args) for _ in range(config.repeats))
  flops = attention_flops(batch, seq_len, num_heads, head_dim, causal=causal, mode="fwd+bwd")
  prof = profile_lib.profile_ops(compiled, args, config.profile_calls, trace_dir)
  return {"batch": batch, "seq_len": seq_len, "num_heads": num_heads, "num_kv_heads": num_kv_heads,
          "head_dim": head_dim, "causal": causal, "blocks": f"{block_q}x{block_k}", "ms": seconds * 1e3,
          "gflops": flops / seconds / 1e9, "fraction_of_peak": flops / seconds / 1e9 / peak_gflops,
          "profile": prof}


def markdown(rows: list[dict], peak_gflops: float, load: str = "") -> str:
  """The suite's table: per case its time, fraction of the peak and op-time split, then its largest ops."""
  lines = [f"**attention profile**: blockwise forward+backward at the default tiles; fraction of peak = GFLOP/s "
           f"(4·B·N·T·S·H forward, ×0.5 causal, ×3.5 forward+backward) over the {peak_gflops:.0f} GFLOP/s float32 "
           f"matmul peak measured in the same run{load}; op-time shares from a `jax.profiler` trace (matmul = dot "
           "and matmul-library fusions, layout = copies and transposes into another layout, other = the rest):",
           "", "| B | T | N | K | d_k | mask | tiles | ms | fraction of peak | matmul | layout | other |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    shares = r["profile"]["categories"]
    lines.append(f"| {r['batch']} | {r['seq_len']} | {r['num_heads']} | {r['num_kv_heads']} | {r['head_dim']} | "
                 f"{'causal' if r['causal'] else 'none'} | {r['blocks']} | {r['ms']:.4g} | "
                 f"{r['fraction_of_peak']:.2f} | "
                 + " | ".join(f"{shares[c]['share']:.0%}" for c in profile_lib.CATEGORIES) + " |")
  lines.append("")
  for r in rows:
    top = "; ".join(f"`{op['op']}` ({op['category']}) {op['share']:.0%}" for op in r["profile"]["top_ops"][:4])
    lines.append(f"- B{r['batch']} T{r['seq_len']} N{r['num_heads']} K{r['num_kv_heads']} d{r['head_dim']} "
                 f"{'causal' if r['causal'] else 'none'}, largest source ops: {top}")
  return "\n".join(lines) + "\n"


def run(config: AttentionProfileConfig, out_dir: pathlib.Path) -> dict[str, Any]:
  """Profiles every case; writes attention_profile.json and attention_profile.md into ``out_dir``."""
  results_ = {"load_average": [os.getloadavg()[0]]}
  peak = timing.measure_matmul_peak(config.peak_matmul_size)
  rows = []
  with tempfile.TemporaryDirectory() as trace_root:
    for i, case in enumerate(config.cases):
      rows.append(profile_case(config, case, peak["gflops"], pathlib.Path(trace_root) / str(i)))
      r = rows[-1]
      shares = r["profile"]["categories"]
      print(f"{case}: {r['ms']:.4g} ms, {r['fraction_of_peak']:.2f} of peak; "
            + ", ".join(f"{c} {shares[c]['share']:.0%}" for c in profile_lib.CATEGORIES), flush=True)
  results_["load_average"].append(os.getloadavg()[0])
  out = {"config": config_lib.to_dict(config),
         "peak": peak, "cases": rows, **results_}
  results.write_json(out_dir / "attention_profile.json", out)
  (out_dir / "attention_profile.md").write_text(markdown(rows, peak["gflops"], timing.load_note(results_)))
  print(f"wrote attention_profile.json and attention_profile.md to {out_dir}")
  return out
