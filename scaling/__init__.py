"""scaling: attention logit scaling as pure JAX functions, with metrics and μP for any model.

The top level holds what users of the library call, one group per audience (docs/architecture.md, "Public API",
lists the same groups): attention, logit-scale rules, attention metrics, μP for your own model, and the errors every
function raises for bad input. The project's own harness lives in its modules: the built-in Transformer in
``scaling.model``, training in ``scaling.train``, the tasks in ``scaling.data``, optimizers in ``scaling.optim``,
and the studies built on all of it in ``scaling.studies``. ``import scaling`` does not import the studies:
``scaling.coord_check`` and ``scaling.transfer`` (the coordinate check and learning-rate transfer of any model,
which plot and tabulate) are imported on first use.
"""

__version__ = "0.2.0"  # the one place the version is written; setup.py reads it from here

# Attention
from scaling.attention import dot_product_attention
from scaling.blockwise import blockwise_attention
from scaling.dense_attention import attention_logits
from scaling.dense_attention import attention_weights
from scaling.dense_attention import attention_with_aux
from scaling.flax_attention import make_attention_fn
from scaling.logits import masked_softmax
from scaling.rope import apply_rope
# Logit-scale rules
from scaling.rules import available_rules
from scaling.rules import get_rule
from scaling.rules import register_rule
from scaling.rules import ScaleRule
# Metrics
from scaling.metrics import attention_metrics_per_head
from scaling.metrics import average_heads
from scaling.metrics import logit_stats_per_head
from scaling.metrics import weight_stats_per_head
# μP for your model (coord_check, transfer and ReadoutLinear: see __getattr__)
from scaling.parametrization import available_parametrizations
from scaling.parametrization import get_parametrization
from scaling.roles import FLAX_ATTENTION
from scaling.roles import infer_kinds
from scaling.user_model import PureModel
from scaling.user_parametrization import parametrize
from scaling.user_parametrization import ReadoutDense
from scaling.width_parametrization import WidthParametrization
# Errors
from scaling.validation import ConfigError
from scaling.validation import ConfigTypeError

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
_ON_FIRST_USE = {"coord_check": "scaling.studies.coord_check", "transfer": "scaling.studies.transfer",
                 "ReadoutLinear": "scaling.nnx_readout"}

# Names that left the top level (the harness and internals), each with its module: they resolve there, with a
# DeprecationWarning, for one release.
_MOVED = {
    "DataConfig": "scaling.data", "DataError": "scaling.data", "Dataset": "scaling.data",
    "make_dataset": "scaling.data",
    "ModelConfig": "scaling.model", "ModelFamily": "scaling.model", "Transformer": "scaling.model",
    "apply_with_aux": "scaling.model", "param_kinds": "scaling.model",
    "OptimizerConfig": "scaling.optim", "make_optimizer": "scaling.optim", "scale_by_multipliers": "scaling.optim",
    "scale_by_parametrization": "scaling.optim", "warmup_cosine_schedule": "scaling.optim",
    "scale_by_adam_atan2": "scaling.adam_atan2",
    "LayerSpec": "scaling.parametrization", "Parametrization": "scaling.parametrization",
    "Role": "scaling.roles", "Roles": "scaling.roles",
    "UserParametrization": "scaling.user_parametrization",
    "read_usage": "scaling.usage",
    "run_training": "scaling.train", "train_step": "scaling.train", "TrainResult": "scaling.train",
    "TrainState": "scaling.train", "z_loss": "scaling.train",
    "blockwise_tile_count": "scaling.blockwise",
    "attention_logits_and_weights": "scaling.dense_attention",
    "row_entropy": "scaling.metrics", "softmax_jacobian": "scaling.metrics",
    "softmax_jacobian_fro_norm": "scaling.metrics",
}


def __getattr__(name):
  import importlib  # pylint: disable=g-import-not-at-top
  if name in _ON_FIRST_USE:
    return getattr(importlib.import_module(_ON_FIRST_USE[name]), name)
  if name in _MOVED:
    import warnings  # pylint: disable=g-import-not-at-top
    warnings.warn(f"the top-level scaling.{name} is deprecated and will be removed in the next release; use "
                  f"{_MOVED[name]}.{name}", DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(_MOVED[name]), name)
  raise AttributeError(f"module 'scaling' has no attribute {name!r}")
