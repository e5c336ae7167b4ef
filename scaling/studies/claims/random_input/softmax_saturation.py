"""Random-input claims about how the logit scale sets the softmax's sharpness (note 1 §2–§5; note 2 §2, §4).

Without scaling attention tends to one-hot as d_k grows, the softmax's derivative p_i(1 − p_i) vanishes as p_i → 1
and its gradients vanish (at note 1's d_k = 64 and note 2's 512); 1/d_k and 1/d_k² flatten it toward uniform; the
division after the softmax breaks its normalization; and from d_k = 64 to 128 (√128 ≈ 11.3 against 8), 1/√d_k
attention flattens or needs a temperature. Each measurement, then the claims (``SOFTMAX_SATURATION_CLAIMS``).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from scaling.base import compilation
from scaling.attention import dense as dense_lib
from scaling.attention import dispatch as attention_lib
from scaling.attention import metrics as metrics_lib
from scaling.attention import rules as rules_lib
from scaling.studies.claims.random_input.attention_variants import stacked_rules
from scaling.studies.claims.context import by_d_k
from scaling.studies.claims.context import Context
from scaling.studies.claims.context import pm
from scaling.studies.claims.context import seed_mean
from scaling.studies.claims.context import seeds_text
from scaling.studies.claims.context import span
from scaling.studies.claims.context import sweep_series
from scaling.studies.claims.random_input.inputs import iid_qkv
from scaling.studies.claims.random_input.inputs import NOTE_D_K
from scaling.studies.claims.random_input.logit_variance import D_K_512
from scaling.studies.claims.parts import Part
from scaling.studies.claims.parts import parts_criterion
from scaling.studies.claims.parts import parts_text
from scaling.studies.claims.parts import score_parts
from scaling.studies.claims.verdicts import Claim
from scaling.studies.claims.verdicts import Criterion
from scaling.studies.claims.verdicts import Measurement
from scaling.studies.claims.verdicts import NOISE_SES
from scaling.studies.claims.verdicts import Reading
from scaling.base.validation import ConfigError
from scaling.studies.stats import mean_std
from scaling.studies.stats import round_sig

VANISH = 0.01  # "vanish": a row's softmax Jacobian below 1% of the median 1/√d_k row's


def gap_to_one_closed(low: np.ndarray, high: np.ndarray) -> np.ndarray:
  """The fraction of the distance to one-hot closed between two mean max attention probabilities, per seed.

  Args:
    low: [seeds] mean max probabilities at the smaller head dim, each below 1.
    high: [seeds] mean max probabilities at the larger head dim.

  Returns:
    [seeds]: 1 − (1 − high) / (1 − low): 1 when ``high`` is one-hot, 0 when nothing changed, negative when it fell.
  """
  low, high = np.asarray(low, np.float64), np.asarray(high, np.float64)
  if low.shape != high.shape or np.any(low >= 1):
    raise ConfigError(f"low and high must be per-seed arrays of one shape with low < 1, got {low!r} and {high!r}")
  return 1.0 - (1.0 - high) / (1.0 - low)


def standard_error(values: np.ndarray) -> float | None:
  """The standard error of the mean of per-seed ``values`` (sample std / √n; None from fewer than two seeds)."""
  v = np.asarray(values, np.float64)
  return float(np.std(v, ddof=1) / math.sqrt(v.size)) if v.size > 1 else None


def _one_hot(ctx: Context) -> Measurement:
  if len(ctx.d_k) < 2:
    raise ConfigError(f"unscaled_one_hot needs two or more d_k to measure a trend, got {ctx.d_k}")
  mp, sat = sweep_series(ctx, "none", "max_prob"), sweep_series(ctx, "none", "saturated_frac")
  sqrt_mp = sweep_series(ctx, "sqrt", "max_prob")
  first, last = ctx.d_k[0], ctx.d_k[-1]
  closed = gap_to_one_closed(mp[first], mp[last])
  se = standard_error(closed)
  rises = {f"{a}->{b}": mp[b] - mp[a] for a, b in zip(ctx.d_k, ctx.d_k[1:])}
  rise_se = {k: standard_error(v) for k, v in rises.items()}
  # Each step's rise less twice its standard error over seeds (NaN from one seed: no spread to compare it with).
  beyond = {k: seed_mean(v) - NOISE_SES * (rise_se[k] if rise_se[k] is not None else math.nan)
            for k, v in rises.items()}
  least = float(np.min(list(beyond.values())))
  ctx.require_d_k(*NOTE_D_K)
  at_notes = min(seed_mean(mp[d]) for d in NOTE_D_K)
  numbers = {"one_hot_gap_closed": round_sig(seed_mean(closed)), "one_hot_gap_closed_se": round_sig(se),
             "min_step_rise_beyond_noise": round_sig(least) if math.isfinite(least) else None,  # None: one seed
             "step_rise_beyond_noise": {k: round_sig(v) if math.isfinite(v) else None for k, v in beyond.items()},
             "min_max_prob_none_at_64_128": round_sig(at_notes),
             "max_prob_none_at_largest_d_k": round_sig(seed_mean(mp[last])), "largest_d_k": last,
             "max_prob_none": by_d_k(mp), "saturated_frac_none": by_d_k(sat), "max_prob_sqrt": by_d_k(sqrt_mp)}
  trend = ", ".join(f"{seed_mean(mp[d]):.2f} (d_k = {d})" for d in ctx.d_k)
  steps = (f"its smallest rise between successive d_k, less {NOISE_SES:g} standard errors over seeds, is {least:+.3f}"
           if math.isfinite(least) else
           f"its smallest rise between successive d_k is {min(seed_mean(v) for v in rises.values()):.3f} (one seed, "
           "so no spread to compare it with)")
  return Measurement(numbers, (
      f"Without scaling the mean max attention probability is {trend}: from d_k = {first} to {last} it closes "
      f"{seed_mean(closed):.0%} of its distance to 1 (one-hot), and {steps}; the rows with max p > "
      f"{metrics_lib.SATURATION_THRESHOLD:g} go from {seed_mean(sat[first]):.1%} to {seed_mean(sat[last]):.1%}; with "
      f"1/√d_k the max probability is {span([seed_mean(v) for v in sqrt_mp.values()])} ({ctx.seq_len} keys, "
      f"{seeds_text(ctx)})."))


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
  p = dense_lib.attention_weights(q, k, rule=rule).astype(jnp.float32)
  top = jax.nn.one_hot(jnp.argmax(p, axis=-1), p.shape[-1], dtype=bool)
  p2 = p * p
  one_minus = jnp.where(top, jnp.sum(jnp.where(top, 0.0, p), axis=-1, keepdims=True), 1.0 - p)
  rest = jnp.where(top, jnp.sum(jnp.where(top, 0.0, p2), axis=-1, keepdims=True),
                   jnp.sum(p2, axis=-1, keepdims=True) - p2)
  return jnp.sqrt(jnp.sum(p2 * one_minus**2 + p2 * rest, axis=-1))


DERIVATIVE_LOGIT_STDS = (1.0, 8.0, 30.0)  # random logit rows: 1/√d_k-scaled, unscaled at d_k = 64, beyond it
DERIVATIVE_ROWS = 32  # random rows per logit std and seed
DERIVATIVE_GAPS = tuple(float(g) for g in range(0, 21))  # one logit this far above the rest: p_i from 1/S to ~1


def softmax_jacobian_diagonal(z: jax.Array) -> tuple[jax.Array, jax.Array]:
  """The diagonal ∂p_i/∂z_i of the softmax's Jacobian, by ``jax.jacobian`` of ``jax.nn.softmax``, row by row.

  Args:
    z: [R, S] logit rows.

  Returns:
    (p, diagonal), both [R, S]: the softmax of each row and its Jacobian's diagonal.
  """
  if z.ndim != 2:
    raise ConfigError(f"z must be [rows, keys], got shape {z.shape}")
  jac = jax.vmap(jax.jacobian(jax.nn.softmax))(z)  # [R, S, S]
  return jax.nn.softmax(z, axis=-1), jnp.diagonal(jac, axis1=-2, axis2=-1)


def gap_logits(gaps: tuple[float, ...], keys: int) -> np.ndarray:
  """Logit rows with one logit ``gap`` above the other ``keys`` − 1 (all 0), one row per gap.

  Args:
    gaps: the gaps.
    keys: the row length S (at least 2).

  Returns:
    float32 [len(gaps), keys]: row r is (gaps[r], 0, ..., 0).
  """
  if keys < 2:
    raise ConfigError(f"keys must be at least 2, got {keys}")
  z = np.zeros((len(gaps), keys), np.float32)
  z[:, 0] = gaps
  return z


DERIVATIVE_PARTS = (
    Part("∂p_i/∂z_i = p_i(1 − p_i)", Criterion(
        "max_abs_dev_from_p_one_minus_p", "largest |∂p_i/∂z_i − p_i(1 − p_i)| over random logit rows of std "
        f"{', '.join(f'{x:g}' for x in DERIVATIVE_LOGIT_STDS)} (∂p_i/∂z_i from jax.jacobian of jax.nn.softmax, "
        "float32; p_i(1 − p_i) is at most 0.25)", holds=("<", 1e-5), fails=(">", 1e-3))),
    Part("vanishes as p_i → 1", Criterion(
        "derivative_near_one_over_peak", "∂p_i/∂z_i of the logit raised above the rest, at the largest gap "
        f"({DERIVATIVE_GAPS[-1]:g}; p_i nearest 1), over its largest value along the gaps "
        f"{DERIVATIVE_GAPS[0]:g}–{DERIVATIVE_GAPS[-1]:g}", holds=("<", VANISH), fails=(">", 0.1))),
)


def _softmax_derivative(ctx: Context) -> Measurement:
  keys = ctx.seq_len
  stds = jnp.asarray(DERIVATIVE_LOGIT_STDS, jnp.float32)

  def deviation(z):  # [rows, keys] standard normal, scaled by each std
    def one(std):
      p, diag = softmax_jacobian_diagonal(std * z)
      return jnp.max(jnp.abs(diag - p * (1 - p))), jnp.max(p)
    return jax.vmap(one)(stds)

  dev, top = ctx.per_seed("softmax_derivative", lambda rng: (rng.standard_normal(
      (DERIVATIVE_ROWS, keys), dtype=np.float32),), deviation)  # [seeds, stds] each
  p, diag = (np.asarray(x, np.float64)[:, 0] for x in compilation.jit(softmax_jacobian_diagonal)(
      gap_logits(DERIVATIVE_GAPS, keys)))
  worst = float(np.max(dev))
  near_one = float(diag[-1] / np.max(diag))
  score, verdicts = score_parts(DERIVATIVE_PARTS, {"∂p_i/∂z_i = p_i(1 − p_i)": worst,
                                                   "vanishes as p_i → 1": near_one})
  peak = int(np.argmax(diag))
  falling = bool(np.all(np.diff(diag[peak:]) <= 0))
  return Measurement(
      {"parts_holding": score, "part_verdicts": verdicts, "max_abs_dev_from_p_one_minus_p": round_sig(worst),
       "max_abs_dev_by_logit_std": {f"{s:g}": round_sig(float(np.max(dev[:, i])))
                                    for i, s in enumerate(DERIVATIVE_LOGIT_STDS)},
       "largest_p_by_logit_std": {f"{s:g}": round_sig(float(np.mean(top[:, i])), 6)
                                  for i, s in enumerate(DERIVATIVE_LOGIT_STDS)},
       "derivative_near_one_over_peak": round_sig(near_one), "keys": keys,
       "p_by_gap": {f"{g:g}": round_sig(float(x), 8) for g, x in zip(DERIVATIVE_GAPS, p)},
       "derivative_by_gap": {f"{g:g}": round_sig(float(x)) for g, x in zip(DERIVATIVE_GAPS, diag)},
       "falls_after_peak": falling},
      f"Over random rows of {keys} logits of std {', '.join(f'{x:g}' for x in DERIVATIVE_LOGIT_STDS)} "
      f"({seeds_text(ctx)}), the diagonal of jax.jacobian(softmax) differs from p_i(1 − p_i) by at most {worst:.2g}. "
      f"Raising one logit above {keys - 1} zeros by 0 to {DERIVATIVE_GAPS[-1]:g}, its p_i goes from {p[0]:.4f} to "
      f"{p[-1]:.7f} and ∂p_i/∂z_i peaks at {diag[peak]:.4f} (p_i = {p[peak]:.3f}, gap {DERIVATIVE_GAPS[peak]:g}), "
      f"then {'falls at every step' if falling else 'does not fall at every step'} to {diag[-1]:.3g}, "
      f"{near_one:.2g}× its peak. Parts: {parts_text(verdicts)}.")


def _row_jacobians(ctx: Context) -> dict[int, dict[str, np.ndarray]]:
  """{d_k: per-seed fraction of vanished unscaled rows, median row norms (none, sqrt)} at the notes' head dims (64 and
  128; 512, note 2's example, whether or not the context measures it) and the context's smallest and largest."""

  def one(d):
    def compute(q, k):
      none, sqrt = row_jacobian_norms(q, k, "none"), row_jacobian_norms(q, k, "sqrt")
      ref = jnp.median(sqrt)
      return {"vanished": jnp.mean(none < VANISH * ref), "median_none": jnp.median(none), "median_sqrt": ref,
              "below_0.01": jnp.mean(none < 0.01)}
    return ctx.per_seed("row_jacobians", lambda rng: iid_qkv(rng, ctx, d)[:2], compute, d)

  dims = sorted({*NOTE_D_K, D_K_512, ctx.d_k[0], ctx.d_k[-1]})
  return ctx.cached("row_jacobians", lambda: {d: one(d) for d in dims})


def _vanish_criterion(d: int, whose: str) -> Criterion:
  """The criterion of 'gradients vanish' at head dim ``d``, ``whose`` example it is."""
  return Criterion(f"vanished_row_fraction_at_{d}", f"fraction of query rows whose softmax Jacobian "
                   f"‖diag(p) − ppᵀ‖_F without scaling is below {VANISH:g}× the median 1/√d_k row's, iid q, k at "
                   f"d_k = {d} ({whose})", holds=(">=", 0.5), fails=("<", 0.1))


VANISH_PARTS = (Part("note 1 at d_k = 64", _vanish_criterion(64, "note 1's example")),
                Part(f"note 2 at d_k = {D_K_512}", _vanish_criterion(D_K_512, "note 2's example")))


def _gradients_vanish(ctx: Context) -> Measurement:
  none_over_sqrt = lambda metric: {d: n / q for (d, n), q in zip(sweep_series(ctx, "none", metric).items(),
                                                                  sweep_series(ctx, "sqrt", metric).values())}
  gq, gz = none_over_sqrt("grad_norm_q"), none_over_sqrt("grad_norm_logits")
  jac = sweep_series(ctx, "none", "softmax_jacobian_norm")
  top = ctx.d_k[-1]
  rows = _row_jacobians(ctx)
  at = {d: seed_mean(rows[d]["vanished"]) for d in (64, D_K_512)}
  score, verdicts = score_parts(VANISH_PARTS, {p.name: at[d] for p, d in zip(VANISH_PARTS, (64, D_K_512))})
  numbers = {"parts_holding": score, "part_verdicts": verdicts,
             "vanished_row_fraction_at_64": round_sig(at[64]),
             f"vanished_row_fraction_at_{D_K_512}": round_sig(at[D_K_512]),
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
  by_dim = ", ".join(f"{seed_mean(r['vanished']):.1%} at {d}" for d, r in rows.items())
  return Measurement(numbers, (
      f"Per query row, the softmax Jacobian of unscaled attention is below {VANISH:g}× the median 1/√d_k row's in "
      f"{by_dim} (d_k); the median row's norm is {med(64, 'none'):.3g} (1/√d_k: {med(64, 'sqrt'):.3g}) at d_k = 64, "
      f"{med(D_K_512, 'none'):.3g} at {D_K_512} and {med(top, 'none'):.3g} at {top}, "
      f"{med(low, 'none') / med(top, 'none'):.3g}× below d_k = {low}'s. Per note at its own example: "
      f"{parts_text(verdicts)}. Aggregates over d_k {low} → {top}: the mean softmax Jacobian norm goes "
      f"{seed_mean(jac[low]):.3f} → {seed_mean(jac[top]):.3f} and |dL/dlogits| {seed_mean(gz[low]):.3g}× → "
      f"{seed_mean(gz[top]):.3g}× its 1/√d_k value, while |dL/dq| is {seed_mean(gq[low]):.3g}× → {pm(gq[top])}× its "
      f"1/√d_k value (same inputs and upstream gradient, {seeds_text(ctx)})."))


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

      rms, row_sum, dev = jax.vmap(attend)(stacked_rules(rules, d))
      return {**{r: rms[i] for i, r in enumerate(rules)}, "row_sum": row_sum[0], "row_sum_dev": dev[0],
              "row_sum_dev_sqrt": dev[1]}
    return ctx.per_seed("post_softmax", lambda rng: iid_qkv(rng, ctx, d), compute, d)

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
       "temperature": {64: round_sig(math.sqrt(64)), 128: round_sig(math.sqrt(128))},
       "sqrt_arithmetic_error": round_sig(sqrt_arithmetic_error()), "effective_temperature": by_d_k(t_eff),
       "entropy_rise_beyond_noise": round_sig(beyond), "entropy_rise": mean_std(delta, 4),
       "entropy_rise_sample_std": round_sig(spread),
       "entropy_normalized": by_d_k({d: ent[d] for d in (64, 128)}, 5),
       "max_prob": by_d_k({d: mp[d] for d in (64, 128)})},
      f"The temperature T = √d_k rises from 8 to {math.sqrt(128):.1f} (×{math.sqrt(2):.3f}), and so does the "
      f"logits' std ({seed_mean(std[64]):.2f} to {seed_mean(std[128]):.2f}): relative to it the temperature goes "
      f"×{pm(ratio, '.3f')}. With 1/√d_k the normalized entropy is {pm(ent[64], '.4f')} at d_k = 64 and "
      f"{pm(ent[128], '.4f')} at 128 (max probability {seed_mean(mp[64]):.4f} vs {seed_mean(mp[128]):.4f}; "
      f"{ctx.seq_len} keys, {seeds_text(ctx)}): a change of {float(np.mean(delta)):+.4f}, {compared}. Parts: "
      f"{parts_text(verdicts)}.")


NOTE_SQRTS = {128: 11.3, 64: 8.0}  # note 2, follow-up 3: "√128 ≈ 11.3（原来是 8）"


def sqrt_arithmetic_error(stated: dict[int, float] = NOTE_SQRTS) -> float:
  """The largest |√d − stated| over the values the note states.

  Args:
    stated: {d: the value the note gives for √d}.

  Returns:
    The largest absolute error.
  """
  if not stated:
    raise ConfigError("stated must name at least one value")
  return max(abs(math.sqrt(d) - v) for d, v in stated.items())


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
      p = dense_lib.attention_weights(q, k, scale=jnp.sqrt(tau / 128.0))
      return jnp.mean(-jnp.sum(p * jnp.log(jnp.maximum(p, 1e-30)), axis=-1)) / jnp.log(p.shape[-1])
    return jax.vmap(entropy)(jnp.asarray(TAUS, jnp.float32))

  ent128 = ctx.per_seed("temperature_needed", lambda rng: iid_qkv(rng, ctx, 128)[:2], compute)  # [seeds, taus]
  taus = np.asarray([temperature_to_match(ent128[i], ent64[i]) for i in range(ctx.num_seeds)])
  stat = float(np.mean(np.abs(np.log2(taus))))
  return Measurement(
      {"abs_log2_tau_needed": round_sig(stat), "tau_needed": mean_std(taus, 4),
       "entropy_128_by_tau": {f"{t:.3g}": round_sig(float(np.mean(ent128[:, i]))) for i, t in enumerate(TAUS)},
       "entropy_64": mean_std(ent64, 5)},
      f"To give d_k = 128 the normalized entropy of d_k = 64 under 1/√d_k ({pm(ent64, '.4f')}), the temperature "
      f"of 1/√(d_k/τ) must be τ = {pm(taus, '.3f')} (iid q, k, {ctx.seq_len} keys, {seeds_text(ctx)}).")


SOFTMAX_SATURATION_CLAIMS: tuple[Claim, ...] = (
    Claim("unscaled_one_hot", "note 1 §2; note 2 §2.1",
          "Without scaling, the logit variance grows with d_k and softmax tends to one-hot (large d_k drives it "
          "toward one-hot).",
          Criterion("one_hot_gap_closed", "fraction of the distance to 1 (one-hot) that the mean max attention "
                    "probability of unscaled iid logits closes from the smallest to the largest measured d_k, "
                    "1 − (1 − p(d_max)) / (1 − p(d_min)) (mean over seeds)", holds=(">", 0.5), fails=("<", 0.1),
                    noise=True,
                    reason="'tends to one-hot' is a trend toward 1: closing over half the distance to one-hot over the "
                    "measured d_k is that trend; under a tenth is no trend"),
          _one_hot,
          beside=(Reading("a rise at every step of the measured d_k", Criterion(
              "min_step_rise_beyond_noise", "smallest rise of the mean max probability between successive measured "
              "d_k, less twice its standard error over seeds", holds=(">", 0.0), fails=("<=", -0.01),
              reason="'grows with d_k' at every step: a rise beyond seed noise; a fall of 0.01 is no rise")),
                  Reading("one-hot at the notes' head dims (a level)", Criterion(
                      "min_max_prob_none_at_64_128", "the smaller of the mean max attention probability of unscaled "
                      "iid logits at d_k = 64 and 128 (1 = one-hot)", holds=(">", 0.9), fails=("<", 0.5),
                      reason="'one-hot' = one key takes over 90% of a row; below 50% no key dominates")))),
    Claim("softmax_derivative_vanishes", "note 1 §3 (English derivation)",
          "The softmax derivative is ∂p_i/∂z_i = p_i(1 − p_i); as p_i → 1 it goes to 0.",
          parts_criterion("parts_holding", "parts of the claim that hold", DERIVATIVE_PARTS,
                          reason="an identity: float32 rounding leaves about 1e-7 on values of at most 0.25, 1e-3 off "
                          "is another function; 'goes to 0' = 100× below its peak as p_i nears 1 (the row Jacobian's "
                          "'vanish'), over a tenth of it is not"),
          _softmax_derivative),
    Claim("gradients_vanish", "note 1 §3; note 2 §2",
          "Without scaling the saturated softmax makes backpropagated attention gradients vanish (note 1's example "
          f"d_k = 64, note 2's d_k = {D_K_512}).",
          parts_criterion("parts_holding", "the notes' examples at which the claim holds, each note at its own d_k",
                          VANISH_PARTS,
                          reason="a row's gradient flows through its Jacobian; 'vanish' = 100× smaller, in most rows; "
                          "each note is judged at the d_k it names"),
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
          _sqrt_flatter_at_128,
          beside=(Reading("the arithmetic √128 ≈ 11.3 (against √64 = 8)", Criterion(
              "sqrt_arithmetic_error", "the larger of |√128 − 11.3| and |√64 − 8|", holds=("<=", 0.05),
              fails=(">", 0.1), reason="a value given to one decimal is right when it rounds to it (within 0.05); "
              "off by over 0.1 the stated decimal is wrong")),)),
    Claim("temperature_needed_at_128", "note 2 §4, follow-up 3",
          "Going from d_k = 64 to 128 needs a temperature √(d_k/τ) to keep the attention's sharpness.",
          Criterion("abs_log2_tau_needed", "|log2 τ| of the temperature at which d_k = 128's 1/√(d_k/τ) attention "
                    "has d_k = 64's 1/√d_k entropy (iid q, k; mean over seeds)", holds=(">", 0.25), fails=("<", 0.05),
                    reason="'needs' = τ must differ from 1 by 19% or more; within 3.5% plain √d_k already keeps it"),
          _temperature_needed),
)
"""The claims about the softmax's sharpness, in table order."""
