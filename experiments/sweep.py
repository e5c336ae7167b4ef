"""Sweeps head dimension d_k and logit-scale rule; measures logits, entropy, saturation and gradients.

  python -m experiments.sweep                       # defaults: d_k 16..1024, rules none,sqrt,linear,qk_norm
  python -m experiments.sweep --rules=sqrt,quadratic,post_softmax --causal --out_dir=runs/sweep2

Writes results.jsonl, results.csv, config.json and PNG plots into --out_dir and
prints a table. Each head dimension compiles once (rules and seeds vmapped).
"""

from __future__ import annotations

import dataclasses
import time

from absl import flags

from experiments import common
from scaling import io
from scaling import plotting
from scaling import rules as rules_lib
from scaling import sweep as sweep_lib

_D_K = common.define_int_list("d_k", "16,32,64,128,256,512,1024", "Head dimensions to sweep.")
_RULES = common.define_enum_list("rules", "none,sqrt,linear,qk_norm", rules_lib.available_rules,
                                 "Logit-scale rules to compare.")
_SEQ_LEN = flags.DEFINE_integer("seq_len", 128, "Sequence length T (= S).", lower_bound=1)
_BATCH = flags.DEFINE_integer("batch", 4, "Sequences per seed.", lower_bound=1)
_NUM_HEADS = flags.DEFINE_integer("num_heads", 2, "Heads per sequence.", lower_bound=1)
_NUM_SEEDS = flags.DEFINE_integer("num_seeds", 8, "Independent seeds (mean and std are over these).", lower_bound=1)
_DTYPE = flags.DEFINE_enum("dtype", "float32", list(sweep_lib.DTYPES), "Dtype of q, k and v.")
_QK_STD = common.define_finite_float("qk_std", 1.0, "Std of the iid normal entries of q and k.", lower_bound=0.0)
_CAUSAL = flags.DEFINE_boolean("causal", False, "Causal masking.")
_SEED = flags.DEFINE_integer("seed", 0, "Base random seed.", lower_bound=0)
_TAU = common.define_finite_float("tau", 1.0, "Temperature of the 'temperature' rule.", positive=True)
_BASE_HEAD_DIM = flags.DEFINE_integer("base_head_dim", None, "If set, the 'linear' rule uses alpha = sqrt(this), "
                                      "so it equals 'sqrt' at this head dim (muP).", lower_bound=1)
_FLOAT32_SOFTMAX = flags.DEFINE_boolean("float32_softmax", True, "Softmax in float32 (false: in the input dtype; "
                                        "only to demonstrate low-precision failures).")
_SUBTRACT_MAX = flags.DEFINE_boolean("subtract_max", True, "Subtract the row max before exp (false: only to "
                                     "demonstrate overflow).")
_OUT_DIR = flags.DEFINE_string("out_dir", "runs/sweep", "Output directory.")

TABLE_COLUMNS = ("rule", "d_k", "logit_std", "logit_absmax", "entropy_normalized", "max_prob", "saturated_frac",
                 "softmax_jacobian_norm", "grad_norm_q", "grad_norm_logits")

PLOTS = (
    ("entropy_normalized", "attention entropy / ln T", False),
    ("logit_std", "logit std", True),
    ("max_prob", "max attention probability", False),
    ("softmax_jacobian_norm", "softmax Jacobian norm (Frobenius)", True),
    ("grad_norm_q", "|dL/dq|", True),
    ("grad_norm_k", "|dL/dk|", True),
    ("grad_norm_v", "|dL/dv|", True),
    ("grad_norm_logits", "|dL/dlogits|", True),
)


def write_plots(out_dir, rows, group_key: str = "rule", suffix: str = "") -> list[str]:
  """One PNG per metric against d_k (log2 axis), one line per group; returns the file names."""
  names = []
  for metric, label, logy in PLOTS:
    series = sweep_lib.metric_series(rows, metric, group_key)
    name = f"{metric}{suffix}.png"
    positive = all(v > 0 for _, ys, _ in series.values() for v in ys)
    plotting.line_plot(out_dir / name, {g: (x, y) for g, (x, y, _) in series.items()},
                       errors={g: e for g, (_, _, e) in series.items()}, xlabel="d_k (head dim)", ylabel=label,
                       title=f"{label} vs d_k", logx2=True, logy=logy and positive)
    names.append(name)
  return names


def main(argv):
  common.reject_extra_args(argv)
  try:
    config = sweep_lib.SweepConfig(
        d_k=tuple(_D_K.value), rules=tuple(_RULES.value), seq_len=_SEQ_LEN.value, batch=_BATCH.value,
        num_heads=_NUM_HEADS.value, num_seeds=_NUM_SEEDS.value, dtype=_DTYPE.value, qk_std=_QK_STD.value,
        causal=_CAUSAL.value, seed=_SEED.value, tau=_TAU.value, base_head_dim=_BASE_HEAD_DIM.value,
        float32_softmax=_FLOAT32_SOFTMAX.value, subtract_max=_SUBTRACT_MAX.value)
  except ValueError as e:
    common.fail(str(e))
  out_dir = common.prepare_out_dir(_OUT_DIR.value)
  io.write_json(out_dir / "config.json", dataclasses.asdict(config))
  partial = out_dir / "results.partial.jsonl"
  partial.unlink(missing_ok=True)
  progress = common.Progress(len(config.d_k), "sweep")
  start = time.perf_counter()
  rows = sweep_lib.run_sweep(config, on_row=lambda r: io.append_jsonl(partial, r),
                             on_shape=lambda d, s: progress.update(f"d_k={d} ({s:.2f}s)"))
  io.write_jsonl(out_dir / "results.jsonl", rows)
  io.write_csv(out_dir / "results.csv", rows)
  partial.unlink(missing_ok=True)
  plots = write_plots(out_dir, rows)
  print(common.format_table(rows, TABLE_COLUMNS))
  print(f"\n{len(rows)} configurations in {time.perf_counter() - start:.1f}s; wrote results.jsonl, results.csv, "
        f"config.json and {len(plots)} plots to {out_dir}")


if __name__ == "__main__":
  common.run(main)
