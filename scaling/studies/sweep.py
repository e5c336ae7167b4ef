"""The d_k sweep: attention metrics of random q, k, v as head dimension and logit-scale rule vary.

The sweep covers the product of head dimensions, rules, sequence lengths,
dtypes and input stds (and, in width mode, parametrizations and widths). Python
loops only over what changes the program (sequence length, dtype, d_k, width
mode): for each, one jitted program draws q, k, v and a fixed upstream gradient
for every seed and evaluates every rule at every ``qk_std``: rules that only
rescale (none, sqrt, linear, quadratic, temperature, post_softmax) are stacked
into one ``FixedScale`` pytree and vmapped over, rules that transform q and k
(qk_norm) are evaluated beside them, and the input stds and the seeds are
vmapped too. So each shape compiles once. The seeds are the program's leading
axis of independent work: they are split over every device
(``scaling.training.sharding``), padded to a multiple of the device count.

q and k come either iid from N(0, qk_std²) (the textbook assumption behind
1/√d_k, Vaswani et al. 2017 §3.2.1) or, in width mode, from projecting
unit-variance inputs of a given width through weights initialized by a
parametrization (see ``QKVSource``).
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from scaling.base import compilation
from scaling.attention import metrics as metrics_lib
from scaling.training.model import config as model_config_lib
from scaling.mup import schemes as parametrization_lib
from scaling.runs import run_lock
from scaling.runs import plotting
from scaling.runs import report
from scaling.runs import distributed
from scaling.training import resources
from scaling.studies import sweep_memory
from scaling.runs import results
from scaling.attention import rules as rules_lib
from scaling.runs import timesplit
from scaling.training import sharding as sharding_lib
from scaling.base.config import option
from scaling.base.config import Options
from scaling.studies import stats
from scaling.base.validation import ConfigError

Array = jax.Array

DTYPES = model_config_lib.DTYPES
ATTENTION_IMPLEMENTATIONS = model_config_lib.EXPLICIT_ATTENTION  # the sweep vmaps traced scales: nothing to autotune
DEFAULT_RULES = ("none", "sqrt", "linear", "qk_norm")

METRICS = ("logit_mean", "logit_var", "logit_std", "logit_absmax", "entropy", "entropy_normalized", "max_prob",
           "saturated_frac", "softmax_jacobian_norm", "grad_norm_q", "grad_norm_k", "grad_norm_v",
           "grad_norm_logits")


PARAM_RULE = "param"
"""Rule name that stands for the parametrization's own attention rule in width mode."""


@dataclasses.dataclass(frozen=True)
class SweepConfig(Options):
  """One sweep: every (rule, d_k) pair, statistics over ``num_seeds`` seeds (the options of ``experiments.sweep``).

  In width mode (``parametrization`` and ``width`` given) q, k, v are
  unit-variance inputs of each width projected through W_q, W_k, W_v
  initialized (std and forward multiplier) by each parametrization, and the
  rule name ``"param"`` means the parametrization's own attention rule; the
  sweep covers every (parametrization, width) pair (``modes``).
  """

  d_k: tuple[int, ...] = option((16, 32, 64, 128, 256, 512, 1024), "Head dimensions to sweep.", lower=1)
  rules: tuple[str, ...] | None = option(None, "Logit-scale rules to compare ('param': the parametrization's, width "
                                         "mode only); default: none,sqrt,linear,qk_norm, or param in width mode.",
                                         choices=lambda: (*rules_lib.available_rules(), PARAM_RULE))
  seq_len: tuple[int, ...] = option((128,), "Sequence lengths T (= S).", lower=1)
  batch: int = option(4, "Sequences per seed.", lower=1)
  num_heads: int = option(2, "Heads per sequence.", lower=1)
  num_seeds: int = option(8, "Independent seeds (mean and std are over these).", lower=1)
  dtype: tuple[str, ...] = option(("float32",), "Dtypes of q, k and v.", choices=tuple(DTYPES))
  qk_std: tuple[float, ...] = option((1.0,), "Stds of the iid normal entries of q and k (vmapped in one program).",
                                     lower=0.0)
  causal: bool = option(False, "Causal masking.")
  seed: int = option(0, "Base random seed.", lower=0, upper=2**31 - 1)
  tau: float = option(1.0, "Temperature of the 'temperature' rule.", positive=True)
  base_head_dim: int | None = option(None, "If set, the 'linear' rule uses alpha = sqrt(this), so it equals 'sqrt' "
                                     "at this head dim (muP).", lower=1)
  float32_softmax: bool = option(True, "Softmax in float32 (false: in the input dtype; only to demonstrate "
                                 "low-precision failures).")
  subtract_max: bool = option(True, "Subtract the row max before exp (false: only to demonstrate overflow).")
  parametrization: tuple[str, ...] | None = option(
      None, "Width mode: q, k, v are unit-variance inputs of --width projected through weights initialized by each "
      "of these parametrizations (instead of iid with --qk_std).", choices=parametrization_lib.available_parametrizations)
  width: tuple[int, ...] | None = option(None, "Width mode: model widths (input dimension of the projections).",
                                         lower=1)
  base_width: int = option(64, "Width mode: base width of the parametrization.", lower=1)
  zero_query: bool = option(False, "Width mode: zero-initialized W_q (a muP option).")
  attention: str = option("dense", "dense, or blockwise: online softmax and statistics accumulated per block of "
                          "query rows (memory ~ T*block instead of T^2).", choices=ATTENTION_IMPLEMENTATIONS)
  block_size: int = option(128, "Tile length of --attention=blockwise.", lower=1)
  output: results.OutputConfig = option(results.OutputConfig("runs/sweep"), "Output.")
  cluster: distributed.DistributedConfig = option(distributed.DistributedConfig(), "Several processes.")

  def __post_init__(self):
    for name in ("parametrization", "width", "seq_len", "dtype", "qk_std"):  # one value stands for a list of one
      if isinstance(getattr(self, name), (str, int, float)):
        object.__setattr__(self, name, (getattr(self, name),))
    if self.rules is None:
      object.__setattr__(self, "rules", (PARAM_RULE,) if self.parametrization else DEFAULT_RULES)
    for name in ("rules", "seq_len", "dtype", "qk_std"):
      if isinstance(getattr(self, name), (tuple, list)):
        object.__setattr__(self, name, tuple(dict.fromkeys(getattr(self, name))))
    super().__post_init__()

  def validate(self):
    if (self.parametrization is None) != (self.width is None):
      raise ConfigError("parametrization and width go together (projected q, k and v); give both or neither",
                        fields=("width",))
    if self.parametrization is None and self.zero_query:
      raise ConfigError("zero_query needs parametrization and width", fields=("parametrization", "width"))
    if self.parametrization is not None and len(self.qk_std) > 1:
      raise ConfigError("qk_std sets iid q, k; width mode draws them from projections, so give at most one value")
    if PARAM_RULE in self.rules and self.parametrization is None:
      raise ConfigError(f"rule {PARAM_RULE!r} needs parametrization and width (projected q, k and v)",
                        fields=("parametrization", "width"))
    if self.attention == "blockwise" and not (self.float32_softmax and self.subtract_max):
      raise ConfigError("blockwise attention always uses a float32 online softmax with max-subtraction; "
                       "the float32_softmax/subtract_max failure demos need attention='dense'")
    if self.tau != 1.0 and "temperature" not in self.rules:
      raise ConfigError(f"tau={self.tau:g} only applies to the 'temperature' rule, which rules leaves out",
                        fields=("rules",))
    if self.base_head_dim is not None and "linear" not in self.rules and self.parametrization is None:
      raise ConfigError("base_head_dim only applies to the 'linear' rule or width mode")
    if self.base_width != 64 and self.parametrization is None:
      raise ConfigError("base_width only applies with parametrization and width (projected q, k and v)",
                        fields=("parametrization", "width"))

  def modes(self) -> list[SweepConfig]:
    """One config per program shape: (parametrization, width) in width mode × sequence length × dtype.

    Each mode has one value of each of these (its ``qk_std``, ``rules`` and
    ``d_k`` stay lists).
    """
    pairs = [(None, None)] if self.parametrization is None else [((p,), (w,)) for p in self.parametrization
                                                                  for w in self.width]
    return [dataclasses.replace(self, parametrization=p, width=w, seq_len=(t,), dtype=(d,))
            for p, w in pairs for t in self.seq_len for d in self.dtype]

  def varying(self) -> tuple[str, ...]:
    """The axes other than rule and d_k that take more than one value (they label lines and table columns)."""
    return tuple(name for name in ("parametrization", "width", "seq_len", "dtype", "qk_std")
                 if getattr(self, name) is not None and len(getattr(self, name)) > 1)

  def param(self) -> parametrization_lib.Parametrization:
    """The parametrization of width mode."""
    return parametrization_lib.get_parametrization(self.parametrization[0], base_width=self.base_width,
                                                   base_head_dim=self.base_head_dim or 64,
                                                   zero_query=self.zero_query)

  def rule(self, name: str) -> rules_lib.ScaleRule:
    """The rule object for ``name`` with this sweep's options."""
    if name == PARAM_RULE:
      return self.param().attention_rule()
    if name == "temperature":
      return rules_lib.get_rule(name, tau=self.tau)
    if name == "linear" and self.base_head_dim is not None:
      return rules_lib.get_rule(name, base_head_dim=self.base_head_dim)
    return rules_lib.get_rule(name)


QKVSource = Callable[[Array, int, Array], tuple[Array, Array, Array]]
"""(key, d_k, qk_std) -> q [B, T, N, d_k], k [B, T, N, d_k], v [B, T, N, d_k] for one seed of a mode."""


def iid_source(config: SweepConfig) -> QKVSource:
  """q, k ~ N(0, qk_std²) and v ~ N(0, 1), iid entries (the same draws scaled for every qk_std)."""

  def source(key: Array, d_k: int, qk_std: Array):
    kq, kk, kv = jax.random.split(key, 3)
    shape = (config.batch, config.seq_len[0], config.num_heads, d_k)
    q = qk_std * jax.random.normal(kq, shape)
    k = qk_std * jax.random.normal(kk, shape)
    return q, k, jax.random.normal(kv, shape)

  return source


def projection_source(config: SweepConfig) -> QKVSource:
  """Width mode: x ~ N(0, 1) of shape [B, T, width], q = mult_q · x W_q (likewise k, v).

  W_q, W_k, W_v [width, N·d_k] are drawn with the init std and scaled by the
  forward multiplier that the parametrization gives an attention projection
  of fan_in = width (so SP's 1/√width init, μP's zero query or NTK's
  multiplier all show up in the logits).
  """
  param = config.param()
  width = config.width[0]

  def source(key: Array, d_k: int, qk_std: Array):
    del qk_std  # the projections set the scale of q and k
    kx, kq, kk, kv = jax.random.split(key, 4)
    x = jax.random.normal(kx, (config.batch, config.seq_len[0], width))
    out = []
    for kind, kw in (("attn_q", kq), ("attn_k", kk), ("attn_v", kv)):
      spec = param.layer(kind, width, config.num_heads * d_k, width)
      w = spec.init_std * jax.random.normal(kw, (width, config.num_heads * d_k))
      y = spec.multiplier * (x @ w)
      out.append(y.reshape(config.batch, config.seq_len[0], config.num_heads, d_k))
    return tuple(out)

  return source


def default_source(config: SweepConfig) -> QKVSource:
  """iid q, k, v, or projections of unit-variance inputs in width mode."""
  return projection_source(config) if config.parametrization is not None else iid_source(config)


def _group_rules(config: SweepConfig, d_k: int) -> tuple[list[str], rules_lib.FixedScale | None, list[str]]:
  """Splits rules into those expressible as a stacked FixedScale and those with a prepare step."""
  fixed_names, fixed, other = [], [], []
  for name in config.rules:
    rule = config.rule(name)
    if rule.has_prepare:
      other.append(name)
    else:
      fixed_names.append(name)
      fixed.append(rules_lib.as_fixed_scale(rule, d_k))
  stacked = None
  if fixed:
    stacked = rules_lib.FixedScale(jnp.asarray([f.logit for f in fixed], jnp.float32),
                                   jnp.asarray([f.weight for f in fixed], jnp.float32))
  return fixed_names, stacked, other


def metrics_fn(config: SweepConfig) -> Callable[..., dict[str, Array]]:
  """(q, k, v, g, rule) -> head-averaged metrics, through the dense or the blockwise path."""
  if config.attention == "blockwise":
    return lambda q, k, v, g, rule: metrics_lib.average_heads(metrics_lib.blockwise_attention_metrics_per_head(
        q, k, v, g, block_q=config.block_size, block_k=config.block_size, rule=rule, is_causal=config.causal))
  return lambda q, k, v, g, rule: metrics_lib.average_heads(metrics_lib.attention_metrics_per_head(
      q, k, v, g, rule=rule, is_causal=config.causal, float32_softmax=config.float32_softmax,
      subtract_max=config.subtract_max))


@functools.lru_cache(maxsize=64)
def make_shape_fn(config: SweepConfig, d_k: int,
                  source_factory: Callable[[SweepConfig], QKVSource] | None = None) -> Callable[[Array], dict]:
  """A function key -> {rule: {metric: [num_seeds, len(qk_std)] numpy array}} for one mode and d_k (cached);
  its ``lower(key)`` lowers the jitted program, as ``jax.jit``'s does.

  One jitted program vmaps over seeds, input stds and scale rules; the seeds
  (``jax.random.split(key, num_seeds)``) are padded to a multiple of the
  device count and split over the devices of every process, and the values of
  every seed are gathered back.
  """
  source = (source_factory or default_source)(config)
  dtype = DTYPES[config.dtype[0]]
  if config.attention == "blockwise":  # the blockwise plan is static, so rules are evaluated one by one
    fixed_names, stacked, other = [], None, list(config.rules)
  else:
    fixed_names, stacked, other = _group_rules(config, d_k)
  compute = metrics_fn(config)
  stds = np.asarray(config.qk_std, np.float32)

  def one_seed(key, qk_std):
    k_qkv, k_g = jax.random.split(key)
    q, k, v = (x.astype(dtype) for x in source(k_qkv, d_k, qk_std))
    g = jax.random.normal(k_g, q.shape).astype(dtype)

    def metrics_for(rule):
      return compute(q, k, v, g, rule)

    out = {}
    if stacked is not None:
      batched = jax.vmap(metrics_for)(stacked)
      for i, name in enumerate(fixed_names):
        out[name] = {m: v[i] for m, v in batched.items()}
    for name in other:
      out[name] = metrics_for(config.rule(name))
    return out

  @compilation.jit
  def program(key_data):
    per_seed = lambda key: jax.vmap(lambda s: one_seed(key, s))(jnp.asarray(stds))
    return jax.vmap(per_seed)(jax.random.wrap_key_data(key_data))

  def keys(key):
    return sharding_lib.shard(np.asarray(jax.random.key_data(jax.random.split(key, config.num_seeds))))

  def shape_fn(key):
    sharded, n = keys(key)
    return sharding_lib.unpad(sharding_lib.to_host(program(sharded)), n)

  shape_fn.lower = lambda key: program.lower(keys(key)[0])  # the jitted program, lowered (as jax.jit's ``lower``)
  return shape_fn


def _mode_keys(config: SweepConfig, qk_std: float) -> dict[str, Any]:
  """Row keys that say where q and k came from."""
  if config.parametrization is None:
    return {"qk_std": qk_std}
  return {"parametrization": config.parametrization[0], "width": config.width[0], "base_width": config.base_width,
          "zero_query": config.zero_query}


def summarize(values: dict[str, Array]) -> dict[str, dict[str, float]]:
  """{metric: [seeds]} -> {metric: {"mean", "std"}} as Python floats (NaN kept as nan)."""
  return {m: stats.mean_std(v) for m, v in values.items()}


def run_sweep(config: SweepConfig, *, source_factory: Callable[[SweepConfig], QKVSource] | None = None,
              extra_keys: dict[str, Any] | None = None,
              on_row: Callable[[dict[str, Any]], None] | None = None,
              on_shape: Callable[[SweepConfig, int, float], None] | None = None) -> list[dict[str, Any]]:
  """Runs the sweep and returns one row per (mode, qk_std, rule, d_k), in that order of nesting.

  Args:
    config: the sweep.
    source_factory: builds the q/k/v source (default: iid, or projections in width mode).
    extra_keys: constant keys added to every row.
    on_row: called with each finished row (for streaming results to disk).
    on_shape: called with (mode config, d_k, seconds) after each head dimension.

  Returns:
    Rows with keys ``rule``, ``d_k``, ``seq_len``, ``dtype``, ``causal``,
    ``attention``, ``qk_std`` (or, in width mode, ``parametrization``,
    ``width``, ``base_width``, ``zero_query``), any ``extra_keys``, and for
    each metric ``{"mean", "std"}`` over seeds.
  """
  base_key = jax.random.key(config.seed)
  rows = []
  for mode in config.modes():
    stds = mode.qk_std if mode.parametrization is None else mode.qk_std[:1]
    by_point: dict[tuple[int, str], list[dict]] = {(i, r): [] for i in range(len(stds)) for r in mode.rules}
    for d_k in mode.d_k:
      start = time.perf_counter()
      with timesplit.computing():  # the shape's program and its values on the host
        values = make_shape_fn(mode, d_k, source_factory)(jax.random.fold_in(base_key, d_k))
        summaries = {(i, rule): summarize({m: v[:, i] for m, v in values[rule].items()})
                     for i in range(len(stds)) for rule in mode.rules}
      for i, qk_std in enumerate(stds):
        for rule in mode.rules:
          row = {"rule": rule, "d_k": d_k, "seq_len": mode.seq_len[0], "dtype": mode.dtype[0], "causal": mode.causal,
                 "attention": mode.attention, **_mode_keys(mode, qk_std), **(extra_keys or {}),
                 **summaries[(i, rule)]}
          by_point[(i, rule)].append(row)
          if on_row:
            on_row(row)
      if on_shape:
        on_shape(mode, d_k, time.perf_counter() - start)
    rows += [row for point in by_point.values() for row in point]
  return rows


def metric_series(rows: Sequence[dict[str, Any]], metric: str, group_key: str = "rule",
                  x_key: str = "d_k") -> dict[str, tuple[list, list, list]]:
  """{group: (x, mean, std)} for plotting one metric against d_k."""
  out: dict[str, tuple[list, list, list]] = {}
  for r in rows:
    x, y, e = out.setdefault(str(r[group_key]), ([], [], []))
    x.append(r[x_key])
    y.append(r[metric]["mean"])
    e.append(r[metric]["std"])
  return out


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


AXES = ("parametrization", "width", "seq_len", "dtype", "qk_std")
"""Row keys of the sweep's axes besides rule and d_k."""
_AXIS_LABELS = {"parametrization": "{}", "width": "w={}", "seq_len": "T={}", "dtype": "{}", "qk_std": "std={:g}"}


def varying_axes(rows: Sequence[dict[str, Any]]) -> tuple[str, ...]:
  """The axes (``AXES``) that take more than one value among ``rows``."""
  return tuple(a for a in AXES if len({r.get(a) for r in rows}) > 1)


def _label(row, axes: Sequence[str], one_rule: bool) -> str:
  """The legend label of a row's line: its values of the varying axes, and its rule unless all rows share one."""
  parts = [_AXIS_LABELS[a].format(row[a]) for a in axes]
  return " ".join(parts if one_rule and parts else [*parts, row["rule"]])


def write_plots(out_dir, rows) -> list[str]:
  """One PNG per metric against d_k (log2 axis), one line per rule and value of the other varying axes, summary.png."""
  width_mode = "parametrization" in rows[0]
  one_rule = len({r["rule"] for r in rows}) == 1
  axes = tuple(dict.fromkeys((("parametrization", "width") if width_mode else ()) + varying_axes(rows)))
  rows = [{**r, "line": _label(r, axes, one_rule)} for r in rows]
  names = []
  beside = plotting.legend_outside(dict.fromkeys(r["line"] for r in rows))
  fig, axes = plotting.grid_figure(2, 2, width=4.0 + (plotting.LEGEND_WIDTH if beside else 0))
  for metric, label, logy in PLOTS:
    series = metric_series(rows, metric, "line")
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


OUTPUTS = ("results.jsonl", "results.csv", "config.json", "timings.jsonl", *(f"{m}.png" for m, _, _ in PLOTS),
           "summary.png", "summary.md")
"""The files ``run`` writes into the output folder (besides run.json)."""


SUMMARY_METRICS = (("logit_std", "logit std"), ("max_prob", "max probability"),
                   ("saturated_frac", "rows with max p > 0.99"), ("entropy_normalized", "entropy / ln T"))
"""The metrics of ``summary.md``, with their labels."""


def summary_markdown(config: SweepConfig, rows: Sequence[dict[str, Any]], seconds: float) -> str:
  """The sweep's headline numbers as Markdown (for the docs' generated section): a heading with the sizes and
  the measured wall time, then one row per (varying axes, rule, metric) with the mean over seeds per d_k."""
  axes = varying_axes(rows)
  d_ks = sorted({r["d_k"] for r in rows})
  lines, seen = [], set()
  for row in rows:
    key = (*(row.get(a) for a in axes), row["rule"])
    if key in seen:
      continue
    seen.add(key)
    same = [r for r in rows if (*(r.get(a) for a in axes), r["rule"]) == key]
    by_dk = {r["d_k"]: r for r in same}
    for metric, label in SUMMARY_METRICS:
      cells = [format(by_dk[d][metric]["mean"], ".4g") if d in by_dk else "" for d in d_ks]
      lines.append([*key, label, *cells])
  sizes = (f"T = {', '.join(map(str, config.seq_len))}, {config.num_heads} heads, batch {config.batch}, "
           f"{config.num_seeds} seeds, q and k entries of std {', '.join(format(s, 'g') for s in config.qk_std)}"
           + (", causal" if config.causal else ""))
  heading = (f"Mean over seeds per head dim d_k ({sizes}; {len(rows)} configurations; the run that wrote this "
             f"took {seconds:.1f} s wall, compilation included, on {jax.device_count()} {jax.default_backend()} "
             f"device(s) of this machine):")
  return heading + "\n\n" + report.markdown_table([*axes, "rule", "metric", *(f"d_k = {d}" for d in d_ks)], lines)


def _shape_keys(mode: SweepConfig) -> dict[str, Any]:
  """The row keys of one program shape but d_k: parametrization and width (width mode), seq_len and dtype."""
  width_mode = mode.parametrization is not None
  return {"parametrization": mode.parametrization[0] if width_mode else None,
          "width": mode.width[0] if width_mode else None, "seq_len": mode.seq_len[0], "dtype": mode.dtype[0]}


def _group_size(mode: SweepConfig) -> int:
  """Rows of one program shape: every rule at every qk_std (one qk_std in width mode)."""
  return len(mode.rules) * (len(mode.qk_std) if mode.parametrization is None else 1)


def group_key(row: dict[str, Any]) -> tuple:
  """The group of a result row: (parametrization, width, seq_len, dtype, d_k); one compiled shape, all rules."""
  return row.get("parametrization"), row.get("width"), row["seq_len"], row["dtype"], row["d_k"]


def _final_order(config: SweepConfig, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
  """Rows in ``run_sweep``'s order: mode, then qk_std, then rule, then d_k."""
  by = {(*group_key(r), r.get("qk_std"), r["rule"]): r for r in rows}
  out = []
  for mode in config.modes():
    for std in (mode.qk_std if mode.parametrization is None else (None,)):
      for rule in mode.rules:
        out += [by[(*group_key({"d_k": d_k, **_shape_keys(mode)}), std, rule)] for d_k in mode.d_k]
  return out


def _nan_for_null(row: dict[str, Any]) -> dict[str, Any]:
  """A row read back from JSON with its null (non-finite) metric values as NaN again."""
  return {k: ({s: float("nan") if x is None else x for s, x in v.items()} if k in METRICS else v)
          for k, v in row.items()}


@run_lock.held_while_running
def run(config: SweepConfig, out_dir: pathlib.Path) -> list[dict[str, Any]]:
  """The study as ``experiments.sweep`` runs it: measures, streams rows, plots and prints a table.

  Each head dimension's rows (every rule) are appended whole to the partial results
  file as soon as they are computed; rerun with the same options into the same
  folder, a killed run computes only the head dimensions it has not finished.
  Wall times go to timings.jsonl.

  Returns:
    The rows of results.jsonl (NaN for non-finite values).
  """
  resources.check(sweep_memory.sweep_estimate(config), resources.option_values(config))
  out_dir = results.open_run(out_dir, config, overwrite=config.output.overwrite, outputs=OUTPUTS)
  results.write_json(out_dir / "config.json", {"config": dataclasses.asdict(config)})
  start = time.perf_counter()
  modes = config.modes()
  plan = [(group_key({"d_k": d_k, **_shape_keys(mode)}), _group_size(mode)) for mode in modes for d_k in mode.d_k]
  stream = results.GroupedRows(out_dir / "results.jsonl", plan, group_key)
  missing = set(stream.missing())
  if len(missing) < len(plan):
    print(f"resuming: {len(plan) - len(missing)} of {len(plan)} program shapes already in {out_dir} "
          f"({stream.reused} configurations reused)", flush=True)
  with report.Progress(len(missing), "sweep") as progress:
    for mode in modes:
      for d_k in mode.d_k:
        key = group_key({"d_k": d_k, **_shape_keys(mode)})
        if key not in missing:
          continue
        # A head dimension's rows depend on neither the other head dimensions nor the output options, so each is
        # one call with those normalized (programs compiled for it are shared by every run in this process).
        seconds = []
        rows = run_sweep(dataclasses.replace(mode, d_k=(d_k,), output=results.OutputConfig()),
                         on_shape=lambda m, d, t: seconds.append(t))
        stream.add(key, rows)
        results.append_timing(out_dir, {**_shape_keys(mode), "d_k": d_k, "seconds": seconds[0]})
        where = f"{mode.parametrization[0]} width={mode.width[0]} " if mode.parametrization else ""
        where += "".join(f"{a}={getattr(mode, a)[0]} " for a in ("seq_len", "dtype") if len(getattr(config, a)) > 1)
        progress.update(f"{where}d_k={d_k} ({seconds[0]:.2f}s)")
  rows = [_nan_for_null(r) for r in stream.finish(_final_order(config, stream.rows()))]
  results.write_csv(out_dir / "results.csv", rows)
  plots = write_plots(out_dir, rows)
  axes = (("parametrization", "width") if config.parametrization else ()) + config.varying()
  columns = (*dict.fromkeys(axes), *TABLE_COLUMNS)
  print(report.table(rows, columns))
  seconds = time.perf_counter() - start
  results.write_text(out_dir / "summary.md", summary_markdown(config, rows, seconds))
  reused = f"{stream.reused} reused from {out_dir}, " if stream.reused else ""
  print(f"\n{len(rows)} configurations ({reused}{seconds:.1f}s); wrote results.jsonl, results.csv, summary.md, "
        f"config.json and {len(plots)} plots to {out_dir}")
  return rows
