"""Random-input claims about the variance and magnitudes of the logits (note 1 §1, §3; note 2 §2.1).

Var(q·k) = d_k, 1/√d_k normalizing it to 1 on unit-variance inputs (and the factor adjusted to other init variances),
the std 8 at d_k = 64 and 22.6 at d_k = 512, the values unscaled logits reach against softmax's working range, and
[−3, 3] after the scale. Each measurement, then the claims (``LOGIT_VARIANCE_CLAIMS``).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from scaling.attention import dense as dense_lib
from scaling.attention import rules as rules_lib
from scaling.studies.claims.random_input.attention_variants import logit_var
from scaling.studies.claims.random_input.attention_variants import stacked_rules
from scaling.studies.claims.context import BATCH
from scaling.studies.claims.context import by_d_k
from scaling.studies.claims.context import Context
from scaling.studies.claims.context import HEADS
from scaling.studies.claims.context import pm
from scaling.studies.claims.context import seed_mean
from scaling.studies.claims.context import seeds_text
from scaling.studies.claims.context import span
from scaling.studies.claims.context import sweep_series
from scaling.studies.claims.random_input.inputs import iid_qkv
from scaling.studies.claims.random_input.inputs import NOTE_D_K
from scaling.studies.claims.random_input.inputs import raw_tokens
from scaling.studies.claims.random_input.inputs import sp_spec
from scaling.studies.claims.random_input.inputs import sp_weights
from scaling.studies.claims.parts import Part
from scaling.studies.claims.parts import parts_criterion
from scaling.studies.claims.parts import parts_text
from scaling.studies.claims.parts import score_parts
from scaling.studies.claims.verdicts import Claim
from scaling.studies.claims.verdicts import Criterion
from scaling.studies.claims.verdicts import Measurement
from scaling.studies.claims.verdicts import Reading
from scaling.studies.stats import mean_std
from scaling.studies.stats import round_sig

EXEMPT_STDS = (0.5, 2.0)  # entry stds of q and k that note 1 §3 exempts ("the factor must be adjusted")
SQRT_STDS = (1.0, *EXEMPT_STDS)  # entry stds of q and k of the 1/√d_k variance measurement
D_K_512 = 512  # note 2 §2.1's example
WORKING_RANGE = 5.0  # note 2 §2.1: softmax's "working range" is [−5, 5]
D512_HALF_WIDTH = 68.0  # note 2 §2.1: most unscaled logits at d_k = 512 fall in [−68, 68] (3σ)
DOMINANT_MAX_PROB = 0.5  # a key "dominates" its row above this probability (unscaled_one_hot's lower threshold)


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
          "sqrt_std", lambda rng, d=d: iid_qkv(rng, ctx, d)[:2],
          lambda q, k: jax.vmap(lambda std: logit_var(std * q, std * k, "sqrt"))(jnp.asarray(SQRT_STDS)), d)
      for i, s in enumerate(SQRT_STDS):
        out[s][d] = var[:, i]
    return out

  return ctx.cached("iid_sqrt_var", compute)


def projection_width(ctx: Context) -> int:
  """The model width of the LayerNorm-ed projections of ``projected_logit_var``.

  Args:
    ctx: the context (its head dims).

  Returns:
    At least 256 and the largest d_k.
  """
  return max(256, max(ctx.d_k))


def projected_logit_var(ctx: Context) -> dict[str, dict[int, np.ndarray]]:
  """The logit variance of LayerNorm-ed raw tokens through SP-initialized W_q, W_k (cached on ``ctx``).

  Args:
    ctx: the context (head dims, sequence length, seeds).

  Returns:
    {"none" | "sqrt": {d_k: [num_seeds] logit variances}}, unscaled and with 1/√d_k.
  """
  width = projection_width(ctx)

  def one(d):
    mult = sp_spec(width, d).multiplier

    def draw(rng):
      return raw_tokens(rng, ctx, width), *sp_weights(rng, width, d)

    def compute(raw, w_q, w_k):
      x = rules_lib.layer_norm(raw)  # every token: mean 0, variance 1 over the width
      q, k = ((mult * x @ w).reshape(BATCH, ctx.seq_len, 1, d) for w in (w_q, w_k))
      return jax.vmap(lambda rule: logit_var(q, k, rule))(stacked_rules(("none", "sqrt"), d))

    return ctx.per_seed("layernorm_projection", draw, compute, d)

  def compute():
    per_d = {d: one(d) for d in ctx.d_k}
    return {rule: {d: per_d[d][:, i] for d in ctx.d_k} for i, rule in enumerate(("none", "sqrt"))}

  return ctx.cached("projected_logit_var", compute)


def _sqrt_unit_variance(ctx: Context) -> Measurement:
  conditions = {"iid q, k entries of std 1": _iid_sqrt_var(ctx)[1.0],
                f"LayerNorm-ed tokens of width {projection_width(ctx)}, SP fan-in W_q, W_k":
                projected_logit_var(ctx)["sqrt"]}
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
    z = dense_lib.attention_logits(q, k, rule="none")
    a = jnp.abs(z)
    row_max = jnp.max(a, axis=-1)
    return {"std": jnp.std(z), "beyond_24": jnp.mean(a >= 24), "beyond_30": jnp.mean(a >= 30),
            "rows_24": jnp.mean(row_max >= 24), "rows_30": jnp.mean(row_max >= 30), "absmax": jnp.max(a)}

  v = ctx.cached("d64", lambda: ctx.per_seed("d64_magnitudes", lambda rng: iid_qkv(rng, ctx, d)[:2], compute))
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
    z = dense_lib.attention_logits(q, k, rule="none")
    s = z / math.sqrt(d)
    return {"std": jnp.std(z), "within_3_std": jnp.mean(jnp.abs(z) <= 3 * math.sqrt(d)),
            "within_68": jnp.mean(jnp.abs(z) <= D512_HALF_WIDTH),
            "outside_5": jnp.mean(jnp.abs(z) > WORKING_RANGE), "scaled_within_3": jnp.mean(jnp.abs(s) <= 3),
            "scaled_within_5": jnp.mean(jnp.abs(s) <= 5)}

  return ctx.cached(("magnitudes", d), lambda: ctx.per_seed("magnitudes", lambda rng: iid_qkv(rng, ctx, d)[:2],
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
    Part("most in [−68, 68]", Criterion("frac_within_68", "fraction of unscaled iid logits at d_k = 512 inside "
                                        "[−68, 68]", holds=(">=", 0.99), fails=("<", 0.9))),
    Part("far beyond [−5, 5]", Criterion("frac_outside_5", "fraction of unscaled iid logits at d_k = 512 outside "
                                         "[−5, 5]", holds=(">=", 0.5), fails=("<", 0.1))),
)
WORKING_RANGE_READING = Reading(
    "softmax's working range ends near ±5 (where one key takes over half its row)",
    Criterion("abs_log2_bound_over_5", "|log2(a/5)|, a the 3σ half-width of iid row logits at which the mean max "
              f"attention probability reaches {DOMINANT_MAX_PROB:g} (a key dominates its row)", holds=("<=", 0.5),
              fails=(">", 1.0), reason="[−5, 5] names that end if it is within √2 of 5, not if it is off by over 2×"))


def _d512_range(ctx: Context) -> Measurement:
  v = _magnitudes(ctx, D_K_512)
  bound = _working_range(ctx)["bound"]
  frac, outside, a = seed_mean(v["within_68"]), seed_mean(v["outside_5"]), seed_mean(bound)
  off = abs(math.log2(a / WORKING_RANGE)) if math.isfinite(a) else math.nan
  score, verdicts = score_parts(D512_PARTS, {"most in [−68, 68]": frac, "far beyond [−5, 5]": outside})
  half = 3 * seed_mean(v["std"])
  found = (f"rows of {ctx.seq_len} iid Gaussian logits leave softmax's working range (a key takes over "
           f"{DOMINANT_MAX_PROB:g} of the row on average) once their 3σ range passes ±{a:.3g} (std "
           f"{float(np.std(bound)):.2g} over seeds), {a / WORKING_RANGE:.2g}× the note's ±{WORKING_RANGE:g}"
           if math.isfinite(a) else "the mean max probability never reaches "
           f"{DOMINANT_MAX_PROB:g} for logit stds {WORKING_SIGMAS[0]:g}–{WORKING_SIGMAS[-1]:g}, so no bound was found")
  return Measurement(
      {"parts_holding": score, "part_verdicts": verdicts, "frac_within_68": round_sig(frac),
       "frac_outside_5": round_sig(outside), "three_sigma_half_width": round_sig(half),
       "three_sigma_over_5": round_sig(half / WORKING_RANGE), "working_range_bound": mean_std(bound, 4),
       "abs_log2_bound_over_5": round_sig(off), "frac_outside_5_by_seed": mean_std(v["outside_5"], 4),
       "frac_within_68_by_seed": mean_std(v["within_68"], 4), "frac_within_3_std": mean_std(v["within_3_std"], 4),
       "keys_per_row": ctx.seq_len},
      f"At d_k = {D_K_512}, {frac:.2%} of unscaled iid logits lie in [−68, 68] and {outside:.1%} outside [−5, 5]; "
      f"their measured 3σ half-width is {half:.3g}, {half / WORKING_RANGE:.3g}× the working range's 5. Beside: "
      f"{found} ({seeds_text(ctx)}). Parts: {parts_text(verdicts)}.")


def _scaled_back_to_3(ctx: Context) -> Measurement:
  v = {d: _magnitudes(ctx, d) for d in sorted({*NOTE_D_K, D_K_512})}
  worst = min(seed_mean(x["scaled_within_3"]) for x in v.values())
  return Measurement(
      {"min_frac_within_3": round_sig(worst), "frac_within_3": by_d_k({d: x["scaled_within_3"] for d, x in v.items()}),
       "frac_within_5": by_d_k({d: x["scaled_within_5"] for d, x in v.items()})},
      "After dividing by √d_k the fraction of iid logits in [−3, 3] is "
      + ", ".join(f"{seed_mean(x['scaled_within_3']):.2%} (d_k = {d})" for d, x in v.items())
      + f" ({seeds_text(ctx)}).")


LOGIT_VARIANCE_CLAIMS: tuple[Claim, ...] = (
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
                          reason="3σ of a Gaussian holds 99.7%: 'most' is at least 99%, under 90% it is not 3σ; "
                          "values spread 'far beyond' [−5, 5] when most of them lie outside it, and not when under a "
                          "tenth do"),
          _d512_range, beside=(WORKING_RANGE_READING,)),
    Claim("scaled_back_to_3", "note 2 §2.1",
          "After dividing by √d_k the values return to [−3, 3].",
          Criterion("min_frac_within_3", "smallest over d_k 64, 128, 512 of the fraction of 1/√d_k iid logits in "
                    "[−3, 3]", holds=(">=", 0.99), fails=("<", 0.9),
                    reason="[−3, 3] is 3σ of unit variance: at least 99% inside, under 90% is not 'back'"),
          _scaled_back_to_3),
)
"""The claims about the logits' variance and magnitudes, in table order."""
