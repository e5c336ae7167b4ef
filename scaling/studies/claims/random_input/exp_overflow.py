"""The random-input claim that exp overflows without max-subtraction (note 1 §2 (b), §4 ④).

It is measured on a grid of every low-precision condition: input dtype, where q·k is accumulated and where the
softmax runs, rule, max-subtraction and inputs (iid, or with outlier tokens). The measurement, then the claim
(``EXP_OVERFLOW_CLAIMS``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from scaling.attention import dispatch as attention_lib
from scaling.studies.claims.random_input.attention_variants import LOW_PRECISION
from scaling.studies.claims.random_input.attention_variants import low_precision_output
from scaling.studies.claims.random_input.attention_variants import stacked_rules
from scaling.studies.claims.context import Context
from scaling.studies.claims.context import seed_mean
from scaling.studies.claims.context import seeds_text
from scaling.studies.claims.random_input.inputs import iid_qkv
from scaling.studies.claims.random_input.inputs import with_outliers
from scaling.studies.claims.parts import Part
from scaling.studies.claims.parts import parts_criterion
from scaling.studies.claims.parts import score_parts
from scaling.studies.claims.verdicts import Claim
from scaling.studies.claims.verdicts import Criterion
from scaling.studies.claims.verdicts import HOLDS
from scaling.studies.claims.verdicts import Measurement
from scaling.studies.stats import mean_std
from scaling.studies.stats import round_sig

OUTLIER_FACTORS = (10.0, 30.0)  # outlier tokens' norms relative to the rest in the low-precision grid
EXP_D_K = 64  # head dim of the exp-overflow claim (note 1's example)


ALL_LOW = "q·k and softmax in {dtype}"
ALL_F32 = "q·k and softmax in float32"
COMPUTE = ((ALL_LOW, False, False), ("q·k accumulated in float32, softmax in {dtype}", True, False),
           ("q·k in {dtype}, softmax in float32", False, True), (ALL_F32, True, True))
Condition = tuple[str, str, str, bool, str]  # dtype, compute, rule, subtract_max, inputs


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
          o = low_precision_output(q, k, v, dtype=dtype, rule=rule, acc32=acc32, softmax32=softmax32,
                                   subtract_max=subtract_max)
          out[(name, how, subtract_max)] = jnp.mean(~jnp.isfinite(o.astype(jnp.float32)))
      o = attention_lib.dot_product_attention(q, k, v, rule=rule, subtract_max=subtract_max)
      out[("float32", ALL_F32, subtract_max)] = jnp.mean(~jnp.isfinite(o))
    return out

  def grid(q, k, v):
    per_input = lambda f: jax.vmap(lambda rule: fractions(with_outliers(q, f), with_outliers(k, f), v, rule))(
        stacked_rules(rules, d_k))
    return jax.vmap(per_input)(jnp.asarray([1.0, *OUTLIER_FACTORS], jnp.float32))  # [inputs, rules]

  def compute():
    values = ctx.per_seed("nonfinite", lambda rng: iid_qkv(rng, ctx, d_k), grid, d_k)  # [seeds, inputs, rules]
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
  return {name: jnp.mean(~jnp.isfinite(low_precision_output(
      q, k, v, dtype=dtype, rule=rule, acc32=False, softmax32=False, subtract_max=False).astype(jnp.float32)))
          for name, dtype in OVERFLOW_DTYPES.items()}


def _fp16_overflow(ctx: Context) -> Measurement:
  d = EXP_D_K
  frac = ctx.per_seed("exp_overflow", lambda rng: iid_qkv(rng, ctx, d), exp_overflow_fractions)
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


EXP_OVERFLOW_CLAIMS: tuple[Claim, ...] = (
    Claim("fp16_exp_overflow", "note 1 §2 (b), §4 ④",
          "Without max-subtraction, exp overflows numerically (no dtype named).",
          parts_criterion("dtypes_overflowing", "dtypes (of float16, bfloat16, float32) in which attention without "
                          f"max-subtraction overflows, unscaled iid logits at d_k = {EXP_D_K} (the note's example), "
                          "q·k and softmax in that dtype", OVERFLOW_PARTS,
                          reason="the note names no dtype, so it claims the overflow in each: in over 1% of outputs "
                          "it overflows, in none it does not; in some dtypes only, it holds partly"),
          _fp16_overflow),
)
"""The claim that exp overflows without max-subtraction."""
