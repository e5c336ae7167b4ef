"""The d_k sweep: attention metrics of random q, k, v as head dimension and logit-scale rule vary.

For each head dimension d_k one jitted program draws q, k, v and a fixed
upstream gradient for every seed and evaluates every rule: rules that only
rescale (none, sqrt, linear, quadratic, temperature, post_softmax) are stacked
into one ``FixedScale`` pytree and vmapped over, rules that transform q and k
(qk_norm) are evaluated beside them, and seeds are vmapped too. So each shape
compiles once.

q and k come either iid from N(0, qk_std²) (the textbook assumption behind
1/√d_k, Vaswani et al. 2017 §3.2.1) or, in width mode, from projecting
unit-variance inputs of a given width through weights initialized by a
parametrization (see ``QKVSource``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from scaling import metrics as metrics_lib
from scaling import parametrization as parametrization_lib
from scaling import rules as rules_lib

Array = jax.Array

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}

ATTENTION_IMPLEMENTATIONS = ("dense", "blockwise")

METRICS = ("logit_mean", "logit_var", "logit_std", "logit_absmax", "entropy", "entropy_normalized", "max_prob",
           "saturated_frac", "softmax_jacobian_norm", "grad_norm_q", "grad_norm_k", "grad_norm_v",
           "grad_norm_logits")


@dataclasses.dataclass(frozen=True)
class SweepConfig:
  """One sweep: every (rule, d_k) pair, statistics over ``num_seeds`` seeds.

  Attributes:
    d_k: head dimensions.
    rules: rule names from the registry.
    seq_len: T = S.
    batch: sequences per seed.
    num_heads: heads per sequence.
    num_seeds: independent draws; metrics are reported as mean and std over them.
    dtype: name in DTYPES; q, k, v are cast to it.
    qk_std: std of the iid normal entries of q and k (v is always unit normal).
    causal: causal masking.
    seed: base PRNG seed.
    tau: temperature of the ``temperature`` rule.
    base_head_dim: if given, the ``linear`` rule uses α = √base_head_dim.
    float32_softmax: False computes logits/softmax in the input dtype (failure demo).
    subtract_max: False turns off max-subtraction (failure demo).
    parametrization: None for iid q, k (qk_std); otherwise width mode: q, k, v
      are unit-variance inputs of ``width`` projected through W_q, W_k, W_v
      initialized (std and forward multiplier) by this parametrization, and the
      rule name ``"param"`` means the parametrization's own attention rule.
    width: model width in width mode.
    base_width: the parametrization's base width (width multiplier m = width / base_width).
    zero_query: width mode: the μP option of zero-initialized W_q.
    attention: ``"dense"``, or ``"blockwise"``: output and q/k/v gradients
      through ``scaling.blockwise_attention`` and the statistics accumulated one
      block of query rows at a time, so memory grows like T·block, not T·S.
    block_size: query and key tile length of the blockwise path.
  """

  d_k: tuple[int, ...] = (16, 32, 64, 128, 256, 512, 1024)
  rules: tuple[str, ...] = ("none", "sqrt", "linear", "qk_norm")
  seq_len: int = 128
  batch: int = 4
  num_heads: int = 2
  num_seeds: int = 8
  dtype: str = "float32"
  qk_std: float = 1.0
  causal: bool = False
  seed: int = 0
  tau: float = 1.0
  base_head_dim: int | None = None
  float32_softmax: bool = True
  subtract_max: bool = True
  parametrization: str | None = None
  width: int | None = None
  base_width: int = 64
  zero_query: bool = False
  attention: str = "dense"
  block_size: int = 128

  def __post_init__(self):
    for name in ("seq_len", "batch", "num_heads", "num_seeds"):
      if getattr(self, name) < 1:
        raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
    if not self.d_k or any(d < 1 for d in self.d_k):
      raise ValueError(f"d_k must be a non-empty list of positive sizes, got {self.d_k}")
    if not self.rules:
      raise ValueError("rules must not be empty")
    for r in self.rules:
      if r == PARAM_RULE and self.parametrization is None:
        raise ValueError(f"rule {PARAM_RULE!r} needs a parametrization (width mode)")
      if r != PARAM_RULE and r not in rules_lib.available_rules():
        raise ValueError(f"unknown rule {r!r}; known: {', '.join(rules_lib.available_rules())}")
    if self.parametrization is not None:
      self.param()  # validates the name and base sizes
      if self.width is None or self.width < 1:
        raise ValueError(f"width mode needs a positive width, got {self.width}")
    elif self.width is not None or self.zero_query:
      raise ValueError("width and zero_query need a parametrization")
    if self.attention not in ATTENTION_IMPLEMENTATIONS:
      raise ValueError(f"unknown attention {self.attention!r}; known: {', '.join(ATTENTION_IMPLEMENTATIONS)}")
    if self.block_size < 1:
      raise ValueError(f"block_size must be at least 1, got {self.block_size}")
    if self.attention == "blockwise" and not (self.float32_softmax and self.subtract_max):
      raise ValueError("blockwise attention always uses a float32 online softmax with max-subtraction; "
                       "the float32_softmax/subtract_max failure demos need attention='dense'")
    if self.dtype not in DTYPES:
      raise ValueError(f"unknown dtype {self.dtype!r}; known: {', '.join(DTYPES)}")
    if not (math.isfinite(self.qk_std) and self.qk_std >= 0):
      raise ValueError(f"qk_std must be finite and non-negative, got {self.qk_std}")

  def param(self) -> parametrization_lib.Parametrization:
    """The parametrization of width mode."""
    return parametrization_lib.get_parametrization(self.parametrization, base_width=self.base_width,
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


PARAM_RULE = "param"
"""Rule name that stands for the parametrization's own attention rule in width mode."""

QKVSource = Callable[[Array, int], tuple[Array, Array, Array]]
"""(key, d_k) -> q [B, T, N, d_k], k [B, T, N, d_k], v [B, T, N, d_k] for one seed."""


def iid_source(config: SweepConfig) -> QKVSource:
  """q, k ~ N(0, qk_std²) and v ~ N(0, 1), iid entries."""

  def source(key: Array, d_k: int):
    kq, kk, kv = jax.random.split(key, 3)
    shape = (config.batch, config.seq_len, config.num_heads, d_k)
    q = config.qk_std * jax.random.normal(kq, shape)
    k = config.qk_std * jax.random.normal(kk, shape)
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

  def source(key: Array, d_k: int):
    kx, kq, kk, kv = jax.random.split(key, 4)
    x = jax.random.normal(kx, (config.batch, config.seq_len, config.width))
    out = []
    for kind, kw in (("attn_q", kq), ("attn_k", kk), ("attn_v", kv)):
      spec = param.layer(kind, config.width, config.num_heads * d_k, config.width)
      w = spec.init_std * jax.random.normal(kw, (config.width, config.num_heads * d_k))
      y = spec.multiplier * (x @ w)
      out.append(y.reshape(config.batch, config.seq_len, config.num_heads, d_k))
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


def _metrics_fn(config: SweepConfig) -> Callable[..., dict[str, Array]]:
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
  """A jitted function key -> {rule: {metric: [num_seeds] array}} for one head dimension (cached)."""
  source = (source_factory or default_source)(config)
  dtype = DTYPES[config.dtype]
  if config.attention == "blockwise":  # the blockwise plan is static, so rules are evaluated one by one
    fixed_names, stacked, other = [], None, list(config.rules)
  else:
    fixed_names, stacked, other = _group_rules(config, d_k)
  compute = _metrics_fn(config)

  def one_seed(key):
    k_qkv, k_g = jax.random.split(key)
    q, k, v = (x.astype(dtype) for x in source(k_qkv, d_k))
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

  @jax.jit
  def shape_fn(key):
    keys = jax.random.split(key, config.num_seeds)
    return jax.vmap(one_seed)(keys)

  return shape_fn


def _mode_keys(config: SweepConfig) -> dict[str, Any]:
  """Row keys that say where q and k came from."""
  if config.parametrization is None:
    return {"qk_std": config.qk_std}
  return {"parametrization": config.parametrization, "width": config.width, "base_width": config.base_width,
          "zero_query": config.zero_query}


def summarize(values: dict[str, Array]) -> dict[str, dict[str, float]]:
  """{metric: [seeds]} -> {metric: {"mean", "std"}} as Python floats (NaN kept as nan)."""
  out = {}
  for m, v in values.items():
    v = np.asarray(v, np.float64)
    out[m] = {"mean": float(np.mean(v)), "std": float(np.std(v))}
  return out


def run_sweep(config: SweepConfig, *, source_factory: Callable[[SweepConfig], QKVSource] | None = None,
              extra_keys: dict[str, Any] | None = None,
              on_row: Callable[[dict[str, Any]], None] | None = None,
              on_shape: Callable[[int, float], None] | None = None) -> list[dict[str, Any]]:
  """Runs the sweep and returns one row per (rule, d_k), in rule-major order.

  Args:
    config: the sweep.
    source_factory: builds the q/k/v source (default: iid, or projections in width mode).
    extra_keys: constant keys added to every row (e.g. parametrization, width).
    on_row: called with each finished row (for streaming results to disk).
    on_shape: called with (d_k, seconds) after each head dimension.

  Returns:
    Rows with keys ``rule``, ``d_k``, ``seq_len``, ``dtype``, ``causal``,
    ``qk_std``, any ``extra_keys``, and for each metric ``{"mean", "std"}``
    over seeds.
  """
  base_key = jax.random.key(config.seed)
  by_rule: dict[str, list[dict]] = {r: [] for r in config.rules}
  for d_k in config.d_k:
    start = time.perf_counter()
    values = make_shape_fn(config, d_k, source_factory)(jax.random.fold_in(base_key, d_k))
    values = jax.device_get(values)
    for rule in config.rules:
      row = {"rule": rule, "d_k": d_k, "seq_len": config.seq_len, "dtype": config.dtype, "causal": config.causal,
           "attention": config.attention,
             **_mode_keys(config), **(extra_keys or {}), **summarize(values[rule])}
      by_rule[rule].append(row)
      if on_row:
        on_row(row)
    if on_shape:
      on_shape(d_k, time.perf_counter() - start)
  return [row for rule in config.rules for row in by_rule[rule]]


@functools.lru_cache(maxsize=256)
def _single_config_fn(config: SweepConfig, d_k: int, rule_name: str) -> Callable[[Array], dict]:
  """A jitted function key -> {metric: scalar} for one rule, one d_k and one seed (cached)."""
  dtype = DTYPES[config.dtype]
  source = default_source(config)
  rule = config.rule(rule_name)
  compute = _metrics_fn(config)

  @jax.jit
  def single(key):
    k_qkv, k_g = jax.random.split(key)
    q, k, v = (x.astype(dtype) for x in source(k_qkv, d_k))
    g = jax.random.normal(k_g, q.shape).astype(dtype)
    return compute(q, k, v, g, rule)

  return single


def run_one_at_a_time(config: SweepConfig) -> list[dict[str, Any]]:
  """The same numbers computed one (rule, d_k, seed) at a time: the baseline the benchmark compares against."""
  base_key = jax.random.key(config.seed)
  rows = []
  for d_k in config.d_k:
    keys = jax.random.split(jax.random.fold_in(base_key, d_k), config.num_seeds)
    for name in config.rules:
      single = _single_config_fn(config, d_k, name)
      per_seed = [jax.device_get(single(keys[i])) for i in range(config.num_seeds)]
      stacked = {m: np.stack([p[m] for p in per_seed]) for m in per_seed[0]}
      rows.append({"rule": name, "d_k": d_k, **summarize(stacked)})
  return rows


def clear_caches() -> None:
  """Forgets compiled sweep functions (for cold-start timing)."""
  make_shape_fn.cache_clear()
  _single_config_fn.cache_clear()
  jax.clear_caches()


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
