"""scaling: attention logit scaling as pure JAX functions, with metrics, parametrizations and training.

The core library is imported here; the studies built on it (the d_k sweep, the
claims of the notes, the coordinate check, learning-rate transfer, training
runs) live in ``scaling.studies``.
"""

__version__ = "0.2.0"  # the one place the version is written; setup.py reads it from here

from scaling.adam_atan2 import scale_by_adam_atan2
from scaling.attention import dot_product_attention
from scaling.blockwise import blockwise_attention
from scaling.blockwise import blockwise_tile_count
from scaling.data import DataConfig
from scaling.data import DataError
from scaling.data import Dataset
from scaling.data import make_dataset
from scaling.dense_attention import attention_logits
from scaling.dense_attention import attention_logits_and_weights
from scaling.dense_attention import attention_weights
from scaling.dense_attention import attention_with_aux
from scaling.logits import masked_softmax
from scaling.metrics import attention_metrics_per_head
from scaling.metrics import average_heads
from scaling.metrics import logit_stats_per_head
from scaling.metrics import row_entropy
from scaling.metrics import softmax_jacobian
from scaling.metrics import softmax_jacobian_fro_norm
from scaling.metrics import weight_stats_per_head
from scaling.model import apply_with_aux
from scaling.model import ModelConfig
from scaling.model import ModelFamily
from scaling.model import param_kinds
from scaling.model import Transformer
from scaling.optim import make_optimizer
from scaling.optim import scale_by_multipliers
from scaling.optim import OptimizerConfig
from scaling.optim import scale_by_parametrization
from scaling.optim import warmup_cosine_schedule
from scaling.parametrization import available_parametrizations
from scaling.parametrization import get_parametrization
from scaling.parametrization import LayerSpec
from scaling.parametrization import Parametrization
from scaling.roles import FLAX_ATTENTION
from scaling.roles import infer_kinds
from scaling.roles import Role
from scaling.roles import Roles
from scaling.rope import apply_rope
from scaling.rules import available_rules
from scaling.rules import get_rule
from scaling.rules import register_rule
from scaling.rules import ScaleRule
from scaling.train import run_training
from scaling.train import train_step
from scaling.train import TrainResult
from scaling.train import TrainState
from scaling.train import z_loss
from scaling.validation import ConfigError
from scaling.validation import ConfigTypeError
from scaling.flax_attention import make_attention_fn
from scaling.user_parametrization import parametrize
from scaling.user_parametrization import ReadoutDense
from scaling.user_parametrization import ReadoutLinear
from scaling.user_parametrization import UserParametrization
from scaling.user_model import PureModel
from scaling.usage import read_usage
from scaling.width_parametrization import WidthParametrization

# The coordinate check and learning-rate transfer of any model live in scaling.studies (they plot and tabulate);
# imported on first use, so that ``import scaling`` stays light.
_STUDIES = {"coord_check": "scaling.studies.coord_check", "transfer": "scaling.studies.transfer"}

__all__ = [name for name in dir() if not name.startswith("_")] + list(_STUDIES)


def __getattr__(name):
  if name in _STUDIES:
    import importlib  # pylint: disable=g-import-not-at-top
    return getattr(importlib.import_module(_STUDIES[name]), name)
  raise AttributeError(f"module 'scaling' has no attribute {name!r}")
