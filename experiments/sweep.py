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
from scaling import parametrization as parametrization_lib
from scaling import plotting
from scaling import rules as rules_lib
from scaling import sweep as sweep_lib

_D_K = common.define_int_list("d_k", "16,32,64,128,256,512,1024", "Head dimensions to sweep.")
_RULES = common.define_enum_list("rules", "none,sqrt,linear,qk_norm",
                                 lambda: (*rules_lib.available_rules(), sweep_lib.PARAM_RULE),
                                 "Logit-scale rules to compare ('param': the parametrization's, width mode only).")
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
_PARAMETRIZATION = common.define_enum_list(
    "parametrization", None, parametrization_lib.available_parametrizations,
    "Width mode: q, k, v are unit-variance inputs of --width projected through weights initialized by each of "
    "these parametrizations (instead of iid with --qk_std). Rule 'param' = the parametrization's own rule, "
    "the default rule in width mode.")
_WIDTH = common.define_int_list("width", None, "Width mode: model widths (input dimension of the projections).")
_BASE_WIDTH = flags.DEFINE_integer("base_width", 64, "Width mode: base width of the parametrization.", lower_bound=1)
_ZERO_QUERY = flags.DEFINE_boolean("zero_query", False, "Width mode: zero-initialized W_q (a muP option).")
_ATTENTION = flags.DEFINE_enum("attention", "dense", list(sweep_lib.ATTENTION_IMPLEMENTATIONS),
                               "dense, or blockwise: online softmax and statistics accumulated per block of "
                               "query rows (memory ~ T*block instead of T^2).")
_BLOCK_SIZE = flags.DEFINE_integer("block_size", 128, "Tile length of --attention=blockwise.", lower_bound=1)
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


SUMMARY_PANELS = ("entropy_normalized", "max_prob", "logit_std", "grad_norm_q")


def _label(row, width_mode: bool, one_rule: bool) -> str:
  """The legend label of a row's line."""
  if not width_mode:
    return row["rule"]
  label = f"{row['parametrization']} w={row['width']}"
  return label if one_rule else f"{label} {row['rule']}"


def write_plots(out_dir, rows) -> list[str]:
  """One PNG per metric against d_k (log2 axis), one line per rule (and parametrization, width)."""
  width_mode = "parametrization" in rows[0]
  one_rule = len({r["rule"] for r in rows}) == 1
  rows = [{**r, "line": _label(r, width_mode, one_rule)} for r in rows]
  names = []
  fig, axes = plotting.grid_figure(2, 2)
  for metric, label, logy in PLOTS:
    series = sweep_lib.metric_series(rows, metric, "line")
    positive = all(v > 0 for _, ys, _ in series.values() for v in ys)
    kwargs = dict(errors={g: e for g, (_, _, e) in series.items()}, xlabel="d_k (head dim)", ylabel=label,
                  title=f"{label} vs d_k", logx2=True, logy=logy and positive)
    lines = {g: (x, y) for g, (x, y, _) in series.items()}
    plotting.line_plot(out_dir / f"{metric}.png", lines, **kwargs)
    names.append(f"{metric}.png")
    if metric in SUMMARY_PANELS:
      i = SUMMARY_PANELS.index(metric)
      plotting.line_plot(None, lines, ax=axes[i // 2][i % 2], **kwargs)
  plotting.save_figure(fig, out_dir / "summary.png")
  return names + ["summary.png"]


def _configs() -> list[sweep_lib.SweepConfig]:
  """One SweepConfig per (parametrization, width) in width mode, else one iid config; fails on bad flags."""
  params, widths = _PARAMETRIZATION.value, _WIDTH.value
  if (params is None) != (widths is None):
    common.fail("--parametrization and --width go together (width mode); give both or neither")
  if params is None and _ZERO_QUERY.value:
    common.fail("--zero_query needs --parametrization and --width")
  rules = _RULES.value
  if params is not None and not flags.FLAGS["rules"].present:
    rules = [sweep_lib.PARAM_RULE]
  base = dict(d_k=tuple(_D_K.value), rules=tuple(dict.fromkeys(rules)), seq_len=_SEQ_LEN.value, batch=_BATCH.value,
              num_heads=_NUM_HEADS.value, num_seeds=_NUM_SEEDS.value, dtype=_DTYPE.value, qk_std=_QK_STD.value,
              causal=_CAUSAL.value, seed=_SEED.value, tau=_TAU.value, base_head_dim=_BASE_HEAD_DIM.value,
              float32_softmax=_FLOAT32_SOFTMAX.value, subtract_max=_SUBTRACT_MAX.value,
              attention=_ATTENTION.value, block_size=_BLOCK_SIZE.value)
  try:
    if params is None:
      return [sweep_lib.SweepConfig(**base)]
    return [sweep_lib.SweepConfig(**base, parametrization=p, width=w, base_width=_BASE_WIDTH.value,
                                  zero_query=_ZERO_QUERY.value)
            for p in dict.fromkeys(params) for w in dict.fromkeys(widths)]
  except ValueError as e:
    common.fail(str(e))


def main(argv):
  common.reject_extra_args(argv)
  configs = _configs()
  out_dir = common.prepare_out_dir(_OUT_DIR.value)
  io.write_json(out_dir / "config.json", {"flags": common.flag_values(__name__),
                                          "configs": [dataclasses.asdict(c) for c in configs]})
  partial = out_dir / "results.partial.jsonl"
  partial.unlink(missing_ok=True)
  progress = common.Progress(len(configs) * len(configs[0].d_k), "sweep")
  start = time.perf_counter()
  rows = []
  for config in configs:
    where = f"{config.parametrization} width={config.width} " if config.parametrization else ""
    rows += sweep_lib.run_sweep(config, on_row=lambda r: io.append_jsonl(partial, r),
                                on_shape=lambda d, s, where=where: progress.update(f"{where}d_k={d} ({s:.2f}s)"))
  io.write_jsonl(out_dir / "results.jsonl", rows)
  io.write_csv(out_dir / "results.csv", rows)
  partial.unlink(missing_ok=True)
  plots = write_plots(out_dir, rows)
  columns = TABLE_COLUMNS if configs[0].parametrization is None else ("parametrization", "width", *TABLE_COLUMNS)
  print(common.format_table(rows, columns))
  print(f"\n{len(rows)} configurations in {time.perf_counter() - start:.1f}s; wrote results.jsonl, results.csv, "
        f"config.json and {len(plots)} plots to {out_dir}")


if __name__ == "__main__":
  common.run(main)
