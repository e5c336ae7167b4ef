"""The notes' factual citations, each checked against the source it names by reading it: never a measured verdict.

Each is a ``scaling.studies.claims.verdicts.CitationClaim``: the claim as the note states it, the passage of the source
quoted, and whether the source says what the note says it does: "source agrees", "source disagrees", or "not found in
the passage checked" where only part of the source was read and that part neither says nor contradicts it (absent
from an abstract is not a disagreement). A source read in full either says it or does not: a citation of a paper for
something its whole text never says is a disagreement. A claim that asserts several things (an attribution and a
content, or two halves) lists its parts, each with its own verdict; the source disagrees with the claim if it
disagrees with any part (``scaling.studies.claims.verdicts.citation_verdict``). Nothing here is measured; the tables label
these rows "checked against the source". Each passage says where in the source it stands (section and page, or
repository path, commit and lines) and ``compared_with`` says what was read and what its words were compared with.
"""

from __future__ import annotations

from scaling.studies.claims.verdicts import CitationClaim
from scaling.studies.claims.verdicts import CitationPart
from scaling.studies.claims.verdicts import SOURCE_AGREES
from scaling.studies.claims.verdicts import SOURCE_DISAGREES

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
        "The section gives this motivation; its footnote 4 (“To illustrate why the dot products get large, assume "
        "that the components of q and k are independent random variables with mean 0 and variance 1. Then their dot "
        "product, q · k = Σ q_i k_i, has mean 0 and variance d_k.”) derives Var(q·k) = d_k as note 1 §3 does.",
        compared_with="§3.2.1 and its footnote 4 only, in transcriptions of the paper's text in public repositories, "
                      "which agree word for word (the paper's PDF itself was not opened; the math is written here "
                      "in plain text)"),
    CitationClaim(
        "cite_gpt3_rmsnorm", "note 2 §4, follow-up 2",
        "GPT-3 and other large models use RMSNorm rather than LayerNorm.",
        "Brown et al. 2020, Language Models are Few-Shot Learners, §2.1 (Model and Architectures), p. 8, arXiv "
        "2005.14165; Radford et al. 2019, Language Models are Unsupervised Multitask Learners (GPT-2), §2.3, and its "
        "code; for the other large models: Touvron et al. 2023, LLaMA: Open and Efficient Foundation Language Models, "
        "§2.2 (arXiv 2302.13971), and its code; T5's Mesh TensorFlow transformer",
        "We use the same model and architecture as GPT-2 [RWC+19], including the modified initialization, "
        "pre-normalization, and reversible tokenization described therein, with the exception that we use alternating "
        "dense and locally banded sparse attention patterns in the layers of the transformer, similar to the Sparse "
        "Transformer [CGRS19].",
        SOURCE_DISAGREES,
        "The note names GPT-3 first and “other large models” second; each half was checked against its own sources.",
        compared_with="GPT-3's §2.1 and GPT-2's §2.3 in transcriptions in public repositories, which agree word for "
                      "word (one of them gives the page, one was itself checked against GPT-2's PDF; the PDFs were "
                      "not opened here); github.com/openai/gpt-2 at commit 9b63575e, src/model.py lines 28-36, 126, "
                      "128 and 167; LLaMA's §2.2 (Touvron et al. 2023, arXiv 2302.13971) in several transcriptions in "
                      "public repositories, which agree word for word; github.com/meta-llama/llama (LLaMA's "
                      "reference code) at its first commit 1076b9c5, llama/model.py lines 33-44, 189-190 and 213; "
                      "github.com/tensorflow/mesh at commit da907937, mesh_tensorflow/transformer/transformer.py "
                      "lines 341-355 and 493-527",
        parts=(
            CitationPart(
                "GPT-3 uses RMSNorm rather than LayerNorm", SOURCE_DISAGREES,
                "GPT-3's §2.1 (quoted above) takes GPT-2's architecture with its pre-normalization, and GPT-2's §2.3 "
                "says “Layer normalization (Ba et al., 2016) was moved to the input of each sub-block, similar to a "
                "pre-activation residual network (He et al., 2016) and an additional layer normalization was added "
                "after the final self-attention block”; GPT-2's released code normalizes with LayerNorm, mean "
                "subtracted (openai/gpt-2 src/model.py line 29: “Normalize to mean = 0, std = 1, then do a diagonal "
                "affine transform.”; lines 34-36: u = tf.reduce_mean(x, …); s = tf.reduce_mean(tf.square(x-u), …); "
                "x = (x - u) * tf.rsqrt(s + epsilon)), at the input of each sub-block (lines 126, 128) and once at "
                "the end (line 167). GPT-3 uses pre-LayerNorm, not RMSNorm."),
            CitationPart(
                "other large models use RMSNorm", SOURCE_AGREES,
                "LLaMA (Touvron et al. 2023), §2.2: “Pre-normalization [GPT3]. To improve the training stability, we "
                "normalize the input of each transformer sub-layer, instead of normalizing the output. We use the "
                "RMSNorm normalizing function, introduced by Zhang and Sennrich (2019).” (the bracket credits GPT-3 "
                "with the pre-normalization, the RMSNorm is LLaMA's own); its code defines class RMSNorm (llama/"
                "model.py line 33; line 40: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)) and uses "
                "it before attention and the feed-forward layer (lines 189-190) and at the end (line 213). T5's "
                "Mesh TensorFlow transformer defaults to “@transformer.sublayer_rms_norm” before each layer and at "
                "the end (transformer.py lines 347 and 353), which computes variance = mtf.reduce_mean(mtf.square(x), "
                "reduced_dim=model_dim) and returns x * mtf.rsqrt(variance + epsilon) * scale (lines 514-515), and "
                "its legacy “layer_norm” is the same RMS normalization (lines 519-521)."),
        )),
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
        "T5 does not divide its logits by √d_k at all: the logits are the plain q·k, and by default the factor "
        "d_k^-1/2 is folded into the initial standard deviation of W_q.",
        compared_with="the file at that commit, lines quoted as they stand (joined by “/” and “…”)",
        parts=(
            CitationPart(
                "Many models (such as T5) keep the fixed √d_k", SOURCE_DISAGREES,
                "attention.py line 77 computes the logits as the plain q·k, with no 1/√d_k factor."),
            CitationPart(
                "and compensate through initialization or the learning rate", SOURCE_AGREES,
                "lines 436-439 multiply W_q's initial standard deviation by d_k^-1/2 when fold_scaling_into_"
                "initializer is True, its default (line 363)."),
        )),
    CitationClaim(
        "cite_vit_reference", "note 2 references",
        "“Scaling Vision Transformers” (Dosovitskiy et al., 2021) discusses the effect of the scaling factor on ViT's "
        "training stability.",
        "Zhai, Kolesnikov, Houlsby and Beyer, Scaling Vision Transformers, CVPR 2022 (arXiv 2106.04560): title block "
        "and §3 (Method details)",
        "Xiaohua Zhai⋆, Alexander Kolesnikov⋆, Neil Houlsby, Lucas Beyer⋆ … 3 Method details: We present a number of "
        "improvements to the ViT model and training. These improvements are mostly simple to implement, and can "
        "significantly improve memory-utilization and model quality.",
        SOURCE_DISAGREES,
        "§3's improvements are 3.1 “Decoupled weight decay for the “head””, 3.2 “Saving memory by removing [class] "
        "token”, 3.3 “Scaling up data”, 3.4 “Memory-efficient optimizers”, 3.5 “Learning-rate schedule” and 3.6 "
        "“Selecting model dimensions”.",
        compared_with="the full text (§1-6, the references and Appendices A-G) of the ar5iv HTML rendering of arXiv "
                      "2106.04560, in a public plain-text extraction of it (no page numbers there); the author list "
                      "also against github.com/google-research/big_vision at commit 0127fb6b, README.md lines 38-39 "
                      "(“Scaling Vision Transformers … by Xiaohua Zhai*, Alexander Kolesnikov*, Neil Houlsby, and "
                      "Lucas Beyer*”)",
        full_text=True,
        parts=(
            CitationPart(
                "by Dosovitskiy et al.", SOURCE_DISAGREES,
                "The authors are Zhai, Kolesnikov, Houlsby and Beyer; Dosovitskiy appears in the paper only in its "
                "references (first author of [16], the ViT paper “An Image is Worth 16x16 Words”) and its "
                "acknowledgements. Nor is the ViT paper often cited for attention-logit growth, Dehghani et al. 2023, "
                "“Scaling Vision Transformers to 22 Billion Parameters” (arXiv 2302.05442; not read here), by "
                "Dosovitskiy (its 42 authors: github.com/llm-bible/llm-bible.github.io at commit 1ed858ab, "
                "_publications/dehghani2023scaling.markdown line 4; big_vision README.md lines 63-64)."),
            CitationPart(
                "discusses the effect of the scaling factor on ViT's training stability", SOURCE_DISAGREES,
                "No section, appendix or the training configuration of Appendix C mentions the attention logit "
                "scale 1/√d_k (or any attention temperature) or its effect on stability; what the paper tunes for "
                "training is the head's weight decay (§3.1: “Weight decay has a drastic effect on model adaptation "
                "in the low-data regime”), the optimizer's memory (§3.4) and the learning-rate schedule (§3.5)."),
        )),
    CitationClaim(
        "cite_xiong_ln_scaling", "note 2 references",
        "“On Layer Normalization in the Transformer Architecture” (Xiong et al., 2020) discusses how the LayerNorm "
        "position relates to the attention scaling.",
        "Xiong et al. 2020, On Layer Normalization in the Transformer Architecture, ICML (arXiv 2002.04745), §3.1 "
        "(Transformer with Post-Layer Normalization) and §3.3 (Understanding the Transformer at initialization)",
        "The self-attention sub-layer uses scaled dot-product attention, which is defined as: Attention(Q, K, V) = "
        "softmax(QK^T/√d)V, where d is the dimensionality of the hidden representations … [§3.3] Second, we "
        "initialize the parameter matrices in the self-attention sub-layer W^{Q,l} and W^{K,l} to be zero matrices. "
        "In this setting, the attention is a uniform distribution at initialization",
        SOURCE_DISAGREES,
        "The 1/√d factor appears only in this definition. The paper's theory (§3.3: Theorem 1, Lemmas 1-3; "
        "supplementary B-F) sets W^Q = W^K = 0, so every attention logit is 0 and the scale has no effect on its "
        "results, which relate the LayerNorm position to the size of the gradients near the output (the last FFN "
        "layer's ‖∂L/∂W^{2,L}‖_F ≤ O(d√(ln d)) post-LN, O(d√(ln d / L)) pre-LN) and to the learning-rate warm-up "
        "(§3.2, §4); nowhere does it relate the LayerNorm position to the attention scaling. (The depth-12 training "
        "claim trains post-LN with and without warm-up for this reason.)",
        compared_with="the full text (§1-5, the references and supplementary A-H) of the ICML version in a public "
                      "plain-text transcription of its PDF (math as extracted, written here in plain text; "
                      "hyphenation at line ends removed); its abstract also against the ar5iv HTML rendering of "
                      "arXiv 2002.04745",
        full_text=True),
    CitationClaim(
        "cite_flashattention_overflow", "note 2 references; §2.3",
        "FlashAttention (Dao et al., 2022) is an online-softmax implementation that solves overflow in low precision.",
        "Dao et al. 2022, FlashAttention: Fast and Memory-Efficient Exact Attention with IO-Awareness, NeurIPS (arXiv "
        "2205.14135), §3.1 (An Efficient Attention Algorithm With Tiling and Recomputation, “Tiling”) and §4.1 "
        "(GPT-2)",
        "Tiling. We compute attention by blocks. Softmax couples columns of K, so we decompose the large softmax with "
        "scaling [51, 60, 66]. For numerical stability, the softmax of vector x ∈ ℝ^B is computed as: m(x) := max_i "
        "x_i, f(x) := [e^{x_1−m(x)} … e^{x_B−m(x)}], ℓ(x) := Σ_i f(x)_i, softmax(x) := f(x)/ℓ(x). … Therefore if "
        "we keep track of some extra statistics (m(x), ℓ(x)), we can compute softmax one block at a time. … [§4.1] "
        "Appendix E includes plots of the validation perplexity throughout training, confirming that FlashAttention "
        "is as numerically stable as the baselines and produces the same training / validation curves.",
        SOURCE_DISAGREES,
        "The online (blockwise) softmax is how the paper computes attention without materializing the N × N matrix; "
        "its numerical-stability step is the max subtraction of an ordinary softmax, carried across blocks.",
        compared_with="the full text (§1-5, the references and Appendices A-E) of arXiv 2205.14135v2 in public "
                      "transcriptions of its PDF and of its ar5iv HTML rendering, which agree word for word on the "
                      "quoted sentences (the math is written here in plain text)",
        full_text=True,
        parts=(
            CitationPart(
                "FlashAttention is an online-softmax implementation", SOURCE_AGREES,
                "§3.1 (quoted): it decomposes the softmax with scaling ([60] is Milakov and Gimelshein, “Online "
                "normalizer calculation for softmax”) and computes it one block at a time."),
            CitationPart(
                "that solves overflow in low precision", SOURCE_DISAGREES,
                "The paper presents FlashAttention as exact (Theorem 1: “Algorithm 1 returns O = softmax(QK^⊤)V”) "
                "and, in §4.1 (quoted), “as numerically stable as the baselines”, not more; it never discusses "
                "numerical overflow, and its FP16 and mixed-precision runs (Appendix E.1-E.3, E.6) are training and "
                "benchmark settings, not a fix. Its only numerical-stability device is the max subtraction that an "
                "ordinary softmax already uses (Appendix B.1: “For simplicity, we omit here the max-shifting step "
                "during softmax.”)."),
        )),
)
"""The citation claims, in the order of their table."""
