"""scaling: attention logit scaling as pure JAX functions, with metrics and μP for any model.

The top level holds what users of the library call, one group per audience (docs/architecture.md, "Public API",
lists the same groups): attention, logit-scale rules, attention metrics, μP for your own model, and the errors every
function raises for bad input. The subpackages are the layers, each importing only from those before it:

* ``scaling.base``: option declarations and argument checks;
* ``scaling.runs``: what a run writes (result files, reports, figures, trackers, its time split, hosts);
* ``scaling.attention``: attention as pure functions (implementations, rules, masks, RoPE, metrics, Flax adapter);
* ``scaling.mup``: parametrizations (SP, NTK, μP, u-μP) and the engine that applies them to any model;
* ``scaling.training``: the built-in harness (Transformer, tasks, optimizer options, training loop, checkpoints);
* ``scaling.studies``: the studies built on all of it (sweep, claims, coordinate check, transfer, training).

``import scaling`` imports no study: ``scaling.coord_check`` and ``scaling.transfer`` (the coordinate check and
learning-rate transfer of any model, which plot and tabulate) are imported on first use.
"""

__version__ = "0.2.0"  # the one place the version is written; setup.py reads it from here

# Attention
from scaling.attention.dispatch import dot_product_attention
from scaling.attention.blockwise import blockwise_attention
from scaling.attention.dense import attention_logits
from scaling.attention.dense import attention_weights
from scaling.attention.dense import attention_with_aux
from scaling.attention.flax_adapter import make_attention_fn
from scaling.attention.logits import masked_softmax
from scaling.attention.rope import apply_rope
# Logit-scale rules
from scaling.attention.rules import available_rules
from scaling.attention.rules import get_rule
from scaling.attention.rules import register_rule
from scaling.attention.rules import ScaleRule
# Metrics
from scaling.attention.metrics import attention_metrics_per_head
from scaling.attention.metrics import average_heads
from scaling.attention.metrics import logit_stats_per_head
from scaling.attention.metrics import weight_stats_per_head
# μP for your model (coord_check, transfer and ReadoutLinear: see __getattr__)
from scaling.mup.schemes import available_parametrizations
from scaling.mup.schemes import get_parametrization
from scaling.mup.roles import FLAX_ATTENTION
from scaling.mup.roles import infer_kinds
from scaling.mup.user_model import PureModel
from scaling.mup.parametrize import parametrize
from scaling.mup.parametrize import ReadoutDense
from scaling.mup.width_family import WidthParametrization
# Errors
from scaling.base.validation import ConfigError
from scaling.base.validation import ConfigTypeError

__all__ = [
    # Attention
    "dot_product_attention", "attention_with_aux", "attention_logits", "attention_weights", "masked_softmax",
    "blockwise_attention", "make_attention_fn", "apply_rope",
    # Logit-scale rules
    "ScaleRule", "available_rules", "get_rule", "register_rule",
    # Metrics
    "weight_stats_per_head", "logit_stats_per_head", "attention_metrics_per_head", "average_heads",
    # μP for your model
    "infer_kinds", "FLAX_ATTENTION", "parametrize", "get_parametrization", "available_parametrizations",
    "ReadoutDense", "ReadoutLinear", "WidthParametrization", "PureModel", "coord_check", "transfer",
    # Errors
    "ConfigError", "ConfigTypeError",
]

# Imported on first use: the coordinate check and learning-rate transfer of any model live in scaling.studies (they
# plot and tabulate), so that ``import scaling`` imports no study; ReadoutLinear subclasses flax.nnx's Linear, so
# that ``import scaling`` does not load flax.nnx.
_ON_FIRST_USE = {"coord_check": "scaling.studies.coord_check.any_model",
                 "transfer": "scaling.studies.transfer.any_model",
                 "ReadoutLinear": "scaling.mup.nnx_readout"}


def __getattr__(name):
  import importlib  # pylint: disable=g-import-not-at-top
  if name in _ON_FIRST_USE:
    return getattr(importlib.import_module(_ON_FIRST_USE[name]), name)
  raise AttributeError(f"module 'scaling' has no attribute {name!r}")
