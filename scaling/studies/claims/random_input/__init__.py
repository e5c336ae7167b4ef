"""The claims random inputs can settle, one module per family, each ending with its claim entries:
``logit_variance``, ``softmax_saturation``, ``exp_overflow``, ``outlier_overflow``, ``rope``,
``norms_and_temperature``, ``head_dim_and_retrieval``; on the inputs of ``inputs`` and the attention of
``attention_variants``.

Imports: the library layers and ``scaling.studies.claims``' context, verdicts and parts.
"""
