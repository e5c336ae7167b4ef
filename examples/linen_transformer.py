"""A small flax.linen transformer built from nn.MultiHeadDotProductAttention on a text file, made μP from its
shapes, coordinate-checked and transferred.

  python -m examples.linen_transformer --text_file=shakespeare

Character-level language modelling (``scaling.training.data.text_corpus``); pre-LayerNorm blocks of Flax's attention
(causal, a fixed number of heads, so the head dim grows with the width) and a GELU MLP of 4x the width. Under μP the
attention takes ``scaling.make_attention_fn`` with the linear rule α/d_head, α = √(base head dim) so that μP equals
SP at the base width; under SP 1/√d_head (Flax's default).
"""

from __future__ import annotations

import sys
from typing import Any, Callable

import flax.linen as nn
import jax.numpy as jnp

import scaling
from examples import common
from scaling.training.loop import losses as losses_lib
from scaling.training.data.config import DataConfig


class Block(nn.Module):
  """x + attn(LN(x)), then x + MLP(LN(x))."""

  width: int
  num_heads: int
  attention_fn: Callable[..., Any]

  @nn.compact
  def __call__(self, x):
    mask = nn.make_causal_mask(jnp.ones(x.shape[:2], jnp.int32))
    h = nn.LayerNorm(name="ln_attn")(x)
    x = x + nn.MultiHeadDotProductAttention(num_heads=self.num_heads, qkv_features=self.width,
                                            attention_fn=self.attention_fn, name="attn")(h, mask=mask)
    h = nn.LayerNorm(name="ln_mlp")(x)
    h = nn.gelu(nn.Dense(4 * self.width, name="mlp_in")(h))
    return x + nn.Dense(self.width, name="mlp_out")(h)


class TinyLM(nn.Module):
  """Token and position embeddings, ``depth`` blocks, a final LayerNorm and a Dense readout."""

  width: int
  vocab_size: int
  seq_len: int
  depth: int = 2
  num_heads: int = 4
  attention_fn: Callable[..., Any] = nn.dot_product_attention

  @nn.compact
  def __call__(self, tokens):
    x = nn.Embed(self.vocab_size, self.width, name="embed")(tokens)
    x = x + nn.Embed(self.seq_len, self.width, name="pos")(jnp.arange(tokens.shape[1]))
    for i in range(self.depth):
      x = Block(self.width, self.num_heads, self.attention_fn, name=f"block_{i}")(x)
    return nn.Dense(self.vocab_size, name="readout")(nn.LayerNorm(name="ln_final")(x))


def loss_fn(model, batch):
  """Next-character cross-entropy over the scored positions."""
  return losses_lib.weighted_cross_entropy(model(batch["inputs"]), batch["targets"], batch["weights"])[0]


def attention_for(scheme: str, base_width: int, num_heads: int) -> Callable[..., Any]:
  """Under SP 1/√d_head (``rule="sqrt"`` reproduces Flax's default attention, linen's and nnx's); under μP
  α/d_head with α = √(base head dim)."""
  if scheme == "sp":
    return scaling.make_attention_fn(rule="sqrt")
  return scaling.make_attention_fn(rule=scaling.get_rule("linear", base_head_dim=base_width // num_heads))


def main(argv=None):
  p = common.parser(__doc__.splitlines()[0], transfer_steps=120, batch_size=8, log2_lrs="-11,-10,-9,-8,-7,-6,-5")
  p.set_defaults(seeds=1, coord_seeds=2)  # sized for a 2-core CPU
  p.add_argument("--text_file", required=True, help="A text file (character-level language modelling).")
  p.add_argument("--seq_len", default=32, type=int, help="Sequence length.")
  p.add_argument("--depth", default=2, type=int, help="Blocks.")
  p.add_argument("--num_heads", default=4, type=int, help="Attention heads (fixed; the head dim grows).")
  args = p.parse_args(argv)
  data = DataConfig(text_file=args.text_file, seq_len=args.seq_len, batch_size=args.batch_size).make()

  def model_for(scheme):
    attention_fn = attention_for(scheme, args.base_width, args.num_heads)
    return lambda width: TinyLM(width, data.vocab_size, args.seq_len, args.depth, args.num_heads, attention_fn)

  return common.main("linen_transformer", args, model_for, loss_fn, data.batch, overrides=scaling.FLAX_ATTENTION,
                     data=f"{data.name} `{args.text_file.rsplit('/', 1)[-1]}`")


if __name__ == "__main__":
  main(sys.argv[1:])
