"""The training loop: ``run`` (``run_training``: a single run or a vmapped learning-rate × seed grid; ``Runs``,
``RunOptions``, ``TrainResult``), the ``programs`` it trains (the built-in Transformer or any model), their
``state``, ``losses``, the built-in model's ``transformer_step``, the jitted ``step`` and ``initialization``,
``sharded`` runs over devices, the held-out ``evaluation`` and ``checkpoint``.

Imports: the layers below ``scaling.training``, and ``scaling.training``'s model, data, optimizer and sharding.
"""
