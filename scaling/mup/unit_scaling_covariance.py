"""This project's correction of u-μP's unit scales for positions correlated at initialization.

u-μP's closed-form scales (``scaling.mup.unit_scaling``, the paper's) assume every tensor's rows independent. In a
causal transformer at init they are not: a near-uniform causal attention outputs running means, and the GELU's
mean and the vocabulary's mean embedding add a component shared by all positions; the gradients flowing down
are correlated likewise. This module models the T × T position covariance of the residual stream and of its
gradient at init (numpy, evaluated once per model shape) and derives per-block factors from it:

* ``attention_correlation_factors``: the attention's forward scale (``corrected_attention_scale``);
* ``gradient_correlation_factors``: the q-, k- and value-gradient scales (``attention_qk_grad_scale``, which
  also gives q and k their own expected gradient RMS, × √d_head/α), the weight gradients of the projections,
  the MLP, the norms' gains, the embedding and the readout, and the attention branch's input gradient.

``covariance_scales`` applies them to ``unit_scaling.paper_scales`` (and gives the readout the forward scale
1/√fan_in, unit-scale logits at init, where the paper's 1/fan_in leaves them at 1/√fan_in): the scales a model
computes with under ``umup_scales="covariance"``. Unlike the paper's, they change with T.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, NamedTuple

import jax
import numpy as np

from scaling.attention import rope as rope_lib
from scaling.mup import unit_scaling as unit


def corrected_attention_scale(seq_len: int, head_dim: int, *, mult: float = 1.0, causal: bool = True,
                              correlation: float = 1.0) -> float:
  """u-μP's attention scale for values correlated across positions: the flat-attention RMS × ``correlation``.

  Args:
    seq_len: T, the number of keys.
    head_dim: d_head.
    mult: α_attn of the α/d_head logit scale.
    causal: whether the attention is causal.
    correlation: a factor of ``attention_correlation_factors`` (1: independent values, the paper's scale); it
      divides the flat-attention RMS before the interpolation towards 1.

  Returns:
    The scale (a Python float).
  """
  return unit.interpolated_attention_scale(unit.flat_attention_rms(seq_len, causal) / correlation, head_dim, mult)


def attention_qk_grad_scale(seq_len: int, head_dim: int, *, mult: float = 1.0, causal: bool = True,
                            correlation: float = 1.0) -> float:
  """The corrected gradient scale of q and k: ``corrected_attention_scale`` × (√d_head / mult)^(1 − w).

  With near-uniform attention p_ij ≈ 1/n_i (n_i keys) and a unit-scale output gradient g_i, the logit gradient
  is p_ij·g_i·(v_j − out_i), of RMS √d_head / n_i, and the query gradient (mult/d_head)·Σ_j (...)·k_j has
  RMS (mult/√d_head)·√(1/n_i); averaged over the queries √(log T / T) (causal) or √(1/T), the value
  gradient's scale times mult/√d_head. The extra factor √d_head/mult is interpolated towards 1 with the
  weight w of ``unit_scaling.attention_weight`` (sharp attention). The key gradient Σ_i (...)·q_i has the same mean square.

  Args:
    seq_len: T, the number of keys.
    head_dim: d_head.
    mult: α_attn of the α/d_head logit scale.
    causal: whether the attention is causal.
    correlation: as in ``corrected_attention_scale``.

  Returns:
    The scale (a Python float).
  """
  weight = unit.attention_weight(head_dim, mult)
  base = corrected_attention_scale(seq_len, head_dim, mult=mult, causal=causal, correlation=correlation)
  return base * (math.sqrt(head_dim) / mult)**(1.0 - weight)



def _gelu(z: Any) -> Any:
  """The unit-scaled GELU (tanh form) on numpy arrays."""
  return 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z**3))) * unit.GELU_SCALE


def _gelu_grad(z: Any) -> Any:
  """Its derivative on numpy arrays."""
  k0 = math.sqrt(2 / math.pi)
  th = np.tanh(k0 * (z + 0.044715 * z**3))
  return (0.5 * (1 + th) + 0.5 * z * (1 - th * th) * k0 * (1 + 3 * 0.044715 * z * z)) * unit.GELU_SCALE


def _kernel_table(fn: Callable[[Any], Any], points: int = 401, order: int = 48) -> tuple[Any, Any]:
  """(c, E[fn(x)·fn(y)]) on a grid of correlations c for unit normals x, y of correlation c (Gauss-Hermite)."""
  nodes, weights = np.polynomial.hermite_e.hermegauss(order)
  weights = weights / weights.sum()
  c = np.linspace(-1.0, 1.0, points)
  x, z = nodes[:, None, None], nodes[None, :, None]
  y = c * x + np.sqrt(np.maximum(1 - c * c, 0.0)) * z
  return c, np.einsum("i,j,ijc->c", weights, weights, fn(x) * fn(y))


@functools.lru_cache(maxsize=None)
def _gelu_kernel() -> tuple[Any, Any]:
  """The kernel of the unit-scaled GELU (how it maps the correlation of its inputs)."""
  return _kernel_table(_gelu)


@functools.lru_cache(maxsize=None)
def _gelu_grad_kernel() -> tuple[Any, Any]:
  """The kernel of its derivative (how the MLP maps the correlation of gradients)."""
  return _kernel_table(_gelu_grad)


def _uniform_attention_cov(cov: Any, causal: bool) -> Any:
  """A·cov·Aᵀ for the uniform (causal) averaging matrix A: cumulative means along both axes."""
  t = cov.shape[0]
  if not causal:
    return np.full_like(cov, cov.mean())
  n = np.arange(1, t + 1, dtype=cov.dtype)
  left = np.cumsum(cov, axis=0) / n[:, None]
  return np.cumsum(left, axis=1) / n[None, :]


@functools.lru_cache(maxsize=256)
def attention_correlation_factors(seq_len: int, taus: tuple[tuple[float, float], ...], *, vocab_size: int,
                                  pre_ln: bool = True, learned_positions: bool = False,
                                  causal: bool = True) -> tuple[float, ...]:
  """Per-block correction of u-μP's attention scale for values correlated across positions at init.

  u-μP's attention scale assumes values independent across positions. In a deep model they are not: a
  near-uniform causal attention outputs running means, which are strongly correlated between positions, and
  the GELU's non-zero mean and the vocabulary's mean embedding add a component shared by all positions, so a
  later block's average does not shrink like √(log T / T) and √(T / log T) over-amplifies it (up to ×12 at
  T = 1024). This propagates the T × T position covariance of the residual stream through the blocks at
  initialization, under the assumptions of u-μP's rule (uniform attention, unit-scaled weights independent of
  their inputs): token embeddings with covariance I + (J − I)/V (random tokens; + I for learned positions),
  LayerNorm to unit variance per position, attention A·C·Aᵀ, the MLP through the exact kernel of the
  unit-scaled GELU, and the τ rule (τ²·C_branch + C)/(1 + τ²). The forward factor of block i is
  √(mean_t (A·C₀·Aᵀ)_tt / mean_t (A·C_i·Aᵀ)_tt) with C₀ = I, so it is 1 for uncorrelated values and the
  block's attention output has unit scale in this model. The same factor corrects the 1/√rows of the value
  projection's weight gradient Σ_t x_tᵀ·dv_t, whose rows are correlated too: with inputs of correlation
  corr(C_i) and value gradients s²·AᵀA (an output gradient independent across positions), its mean square is
  s²·Σ_tu corr(C_i)_tu·(AᵀA)_tu = s²·tr(A·corr(C_i)·Aᵀ), the forward's.

  Args:
    seq_len: T.
    taus: ((τ_attn, τ_mlp) per block), ``residual_taus``.
    vocab_size: V.
    pre_ln: pre-LN blocks (False: post-LN).
    learned_positions: learned position embeddings added to the token embeddings.
    causal: causal attention.

  Returns:
    One factor per block (Python floats, at most 1).
  """
  inputs, _ = _forward_covariances(seq_len, taus, vocab_size, pre_ln, learned_positions, causal)
  white = np.mean(np.diag(_uniform_attention_cov(np.eye(seq_len), causal)))
  factors = [min(1.0, math.sqrt(white / np.mean(np.diag(_uniform_attention_cov(attn_in, causal)))))
             for attn_in, *_ in inputs]
  return tuple(float(f) for f in factors)


def _uniform_attention_cov_t(cov: Any, causal: bool) -> Any:
  """Aᵀ·cov·A for the uniform (causal) averaging matrix A: reversed cumulative sums of cov/(n_i·n_k)."""
  t = cov.shape[0]
  if not causal:
    return np.full_like(cov, cov.mean())
  n = np.arange(1, t + 1, dtype=cov.dtype)
  scaled_cov = cov / n[:, None] / n[None, :]
  left = np.cumsum(scaled_cov[::-1], axis=0)[::-1]
  return np.cumsum(left[:, ::-1], axis=1)[:, ::-1]


def _corr(c: Any) -> Any:
  """The correlation matrix of a covariance matrix."""
  d = np.sqrt(np.diag(c))
  return np.clip(c / d[:, None] / d[None, :], -1.0, 1.0)


@functools.lru_cache(maxsize=16)
def _forward_covariances(seq_len: int, taus: tuple[tuple[float, float], ...], vocab_size: int, pre_ln: bool,
                         learned_positions: bool,
                         causal: bool) -> tuple[list[tuple[Any, Any, Any, Any, Any]], tuple[Any, Any]]:
  """The residual stream's position covariance at init, averaged over random tokens, and its token part.

  Returns ([(attention-input corr, MLP-input corr, their per-position variances before the norm, the token part
  of the attention input's corr) per block], (final corr, final variances)). The token part Γ is the
  coefficient of M − E[M] (M_tu = 1 where positions t and u hold the same token) in the covariance given the
  tokens: 1 in the embedding, dropped by the attention's average, passed by the MLP with the GELU kernel's
  slope K'(R) (Price's theorem: the kernel of the GELU's derivative) and by the skip with 1/(1 + τ²).
  """
  t = seq_len
  grid, kernel = _gelu_kernel()
  dgrid, dkernel = _gelu_grad_kernel()
  cov = np.eye(t) + (np.ones((t, t)) - np.eye(t)) / vocab_size
  if learned_positions:
    cov = cov + np.eye(t)
  tokens = np.ones((t, t))
  add = lambda branch, c, tau: (tau * tau * branch + c) / (1.0 + tau * tau)
  inv_sd = lambda c: 1.0 / np.sqrt(np.outer(np.diag(c), np.diag(c)))

  def normalize(cov, tokens):
    return _corr(cov), tokens * inv_sd(cov)

  inputs = []
  for tau_attn, tau_mlp in taus:
    attn_var = np.diag(cov).copy()
    attn_in, attn_tokens = normalize(cov, tokens)
    mixed = _uniform_attention_cov(attn_in, causal)
    cov, tokens = add(mixed / np.mean(np.diag(mixed)), cov, tau_attn), add(0.0, tokens, tau_attn)
    if not pre_ln:
      cov, tokens = normalize(cov, tokens)
    mlp_var = np.diag(cov).copy()
    mlp_in, mlp_tokens = normalize(cov, tokens)
    cov = add(np.interp(mlp_in, grid, kernel), cov, tau_mlp)
    tokens = add(np.interp(mlp_in, dgrid, dkernel) * mlp_tokens, tokens, tau_mlp)
    if not pre_ln:
      cov, tokens = normalize(cov, tokens)
    inputs.append((attn_in, mlp_in, attn_var, mlp_var, attn_tokens))
  return inputs, (_corr(cov), np.diag(cov).copy())


def _weight_grad_factor(x_cov: Any, g_cov: Any, normalize: bool = True, mean_square: float = 0.0) -> float:
  """1/RMS of Σ_t x_tᵀ·g_t/√T for inputs and gradients of position covariances x_cov, g_cov.

  normalize: rescale both to unit mean diagonal (unit-scale tensors); mean_square: a further mean square (the
  part of Σ_t x_tᵀ·g_t/√T that does not average out).
  """
  t = x_cov.shape[0]
  norm = np.mean(np.diag(x_cov)) * np.mean(np.diag(g_cov)) if normalize else 1.0
  return float(math.sqrt(1.0 / (np.sum(x_cov * g_cov) / (t * norm) + mean_square)))


class BlockGradientFactors(NamedTuple):
  """The backward corrections of one block (``gradient_correlation_factors``); 1 = u-μP's own scale."""
  value: float  # the value-gradient scale's correlation factor
  w_v: float  # weight-gradient factors of the projections and the MLP
  w_o: float
  fc_in: float
  fc_out: float
  w_q: float
  w_k: float
  ln_attn: float  # weight-gradient factors of the norm gains
  ln_mlp: float
  attn_in_grad: float  # brings the attention branch's input gradient (at the norm's output) to unit scale
  query: float  # the q- and k-gradient scales' factors
  key: float


@functools.lru_cache(maxsize=256)
def gradient_correlation_factors(seq_len: int, taus: tuple[tuple[float, float], ...], *, vocab_size: int,
                                 width: int, head_dim: int, attn_mult: float = 1.0, pre_ln: bool = True,
                                 learned_positions: bool = False, causal: bool = True,
                                 rope_base: float | None = None) -> tuple[tuple[BlockGradientFactors, ...], tuple[float, ...]]:
  """Per-block corrections of the backward scales for gradients correlated across positions at init.

  The backward counterpart of ``attention_correlation_factors``: the gradient reaching the lower blocks is
  correlated across positions (the value gradient of a near-uniform causal attention, dv_j = Σ_{i≥j} p_ij·g_i,
  sums correlated output gradients), while u-μP's backward scales assume independence. Under the same
  assumptions (uniform attention A, unit-scaled weights independent of their inputs, the τ rule) this propagates
  the T × T position covariance G of the residual stream's true gradient down from the readout: there the
  unit-scaled cross-entropy gradient V/√(V − 1)·(softmax − one-hot) has the independent one-hot part and a
  softmax part ≈ (z_t − z̄_t)/√V that follows the logits, so G = I + (R − I)/V with R the position correlation of
  the final LayerNorm's output. A pre-LN norm's backward divides position t by its input's RMS σ_t (the early
  positions of a causal model, where the attention averages few values, are the largest). An MLP branch maps G
  to G ∘ K'(R_mlp) (K' the kernel E[g'(x)·g'(y)] of the unit-scaled GELU), an attention branch to
  s²·(AᵀGA + (α²/d_head)·(Q + K) ∘ ρ) (s its forward scale; Q, K the q and k gradients'
  ``_qk_gradient_covariances``, ρ RoPE's rotation), and a block to (τ²·G_branch + G)/(1 + τ²). From G it derives

  * the value-gradient factor √(mean_j (AᵀA)_jj / mean_j (AᵀĜA)_jj) (Ĝ: G at the attention output with unit mean
    diagonal), which multiplies the flat-attention scale as ``attention_scale``'s ``correlation`` does;
  * the query- and key-gradient factors √(mean diag Q_white / mean diag Q(R, Ĝ)) (and K's), which multiply
    ``attention_qk_grad_scale`` likewise: values correlated across positions deviate less from their running
    mean (smaller q and k gradients), the early positions' larger output gradients weigh more, and the query
    gradient grows coherently with the number of keys past the width D (``_qk_gradient_covariances``);
  * for each weight whose rows are correlated, the factor √(T / Σ_tu X_tu·Y_tu) of its 1/√T weight-gradient scale
    (X, Y: the position covariances of its input and of its output gradient, unit mean diagonals; the mean
    square of Σ_t x_tᵀ·dy_t for inputs independent of the gradients): W_v (R, AᵀGA), W_o (A·R·Aᵀ, G), fc_in
    (R_mlp, G ∘ K'(R_mlp)), fc_out (K(R_mlp), G), the readout (R, G) and W_q, W_k (R, G: their gradients are
    linear in the output gradient g_i of their query);
  * the factor 1/√(mean_t (branch)_tt) that brings the gradient at the output of the norm before an attention
    branch (the branch's true input gradient, large where the attention sums correlated gradients, small where
    its forward scale is small) to unit scale; the model applies it between the norm and the branch and undoes it
    at the norm's input, so the gradient reaching the residual stream stays the true one;
  * the same weight-gradient factors for the LayerNorm gains, with the gradient at the norm's output (the
    attention branch's at unit scale, G ∘ K' at its own scale before an MLP); the final norm's gain and the readout
    also get the mean square of the part of their gradient that does not average out (the softmax part of the
    logit gradient follows the logits z_t = W·x_t, so Σ_t x_t·dy_t sums T terms of mean 1/√D for the gain,
    W/√(D·V) for the readout: T/D and T/(D·V) after the 1/√T);
  * the embedding's factor √(T / (tr G + (ΣG − tr G)/V)) of its √(V/T) (a row sums the gradients of the ≈ T/V
    positions of its token, pairs of them correlated as G).

  Args:
    seq_len: T.
    taus: ((τ_attn, τ_mlp) per block), ``residual_taus``.
    vocab_size: V.
    width: D, the residual stream's width.
    head_dim: d_head (the attention's forward scale).
    attn_mult: α_attn.
    pre_ln: pre-LN blocks (False: post-LN; the gains' factors are then 1).
    learned_positions: learned position embeddings added to the token embeddings.
    causal: causal attention.
    rope_base: RoPE's frequency base (None: no RoPE).

  Returns:
    ((``BlockGradientFactors`` per block), (readout, final gain, embedding factors)), Python floats.
  """
  t = seq_len
  inputs, (final, final_var) = _forward_covariances(t, taus, vocab_size, pre_ln, learned_positions, causal)
  forward = attention_correlation_factors(t, taus, vocab_size=vocab_size, pre_ln=pre_ln,
                                          learned_positions=learned_positions, causal=causal)
  grid, kernel = _gelu_kernel()
  dgrid, dkernel = _gelu_grad_kernel()
  unit_diag = lambda c: c / np.mean(np.diag(c))
  # A pre-LN norm's backward divides the gradient at position t by the RMS σ_t of its input.
  through_norm = lambda c, var: c / np.sqrt(np.outer(var, var)) if pre_ln else c
  eye = np.eye(t)
  rotation = _rope_rotation(t, head_dim, rope_base)
  white_q, white_k = (np.mean(np.diag(c))
                      for c in _qk_gradient_covariances(eye, eye, _rope_rotation(t, head_dim, None), causal))
  g = eye + (final - eye) / vocab_size
  readout = _weight_grad_factor(final, g, mean_square=t / (width * vocab_size))
  final_gain = _weight_grad_factor(final, g, mean_square=t / width) if pre_ln else 1.0
  g = through_norm(g, final_var)
  white = np.mean(np.diag(_uniform_attention_cov_t(eye, causal)))
  logit_ms = attn_mult**2 / head_dim  # (α/d_head)² · d_head: the q/k gradients' mean square per unit of Q, K
  factors = []
  for i in reversed(range(len(taus))):
    tau_attn, tau_mlp = taus[i]
    attn_in, mlp_in, attn_var, mlp_var, attn_tokens = inputs[i]
    # MLP: fc_out sees gelu(h) and the gradient G; fc_in sees LN(x) and the gradient G ∘ K'(R).
    hidden_grad = g * np.interp(mlp_in, dgrid, dkernel)
    fc_out = _weight_grad_factor(np.interp(mlp_in, grid, kernel), g)
    fc_in = _weight_grad_factor(mlp_in, hidden_grad)
    ln_mlp = _weight_grad_factor(mlp_in, hidden_grad, normalize=False) if pre_ln else 1.0
    g = (tau_mlp**2 * through_norm(hidden_grad, mlp_var) + g) / (1.0 + tau_mlp**2)
    # Attention: W_o sees A·R·Aᵀ and G; W_v sees R and AᵀGA.
    v_grad = _uniform_attention_cov_t(unit_diag(g), causal)
    value = min(1.0, math.sqrt(white / np.mean(np.diag(v_grad))))
    w_o = _weight_grad_factor(_uniform_attention_cov(attn_in, causal), g)
    w_v = _weight_grad_factor(attn_in, v_grad)
    # q and k: their gradients' position covariances (in RoPE's rotated frame).
    q_cov, k_cov = _qk_gradient_covariances(attn_in, g, rotation, causal, width=width,
                                            token_var=attn_tokens**2 * (1.0 - 1.0 / vocab_size) / vocab_size)
    # (1 where a single key leaves no gradient to q and k)
    q_scale, k_scale = (math.sqrt(w * np.mean(np.diag(g)) / np.mean(np.diag(c))) if w > 0 else 1.0
                        for w, c in ((white_q, q_cov), (white_k, k_cov)))
    w_q = w_k = _weight_grad_factor(attn_in, g)
    s = corrected_attention_scale(t, head_dim, mult=attn_mult, causal=causal, correlation=forward[i])
    branch = s * s * (_uniform_attention_cov_t(g, causal) + logit_ms * (q_cov + k_cov) * rotation[1])
    # The attention branch's input gradient (the true one) has mean square mean_t (branch)_tt: scaled to unit
    # scale at the norm's output and back at its input, the gain sees it at unit scale.
    attn_in_grad = math.sqrt(1.0 / np.mean(np.diag(branch))) if pre_ln else 1.0
    ln_attn = _weight_grad_factor(attn_in, branch) if pre_ln else 1.0
    g = (tau_attn**2 * through_norm(branch, attn_var) + g) / (1.0 + tau_attn**2)
    factors.append(BlockGradientFactors(value, w_v, w_o, fc_in, fc_out, w_q, w_k, ln_attn, ln_mlp, attn_in_grad,
                                        q_scale, k_scale))
  embedding = math.sqrt(t / (np.trace(g) + (np.sum(g) - np.trace(g)) / vocab_size))
  return tuple(reversed(factors)), (readout, final_gain, float(embedding))


@functools.lru_cache(maxsize=16)
def _rope_rotation(seq_len: int, head_dim: int, rope_base: float | None) -> tuple[Any, Any]:
  """(B [T, r], ρ = B·Bᵀ [T, T]): ρ(t − u) is the mean over RoPE's frequencies θ of cos((t − u)·θ), E[q_t·q_u] of
  rotated vectors per unrotated E[q̃_t·q̃_u] (B a column of ones, ρ = 1, without RoPE)."""
  if rope_base is None:
    basis = np.ones((seq_len, 1))
  else:
    with jax.ensure_compile_time_eval():  # concrete even when the model is being traced
      theta = np.asarray(rope_lib.rope_frequencies(head_dim, rope_base), np.float64)
    angles = np.arange(seq_len)[:, None] * theta[None, :]
    basis = np.concatenate([np.cos(angles), np.sin(angles)], axis=1) / math.sqrt(len(theta))
  return basis, basis @ basis.T


def _qk_gradient_covariances(r: Any, g: Any, rotation: tuple[Any, Any], causal: bool, *, width: int | None = None,
                             token_var: Any = None) -> tuple[Any, Any]:
  """(Q, K): position covariances of the query and key gradients of uniform attention, per (α/d_head)²·d_head.

  With p_ij = 1/n_i over the n_i keys j of query i, a_ij = g_i·(v_j − v̄_i) and the logit scale c, the gradients
  are dq_i = c·Σ_j p_ij·a_ij·k_j and dk_j = c·Σ_i p_ij·a_ij·q_i. For q, k and v of independent components with
  position correlation R (q and k rotated: R ∘ ρ; ``rotation`` = (B, ρ = B·Bᵀ), ``_rope_rotation``) and output
  gradients of covariance G,
  E[a_ij·a_i'j'] = d_head·G_ii'·V_ii'(j, j'), with V the covariance of the values' deviations from the means,
  V_ii'(j, j') = R_jj' − R̄_j,≤i' − R̄_≤i,j' + R̄_≤i,≤i'. Then per component
  Q_ii' = G_ii'/(n_i·n_i')·Σ_{j≤i, j'≤i'} V_ii'(j, j')·(R∘ρ)_jj' and
  K_jj' = Σ_{i≥j, i'≥j'} G_ii'·(R∘ρ)_ii'/(n_i·n_i')·V_ii'(j, j'), each in O(T²) by cumulative sums.

  Q is quadratic in the correlation of the projections' inputs x, and a correlation measured over D features
  fluctuates: q, k and v are functions of the same x, so Σ_j a_ij·k_j = W_k·(Σ_j x_j·x_jᵀ)·W_vᵀ·g_i/D grows
  coherently with the number of keys once it passes D. With ``width`` = D this adds the Wishart term
  E[R̂_ab·R̂_cd] − R_ab·R_cd ⊃ R_ac·R_bd/D (its larger pairing: Σ_{j≤i, j'≤i'} ρ_jj'·u_i(j)·u_i'(j')/D with
  u_i(j) = 1 − R̄_j,≤i), and ``token_var`` (the variance of R_jj' over random tokens) adds the pairing of equal
  entries, Σ_{j≤i, j'≤i'} token_var_jj'·ρ_jj' × (1 − 1/n_i)(1 − 1/n_i') (+ the transposed pairing). K, where
  these pairings are single coincidences of indices, keeps the mean-field form.
  """
  t = r.shape[0]
  basis, rho = rotation
  if causal:
    n = np.arange(1, t + 1, dtype=np.float64)
    pre = lambda x, axis: np.cumsum(x, axis=axis)
    suf = lambda x, axis: np.flip(np.cumsum(np.flip(x, axis), axis=axis), axis)
  else:
    n = np.full(t, float(t))
    pre = suf = lambda x, axis: np.broadcast_to(np.sum(x, axis=axis, keepdims=True), x.shape)
  pre2 = lambda x: pre(pre(x, 0), 1)
  nn = np.outer(n, n)
  rr = r * rho
  row = pre(r, 1)  # row[j, i] = Σ_{l≤i} R_jl
  total = pre2(r)  # total[i, i'] = Σ_{l≤i, l'≤i'} R_ll'
  # Q: Σ_{j≤i, j'≤i'} of the four terms of V_ii'(j, j')·(R∘ρ)_jj'.
  cross = pre(row * pre(rr, 1), 0) / n[None, :]
  q_sum = pre2(r * rr) - cross - cross.T + total * pre2(rr) / nn
  if width is not None:
    # P[i] = Σ_{j≤i} B_j·u_i(j) = Σ_{j≤i} B_j − Σ_{j, l≤i} B_j·R_jl / n_i.
    if causal:
      step = basis * np.diag(row)[:, None] + np.triu(r, 1).T @ basis
      p = pre(basis, 0) - np.cumsum(step, axis=0) / n[:, None]
    else:
      p = pre(basis, 0) - (basis.T @ r.sum(axis=1))[None, :] / n[:, None]
    q_sum = q_sum + p @ p.T / width
  if token_var is not None:
    tv = token_var * rho
    np.fill_diagonal(tv, 0.0)
    within = np.diag(pre2(tv))
    low = np.minimum.outer(np.arange(t), np.arange(t)) if causal else np.zeros((t, t), int)
    q_sum = q_sum + pre2(tv) * np.outer(1 - 1 / n, 1 - 1 / n) + within[low] / nn
  q_cov = g * q_sum / nn
  # K: the same terms summed over the queries i ≥ j, i' ≥ j' with weights W = G ∘ (R∘ρ)/(n_i·n_i').
  w = g * rr / nn
  w_below = suf(w, 0)  # w_below[j, i'] = Σ_{i≥j} W_ii'
  cross = suf(w_below * row / n[None, :], 1)
  k_cov = r * suf(w_below, 1) - cross - cross.T + suf(suf(w * total / nn, 0), 1)
  return q_cov, k_cov



@functools.lru_cache(maxsize=64)
def covariance_scales(*, batch: int, seq_len: int, width: int, mlp_hidden: int, num_heads: int, kv_heads: int,
                      head_dim: int, vocab_size: int, max_len: int, depth: int, attn_mult: float = 1.0,
                      residual_mult: float = 1.0, residual_attn_ratio: float = 1.0, causal: bool = True,
                      pre_ln: bool = True, learned_positions: bool = False,
                      rope_base: float | None = None) -> unit.ModelScales:
  """``unit_scaling.paper_scales`` corrected for positions correlated at init (``umup_scales="covariance"``).

  Per block: the attention's forward scale takes the factor of ``attention_correlation_factors``; its q-, k-
  and value-gradient scales those of ``gradient_correlation_factors`` (q and k × √d_head/α too,
  ``attention_qk_grad_scale``); the q, k, v projections scale their input gradient by the attention's forward
  scale over its backward one, so the gradient of their input stays the true one up to a constant; the weight
  gradients of the projections and the MLP, the gains' gradients and the attention branch's input gradient
  take their factors. Outside the blocks: the embedding's, the final gain's and the readout's weight-gradient
  factors, and the readout's forward scale 1/√fan_in.

  Args:
    batch, seq_len, width, mlp_hidden, num_heads, kv_heads, head_dim, vocab_size, max_len, depth, attn_mult,
      residual_mult, residual_attn_ratio, causal: as in ``unit_scaling.paper_scales``.
    pre_ln: pre-LN blocks (False: post-LN).
    learned_positions: learned position embeddings added to the token embeddings.
    rope_base: RoPE's frequency base (None: no RoPE).

  Returns:
    A ``unit_scaling.ModelScales`` of Python floats.
  """
  shape = dict(batch=batch, seq_len=seq_len, width=width, mlp_hidden=mlp_hidden, num_heads=num_heads,
               kv_heads=kv_heads, head_dim=head_dim, vocab_size=vocab_size, max_len=max_len, depth=depth,
               attn_mult=attn_mult, residual_mult=residual_mult, residual_attn_ratio=residual_attn_ratio,
               causal=causal)
  paper = unit.paper_scales(**shape)
  taus = unit.residual_taus(depth, residual_mult, residual_attn_ratio)
  forward = attention_correlation_factors(seq_len, taus, vocab_size=vocab_size, pre_ln=pre_ln,
                                          learned_positions=learned_positions, causal=causal)
  backward, (readout, final_gain, embedding) = gradient_correlation_factors(
      seq_len, taus, vocab_size=vocab_size, width=width, head_dim=head_dim, attn_mult=attn_mult, pre_ln=pre_ln,
      learned_positions=learned_positions, causal=causal, rope_base=rope_base)
  rule = dict(mult=attn_mult, causal=causal)
  weight = lambda s, factor: s._replace(grad_weight=s.grad_weight * factor)
  # q, k, v: the input gradient × forward/backward of the attention (the true one up to the constant).
  projection = lambda s, attn, grad, factor: s._replace(grad_input=s.grad_input * attn / grad,
                                                       grad_weight=s.grad_weight * factor)
  blocks = []
  for block, fwd, f in zip(paper.blocks, forward, backward):
    attn = unit.AttentionScales(corrected_attention_scale(seq_len, head_dim, correlation=fwd, **rule),
                                attention_qk_grad_scale(seq_len, head_dim, correlation=f.query, **rule),
                                attention_qk_grad_scale(seq_len, head_dim, correlation=f.key, **rule),
                                corrected_attention_scale(seq_len, head_dim, correlation=f.value, **rule))
    blocks.append(block._replace(
        attention=attn, query=projection(block.query, attn.forward, attn.q_grad, f.w_q),
        key=projection(block.key, attn.forward, attn.k_grad, f.w_k),
        value=projection(block.value, attn.forward, attn.v_grad, f.w_v), out=weight(block.out, f.w_o),
        fc_in=weight(block.fc_in, f.fc_in), fc_out=weight(block.fc_out, f.fc_out),
        ln_attn=block.ln_attn * f.ln_attn, ln_mlp=block.ln_mlp * f.ln_mlp, attn_in_grad=f.attn_in_grad))
  readout_scales = paper.readout._replace(output=width**-0.5, grad_weight=paper.readout.grad_weight * readout)
  return paper._replace(blocks=tuple(blocks), embedding=paper.embedding * embedding,
                        ln_final=paper.ln_final * final_gain, readout=readout_scales)
