"""Claims of the notes that no measurement here can settle, each with what settling it would need and why not here.

Each is a ``scaling.studies.claims.verdicts.UnmeasurableClaim``: its verdict is ``NOT_MEASURABLE`` ("not measurable here"),
never a measured one, and its row names the measured rows that settle its parts or premises. A claim belongs here
only when neither random inputs, a closed form nor the training runs of ``scaling.studies.claims.training.families`` can
give it a statistic whose thresholds follow from its words.
"""

from __future__ import annotations

from scaling.studies.claims.verdicts import UnmeasurableClaim

UNMEASURABLE_CLAIMS: tuple[UnmeasurableClaim, ...] = (
    UnmeasurableClaim(
        "layernorm_covariate_shift", "note 2 §2.4; §5",
        "LayerNorm normalizes each token's hidden vector and so solves the internal covariate shift of deep networks.",
        would_need="a measure of internal covariate shift (how much a layer's input distribution moves while the "
        "layers below it train) and models trained with and without LayerNorm in which it is measured",
        why="the note defines no measure of internal covariate shift, and the models here cannot train without a "
        "normalization (scaling.training.model.transformer offers LayerNorm or RMSNorm, no 'none'), so there is no run without LayerNorm to "
        "compare; what LayerNorm does to a token (mean 0, variance 1 over its width) is an identity, not this claim.",
        related=("layernorm_not_enough", "train_norms_dont_replace_scaling")),
    UnmeasurableClaim(
        "vanishing_is_fundamental", "note 2 §5",
        "Overflow is only the surface: it can be solved by FP32 or clamping, but vanishing gradients are the "
        "fundamental reason training does not converge.",
        would_need="unscaled training runs that fail to converge, and the same runs with the overflow removed and with "
        "the vanishing removed (the rest unchanged), to say which of the two stops them",
        why="a causal claim about failed training: random inputs show whether gradients vanish and whether exp "
        "overflows, not which of them stops training; the training rows measure whether unscaled training fails to "
        "converge, in float32 with max-subtraction (so a failure there is not overflow), but nothing here separates "
        "vanishing gradients from the other causes of a failed run (learning rate, depth, initialization).",
        related=("gradients_vanish", "fp16_exp_overflow", "fp32_or_clamp_solves", "train_grad_norm_below_1e-6",
                 "train_depth12_cannot_converge")),
    UnmeasurableClaim(
        "extreme_tokens_are_separators_and_ends", "note 2 §2.3",
        "In FP16/BF16 training, even with √d_k scaling, the dot products that can still overflow are those of "
        "individual extreme tokens: special separator tokens and the first and last tokens of long sequences.",
        would_need="a pretrained language model whose vocabulary has special separator tokens and that was trained on "
        "long sequences, run in float16 or bfloat16 on long inputs, with its 1/√d_k attention logits (or its "
        "non-finite rows) recorded per layer, head and token position; the criterion would compare the largest |q·k| "
        "at separator tokens and at the first and last positions with that at the other tokens",
        why="the models here are character-level transformers trained from scratch for minutes (the vocabulary is "
        "the characters of the text file, tiny Shakespeare: no separator or other special token), on sequences of at "
        "most 256 characters (the training sizes of every mode), and no pretrained weights are available offline "
        "(the package ships and loads none). Which tokens of a model carry its extreme logits is a property of its long pretraining on such tokens and "
        "such sequences, so a short character-level run that showed none would not speak against the claim. The "
        "random-input rows place the outliers on the first and last tokens by construction: they measure what such "
        "tokens do to FP16/BF16 attention and to its fixes, not which tokens become extreme in a trained model.",
        related=("low_precision_nan_even_scaled", "nan_gradient_explosion", "clamp_before_scale",
                 "online_softmax_mitigates")),
)
"""The claims no measurement here can settle, in the order of their table."""
