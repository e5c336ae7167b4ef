"""The random-input claim that computing QKᵀ and dividing by √d_k immediately, before the softmax, is the remedy for
low-precision overflow from extreme tokens (note 2 §2.3, 解法).

Three orders of the same 1/√d_k attention, all in float16 or bfloat16 with the softmax's max-subtraction, on the outlier
tokens of ``outlier_overflow`` (the first and last tokens of q and k scaled by each of its ``SWEPT_FACTORS``, at its
``LOW_PRECISION_D_K``): QKᵀ then the division at once (the library's dense attention in the input dtype), q divided by
√d_k before QKᵀ, and the division left until after the max-subtraction (inside the exponential, as fused kernels fold
the scale into exp). Each is compared with float32 attention for its non-finite rows and its error. The measurement,
then the claim (``SCALE_ORDER_CLAIMS``).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from scaling.attention import dense as dense_lib
from scaling.attention import dispatch as attention_lib
from scaling.base.validation import ConfigError
from scaling.studies.claims.context import Context
from scaling.studies.claims.context import seeds_text
from scaling.studies.claims.random_input.attention_variants import LOW_PRECISION
from scaling.studies.claims.random_input.attention_variants import nonfinite_rows
from scaling.studies.claims.random_input.inputs import iid_qkv
from scaling.studies.claims.random_input.inputs import with_outliers
from scaling.studies.claims.random_input.outlier_overflow import EXTREME_TOKEN_FACTOR
from scaling.studies.claims.random_input.outlier_overflow import LOW_PRECISION_D_K
from scaling.studies.claims.random_input.outlier_overflow import smallest_factor
from scaling.studies.claims.random_input.outlier_overflow import SWEPT_FACTORS
from scaling.studies.claims.verdicts import Claim
from scaling.studies.claims.verdicts import Criterion
from scaling.studies.claims.verdicts import Measurement
from scaling.studies.claims.verdicts import Reading
from scaling.studies.stats import round_sig

IMMEDIATE, Q_FIRST, LATE = "QKᵀ then ÷√d_k at once", "q ÷ √d_k then QKᵀ", "QKᵀ max-subtracted then ÷√d_k inside exp"
ORDERS = (IMMEDIATE, Q_FIRST, LATE)
"""The orders of the division compared, the note's remedy first."""


def ordered_attention(q: jax.Array, k: jax.Array, v: jax.Array, order: str) -> jax.Array:
  """softmax(q·k/√d_k)·v in the inputs' dtype (max-subtracted), with the division by √d_k placed as ``order`` says.

  Args:
    q: [B, T, N, H] queries.
    k, v: [B, S, N, H] keys and values, in q's dtype.
    order: one of ORDERS: ``IMMEDIATE`` (the library's dense attention with q·k and the softmax in the inputs' dtype:
      q·k, then the scale, then the softmax), ``Q_FIRST`` (q multiplied by 1/√d_k in its dtype, then the unscaled
      attention) or ``LATE`` (the unscaled q·k, its row maximum subtracted, then the scale inside the exponential).

  Returns:
    [B, T, N, H] in the inputs' dtype.
  """
  if order not in ORDERS:
    raise ConfigError(f"order must be one of {', '.join(map(repr, ORDERS))}, got {order!r}")
  dt = q.dtype
  scale = jnp.asarray(1.0 / math.sqrt(q.shape[-1]), dt)
  if order == IMMEDIATE:
    return attention_lib.dot_product_attention(q, k, v, rule="sqrt", float32_softmax=False, implementation="xla")
  if order == Q_FIRST:
    return attention_lib.dot_product_attention(q * scale, k, v, rule="none", float32_softmax=False,
                                               implementation="xla")
  z = dense_lib.attention_logits(q, k, rule="none", float32_softmax=False)  # [B, N, T, S] in dt
  e = jnp.exp((z - jnp.max(z, axis=-1, keepdims=True)) * scale)
  weights = (e / jnp.sum(e, axis=-1, keepdims=True)).astype(dt)
  return jnp.einsum("bnts,bsnh->btnh", weights, v)


def row_errors(out: jax.Array, reference: jax.Array) -> jax.Array:
  """The mean over finite rows of the largest |out − reference| in each row (NaN when no row is finite).

  Args:
    out: [B, T, N, H] an attention output.
    reference: [B, T, N, H] the float32 output of the same inputs.

  Returns:
    A scalar.
  """
  err = jnp.max(jnp.abs(out.astype(jnp.float32) - reference.astype(jnp.float32)), axis=-1)
  finite = jnp.isfinite(err)
  return jnp.sum(jnp.where(finite, err, 0.0)) / jnp.where(jnp.any(finite), jnp.sum(finite), jnp.nan)


def _order_sweep(ctx: Context) -> dict[tuple[str, str], dict[str, np.ndarray]]:
  """{(dtype, order): {"nonfinite" | "error": [seeds, factors]}}: the fraction of non-finite rows and the error of
  each order in each low-precision dtype, against float32 1/√d_k attention, outlier factors SWEPT_FACTORS."""
  d = LOW_PRECISION_D_K

  def one(q, k, v, f):
    q, k = with_outliers(q, f), with_outliers(k, f)
    ref = attention_lib.dot_product_attention(q, k, v, rule="sqrt", implementation="xla")
    out = {}
    for name, dtype in LOW_PRECISION.items():
      lq, lk, lv = (x.astype(dtype) for x in (q, k, v))
      for order in ORDERS:
        o = ordered_attention(lq, lk, lv, order)
        out[f"{name}|{order}"] = {"nonfinite": nonfinite_rows(o), "error": row_errors(o, ref)}
    return out

  def compute():
    values = ctx.per_seed("scale_order", lambda rng: iid_qkv(rng, ctx, d), lambda q, k, v: jax.vmap(
        lambda f: one(q, k, v, f))(jnp.asarray(SWEPT_FACTORS, jnp.float32)))
    return {tuple(key.split("|")): v for key, v in values.items()}

  return ctx.cached("scale_order", compute)


def order_statistics(sweep: dict[tuple[str, str], dict[str, np.ndarray]]) -> dict[str, float]:
  """The claim's statistics from the order sweep ({(dtype, order): {"nonfinite": [seeds, factors], ...}}).

  Args:
    sweep: the sweep, with every order of ORDERS in each dtype it holds.

  Returns:
    {"max_nonfinite_immediate": the largest seed-mean fraction of non-finite rows of ``IMMEDIATE`` over dtypes and
    factors; "late_minus_immediate": the largest over dtypes and factors of ``LATE``'s fraction less
    ``IMMEDIATE``'s (positive: dividing at once spares rows that dividing late loses); "q_first_minus_immediate":
    the same for ``Q_FIRST`` (at most 0: scaling q first is at least as good)}.
  """
  dtypes = sorted({t for t, _ in sweep})
  missing = [(t, o) for t in dtypes for o in ORDERS if (t, o) not in sweep]
  if not dtypes or missing:
    raise ConfigError(f"the sweep lacks the orders {missing!r}" if missing else "the sweep is empty")
  frac = {key: np.mean(np.asarray(v["nonfinite"], np.float64), axis=0) for key, v in sweep.items()}
  worse = lambda order: max(float(np.max(frac[(t, order)] - frac[(t, IMMEDIATE)])) for t in dtypes)
  return {"max_nonfinite_immediate": max(float(np.max(frac[(t, IMMEDIATE)])) for t in dtypes),
          "late_minus_immediate": worse(LATE), "q_first_minus_immediate": worse(Q_FIRST)}


def _factor_words(f: float | None) -> str:
  return f"none up to ×{SWEPT_FACTORS[-1]:g}" if f is None else f"from ×{f:g}"


def _divide_immediately(ctx: Context) -> Measurement:
  sweep = _order_sweep(ctx)
  stats = order_statistics(sweep)
  first = {f"{o} ({t})": smallest_factor(sweep[(t, o)]["nonfinite"]) for t in LOW_PRECISION for o in ORDERS}
  at = lambda f: SWEPT_FACTORS.index(f)
  error = {f"{o} ({t})": {f"×{f:g}": round_sig(float(np.mean(sweep[(t, o)]["error"][:, at(f)])))
                         for f in (1.0, EXTREME_TOKEN_FACTOR)} for t in LOW_PRECISION for o in ORDERS}
  numbers: dict[str, Any] = {
      **{k: round_sig(v) for k, v in stats.items()}, "d_k": LOW_PRECISION_D_K, "factors": list(SWEPT_FACTORS),
      "smallest_nonfinite_factor": first,
      "nonfinite_row_fraction": {f"{o} ({t})": [round_sig(float(x)) for x in np.mean(sweep[(t, o)]["nonfinite"], 0)]
                                 for t in LOW_PRECISION for o in ORDERS},
      "mean_row_error_vs_float32": error}
  return Measurement(numbers, (
      f"1/√d_k attention at d_k = {LOW_PRECISION_D_K} in float16 and bfloat16 (max-subtracted), the first and last "
      f"tokens of q and k scaled ×{SWEPT_FACTORS[0]:g}–×{SWEPT_FACTORS[-1]:g}: non-finite rows appear "
      + "; ".join(f"{_factor_words(f)} with {name}" for name, f in first.items())
      + f". Dividing at once leaves at most {stats['max_nonfinite_immediate']:.1%} of rows non-finite; dividing late "
      f"loses at most {stats['late_minus_immediate']:+.1%} of rows more, scaling q first "
      f"{stats['q_first_minus_immediate']:+.1%}. The mean row error against float32 is "
      + "; ".join(f"{e[f'×{EXTREME_TOKEN_FACTOR:g}']:.3g} with {name}" for name, e in error.items())
      + f" at ×{EXTREME_TOKEN_FACTOR:g} ({seeds_text(ctx)})."))


SCALE_ORDER_CLAIMS: tuple[Claim, ...] = (
    Claim("divide_right_after_qk", "note 2 §2.3 (解法)",
          "Against low-precision overflow from extreme tokens, compute QKᵀ, then immediately divide by √d_k, then "
          "apply the softmax.",
          Criterion("max_nonfinite_immediate", "largest fraction of non-finite rows of 1/√d_k attention computed as "
                    "QKᵀ then the division at once then the softmax (max-subtracted), float16 and bfloat16, outlier "
                    f"tokens ×{SWEPT_FACTORS[0]:g}–×{SWEPT_FACTORS[-1]:g} at d_k = {LOW_PRECISION_D_K}",
                    holds=("<=", 0.0), fails=(">", 0.001),
                    reason="offered as the remedy for the overflow of the sentence before: a remedy leaves no "
                    "non-finite row; over 0.1% left, it does not prevent the overflow"),
          _divide_immediately,
          beside=(Reading("dividing immediately rather than later is what matters", Criterion(
              "late_minus_immediate", "largest, over dtypes and outlier factors, of the fraction of non-finite rows "
              "with the division inside exp after the max-subtraction less that with the division at once",
              holds=(">", 0.001), fails=("<=", 0.0),
              reason="'immediately' matters if dividing later loses rows that dividing at once keeps (over 0.1%); "
              "none lost, it does not")),
                  Reading("scaling q before QKᵀ is at least as good", Criterion(
                      "q_first_minus_immediate", "largest, over dtypes and outlier factors, of the fraction of "
                      "non-finite rows with q divided by √d_k before QKᵀ less that with the division right after",
                      holds=("<=", 0.0), fails=(">", 0.001),
                      reason="at least as good = never more non-finite rows; over 0.1% more is worse")))),
)
"""The claim about the order of QKᵀ and the division by √d_k in low precision."""
