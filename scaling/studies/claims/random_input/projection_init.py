"""The random-input claim that GPT-style Q/K projections initialized at 1/√d give unit-variance q and k (note 1 §4 ②).

LayerNorm-ed tokens of width d (the library's ``layer_norm``, on raw tokens of mixed scales and offsets) go through
W_q and W_k drawn with SP's fan-in init (entries of std 1/√d, ``scaling.mup.schemes``), at each of the context's model
widths; the variance of each component of q and k over the tokens is compared with 1. The measurement, then the claim
(``PROJECTION_INIT_CLAIMS``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from scaling.attention import rules as rules_lib
from scaling.base.validation import ConfigError
from scaling.studies.claims.context import BATCH
from scaling.studies.claims.context import by_d_k
from scaling.studies.claims.context import Context
from scaling.studies.claims.context import HEADS
from scaling.studies.claims.context import seed_mean
from scaling.studies.claims.context import seeds_text
from scaling.studies.claims.random_input.inputs import raw_tokens
from scaling.studies.claims.random_input.inputs import sp_spec
from scaling.studies.claims.random_input.inputs import sp_weights
from scaling.studies.claims.verdicts import Claim
from scaling.studies.claims.verdicts import Criterion
from scaling.studies.claims.verdicts import Measurement
from scaling.studies.stats import round_sig

PROJECTION_D_K = 64  # head dim of the projections (note 1's); their fan-out is HEADS × this


def component_variances(x: jax.Array, w: jax.Array, multiplier: float = 1.0) -> jax.Array:
  """The variance over tokens of each component of the projection q = multiplier · x W.

  Args:
    x: [..., width] tokens (every leading axis counts as tokens).
    w: [width, fan_out] the projection.
    multiplier: the projection's forward multiplier (SP's is 1).

  Returns:
    [fan_out] variances (population, over the tokens).
  """
  if x.shape[-1] != w.shape[0]:
    raise ConfigError(f"x's last axis ({x.shape[-1]}) must be w's fan-in ({w.shape[0]})")
  q = multiplier * x.reshape(-1, x.shape[-1]).astype(jnp.float32) @ w.astype(jnp.float32)
  return jnp.var(q, axis=0)


def _projected_variances(ctx: Context) -> dict[int, dict[str, np.ndarray]]:
  """{width: {"q" | "k": per-seed mean component variance, "q_worst" | "k_worst": per-seed largest |Var − 1| of one
  component}} of LayerNorm-ed raw tokens through SP-initialized W_q, W_k, at each of the context's widths."""
  fan_out = HEADS * PROJECTION_D_K

  def one(width):
    mult = sp_spec(width, fan_out).multiplier

    def draw(rng):
      return raw_tokens(rng, ctx, width), *sp_weights(rng, width, fan_out)

    def compute(raw, w_q, w_k):
      x = rules_lib.layer_norm(raw)  # every token: mean 0, variance 1 over the width
      out = {}
      for name, w in (("q", w_q), ("k", w_k)):
        var = component_variances(x, w, mult)
        out[name], out[f"{name}_worst"] = jnp.mean(var), jnp.max(jnp.abs(var - 1))
      return out

    return ctx.per_seed("projection_init", draw, compute, width)

  return ctx.cached("projection_init", lambda: {w: one(w) for w in ctx.widths})


def _unit_variance(ctx: Context) -> Measurement:
  v = _projected_variances(ctx)
  dev = {(w, n): abs(seed_mean(v[w][n]) - 1) for w in ctx.widths for n in ("q", "k")}
  worst = max(dev.values())
  stds = {w: sp_spec(w, HEADS * PROJECTION_D_K).init_std for w in ctx.widths}
  single = max(seed_mean(v[w][f"{n}_worst"]) for w in ctx.widths for n in ("q", "k"))
  return Measurement(
      {"max_abs_var_dev": round_sig(worst), "init_std": {w: round_sig(s) for w, s in stds.items()},
       "var_q": by_d_k({w: v[w]["q"] for w in ctx.widths}), "var_k": by_d_k({w: v[w]["k"] for w in ctx.widths}),
       "max_abs_var_dev_one_component": round_sig(single), "fan_out": HEADS * PROJECTION_D_K},
      "LayerNorm-ed tokens through W_q, W_k with entries of std 1/√d (SP's fan-in init: "
      + ", ".join(f"{s:.4g} at d = {w}" for w, s in stds.items()) + ") give q, k components of variance "
      + "; ".join(f"{seed_mean(v[w]['q']):.4f} and {seed_mean(v[w]['k']):.4f} (d = {w})" for w in ctx.widths)
      + f", averaged over {HEADS * PROJECTION_D_K} components, variance over {BATCH * ctx.seq_len} tokens: largest "
      f"|Var − 1| {worst:.4f}; a single component's variance is at most {single:.3f} from 1 ({seeds_text(ctx)}).")


PROJECTION_INIT_CLAIMS: tuple[Claim, ...] = (
    Claim("gpt_init_unit_variance", "note 1 §4 ②",
          "If the Q/K projections are initialized at 1/√d (GPT style), the components of q and k have variance "
          "about 1, so √d_k scaling is right.",
          Criterion("max_abs_var_dev", "largest over the measured model widths d, and over q and k, of |Var − 1| of "
                    "their components (variance over tokens, mean over components and seeds), LayerNorm-ed tokens "
                    "through W_q, W_k with entries of std 1/√d", holds=("<", 0.05), fails=(">", 0.2),
                    reason="'variance about 1' as √d_k normalizes the logits to it (sqrt_normalizes): within 5%; 20% "
                    "off would need another factor"),
          _unit_variance),
)
"""The claim about the GPT-style init of the Q/K projections."""
