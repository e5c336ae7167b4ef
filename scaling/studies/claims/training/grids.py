"""The grids the training claims train: vmapped learning rates × seeds of one small Transformer at a mode's sizes.

A grid is a ``scaling.studies.grid.run.GridSpec``, trained by ``scaling.training.loop.run.run_training`` with a seed
list, never stopped on divergence, every step recorded. Each claim declares the grids it trains (``Claim.grids``: a
function of the context mapping names to specs, the same one its measurement trains from), so a run is planned from
the declarations without training or measuring anything; the context's ``GridPlanner`` (``ctx.planner``) trains each
grid once (``trained``), so the depth-6 grid of the unscaled model, say, serves every claim that reads it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from scaling.training.model.family import ModelFamily
from scaling.training.optimizer import OptimizerConfig
from scaling.studies.grid.run import GridRun
from scaling.studies.grid.run import GridSpec
from scaling.studies.claims.context import Context
from scaling.studies.claims.training.sizes import data_config
from scaling.studies.claims.training.sizes import dataset_of
from scaling.studies.claims.training.sizes import seeds_of
from scaling.studies.claims.training.sizes import sizes


RECORD = ("loss", "grad_norm", "layer_grad_norm", "attn_max_logit", "attn_entropy", "attn_max_prob")
"""The metrics a grid records at every step (``grid_spec``'s default)."""


SCAN_FROM_DEPTH = 4
"""Grids of models this deep or deeper run their blocks as one scan (``ModelConfig.scan_layers``: the same function,
compiled once for every block); shallower ones ask for unrolled blocks. Compiling a quick-mode grid's step (6 members)
took 5.1 s unrolled and 5.4 s scanned at depth 2, 7.0 s and 4.2 s at depth 6, 10.3 s and 5.0 s at depth 12 on two CPU
cores; and the two forms, the same function, differ in float32 rounding, which could move a last printed digit of
the claims."""


NORM_NAMES = {"layer": "LayerNorm", "rms": "RMSNorm"}
"""The blocks' normalizations (``grid_spec``'s ``norm``) in words."""


def grid_spec(ctx: Context, *, rule: str, depth: int, width: int | None = None, parametrization: str = "sp",
              log2_lrs: Sequence[float] | None = None, steps: int | None = None, base_width: int | None = None,
              fixed_head_dim: bool = True, schedule: str = "constant", pre_ln: bool = True, warmup: bool = False,
              norm: str = "layer", dtype: str | None = None, attn_mults: Sequence[float] | None = None,
              label: str | None = None, record: Sequence[str] = RECORD) -> GridSpec:
  """The grid of learning rates × seeds of one model, at the sizes of ``ctx.mode``.

  Args:
    ctx: the context (mode, seed, num_seeds, text_file, planner).
    rule: the logit-scale rule ("default": the parametrization's own).
    depth: number of blocks.
    width: the width (default: the mode's).
    parametrization: "sp", "mup", ...
    log2_lrs: the learning rates (default: the mode's).
    steps: training steps (default: the mode's steps at ``depth``).
    base_width: the parametrization's base width (default: ``width``).
    fixed_head_dim: keep the mode's heads and head dim (else the mode's number of heads, head dim width / heads).
    schedule: "constant" (no warmup) or "cosine" (warmup, then decay to 0.1 × the peak).
    pre_ln: pre-LN blocks (False: post-LN, as the original Transformer).
    warmup: a linear warmup over the mode's ``warmup_fraction`` of the steps (constant schedule).
    norm: the blocks' normalization, "layer" or "rms".
    dtype: the model's compute dtype (default: the context's ``compute_dtype``, float32 without one).
    attn_mults: α of the logit scale α/d_head the grid sweeps at the one learning rate of ``log2_lrs`` (None: the
      rule's, and the grid sweeps the learning rates).
    label: the grid in words (default: "depth-{depth} training grids").
    record: the metrics recorded at every step.

  Returns:
    The ``GridSpec``.
  """
  s = sizes(ctx)
  dtype = getattr(ctx, "compute_dtype", "float32") if dtype is None else dtype
  width = s["width"] if width is None else width
  log2_lrs = tuple(float(x) for x in (s["log2_lrs"] if log2_lrs is None else log2_lrs))
  steps = s["steps"][depth] if steps is None else steps
  dataset = dataset_of(ctx)
  family = ModelFamily(depth=depth, num_heads=s["num_heads"],
                                 head_dim=s["head_dim"] if fixed_head_dim else None, rule=rule,
                                 base_width=width if base_width is None else base_width, pre_ln=pre_ln, dtype=dtype,
                                 scan_layers=depth >= SCAN_FROM_DEPTH)
  model_config = family.model_config(parametrization, width, vocab_size=dataset.vocab_size, max_len=dataset.seq_len)
  if norm != model_config.norm:
    model_config = dataclasses.replace(model_config, norm=norm)
  opt_config = OptimizerConfig(optimizer="adam", learning_rate=1e-3, steps=steps, schedule=schedule,
                                     end_factor=0.1 if schedule == "cosine" else 0.0,
                                     warmup_steps=max(1, int(s["warmup_fraction"] * steps)) if warmup else None)
  return GridSpec(model_config=model_config, opt_config=opt_config, data=data_config(ctx), data_seed=int(ctx.seed),
                  log2_lrs=log2_lrs, seeds=seeds_of(ctx), attn_mults=attn_mults, record=tuple(record),
                  label=f"depth-{depth} training grids" if label is None else label)


def trained(ctx: Context, grids: dict[Any, GridSpec]) -> dict[Any, GridRun]:
  """The trained grid of each spec of ``grids`` (a claim's declaration), by the same names: each trained once per
  context (``ctx.planner``)."""
  return {name: ctx.planner.train(spec) for name, spec in grids.items()}


def rule_grids(ctx: Context, rules: Sequence[str], depth: int, **options: Any) -> dict[str, GridSpec]:
  """{rule: its ``grid_spec``} of each rule at ``depth``, with ``options`` (``grid_spec``'s) alike."""
  return {rule: grid_spec(ctx, rule=rule, depth=depth, **options) for rule in rules}
