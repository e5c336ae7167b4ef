"""Random-input claims about outlier tokens overflowing low-precision attention, and the remedies (note 2 §2.3, §5).

Even with 1/√d_k, tokens of extreme norm overflow float16 and bfloat16 attention into NaN, and then the gradients;
clamping q·k before the scale, the online softmax and FP32 are offered as fixes. All are read from one sweep of
outlier factors (``SWEPT_FACTORS``) over the conditions of ``SWEEP_HOWS``. Each measurement, then the claims
(``OUTLIER_OVERFLOW_CLAIMS``).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from scaling.attention import dense as dense_lib
from scaling.attention import dispatch as attention_lib
from scaling.attention import rules as rules_lib
from scaling.studies.claims.random_input.attention_variants import clamped_attention
from scaling.studies.claims.random_input.attention_variants import LOW_PRECISION
from scaling.studies.claims.random_input.attention_variants import low_precision_output
from scaling.studies.claims.random_input.attention_variants import nonfinite_rows
from scaling.studies.claims.random_input.attention_variants import online_softmax_attention
from scaling.studies.claims.context import Context
from scaling.studies.claims.context import seed_mean
from scaling.studies.claims.context import seeds_text
from scaling.studies.claims.random_input.inputs import iid_qkv
from scaling.studies.claims.random_input.inputs import with_outliers
from scaling.studies.claims.parts import Part
from scaling.studies.claims.parts import parts_criterion
from scaling.studies.claims.parts import parts_text
from scaling.studies.claims.parts import score_parts
from scaling.studies.claims.verdicts import Claim
from scaling.studies.claims.verdicts import Criterion
from scaling.studies.claims.verdicts import Measurement
from scaling.studies.stats import mean_std
from scaling.studies.stats import round_sig

SWEPT_FACTORS = (1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 50.0, 100.0, 150.0, 200.0, 300.0)  # the outlier sweep
EXTREME_TOKEN_FACTOR = 10.0  # the norm (× the rest's) an "individual extreme token" plainly reaches
CLAMP = 100.0  # note 2 §3: clamp q·k to [−100, 100] before the scale
LOW_PRECISION_D_K = 128  # head dim of the low-precision claim
ONLINE_BLOCK = 32  # keys per block of ``online_softmax_attention`` in the outlier sweep


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
    q, k = with_outliers(q, f), with_outliers(k, f)
    out = {_sweep_name("float32", "float32", sub): nonfinite_rows(attention_lib.dot_product_attention(
        q, k, v, rule="sqrt", subtract_max=sub, implementation="xla")) for sub in (False, True)}
    for name, dtype in LOW_PRECISION.items():
      lq, lk, lv = (x.astype(dtype) for x in (q, k, v))
      for sub in (False, True):
        for how, soft32 in (("input", False), ("softmax32", True)):
          out[_sweep_name(name, how, sub)] = nonfinite_rows(low_precision_output(
              q, k, v, dtype=dtype, rule="sqrt", acc32=False, softmax32=soft32, subtract_max=sub))
        out[_sweep_name(name, "clamp", sub)] = nonfinite_rows(
            clamped_attention(lq, lk, lv, rule=sqrt, clamp=CLAMP, subtract_max=sub))
      out[_sweep_name(name, "dense32", True)] = nonfinite_rows(low_precision_output(
          q, k, v, dtype=dtype, rule="sqrt", acc32=True, softmax32=True, subtract_max=True))
      out[_sweep_name(name, "online", True)] = nonfinite_rows(
          attention_lib.dot_product_attention(lq, lk, lv, rule="sqrt", implementation="blockwise"))
      block = math.gcd(ONLINE_BLOCK, ctx.seq_len)
      out[_sweep_name(name, "online_low", True)] = nonfinite_rows(
          online_softmax_attention(lq, lk, lv, scale=float(sqrt.logit), block=block))
    return out

  def compute():
    return ctx.per_seed("outlier_sweep", lambda rng: iid_qkv(rng, ctx, d),
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
WITH_MAX, WITHOUT_MAX = "FP32 with max-subtraction", "FP32 without max-subtraction"
READINGS = {WITH_MAX: True, WITHOUT_MAX: False}  # FP32 with the max-subtraction note 1 §4 ④ requires, or without
SOLVES_CRITERION = parts_criterion(
    "parts_solved", "the remedies that solve the overflow: FP32 (all of attention in float32, softmax "
    "max-subtracted as note 1 §4 ④ requires) and q·k clamped to [−100, 100] (float16 and bfloat16, with and without "
    "max-subtraction)", SOLVES_PARTS,
    reason="FP32 is judged with the max-subtracted softmax the notes require ('softmax 必须减最大值', note 1 §4 ④; "
    "without it the finding gives the number); 'solved' = no non-finite row at all, over 0.1% left is not solved")


def fp32_or_clamp_parts(sweep: dict[str, np.ndarray]) -> dict[str, dict[str, Any]]:
  """Per reading of READINGS, the parts of 'solved by FP32 or by clamping' (``score_parts`` of SOLVES_PARTS) from the
  outlier sweep.

  FP32 is float32 attention with (WITH_MAX, the verdict's) or without (WITHOUT_MAX) max-subtraction; the clamp is
  the worst of ``clamped_attention`` in float16 and bfloat16, with and without max-subtraction, in either reading.

  Args:
    sweep: {condition name: [seeds, factors] fractions of non-finite rows}, with both float32 conditions and at
      least one clamped one.

  Returns:
    {reading: {"parts_solved", "max_nonfinite_rows": {part: worst fraction}, "part_verdicts"}}.
  """
  needed = [_sweep_name("float32", "float32", sub) for sub in READINGS.values()]
  missing = [n for n in needed if n not in sweep]
  if missing or not any("clamped" in n for n in sweep):
    raise ValueError(f"sweep lacks the float32 conditions {missing} or any clamped condition")
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
  subtracted, plain = readings[WITH_MAX], readings[WITHOUT_MAX]
  return Measurement(
      {"parts_solved": subtracted["parts_solved"], "readings": readings,
       "parts_solved_without_max_subtraction": plain["parts_solved"], **_sweep_numbers(ctx)},
      f"Over outlier factors ×1–×300 at d_k = {LOW_PRECISION_D_K} with 1/√d_k: FP32 with the max-subtracted softmax "
      f"leaves up to {subtracted['max_nonfinite_rows']['FP32']:.2%} non-finite rows "
      f"({subtracted['part_verdicts']['FP32']}); the clamp (float16 and bfloat16, with and without max-subtraction) "
      f"leaves up to {subtracted['max_nonfinite_rows']['clamp']:.2%} ({subtracted['part_verdicts']['clamp']}). FP32 "
      f"without max-subtraction, which the notes rule out, would leave up to {plain['max_nonfinite_rows']['FP32']:.2%} "
      f"(non-finite rows from {first}). At ×300, {len(broken)} of {len(sweep) - len(fixed)} other conditions have "
      f"non-finite rows ({seeds_text(ctx)}).")


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
  v = ctx.cached("d64_clip", lambda: ctx.per_seed(
      "d64_magnitudes", lambda rng: iid_qkv(rng, ctx, 64)[:2],
      lambda q, k: jnp.mean(jnp.abs(dense_lib.attention_logits(q, k, rule="none")) > CLAMP)))
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


NAN_PARTS = (
    Part("softmax outputs NaN", Criterion(
        "nan_rows_of_overflowed", "share of the query rows whose float16 logits overflow (a non-finite q·k/√d_k) "
        "whose softmax output has a NaN, outliers ×300, max-subtracted", holds=(">=", 0.5), fails=("<", 0.1))),
    Part("gradients explode", Criterion(
        "exploded_share_of_affected", "share of the affected gradient entries (non-finite or > 100× the float32 "
        "gradient's largest) that are ±inf or large rather than NaN, float16, outliers ×300", holds=(">=", 0.5),
        fails=("<", 0.1))),
)


def nan_then_gradient(q: jax.Array, k: jax.Array, v: jax.Array, factor: float) -> dict[str, jax.Array]:
  """What the overflow of float16 1/√d_k attention (max-subtracted) does to the softmax output and the gradient, the
  first and last tokens of q and k scaled by ``factor`` (``with_outliers``).

  Args:
    q: [B, T, N, H] queries (float32; cast to float16 inside).
    k, v: [B, S, N, H] keys and values.
    factor: the outliers' norm over the rest's.

  Returns:
    {"nan_rows_of_overflowed": share of the rows with a non-finite logit whose softmax weights have a NaN (NaN when
    no row overflows), "overflowed_rows", "nan_weight_rows", "rows" (non-finite output rows): fractions of all rows;
    "nan", "inf": fractions of the gradient's entries (w.r.t. q); "exploded_share": share of the affected gradient
    entries (non-finite or > 100× the float32 gradient's largest) that are ±inf or large rather than NaN}.
  """
  qo, ko = with_outliers(q, factor), with_outliers(k, factor)
  low = lambda x: x.astype(jnp.float16)
  logits, weights = dense_lib.attention_logits_and_weights(low(qo), low(ko), rule="sqrt", float32_softmax=False,
                                                           subtract_max=True)[:2]
  overflowed = jnp.any(~jnp.isfinite(logits.astype(jnp.float32)), axis=-1)
  nan_weights = jnp.any(jnp.isnan(weights.astype(jnp.float32)), axis=-1)
  n_over = jnp.sum(overflowed)
  nan_share = jnp.where(n_over > 0, jnp.sum(overflowed & nan_weights) / jnp.maximum(n_over, 1), jnp.nan)

  def loss(q, k, dtype, soft32):
    out = low_precision_output(with_outliers(q, factor), with_outliers(k, factor), v, dtype=dtype, rule="sqrt",
                               acc32=False, softmax32=soft32, subtract_max=True)
    return jnp.sum(out.astype(jnp.float32) * v)

  ref = jnp.max(jnp.abs(jax.grad(loss)(q, k, jnp.float32, True)))
  g = jax.grad(loss)(q, k, jnp.float16, False)
  nonfinite = ~jnp.isfinite(g)
  exploded = jnp.isinf(g) | (jnp.isfinite(g) & (jnp.abs(g) > 100 * ref))
  affected = jnp.maximum(jnp.sum(nonfinite | exploded), 1)
  return {"nan_rows_of_overflowed": nan_share, "overflowed_rows": jnp.mean(overflowed),
          "nan_weight_rows": jnp.mean(nan_weights), "nan": jnp.mean(jnp.isnan(g)), "inf": jnp.mean(jnp.isinf(g)),
          "exploded_share": jnp.sum(exploded) / affected,
          "rows": nonfinite_rows(low_precision_output(qo, ko, v, dtype=jnp.float16, rule="sqrt", acc32=False,
                                                      softmax32=False, subtract_max=True))}


def _nan_gradient(ctx: Context) -> Measurement:
  d = LOW_PRECISION_D_K
  factor = SWEPT_FACTORS[-1]
  v = ctx.cached("nan_gradient", lambda: ctx.per_seed("nan_gradient", lambda rng: iid_qkv(rng, ctx, d),
                                                      lambda q, k, v: nan_then_gradient(q, k, v, factor)))
  nan_share, share = seed_mean(v["nan_rows_of_overflowed"]), seed_mean(v["exploded_share"])
  score, verdicts = score_parts(NAN_PARTS, {"softmax outputs NaN": nan_share, "gradients explode": share})
  return Measurement(
      {"parts_holding": score, "part_verdicts": verdicts, "nan_rows_of_overflowed": round_sig(nan_share),
       "exploded_share_of_affected": round_sig(share), "overflowed_rows": mean_std(v["overflowed_rows"], 4),
       "nan_softmax_rows": mean_std(v["nan_weight_rows"], 4), "nan_fraction": mean_std(v["nan"], 4),
       "inf_fraction": mean_std(v["inf"], 4), "nonfinite_output_rows": mean_std(v["rows"], 4), "factor": factor},
      f"float16 1/√d_k attention (max-subtracted) at d_k = {d} with outlier tokens ×{factor:g}: "
      f"{seed_mean(v['overflowed_rows']):.2%} of query rows have an overflowing logit, and {nan_share:.1%} of those "
      f"rows get a NaN softmax output ({seed_mean(v['nan_weight_rows']):.2%} of all rows; "
      f"{seed_mean(v['rows']):.2%} of output rows are non-finite); the gradient with respect to q is NaN in "
      f"{seed_mean(v['nan']):.2%} and ±inf in {seed_mean(v['inf']):.2%} of entries; of the affected entries "
      f"(non-finite or > 100× the float32 gradient's largest), {share:.1%} exploded (inf or large) rather than NaN "
      f"({seeds_text(ctx)}). Parts: {parts_text(verdicts)}.")


OUTLIER_OVERFLOW_CLAIMS: tuple[Claim, ...] = (
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
          parts_criterion("parts_holding", "parts of the claim that hold", NAN_PARTS,
                          reason="'makes softmax output NaN' = most rows whose logits overflow get a NaN output, "
                          "under a tenth do not; 'explode' = grow without bound (inf or huge against float32), NaN is "
                          "not an explosion: most affected gradient entries exploding holds, under a tenth does not"),
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
)
"""The claims about outlier tokens in low precision and the remedies, in table order."""
