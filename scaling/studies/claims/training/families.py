"""The claims about training from the notes, in the order of their table, measured by training small transformers
(``Claim(training=True)``).

The claims come from note 2 §4, follow-up 1 (``shared/seeds/004_383f650843b84e3b.txt``: without 1/√d_k scaling
the loss is NaN within 100 steps, attention gradient norms decay below 1e-6, 6 layers converge to a worse loss, very
slowly, with an oscillating loss, or only with a tiny learning rate and clipping, 12+ layers cannot converge), note 2
§2 (dividing by d_k loses expressiveness, √d_k is the optimal variance normalization, LayerNorm and RMSNorm do not
replace the scale) and note 1 §2, §3, §4 ② and ⑤ (``shared/seeds/000_ae59428f9015f76d.txt``: with the scale
gradients are stable; early in training unscaled attention degenerates into hard selection; in training q and k
become correlated; μP's initialization and scaling are consistent across width; the division belongs before the
softmax).

Each family of claims is a module ending with its claim entries: ``nan_and_gradient_claims`` (NaN within 100 steps,
gradient norms without and with the scale), ``hard_selection_claims`` (the attention in the first steps),
``depth_claims`` (depth 6 and 12), ``scale_rule_claims`` (where and by what to divide, the norms beside the scale),
``qk_correlation_claims`` and ``mup_transfer_claims``. They share the sizes of each mode (``training_sizes``), the
grids (``training_grids``), the readings of loss curves (``loss_curves``) and of a grid at its best learning rate
(``best_learning_rate``), and the numbers' wording
(``training_numbers``).
"""

from __future__ import annotations

from scaling.studies.claims.training.depth import DEPTH_CLAIMS
from scaling.studies.claims.training.hard_selection import HARD_SELECTION_CLAIMS
from scaling.studies.claims.training.mup_transfer import MUP_TRANSFER_CLAIMS
from scaling.studies.claims.training.nan_and_gradient import NAN_AND_GRADIENT_CLAIMS
from scaling.studies.claims.training.qk_correlation import QK_CORRELATION_CLAIMS
from scaling.studies.claims.training.scale_rules import SCALE_RULE_CLAIMS
from scaling.studies.claims.verdicts import Claim

ORDER = ("train_nan_within_100_steps", "train_grad_norm_below_1e-6", "train_attention_hard_selection",
         "train_depth6_converges_worse",
         "train_depth6_oscillates", "train_depth6_slow", "train_depth6_tiny_lr_clipping", "train_post_softmax_worse",
         "train_depth12_cannot_converge", "train_linear_less_expressive", "train_sqrt_optimal",
         "train_norms_dont_replace_scaling", "train_scaled_grads_stable", "train_qk_correlate", "train_mup_lr_transfer")
"""The ids of the training claims in the order of their table."""


def in_order(claims: tuple[Claim, ...], order: tuple[str, ...]) -> tuple[Claim, ...]:
  """``claims`` in the order of their ids in ``order``.

  Args:
    claims: the claims, each id once.
    order: every id of ``claims``, once.

  Returns:
    The claims, ordered.

  Raises:
    ValueError: when ``order`` and the ids of ``claims`` differ, or an id repeats.
  """
  by_id = {c.id: c for c in claims}
  if len(by_id) != len(claims) or sorted(by_id) != sorted(order):
    raise ValueError(f"order {order} must list each id of the claims once: {[c.id for c in claims]}")
  return tuple(by_id[i] for i in order)


TRAINING_CLAIMS: tuple[Claim, ...] = in_order(NAN_AND_GRADIENT_CLAIMS + HARD_SELECTION_CLAIMS + DEPTH_CLAIMS
                                              + SCALE_RULE_CLAIMS
                                              + QK_CORRELATION_CLAIMS + MUP_TRANSFER_CLAIMS, ORDER)
"""The training claims, in the order of their table."""
