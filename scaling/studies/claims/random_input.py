"""The claims about attention logit scaling that random inputs settle, each with its measurement.

The claims come from two interview-preparation notes on why attention divides its logits by √d_k
(``shared/seeds/000_ae59428f9015f76d.txt``, "note 1", and ``shared/seeds/004_383f650843b84e3b.txt``, "note 2").
Each is a ``scaling.studies.claims.verdicts.Claim`` whose ``measure`` draws random q, k, v (iid, with outlier tokens, or
LayerNorm-ed inputs projected by fan-in-initialized weights) on a ``scaling.studies.claims.context.Context``, with
mean and std over its seeds, and returns only numbers and a sentence formatted from them.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from scaling.attention import dispatch as attention_lib
from scaling.attention import metrics as metrics_lib
from scaling.mup import schemes as parametrization_lib
from scaling.attention import rope as rope_lib
from scaling.attention import rules as rules_lib
from scaling.studies.claims.context import BATCH
from scaling.studies.claims.context import by_d_k
from scaling.studies.claims.context import Context
from scaling.studies.claims.context import HEADS
from scaling.studies.claims.context import n_seeds_text
from scaling.studies.claims.context import pm
from scaling.studies.claims.context import seed_mean
from scaling.studies.claims.context import seeds_text
from scaling.studies.claims.context import span
from scaling.studies.claims.context import sweep_series
from scaling.studies.stats import mean_std
from scaling.studies.stats import round_sig
from scaling.studies.stats import standard_error
from scaling.studies.claims.verdicts import Claim
from scaling.studies.claims.verdicts import Criterion
from scaling.studies.claims.verdicts import FAILS
from scaling.studies.claims.verdicts import HOLDS
from scaling.studies.claims.verdicts import Measurement
from scaling.studies.claims.verdicts import PARTLY

OUTLIER_FACTORS = (10.0, 30.0)  # outlier tokens' norms relative to the rest in the low-precision grid
SWEPT_FACTORS = (1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 50.0, 100.0, 150.0, 200.0, 300.0)  # the outlier sweep
EXTREME_TOKEN_FACTOR = 10.0  # the norm (× the rest's) an "individual extreme token" plainly reaches
CLAMP = 100.0  # note 2 §3: clamp q·k to [−100, 100] before the scale
QK_STDS = (0.1, 1.0, 10.0)  # entry stds of q and k for the QK-norm claim
EXEMPT_STDS = (0.5, 2.0)  # entry stds of q and k that note 1 §3 exempts ("the factor must be adjusted")
SQRT_STDS = (1.0, *EXEMPT_STDS)  # entry stds of q and k of the 1/√d_k variance measurement
NOTE_D_K = (64, 128)  # the head dims the notes name (note 1 §4, English)
VANISH = 0.01  # "vanish": a row's softmax Jacobian below 1% of the median 1/√d_k row's
D_K_512 = 512  # note 2 §2.1's example
FIXED_HEAD_DIM = 64  # head dim of the claim that fixes d_k while width grows
EXP_D_K = 64  # head dim of the exp-overflow claim (note 1's example)
LOW_PRECISION_D_K = 128  # head dim of the low-precision claim
TOKEN_STD_RANGE = (0.1, 10.0)  # per-token stds of raw (pre-LayerNorm) or mixed-scale inputs, log-uniform
TOKEN_OFFSET_STD = 3.0  # std of the per-token offsets of raw tokens
RELATIVE_TOLERANCE = 0.05  # "normalizes to 1": within 5%
WORKING_RANGE = 5.0  # note 2 §2.1: softmax's "working range" is [−5, 5]
DOMINANT_MAX_PROB = 0.5  # a key "dominates" its row above this probability (unscaled_one_hot's lower threshold)
FOCUS_TEMPERATURES = (4.0, 2.0, 1.0, 0.5, 0.25)  # temperatures T/√d_k of the lower-temperature claim, falling
FOCUS_D_K = 64  # its head dim (note 1's example)
QK_ALIGNMENT = 0.2  # the correlation of q_t and k_t of the same token assumed for trained models (train_qk_correlate)
RAG_KEYS, RAG_QUERIES, RAG_TOP = 2048, 16, 5  # a long document's keys, the queries, and "a few tokens"
STACK_WIDTH, STACK_HEAD_DIM, STACK_DEPTH, STACK_TOKENS = 256, 64, 12, 32  # the residual stack of the RMSNorm claim
ROPE_SHIFT = 128  # the common shift of query and key positions in the RoPE relative-position check
ROPE_OFFSET_BINS = 4  # relative offsets 0..T−1 in this many bins, each of whose logit variance is checked


# ----------------------------------------------------------------------------
# Claims that say several things: one criterion per part, the claim's statistic counts the parts that hold.


@dataclasses.dataclass(frozen=True)
class Part:
  """One part of a claim that says several things, with the criterion that decides that part alone."""

  name: str
  criterion: Criterion


PART_SCORES = {HOLDS: 1.0, PARTLY: 0.5, FAILS: 0.0}


def score_parts(parts: tuple[Part, ...], values: dict[str, float | None]) -> tuple[float, dict[str, str]]:
  """The number of ``parts`` that hold (a part holding partly counts ½), and each part's verdict.

  Args:
    parts: the claim's parts.
    values: each part's measured statistic, by the part's name.

  Returns:
    (score, {part name: verdict}); the score is NaN (the claim is then not measured) when a part is not measured.
  """
  missing = [p.name for p in parts if p.name not in values]
  if missing:
    raise KeyError(f"no measured value for the part(s) {', '.join(missing)}")
  verdicts = {p.name: p.criterion.verdict(values[p.name]) for p in parts}
  return float(sum(PART_SCORES.get(v, math.nan) for v in verdicts.values())), verdicts


def parts_criterion(statistic: str, what: str, parts: tuple[Part, ...], reason: str) -> Criterion:
  """The criterion of a claim of ``parts`` (``score_parts``): holds when every part holds (the score is then the number
  of parts, above n − ½), does not hold when none holds even partly (below ½), partly otherwise."""
  each = "; ".join(f"{p.name}: {p.criterion.text}" for p in parts)
  return Criterion(statistic, f"{what}, each counting 1 if it holds, ½ if partly, 0 if not ({each})",
                   holds=(">", len(parts) - 0.5), fails=("<", 0.5), reason=reason)


def _parts_text(verdicts: dict[str, str]) -> str:
  """Each part's verdict, in words."""
  return "; ".join(f"{name}: {verdict}" for name, verdict in verdicts.items())


# ----------------------------------------------------------------------------
# Random inputs.


def _iid(rng: np.random.Generator, ctx: Context, d_k: int, heads: int = HEADS) -> tuple[np.ndarray, ...]:
  """q, k, v with iid N(0, 1) entries, [BATCH, seq_len, heads, d_k] each."""
  return tuple(rng.standard_normal((3, BATCH, ctx.seq_len, heads, d_k), dtype=np.float32))


def _with_outliers(x: jax.Array, factor: float | jax.Array) -> jax.Array:
  """x [B, T, N, H] with the first and last tokens multiplied by ``factor`` (their norm is ``factor``× the rest)."""
  scale = jnp.ones((x.shape[1],), x.dtype).at[jnp.array([0, x.shape[1] - 1])].set(factor)
  return x * scale[None, :, None, None]


def _sp_spec(width: int, fan_out: int) -> parametrization_lib.LayerSpec:
  """SP's init std and forward multiplier of an attention projection from ``width`` to ``fan_out``."""
  return parametrization_lib.get_parametrization("sp").layer("attn_q", width, fan_out, width)


def _sp_weights(rng: np.random.Generator, width: int, fan_out: int, n: int = 2) -> list[np.ndarray]:
  """``n`` matrices [width, fan_out] drawn with SP's fan-in init std of an attention projection."""
  std = _sp_spec(width, fan_out).init_std
  return [std * rng.standard_normal((width, fan_out), dtype=np.float32) for _ in range(n)]


def _token_stds(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
  """Per-token stds, log-uniform in TOKEN_STD_RANGE."""
  return 10.0 ** rng.uniform(*np.log10(TOKEN_STD_RANGE), shape)


def _mixed_scales() -> str:
  """The per-token scales of ``_token_stds``, in words."""
  return f"per-token std log-uniform in [{TOKEN_STD_RANGE[0]:g}, {TOKEN_STD_RANGE[1]:g}]"


def _raw_tokens(rng: np.random.Generator, ctx: Context, width: int) -> np.ndarray:
  """Tokens [BATCH, seq_len, width] with ``_token_stds`` and per-token offsets ~ N(0, TOKEN_OFFSET_STD²)."""
  shape = (BATCH, ctx.seq_len, 1)
  scale = _token_stds(rng, shape)
  offset = TOKEN_OFFSET_STD * rng.standard_normal(shape)
  return (offset + scale * rng.standard_normal((BATCH, ctx.seq_len, width))).astype(np.float32)


def _logit_var(q: jax.Array, k: jax.Array, rule: str | rules_lib.ScaleRule) -> jax.Array:
  """Variance of the attention logits of ``rule`` over all entries (through the library's logits)."""
  return jnp.var(attention_lib.attention_logits(q, k, rule=rule))


def _stacked(names: tuple[str, ...], d_k: int) -> rules_lib.FixedScale:
  """The rules ``names`` (no prepare step) at ``d_k`` as one FixedScale pytree to ``jax.vmap`` over (one compile)."""
  fixed = [rules_lib.as_fixed_scale(rules_lib.get_rule(n), d_k) for n in names]
  return rules_lib.FixedScale(jnp.asarray([f.logit for f in fixed], jnp.float32),
                              jnp.asarray([f.weight for f in fixed], jnp.float32))


# ----------------------------------------------------------------------------
# The measurements. Each returns numbers (the criterion's statistic among them) and a sentence built from them.


def _variance_is_dk(ctx: Context) -> Measurement:
  ratio = {d: v / d for d, v in sweep_series(ctx, "none", "logit_var").items()}
  means = [seed_mean(r) for r in ratio.values()]
  dev = max(abs(m - 1) for m in means)
  return Measurement(
      {"max_rel_dev": round_sig(dev), "var_over_dk": by_d_k(ratio)},
      f"Var(q·k)/d_k of unscaled iid logits is {span(means)} for d_k {ctx.d_k[0]}–{ctx.d_k[-1]} ({seeds_text(ctx)}; "
      f"largest |ratio − 1| {dev:.3f}).")


def _iid_sqrt_var(ctx: Context) -> dict[float, dict[int, np.ndarray]]:
  """{std: {d_k: per-seed variance of 1/√d_k logits}} for iid q, k with entries of each std in SQRT_STDS."""

  def compute():
    out = {s: {} for s in SQRT_STDS}
    for d in ctx.d_k:
      var = ctx.per_seed(
          "sqrt_std", lambda rng, d=d: _iid(rng, ctx, d)[:2],
          lambda q, k: jax.vmap(lambda std: _logit_var(std * q, std * k, "sqrt"))(jnp.asarray(SQRT_STDS)), d)
      for i, s in enumerate(SQRT_STDS):
        out[s][d] = var[:, i]
    return out

  return ctx.cached("iid_sqrt_var", compute)


def _projection_width(ctx: Context) -> int:
  """The model width of the LayerNorm-ed projections: at least 256 and the largest d_k."""
  return max(256, max(ctx.d_k))


def _projected_logit_var(ctx: Context) -> dict[str, dict[int, np.ndarray]]:
  """{"none"|"sqrt": {d_k: per-seed logit variance}} for LayerNorm-ed tokens through SP-initialized W_q, W_k."""
  width = _projection_width(ctx)

  def one(d):
    mult = _sp_spec(width, d).multiplier

    def draw(rng):
      return _raw_tokens(rng, ctx, width), *_sp_weights(rng, width, d)

    def compute(raw, w_q, w_k):
      x = rules_lib.layer_norm(raw)  # every token: mean 0, variance 1 over the width
      q, k = ((mult * x @ w).reshape(BATCH, ctx.seq_len, 1, d) for w in (w_q, w_k))
      return jax.vmap(lambda rule: _logit_var(q, k, rule))(_stacked(("none", "sqrt"), d))

    return ctx.per_seed("layernorm_projection", draw, compute, d)

  def compute():
    per_d = {d: one(d) for d in ctx.d_k}
    return {rule: {d: per_d[d][:, i] for d in ctx.d_k} for i, rule in enumerate(("none", "sqrt"))}

  return ctx.cached("projected_logit_var", compute)


def _sqrt_unit_variance(ctx: Context) -> Measurement:
  conditions = {"iid q, k entries of std 1": _iid_sqrt_var(ctx)[1.0],
                f"LayerNorm-ed tokens of width {_projection_width(ctx)}, SP fan-in W_q, W_k":
                _projected_logit_var(ctx)["sqrt"]}
  dev = {name: max(abs(seed_mean(v) - 1) for v in by_d.values()) for name, by_d in conditions.items()}
  ranges = {name: span([seed_mean(v) for v in by_d.values()], ".3g") for name, by_d in conditions.items()}
  return Measurement(
      {"max_rel_dev_unit_inputs": round_sig(max(dev.values())),
       "max_rel_dev": {n: round_sig(v) for n, v in dev.items()},
       "var_sqrt": {name: by_d_k(by_d) for name, by_d in conditions.items()}},
      f"On the inputs the claim assumes (unit-variance q, k components), the 1/√d_k logit variance over d_k "
      f"{ctx.d_k[0]}–{ctx.d_k[-1]} ({seeds_text(ctx)}) is " + "; ".join(f"{ranges[n]} for {n}" for n in conditions)
      + f": largest |Var − 1| {max(dev.values()):.3f}. Other entry stds are exempt (note 1 §3; next row).")


def _sqrt_adjusted_factor(ctx: Context) -> Measurement:
  iid = _iid_sqrt_var(ctx)
  plain = {s: {d: v for d, v in iid[s].items()} for s in EXEMPT_STDS}
  adjusted = {s: {d: v / s**4 for d, v in iid[s].items()} for s in EXEMPT_STDS}  # factor 1/(s²√d_k): Var / s⁴
  dev = max(abs(seed_mean(v) - 1) for by_d in adjusted.values() for v in by_d.values())
  return Measurement(
      {"max_rel_dev_adjusted": round_sig(dev), "var_sqrt": {f"std {s:g}": by_d_k(plain[s]) for s in EXEMPT_STDS},
       "var_adjusted": {f"std {s:g}": by_d_k(adjusted[s]) for s in EXEMPT_STDS}},
      "For iid q, k entries of std " + " and ".join(f"{s:g}" for s in EXEMPT_STDS) + ", 1/√d_k gives logit variance "
      + " and ".join(span([seed_mean(v) for v in plain[s].values()], ".3g") for s in EXEMPT_STDS)
      + "; the factor adjusted to the init variance, 1/(s²√d_k), gives "
      + " and ".join(span([seed_mean(v) for v in adjusted[s].values()], ".3g") for s in EXEMPT_STDS)
      + f" over d_k {ctx.d_k[0]}–{ctx.d_k[-1]} (largest |Var − 1| {dev:.3f}; {seeds_text(ctx)}).")


def _d64_magnitudes(ctx: Context) -> Measurement:
  d = 64

  def compute(q, k):
    z = attention_lib.attention_logits(q, k, rule="none")
    a = jnp.abs(z)
    row_max = jnp.max(a, axis=-1)
    return {"std": jnp.std(z), "beyond_24": jnp.mean(a >= 24), "beyond_30": jnp.mean(a >= 30),
            "rows_24": jnp.mean(row_max >= 24), "rows_30": jnp.mean(row_max >= 30), "absmax": jnp.max(a)}

  v = ctx.cached("d64", lambda: ctx.per_seed("d64_magnitudes", lambda rng: _iid(rng, ctx, d)[:2], compute))
  return Measurement(
      {"rows_reaching_24_mean": round_sig(seed_mean(v["rows_24"])), "frac_beyond_24": mean_std(v["beyond_24"], 4),
       "frac_beyond_30": mean_std(v["beyond_30"], 4), "logit_std": mean_std(v["std"], 4),
       "rows_reaching_24": mean_std(v["rows_24"], 4), "rows_reaching_30": mean_std(v["rows_30"], 4),
       "absmax": mean_std(v["absmax"], 4), "keys_per_row": ctx.seq_len},
      f"Unscaled iid logits at d_k = {d} have std {pm(v['std'])}; {seed_mean(v['beyond_24']):.2%} of them reach "
      f"|z| ≥ 24 and {seed_mean(v['beyond_30']):.3%} reach |z| ≥ 30; a row of {ctx.seq_len} keys reaches 24 in "
      f"{seed_mean(v['rows_24']):.0%} and 30 in {seed_mean(v['rows_30']):.1%} of rows; the largest |z| per seed is "
      f"{pm(v['absmax'])} ({seeds_text(ctx)}).")


def _d64_std(ctx: Context) -> Measurement:
  _d64_magnitudes(ctx)
  std = ctx.cached("d64", lambda: None)["std"]
  dev = abs(seed_mean(std) / 8 - 1)
  return Measurement({"rel_dev_std_from_8": round_sig(dev), "logit_std": mean_std(std, 4)},
                     f"Unscaled iid logits at d_k = 64 have std {pm(std, '.4g')} ({seeds_text(ctx)}): |std/8 − 1| = "
                     f"{dev:.4f}.")


def _magnitudes(ctx: Context, d: int) -> dict[str, np.ndarray]:
  """Per seed at head dim ``d``: std and fractions of unscaled and 1/√d_k iid logits inside the notes' ranges."""

  def compute(q, k):
    z = attention_lib.attention_logits(q, k, rule="none")
    s = z / math.sqrt(d)
    return {"std": jnp.std(z), "within_3_std": jnp.mean(jnp.abs(z) <= 3 * math.sqrt(d)),
            "outside_5": jnp.mean(jnp.abs(z) > 5), "scaled_within_3": jnp.mean(jnp.abs(s) <= 3),
            "scaled_within_5": jnp.mean(jnp.abs(s) <= 5)}

  return ctx.cached(("magnitudes", d), lambda: ctx.per_seed("magnitudes", lambda rng: _iid(rng, ctx, d)[:2],
                                                            compute, d))


def _d512_std(ctx: Context) -> Measurement:
  v = _magnitudes(ctx, D_K_512)
  want = math.sqrt(D_K_512)
  dev = abs(seed_mean(v["std"]) / 22.6 - 1)
  return Measurement({"rel_dev_std_from_22.6": round_sig(dev), "logit_std": mean_std(v["std"], 4)},
                     f"Unscaled iid logits at d_k = {D_K_512} have std {pm(v['std'], '.4g')} (√{D_K_512} = "
                     f"{want:.2f}; {seeds_text(ctx)}): |std/22.6 − 1| = {dev:.4f}.")


WORKING_SIGMAS = tuple(float(x) for x in 2.0 ** (np.arange(-8, 25) / 4))  # logit stds of the working-range search


def working_range_bound(max_probs: np.ndarray, sigmas: tuple[float, ...] = WORKING_SIGMAS,
                        level: float = DOMINANT_MAX_PROB) -> float:
  """The 3σ half-width of row logits at which one key starts to dominate: 3 × the std (log-interpolated) at which the
  mean max probability [len(sigmas)], rising in σ, reaches ``level`` (NaN when it does not within ``sigmas``)."""
  mp = np.asarray(max_probs, np.float64)
  if mp.shape != (len(sigmas),):
    raise ValueError(f"max_probs must be [{len(sigmas)}] (one per sigma), got shape {mp.shape}")
  if not mp.min() <= level <= mp.max():
    return float("nan")
  order = np.argsort(mp)
  return 3.0 * float(2.0 ** np.interp(level, mp[order], np.log2(np.asarray(sigmas, np.float64))[order]))


def _working_range(ctx: Context) -> dict[str, np.ndarray]:
  """Per seed: the mean max probability of softmax rows of ``ctx.seq_len`` iid N(0, σ²) logits, for each σ of
  WORKING_SIGMAS ([seeds, sigmas]), and the 3σ bound where a key starts to dominate ([seeds])."""

  def compute():
    def curve(z):
      return jax.vmap(lambda sigma: jnp.mean(jnp.max(jax.nn.softmax(sigma * z, axis=-1), axis=-1)))(
          jnp.asarray(WORKING_SIGMAS, jnp.float32))

    mp = ctx.per_seed("working_range", lambda rng: (rng.standard_normal(
        (BATCH * HEADS, ctx.seq_len, ctx.seq_len), dtype=np.float32),), curve)
    return {"max_prob": mp, "bound": np.asarray([working_range_bound(m) for m in mp])}

  return ctx.cached("working_range", compute)


D512_PARTS = (
    Part("3σ in [−68, 68]", Criterion("frac_within_68", "fraction of unscaled iid logits at d_k = 512 inside [−68, 68]",
                                      holds=(">=", 0.99), fails=("<", 0.9))),
    Part("working range [−5, 5]", Criterion(
        "abs_log2_bound_over_5", "|log2(a/5)|, a the 3σ half-width of iid row logits at which the mean max attention "
        f"probability reaches {DOMINANT_MAX_PROB:g} (a key dominates its row)", holds=("<=", 0.5), fails=(">", 1.0))),
)


def _d512_range(ctx: Context) -> Measurement:
  v = _magnitudes(ctx, D_K_512)
  bound = _working_range(ctx)["bound"]
  frac, a = seed_mean(v["within_3_std"]), seed_mean(bound)
  off = abs(math.log2(a / WORKING_RANGE)) if math.isfinite(a) else math.nan
  score, verdicts = score_parts(D512_PARTS, {"3σ in [−68, 68]": frac, "working range [−5, 5]": off})
  found = (f"rows of {ctx.seq_len} iid Gaussian logits leave softmax's working range (a key takes over "
           f"{DOMINANT_MAX_PROB:g} of the row on average) once their 3σ range passes ±{a:.3g} (std "
           f"{float(np.std(bound)):.2g} over seeds), {a / WORKING_RANGE:.2g}× the note's ±{WORKING_RANGE:g}, so ±68 is "
           f"{68 / a:.2g}× beyond it"
           if math.isfinite(a) else "the mean max probability never reaches "
           f"{DOMINANT_MAX_PROB:g} for logit stds {WORKING_SIGMAS[0]:g}–{WORKING_SIGMAS[-1]:g}, so no bound was found")
  return Measurement(
      {"parts_holding": score, "part_verdicts": verdicts, "frac_within_68": round_sig(frac),
       "working_range_bound": mean_std(bound, 4), "abs_log2_bound_over_5": round_sig(off),
       "frac_outside_5": mean_std(v["outside_5"], 4), "frac_within_3_std": mean_std(v["within_3_std"], 4),
       "keys_per_row": ctx.seq_len},
      f"At d_k = {D_K_512}, {frac:.2%} of unscaled iid logits lie in [−68, 68] (3σ) and "
      f"{seed_mean(v['outside_5']):.1%} outside [−5, 5]; {found} ({seeds_text(ctx)}). Parts: {_parts_text(verdicts)}.")


def _scaled_back_to_3(ctx: Context) -> Measurement:
  v = {d: _magnitudes(ctx, d) for d in sorted({*NOTE_D_K, D_K_512})}
  worst = min(seed_mean(x["scaled_within_3"]) for x in v.values())
  return Measurement(
      {"min_frac_within_3": round_sig(worst), "frac_within_3": by_d_k({d: x["scaled_within_3"] for d, x in v.items()}),
       "frac_within_5": by_d_k({d: x["scaled_within_5"] for d, x in v.items()})},
      "After dividing by √d_k the fraction of iid logits in [−3, 3] is "
      + ", ".join(f"{seed_mean(x['scaled_within_3']):.2%} (d_k = {d})" for d, x in v.items())
      + f" ({seeds_text(ctx)}).")


def _one_hot(ctx: Context) -> Measurement:
  mp, sat = sweep_series(ctx, "none", "max_prob"), sweep_series(ctx, "none", "saturated_frac")
  sqrt_mp = sweep_series(ctx, "sqrt", "max_prob")
  first, last = ctx.d_k[0], ctx.d_k[-1]
  ctx.require_d_k(*NOTE_D_K)
  at_notes = min(seed_mean(mp[d]) for d in NOTE_D_K)
  numbers = {"min_max_prob_none_at_64_128": round_sig(at_notes),
             "max_prob_none_at_largest_d_k": round_sig(seed_mean(mp[last])), "largest_d_k": last,
             "max_prob_none": by_d_k(mp), "saturated_frac_none": by_d_k(sat), "max_prob_sqrt": by_d_k(sqrt_mp)}
  return Measurement(numbers, (
      f"Without scaling the mean max attention probability is {seed_mean(mp[64]):.2f} at d_k = 64 and "
      f"{seed_mean(mp[128]):.2f} at 128 (the notes' head dims), {seed_mean(mp[first]):.2f} at d_k = {first} and "
      f"{pm(mp[last], '.2f')} at d_k = {last}, and the rows with max p > {metrics_lib.SATURATION_THRESHOLD:g} go "
      f"from {seed_mean(sat[first]):.1%} to {seed_mean(sat[last]):.1%}; with 1/√d_k the max probability is "
      f"{span([seed_mean(v) for v in sqrt_mp.values()])} ({ctx.seq_len} keys, {seeds_text(ctx)})."))


def row_jacobian_norms(q: jax.Array, k: jax.Array, rule: str | rules_lib.ScaleRule) -> jax.Array:
  """Per row, the Frobenius norm of the softmax Jacobian diag(p) − ppᵀ of ``rule``'s attention: [B, N, T].

  Args:
    q: [B, T, N, H] queries.
    k: [B, S, N, H] keys.
    rule: the logit-scale rule.

  Returns:
    [B, N, T]: ‖∂p/∂z‖_F of each query row (Vaswani et al. 2017, §3.2.1: small when the softmax saturates).
    ‖J‖² = Σ_i p_i²(1 − p_i)² + Σ_{i≠j} p_i²p_j², with 1 − p_max and Σ_{j≠max} p_j² summed from the other keys, so
    that saturated rows keep their precision (the expanded Σp² − 2Σp³ + (Σp²)² cancels to float32 noise there).
  """
  p = attention_lib.attention_weights(q, k, rule=rule).astype(jnp.float32)
  top = jax.nn.one_hot(jnp.argmax(p, axis=-1), p.shape[-1], dtype=bool)
  p2 = p * p
  one_minus = jnp.where(top, jnp.sum(jnp.where(top, 0.0, p), axis=-1, keepdims=True), 1.0 - p)
  rest = jnp.where(top, jnp.sum(jnp.where(top, 0.0, p2), axis=-1, keepdims=True),
                   jnp.sum(p2, axis=-1, keepdims=True) - p2)
  return jnp.sqrt(jnp.sum(p2 * one_minus**2 + p2 * rest, axis=-1))


def _row_jacobians(ctx: Context) -> dict[int, dict[str, np.ndarray]]:
  """{d_k: per-seed fraction of vanished unscaled rows, median row norms (none, sqrt)} at the notes' and largest d_k."""

  def one(d):
    def compute(q, k):
      none, sqrt = row_jacobian_norms(q, k, "none"), row_jacobian_norms(q, k, "sqrt")
      ref = jnp.median(sqrt)
      return {"vanished": jnp.mean(none < VANISH * ref), "median_none": jnp.median(none), "median_sqrt": ref,
              "below_0.01": jnp.mean(none < 0.01)}
    return ctx.per_seed("row_jacobians", lambda rng: _iid(rng, ctx, d)[:2], compute, d)

  dims = sorted({*NOTE_D_K, ctx.d_k[0], ctx.d_k[-1]})
  return ctx.cached("row_jacobians", lambda: {d: one(d) for d in dims})


def _gradients_vanish(ctx: Context) -> Measurement:
  none_over_sqrt = lambda metric: {d: n / q for (d, n), q in zip(sweep_series(ctx, "none", metric).items(),
                                                                  sweep_series(ctx, "sqrt", metric).values())}
  gq, gz = none_over_sqrt("grad_norm_q"), none_over_sqrt("grad_norm_logits")
  jac = sweep_series(ctx, "none", "softmax_jacobian_norm")
  top = ctx.d_k[-1]
  rows = _row_jacobians(ctx)
  stat = seed_mean(rows[64]["vanished"])
  numbers = {"vanished_row_fraction_at_64": round_sig(stat),
             "vanished_row_fraction": by_d_k({d: r["vanished"] for d, r in rows.items()}),
             "median_row_jacobian_none": by_d_k({d: r["median_none"] for d, r in rows.items()}),
             "median_row_jacobian_sqrt": by_d_k({d: r["median_sqrt"] for d, r in rows.items()}),
             "row_jacobian_below_0.01_none": by_d_k({d: r["below_0.01"] for d, r in rows.items()}),
             "grad_q_none_over_sqrt_at_largest_d_k": round_sig(seed_mean(gq[top])), "largest_d_k": top,
             "grad_q_none_over_sqrt": by_d_k(gq), "grad_norm_q_none": by_d_k(sweep_series(ctx, "none", "grad_norm_q")),
             "grad_k_none_over_sqrt": by_d_k(none_over_sqrt("grad_norm_k")), "grad_logits_none_over_sqrt": by_d_k(gz),
             "jacobian_norm_none": by_d_k(jac),
             "jacobian_norm_sqrt": by_d_k(sweep_series(ctx, "sqrt", "softmax_jacobian_norm"))}
  low = ctx.d_k[0]
  med = lambda d, r: seed_mean(rows[d][f"median_{r}"])
  return Measurement(numbers, (
      f"Per query row, the softmax Jacobian of unscaled attention is below {VANISH:g}× the median 1/√d_k row's in "
      f"{stat:.1%} of rows at d_k = 64, {seed_mean(rows[128]['vanished']):.1%} at 128 and "
      f"{seed_mean(rows[top]['vanished']):.1%} at {top}; the median row's norm is {med(64, 'none'):.3g} (1/√d_k: "
      f"{med(64, 'sqrt'):.3g}) at d_k = 64 and {med(top, 'none'):.3g} at {top}, "
      f"{med(low, 'none') / med(top, 'none'):.3g}× below d_k = {low}'s. Aggregates over d_k {low} → {top}: the mean "
      f"softmax Jacobian norm goes {seed_mean(jac[low]):.3f} → "
      f"{seed_mean(jac[top]):.3f} and |dL/dlogits| {seed_mean(gz[low]):.3g}× → {seed_mean(gz[top]):.3g}× its 1/√d_k "
      f"value, while |dL/dq| is {seed_mean(gq[low]):.3g}× → {pm(gq[top])}× its 1/√d_k value (same inputs and upstream "
      f"gradient, {seeds_text(ctx)})."))


def _uniform(ctx: Context, rule: str, name: str) -> Measurement:
  """How close ``rule``'s attention is to uniform, against 1/√d_k's, via 1 − H/ln T (KL from uniform / ln T)."""
  ent, sqrt_ent = sweep_series(ctx, rule, "entropy_normalized"), sweep_series(ctx, "sqrt", "entropy_normalized")
  kl = {d: (1 - e) / (1 - sqrt_ent[d]) for d, e in ent.items()}
  worst = max(seed_mean(v) for v in kl.values())
  std = [seed_mean(v) for v in sweep_series(ctx, rule, "logit_std").values()]
  return Measurement(
      {"max_kl_ratio": round_sig(worst), "kl_ratio": by_d_k(kl), "entropy_normalized": by_d_k(ent, 6),
       "entropy_normalized_sqrt": by_d_k(sqrt_ent), "logit_std": dict(zip(ctx.d_k, map(round_sig, std)))},
      f"With {name} and iid q, k the logit std is {std[0]:.3g} (d_k = {ctx.d_k[0]}) to {std[-1]:.3g} (d_k = "
      f"{ctx.d_k[-1]}), the normalized entropy (1 = uniform) {seed_mean(ent[ctx.d_k[0]]):.5f} to "
      f"{seed_mean(ent[ctx.d_k[-1]]):.5f} against {span([seed_mean(v) for v in sqrt_ent.values()])} with 1/√d_k; "
      f"the KL divergence from uniform is at most {worst:.3g}× 1/√d_k's ({ctx.seq_len} keys, {seeds_text(ctx)}).")


def _uniform_criterion(name: str) -> Criterion:
  """The criterion of the claims that the rule written ``name`` makes attention (nearly) uniform."""
  return Criterion("max_kl_ratio", f"largest over the measured d_k of KL(attention ‖ uniform) with {name} as a "
                   "fraction of that with 1/√d_k (iid q, k)", holds=("<", 0.1), fails=(">", 0.5),
                   reason="'nearly uniform' = 10× closer to uniform than 1/√d_k; half as far is not")


def _linear_uniform(ctx: Context) -> Measurement:
  return _uniform(ctx, "linear", "1/d_k")


def _quadratic_uniform(ctx: Context) -> Measurement:
  return _uniform(ctx, "quadratic", "1/d_k²")


def row_sum_deviation(weights: jax.Array) -> jax.Array:
  """The mean over query rows of |Σ_s w_s − 1| of attention weights [..., S] (0 when every row sums to 1).

  Args:
    weights: attention weights as ``dot_product_attention`` uses them (with the rule's weight scale).

  Returns:
    A scalar.
  """
  return jnp.mean(jnp.abs(jnp.sum(weights.astype(jnp.float32), axis=-1) - 1.0))


def _post_softmax(ctx: Context) -> Measurement:
  rules = ("post_softmax", "sqrt", "none")

  def one(d):
    def compute(q, k, v):
      def attend(rule):
        out, weights = attention_lib.dot_product_attention(q, k, v, rule=rule, return_weights=True)
        return (jnp.sqrt(jnp.mean(jnp.square(out))), jnp.mean(jnp.sum(weights, axis=-1)),
                row_sum_deviation(weights))

      rms, row_sum, dev = jax.vmap(attend)(_stacked(rules, d))
      return {**{r: rms[i] for i, r in enumerate(rules)}, "row_sum": row_sum[0], "row_sum_dev": dev[0],
              "row_sum_dev_sqrt": dev[1]}
    return ctx.per_seed("post_softmax", lambda rng: _iid(rng, ctx, d), compute, d)

  v = {d: one(d) for d in ctx.d_k}
  vs_sqrt = {d: v[d]["post_softmax"] / v[d]["sqrt"] for d in ctx.d_k}
  vs_none = {d: v[d]["post_softmax"] / v[d]["none"] for d in ctx.d_k}
  dev = min(seed_mean(v[d]["row_sum_dev"]) for d in ctx.d_k)
  inside = max(seed_mean(v[d]["row_sum_dev_sqrt"]) for d in ctx.d_k)
  lo, hi = ctx.d_k[0], ctx.d_k[-1]
  return Measurement(
      {"min_row_sum_dev": round_sig(dev), "row_sum": by_d_k({d: v[d]["row_sum"] for d in ctx.d_k}),
       "row_sum_dev": by_d_k({d: v[d]["row_sum_dev"] for d in ctx.d_k}),
       "max_row_sum_dev_division_inside": round_sig(inside), "output_rms_over_sqrt": by_d_k(vs_sqrt),
       "output_rms_over_unscaled_softmax": by_d_k(vs_none)},
      f"Dividing after the softmax leaves attention rows summing to {seed_mean(v[lo]['row_sum']):.4f} (d_k = {lo}) to "
      f"{seed_mean(v[hi]['row_sum']):.4f} (d_k = {hi}): |row sum − 1| is at least {dev:.4f} (with the division inside "
      f"the logits at most {inside:.1e}). The output RMS is {seed_mean(vs_none[lo]):.4f}× (d_k = {lo}) to "
      f"{seed_mean(vs_none[hi]):.4f}× (d_k = {hi}) that of the same softmax without the division and "
      f"{span([seed_mean(r) for r in vs_sqrt.values()], '.2f')}× that of softmax(q·k/√d_k)·v (iid inputs, "
      f"{seeds_text(ctx)}).")


FLATTER_PARTS = (
    Part("the temperature falls", Criterion(
        "effective_temperature_ratio", "T_eff(128) / T_eff(64), T_eff = √d_k / std(unscaled q·k) the softmax "
        "temperature relative to the logits' scale (iid q, k, mean over seeds)", holds=("<", 0.95), fails=(">", 0.99))),
    Part("more uniform", Criterion(
        "entropy_rise_beyond_noise", "rise of the 1/√d_k normalized attention entropy (iid q, k) from d_k = 64 to "
        "128, mean over seeds less twice its sample std (needs 2 or more seeds)", holds=(">", 0.01),
        fails=("<", 0.002))),
)


def _sqrt_flatter_at_128(ctx: Context) -> Measurement:
  ctx.require_d_k(64, 128)
  ent, mp = sweep_series(ctx, "sqrt", "entropy_normalized"), sweep_series(ctx, "sqrt", "max_prob")
  std = sweep_series(ctx, "none", "logit_std")
  t_eff = {d: math.sqrt(d) / std[d] for d in (64, 128)}  # the divisor over the unscaled logits' std, per seed
  ratio = t_eff[128] / t_eff[64]
  delta = ent[128] - ent[64]
  spread = float(np.std(delta, ddof=1)) if ctx.num_seeds > 1 else math.nan  # no spread from one seed
  beyond = float(np.mean(delta)) - 2 * spread
  score, verdicts = score_parts(FLATTER_PARTS, {"the temperature falls": seed_mean(ratio), "more uniform": beyond})
  compared = (f"{beyond:+.4f} beyond twice its sample std over seeds ({spread:.4f})" if ctx.num_seeds > 1 else
              "one seed, so no spread to compare it with")
  return Measurement(
      {"parts_holding": score, "part_verdicts": verdicts, "effective_temperature_ratio": round_sig(seed_mean(ratio)),
       "temperature": {64: 8.0, 128: round_sig(math.sqrt(128))}, "effective_temperature": by_d_k(t_eff),
       "entropy_rise_beyond_noise": round_sig(beyond), "entropy_rise": mean_std(delta, 4),
       "entropy_rise_sample_std": round_sig(spread),
       "entropy_normalized": by_d_k({d: ent[d] for d in (64, 128)}, 5),
       "max_prob": by_d_k({d: mp[d] for d in (64, 128)})},
      f"The temperature T = √d_k rises from 8 to {math.sqrt(128):.1f} (×{math.sqrt(2):.3f}), and so does the "
      f"logits' std ({seed_mean(std[64]):.2f} to {seed_mean(std[128]):.2f}): relative to it the temperature goes "
      f"×{pm(ratio, '.3f')}. With 1/√d_k the normalized entropy is {pm(ent[64], '.4f')} at d_k = 64 and "
      f"{pm(ent[128], '.4f')} at 128 (max probability {seed_mean(mp[64]):.4f} vs {seed_mean(mp[128]):.4f}; "
      f"{ctx.seq_len} keys, {seeds_text(ctx)}): a change of {float(np.mean(delta)):+.4f}, {compared}. Parts: "
      f"{_parts_text(verdicts)}.")


# Low precision: every combination of input dtype, where q·k is accumulated and where the softmax runs, rule,
# max-subtraction and inputs (iid, or with outlier tokens).

LOW_PRECISION = {"float16": jnp.float16, "bfloat16": jnp.bfloat16}
ALL_LOW = "q·k and softmax in {dtype}"
ALL_F32 = "q·k and softmax in float32"
COMPUTE = ((ALL_LOW, False, False), ("q·k accumulated in float32, softmax in {dtype}", True, False),
           ("q·k in {dtype}, softmax in float32", False, True), (ALL_F32, True, True))
Condition = tuple[str, str, str, bool, str]  # dtype, compute, rule, subtract_max, inputs


def _low_precision_output(q, k, v, *, dtype, rule: str, acc32: bool, softmax32: bool, subtract_max: bool):
  """Attention output of q, k, v cast to ``dtype``, with q·k accumulated and softmax computed as asked.

  The library's ``float32_softmax`` switch covers both in float32 (True) or both in the input dtype (False);
  the mixed cases take the library's logits in one precision and its softmax in the other.
  """
  q, k, v = (x.astype(dtype) for x in (q, k, v))
  if acc32 == softmax32:
    return attention_lib.dot_product_attention(q, k, v, rule=rule, float32_softmax=acc32, subtract_max=subtract_max)
  logits = attention_lib.attention_logits(q, k, rule=rule, float32_softmax=acc32, subtract_max=subtract_max)
  logits = logits.astype(jnp.float32 if softmax32 else dtype)
  weights = attention_lib.masked_softmax(logits, None, subtract_max=subtract_max).astype(dtype)
  return jnp.einsum("bnts,bsnh->btnh", weights, v)


def _condition_name(c: Condition) -> str:
  """The name of one low-precision condition."""
  dtype, compute, rule, subtract_max, inputs = c
  return (f"{dtype}; {compute.format(dtype=dtype)}; {rule}; "
          f"{'max-subtracted' if subtract_max else 'no max-subtraction'}; {inputs}")


def _outliers(factor: float) -> str:
  """The name of the inputs with outlier tokens of ``factor``× the norm."""
  return f"outlier tokens ×{factor:g}"


def _nonfinite_grid(ctx: Context, d_k: int) -> dict[Condition, np.ndarray]:
  """{condition: per-seed fraction of non-finite attention outputs} at ``d_k`` for every condition."""
  inputs = ("iid", *(_outliers(f) for f in OUTLIER_FACTORS))
  rules = ("none", "sqrt")

  def fractions(q, k, v, rule):
    out = {}
    for subtract_max in (False, True):
      for name, dtype in LOW_PRECISION.items():
        for how, acc32, softmax32 in COMPUTE:
          o = _low_precision_output(q, k, v, dtype=dtype, rule=rule, acc32=acc32, softmax32=softmax32,
                                    subtract_max=subtract_max)
          out[(name, how, subtract_max)] = jnp.mean(~jnp.isfinite(o.astype(jnp.float32)))
      o = attention_lib.dot_product_attention(q, k, v, rule=rule, subtract_max=subtract_max)
      out[("float32", ALL_F32, subtract_max)] = jnp.mean(~jnp.isfinite(o))
    return out

  def grid(q, k, v):
    per_input = lambda f: jax.vmap(lambda rule: fractions(_with_outliers(q, f), _with_outliers(k, f), v, rule))(
        _stacked(rules, d_k))
    return jax.vmap(per_input)(jnp.asarray([1.0, *OUTLIER_FACTORS], jnp.float32))  # [inputs, rules]

  def compute():
    values = ctx.per_seed("nonfinite", lambda rng: _iid(rng, ctx, d_k), grid, d_k)  # [seeds, inputs, rules]
    return {(dtype, how, rule, sub, label): frac[:, i, j] for (dtype, how, sub), frac in values.items()
            for i, label in enumerate(inputs) for j, rule in enumerate(rules)}

  return ctx.cached(("nonfinite", d_k), compute)


def _grid_numbers(grid: dict[Condition, np.ndarray]) -> dict[str, dict[str, float]]:
  """Every condition of the grid by name, with mean and std over seeds."""
  return {_condition_name(c): mean_std(v, 4)
          for c, v in sorted(grid.items(), key=lambda item: _condition_name(item[0]))}


def _nonfinite_measurement(ctx: Context, d_k: int, statistic: str, value: float, finding: str) -> Measurement:
  """The statistic, d_k and every condition of the non-finite grid at ``d_k``, with the finding."""
  numbers = {statistic: round_sig(value), "d_k": d_k, "nonfinite_fraction": _grid_numbers(_nonfinite_grid(ctx, d_k))}
  return Measurement(numbers, finding)


OVERFLOW_DTYPES = {"float16": jnp.float16, "bfloat16": jnp.bfloat16, "float32": jnp.float32}
OVERFLOW_PARTS = tuple(Part(name, Criterion("nonfinite_fraction", "fraction of non-finite outputs", holds=(">", 0.01),
                                            fails=("<=", 0.0))) for name in OVERFLOW_DTYPES)


def exp_overflow_fractions(q: jax.Array, k: jax.Array, v: jax.Array, rule: str = "none") -> dict[str, jax.Array]:
  """Per dtype of OVERFLOW_DTYPES, the fraction of non-finite outputs of ``rule``'s attention without max-subtraction,
  with q·k and the softmax in that dtype.

  Args:
    q: [B, T, N, H] queries.
    k, v: [B, S, N, H] keys and values.
    rule: the logit-scale rule.

  Returns:
    {dtype name: scalar fraction}.
  """
  return {name: jnp.mean(~jnp.isfinite(_low_precision_output(
      q, k, v, dtype=dtype, rule=rule, acc32=False, softmax32=False, subtract_max=False).astype(jnp.float32)))
          for name, dtype in OVERFLOW_DTYPES.items()}


def _fp16_overflow(ctx: Context) -> Measurement:
  d = EXP_D_K
  frac = ctx.per_seed("exp_overflow", lambda rng: _iid(rng, ctx, d), exp_overflow_fractions)
  means = {name: seed_mean(x) for name, x in frac.items()}
  score, verdicts = score_parts(OVERFLOW_PARTS, means)
  grid = {c: seed_mean(v) for c, v in _nonfinite_grid(ctx, d).items()}
  top = _outliers(max(OUTLIER_FACTORS))
  low = lambda dtype, rule, inputs: grid[(dtype, ALL_LOW, rule, False, inputs)]
  f32 = lambda rule, inputs: grid[("float32", ALL_F32, rule, False, inputs)]
  subtracted = [x for c, x in grid.items() if c[3]]
  held = [n for n, verdict in verdicts.items() if verdict == HOLDS]
  where = (f"exp overflows in {' and '.join(held)}{' only' if len(held) < len(OVERFLOW_DTYPES) else ''}" if held else
           "exp overflows in none of them")
  numbers = _nonfinite_measurement(ctx, d, "dtypes_overflowing", score, "").numbers
  return Measurement(
      {**numbers, "part_verdicts": verdicts, "overflows_in": held,
       "nonfinite_unscaled_iid_no_max_sub": {n: mean_std(x, 4) for n, x in frac.items()}},
      f"Without max-subtraction, unscaled iid attention at d_k = {d} with q·k and softmax in one dtype gives "
      + ", ".join(f"{means[n]:.1%} ({n})" for n in OVERFLOW_DTYPES) + f" non-finite outputs: {where}. With 1/√d_k: "
      f"{low('float16', 'sqrt', 'iid'):.1%} in float16; with {top} (first and last token) and 1/√d_k: "
      f"{low('float16', 'sqrt', top):.1%} in float16, {low('bfloat16', 'sqrt', top):.1%} in bfloat16, "
      f"{f32('sqrt', top):.1%} in float32. With max-subtraction the largest non-finite fraction over all "
      f"{len(subtracted)} conditions is {max(subtracted):.1%} ({seeds_text(ctx)}).")


def nonfinite_rows(out: jax.Array) -> jax.Array:
  """The fraction of query rows [B, T, N] of an attention output [B, T, N, H] with a non-finite entry."""
  return jnp.mean(jnp.any(~jnp.isfinite(out.astype(jnp.float32)), axis=-1))


def clamped_attention(q, k, v, *, rule: rules_lib.ScaleRule, clamp: float, subtract_max: bool) -> jax.Array:
  """softmax(clip(q·k, −clamp, clamp)·s)·v with q·k, the clip and the softmax in the inputs' dtype (note 2 §3).

  Args:
    q: [B, T, N, H] queries.
    k, v: [B, S, N, H] keys and values.
    rule: a ``FixedScale`` (its ``logit`` factor s is applied after the clip).
    clamp: the bound c of the clip, before the scale.
    subtract_max: subtract the row maximum before exp.

  Returns:
    [B, T, N, H], in the inputs' dtype.
  """
  z = attention_lib.attention_logits(q, k, rule="none", float32_softmax=False, subtract_max=subtract_max)
  z = jnp.clip(z, -clamp, clamp) * jnp.asarray(rule.logit, z.dtype)
  weights = attention_lib.masked_softmax(z, None, subtract_max=subtract_max).astype(q.dtype)
  return jnp.einsum("bnts,bsnh->btnh", weights, v)


ONLINE_BLOCK = 32  # keys per block of ``online_softmax_attention`` in the outlier sweep


def online_softmax_attention(q: jax.Array, k: jax.Array, v: jax.Array, *, scale: float, block: int) -> jax.Array:
  """softmax(s·q·k)·v by the online softmax (FlashAttention's recurrence: a running maximum, sum and output over key
  blocks) with every step in the inputs' dtype, q·k accumulated in it too.

  The library's ``scaling.attention.blockwise`` runs the same recurrence with q·k and the statistics in float32; this one keeps
  the inputs' dtype throughout, so that it can be compared with dense attention at the same accumulation dtype.

  Args:
    q: [B, T, N, H] queries.
    k, v: [B, S, N, H] keys and values; S a multiple of ``block``.
    scale: the logit factor s.
    block: keys per block.

  Returns:
    [B, T, N, H] in the inputs' dtype.
  """
  if k.shape[1] % block:
    raise ValueError(f"block must divide the key length {k.shape[1]}, got {block}")
  dt = q.dtype
  b, t, n, h = q.shape
  m = jnp.full((b, n, t), -jnp.inf, dt)
  total = jnp.zeros((b, n, t), dt)
  acc = jnp.zeros((b, n, t, h), dt)
  for j in range(0, k.shape[1], block):
    z = jnp.einsum("btnh,bsnh->bnts", q, k[:, j:j + block], preferred_element_type=dt) * jnp.asarray(scale, dt)
    m_new = jnp.maximum(m, jnp.max(z, axis=-1))
    p = jnp.exp(z - m_new[..., None])
    alpha = jnp.exp(m - m_new)
    total = alpha * total + jnp.sum(p, axis=-1, dtype=dt)
    acc = alpha[..., None] * acc + jnp.einsum("bnts,bsnh->bnth", p, v[:, j:j + block], preferred_element_type=dt)
    m = m_new
  return jnp.transpose(acc / total[..., None], (0, 2, 1, 3))


# The conditions of the outlier sweep: (name, dtype, how), how one of "input" (q·k and softmax in the input dtype),
# "softmax32" (q·k in the input dtype, softmax in float32), "dense32" (dense, q·k accumulated and softmax in
# float32), "clamp" (``clamped_attention``), "online" (the library's blockwise attention: online softmax, as
# FlashAttention, q·k and softmax in float32), "online_low" (``online_softmax_attention``: online softmax with q·k and
# softmax in the input dtype) and "float32".
SWEEP_HOWS = ("input", "softmax32", "dense32", "clamp", "online", "online_low")


def _sweep_name(dtype: str, how: str, subtract_max: bool) -> str:
  """The name of one condition of the outlier sweep."""
  what = {"input": f"q·k and softmax in {dtype}", "softmax32": f"q·k in {dtype}, softmax in float32",
          "dense32": f"dense, q·k and softmax in float32, {dtype} inputs",
          "clamp": f"q·k clamped to [−{CLAMP:g}, {CLAMP:g}] before the scale, all in {dtype}",
          "online": f"online (blockwise) softmax, q·k and softmax in float32, {dtype} inputs",
          "online_low": f"online (blockwise) softmax, q·k and softmax in {dtype}", "float32": "all in float32"}[how]
  return f"{what}; {'max-subtracted' if subtract_max else 'no max-subtraction'}"


def _outlier_sweep(ctx: Context) -> dict[str, np.ndarray]:
  """{condition name: per-seed fraction of non-finite rows [seeds, factors]} of 1/√d_k attention at
  LOW_PRECISION_D_K, the first and last tokens of q and k scaled by each of SWEPT_FACTORS."""
  d = LOW_PRECISION_D_K
  sqrt = rules_lib.as_fixed_scale(rules_lib.get_rule("sqrt"), d)

  def one(q, k, v, f):
    q, k = _with_outliers(q, f), _with_outliers(k, f)
    out = {_sweep_name("float32", "float32", sub): nonfinite_rows(attention_lib.dot_product_attention(
        q, k, v, rule="sqrt", subtract_max=sub, implementation="xla")) for sub in (False, True)}
    for name, dtype in LOW_PRECISION.items():
      lq, lk, lv = (x.astype(dtype) for x in (q, k, v))
      for sub in (False, True):
        for how, soft32 in (("input", False), ("softmax32", True)):
          out[_sweep_name(name, how, sub)] = nonfinite_rows(_low_precision_output(
              q, k, v, dtype=dtype, rule="sqrt", acc32=False, softmax32=soft32, subtract_max=sub))
        out[_sweep_name(name, "clamp", sub)] = nonfinite_rows(
            clamped_attention(lq, lk, lv, rule=sqrt, clamp=CLAMP, subtract_max=sub))
      out[_sweep_name(name, "dense32", True)] = nonfinite_rows(_low_precision_output(
          q, k, v, dtype=dtype, rule="sqrt", acc32=True, softmax32=True, subtract_max=True))
      out[_sweep_name(name, "online", True)] = nonfinite_rows(
          attention_lib.dot_product_attention(lq, lk, lv, rule="sqrt", implementation="blockwise"))
      block = math.gcd(ONLINE_BLOCK, ctx.seq_len)
      out[_sweep_name(name, "online_low", True)] = nonfinite_rows(
          online_softmax_attention(lq, lk, lv, scale=float(sqrt.logit), block=block))
    return out

  def compute():
    return ctx.per_seed("outlier_sweep", lambda rng: _iid(rng, ctx, d),
                        lambda q, k, v: jax.vmap(lambda f: one(q, k, v, f))(jnp.asarray(SWEPT_FACTORS, jnp.float32)))

  return ctx.cached("outlier_sweep", compute)


def smallest_factor(fractions: np.ndarray, factors: tuple[float, ...] = SWEPT_FACTORS) -> float | None:
  """The smallest factor whose seed-mean non-finite fraction is above 0 ([seeds, factors]; None: no factor)."""
  hit = np.mean(np.asarray(fractions, np.float64), axis=0) > 0
  return float(factors[int(np.argmax(hit))]) if hit.any() else None


def _sweep_numbers(ctx: Context) -> dict[str, Any]:
  """The sweep's smallest non-finite factor per condition, and its fractions by factor."""
  sweep = _outlier_sweep(ctx)
  return {"d_k": LOW_PRECISION_D_K, "factors": list(SWEPT_FACTORS),
          "smallest_nonfinite_factor": {n: smallest_factor(v) for n, v in sweep.items()},
          "nonfinite_row_fraction": {n: [round_sig(x) for x in np.mean(v, axis=0)] for n, v in sweep.items()}}


def _factor_text(f: float | None) -> str:
  return "none up to ×300" if f is None else f"×{f:g}"


def _low_precision_nan_even_scaled(ctx: Context) -> Measurement:
  numbers = _sweep_numbers(ctx)
  first = numbers["smallest_nonfinite_factor"]
  realistic = [first[_sweep_name(t, how, True)] for t in LOW_PRECISION for how in ("input", "softmax32")]
  found = [f for f in realistic if f is not None]
  stat = min(found) if found else 2 * SWEPT_FACTORS[-1]  # beyond the sweep: twice its largest factor
  shown = [_sweep_name(t, how, sub) for t in LOW_PRECISION for how in ("input", "softmax32") for sub in (True, False)]
  return Measurement(
      {"smallest_nonfinite_factor_max_subtracted": stat, **numbers},
      f"1/√d_k attention at d_k = {LOW_PRECISION_D_K} with the first and last tokens of q and k scaled ×1–×300: the "
      "smallest factor giving non-finite rows is " + "; ".join(f"{_factor_text(first[n])} ({n})" for n in shown)
      + f" ({seeds_text(ctx)}).")


SOLVES = Criterion("max_nonfinite_rows", "largest fraction of non-finite rows over outlier factors ×1–×300 "
                   f"(d_k {LOW_PRECISION_D_K}, 1/√d_k)", holds=("<=", 0.0), fails=(">", 0.001))
SOLVES_PARTS = (Part("FP32", SOLVES), Part("clamp", SOLVES))
READINGS = {"as written": False, "with max-subtraction": True}  # FP32 alone, or FP32 with max-subtraction
SOLVES_CRITERION = parts_criterion(
    "parts_solved_as_written", "the remedies that solve the overflow, read as written: FP32 as the one change (no "
    "max-subtraction) and q·k clamped to [−100, 100] (float16 and bfloat16, with and without max-subtraction)",
    SOLVES_PARTS, reason="the note offers FP32 itself as the fix and names no max-subtraction (the reading 'FP32 with "
    "max-subtraction' is judged by the same criterion in the finding); 'solved' = no non-finite row at all, over 0.1% "
    "left is not solved")


def fp32_or_clamp_parts(sweep: dict[str, np.ndarray]) -> dict[str, dict[str, Any]]:
  """Per reading of READINGS, the parts of 'solved by FP32 or by clamping' (``score_parts`` of SOLVES_PARTS) from the
  outlier sweep ({condition name: [seeds, factors] fractions of non-finite rows}).

  FP32 is float32 attention without ("as written": FP32 as the one change) or with max-subtraction; the clamp is the
  worst of ``clamped_attention`` in float16 and bfloat16, with and without max-subtraction, in either reading.
  """
  worst = lambda names: max(float(np.max(np.mean(sweep[n], axis=0))) for n in names)
  clamp = worst([n for n in sweep if "clamped" in n])
  out = {}
  for reading, sub in READINGS.items():
    values = {"FP32": worst([_sweep_name("float32", "float32", sub)]), "clamp": clamp}
    score, verdicts = score_parts(SOLVES_PARTS, values)
    out[reading] = {"parts_solved": score, "max_nonfinite_rows": values, "part_verdicts": verdicts}
  return out


def _fp32_or_clamp_solves(ctx: Context) -> Measurement:
  sweep = _outlier_sweep(ctx)
  readings = fp32_or_clamp_parts(sweep)
  first = _factor_text(smallest_factor(sweep[_sweep_name("float32", "float32", False)]))
  fixed = {_sweep_name("float32", "float32", True), _sweep_name("float32", "float32", False)}
  fixed |= {n for n in sweep if "clamped" in n}
  broken = [n for n, v in sweep.items() if n not in fixed and np.mean(v, axis=0)[-1] > 0]
  fp32 = lambda r: f"FP32 leaves up to {r['max_nonfinite_rows']['FP32']:.2%} non-finite rows ({r['part_verdicts']['FP32']})"
  written, subtracted = readings["as written"], readings["with max-subtraction"]
  return Measurement(
      {"parts_solved_as_written": written["parts_solved"], "readings": readings,
       "verdict_with_max_subtraction": SOLVES_CRITERION.verdict(subtracted["parts_solved"]), **_sweep_numbers(ctx)},
      f"Over outlier factors ×1–×300 at d_k = {LOW_PRECISION_D_K} with 1/√d_k: the clamp (float16 and bfloat16, with "
      f"and without max-subtraction) leaves up to {written['max_nonfinite_rows']['clamp']:.2%} non-finite rows "
      f"({written['part_verdicts']['clamp']}). As written (FP32 as the one change, without max-subtraction; non-finite "
      f"rows from {first}) {fp32(written)}; read as FP32 with max-subtraction {fp32(subtracted)}, so that reading "
      f"{SOLVES_CRITERION.verdict(subtracted['parts_solved'])}. At ×300, {len(broken)} of {len(sweep) - len(fixed)} "
      f"other conditions have non-finite rows ({seeds_text(ctx)}).")


def _clamp_before_scale(ctx: Context) -> Measurement:
  sweep = _outlier_sweep(ctx)
  clamped = {n: v for n, v in sweep.items() if "clamped" in n}
  worst = max(float(np.max(np.mean(v, axis=0))) for v in clamped.values())
  plain = [_sweep_name(t, "input", sub) for t in LOW_PRECISION for sub in (True, False)]
  first = {n: smallest_factor(sweep[n]) for n in plain}
  clipped = _clip_fraction(ctx)
  return Measurement(
      {"max_nonfinite_clamped": round_sig(worst), "clipped_fraction_iid_d64": round_sig(clipped),
       "smallest_nonfinite_factor_unclamped": first, **_sweep_numbers(ctx)},
      f"Clamping q·k to [−{CLAMP:g}, {CLAMP:g}] before the 1/√d_k scale leaves at most {worst:.1%} non-finite rows "
      f"over outlier factors ×1–×300 at d_k = {LOW_PRECISION_D_K} (without the clamp: "
      + "; ".join(f"{_factor_text(f)} first gives non-finite rows with {n}" for n, f in first.items())
      + f"); on iid inputs at d_k = 64 the clamp changes {clipped:.2%} of logits ({seeds_text(ctx)}).")


def _clip_fraction(ctx: Context) -> float:
  """The mean fraction of unscaled iid logits at d_k = 64 beyond ±CLAMP (what the clamp changes on ordinary inputs)."""
  v = ctx.cached("d64_clip", lambda: ctx.per_seed("d64_magnitudes", lambda rng: _iid(rng, ctx, 64)[:2], lambda q, k: (
      jnp.mean(jnp.abs(attention_lib.attention_logits(q, k, rule="none")) > CLAMP))))
  return seed_mean(v)


ONLINE_PAIRS = {"in the input dtype": ("input", "online_low"), "in float32": ("dense32", "online")}
"""(dense, online) conditions of the outlier sweep that accumulate q·k and run the softmax in the same dtype."""


def online_over_dense(sweep: dict[str, np.ndarray]) -> dict[str, Any]:
  """The online softmax's non-finite rows over dense attention's at the same accumulation dtype (ONLINE_PAIRS), both
  max-subtracted, per input dtype and outlier factor where the dense one has any; and the largest of them (NaN when
  the dense one never has any)."""
  ratios = {}
  for t in LOW_PRECISION:
    for acc, (dense, online) in ONLINE_PAIRS.items():
      d, o = (np.mean(sweep[_sweep_name(t, how, True)], axis=0) for how in (dense, online))
      ratios[f"{t}, q·k and softmax {acc}"] = [round_sig(float(y / x)) for x, y in zip(d, o) if x > 0]
  found = [r for rs in ratios.values() for r in rs]
  across = [float(y / x) for t in LOW_PRECISION for x, y in zip(
      *(np.mean(sweep[_sweep_name(t, how, True)], axis=0) for how in ("input", "online"))) if x > 0]
  return {"max_ratio": max(found) if found else float("nan"), "ratios": ratios,
          "max_ratio_across_dtypes": max(across) if across else float("nan")}


def _online_softmax_mitigates(ctx: Context) -> Measurement:
  sweep = _outlier_sweep(ctx)
  got = online_over_dense(sweep)
  stat = got["max_ratio"]
  first = lambda t, how: f"{_factor_text(smallest_factor(sweep[_sweep_name(t, how, True)]))} ({t})"
  pairs = "; ".join(f"with q·k and softmax {acc}, dense " + ", ".join(first(t, dense) for t in LOW_PRECISION)
                    + " and online " + ", ".join(first(t, online) for t in LOW_PRECISION)
                    for acc, (dense, online) in ONLINE_PAIRS.items())
  return Measurement(
      {"max_online_over_dense_nonfinite": round_sig(stat) if math.isfinite(stat) else None,
       "online_over_dense_by_condition": got["ratios"],
       "max_online32_over_dense_input_dtype": round_sig(got["max_ratio_across_dtypes"]), **_sweep_numbers(ctx)},
      f"At d_k = {LOW_PRECISION_D_K} with outlier tokens ×1–×300, max-subtracted, the first factor with non-finite "
      f"rows is: {pairs}. At the same accumulation dtype the online softmax's non-finite fraction is at most "
      f"{_fmt_ratio(stat)}× the dense one where that is non-zero. Compared across accumulation dtypes instead (the "
      f"library's online softmax, q·k and softmax in float32, against dense attention in the input dtype) it would "
      f"be at most {_fmt_ratio(got['max_ratio_across_dtypes'])}× ({seeds_text(ctx)}).")


def _fmt_ratio(x: float) -> str:
  return "n/a" if not math.isfinite(x) else f"{x:.3g}"


def _nan_gradient(ctx: Context) -> Measurement:
  d = LOW_PRECISION_D_K
  factor = SWEPT_FACTORS[-1]

  def compute(q, k, v):
    def loss(q, k, dtype, soft32):
      out = _low_precision_output(_with_outliers(q, factor), _with_outliers(k, factor), v, dtype=dtype, rule="sqrt",
                                  acc32=False, softmax32=soft32, subtract_max=True)
      return jnp.sum(out.astype(jnp.float32) * v)

    ref = jnp.max(jnp.abs(jax.grad(loss)(q, k, jnp.float32, True)))
    g = jax.grad(loss)(q, k, jnp.float16, False)
    nonfinite = ~jnp.isfinite(g)
    exploded = jnp.isinf(g) | (jnp.isfinite(g) & (jnp.abs(g) > 100 * ref))
    affected = jnp.maximum(jnp.sum(nonfinite | exploded), 1)
    return {"nan": jnp.mean(jnp.isnan(g)), "inf": jnp.mean(jnp.isinf(g)),
            "exploded_share": jnp.sum(exploded) / affected,
            "rows": nonfinite_rows(_low_precision_output(_with_outliers(q, factor), _with_outliers(k, factor), v,
                                                         dtype=jnp.float16, rule="sqrt", acc32=False,
                                                         softmax32=False, subtract_max=True))}

  v = ctx.cached("nan_gradient", lambda: ctx.per_seed("nan_gradient", lambda rng: _iid(rng, ctx, d), compute))
  share = seed_mean(v["exploded_share"])
  return Measurement(
      {"exploded_share_of_affected": round_sig(share), "nan_fraction": mean_std(v["nan"], 4),
       "inf_fraction": mean_std(v["inf"], 4), "nonfinite_output_rows": mean_std(v["rows"], 4), "factor": factor},
      f"float16 1/√d_k attention (max-subtracted) at d_k = {d} with outlier tokens ×{factor:g}: "
      f"{seed_mean(v['rows']):.1%} of output rows are non-finite; the gradient with respect to q is NaN in "
      f"{seed_mean(v['nan']):.2%} and ±inf in {seed_mean(v['inf']):.2%} of entries; of the affected entries "
      f"(non-finite or > 100× the float32 gradient's largest), {share:.1%} exploded (inf or large) rather than NaN "
      f"({seeds_text(ctx)}).")


def _rope_norms(ctx: Context) -> Measurement:
  dims = [d for d in ctx.d_k if d % 2 == 0]
  stride = max(1, 32768 // ctx.seq_len)
  labels = ("0..T-1", f"0..{stride}(T-1)")

  def one(d):
    def compute(q, k):
      rel = lambda y, x: jnp.max(jnp.abs(jnp.linalg.norm(y, axis=-1) / jnp.linalg.norm(x, axis=-1) - 1))

      def rotated(positions):
        rq, rk = rope_lib.apply_rope(q, positions), rope_lib.apply_rope(k, positions)
        return jnp.maximum(rel(rq, q), rel(rk, k)), _logit_var(rq, rk, "sqrt")

      change, var = jax.vmap(rotated)(jnp.arange(ctx.seq_len)[None, :] * jnp.asarray([[1], [stride]]))
      return {"change": change, "var": var, "var_without": _logit_var(q, k, "sqrt")}
    return ctx.per_seed("rope", lambda rng: _iid(rng, ctx, d)[:2], compute, d)

  v = ctx.cached("rope", lambda: {d: one(d) for d in dims})
  change = max(float(np.max(v[d]["change"])) for d in dims)
  d = 64 if 64 in dims else dims[-1]
  return Measurement(
      {"max_rel_norm_change": change, "positions": labels, "vectors_per_seed": 2 * BATCH * ctx.seq_len * HEADS,
       "logit_var_sqrt_without_rope": {d: mean_std(v[d]["var_without"], 4) for d in dims},
       "logit_var_sqrt_with_rope": {lab: {d: mean_std(v[d]["var"][:, i], 4) for d in dims}
                                    for i, lab in enumerate(labels)}},
      f"Over {2 * BATCH * ctx.seq_len * HEADS} q and k vectors per seed at d_k {dims[0]}–{dims[-1]} and positions "
      f"{' and '.join(labels)}, the largest relative change of a norm under RoPE is {change:.1e}; the 1/√d_k logit "
      f"variance at d_k = {d} is {pm(v[d]['var_without'])} without and "
      f"{pm(v[d]['var'][:, -1])} with RoPE ({seeds_text(ctx)}).")


def _rope_variance(ctx: Context) -> Measurement:
  _rope_norms(ctx)
  v = ctx.cached("rope", lambda: None)
  ratio = {d: x["var"] / x["var_without"][:, None] for d, x in v.items()}  # [seeds, position sets]
  dev = max(abs(float(np.mean(r[:, i])) - 1) for r in ratio.values() for i in range(r.shape[1]))
  return Measurement(
      {"max_rel_var_change": round_sig(dev),
       "var_with_over_without": {d: [round_sig(float(np.mean(r[:, i]))) for i in range(r.shape[1])]
                                 for d, r in ratio.items()}},
      f"The 1/√d_k logit variance with RoPE over that without (iid q, k, positions 0..T−1 and a stride-"
      f"{max(1, 32768 // ctx.seq_len)} set) differs from 1 by at most {dev:.3f} over d_k "
      f"{min(v)}–{max(v)} ({seeds_text(ctx)}).")


TAUS = tuple(float(x) for x in 2.0 ** np.linspace(-1.0, 1.0, 9))  # temperatures tried at d_k = 128


def temperature_to_match(entropies: np.ndarray, target: float, taus: tuple[float, ...] = TAUS) -> float:
  """The τ (log-interpolated) at which the entropy [len(taus)], falling in τ, equals ``target`` (NaN: out of range)."""
  e = np.asarray(entropies, np.float64)
  order = np.argsort(e)  # increasing entropy = decreasing τ
  log_tau = np.log2(np.asarray(taus, np.float64))[order]
  if not e.min() <= target <= e.max():
    return float("nan")
  return float(2.0 ** np.interp(target, e[order], log_tau))


def _temperature_needed(ctx: Context) -> Measurement:
  ctx.require_d_k(*NOTE_D_K)
  ent64 = sweep_series(ctx, "sqrt", "entropy_normalized")[64]

  def compute(q, k):
    def entropy(tau):
      p = attention_lib.attention_weights(q, k, scale=jnp.sqrt(tau / 128.0))
      return jnp.mean(-jnp.sum(p * jnp.log(jnp.maximum(p, 1e-30)), axis=-1)) / jnp.log(p.shape[-1])
    return jax.vmap(entropy)(jnp.asarray(TAUS, jnp.float32))

  ent128 = ctx.per_seed("temperature_needed", lambda rng: _iid(rng, ctx, 128)[:2], compute)  # [seeds, taus]
  taus = np.asarray([temperature_to_match(ent128[i], ent64[i]) for i in range(ctx.num_seeds)])
  stat = float(np.mean(np.abs(np.log2(taus))))
  return Measurement(
      {"abs_log2_tau_needed": round_sig(stat), "tau_needed": mean_std(taus, 4),
       "entropy_128_by_tau": {f"{t:.3g}": round_sig(float(np.mean(ent128[:, i]))) for i, t in enumerate(TAUS)},
       "entropy_64": mean_std(ent64, 5)},
      f"To give d_k = 128 the normalized entropy of d_k = 64 under 1/√d_k ({pm(ent64, '.4f')}), the temperature "
      f"of 1/√(d_k/τ) must be τ = {pm(taus, '.3f')} (iid q, k, {ctx.seq_len} keys, {seeds_text(ctx)}).")


RMS_WIDTH, RMS_TOKENS = 1024, 4096  # the timed normalization: [RMS_TOKENS, RMS_WIDTH] float32
RMS_ROUNDS, RMS_CALLS = 8, 5  # timing rounds, and interleaved calls of each normalization per round


def _rmsnorm_cheaper(ctx: Context) -> Measurement:
  x = jnp.asarray(ctx.rngs("rmsnorm")[0].standard_normal((RMS_TOKENS, RMS_WIDTH), dtype=np.float32))
  fns = {"layer": jax.jit(rules_lib.layer_norm), "rms": jax.jit(rules_lib.rms_norm)}
  for f in fns.values():
    f(x).block_until_ready()  # compile
  best = {n: np.full(RMS_ROUNDS, np.inf) for n in fns}  # each round's fastest call: the least disturbed
  for r in range(RMS_ROUNDS):
    for _ in range(RMS_CALLS):  # interleaved, so that load changes hit both alike
      for n, f in fns.items():
        start = time.perf_counter()
        f(x).block_until_ready()
        best[n][r] = min(best[n][r], time.perf_counter() - start)
  ratios = best["rms"] / best["layer"]  # [rounds]
  ratio = float(np.mean(ratios))
  return Measurement(
      {"rms_over_layer_time": round_sig(ratio), "rms_over_layer_time_se": round_sig(standard_error(ratios)),
       "per_round": [round_sig(float(r)) for r in ratios],
       "median_seconds": {n: round_sig(float(np.median(t))) for n, t in best.items()},
       "shape": [RMS_TOKENS, RMS_WIDTH], "device": jax.devices()[0].device_kind},
      f"On {jax.devices()[0].device_kind}, jitted RMSNorm of [{RMS_TOKENS}, {RMS_WIDTH}] float32 takes "
      f"{pm(ratios, '.2f')}× the time of LayerNorm (over {RMS_ROUNDS} rounds, each the fastest of {RMS_CALLS} "
      "interleaved calls of both).")


def _qk_norm_robust(ctx: Context) -> Measurement:
  conditions = [f"entries of std {s:g}" for s in QK_STDS] + [_mixed_scales()]

  def one(d):
    shape = (2, BATCH, ctx.seq_len, 1, 1)  # a std for each token of q and of k

    def draw(rng):
      q, k, _ = _iid(rng, ctx, d)
      mixed = _token_stds(rng, shape)
      return q, k, np.stack([np.full(shape, s) for s in QK_STDS] + [mixed]).astype(np.float32)

    def compute(q, k, stds):
      return jax.vmap(lambda sd: {r: _logit_var(sd[0] * q, sd[1] * k, r) for r in ("sqrt", "qk_norm")})(stds)

    per_seed = ctx.per_seed("qk_norm", draw, compute, d)  # {rule: [seeds, conditions]}
    return {c: {r: x[:, i] for r, x in per_seed.items()} for i, c in enumerate(conditions)}

  v = {d: one(d) for d in ctx.d_k}
  dev = max(abs(seed_mean(v[d][c]["qk_norm"]) - 1) for d in ctx.d_k for c in conditions)
  qk = [seed_mean(v[d][c]["qk_norm"]) for d in ctx.d_k for c in conditions]
  d = 64 if 64 in ctx.d_k else ctx.d_k[0]
  return Measurement(
      {"max_rel_dev_qk_norm": round_sig(dev),
       "logit_var": {c: {r: {dd: mean_std(v[dd][c][r], 4) for dd in ctx.d_k} for r in ("sqrt", "qk_norm")}
                     for c in conditions}},
      "For q, k with " + ", ".join(conditions) + f", the 1/√d_k logit variance at d_k = {d} is "
      + ", ".join(f"{seed_mean(v[d][c]['sqrt']):.3g}" for c in conditions)
      + f"; with QK-norm it is {span(qk)} over these conditions and d_k {ctx.d_k[0]}–{ctx.d_k[-1]} "
      f"({seeds_text(ctx)}).")


def _temperature_equivalence(ctx: Context) -> Measurement:
  diffs = {}
  for d in ctx.d_k:
    worst = []
    weights = jax.jit(lambda q, k: attention_lib.attention_weights(q, k, rule="sqrt"))
    for rng in ctx.rngs("temperature", d):
      q, k, _ = _iid(rng, ctx, d)
      w = np.asarray(weights(q, k), np.float64)
      z = np.einsum("btnh,bsnh->bnts", q.astype(np.float64), k.astype(np.float64))
      t = math.sqrt(d)  # the temperature
      e = np.exp(z / t - np.max(z / t, axis=-1, keepdims=True))
      worst.append(float(np.max(np.abs(w - e / np.sum(e, axis=-1, keepdims=True)))))
    diffs[d] = np.asarray(worst)
  top = max(float(np.max(v)) for v in diffs.values())
  return Measurement(
      {"max_abs_diff": top, "max_abs_diff_by_d_k": by_d_k(diffs)},
      f"The library's softmax(q·k/√d_k) weights (float32) differ from a float64 numpy softmax(q·k/T) with "
      f"T = √d_k by at most {top:.1e} at d_k {ctx.d_k[0]}–{ctx.d_k[-1]} ({n_seeds_text(ctx)}).")


def _layernorm_not_enough(ctx: Context) -> Measurement:
  v = _projected_logit_var(ctx)
  log_d = np.log(np.asarray(ctx.d_k, np.float64))
  slopes = np.asarray([np.polyfit(log_d, np.log([v["none"][d][i] for d in ctx.d_k]), 1)[0] if len(ctx.d_k) > 1
                       else np.nan for i in range(ctx.num_seeds)])
  lo, hi = ctx.d_k[0], ctx.d_k[-1]
  width = _projection_width(ctx)
  std = _sp_spec(width, lo).init_std
  return Measurement(
      {"var_exponent": round_sig(seed_mean(slopes)), "var_exponent_by_seed": mean_std(slopes, 4), "width": width,
       "logit_var_none": by_d_k(v["none"]),
       "logit_var_sqrt": by_d_k(v["sqrt"])},
      f"Tokens LayerNorm-ed over width {width} (raw: {_mixed_scales()}, offsets of std {TOKEN_OFFSET_STD:g}) and "
      f"projected by W_q, W_k of "
      f"std {std:.3g} (SP fan-in) give unscaled logit variance {seed_mean(v['none'][lo]):.3g} at d_k = {lo} and "
      f"{seed_mean(v['none'][hi]):.4g} at d_k = {hi}: Var ∝ d_k^{pm(slopes, '.3f')}; with 1/√d_k it is "
      f"{span([seed_mean(x) for x in v['sqrt'].values()])} ({seeds_text(ctx)}).")


def relative_spread(values: list[float]) -> float:
  """(max − min) / mean of ``values``."""
  return (max(values) - min(values)) / float(np.mean(values))


def _head_dim_scales(ctx: Context) -> dict[int, tuple[int, dict[str, np.ndarray]]]:
  """{width: (heads, per-seed values)}: the 1/√d_k logit std and mean row-max logit of unit-variance tokens through
  SP-initialized W_q, W_k with d_k = FIXED_HEAD_DIM and width/FIXED_HEAD_DIM heads ("fixed") and with one head of
  d_k = width ("grown"), for iid q, k ("iid") and for q_t, k_t of each token correlated at QK_ALIGNMENT ("aligned":
  W_k = ρ·W_q + √(1 − ρ²)·W_k')."""
  d = FIXED_HEAD_DIM
  rule = parametrization_lib.get_parametrization("sp").attention_rule()
  rho = QK_ALIGNMENT

  def one(width):
    heads = max(1, width // d)
    mult, mult1 = _sp_spec(width, heads * d).multiplier, _sp_spec(width, width).multiplier

    def draw(rng):
      x = rng.standard_normal((BATCH, ctx.seq_len, width), dtype=np.float32)
      return x, *_sp_weights(rng, width, heads * d), *_sp_weights(rng, width, width)

    def compute(x, w_q, w_k, w_q1, w_k1):
      out = {}
      for inputs, c in (("iid", 0.0), ("aligned", rho)):
        for name, m, h, dk, wq, wk in (("fixed", mult, heads, d, w_q, w_k), ("grown", mult1, 1, width, w_q1, w_k1)):
          wk = c * wq + math.sqrt(1.0 - c * c) * wk
          q, k = ((m * x @ w).reshape(BATCH, ctx.seq_len, h, dk) for w in (wq, wk))
          z = attention_lib.attention_logits(q, k, rule=rule)
          out[f"{name} {inputs} std"] = jnp.std(z)
          out[f"{name} {inputs} row max"] = jnp.mean(jnp.max(z, axis=-1))
      return out

    return heads, ctx.per_seed("head_dim_constant", draw, compute, width)

  return ctx.cached(("head_dim_scales", rho), lambda: {w: one(w) for w in ctx.widths})


def _head_dim_constant(ctx: Context) -> Measurement:
  d = FIXED_HEAD_DIM
  out = _head_dim_scales(ctx)
  spread = {f"{name} {inputs}": relative_spread([seed_mean(v[f"{name} {inputs} row max"]) for _, v in out.values()])
            for name in ("fixed", "grown") for inputs in ("iid", "aligned")}
  contrast = {inputs: spread[f"grown {inputs}"] - spread[f"fixed {inputs}"] for inputs in ("iid", "aligned")}
  std_spread = relative_spread([seed_mean(v["fixed iid std"]) for _, v in out.values()])
  row_max = lambda key: ", ".join(f"{seed_mean(v[key]):.2f}" for _, v in out.values())
  widths = ", ".join(f"{w} ({h} head{'s' if h > 1 else ''})" for w, (h, _) in out.items())
  return Measurement(
      {"row_max_spread_contrast": round_sig(max(contrast.values())), "contrast": {k: round_sig(v) for k, v in
                                                                                 contrast.items()},
       "row_max_relative_spread": {k: round_sig(v) for k, v in spread.items()},
       "rel_spread_logit_std_fixed_iid": round_sig(std_spread), "head_dim": d, "qk_alignment": QK_ALIGNMENT,
       "heads": {w: h for w, (h, _) in out.items()},
       "values": {key: {w: mean_std(v[key], 4) for w, (_, v) in out.items()} for key in next(iter(out.values()))[1]}},
      f"Unit-variance tokens through SP-initialized W_q, W_k at widths {widths}, 1/√d_k: with d_k = {d} fixed the "
      f"logit std spreads {std_spread:.2%} across widths and the mean row-max logit is {row_max('fixed iid row max')} "
      f"for iid q, k and {row_max('fixed aligned row max')} for q_t, k_t correlated at {QK_ALIGNMENT:g} (an assumed "
      f"trained alignment); one head with d_k = width (the case the note warns about) gives "
      f"{row_max('grown iid row max')} and {row_max('grown aligned row max')}. The relative spread of the row max "
      f"across widths is larger with d_k growing than with d_k fixed by {contrast['iid']:+.3f} for iid and "
      f"{contrast['aligned']:+.3f} for aligned q, k ({seeds_text(ctx)}).")


def entropy_falls_fraction(logits: jax.Array, temperatures: tuple[float, ...]) -> jax.Array:
  """The fraction of rows of ``logits`` [..., S] whose softmax entropy falls at every step of ``temperatures``
  (decreasing): softmax(z/T) gets more focused each time T is lowered."""
  h = jnp.stack([metrics_lib.row_entropy(jax.nn.softmax(logits / t, axis=-1)) for t in temperatures])
  return jnp.mean(jnp.all(h[1:] < h[:-1], axis=0))


def _lower_temperature_focuses(ctx: Context) -> Measurement:
  d = FOCUS_D_K
  temps = tuple(f * math.sqrt(d) for f in FOCUS_TEMPERATURES)

  def compute(q, k):
    z = attention_lib.attention_logits(q, k, rule="none")
    ent = jnp.stack([jnp.mean(metrics_lib.row_entropy(jax.nn.softmax(z / t, axis=-1))) for t in temps])
    mp = jnp.stack([jnp.mean(jnp.max(jax.nn.softmax(z / t, axis=-1), axis=-1)) for t in temps])
    return {"falls": entropy_falls_fraction(z, temps), "entropy": ent / math.log(z.shape[-1]), "max_prob": mp}

  v = ctx.per_seed("lower_temperature", lambda rng: _iid(rng, ctx, d)[:2], compute)
  frac = seed_mean(v["falls"])
  by_t = lambda key, spec: ", ".join(f"{format(float(np.mean(v[key][:, i])), spec)} (T = {f:g}√d_k)"
                                     for i, f in enumerate(FOCUS_TEMPERATURES))
  return Measurement(
      {"rows_entropy_falls": round_sig(frac), "temperatures_over_sqrt_d_k": list(FOCUS_TEMPERATURES), "d_k": d,
       "entropy_normalized": [round_sig(float(np.mean(x))) for x in v["entropy"].T],
       "max_prob": [round_sig(float(np.mean(x))) for x in v["max_prob"].T]},
      f"Lowering the temperature of softmax(q·k/T) from {FOCUS_TEMPERATURES[0]:g}√d_k to "
      f"{FOCUS_TEMPERATURES[-1]:g}√d_k in halvings (iid q, k at d_k = {d}, {ctx.seq_len} keys): the entropy falls at "
      f"every step in {frac:.2%} of "
      f"rows; the normalized entropy is {by_t('entropy', '.3f')} and the max probability {by_t('max_prob', '.3f')} "
      f"({seeds_text(ctx)}).")


def _stack_params(rng: np.random.Generator, depth: int, gain: float = 1.0) -> dict[str, np.ndarray]:
  """A pre-norm residual stack's weights [depth, ...] with SP's fan-in init std (× ``gain``): attention W_q, W_k, W_v,
  W_o and the MLP's W_1, W_2 (4× the width)."""
  w, hidden = STACK_WIDTH, 4 * STACK_WIDTH
  sp = parametrization_lib.get_parametrization("sp")
  shapes = {"wq": ("attn_q", w, w), "wk": ("attn_k", w, w), "wv": ("attn_v", w, w), "wo": ("attn_o", w, w),
            "w1": ("hidden", w, hidden), "w2": ("hidden", hidden, w)}
  return {name: (gain * sp.layer(kind, fi, fo, w).init_std
                 * rng.standard_normal((depth, fi, fo), dtype=np.float32)).astype(np.float32)
          for name, (kind, fi, fo) in shapes.items()}


def residual_gradient_norms(x: jax.Array, params: dict[str, jax.Array], cotangent: jax.Array,
                            norm: bool) -> jax.Array:
  """‖∂L/∂x_l‖ at the input of every block l of a pre-norm residual stack and at its output: [depth + 1].

  Each block is x + Attn(N(x)), then x + W_2 gelu(W_1 N(x)), with N the library's RMSNorm (``rules.rms_norm``, no
  gain) when ``norm``, else the identity; attention is the library's, 1/√d_k, heads of STACK_HEAD_DIM.
  L = Σ x_depth · cotangent.

  Args:
    x: [B, T, W] input tokens.
    params: ``_stack_params``' weights [depth, ...].
    cotangent: [B, T, W] the gradient of L with respect to the stack's output.
    norm: RMSNorm before each branch (else none).

  Returns:
    [depth + 1] gradient norms, from the first block's input to the output.
  """
  b, t, w = x.shape
  heads = w // STACK_HEAD_DIM
  n = rules_lib.rms_norm if norm else (lambda y: y)

  def block(h, p):
    q, k, v = ((n(h) @ p[name]).reshape(b, t, heads, STACK_HEAD_DIM) for name in ("wq", "wk", "wv"))
    h = h + attention_lib.dot_product_attention(q, k, v, rule="sqrt").reshape(b, t, w) @ p["wo"]
    return h + jax.nn.gelu(n(h) @ p["w1"]) @ p["w2"]

  def loss(taps):
    def step(h, xs):
      p, tap = xs
      return block(h + tap, p), None
    h, _ = jax.lax.scan(step, x, (params, taps[:-1]))
    return jnp.sum((h + taps[-1]) * cotangent)

  depth = next(iter(params.values())).shape[0]
  grads = jax.grad(loss)(jnp.zeros((depth + 1, b, t, w), x.dtype))
  return jnp.sqrt(jnp.sum(jnp.square(grads), axis=(1, 2, 3)))


def decades(norms: np.ndarray) -> np.ndarray:
  """log10(max / min) over the last axis."""
  norms = np.asarray(norms, np.float64)
  return np.log10(np.max(norms, axis=-1) / np.min(norms, axis=-1))


def _rmsnorm_flow(ctx: Context, gain: float = 1.0) -> dict[str, np.ndarray]:
  """Per seed, the ``residual_gradient_norms`` of a depth-STACK_DEPTH stack without and with RMSNorm ([seeds, depth+1]
  each), on unit-variance tokens and weights of init std × ``gain``."""

  def draw(rng):
    x = rng.standard_normal((BATCH, STACK_TOKENS, STACK_WIDTH), dtype=np.float32)
    return x, _stack_params(rng, STACK_DEPTH, gain), rng.standard_normal(x.shape, dtype=np.float32)

  def compute(x, params, g):
    return {name: residual_gradient_norms(x, params, g, norm) for name, norm in (("none", False), ("rms", True))}

  return ctx.cached(("rmsnorm_flow", gain), lambda: ctx.per_seed("rmsnorm_flow", draw, compute))


def _rmsnorm_stabilizes(ctx: Context) -> Measurement:
  v = _rmsnorm_flow(ctx)
  spans = {name: decades(g) for name, g in v.items()}  # [seeds]
  removed = spans["none"] - spans["rms"]
  ends = lambda name: (f"{seed_mean(v[name][:, 0]):.3g} at the first block's input and {seed_mean(v[name][:, -1]):.3g} "
                       "at the output")
  return Measurement(
      {"decades_removed": round_sig(seed_mean(removed)), "decades_without_norm": mean_std(spans["none"], 4),
       "decades_with_rmsnorm": mean_std(spans["rms"], 4), "depth": STACK_DEPTH, "width": STACK_WIDTH,
       "grad_norm_by_layer": {name: [round_sig(float(x)) for x in np.mean(g, axis=0)] for name, g in v.items()}},
      f"At initialization (random tokens, SP fan-in weights), in a depth-{STACK_DEPTH} pre-norm residual stack of "
      f"width {STACK_WIDTH} (attention with 1/√d_k and an MLP per block), ‖∂L/∂x‖ of the residual stream spans "
      f"{pm(spans['none'], '.2f')} decades across the blocks without normalization ({ends('none')}) and "
      f"{pm(spans['rms'], '.2f')} with RMSNorm before each branch ({ends('rms')}): RMSNorm removes "
      f"{seed_mean(removed):.2f} decades ({seeds_text(ctx)}).")


def rope_offset_stats(q: jax.Array, k: jax.Array, rotate, shift: int, bins: int) -> dict[str, jax.Array]:
  """What a rotation by position does to q·k: its dependence on absolute position and the 1/√d_k logit variance by
  relative offset.

  Args:
    q, k: [B, T, N, H] iid queries and keys.
    rotate: (x, positions [T]) -> x rotated, e.g. ``scaling.attention.rope.apply_rope``.
    shift: added to every query and key position for the absolute-position check.
    bins: the relative offsets |t − s| in 0..T−1 are split into this many bins of equal width.

  Returns:
    {"relative_error": max over (t, s) of |R_t q·R_s k − R_{t+shift} q·R_{s+shift} k| / (|q||k|),
    "offset_var": [bins] variance of the 1/√d_k logits in each bin of relative offsets}.
  """
  t, h = q.shape[1], q.shape[-1]
  pos = jnp.arange(t)
  dot = lambda a, b: jnp.einsum("btnh,bsnh->bnts", a, b)
  z0, z1 = dot(rotate(q, pos), rotate(k, pos)), dot(rotate(q, pos + shift), rotate(k, pos + shift))
  norms = jnp.linalg.norm(q, axis=-1).transpose(0, 2, 1)[..., :, None] * jnp.linalg.norm(k, axis=-1).transpose(
      0, 2, 1)[..., None, :]
  offset = jnp.abs(pos[:, None] - pos[None, :])
  which = jnp.minimum(offset * bins // t, bins - 1)
  z = z0 / math.sqrt(h)

  def var(i):
    inside = jnp.broadcast_to(which == i, z.shape)
    count = jnp.sum(inside)
    mean = jnp.sum(jnp.where(inside, z, 0.0)) / count
    return jnp.sum(jnp.where(inside, (z - mean) ** 2, 0.0)) / count

  return {"relative_error": jnp.max(jnp.abs(z0 - z1) / norms), "offset_var": jnp.stack([var(i) for i in range(bins)])}


ROPE_PARTS = (
    Part("q·k depends on the offset only", Criterion(
        "relative_error", f"largest |R_t q·R_s k − R_{{t+{ROPE_SHIFT}}} q·R_{{s+{ROPE_SHIFT}}} k| / (|q||k|) over "
        "positions t, s in 0..T−1", holds=("<", 1e-4), fails=(">", 1e-2))),
    Part("1/√d_k stays right", Criterion(
        "max_offset_var_dev", f"largest |Var − 1| of 1/√d_k RoPE logits of iid q, k in {ROPE_OFFSET_BINS} bins of "
        "relative offset", holds=("<", 0.05), fails=(">", 0.2))),
)


def _rope_compatible(ctx: Context) -> Measurement:
  dims = [d for d in NOTE_D_K if d % 2 == 0]

  def one(d):
    return ctx.per_seed("rope_compatible", lambda rng: _iid(rng, ctx, d)[:2],
                        lambda q, k: rope_offset_stats(q, k, rope_lib.apply_rope, ROPE_SHIFT, ROPE_OFFSET_BINS), d)

  v = {d: one(d) for d in dims}
  err = max(float(np.max(v[d]["relative_error"])) for d in dims)
  dev = max(abs(float(x) - 1) for d in dims for x in np.mean(v[d]["offset_var"], axis=0))
  score, verdicts = score_parts(ROPE_PARTS, {"q·k depends on the offset only": err, "1/√d_k stays right": dev})
  return Measurement(
      {"parts_holding": score, "part_verdicts": verdicts, "relative_error": err, "max_offset_var_dev": round_sig(dev),
       "offset_var": {d: [round_sig(float(x)) for x in np.mean(v[d]["offset_var"], axis=0)] for d in dims}},
      f"With the library's RoPE (base 10000) on iid q, k at d_k {', '.join(map(str, dims))}, {ctx.seq_len} positions: "
      f"shifting every position by {ROPE_SHIFT} changes q·k by at most {err:.1e} of |q||k|, and the 1/√d_k logit "
      f"variance in {ROPE_OFFSET_BINS} bins of relative offset is "
      + "; ".join(f"{span([float(x) for x in np.mean(v[d]['offset_var'], axis=0)], '.3f')} (d_k = {d})" for d in dims)
      + f" ({seeds_text(ctx)}). Parts: {_parts_text(verdicts)}.")


def top_mass(q: jax.Array, k: jax.Array, rule: str | rules_lib.ScaleRule, top: int) -> jax.Array:
  """The mean over query rows of the attention mass on the ``top`` keys with the largest weights.

  Args:
    q: [B, T, N, H] queries.
    k: [B, S, N, H] keys.
    rule: the logit-scale rule.
    top: how many keys.

  Returns:
    A scalar in [top/S, 1].
  """
  w = metrics_lib.softmax_distribution(attention_lib.attention_weights(q, k, rule=rule))
  return jnp.mean(jnp.sum(jax.lax.top_k(w, top)[0], axis=-1))


def _retrieval_dominance(ctx: Context) -> Measurement:
  def one(d):
    def draw(rng):
      q = rng.standard_normal((BATCH, RAG_QUERIES, HEADS, d), dtype=np.float32)
      return q, rng.standard_normal((BATCH, RAG_KEYS, HEADS, d), dtype=np.float32)

    return ctx.per_seed("retrieval", draw, lambda q, k: {r: top_mass(q, k, r, RAG_TOP) for r in ("none", "sqrt")}, d)

  v = {d: one(d) for d in NOTE_D_K}
  moved = {d: x["none"] - x["sqrt"] for d, x in v.items()}
  stat = min(seed_mean(m) for m in moved.values())
  return Measurement(
      {"min_top_mass_removed": round_sig(stat), "top_mass_none": by_d_k({d: x["none"] for d, x in v.items()}),
       "top_mass_sqrt": by_d_k({d: x["sqrt"] for d, x in v.items()}), "keys": RAG_KEYS, "top": RAG_TOP},
      f"Over a long document of {RAG_KEYS} iid keys ({RAG_QUERIES} iid queries), the {RAG_TOP} keys with the largest "
      "weights take " + "; ".join(f"{seed_mean(x['none']):.1%} of a query's attention without scaling and "
                                  f"{seed_mean(x['sqrt']):.1%} with 1/√d_k at d_k = {d}" for d, x in v.items())
      + f": scaling moves at least {stat:.1%} of the mass off them ({seeds_text(ctx)}).")


RANDOM_INPUT_CLAIMS: tuple[Claim, ...] = (
    Claim("variance_is_dk", "note 1 §3; note 2 §2.1",
          "q·k of independent zero-mean unit-variance vectors has variance d_k.",
          Criterion("max_rel_dev", "largest |Var(q·k)/d_k − 1| over the measured d_k (iid unit-variance q, k, mean "
                    "over seeds)", holds=("<", 0.05), fails=(">", 0.2),
                    reason="an exact identity: within 5% is sampling noise, 20% off would contradict it"),
          _variance_is_dk),
    Claim("sqrt_normalizes", "note 1 §1, §3",
          "Dividing by √d_k normalizes the logit variance to 1.0 (for unit-variance Q/K components).",
          Criterion("max_rel_dev_unit_inputs", "largest |Var − 1| of 1/√d_k logits over the measured d_k, on the "
                    "inputs the claim assumes (iid unit-variance q, k; LayerNorm-ed tokens through fan-in-initialized "
                    "W_q, W_k)", holds=("<", 0.05), fails=(">", 0.2),
                    reason="'normalizes to 1.0' = within 5% of 1; the note exempts other init variances (next row)"),
          _sqrt_unit_variance),
    Claim("sqrt_adjusted_factor", "note 1 §3 (corollary), §4 ②",
          "If Q/K's init variance is not 1, the factor must be adjusted (and the adjusted factor restores variance 1).",
          Criterion("max_rel_dev_adjusted", "largest |Var − 1| of logits scaled by 1/(s²√d_k) for iid q, k of entry "
                    f"std s ∈ {{{', '.join(f'{x:g}' for x in EXEMPT_STDS)}}} over the measured d_k",
                    holds=("<", 0.05), fails=(">", 0.2),
                    reason="the corollary holds if the adjusted factor gives variance 1 as √d_k does for s = 1"),
          _sqrt_adjusted_factor),
    Claim("d64_std_8", "note 1 §3",
          "At d_k = 64 unscaled logits have standard deviation 8.",
          Criterion("rel_dev_std_from_8", "|std/8 − 1| of unscaled iid logits at d_k = 64", holds=("<", 0.05),
                    fails=(">", 0.2), reason="'std 8' is √64 exactly; 5% allows sampling noise"),
          _d64_std),
    Claim("d64_magnitudes", "note 1 §3",
          "At d_k = 64 unscaled dot products easily reach ±24 (to ±30).",
          Criterion("rows_reaching_24_mean", "fraction of query rows (each over the context's keys) whose largest "
                    "unscaled |z| reaches 24, iid q, k at d_k = 64", holds=(">=", 0.1), fails=("<", 0.01),
                    reason="what a query sees is its row; 'easily' = in at least 1 row in 10, 'not' = under 1 in 100"),
          _d64_magnitudes),
    Claim("d512_std", "note 2 §2.1",
          "At d_k = 512 the unscaled dot product has variance 512, standard deviation about 22.6.",
          Criterion("rel_dev_std_from_22.6", "|std/22.6 − 1| of unscaled iid logits at d_k = 512", holds=("<", 0.05),
                    fails=(">", 0.2), reason="√512 = 22.63; 5% allows sampling noise"),
          _d512_std),
    Claim("d512_range", "note 2 §2.1",
          "At d_k = 512 most unscaled values fall in [−68, 68] (3σ), far beyond softmax's working range (usually "
          "[−5, 5]).",
          parts_criterion("parts_holding", "parts of the claim that hold", D512_PARTS,
                          reason="3σ of a Gaussian holds 99.7%: 'most' is at least 99%, under 90% it is not 3σ; the "
                          "working range ends where a key takes over half its row (the one-hot row's lower threshold), "
                          "and [−5, 5] names that end if it is within √2 of 5, not if it is off by over 2×"),
          _d512_range),
    Claim("scaled_back_to_3", "note 2 §2.1",
          "After dividing by √d_k the values return to [−3, 3].",
          Criterion("min_frac_within_3", "smallest over d_k 64, 128, 512 of the fraction of 1/√d_k iid logits in "
                    "[−3, 3]", holds=(">=", 0.99), fails=("<", 0.9),
                    reason="[−3, 3] is 3σ of unit variance: at least 99% inside, under 90% is not 'back'"),
          _scaled_back_to_3),
    Claim("unscaled_one_hot", "note 1 §2; note 2 §2.1",
          "Without scaling, large d_k (the notes' 64, 128) drives softmax toward one-hot.",
          Criterion("min_max_prob_none_at_64_128", "the smaller of the mean max attention probability of unscaled iid "
                    "logits at d_k = 64 and 128 (1 = one-hot)", holds=(">", 0.9), fails=("<", 0.5),
                    reason="'one-hot' = one key takes over 90% of a row; below 50% no key dominates"),
          _one_hot),
    Claim("gradients_vanish", "note 1 §3; note 2 §2",
          "Without scaling the saturated softmax makes backpropagated attention gradients vanish.",
          Criterion("vanished_row_fraction_at_64", f"fraction of query rows whose softmax Jacobian ‖diag(p) − ppᵀ‖_F "
                    f"without scaling is below {VANISH:g}× the median 1/√d_k row's, iid q, k at d_k = 64 (the note's)",
                    holds=(">=", 0.5), fails=("<", 0.1),
                    reason="a row's gradient flows through its Jacobian; 'vanish' = 100× smaller, in most rows"),
          _gradients_vanish),
    Claim("linear_uniform", "note 1 §3; note 2 §2.2", "Dividing by d_k instead of √d_k makes attention nearly "
          "uniform.", _uniform_criterion("1/d_k"), _linear_uniform),
    Claim("quadratic_uniform", "note 1 §5",
          "Scaling by d_k² over-flattens attention into an uninformative uniform distribution.",
          _uniform_criterion("1/d_k²"), _quadratic_uniform),
    Claim("post_softmax_breaks", "note 1 §4 ⑤, §5",
          "Applying the division after the softmax breaks the normalization.",
          Criterion("min_row_sum_dev", "smallest over the measured d_k of the mean over query rows of |Σ_s w_ts − 1|, "
                    "w = softmax(q·k)/√d_k (iid inputs)", holds=(">", 0.01), fails=("<", 0.001),
                    reason="'breaks the normalization' = the attention rows no longer sum to 1: off by over 1% is "
                    "broken, within 0.1% (float rounding is far below) it is kept"),
          _post_softmax),
    Claim("sqrt_flatter_at_128", "note 2 §4, follow-up 3",
          "Going from d_k = 64 to 128, the dot products are divided by a larger number, so the softmax temperature "
          "falls and 1/√d_k attention gets more uniform, losing sharpness.",
          parts_criterion("parts_holding", "parts of the claim that hold, iid q, k", FLATTER_PARTS,
                          reason="the temperature that sets sharpness is the divisor relative to the logits' scale: "
                          "'falls' = by over 5%, within 1% it stays; 'more uniform' needs an entropy rise beyond seed "
                          "noise, 0.01 of the entropy range is visible"),
          _sqrt_flatter_at_128),
    Claim("temperature_needed_at_128", "note 2 §4, follow-up 3",
          "Going from d_k = 64 to 128 needs a temperature √(d_k/τ) to keep the attention's sharpness.",
          Criterion("abs_log2_tau_needed", "|log2 τ| of the temperature at which d_k = 128's 1/√(d_k/τ) attention "
                    "has d_k = 64's 1/√d_k entropy (iid q, k; mean over seeds)", holds=(">", 0.25), fails=("<", 0.05),
                    reason="'needs' = τ must differ from 1 by 19% or more; within 3.5% plain √d_k already keeps it"),
          _temperature_needed),
    Claim("fp16_exp_overflow", "note 1 §2 (b), §4 ④",
          "Without max-subtraction, exp overflows numerically (no dtype named).",
          parts_criterion("dtypes_overflowing", "dtypes (of float16, bfloat16, float32) in which attention without "
                          f"max-subtraction overflows, unscaled iid logits at d_k = {EXP_D_K} (the note's example), "
                          "q·k and softmax in that dtype", OVERFLOW_PARTS,
                          reason="the note names no dtype, so it claims the overflow in each: in over 1% of outputs "
                          "it overflows, in none it does not; in some dtypes only, it holds partly"),
          _fp16_overflow),
    Claim("low_precision_nan_even_scaled", "note 2 §2.3",
          "Even with √d_k scaling, individual extreme tokens can overflow FP16/BF16 attention into NaN.",
          Criterion("smallest_nonfinite_factor_max_subtracted", "smallest outlier factor (first and last tokens of q "
                    f"and k, ×1–×300; d_k = {LOW_PRECISION_D_K}) giving non-finite rows with 1/√d_k and "
                    "max-subtraction, q·k in float16 or bfloat16, softmax in that dtype or float32 (600 = none)",
                    holds=("<=", EXTREME_TOKEN_FACTOR), fails=(">", 100.0),
                    reason=f"tokens ×{EXTREME_TOKEN_FACTOR:g} the norm are plainly 'extreme'; only beyond ×100 do "
                    "none but rare massive activations reach it"),
          _low_precision_nan_even_scaled),
    Claim("nan_gradient_explosion", "note 2 §2.3",
          "The overflow makes softmax output NaN, and then the gradients explode.",
          Criterion("exploded_share_of_affected", "share of the affected gradient entries (non-finite or > 100× the "
                    "float32 gradient's largest) that are ±inf or large rather than NaN, float16, outliers ×300",
                    holds=(">=", 0.5), fails=("<", 0.1),
                    reason="'explode' = grow without bound (inf or huge); NaN is not an explosion"),
          _nan_gradient),
    Claim("clamp_before_scale", "note 2 §2.3",
          f"Clamping QKᵀ to [−{CLAMP:g}, {CLAMP:g}] before the scale is a defensive fix for the overflow.",
          Criterion("max_nonfinite_clamped", "largest fraction of non-finite rows with the clamp, over outlier factors "
                    "×1–×300, float16 and bfloat16, with or without max-subtraction", holds=("<=", 0.0),
                    fails=(">", 0.001), reason="a fix must leave no non-finite row; over 0.1% it does not fix it"),
          _clamp_before_scale),
    Claim("online_softmax_mitigates", "note 2 §2.3",
          "FlashAttention's online softmax mitigates the overflow in low precision.",
          Criterion("max_online_over_dense_nonfinite", "largest ratio of non-finite rows of online-softmax "
                    "(blockwise) attention to those of dense attention with q·k accumulated and the softmax run in the "
                    "same dtype (both the input dtype, or both float32), float16 and bfloat16 inputs, outliers "
                    "×1–×300, where the dense one has any", holds=("<", 0.1), fails=(">=", 0.9),
                    reason="'mitigates' = removes at least 90% of the failures; 90% or more left is no mitigation"),
          _online_softmax_mitigates),
    Claim("fp32_or_clamp_solves", "note 2 §5",
          "Overflow can be solved by FP32 or by clamping.",
          SOLVES_CRITERION, _fp32_or_clamp_solves),
    Claim("rope_changes_norms", "note 2 §2.4",
          "RoPE changes the norms of Q and K, so scaling is still needed.",
          Criterion("max_rel_norm_change", "largest relative change of |q| or |k| under RoPE over all measured "
                    "vectors, positions and d_k", holds=(">", 0.01), fails=("<", 0.001),
                    reason="a 1% change is a change; below 0.1% it is float rounding of a rotation"),
          _rope_norms),
    Claim("rope_keeps_variance", "note 2 §2.4",
          "RoPE does not change the dot-product variance.",
          Criterion("max_rel_var_change", "largest |Var with RoPE / Var without − 1| of 1/√d_k iid logits over d_k "
                    "and position sets", holds=("<", 0.05), fails=(">", 0.2),
                    reason="'does not change' = within 5% (sampling noise); a 20% change is a change"),
          _rope_variance),
    Claim("rope_compatible_with_sqrt", "note 2 references (RoFormer)",
          "RoFormer's compatibility analysis: with RoPE, q·k depends on the positions only through their offset, and "
          "1/√d_k stays the right scale.",
          parts_criterion("parts_holding", "parts of the claim that hold, the library's RoPE on iid q, k at d_k 64 "
                          "and 128", ROPE_PARTS,
                          reason="the offset dependence is an identity (float32 rounding of the angles stays below "
                          "1e-4; 1e-2 is another function); '1/√d_k stays right' = unit variance at every offset, "
                          "within 5%, and a 20% change is a change"),
          _rope_compatible),
    Claim("qk_norm_robust", "note 1 §3, §4",
          "QK-norm replaces the unit-variance assumption with explicit normalization, making the scale robust.",
          Criterion("max_rel_dev_qk_norm", "largest |Var − 1| of QK-norm logits over input scales (entry std "
                    f"{', '.join(f'{s:g}' for s in QK_STDS)}, and {_mixed_scales()}) and the measured d_k",
                    holds=("<", 0.1), fails=(">", 0.5),
                    reason="'robust' = variance near 1 whatever the input scale; off by half is not robust"),
          _qk_norm_robust),
    Claim("scale_is_temperature", "note 1 §4 ③",
          "Dividing by √d_k is a softmax temperature T = √d_k.",
          Criterion("max_abs_diff", "largest |difference| between the library's 1/√d_k attention weights and an "
                    "independent float64 numpy softmax(q·k/T) with T = √d_k", holds=("<", 1e-5), fails=(">", 1e-3),
                    reason="an identity: float32 rounding is below 1e-5; 1e-3 would be a different function"),
          _temperature_equivalence),
    Claim("lower_temperature_focuses", "note 1 §4 ③",
          "A lower softmax temperature makes attention more focused.",
          Criterion("rows_entropy_falls", "fraction of query rows whose attention entropy falls at every halving of "
                    f"T in softmax(q·k/T), T from {FOCUS_TEMPERATURES[0]:g}√d_k to {FOCUS_TEMPERATURES[-1]:g}√d_k "
                    f"(iid q, k at d_k = {FOCUS_D_K})", holds=(">=", 0.9), fails=("<", 0.5),
                    reason="'more focused' = lower entropy, in nearly every row (9 in 10) at every step; in under half "
                    "the rows a lower temperature does not focus"),
          _lower_temperature_focuses),
    Claim("layernorm_not_enough", "note 2 §2.4",
          "LayerNorm does not solve the attention-score variance problem.",
          Criterion("var_exponent", "exponent a of Var(unscaled q·k) ∝ d_k^a for LayerNorm-ed tokens projected by "
                    "fan-in-initialized W_q, W_k (log-log fit over the measured d_k, mean over seeds)",
                    holds=(">", 0.8), fails=("<", 0.2),
                    reason="the problem is Var ∝ d_k (a = 1); a near 0 would mean LayerNorm solved it"),
          _layernorm_not_enough),
    Claim("rmsnorm_cheaper", "note 2 §2.4, follow-up 2",
          "RMSNorm is a simplified LayerNorm that computes faster (no mean).",
          Criterion("rms_over_layer_time", "wall time of jitted RMSNorm over that of LayerNorm on "
                    f"[{RMS_TOKENS}, {RMS_WIDTH}] float32 on the present device (mean over {RMS_ROUNDS} rounds of "
                    f"each one's fastest of {RMS_CALLS} interleaved calls)", holds=("<", 0.95),
                    fails=(">=", 1.0), reason="'faster' = at least 5% less time; equal or more is not",
                    noise=True, repeats="timing rounds"),
          _rmsnorm_cheaper, timed=True),
    Claim("rmsnorm_stabilizes_gradients", "note 2 §4, follow-up 2",
          "RMSNorm (normalizing each token's hidden output) stabilizes the gradient flow of deep networks.",
          Criterion("decades_removed", "decades of spread of ‖∂L/∂x‖ across the blocks of a depth-"
                    f"{STACK_DEPTH} pre-norm residual stack at initialization without normalization, less that with "
                    "RMSNorm before each branch (random tokens, SP fan-in weights, mean over seeds)",
                    holds=(">=", 1.0), fails=("<=", 0.1),
                    reason="'stabilizes' needs a drift to remove: a decade is the unit of 'stable' of the training "
                    "rows; removing under a tenth of one changes nothing"),
          _rmsnorm_stabilizes),
    Claim("head_dim_constant", "note 1 §4 (English)",
          "Keeping d_k fixed while width grows with the head count preserves the attention scale.",
          Criterion("row_max_spread_contrast", "relative spread (max − min)/mean across widths of the mean row-max "
                    "1/√d_k logit with one head of d_k = width, less that with d_k = "
                    f"{FIXED_HEAD_DIM} and width/{FIXED_HEAD_DIM} heads (unit-variance tokens, SP fan-in W_q, W_k); "
                    f"the larger of iid q, k and q_t, k_t correlated at {QK_ALIGNMENT:g}", holds=(">=", 0.2),
                    fails=("<", 0.05),
                    reason="'preserves' needs a contrast: fixing d_k must keep the scale 20% steadier than growing "
                    "d_k (the case the note warns about) does, at init or with trained q-k alignment; under 5% it "
                    "preserves nothing growing d_k loses"),
          _head_dim_constant),
    Claim("retrieval_not_dominated", "note 2 §6 (RAG)",
          "In long-document retrieval with large Q/K dimensions, scaling keeps the retrieval scores from being "
          "dominated by a few tokens.",
          Criterion("min_top_mass_removed", f"share of attention mass on the {RAG_TOP} largest-weight keys of "
                    f"{RAG_KEYS} without scaling, less that with 1/√d_k, iid q, k, the smaller over d_k 64 and 128",
                    holds=(">=", 0.5), fails=("<", 0.1),
                    reason="'dominated by a few tokens' = they take most of the mass; scaling keeps it from them if "
                    "it moves at least half of the mass off them, under a tenth it changes nothing"),
          _retrieval_dominance),
)
"""The claims random inputs can settle, in the order of the tables."""
