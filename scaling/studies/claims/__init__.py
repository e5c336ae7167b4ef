"""The claims of the notes, each with its criterion and verdict (``python -m experiments.claims``).

``study`` (the config and the run), ``context`` (what the claims are measured on, how values are worded),
``verdicts`` (claims as data: criterion -> verdict), ``table`` (every claim, in the order of the page), and the
claims by family: the random-input claims (``logit_variance_claims``, ``softmax_saturation_claims``,
``exp_overflow_claims``, ``outlier_overflow_claims``, ``rope_claims``, ``norms_and_temperature_claims``,
``head_dim_and_retrieval_claims``, on the inputs of ``random_inputs``, the attention of ``attention_variants`` and
the part scoring of ``parts``), the training claims (``nan_and_gradient_claims``, ``depth_claims``,
``scale_rule_claims``, ``qk_correlation_claims``, ``mup_transfer_claims``, in the order of ``training_claims``, at
the sizes of ``training_sizes``, on the grids of ``training_grids``, read by ``loss_curves`` and ``best_learning_rate``,
their numbers worded by ``training_numbers``), ``norm``, ``citations``, ``unmeasurable``.

Imports: the library layers and the other studies (``sweep``, ``grid``, ``coord_check``, ``stats``).
"""
