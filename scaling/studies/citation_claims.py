"""The notes' factual citations, each checked against the source it names by reading it: never a measured verdict.

Each is a ``scaling.studies.verdicts.CitationClaim``: the claim as the note states it, the passage of the source
quoted, and whether the source says what the note says it does (``scaling.studies.verdicts.CITATION_VERDICTS``).
Nothing here is measured; the tables label these rows "checked against the source". Each passage says where in
the source it stands (section and page, or repository path, commit and lines) and ``compared_with`` says what its
words were compared with; a passage not compared word for word says so in its row.
"""

from __future__ import annotations

from scaling.studies.verdicts import CitationClaim
from scaling.studies.verdicts import SOURCE_AGREES
from scaling.studies.verdicts import SOURCE_DISAGREES

CITATION_CLAIMS: tuple[CitationClaim, ...] = (
    CitationClaim(
        "cite_vaswani_motivation", "note 2 references; note 1 §3",
        "“Attention Is All You Need” (Vaswani et al., 2017), §3.2.1, explains the motivation for the scaling.",
        "Vaswani et al. 2017, Attention Is All You Need, NeurIPS, §3.2.1 (Scaled Dot-Product Attention), p. 4, "
        "arXiv 1706.03762",
        "We suspect that for large values of d_k, the dot products grow large in magnitude, pushing the softmax "
        "function into regions where it has extremely small gradients [footnote 4]. To counteract this effect, we "
        "scale the dot products by 1/√d_k.",
        SOURCE_AGREES,
        "The section gives this motivation; its footnote 4 (“To illustrate why the dot products get large, "
        "assume that the components of q and k are independent random variables with mean 0 and variance 1. "
        "Then their dot product, q · k = Σ q_i k_i, has mean 0 and variance d_k.”) derives Var(q·k) = d_k "
        "as note 1 §3 does.",
        compared_with="transcriptions of the paper's text in public repositories, which agree word for word (the "
                      "paper's PDF itself was not opened; the math is written here in plain text)"),
    CitationClaim(
        "cite_gpt3_rmsnorm", "note 2 §4, follow-up 2",
        "GPT-3 and other large models use RMSNorm rather than LayerNorm.",
        "Brown et al. 2020, Language Models are Few-Shot Learners, §2.1 (Model and Architectures), p. 8, arXiv "
        "2005.14165; Radford et al. 2019, Language Models are Unsupervised Multitask Learners (GPT-2), §2.3",
        "We use the same model and architecture as GPT-2 [RWC+19], including the modified initialization, "
        "pre-normalization, and reversible tokenization described therein, with the exception that we use alternating "
        "dense and locally banded sparse attention patterns in the layers of the transformer, similar to the Sparse "
        "Transformer [CGRS19].",
        SOURCE_DISAGREES,
        "GPT-2's §2.3 says “Layer normalization (Ba et al., 2016) was moved to the input of each sub-block, "
        "similar to a pre-activation residual network (He et al., 2016) and an additional layer normalization "
        "was added after the final self-attention block”: GPT-3 uses (pre-)LayerNorm, not RMSNorm.",
        compared_with="transcriptions of GPT-3's §2.1 and GPT-2's §2.3 in public repositories, which agree word for "
                      "word (one of them gives the page, one was itself checked against GPT-2's PDF); the PDFs "
                      "were not opened here"),
    CitationClaim(
        "cite_t5_fixed_sqrt", "note 2 §4, follow-up 3",
        "Many models (such as T5) keep the fixed √d_k and compensate through initialization or the learning rate.",
        "T5's attention in Mesh TensorFlow (github.com/tensorflow/mesh, commit da907937, "
        "mesh_tensorflow/transformer/attention.py: line 77, the logits; lines 363 and 436-439, the initializer of "
        "W_q); huggingface/transformers' port (src/transformers/models/t5/modeling_t5.py, T5Attention.__init__) "
        "says the same in its comment “Mesh TensorFlow initialization to avoid scaling before softmax”",
        "logits = mtf.layers.us_einsum([q, k], reduced_dims=[key_dim]) … fold_scaling_into_initializer=True, … "
        "stddev = self.query_input_dim.size ** -0.5 / if self.fold_scaling_into_initializer: / "
        "stddev *= self.key_dim.size ** -0.5",
        SOURCE_DISAGREES,
        "T5 does not divide its logits by √d_k at all: the logits are the plain q·k, and by default the "
        "factor d_k^-1/2 is folded into the initial standard deviation of W_q (compensation through "
        "initialization, but no fixed √d_k in the attention).",
        compared_with="the file at that commit, lines quoted as they stand (joined by “/” and “…”)"),
    CitationClaim(
        "cite_vit_reference", "note 2 references",
        "“Scaling Vision Transformers” (Dosovitskiy et al., 2021) discusses the effect of the scaling factor on ViT's "
        "training stability.",
        "Zhai, Kolesnikov, Houlsby and Beyer, Scaling Vision Transformers, CVPR 2022, pp. 12104-12113 (arXiv "
        "2106.04560), abstract",
        "To address this, we scale ViT models and data, both up and down, and characterize the relationships between "
        "error rate, data, and compute.",
        SOURCE_DISAGREES,
        "The paper is by Zhai et al., not Dosovitskiy et al. (whose 2021 paper is “An Image is Worth 16x16 "
        "Words”), and its subject is model and data scale, not the attention logit scale.",
        compared_with="the abstract on the CVF open-access page of the CVPR 2022 paper"),
    CitationClaim(
        "cite_xiong_ln_scaling", "note 2 references",
        "“On Layer Normalization in the Transformer Architecture” (Xiong et al., 2020) discusses how the LayerNorm "
        "position relates to the attention scaling.",
        "Xiong et al. 2020, On Layer Normalization in the Transformer Architecture, ICML, abstract (arXiv 2002.04745)",
        "Specifically, we prove with mean field theory that at initialization, for the original-designed Post-LN "
        "Transformer, which places the layer normalization between the residual blocks, the expected gradients of the "
        "parameters near the output layer are large. Therefore, using a large learning rate on those gradients makes "
        "the training unstable. The warm-up stage is practically helpful for avoiding this problem.",
        SOURCE_DISAGREES,
        "The paper relates the LayerNorm position to gradient size and the learning-rate warmup, not to the "
        "1/√d_k logit scale (which is why the depth-12 training claim trains post-LN with and without "
        "warmup).",
        compared_with="the abstract of arXiv 2002.04745 in its ar5iv HTML rendering"),
    CitationClaim(
        "cite_flashattention_overflow", "note 2 references; §2.3",
        "FlashAttention (Dao et al., 2022) is an online-softmax implementation that solves overflow in low precision.",
        "Dao et al. 2022, FlashAttention: Fast and Memory-Efficient Exact Attention with IO-Awareness, NeurIPS, "
        "abstract (arXiv 2205.14135)",
        "We propose FlashAttention, an IO-aware exact attention algorithm that uses tiling to reduce the number of "
        "memory reads/writes between GPU high bandwidth memory (HBM) and GPU on-chip SRAM.",
        SOURCE_DISAGREES,
        "The paper's online softmax serves tiling (exact attention with less memory traffic); it computes the "
        "same softmax as a max-subtracted one and is not presented as a fix for low-precision overflow (the "
        "measured row online_softmax_mitigates tests that effect).",
        compared_with="transcriptions of the arXiv abstract in public repositories, which agree word for word (the "
                      "arXiv page itself was not opened)"),
)
"""The citation claims, in the order of their table."""
