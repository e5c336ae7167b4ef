"""Random-input claims about RoPE and the 1/√d_k scale (note 2 §2.4), and a supporting measurement for RoFormer.

Whether RoPE changes the norms of q and k or the variance of the logits (note 2 §2.4), and whether with RoPE q·k
depends on the positions only through their offset, with 1/√d_k the right scale at every offset: a statement of ours
(``rope_compatible_with_sqrt``), measured beside the citation of RoFormer (``cite_roformer_rope_scaling`` in
``scaling.studies.claims.citations``), which note 2 credits with that analysis. Each measurement, then the claims
(``ROPE_CLAIMS``).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from scaling.attention import rope as rope_lib
from scaling.studies.claims.random_input.attention_variants import logit_var
from scaling.studies.claims.context import BATCH
from scaling.studies.claims.context import Context
from scaling.studies.claims.context import HEADS
from scaling.studies.claims.context import pm
from scaling.studies.claims.context import seeds_text
from scaling.studies.claims.context import span
from scaling.studies.claims.random_input.inputs import iid_qkv
from scaling.studies.claims.random_input.inputs import NOTE_D_K
from scaling.studies.claims.parts import Part
from scaling.studies.claims.parts import parts_criterion
from scaling.studies.claims.parts import parts_text
from scaling.studies.claims.parts import score_parts
from scaling.studies.claims.verdicts import Claim
from scaling.studies.claims.verdicts import Criterion
from scaling.studies.claims.verdicts import Measurement
from scaling.studies.stats import mean_std
from scaling.studies.stats import round_sig

ROPE_SHIFT = 128  # the common shift of query and key positions in the RoPE relative-position check
ROPE_OFFSET_BINS = 4  # relative offsets 0..T−1 in this many bins, each of whose logit variance is checked


def _rope_norms(ctx: Context) -> Measurement:
  dims = [d for d in ctx.d_k if d % 2 == 0]
  stride = max(1, 32768 // ctx.seq_len)
  labels = ("0..T-1", f"0..{stride}(T-1)")

  def one(d):
    def compute(q, k):
      rel = lambda y, x: jnp.max(jnp.abs(jnp.linalg.norm(y, axis=-1) / jnp.linalg.norm(x, axis=-1) - 1))

      def rotated(positions):
        rq, rk = rope_lib.apply_rope(q, positions), rope_lib.apply_rope(k, positions)
        return jnp.maximum(rel(rq, q), rel(rk, k)), logit_var(rq, rk, "sqrt")

      change, var = jax.vmap(rotated)(jnp.arange(ctx.seq_len)[None, :] * jnp.asarray([[1], [stride]]))
      return {"change": change, "var": var, "var_without": logit_var(q, k, "sqrt")}
    return ctx.per_seed("rope", lambda rng: iid_qkv(rng, ctx, d)[:2], compute, d)

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
    return ctx.per_seed("rope_compatible", lambda rng: iid_qkv(rng, ctx, d)[:2],
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
      + f" ({seeds_text(ctx)}). Parts: {parts_text(verdicts)}.")


ROPE_CLAIMS: tuple[Claim, ...] = (
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
    Claim("rope_compatible_with_sqrt", "ours, on note 2's RoFormer reference (cite_roformer_rope_scaling)",
          "With RoPE (base 10000) on iid q and k, q·k depends on the positions only through their offset, and 1/√d_k "
          "keeps the logit variance at 1 at every offset.",
          parts_criterion("parts_holding", "parts of the statement that hold, the library's RoPE on iid q, k at d_k 64 "
                          "and 128", ROPE_PARTS,
                          reason="the offset dependence is an identity (float32 rounding of the angles stays below "
                          "1e-4; 1e-2 is another function); '1/√d_k stays right' = unit variance at every offset, "
                          "within 5%, and a 20% change is a change"),
          _rope_compatible, supports=("cite_roformer_rope_scaling",)),
)
"""The claims about RoPE, in table order."""
