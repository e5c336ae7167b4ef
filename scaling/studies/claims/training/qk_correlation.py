"""The training claim that q and k become correlated in training (note 1 §3), so that the independence behind
Var(q·k) = d_k stops holding: the q-k alignment |mean cos(q_t, k_t)| before and after training.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from scaling.base import compilation
from scaling.training.model import transformer as model_lib
from scaling.training.model.config import ModelConfig
from scaling.studies import stats
from scaling.studies.grid.run import GridSpec
from scaling.studies.claims.context import Context
from scaling.studies.claims.training.grids import grid_spec
from scaling.studies.claims.training.grids import trained
from scaling.studies.claims.training.numbers import about
from scaling.studies.claims.training.numbers import fmt
from scaling.studies.claims.training.numbers import lr_label
from scaling.studies.claims.training.numbers import spread
from scaling.studies.claims.training.sizes import data_name
from scaling.studies.claims.training.sizes import dataset_of
from scaling.studies.claims.training.sizes import sizes
from scaling.studies.claims.verdicts import Claim
from scaling.studies.claims.verdicts import Criterion
from scaling.studies.claims.verdicts import Measurement


def qk_alignment_fn(model_config: ModelConfig):
  """A jitted (stacked params [M, ...], tokens [B, T]) -> [M, depth, N]: per layer and head, the mean over tokens
  of cos(q_t, k_t), the query and key of the same position (before RoPE, which rotates both alike, and before any
  QK-norm), from the query and key projections of a forward pass."""
  model = model_lib.Transformer(model_config)
  n, kv = model_config.num_heads, model_config.kv_heads

  def one(params, tokens):
    _, state = model.apply({"params": params}, tokens, mutable=["intermediates"])
    inter = state["intermediates"]
    out = []
    for i in range(model_config.depth):
      attn = inter[f"block_{i}"]["attn"]
      q = attn["q_projected"][0].astype(jnp.float32)  # [B, T, N, H]
      k = jnp.repeat(attn["k_projected"][0].astype(jnp.float32), n // kv, axis=2)
      cos = jnp.sum(q * k, -1) / (jnp.linalg.norm(q, axis=-1) * jnp.linalg.norm(k, axis=-1) + 1e-12)
      out.append(jnp.mean(cos, axis=(0, 1)))
    return jnp.stack(out)

  return compilation.jit(jax.vmap(one, in_axes=(0, None)))


def qk_alignment(per_head_cos: np.ndarray) -> np.ndarray:
  """|mean cos(q_t, k_t)| averaged over layers and heads: [M, depth, N] -> [M] (NaN for a NaN member)."""
  return np.mean(np.abs(np.asarray(per_head_cos, np.float64)), axis=(1, 2))


def max_logit_growth(max_logit: np.ndarray, last: int) -> np.ndarray:
  """Per run, the largest |attention logit| over layers, mean of the last ``last`` steps over step 0:
  [steps, M, depth] -> [M]."""
  m = np.max(np.asarray(max_logit, np.float64), axis=-1)
  with np.errstate(invalid="ignore", divide="ignore"):
    return np.mean(m[-last:], axis=0) / m[0]


def qk_log2_lr(ctx: Context) -> float:
  """The learning rate of the mode's grid nearest ``qk_lr`` (log2)."""
  s = sizes(ctx)
  grid = tuple(float(x) for x in s["log2_lrs"])
  return grid[int(np.argmin([abs(x - math.log2(s["qk_lr"])) for x in grid]))]


def qk_grids(ctx: Context) -> dict[tuple[int, str], GridSpec]:
  """{(width, rule): spec}: each q-k width and rule at the small depth and the one learning rate ``qk_log2_lr``."""
  s = sizes(ctx)
  return {(width, rule): grid_spec(ctx, rule=rule, depth=s["depth_small"], width=width, log2_lrs=(qk_log2_lr(ctx),))
          for width in s["qk_widths"] for rule in s["qk_rules"]}


def qk_rule_grids(ctx: Context, rule: str = "sqrt") -> dict[tuple[int, str], GridSpec]:
  """The q-k grids of one rule (``qk_grids``'s entries of ``rule``: each q-k width).

  Args:
    ctx: the context (its mode's q-k widths and rules).
    rule: one of the mode's ``qk_rules``.

  Returns:
    {(width, rule): spec}, the same specs as ``qk_grids`` (so each is trained once, whichever claim reads it).
  """
  rules = tuple(sizes(ctx)["qk_rules"])
  if rule not in rules:
    raise ValueError(f"rule must be one of the mode's q-k rules {rules}, got {rule!r}")
  return {key: spec for key, spec in qk_grids(ctx).items() if key[1] == rule}


def trained_qk_alignment(ctx: Context, rule: str = "sqrt") -> dict[int, dict[str, np.ndarray]]:
  """The q-k alignment |mean cos(q_t, k_t)| (``qk_alignment``) of the models of ``qk_rule_grids``, at init and after
  training.

  Args:
    ctx: the context (mode, seeds, text file, planner); each grid is trained once per context.
    rule: one of the mode's ``qk_rules``.

  Returns:
    {width: {"init": [seeds], "final": [seeds]}}, on the first evaluation batch of the data.
  """
  grids = qk_rule_grids(ctx, rule)

  def compute():
    tokens = dataset_of(ctx).eval_batch(0, int(ctx.seed))["inputs"]
    out = {}
    for (width, _), run in trained(ctx, grids).items():
      fn = qk_alignment_fn(run.model_config)
      out[width] = {name: qk_alignment(jax.device_get(fn(params, tokens)))
                    for name, params in (("init", run.initial_params()), ("final", run.final_params))}
    return out

  return ctx.cached(("trained_qk_alignment", rule), compute)


def measure_qk_correlate(ctx: Context) -> Measurement:
  """The increase of the q-k alignment |mean cos(q_t, k_t)| during training with 1/√d_k, and the growth of the
  largest attention logit, per rule and width, at the learning rate nearest ``qk_lr``."""
  s = sizes(ctx)
  depth = s["depth_small"]
  steps = s["steps"][depth]
  last = max(1, steps // 10)
  log2_lr = qk_log2_lr(ctx)
  tokens = dataset_of(ctx).eval_batch(0, int(ctx.seed))["inputs"]
  table: dict[str, dict[str, Any]] = {}
  increases, by_seed = [], []
  for (width, rule), run in trained(ctx, qk_grids(ctx)).items():
    fn = qk_alignment_fn(run.model_config)
    before = qk_alignment(jax.device_get(fn(run.initial_params(), tokens)))
    after = qk_alignment(jax.device_get(fn(run.final_params, tokens)))
    max_logit = run.records["attn_max_logit"]
    growth = max_logit_growth(max_logit, last)
    entry = {name: stats.finite_mean_std(v) for name, v in (
        ("alignment_init", before), ("alignment_final", after), ("alignment_increase", after - before),
        ("max_logit_growth", growth), ("max_logit_init", np.max(max_logit[0], -1)),
        ("max_logit_final", np.max(np.mean(max_logit[-last:], 0), -1)))}
    table[f"{rule} width {width}"] = entry
    if rule == "sqrt":
      increases.extend(after - before)
      by_seed.append(after - before)  # [S]: one learning rate
  stat = stats.finite_mean_std(increases)
  numbers = {**about(ctx), "depth": depth, "steps": steps,
             "learning_rate": lr_label(log2_lr), "widths": list(s["qk_widths"]),
             "alignment": "|mean over tokens of cos(q_t, k_t)| per layer and head, averaged (pre-RoPE, pre-norm)",
             "alignment_increase_sqrt": stat["mean"], "alignment_increase_sqrt_std": stat["std"],
             **spread("alignment_increase_sqrt", np.mean(by_seed, axis=0) if by_seed else []),
             "by_rule_width": table}
  parts = [f"{k}: {fmt(v['alignment_init']['mean'], '.2f')} -> {fmt(v['alignment_final']['mean'], '.2f')}, "
           f"max logit x{fmt(v['max_logit_growth']['mean'], '.2g')}" for k, v in table.items()]
  finding = (f"Depth {depth}, {steps} steps at learning rate {lr_label(log2_lr)} on the {data_name(ctx)}: "
             f"the q-k alignment |mean cos(q_t, k_t)| rose by {fmt(stat['mean'])} on average with 1/√d_k "
             f"(init -> final, and growth of the largest |logit|: {'; '.join(parts)}).")
  return Measurement(numbers, finding)


QK_CORRELATION_CLAIMS: tuple[Claim, ...] = (
    Claim(
        "train_qk_correlate", "μP (Yang et al. 2021, Tensor Programs V), the premise of note 1 §3's iid derivation",
        "In training, q and k become correlated (so the independence behind Var(q·k) = d_k stops holding); no note "
        "says this: it is μP's reason for 1/d_k, and the premise the notes' iid derivation (note 1 §3) leaves out.",
        Criterion("alignment_increase_sqrt", "increase during training of |mean cos(q_t, k_t)| (same position, per "
                  "layer and head, averaged) with 1/√d_k, mean over widths and seeds", holds=(">=", 0.1),
                  fails=("<=", 0.02), noise=True,
                  reason="a rise of 0.1 in cosine is a correlation; 0.02 is within init noise"),
        measure_qk_correlate, training=True, grids=qk_grids,
        supports=("sqrt_normalizes", "head_dim_constant", "train_mup_lr_transfer")),
)
"""The rows of this module (a supporting measurement), in the order of their table, in the order of their table (``scaling.studies.claims.training.families``)."""
