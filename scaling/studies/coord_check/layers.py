"""The layers the coordinate check measures on the built-in Transformer (``scaling.training.model.transformer``).

Their names in forward order and their RMS values from ``train_step``'s metrics: per layer on the width axis
(``layer_names``, ``rms_by_layer``), and on the depth axis the layers every depth has (``DEPTH_LAYERS``,
``depth_rms_by_layer``).
"""

from __future__ import annotations

from typing import Any

import numpy as np


# train_step metrics measured once per model, and those measured per block [depth] (layer "block_{i}/<name>").
_MODEL_RMS = {"embed_rms": "embed", "readout_rms": "readout"}
_BLOCK_RMS = {"attn_logits_rms": "attn_logits", "attn_out_rms": "attn_out", "mlp_out_rms": "mlp_out"}
RMS_METRICS = (*_MODEL_RMS, *_BLOCK_RMS)
# The layers of the depth axis, comparable across depths: per-block values averaged over the blocks (branch outputs
# as added to the residual stream, times the multiplier s) and the residual stream after the last block.
DEPTH_LAYERS = ("embed", "attn_logits_mean", "attn_out_mean", "mlp_out_mean", "resid_final", "readout")
DEPTH_METRICS = (*RMS_METRICS, "resid_rms")


def layer_names(depth: int) -> tuple[str, ...]:
  """The measured layers in forward order: embed, block_i/{attn_logits,attn_out,mlp_out}, readout."""
  blocks = [f"block_{i}/{layer}" for i in range(depth) for layer in _BLOCK_RMS.values()]
  return ("embed", *blocks, "readout")


def rms_by_layer(metrics: dict[str, Any], depth: int) -> dict[str, np.ndarray]:
  """Layer name -> RMS values from ``train_step`` metrics (any leading axes; per-block ones end in [depth])."""
  out = {layer: np.asarray(metrics[name]) for name, layer in _MODEL_RMS.items()}
  for name, layer in _BLOCK_RMS.items():
    value = np.asarray(metrics[name])
    out.update({f"block_{i}/{layer}": value[..., i] for i in range(depth)})
  return {name: out[name] for name in layer_names(depth)}


def depth_rms_by_layer(metrics: dict[str, Any], branch_multiplier: float) -> dict[str, np.ndarray]:
  """``DEPTH_LAYERS`` -> RMS values from ``train_step`` metrics (per-block ones end in [depth]).

  Args:
    metrics: ``train_step`` metrics with the keys of ``DEPTH_METRICS`` (any leading axes).
    branch_multiplier: s, the residual-branch multiplier the model applies to every branch output before the add
      (``Parametrization.residual_multiplier``): attn_out_mean and mlp_out_mean are the mean over blocks of
      s · RMS(f(x)), the RMS of what each branch adds to the residual stream.

  Returns:
    {layer: values with the block axis removed}.
  """
  block_mean = lambda name: np.mean(np.asarray(metrics[name], np.float64), axis=-1)
  return {"embed": np.asarray(metrics["embed_rms"]), "attn_logits_mean": block_mean("attn_logits_rms"),
          "attn_out_mean": branch_multiplier * block_mean("attn_out_rms"),
          "mlp_out_mean": branch_multiplier * block_mean("mlp_out_rms"),
          "resid_final": np.asarray(metrics["resid_rms"])[..., -1], "readout": np.asarray(metrics["readout_rms"])}
