"""``OptimizerConfig``: the optimizer, schedule and loss options every training study shares.

``OptimizerConfig.build`` is the one place where an optimizer is made from options: the model's
``scaling.mup.parametrize.RoleParametrization`` builds Adam, AdamW, SGD or Adam-atan2 with its per-parameter learning
rates (``scaling.mup.optim``), under the schedule the options name.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import optax

from scaling.base import validation
from scaling.base.config import option
from scaling.base.config import Options
from scaling.base.validation import ConfigError
from scaling.mup import optim

SCHEDULES = ("constant", "cosine")
FLOAT32_MAX = 3.4028234663852886e38  # the largest finite float32; learning rates live in float32 optimizer state


@dataclasses.dataclass(frozen=True)
class OptimizerConfig(Options):
  """The optimizer, schedule and loss options every training study shares; ``build`` makes the optimizer.

  The learning rate of step t is ``learning_rate · schedule(t) · C`` with C the
  parameter's LR multiplier: "constant" is a linear warmup over
  ``warmup_steps`` then 1; "cosine" is a linear warmup then a cosine decay to
  ``end_factor`` at ``steps`` (``optim.warmup_cosine_schedule``). ``z_loss`` adds
  c · mean((log Z)²) of the readout to the loss (``scaling.training.loop.losses.z_loss``).
  """

  optimizer: str = option("adam", "Optimizer (adam_atan2: Adam with a*atan2(m, b*sqrt(v)) in place of "
                          "m/(sqrt(v)+eps), Everett et al. 2024).", choices=optim.OPTIMIZERS)
  learning_rate: float = option(3e-3, "Global (peak) learning rate.", positive=True)
  weight_decay: float = option(0.0, "Weight decay (adamw: decoupled; sgd: L2), per step lr * wd whatever the "
                               "layer and width.", lower=0.0)
  momentum: float = option(0.0, "SGD momentum in [0, 1).", lower=0.0, upper=1.0, upper_exclusive=True)
  steps: int = option(600, "Training steps.", lower=1, upper=2**31 - 1)
  schedule: str = option("constant", "Learning-rate schedule: constant (after the warmup) or cosine (warmup, then "
                         "cosine decay to --end_factor).", choices=SCHEDULES)
  warmup_steps: int | None = option(None, "Linear warmup steps (default: steps // 10 with --schedule=cosine, else 0).",
                                    lower=0)
  end_factor: float = option(0.0, "Final learning rate of the cosine schedule, as a fraction of the peak.", lower=0.0,
                             upper=1.0)
  eps_scaling: str = option("none", "Adam's epsilon: none = one epsilon for every parameter; mup = scaled with "
                            "width and depth as muP/CompleteP prescribe (1/m under muP, x (depth/base_depth)^-alpha "
                            "inside the blocks).", choices=optim.EPS_SCALINGS)
  z_loss: float = option(0.0, "Coefficient c of the z-loss c * mean((log Z)^2) added to the loss, log Z the "
                         "logsumexp of the output logits (PaLM; Wortsman et al. 2023); 0 = off.", lower=0.0)

  def validate(self):
    if self.optimizer in ("adam", "adam_atan2") and self.weight_decay:
      raise ConfigError("weight_decay needs optimizer='adamw' or optimizer='sgd'")
    if self.momentum and self.optimizer != "sgd":
      raise ConfigError("momentum only applies to optimizer='sgd'")
    if self.eps_scaling != "none" and self.optimizer in ("sgd", "adam_atan2"):
      raise ConfigError(f"eps_scaling only applies to optimizer='adam' or optimizer='adamw' "
                        f"(optimizer={self.optimizer!r} has no epsilon)")
    if self.learning_rate > FLOAT32_MAX:
      raise ConfigError(f"learning_rate={self.learning_rate:g} overflows float32 (at most {FLOAT32_MAX:.3g})")
    if self.warmup >= self.steps and (self.warmup or self.schedule == "cosine"):
      raise ConfigError(f"warmup_steps={self.warmup} must be smaller than steps={self.steps}")

  @property
  def warmup(self) -> int:
    """The warmup length: ``warmup_steps``, or its default."""
    if self.warmup_steps is not None:
      return self.warmup_steps
    return self.steps // 10 if self.schedule == "cosine" else 0

  def schedule_fn(self) -> optim.Schedule | None:
    """step -> factor of the learning rate, or None for a constant rate without warmup."""
    if self.schedule == "cosine":
      return optim.warmup_cosine_schedule(1.0, self.warmup, self.steps, end_value=self.end_factor)
    if self.warmup:
      return optax.linear_schedule(0.0, 1.0, self.warmup)
    return None

  def build(self, parametrized: Any, learning_rate: float | None = None) -> optax.GradientTransformation:
    """The optimizer for a model (``learning_rate`` replaces the configured one; it can also be set in the state).

    Args:
      parametrized: the model's ``scaling.mup.parametrize.RoleParametrization`` (``scaling.parametrize`` of its
        roles; the built-in Transformer's is ``scaling.training.model.transformer.parametrized(config)``).
      learning_rate: replaces the configured learning rate (a float or a traced scalar).
    """
    if not hasattr(parametrized, "optimizer") or not hasattr(parametrized, "roles"):
      raise validation.ConfigTypeError(f"parametrized must be the RoleParametrization that scaling.parametrize "
                                       f"returns, got {type(parametrized).__name__}")
    kwargs = {} if self.optimizer in ("adam", "adam_atan2") else {"weight_decay": self.weight_decay}
    if self.optimizer == "sgd":
      kwargs["momentum"] = self.momentum
    lr = self.learning_rate if learning_rate is None else learning_rate
    return parametrized.optimizer(self.optimizer, lr, eps_scaling=self.eps_scaling, schedule=self.schedule_fn(),
                                  **kwargs)

  def applied_learning_rate(self, base: Any, step: Any) -> Any:
    """The learning rate applied at ``step`` (before per-layer multipliers) for a base rate ``base``."""
    schedule = self.schedule_fn()
    return base if schedule is None else base * schedule(step)
