"""Claims about attention logit scaling, each paired with the measurement that tests it.

The claims come from two interview-preparation notes on why attention divides
its logits by √d_k (``shared/seeds/000_ae59428f9015f76d.txt``, "note 1", and
``shared/seeds/004_383f650843b84e3b.txt``, "note 2"). Each ``Claim`` names its
source, quotes or paraphrases it, and has a ``measure`` function that returns
the numbers and a verdict: ``holds``, ``partly`` or ``does not hold``. Only
claims that random-input measurements can settle live here; claims about
training are measured by ``experiments.train``, ``experiments.coord_check``
and ``experiments.transfer``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import pathlib
import textwrap
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from scaling import attention as attention_lib
from scaling import rope as rope_lib
from scaling import rules as rules_lib
from scaling import report
from scaling import results
from scaling.config import option
from scaling.config import Options
from scaling.studies import sweep as sweep_lib

HOLDS, PARTLY, FAILS = "holds", "partly", "does not hold"


@dataclasses.dataclass(frozen=True)
class Measurement:
  """What a claim's measurement found: a verdict, a one-sentence finding and the numbers behind it."""

  verdict: str
  finding: str
  numbers: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Claim:
  """A claim from the notes and the function that measures it."""

  id: str
  source: str
  text: str
  measure: Callable[["Context"], Measurement]


class Context:
  """Shared, cached sweeps so that claims measured on the same configuration run it once."""

  def __init__(self, *, d_k: tuple[int, ...] = (16, 32, 64, 128, 256, 512, 1024), seq_len: int = 128,
               num_seeds: int = 4, seed: int = 0):
    self.d_k, self.seq_len, self.num_seeds, self.seed = d_k, seq_len, num_seeds, seed

  @functools.lru_cache(maxsize=None)
  def sweep(self, rules: tuple[str, ...], **overrides) -> dict[tuple[str, int], dict[str, Any]]:
    """{(rule, d_k): row} for a sweep over this context's head dims."""
    config = sweep_lib.SweepConfig(d_k=overrides.pop("d_k", self.d_k), rules=rules, seq_len=self.seq_len,
                                   num_seeds=self.num_seeds, seed=self.seed, **overrides)
    return {(r["rule"], r["d_k"]): r for r in sweep_lib.run_sweep(config)}

  def metric(self, rows, rule: str, metric: str) -> list[float]:
    """The mean of ``metric`` for ``rule`` at every head dim of ``rows``, in d_k order."""
    return [rows[(rule, d)][metric]["mean"] for d in sorted({d for (_, d) in rows})]


BASE_RULES = ("none", "sqrt", "linear", "quadratic", "post_softmax", "qk_norm")


def _r(x: float, digits: int = 3) -> float:
  """Rounds to ``digits`` significant digits for reporting."""
  return float(f"{x:.{digits}g}") if math.isfinite(x) else x


def _variance_is_dk(ctx: Context) -> Measurement:
  rows = ctx.sweep(BASE_RULES)
  ratios = [v / d for v, d in zip(ctx.metric(rows, "none", "logit_var"), ctx.d_k)]
  worst = max(abs(r - 1) for r in ratios)
  return Measurement(HOLDS if worst < 0.05 else FAILS,
                     f"Var(q·k)/d_k is {min(ratios):.3f}–{max(ratios):.3f} for d_k {ctx.d_k[0]}–{ctx.d_k[-1]}.",
                     {"d_k": list(ctx.d_k), "var_over_dk": [_r(r, 4) for r in ratios]})


def _sqrt_unit_variance(ctx: Context) -> Measurement:
  rows = ctx.sweep(BASE_RULES)
  var = ctx.metric(rows, "sqrt", "logit_var")
  rows2 = ctx.sweep(("sqrt",), qk_std=2.0)
  var2 = ctx.metric(rows2, "sqrt", "logit_var")
  ok = max(abs(v - 1) for v in var) < 0.05
  return Measurement(PARTLY if ok else FAILS,
                     f"With unit-variance q, k the scaled logit variance is {min(var):.3f}–{max(var):.3f} at every "
                     f"d_k; with std-2 entries it is {np.mean(var2):.1f} (= 2⁴): 1/√d_k normalizes only when the "
                     "unit-variance assumption holds.",
                     {"var_unit_std": [_r(v, 4) for v in var], "var_std2": [_r(v, 4) for v in var2]})


def _d64_magnitudes(ctx: Context) -> Measurement:
  rows = ctx.sweep(BASE_RULES)
  i = ctx.d_k.index(64)
  std = ctx.metric(rows, "none", "logit_std")[i]
  absmax = ctx.metric(rows, "none", "logit_absmax")[i]
  return Measurement(HOLDS if abs(std - 8) < 0.3 and absmax > 24 else FAILS,
                     f"Unscaled logits at d_k = 64 have std {std:.2f}; the largest |z| among "
                     f"{ctx.seq_len}×{ctx.seq_len} logits of 4×2 heads is {absmax:.1f} on average over seeds.",
                     {"std": _r(std), "absmax": _r(absmax)})


def _one_hot(ctx: Context) -> Measurement:
  rows = ctx.sweep(BASE_RULES)
  mp = ctx.metric(rows, "none", "max_prob")
  sat = ctx.metric(rows, "none", "saturated_frac")
  sqrt_mp = ctx.metric(rows, "sqrt", "max_prob")
  return Measurement(HOLDS if mp[-1] > 0.9 and mp[-1] > mp[0] else PARTLY,
                     f"Without scaling the mean max probability rises from {mp[0]:.2f} (d_k={ctx.d_k[0]}) to "
                     f"{mp[-1]:.2f} (d_k={ctx.d_k[-1]}) and the rows with max p > 0.99 from {sat[0]:.1%} to "
                     f"{sat[-1]:.1%}; with 1/√d_k it stays at {min(sqrt_mp):.3f}–{max(sqrt_mp):.3f}.",
                     {"max_prob_none": [_r(x) for x in mp], "saturated_frac_none": [_r(x) for x in sat],
                      "max_prob_sqrt": [_r(x) for x in sqrt_mp]})


def _gradients_vanish(ctx: Context) -> Measurement:
  rows = ctx.sweep(BASE_RULES)
  jac = ctx.metric(rows, "none", "softmax_jacobian_norm")
  gq_none = ctx.metric(rows, "none", "grad_norm_q")
  gq_sqrt = ctx.metric(rows, "sqrt", "grad_norm_q")
  ratio = [a / b for a, b in zip(gq_none, gq_sqrt)]
  return Measurement(FAILS,
                     f"The softmax Jacobian norm does shrink without scaling ({jac[0]:.3f} → {jac[-1]:.3f} over "
                     f"d_k {ctx.d_k[0]}→{ctx.d_k[-1]}), but the gradient reaching q is {ratio[0]:.0f}× (d_k="
                     f"{ctx.d_k[0]}) to {ratio[-1]:.0f}× (d_k={ctx.d_k[-1]}) larger than with 1/√d_k: the missing "
                     "1/√d_k factor multiplies it back, so at initialization the gradients do not vanish.",
                     {"jacobian_norm_none": [_r(x) for x in jac], "grad_q_none_over_sqrt": [_r(x) for x in ratio]})


def _linear_uniform(ctx: Context) -> Measurement:
  rows = ctx.sweep(BASE_RULES)
  ent = ctx.metric(rows, "linear", "entropy_normalized")
  ent_sqrt = ctx.metric(rows, "sqrt", "entropy_normalized")
  return Measurement(HOLDS if ent[-1] > 0.99 else PARTLY,
                     f"With 1/d_k and iid q, k the normalized entropy goes {ent[0]:.4f} → {ent[-1]:.4f} (1 = uniform) "
                     f"while 1/√d_k stays at {np.mean(ent_sqrt):.3f}; this is an at-initialization, iid statement "
                     "(μP's argument is about trained, correlated q and k).",
                     {"entropy_normalized_linear": [_r(x, 5) for x in ent],
                      "entropy_normalized_sqrt": [_r(x, 4) for x in ent_sqrt]})


def _quadratic_uniform(ctx: Context) -> Measurement:
  rows = ctx.sweep(BASE_RULES)
  ent = ctx.metric(rows, "quadratic", "entropy_normalized")
  std = ctx.metric(rows, "quadratic", "logit_std")
  return Measurement(HOLDS if min(ent) > 0.99 else PARTLY,
                     f"With 1/d_k² the logit std is {std[0]:.2g} at d_k={ctx.d_k[0]} and {std[-1]:.2g} at "
                     f"d_k={ctx.d_k[-1]}; normalized entropy ≥ {min(ent):.4f}: attention is uniform.",
                     {"logit_std_quadratic": [_r(x) for x in std], "entropy_normalized": [_r(x, 5) for x in ent]})


def _post_softmax(ctx: Context) -> Measurement:
  q, k, v = (jax.random.normal(key, (1, 64, 1, 64)) for key in jax.random.split(jax.random.key(ctx.seed), 3))
  w = attention_lib.attention_weights(q, k, rule="post_softmax")
  sums = np.asarray(jnp.sum(w, axis=-1))
  rows = ctx.sweep(BASE_RULES)
  same = max(abs(a - b) for a, b in zip(ctx.metric(rows, "post_softmax", "entropy"), ctx.metric(rows, "none",
                                                                                                 "entropy")))
  return Measurement(HOLDS,
                     f"Dividing after the softmax leaves rows summing to {sums.mean():.4f} = 1/√64 instead of 1 and "
                     f"does nothing against saturation (entropy equals the unscaled one to {same:.1e}).",
                     {"row_sum": _r(float(sums.mean()), 4), "entropy_diff_vs_none": same})


def _sqrt_flatter_at_128(ctx: Context) -> Measurement:
  rows = ctx.sweep(BASE_RULES)
  ent = dict(zip(ctx.d_k, ctx.metric(rows, "sqrt", "entropy_normalized")))
  mp = dict(zip(ctx.d_k, ctx.metric(rows, "sqrt", "max_prob")))
  return Measurement(FAILS,
                     f"With 1/√d_k the normalized entropy is {ent[64]:.4f} at d_k=64 and {ent[128]:.4f} at 128 "
                     f"(max prob {mp[64]:.4f} vs {mp[128]:.4f}): the larger divisor exactly cancels the larger "
                     "dot products, so attention is not flatter.",
                     {"entropy_normalized_64": _r(ent[64], 5), "entropy_normalized_128": _r(ent[128], 5)})


def _nonfinite_fraction(d_k: int, rule: str, std: float, *, float32_softmax: bool, subtract_max: bool,
                        dtype=jnp.float16, seed: int = 0) -> float:
  """Fraction of non-finite attention outputs for random q, k of the given std."""
  keys = jax.random.split(jax.random.key(seed), 3)
  q, k, v = (std * jax.random.normal(key, (4, 128, 2, d_k)) for key in keys)
  out = attention_lib.dot_product_attention(q.astype(dtype), k.astype(dtype), v.astype(dtype), rule=rule,
                                            float32_softmax=float32_softmax, subtract_max=subtract_max)
  return float(jnp.mean(~jnp.isfinite(out.astype(jnp.float32))))


def _fp16_overflow(ctx: Context) -> Measurement:
  del ctx
  raw = _nonfinite_fraction(64, "none", 1.0, float32_softmax=False, subtract_max=False)
  safe = _nonfinite_fraction(64, "none", 1.0, float32_softmax=False, subtract_max=True)
  return Measurement(HOLDS,
                     f"float16, d_k=64, unscaled: {raw:.1%} of outputs are NaN/inf when exp is taken of the raw "
                     f"logits (exp overflows float16 above z ≈ 11); subtracting the row max first leaves {safe:.1%}.",
                     {"nonfinite_no_max_subtraction": raw, "nonfinite_with_max_subtraction": safe})


def _low_precision_nan_even_scaled(ctx: Context) -> Measurement:
  del ctx
  numbers = {}
  for dtype_name, dtype in (("float16", jnp.float16), ("bfloat16", jnp.bfloat16)):
    for std in (1.0, 4.0):
      numbers[f"{dtype_name}_std{std:g}_max_sub"] = _nonfinite_fraction(
          128, "sqrt", std, float32_softmax=False, subtract_max=True, dtype=dtype)
  numbers["float16_std4_no_max_sub"] = _nonfinite_fraction(128, "sqrt", 4.0, float32_softmax=False,
                                                           subtract_max=False)
  worst = max(v for k, v in numbers.items() if k.endswith("max_sub") and "no_max" not in k)
  return Measurement(FAILS if worst == 0 else PARTLY,
                     f"With 1/√d_k and max-subtraction, softmax computed entirely in float16 or bfloat16 gives "
                     f"{worst:.1%} non-finite outputs even for q, k entries of std 4 (logit std 16); only dropping "
                     f"max-subtraction overflows ({numbers['float16_std4_no_max_sub']:.1%} in float16).",
                     numbers)


def _rope_norms(ctx: Context) -> Measurement:
  kx, kk = jax.random.split(jax.random.key(ctx.seed))
  x = jax.random.normal(kx, (4, 512, 4, 64))
  k = jax.random.normal(kk, (4, 512, 4, 64))
  y = rope_lib.apply_rope(x)
  rel = float(jnp.max(jnp.abs(jnp.linalg.norm(y, axis=-1) / jnp.linalg.norm(x, axis=-1) - 1)))
  var_x = float(jnp.var(jnp.einsum("bthd,bshd->bhts", x, k)))
  var_y = float(jnp.var(jnp.einsum("bthd,bshd->bhts", y, rope_lib.apply_rope(k))))
  return Measurement(FAILS,
                     f"RoPE is a rotation: the largest relative change of |q| over 8192 vectors is {rel:.1e}, and the "
                     f"variance of q·k for iid inputs is {var_x:.1f} without and {var_y:.1f} with RoPE; it changes "
                     "which keys match, not the logit scale.",
                     {"max_rel_norm_change": rel, "logit_var_without": _r(var_x), "logit_var_with": _r(var_y)})


def _qk_norm_robust(ctx: Context) -> Measurement:
  numbers = {}
  for std in (0.1, 1.0, 10.0):
    rows = ctx.sweep(("sqrt", "qk_norm"), qk_std=std, d_k=(16, 256))
    numbers[f"std{std:g}"] = {r: [_r(x, 4) for x in ctx.metric(rows, r, "logit_var")] for r in ("sqrt", "qk_norm")}
  qk = [v for s in numbers.values() for v in s["qk_norm"]]
  return Measurement(HOLDS if max(abs(v - 1) for v in qk) < 0.1 else PARTLY,
                     f"For q, k entries of std 0.1, 1 and 10 the 1/√d_k logit variance is "
                     f"{numbers['std0.1']['sqrt'][0]:.1e}, {numbers['std1']['sqrt'][0]:.2f} and "
                     f"{numbers['std10']['sqrt'][0]:.0f}; with QK-norm it is {min(qk):.3f}–{max(qk):.3f}.",
                     numbers)


def _temperature_equivalence(ctx: Context) -> Measurement:
  q, k, v = (jax.random.normal(key, (2, 32, 2, 64)) for key in jax.random.split(jax.random.key(ctx.seed), 3))
  a = attention_lib.dot_product_attention(q, k, v, rule="sqrt")
  b = attention_lib.dot_product_attention(q, k, v, scale=1 / 8.0)
  c = attention_lib.dot_product_attention(q, k, v, rule=rules_lib.TemperatureScale(tau=8.0))
  diff = float(max(jnp.max(jnp.abs(a - b)), jnp.max(jnp.abs(a - c))))
  return Measurement(HOLDS if diff < 1e-6 else FAILS,
                     f"softmax(q·k/√64) equals softmax(q·k/τ) with τ = 8 to {diff:.1e}: the scale is a temperature.",
                     {"max_abs_diff": diff})


def _layernorm_not_enough(ctx: Context) -> Measurement:
  rows = ctx.sweep(("none", "param"), parametrization="sp", width=256, d_k=(16, 64, 256))
  ratio = [v / d for v, d in zip(ctx.metric(rows, "none", "logit_var"), (16, 64, 256))]
  return Measurement(HOLDS,
                     f"Unit-variance (e.g. LayerNorm-ed) inputs of width 256 projected by fan-in-initialized W_q, "
                     f"W_k give unscaled logit variance {min(ratio):.3f}–{max(ratio):.3f} × d_k: normalizing the "
                     "token vectors does not normalize q·k.",
                     {"var_over_dk": [_r(r) for r in ratio]})


def _head_dim_constant(ctx: Context) -> Measurement:
  numbers = {}
  for width in (64, 256, 1024):
    rows = ctx.sweep(("param",), parametrization="sp", width=width, d_k=(64,))
    numbers[width] = _r(rows[("param", 64)]["logit_std"]["mean"], 4)
  return Measurement(HOLDS,
                     f"At initialization with d_k = 64 fixed and SP fan-in init, the scaled logit std is "
                     f"{', '.join(f'{v} (width {w})' for w, v in numbers.items())}: constant across width.",
                     {"logit_std_by_width": numbers})


CLAIMS: tuple[Claim, ...] = (
    Claim("variance_is_dk", "note 1 §3; note 2 §2.1",
          "q·k of independent zero-mean unit-variance vectors has variance d_k.", _variance_is_dk),
    Claim("sqrt_normalizes", "note 1 §1, §3",
          "Dividing by √d_k normalizes the logit variance to 1.0.", _sqrt_unit_variance),
    Claim("d64_magnitudes", "note 1 §3",
          "At d_k = 64 unscaled logits have std 8 and easily reach ±24 to ±30.", _d64_magnitudes),
    Claim("unscaled_one_hot", "note 1 §2; note 2 §2.1",
          "Without scaling, large d_k drives softmax toward one-hot.", _one_hot),
    Claim("gradients_vanish", "note 1 §3; note 2 §2",
          "Without scaling the saturated softmax makes backpropagated attention gradients vanish.",
          _gradients_vanish),
    Claim("linear_uniform", "note 1 §3; note 2 §2.2",
          "Dividing by d_k instead of √d_k makes attention nearly uniform.", _linear_uniform),
    Claim("quadratic_uniform", "note 1 §5",
          "Scaling by d_k² over-flattens attention into an uninformative uniform distribution.", _quadratic_uniform),
    Claim("post_softmax_breaks", "note 1 §4 ⑤, §5",
          "Applying the division after the softmax breaks the normalization.", _post_softmax),
    Claim("sqrt_flatter_at_128", "note 2 §4, follow-up 3",
          "Going from d_k = 64 to 128 makes 1/√d_k attention more uniform, losing sharpness.", _sqrt_flatter_at_128),
    Claim("fp16_exp_overflow", "note 1 §2 (b), §4 ④",
          "Without max-subtraction, exp overflows numerically.", _fp16_overflow),
    Claim("low_precision_nan_even_scaled", "note 2 §2.3",
          "Even with √d_k scaling, FP16/BF16 attention can overflow into NaN.", _low_precision_nan_even_scaled),
    Claim("rope_changes_norms", "note 2 §2.4",
          "RoPE changes the norms of Q and K, so scaling is still needed.", _rope_norms),
    Claim("qk_norm_robust", "note 1 §3, §4",
          "QK-norm replaces the unit-variance assumption with explicit normalization, making the scale robust.",
          _qk_norm_robust),
    Claim("scale_is_temperature", "note 1 §4 ③",
          "Dividing by √d_k is a softmax temperature T = √d_k.", _temperature_equivalence),
    Claim("layernorm_not_enough", "note 2 §2.4",
          "LayerNorm does not solve the attention-score variance problem.", _layernorm_not_enough),
    Claim("head_dim_constant", "note 1 §4 (English)",
          "Keeping d_k fixed while width grows with the head count preserves the attention scale.",
          _head_dim_constant),
)


def run_claims(ctx: Context | None = None, ids: tuple[str, ...] | None = None,
               on_result: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
  """Measures the claims (all, or those in ``ids``) and returns one JSON-ready row per claim."""
  ctx = ctx or Context()
  known = {c.id for c in CLAIMS}
  unknown = sorted(set(ids or ()) - known)
  if unknown:
    raise ValueError(f"unknown claim id(s) {', '.join(unknown)}; known: {', '.join(c.id for c in CLAIMS)}")
  rows = []
  for claim in CLAIMS:
    if ids and claim.id not in ids:
      continue
    m = claim.measure(ctx)
    row = {"id": claim.id, "source": claim.source, "claim": claim.text, "verdict": m.verdict,
           "finding": m.finding, "numbers": m.numbers}
    rows.append(row)
    if on_result:
      on_result(row)
  return rows


@dataclasses.dataclass(frozen=True)
class ClaimsConfig(Options):
  """Which claims to measure and on what (the options of ``experiments.claims``)."""

  ids: tuple[str, ...] | None = option(None, "Claims to measure (default: all).", choices=[c.id for c in CLAIMS])
  d_k: tuple[int, ...] = option((16, 32, 64, 128, 256, 512, 1024), "Head dimensions of the random-input sweeps "
                                "(must include 64 and 128).", lower=1)
  num_seeds: int = option(4, "Seeds per sweep configuration.", lower=1)
  seq_len: int = option(128, "Sequence length of the random-input sweeps.", lower=2)
  seed: int = option(0, "Base random seed.", lower=0)
  output: results.OutputConfig = option(results.OutputConfig("runs/claims"), "Output.")

  def __post_init__(self):
    object.__setattr__(self, "d_k", tuple(sorted(set(self.d_k))))
    super().__post_init__()

  def validate(self):
    if not {64, 128} <= set(self.d_k):
      raise ValueError("--d_k must include 64 and 128 (two claims are about those head dims)")


def markdown_table(rows) -> str:
  """The claims as a Markdown table: claim, source, verdict, finding."""
  cell = lambda text: str(text).replace("|", "\\|")
  lines = ["| claim | source | verdict | what we measured |", "|---|---|---|---|"]
  for r in rows:
    lines.append(f"| {cell(r['claim'])} | {cell(r['source'])} | **{r['verdict']}** | {cell(r['finding'])} |")
  return "\n".join(lines) + "\n"


def run(config: ClaimsConfig, out_dir: pathlib.Path) -> list[dict[str, Any]]:
  """The study as ``experiments.claims`` runs it: measures, streams rows, writes claims.md, prints verdicts."""
  results.make_dir(out_dir)
  results.write_json(out_dir / "config.json", dataclasses.asdict(config))
  ctx = Context(d_k=config.d_k, seq_len=config.seq_len, num_seeds=config.num_seeds, seed=config.seed)
  total = len(config.ids) if config.ids else len(CLAIMS)
  with results.RowStream(out_dir / "claims.jsonl") as stream, report.Progress(total, "claims") as progress:

    def on_result(row):
      stream.write(row)
      progress.update(f"{row['id']}: {row['verdict']}")

    rows = run_claims(ctx, config.ids, on_result=on_result)
  (out_dir / "claims.md").write_text(markdown_table(rows))
  for r in rows:
    print(f"[{r['verdict']:>13}] {r['claim']}  ({r['source']})")
    print(textwrap.indent(textwrap.fill(r["finding"], 100), " " * 16))
  counts = {v: sum(r["verdict"] == v for r in rows) for v in (HOLDS, PARTLY, FAILS)}
  print(f"\n{len(rows)} claims: " + ", ".join(f"{n} {v}" for v, n in counts.items()) + f"; wrote claims.jsonl and "
        f"claims.md to {out_dir}")
  return rows
