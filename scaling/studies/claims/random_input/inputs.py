"""The random inputs of the random-input claims: iid q, k, v, outlier tokens, raw tokens of mixed scales, and
attention projections with SP's fan-in init.

The claims come from two interview-preparation notes on why attention divides its logits by √d_k
(``shared/seeds/000_ae59428f9015f76d.txt``, "note 1", and ``shared/seeds/004_383f650843b84e3b.txt``, "note 2").
Each random-input claim (``scaling.studies.claims.table.RANDOM_INPUT_CLAIMS``) is a
``scaling.studies.claims.verdicts.Claim`` whose ``measure`` draws its inputs here, in numpy from the per-seed
generators of a ``scaling.studies.claims.context.Context``, takes mean and std over its seeds, and returns only
numbers and a sentence formatted from them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from scaling.mup import schemes as parametrization_lib
from scaling.studies.claims.context import BATCH
from scaling.studies.claims.context import Context
from scaling.studies.claims.context import HEADS

NOTE_D_K = (64, 128)  # the head dims the notes name (note 1 §4, English)
TOKEN_STD_RANGE = (0.1, 10.0)  # per-token stds of raw (pre-LayerNorm) or mixed-scale inputs, log-uniform
TOKEN_OFFSET_STD = 3.0  # std of the per-token offsets of raw tokens


def iid_qkv(rng: np.random.Generator, ctx: Context, d_k: int, heads: int = HEADS) -> tuple[np.ndarray, ...]:
  """q, k, v with iid N(0, 1) entries.

  Args:
    rng: the seed's generator (``Context.rngs``).
    ctx: the context (its ``seq_len``).
    d_k: the head dim.
    heads: the number of heads.

  Returns:
    (q, k, v), float32 [BATCH, seq_len, heads, d_k] each.
  """
  return tuple(rng.standard_normal((3, BATCH, ctx.seq_len, heads, d_k), dtype=np.float32))


def with_outliers(x: jax.Array, factor: float | jax.Array) -> jax.Array:
  """The first and last tokens of ``x`` made outliers.

  Args:
    x: [B, T, N, H] queries or keys.
    factor: what the first and last tokens are multiplied by (their norm is then ``factor``× the rest's).

  Returns:
    [B, T, N, H].
  """
  scale = jnp.ones((x.shape[1],), x.dtype).at[jnp.array([0, x.shape[1] - 1])].set(factor)
  return x * scale[None, :, None, None]


def sp_spec(width: int, fan_out: int) -> parametrization_lib.LayerSpec:
  """SP's init std and forward multiplier of an attention projection.

  Args:
    width: the model width (the projection's fan-in).
    fan_out: the projection's fan-out (heads × d_k).

  Returns:
    SP's ``LayerSpec`` of the query projection at these sizes.
  """
  return parametrization_lib.get_parametrization("sp").layer("attn_q", width, fan_out, width)


def sp_weights(rng: np.random.Generator, width: int, fan_out: int, n: int = 2) -> list[np.ndarray]:
  """Attention projection weights drawn with SP's fan-in init std (``sp_spec``).

  Args:
    rng: the seed's generator.
    width: the model width (fan-in).
    fan_out: the fan-out.
    n: how many matrices.

  Returns:
    ``n`` float32 matrices [width, fan_out].
  """
  std = sp_spec(width, fan_out).init_std
  return [std * rng.standard_normal((width, fan_out), dtype=np.float32) for _ in range(n)]


def token_stds(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
  """Per-token stds, log-uniform in TOKEN_STD_RANGE.

  Args:
    rng: the seed's generator.
    shape: the shape of the stds (1 on the axes a token's entries share).

  Returns:
    float64 stds of ``shape``.
  """
  return 10.0 ** rng.uniform(*np.log10(TOKEN_STD_RANGE), shape)


def mixed_scales() -> str:
  """The per-token scales of ``token_stds``, in words (for criteria and findings).

  Returns:
    "per-token std log-uniform in [a, b]", TOKEN_STD_RANGE.
  """
  return f"per-token std log-uniform in [{TOKEN_STD_RANGE[0]:g}, {TOKEN_STD_RANGE[1]:g}]"


def raw_tokens(rng: np.random.Generator, ctx: Context, width: int) -> np.ndarray:
  """Raw (pre-LayerNorm) tokens: per-token scales of ``token_stds`` and per-token offsets ~ N(0, TOKEN_OFFSET_STD²).

  Args:
    rng: the seed's generator.
    ctx: the context (its ``seq_len``).
    width: the model width.

  Returns:
    float32 tokens [BATCH, seq_len, width].
  """
  shape = (BATCH, ctx.seq_len, 1)
  scale = token_stds(rng, shape)
  offset = TOKEN_OFFSET_STD * rng.standard_normal(shape)
  return (offset + scale * rng.standard_normal((BATCH, ctx.seq_len, width))).astype(np.float32)
