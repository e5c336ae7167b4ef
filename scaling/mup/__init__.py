"""Parametrizations and the engine that applies them to any model.

* the schemes: ``schemes`` (SP, NTK, μP, u-μP as data: init, multipliers and learning rates per layer kind),
  ``shapes`` (a parameter's path names and fans), ``unit_scaling`` (u-μP's unit-scaled ops) and
  ``unit_scaling_covariance``;
* a model read from its computation: ``user_model`` (``PureModel``), ``usage`` (how the computation uses each
  parameter), ``roles`` (``infer_kinds``: each parameter's layer kind), ``layers`` (Flax layers that carry their kind);
* a scheme applied: ``parametrize`` (a scheme applied to one model's roles: ``RoleParametrization``,
  ``ReadoutDense``), ``nnx_readout`` (``ReadoutLinear``), ``width_family`` (``WidthParametrization``: a scheme applied
  to a model at every width);
* per-layer learning rates as optax transformations: ``optim``, ``adam_atan2``.

Imports: ``scaling.base`` and ``scaling.attention``.
"""
