"""The notes' factual citations, each checked against the source it names by reading it: never a measured verdict.

Each is a ``scaling.studies.claims.verdicts.CitationClaim``: the claim as the note states it, the passage of the source
quoted, and whether the source says what the note says it does. Four verdicts: "source agrees" (it says it); "source
contradicts" (it says otherwise); "not stated in the source" (the whole source was read and it is silent on the claim);
"not found in the passage checked" (only part of it was read, and that part neither says nor contradicts it). Silence
is not contradiction: a paper cited for something its whole text never says is "not stated", not "contradicts". A
claim that asserts several things (an attribution and a content, or two halves) lists its parts, each with its own
verdict, and ``scaling.studies.claims.verdicts.citation_verdict`` combines them: the source contradicts the claim if it
contradicts any part, agrees only if it agrees with every part, and otherwise the claim is "not stated" if any part is
(else "not found in the passage checked"). Nothing here is measured; the tables label these rows "checked against the
source". Each passage says where in the source it stands (section and page, or repository path, commit and lines)
and ``compared_with`` says what was read and what its words were compared with.
"""

from __future__ import annotations

from scaling.studies.claims.verdicts import CitationClaim
from scaling.studies.claims.verdicts import CitationPart
from scaling.studies.claims.verdicts import NOT_STATED
from scaling.studies.claims.verdicts import SOURCE_AGREES
from scaling.studies.claims.verdicts import SOURCE_CONTRADICTS

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
        SOURCE_CONTRADICTS,
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
                "GPT-3 uses RMSNorm rather than LayerNorm", SOURCE_CONTRADICTS,
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
        SOURCE_CONTRADICTS,
        "T5 does not divide its logits by √d_k at all: the logits are the plain q·k, and by default the factor "
        "d_k^-1/2 is folded into the initial standard deviation of W_q.",
        compared_with="the file at that commit, lines quoted as they stand (joined by “/” and “…”)",
        parts=(
            CitationPart(
                "Many models (such as T5) keep the fixed √d_k", SOURCE_CONTRADICTS,
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
        SOURCE_CONTRADICTS,
        "§3's improvements are 3.1 “Decoupled weight decay for the “head””, 3.2 “Saving memory by removing [class] "
        "token”, 3.3 “Scaling up data”, 3.4 “Memory-efficient optimizers”, 3.5 “Learning-rate schedule” and 3.6 "
        "“Selecting model dimensions”. The authorship part decides the verdict: the title block contradicts "
        "“Dosovitskiy et al.”; on the scaling factor the paper is silent (not stated), which alone would not make it "
        "contradict the note.",
        compared_with="the full text (§1-6, the references and Appendices A-G) of the ar5iv HTML rendering of arXiv "
                      "2106.04560, in a public plain-text extraction of it (no page numbers there); the author list "
                      "also against github.com/google-research/big_vision at commit 0127fb6b, README.md lines 38-39 "
                      "(“Scaling Vision Transformers … by Xiaohua Zhai*, Alexander Kolesnikov*, Neil Houlsby, and "
                      "Lucas Beyer*”)",
        full_text=True,
        parts=(
            CitationPart(
                "by Dosovitskiy et al.", SOURCE_CONTRADICTS,
                "The authors are Zhai, Kolesnikov, Houlsby and Beyer; Dosovitskiy appears in the paper only in its "
                "references (first author of [16], the ViT paper “An Image is Worth 16x16 Words”) and its "
                "acknowledgements. Nor is the ViT paper often cited for attention-logit growth, Dehghani et al. 2023, "
                "“Scaling Vision Transformers to 22 Billion Parameters” (arXiv 2302.05442; not read here), by "
                "Dosovitskiy (its 42 authors: github.com/llm-bible/llm-bible.github.io at commit 1ed858ab, "
                "_publications/dehghani2023scaling.markdown line 4; big_vision README.md lines 63-64)."),
            CitationPart(
                "discusses the effect of the scaling factor on ViT's training stability", NOT_STATED,
                "Silent: no section, appendix or the training configuration of Appendix C mentions the attention "
                "logit scale 1/√d_k (or any attention temperature) or its effect on stability, for or against; what "
                "the paper tunes for training is the head's weight decay (§3.1: “Weight decay has a drastic effect on "
                "model adaptation in the low-data regime”), the optimizer's memory (§3.4) and the learning-rate "
                "schedule (§3.5)."),
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
        NOT_STATED,
        "Silent, not contradicted: the 1/√d factor appears only in this definition. The paper's theory (§3.3: "
        "Theorem 1, Lemmas 1-3; supplementary B-F) sets W^Q = W^K = 0, so every attention logit is 0 and the scale "
        "has no effect on its results, which relate the LayerNorm position to the size of the gradients near the "
        "output (the last FFN layer's ‖∂L/∂W^{2,L}‖_F ≤ O(d√(ln d)) post-LN, O(d√(ln d / L)) pre-LN) and to the "
        "learning-rate warm-up (§3.2, §4). Nowhere does it relate the LayerNorm position to the attention scaling, "
        "nor does it say the two are unrelated: the note credits it with a discussion it does not contain. (The "
        "depth-12 training claim trains post-LN with and without warm-up for this reason.)",
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
        NOT_STATED,
        "The online (blockwise) softmax is how the paper computes attention without materializing the N × N matrix; "
        "its numerical-stability step is the max subtraction of an ordinary softmax, carried across blocks. The first "
        "part agrees; on overflow in low precision the paper is silent, so the claim is not stated in it.",
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
                "that solves overflow in low precision", NOT_STATED,
                "Silent: the paper never discusses numerical overflow, neither claiming that FlashAttention solves it "
                "nor that it does not. It presents FlashAttention as exact (Theorem 1: “Algorithm 1 returns O = "
                "softmax(QK^⊤)V”) and, in §4.1 (quoted), “as numerically stable as the baselines”; its FP16 and "
                "mixed-precision runs (Appendix E.1-E.3, E.6) are training and benchmark settings, not a fix. Its "
                "only numerical-stability device is the max subtraction that an ordinary softmax already uses "
                "(Appendix B.1: “For simplicity, we omit here the max-shifting step during softmax.”). Whether the "
                "online softmax mitigates the overflow is measured here (online_softmax_mitigates)."),
        )),
    CitationClaim(
        "cite_roformer_rope_scaling", "note 2 references",
        "“RoFormer: Enhanced Transformer with Rotary Position Embedding” (Su et al., 2021) analyses the compatibility "
        "of RoPE with the scaling factor.",
        "Su, Lu, Pan, Murtadha, Wen and Liu, RoFormer: Enhanced Transformer with Rotary Position Embedding, arXiv "
        "2104.09864v5 (Neurocomputing 568, 2024): §2.1 Eq. (2), §3.2.2 (after Eq. (16)) and §3.3 (RoPE with linear "
        "attention)",
        "The query and key values are then used to compute the attention weights, while the output is computed as the "
        "weighted sum over the value representation. [Eq. (2): a_{m,n} = exp(q_m^T k_n/√d) / Σ_j exp(q_m^T k_j/√d)] "
        "… [§3.2.2] Applying our RoPE to self-attention in Equation 2, we obtain: [Eq. (16): q_m^T k_n = "
        "(R^d_{Θ,m} W_q x_m)^T (R^d_{Θ,n} W_k x_n) = x^T W_q R^d_{Θ,n−m} W_k x_n] … Note that R^d_Θ is an orthogonal "
        "matrix, which ensures stability during the process of encoding position information. … [§3.3] The original "
        "self-attention chooses sim(q_m, k_n) = exp(q_m^T k_n/√d). … Since RoPE injects position information by "
        "rotation, which keeps the norm of hidden representations unchanged, we can combine RoPE with linear attention "
        "by multiplying the rotation matrix with the outputs of the non-negative functions.",
        NOT_STATED,
        "The paper applies RoPE inside the scaled softmax of Eq. (2) and keeps the 1/√d there, but it never analyses "
        "the two together: the factor appears only in Eq. (2) and in §3.3's description of the original "
        "self-attention. What the paper analyses is the relative-position form of q·k (§3.1-3.2, 3.4.1), RoPE's "
        "efficient realization (§3.4.2), its long-term decay (§3.3, 3.4.3) and its use with linear attention (§3.3, "
        "§4.4). The measured row rope_compatible_with_sqrt (a supporting measurement) supplies what the paper leaves "
        "out. The paper's own words on norms (“keeps the norm of hidden representations unchanged”) are against note "
        "2 §2.4's “RoPE changes the norms of Q and K”, which is measured in rope_changes_norms.",
        compared_with="the full text (the abstract, §1-5 with their footnotes, the text of Tables 1-5 and the "
                      "references) of arXiv 2104.09864v5 in two public transcriptions in public repositories, one in "
                      "Markdown with the equations in LaTeX and one extracted from its ar5iv HTML rendering, which "
                      "agree word for word on the quoted sentences (the math is written here in plain text; Figures "
                      "1-3 are images, read by their captions only; the authors' code, ZhuiyiTechnology/roformer, "
                      "was not read)",
        full_text=True,
        parts=(
            CitationPart(
                "RoFormer (Su et al., 2021)", SOURCE_AGREES,
                "The title block lists Jianlin Su first, then Yu Lu, Shengfeng Pan, Ahmed Murtadha, Bo Wen and "
                "Yunfeng Liu (Zhuiyi Technology); the arXiv number 2104.09864 dates the first version to April 2021 "
                "(Neurocomputing published it in 2024)."),
            CitationPart(
                "analyses the compatibility of RoPE with the scaling factor", NOT_STATED,
                "Silent: no section relates RoPE to the 1/√d factor, for or against; there is no variance of the "
                "rotated logits, no argument that 1/√d stays right with RoPE, and no experiment that varies the "
                "factor. The nearest statements are that R^d_Θ is orthogonal (“ensures stability during the process "
                "of encoding position information”, §3.2.2) and that the rotation keeps norms unchanged (§3.3, said "
                "to justify RoPE with linear attention): the premises from which compatibility would follow, not an "
                "analysis of it."),
        )),
    CitationClaim(
        "cite_head_dim_64_or_128", "note 1 §4 (English trade-offs)",
        "In practice the head dimension d_k is typically kept constant (e.g., d_k = 64 or 128) while the total hidden "
        "dimension d = h·d_k grows with the head count h.",
        "The configurations of five model families: GPT-3 (Brown et al. 2020, arXiv 2005.14165, Table 2.1, p. 8); "
        "GPT-2's released checkpoints (github.com/karpathy/nanoGPT at commit 04a1d697, model.py, GPT.from_pretrained); "
        "LLaMA (github.com/meta-llama/llama at commit 1076b9c5, MODEL_CARD.md Table 1 and llama/model.py line 81); "
        "T5 (github.com/google-research/text-to-text-transfer-transformer at commit 9fd7b14a, t5/models/gin/models/"
        "bi_bert_base.gin, bi_v1_small.gin, bi_v1_large.gin, bi_v1_3B.gin and bi_v1_11B.gin); BERT "
        "(github.com/google-research/bert at commit 04f9e5d1, README.md, “Pre-trained models”)",
        "[GPT-3, Table 2.1; columns n_params, n_layers, d_model, n_heads, d_head] GPT-3 Small 125M 12 768 12 64 … "
        "GPT-3 Medium 350M 24 1024 16 64 … GPT-3 Large 760M 24 1536 16 96 … GPT-3 XL 1.3B 24 2048 24 128 … GPT-3 2.7B "
        "2.7B 32 2560 32 80 … GPT-3 6.7B 6.7B 32 4096 32 128 … GPT-3 13B 13.0B 40 5140 40 128 … GPT-3 175B or “GPT-3” "
        "175.0B 96 12288 96 128 … [§2.1] d_head is the dimension of each attention head.",
        SOURCE_CONTRADICTS,
        "The sizes are written out in the parts. The second part decides the verdict: d_k is kept constant within "
        "BERT, GPT-2 and LLaMA, but GPT-3 and T5, the two families read that span more than two orders of magnitude "
        "of size, double it from 64 to 128 as they grow. Whether keeping d_k fixed preserves the attention scale (the "
        "note's reason) is measured in head_dim_constant.",
        compared_with="GPT-3's Table 2.1 and the paragraph after it in three public transcriptions of the paper in "
                      "public repositories, which agree cell for cell (the PDF itself was not opened); the "
                      "repository files named, at the commits named, whose lines are quoted as they stand (joined by "
                      "“…”); each family's head dimension is d_model / n_heads where its source gives no d_head",
        parts=(
            CitationPart(
                "d_k = 64 or 128", SOURCE_AGREES,
                "GPT-2: 64 at every size (nanoGPT's GPT.from_pretrained loads OpenAI's checkpoints with "
                "“'gpt2': dict(n_layer=12, n_head=12, n_embd=768)”, “'gpt2-medium': dict(n_layer=24, n_head=16, "
                "n_embd=1024)”, “'gpt2-large': dict(n_layer=36, n_head=20, n_embd=1280)”, “'gpt2-xl': "
                "dict(n_layer=48, n_head=25, n_embd=1600)”: 768/12 = 1024/16 = 1280/20 = 1600/25 = 64). BERT: 64 "
                "(README: “BERT-Base, Uncased: 12-layer, 768-hidden, 12-heads, 110M parameters”, “BERT-Large, "
                "Uncased: 24-layer, 1024-hidden, 16-heads, 340M parameters”). LLaMA: 128 at every size (MODEL_CARD.md "
                "Table 1, dimension and n heads: 7B 4096 32, 13B 5120 40, 33B 6656 52, 65B 8192 64; model.py line 81: "
                "self.head_dim = args.dim // args.n_heads). T5: “d_kv = 64” (bi_bert_base.gin line 9, inherited by "
                "Small, Base and Large) and “d_kv = 128” (bi_v1_3B.gin and bi_v1_11B.gin, line 9). GPT-3: 64 or 128 "
                "at six of its eight sizes, 96 (Large) and 80 (2.7B) at the other two (Table 2.1, quoted)."),
            CitationPart(
                "d_k is typically kept constant while d = h·d_k grows with the head count h", SOURCE_CONTRADICTS,
                "GPT-3 raises d_head with size within one family: 64 at 125M and 350M, 128 at 1.3B and from 6.7B to "
                "175B (Table 2.1): from Small to 175B d_model grows 16× (768 to 12288) while n_heads grows 8× (12 to "
                "96); as printed, the XL row does not satisfy d = h·d_head either (24 × 128 = 3072, d_model 2048), "
                "nor does the 13B row (5140 is not 40 × 128). T5 moves from d_kv 64 (Small, Base, Large: d_model "
                "512, 768, 1024 with 8, 12, 16 heads) to d_kv 128 at 3B and 11B, where d_model stays 1024 "
                "(bi_v1_3B.gin and bi_v1_11B.gin lines 5, 8, 9: “d_model = 1024”, “num_heads = 32” or “num_heads = "
                "128”, “d_kv = 128”), so h·d_kv = 4096 or 16384 is not d: the growth went into the heads, not d. "
                "Three families do keep d_k constant while d = h·d_k grows with h: GPT-2 (64; 12 to 25 heads, 124M "
                "to 1.5B), BERT (64; 12 and 16 heads, 110M and 340M) and LLaMA (128; 32 to 64 heads, 7B to 65B)."),
        )),
)
"""The citation claims, in the order of their table."""
