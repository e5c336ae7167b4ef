"""Random-input claims about normalization and the softmax temperature (note 1 §3, §4 ③; note 2 §2.4, §4).

QK-norm making the scale robust to the inputs' scale, 1/√d_k as the softmax temperature T = √d_k, a lower temperature
focusing attention, LayerNorm leaving Var(q·k) ∝ d_k, RMSNorm computing faster than LayerNorm (timed) and steadying
the gradient flow of a deep residual stack. Each measurement, then the claims (``NORMS_AND_TEMPERATURE_CLAIMS``).
"""

from __future__ import annotations

import math
import time

import jax
import jax.numpy as jnp
import numpy as np

from scaling.base import compilation
from scaling.attention import dense as dense_lib
from scaling.attention import dispatch as attention_lib
from scaling.attention import metrics as metrics_lib
from scaling.attention import rules as rules_lib
from scaling.mup import schemes as parametrization_lib
from scaling.studies.claims.random_input.attention_variants import logit_var
from scaling.studies.claims.context import BATCH
from scaling.studies.claims.context import by_d_k
from scaling.studies.claims.context import Context
from scaling.studies.claims.context import n_seeds_text
from scaling.studies.claims.context import pm
from scaling.studies.claims.context import seed_mean
from scaling.studies.claims.context import seeds_text
from scaling.studies.claims.context import span
from scaling.studies.claims.random_input.inputs import iid_qkv
from scaling.studies.claims.random_input.inputs import mixed_scales
from scaling.studies.claims.random_input.inputs import sp_spec
from scaling.studies.claims.random_input.inputs import token_stds
from scaling.studies.claims.random_input.inputs import TOKEN_OFFSET_STD
from scaling.studies.claims.random_input.logit_variance import projected_logit_var
from scaling.studies.claims.random_input.logit_variance import projection_width
from scaling.studies.claims.verdicts import Claim
from scaling.studies.claims.verdicts import Criterion
from scaling.studies.claims.verdicts import Measurement
from scaling.studies.stats import mean_std
from scaling.studies.stats import round_sig
from scaling.studies.stats import standard_error

QK_STDS = (0.1, 1.0, 10.0)  # entry stds of q and k for the QK-norm claim
FOCUS_TEMPERATURES = (4.0, 2.0, 1.0, 0.5, 0.25)  # temperatures T/√d_k of the lower-temperature claim, falling
FOCUS_D_K = 64  # its head dim (note 1's example)
STACK_WIDTH, STACK_HEAD_DIM, STACK_DEPTH, STACK_TOKENS = 256, 64, 12, 32  # the residual stack of the RMSNorm claim


def _qk_norm_robust(ctx: Context) -> Measurement:
  conditions = [f"entries of std {s:g}" for s in QK_STDS] + [mixed_scales()]

  def one(d):
    shape = (2, BATCH, ctx.seq_len, 1, 1)  # a std for each token of q and of k

    def draw(rng):
      q, k, _ = iid_qkv(rng, ctx, d)
      mixed = token_stds(rng, shape)
      return q, k, np.stack([np.full(shape, s) for s in QK_STDS] + [mixed]).astype(np.float32)

    def compute(q, k, stds):
      return jax.vmap(lambda sd: {r: logit_var(sd[0] * q, sd[1] * k, r) for r in ("sqrt", "qk_norm")})(stds)

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
    weights = compilation.jit(lambda q, k: dense_lib.attention_weights(q, k, rule="sqrt"))
    for rng in ctx.rngs("temperature", d):
      q, k, _ = iid_qkv(rng, ctx, d)
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


def entropy_falls_fraction(logits: jax.Array, temperatures: tuple[float, ...]) -> jax.Array:
  """The fraction of rows of ``logits`` [..., S] whose softmax entropy falls at every step of ``temperatures``
  (decreasing): softmax(z/T) gets more focused each time T is lowered."""
  h = jnp.stack([metrics_lib.row_entropy(jax.nn.softmax(logits / t, axis=-1)) for t in temperatures])
  return jnp.mean(jnp.all(h[1:] < h[:-1], axis=0))


def _lower_temperature_focuses(ctx: Context) -> Measurement:
  d = FOCUS_D_K
  temps = tuple(f * math.sqrt(d) for f in FOCUS_TEMPERATURES)

  def compute(q, k):
    z = dense_lib.attention_logits(q, k, rule="none")
    ent = jnp.stack([jnp.mean(metrics_lib.row_entropy(jax.nn.softmax(z / t, axis=-1))) for t in temps])
    mp = jnp.stack([jnp.mean(jnp.max(jax.nn.softmax(z / t, axis=-1), axis=-1)) for t in temps])
    return {"falls": entropy_falls_fraction(z, temps), "entropy": ent / math.log(z.shape[-1]), "max_prob": mp}

  v = ctx.per_seed("lower_temperature", lambda rng: iid_qkv(rng, ctx, d)[:2], compute)
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


def _layernorm_not_enough(ctx: Context) -> Measurement:
  v = projected_logit_var(ctx)
  log_d = np.log(np.asarray(ctx.d_k, np.float64))
  slopes = np.asarray([np.polyfit(log_d, np.log([v["none"][d][i] for d in ctx.d_k]), 1)[0] if len(ctx.d_k) > 1
                       else np.nan for i in range(ctx.num_seeds)])
  lo, hi = ctx.d_k[0], ctx.d_k[-1]
  width = projection_width(ctx)
  std = sp_spec(width, lo).init_std
  return Measurement(
      {"var_exponent": round_sig(seed_mean(slopes)), "var_exponent_by_seed": mean_std(slopes, 4), "width": width,
       "logit_var_none": by_d_k(v["none"]),
       "logit_var_sqrt": by_d_k(v["sqrt"])},
      f"Tokens LayerNorm-ed over width {width} (raw: {mixed_scales()}, offsets of std {TOKEN_OFFSET_STD:g}) and "
      f"projected by W_q, W_k of "
      f"std {std:.3g} (SP fan-in) give unscaled logit variance {seed_mean(v['none'][lo]):.3g} at d_k = {lo} and "
      f"{seed_mean(v['none'][hi]):.4g} at d_k = {hi}: Var ∝ d_k^{pm(slopes, '.3f')}; with 1/√d_k it is "
      f"{span([seed_mean(x) for x in v['sqrt'].values()])} ({seeds_text(ctx)}).")


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


NORMS_AND_TEMPERATURE_CLAIMS: tuple[Claim, ...] = (
    Claim("qk_norm_robust", "note 1 §3, §4",
          "QK-norm replaces the unit-variance assumption with explicit normalization, making the scale robust.",
          Criterion("max_rel_dev_qk_norm", "largest |Var − 1| of QK-norm logits over input scales (entry std "
                    f"{', '.join(f'{s:g}' for s in QK_STDS)}, and {mixed_scales()}) and the measured d_k",
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
)
"""The claims about normalization and the softmax temperature, in table order."""
