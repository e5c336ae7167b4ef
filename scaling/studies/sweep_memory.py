"""The memory of the d_k sweep's programs (``scaling.studies.sweep``), checked before the sweep runs.

One program per head dim (and width-mode point, sequence length and dtype): every seed vmapped, every rule evaluated
in it. Its parts (``scaling.training.resources.Part``) are the attention logits, q, k, v and their gradients, and in
width mode the inputs and projections; the constants count the T × S (or B × T × N × d_k) float32 arrays the program
keeps live at once. ``tests/test_resources.py`` checks the totals against XLA's own buffer plan.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from scaling.training import resources
from scaling.training.resources import Estimate
from scaling.training.resources import Part

DENSE_SWEEP_COPIES = 6
"""T × S float32 arrays live per (seed, rule) in the dense sweep program: logits, weights, the mask, the
gradient with respect to logits and weights, and the softmax-Jacobian and entropy intermediates."""
SWEEP_QKV_COPIES = 4
"""B × T × N × d_k arrays per seed independent of the rules (q, k, v and the upstream gradient) ..."""
SWEEP_QKV_COPIES_PER_RULE = 4
"""... and per rule (the output and the gradients with respect to q, k and v)."""


def sweep_program(*, batch: int, heads: int, seq_len: int, d_k: int, num_seeds: int, num_rules: int,
                  attention: str = "dense", block: int = 128, width: int | None = None) -> Estimate:
  """The d_k sweep's program at one head dim: every seed vmapped, every rule evaluated in it.

  Args:
    batch, heads, seq_len, d_k: the shape of q, k, v [B, T, N, d_k] per seed.
    num_seeds: seeds vmapped.
    num_rules: rules (dense: all live together; blockwise: one after another).
    attention: "dense" or "blockwise".
    block: the blockwise tile.
    width: width mode: inputs [B, T, width] and W_q, W_k, W_v [width, N·d_k] per seed.

  Returns:
    An Estimate with parts for the attention logits, q/k/v and their gradients, and the projections.
  """
  live_rules = num_rules if attention == "dense" else 1
  copies = DENSE_SWEEP_COPIES if attention == "dense" else resources.BLOCKWISE_COPIES
  logits = (copies * resources.attention_bytes(batch, heads, seq_len, seq_len, attention, block) * num_seeds
            * live_rules)
  qkv = ((SWEEP_QKV_COPIES + SWEEP_QKV_COPIES_PER_RULE * live_rules) * batch * seq_len * heads * d_k * resources.F32
         * num_seeds)
  hint = ("use attention='blockwise', a smaller seq_len or batch, or fewer num_seeds or rules"
          if attention == "dense" else "use a smaller block_size, seq_len or batch, or fewer num_seeds")
  parts = [Part(f"{attention} attention logits", logits,
                ("seq_len", "batch", "num_heads", "num_seeds", "rules") + (("block_size",) if attention != "dense"
                                                                          else ()), hint),
           Part("q, k, v and their gradients", qkv, ("d_k", "seq_len", "batch", "num_heads", "num_seeds"),
                "use a smaller d_k, seq_len or batch, or fewer num_seeds")]
  if width is not None:
    proj = 2 * (batch * seq_len * width + 3 * width * heads * d_k) * resources.F32 * num_seeds
    parts.append(Part("width-mode inputs and projections", proj, ("width", "d_k", "seq_len", "num_seeds"),
                      "use a smaller width, d_k or seq_len"))
  return Estimate(tuple(parts))


def sweep_estimate(config: Any) -> Estimate:
  """The largest program of a ``scaling.studies.sweep.SweepConfig`` (over its program shapes and head dims).

  One program per (width-mode point, sequence length, dtype, d_k); its rules and, with iid inputs, its qk_std values
  are vmapped together (counted as rules); every dtype is counted at 4 bytes, an upper bound.
  """
  programs = []
  for mode in config.modes():
    width = mode.width[0] if mode.parametrization else None
    stds = 1 if mode.parametrization else len(mode.qk_std)
    for d_k in mode.d_k:
      e = sweep_program(batch=mode.batch, heads=mode.num_heads, seq_len=mode.seq_len[0], d_k=d_k,
                        num_seeds=mode.num_seeds, num_rules=len(mode.rules) * stds, attention=mode.attention,
                        block=mode.block_size, width=width)
      where = f"at d_k={d_k}" + (f" and width={width}" if width is not None else "")
      if len(config.seq_len) > 1:
        where += f" and seq_len={mode.seq_len[0]}"
      programs.append(dataclasses.replace(e, where=where))
  return resources.largest(programs)
