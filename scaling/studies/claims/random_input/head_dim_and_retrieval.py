"""Random-input claims about the head dim as the width and the context grow (note 1 §4; note 2 §6).

Keeping d_k fixed while the head count grows with the width preserves the attention scale (on random inputs, with
q and k independent and with q_t, k_t correlated at the alignment measured in trained models: that row trains the
q-k grids of ``scaling.studies.claims.training.qk_correlation``), and 1/√d_k keeps a few keys of a long document
from dominating the attention over it (a ranking of keys by score, which no constant scale changes, is measured
beside). Each measurement, then the claims (``HEAD_DIM_AND_RETRIEVAL_CLAIMS``).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from scaling.attention import dense as dense_lib
from scaling.attention import metrics as metrics_lib
from scaling.attention import rules as rules_lib
from scaling.mup import schemes as parametrization_lib
from scaling.studies.claims.context import BATCH
from scaling.studies.claims.context import by_d_k
from scaling.studies.claims.context import Context
from scaling.studies.claims.context import HEADS
from scaling.studies.claims.context import seed_mean
from scaling.studies.claims.context import seeds_text
from scaling.studies.claims.random_input.inputs import NOTE_D_K
from scaling.studies.claims.random_input.inputs import sp_spec
from scaling.studies.claims.random_input.inputs import sp_weights
from scaling.studies.claims.parts import Part
from scaling.studies.claims.parts import parts_criterion
from scaling.studies.claims.parts import parts_text
from scaling.studies.claims.parts import score_parts
from scaling.studies.claims.training.qk_correlation import qk_rule_grids
from scaling.studies.claims.training.qk_correlation import trained_qk_alignment
from scaling.studies.claims.training.sizes import data_name
from scaling.studies.claims.training.sizes import sizes
from scaling.studies.claims.verdicts import Reading
from scaling.studies.claims.verdicts import Claim
from scaling.studies.claims.verdicts import Criterion
from scaling.studies.claims.verdicts import Measurement
from scaling.studies.stats import mean_std
from scaling.studies.stats import round_sig

FIXED_HEAD_DIM = 64  # head dim of the claim that fixes d_k while width grows
ALIGNMENT_RULE = "sqrt"  # the rule of the trained models whose q-k alignment the aligned arm takes
RAG_KEYS, RAG_QUERIES, RAG_TOP = 2048, 16, 5  # a long document's keys, the queries, and "a few tokens"


def relative_spread(values: list[float]) -> float:
  """(max − min) / mean of ``values``."""
  return (max(values) - min(values)) / float(np.mean(values))


def _head_dim_scales(ctx: Context, rho: float) -> dict[int, tuple[int, dict[str, np.ndarray]]]:
  """{width: (heads, per-seed values)}: the 1/√d_k logit std and mean row-max logit of unit-variance tokens through
  SP-initialized W_q, W_k with d_k = FIXED_HEAD_DIM and width/FIXED_HEAD_DIM heads ("fixed") and with one head of
  d_k = width ("grown"), for iid q, k ("iid") and for q_t, k_t of each token correlated at ``rho`` ("aligned":
  W_k = ρ·W_q + √(1 − ρ²)·W_k')."""
  d = FIXED_HEAD_DIM
  rule = parametrization_lib.get_parametrization("sp").attention_rule()

  def one(width):
    heads = max(1, width // d)
    mult, mult1 = sp_spec(width, heads * d).multiplier, sp_spec(width, width).multiplier

    def draw(rng):
      x = rng.standard_normal((BATCH, ctx.seq_len, width), dtype=np.float32)
      return x, *sp_weights(rng, width, heads * d), *sp_weights(rng, width, width)

    def compute(x, w_q, w_k, w_q1, w_k1):
      out = {}
      for inputs, c in (("iid", 0.0), ("aligned", rho)):
        for name, m, h, dk, wq, wk in (("fixed", mult, heads, d, w_q, w_k), ("grown", mult1, 1, width, w_q1, w_k1)):
          wk = c * wq + math.sqrt(1.0 - c * c) * wk
          q, k = ((m * x @ w).reshape(BATCH, ctx.seq_len, h, dk) for w in (wq, wk))
          z = dense_lib.attention_logits(q, k, rule=rule)
          out[f"{name} {inputs} std"] = jnp.std(z)
          out[f"{name} {inputs} row max"] = jnp.mean(jnp.max(z, axis=-1))
      return out

    return heads, ctx.per_seed("head_dim_constant", draw, compute, width)

  return ctx.cached(("head_dim_scales", rho), lambda: {w: one(w) for w in ctx.widths})


ARMS = {"iid": "q, k independent (ρ = 0)", "aligned": "q_t, k_t correlated at the trained ρ"}
HEAD_DIM_PARTS = tuple(Part(name, Criterion(
    f"contrast_{arm}", f"relative spread (max − min)/mean across widths of the mean row-max 1/√d_k logit with one head "
    f"of d_k = width, less that with d_k = {FIXED_HEAD_DIM} and width/{FIXED_HEAD_DIM} heads (unit-variance tokens, "
    "SP fan-in W_q, W_k)", holds=(">=", 0.2), fails=("<", 0.05))) for arm, name in ARMS.items())


def head_dim_measurement(ctx: Context, rho: float, rho_source: str) -> Measurement:
  """The fixed-head-dim claim's parts (``HEAD_DIM_PARTS``) at the q-k correlation ``rho`` of the aligned arm.

  Args:
    ctx: the context (widths, sequence length, seeds).
    rho: the correlation of q_t and k_t of the same token in the aligned arm, in [0, 1).
    rho_source: where ``rho`` comes from, in words (for the finding).

  Returns:
    The measurement: the parts' score ``parts_holding``, each arm's contrast and the values they are made of.
  """
  if not 0.0 <= rho < 1.0:
    raise ValueError(f"rho must be in [0, 1), got {rho!r}")
  d = FIXED_HEAD_DIM
  out = _head_dim_scales(ctx, float(rho))
  spread = {f"{name} {inputs}": relative_spread([seed_mean(v[f"{name} {inputs} row max"]) for _, v in out.values()])
            for name in ("fixed", "grown") for inputs in ARMS}
  contrast = {inputs: spread[f"grown {inputs}"] - spread[f"fixed {inputs}"] for inputs in ARMS}
  score, verdicts = score_parts(HEAD_DIM_PARTS, {ARMS[a]: contrast[a] for a in ARMS})
  std_spread = relative_spread([seed_mean(v["fixed iid std"]) for _, v in out.values()])
  row_max = lambda key: ", ".join(f"{seed_mean(v[key]):.2f}" for _, v in out.values())
  widths = ", ".join(f"{w} ({h} head{'s' if h > 1 else ''})" for w, (h, _) in out.items())
  return Measurement(
      {"parts_holding": score, "part_verdicts": verdicts,
       **{f"contrast_{a}": round_sig(c) for a, c in contrast.items()},
       "row_max_relative_spread": {k: round_sig(v) for k, v in spread.items()},
       "rel_spread_logit_std_fixed_iid": round_sig(std_spread), "head_dim": d, "qk_alignment": round_sig(rho),
       "qk_alignment_source": rho_source, "heads": {w: h for w, (h, _) in out.items()},
       "values": {key: {w: mean_std(v[key], 4) for w, (_, v) in out.items()} for key in next(iter(out.values()))[1]}},
      f"Unit-variance tokens through SP-initialized W_q, W_k at widths {widths}, 1/√d_k: with d_k = {d} fixed the "
      f"logit std spreads {std_spread:.2%} across widths and the mean row-max logit is {row_max('fixed iid row max')} "
      f"for iid q, k and {row_max('fixed aligned row max')} for q_t, k_t correlated at ρ = {rho:.3g} ({rho_source}); "
      f"one head with d_k = width (the case the note warns about) gives {row_max('grown iid row max')} and "
      f"{row_max('grown aligned row max')}. The relative spread of the row max across widths is larger with d_k "
      f"growing than with d_k fixed by {contrast['iid']:+.3f} for iid q, k and {contrast['aligned']:+.3f} at the "
      f"trained ρ ({seeds_text(ctx)}). Parts: {parts_text(verdicts)}.")


def _head_dim_grids(ctx: Context) -> dict:
  """The grids whose trained q-k alignment the aligned arm takes (``train_qk_correlate``'s of ALIGNMENT_RULE)."""
  return qk_rule_grids(ctx, ALIGNMENT_RULE)


def _head_dim_constant(ctx: Context) -> Measurement:
  by_width = trained_qk_alignment(ctx, ALIGNMENT_RULE)
  final = np.concatenate([np.asarray(v["final"], np.float64) for v in by_width.values()])
  init = np.concatenate([np.asarray(v["init"], np.float64) for v in by_width.values()])
  finite = final[np.isfinite(final)]
  rho = float(np.mean(finite)) if finite.size else math.nan
  source = (f"measured: |mean cos(q_t, k_t)| of the depth-{sizes(ctx)['depth_small']} models trained with 1/√d_k, "
            f"widths {', '.join(map(str, by_width))}, {finite.size} of {final.size} runs finite, on the "
            f"{data_name(ctx)}, train_qk_correlate's grids; {float(np.mean(init)):.3g} at their init")
  numbers = {"qk_alignment_by_width": {w: {k: mean_std(x, 4) for k, x in v.items()} for w, v in by_width.items()}}
  if not math.isfinite(rho):
    return Measurement({"parts_holding": math.nan, "qk_alignment": None, "qk_alignment_source": source, **numbers},
                       f"No trained run gave a finite q-k alignment ({source}), so the aligned arm is not measured.")
  m = head_dim_measurement(ctx, min(rho, 0.99), source)
  return Measurement({**m.numbers, **numbers}, m.finding)


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
  w = metrics_lib.softmax_distribution(dense_lib.attention_weights(q, k, rule=rule))
  return jnp.mean(jnp.sum(jax.lax.top_k(w, top)[0], axis=-1))


def top_keys_changed(q: jax.Array, k: jax.Array, rule: str | rules_lib.ScaleRule, top: int) -> jax.Array:
  """The fraction of query rows whose ``top`` keys by unscaled score q·k differ (as a set) from those by ``rule``'s
  logits: what a scale changes in top-k retrieval by score.

  Args:
    q: [B, T, N, H] queries.
    k: [B, S, N, H] keys.
    rule: the logit-scale rule.
    top: how many keys are retrieved.

  Returns:
    A scalar in [0, 1].
  """
  if not 1 <= top <= k.shape[1]:
    raise ValueError(f"top must be in [1, {k.shape[1]}] (the number of keys), got {top}")
  picked = lambda z: jnp.sort(jax.lax.top_k(z, top)[1], axis=-1)
  raw, scaled = (picked(dense_lib.attention_logits(q, k, rule=r)) for r in ("none", rule))
  return jnp.mean(jnp.any(raw != scaled, axis=-1))


def _retrieval_dominance(ctx: Context) -> Measurement:
  def one(d):
    def draw(rng):
      q = rng.standard_normal((BATCH, RAG_QUERIES, HEADS, d), dtype=np.float32)
      return q, rng.standard_normal((BATCH, RAG_KEYS, HEADS, d), dtype=np.float32)

    def compute(q, k):
      return {**{r: top_mass(q, k, r, RAG_TOP) for r in ("none", "sqrt")},
              "changed": top_keys_changed(q, k, "sqrt", RAG_TOP)}

    return ctx.per_seed("retrieval", draw, compute, d)

  v = {d: one(d) for d in NOTE_D_K}
  moved = {d: x["none"] - x["sqrt"] for d, x in v.items()}
  stat = min(seed_mean(m) for m in moved.values())
  changed = max(seed_mean(x["changed"]) for x in v.values())
  return Measurement(
      {"min_top_mass_removed": round_sig(stat), "max_top_keys_changed": round_sig(changed),
       "top_mass_none": by_d_k({d: x["none"] for d, x in v.items()}),
       "top_mass_sqrt": by_d_k({d: x["sqrt"] for d, x in v.items()}),
       "top_keys_changed": by_d_k({d: x["changed"] for d, x in v.items()}), "keys": RAG_KEYS, "top": RAG_TOP},
      f"Attention weights: over a long document of {RAG_KEYS} iid keys ({RAG_QUERIES} iid queries), the {RAG_TOP} "
      "keys with the largest weights take "
      + "; ".join(f"{seed_mean(x['none']):.1%} of a query's attention without scaling and "
                  f"{seed_mean(x['sqrt']):.1%} with 1/√d_k at d_k = {d}" for d, x in v.items())
      + f": scaling moves at least {stat:.1%} of the mass off them. The verdict covers these attention weights only: "
      f"ranked by score (top-{RAG_TOP} retrieval by q·k), 1/√d_k changes the {RAG_TOP} keys retrieved for at most "
      f"{changed:.1%} of queries, as a constant factor keeps every ranking ({seeds_text(ctx)}).")


HEAD_DIM_AND_RETRIEVAL_CLAIMS: tuple[Claim, ...] = (
    Claim("head_dim_constant", "note 1 §4 (English)",
          "Keeping d_k fixed while width grows with the head count preserves the attention scale.",
          parts_criterion("parts_holding", "arms in which fixing d_k keeps the scale steadier than growing it",
                          HEAD_DIM_PARTS,
                          reason="'preserves' needs a contrast: fixing d_k must keep the scale 20% steadier than "
                          "growing d_k (the case the note warns about) does; under 5% it preserves nothing growing "
                          "d_k loses. Judged for independent q, k (the iid derivation's premise) and at the q-k "
                          "alignment ρ measured in trained models, each arm on its own"),
          _head_dim_constant, training=True, grids=_head_dim_grids),
    Claim("retrieval_not_dominated", "note 2 §6 (RAG)",
          "In long-document retrieval with large Q/K dimensions, scaling keeps the retrieval scores from being "
          "dominated by a few tokens (the note's 'attention scores in retrieval results': measured on the attention "
          "weights, not on a ranking of keys by score, which a constant scale leaves unchanged).",
          Criterion("min_top_mass_removed", f"share of attention mass on the {RAG_TOP} largest-weight keys of "
                    f"{RAG_KEYS} without scaling, less that with 1/√d_k, iid q, k, the smaller over d_k 64 and 128",
                    holds=(">=", 0.5), fails=("<", 0.1),
                    reason="the note frames the scores as attention scores in retrieval; 'dominated by a few tokens' "
                    "= they take most of the mass; scaling keeps it from them if it moves at least half of the mass "
                    "off them, under a tenth it changes nothing"),
          _retrieval_dominance,
          beside=(Reading(f"the scores as a ranking (top-{RAG_TOP} retrieval by q·k): scaling changes which few "
                          "keys are retrieved",
                          Criterion("max_top_keys_changed", f"fraction of queries whose top-{RAG_TOP} keys by score "
                                    "differ with 1/√d_k from those without, the larger over d_k 64 and 128",
                                    holds=(">=", 0.5), fails=("<", 0.1),
                                    reason="under a ranking, scaling prevents domination only if it changes the few "
                                    "keys retrieved: for most queries it does, for under a tenth it does not")),)),
)
"""The claims about the head dim and retrieval, in table order."""
