"""A small flax.nnx transformer built from nnx.MultiHeadAttention on a text file, made μP from its shapes,
coordinate-checked and transferred (the model of ``examples.linen_transformer`` in nnx).

  python -m examples.nnx_transformer --text_file=shakespeare
"""

from __future__ import annotations

import sys
from typing import Any, Callable

from flax import nnx
import jax.numpy as jnp

import scaling
from examples import common
from examples import linen_transformer
from scaling.training.data.config import DataConfig


class Block(nnx.Module):
  """x + attn(LN(x)), then x + MLP(LN(x))."""

  def __init__(self, width: int, num_heads: int, attention_fn: Callable[..., Any], rngs: nnx.Rngs):
    self.ln_attn = nnx.LayerNorm(width, rngs=rngs)
    self.attn = nnx.MultiHeadAttention(num_heads, width, qkv_features=width, attention_fn=attention_fn,
                                       decode=False, rngs=rngs)
    self.ln_mlp = nnx.LayerNorm(width, rngs=rngs)
    self.mlp_in = nnx.Linear(width, 4 * width, rngs=rngs)
    self.mlp_out = nnx.Linear(4 * width, width, rngs=rngs)

  def __call__(self, x):
    mask = nnx.make_causal_mask(jnp.ones(x.shape[:2], jnp.int32))
    x = x + self.attn(self.ln_attn(x), mask=mask)
    return x + self.mlp_out(nnx.gelu(self.mlp_in(self.ln_mlp(x))))


class TinyLM(nnx.Module):
  """Token and position embeddings, ``depth`` blocks, a final LayerNorm and a Linear readout."""

  def __init__(self, width: int, vocab_size: int, seq_len: int, depth: int, num_heads: int,
               attention_fn: Callable[..., Any], rngs: nnx.Rngs):
    self.embed = nnx.Embed(vocab_size, width, rngs=rngs)
    self.pos = nnx.Embed(seq_len, width, rngs=rngs)
    self.blocks = nnx.List([Block(width, num_heads, attention_fn, rngs) for _ in range(depth)])
    self.ln_final = nnx.LayerNorm(width, rngs=rngs)
    self.readout = nnx.Linear(width, vocab_size, rngs=rngs)

  def __call__(self, tokens):
    x = self.embed(tokens) + self.pos(jnp.arange(tokens.shape[1]))
    for block in self.blocks:
      x = block(x)
    return self.readout(self.ln_final(x))


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
    attention_fn = linen_transformer.attention_for(scheme, args.base_width, args.num_heads)
    return lambda width, rngs: TinyLM(width, data.vocab_size, args.seq_len, args.depth, args.num_heads,
                                      attention_fn, rngs)

  return common.main("nnx_transformer", args, model_for, linen_transformer.loss_fn, data.batch,
                     overrides=scaling.FLAX_ATTENTION, data=f"{data.name} `{args.text_file.rsplit('/', 1)[-1]}`")


if __name__ == "__main__":
  main(sys.argv[1:])
