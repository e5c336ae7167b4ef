"""Models written the way other libraries write them, as factories of the width, for the μP engine's tests.

* ``Gpt2`` (linen): Hugging Face's Flax GPT-2 layout. ``Conv1D`` layers store their kernel [features, fan_in]
  (out, in) and compute ``x @ kernel.T``; one fused ``c_attn`` kernel [3·D, D] makes q, k and v; GPT-2's
  initializer (normal, std 0.02) everywhere; the readout is the token table (``wte.attend``, tied) or, for the
  untied twin, an ``lm_head`` Dense. The head dim is fixed; heads grow with the width.
* ``Mixer`` (linen): google-research/vision_transformer's MLP-Mixer: a Conv stem (patch embedding), token-mixing
  MLPs over the (fixed) patch axis, channel-mixing MLPs of 4·D, global average pooling and a Dense head
  zero-initialized as there.
* ``ViT`` (linen): the same repository's ViT: a Conv patch embedding, a class token [1, 1, D] concatenated to the
  patches, learned positions [1, N + 1, D] added, encoder blocks of ``nn.MultiHeadDotProductAttention`` (fixed head
  dim), a head on the class token.
* ``NnxLM`` (nnx): a small language model whose ``nnx.Embed`` table is also the readout (``embed.attend``).

Each has a hand-written table of every parameter's role and fan-in axes at the base width (``ROLES``), and a loss
``loss_fn(model, batch)``.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
from flax import nnx
import jax
import jax.numpy as jnp
import optax

VOCAB, SEQ, HEAD_DIM = 32, 8, 8
IMAGE, PATCH, CHANNELS, CLASSES = 8, 4, 3, 10
GPT2_INIT = nn.initializers.normal(0.02)


class Conv1D(nn.Module):
  """Hugging Face's ``FlaxConv1D``: kernel [features, fan_in], y = x @ kernel.T + bias."""

  features: int

  @nn.compact
  def __call__(self, x):
    kernel = self.param("kernel", GPT2_INIT, (self.features, x.shape[-1]))
    bias = self.param("bias", nn.initializers.zeros, (self.features,))
    y = jax.lax.dot_general(x, kernel.transpose(), (((x.ndim - 1,), (0,)), ((), ())))
    return y + bias


class Gpt2Block(nn.Module):
  width: int

  @nn.compact
  def __call__(self, x):
    b, t, d = x.shape
    n = d // HEAD_DIM
    h = nn.LayerNorm(epsilon=1e-5, name="ln_1")(x)
    qkv = Conv1D(3 * d, name="c_attn")(h)
    q, k, v = (y.reshape(b, t, n, HEAD_DIM) for y in jnp.split(qkv, 3, axis=-1))
    logits = jnp.einsum("bqnh,bknh->bnqk", q, k) / jnp.sqrt(HEAD_DIM).astype(x.dtype)
    mask = jnp.tril(jnp.ones((t, t), bool))
    weights = jax.nn.softmax(jnp.where(mask, logits, -1e9), axis=-1)
    ctx = jnp.einsum("bnqk,bknh->bqnh", weights, v).reshape(b, t, d)
    x = x + Conv1D(d, name="c_proj")(ctx)
    h = nn.LayerNorm(epsilon=1e-5, name="ln_2")(x)
    h = nn.gelu(Conv1D(4 * d, name="c_fc")(h))
    return x + Conv1D(d, name="mlp_c_proj")(h)


class Gpt2(nn.Module):
  """GPT-2 (tied: the token table is the readout; ``tied=False``: an ``lm_head`` Dense)."""

  width: int
  depth: int = 2
  tied: bool = True

  @nn.compact
  def __call__(self, tokens):
    wte = nn.Embed(VOCAB, self.width, embedding_init=GPT2_INIT, name="wte")
    x = wte(tokens) + nn.Embed(SEQ, self.width, embedding_init=GPT2_INIT, name="wpe")(jnp.arange(tokens.shape[1]))
    for i in range(self.depth):
      x = Gpt2Block(self.width, name=f"h_{i}")(x)
    x = nn.LayerNorm(epsilon=1e-5, name="ln_f")(x)
    if self.tied:
      return wte.attend(x)
    return nn.Dense(VOCAB, use_bias=False, kernel_init=GPT2_INIT, name="lm_head")(x)


def lm_loss(model, batch):
  """Next-token cross-entropy."""
  logits = model(batch["inputs"])
  return optax.softmax_cross_entropy_with_integer_labels(logits, batch["targets"]).mean()


def lm_batch(key, batch_size=4):
  tokens = jax.random.randint(key, (batch_size, SEQ + 1), 0, VOCAB)
  return {"inputs": tokens[:, :-1], "targets": tokens[:, 1:]}


def _gpt2_roles(tied):
  roles = {"wpe/embedding": ("embedding", (0,)), "ln_f/scale": ("norm", None), "ln_f/bias": ("bias", None),
           "wte/embedding": ("embedding", (0,))}
  for i in range(2):
    roles.update({f"h_{i}/ln_1/scale": ("norm", None), f"h_{i}/ln_1/bias": ("bias", None),
                  f"h_{i}/ln_2/scale": ("norm", None), f"h_{i}/ln_2/bias": ("bias", None)})
    for name in ("c_attn", "c_proj", "c_fc", "mlp_c_proj"):  # (out, in): the fan-in is axis 1
      roles.update({f"h_{i}/{name}/kernel": ("hidden", (1,)), f"h_{i}/{name}/bias": ("bias", None)})
  if not tied:
    roles["lm_head/kernel"] = ("readout", (0,))
  return roles


class MlpBlock(nn.Module):
  mlp_dim: int

  @nn.compact
  def __call__(self, x):
    y = nn.gelu(nn.Dense(self.mlp_dim)(x))
    return nn.Dense(x.shape[-1])(y)


class MixerBlock(nn.Module):
  tokens_mlp_dim: int
  channels_mlp_dim: int

  @nn.compact
  def __call__(self, x):
    y = nn.LayerNorm()(x)
    y = jnp.swapaxes(y, 1, 2)
    y = MlpBlock(self.tokens_mlp_dim, name="token_mixing")(y)
    y = jnp.swapaxes(y, 1, 2)
    x = x + y
    y = nn.LayerNorm()(x)
    return x + MlpBlock(self.channels_mlp_dim, name="channel_mixing")(y)


class Mixer(nn.Module):
  """MLP-Mixer: the token-mixing MLP acts over the patch axis (fixed), the channel-mixing one over D."""

  width: int
  depth: int = 2
  tokens_mlp_dim: int = 8

  @nn.compact
  def __call__(self, images):
    x = nn.Conv(self.width, (PATCH, PATCH), strides=(PATCH, PATCH), name="stem")(images)
    n, h, w, c = x.shape
    x = x.reshape(n, h * w, c)
    for i in range(self.depth):
      x = MixerBlock(self.tokens_mlp_dim, 4 * self.width, name=f"MixerBlock_{i}")(x)
    x = nn.LayerNorm(name="pre_head_layer_norm")(x)
    return nn.Dense(CLASSES, kernel_init=nn.initializers.zeros, name="head")(jnp.mean(x, axis=1))


def _mixer_roles():
  roles = {"stem/kernel": ("input", (0, 1, 2)), "stem/bias": ("bias", None),
           "pre_head_layer_norm/scale": ("norm", None), "pre_head_layer_norm/bias": ("bias", None),
           "head/kernel": ("readout", (0,)), "head/bias": ("fixed", None)}
  for i in range(2):
    p = f"MixerBlock_{i}"
    roles.update({f"{p}/LayerNorm_0/scale": ("norm", None), f"{p}/LayerNorm_0/bias": ("bias", None),
                  f"{p}/LayerNorm_1/scale": ("norm", None), f"{p}/LayerNorm_1/bias": ("bias", None),
                  # the token-mixing MLP over the patches: no axis grows (a finite matrix)
                  f"{p}/token_mixing/Dense_0/kernel": ("fixed", (0,)), f"{p}/token_mixing/Dense_0/bias": ("fixed", None),
                  f"{p}/token_mixing/Dense_1/kernel": ("fixed", (0,)), f"{p}/token_mixing/Dense_1/bias": ("fixed", None),
                  f"{p}/channel_mixing/Dense_0/kernel": ("hidden", (0,)),
                  f"{p}/channel_mixing/Dense_0/bias": ("bias", None),
                  f"{p}/channel_mixing/Dense_1/kernel": ("hidden", (0,)),
                  f"{p}/channel_mixing/Dense_1/bias": ("bias", None)})
  return roles


class Encoder1DBlock(nn.Module):
  width: int

  @nn.compact
  def __call__(self, x):
    y = nn.LayerNorm()(x)
    y = nn.MultiHeadDotProductAttention(num_heads=self.width // HEAD_DIM, name="MultiHeadDotProductAttention_0")(y, y)
    x = x + y
    y = nn.LayerNorm()(x)
    return x + MlpBlock(4 * self.width, name="MlpBlock_3")(y)


class ViT(nn.Module):
  """ViT: Conv patch embedding, class token, learned positions, attention blocks, a head on the class token."""

  width: int
  depth: int = 2

  @nn.compact
  def __call__(self, images):
    x = nn.Conv(self.width, (PATCH, PATCH), strides=(PATCH, PATCH), name="embedding")(images)
    n, h, w, c = x.shape
    x = x.reshape(n, h * w, c)
    cls = self.param("cls", nn.initializers.zeros, (1, 1, c))
    x = jnp.concatenate([jnp.tile(cls, [n, 1, 1]), x], axis=1)
    pe = self.param("pos_embedding", nn.initializers.normal(stddev=0.02), (1, x.shape[1], c))
    x = x + pe
    for i in range(self.depth):
      x = Encoder1DBlock(self.width, name=f"encoderblock_{i}")(x)
    x = nn.LayerNorm(name="encoder_norm")(x)
    return nn.Dense(CLASSES, name="head")(x[:, 0])


def _vit_roles():
  roles = {"embedding/kernel": ("input", (0, 1, 2)), "embedding/bias": ("bias", None),
           "cls": ("embedding", (0, 1)), "pos_embedding": ("embedding", (0, 1)),
           "encoder_norm/scale": ("norm", None), "encoder_norm/bias": ("bias", None),
           "head/kernel": ("readout", (0,)), "head/bias": ("fixed", None)}
  for i in range(2):
    p = f"encoderblock_{i}"
    a = f"{p}/MultiHeadDotProductAttention_0"
    roles.update({f"{p}/LayerNorm_0/scale": ("norm", None), f"{p}/LayerNorm_0/bias": ("bias", None),
                  f"{p}/LayerNorm_1/scale": ("norm", None), f"{p}/LayerNorm_1/bias": ("bias", None),
                  f"{a}/query/kernel": ("hidden", (0,)), f"{a}/key/kernel": ("hidden", (0,)),
                  f"{a}/value/kernel": ("hidden", (0,)), f"{a}/out/kernel": ("hidden", (0, 1)),
                  f"{a}/query/bias": ("bias", None), f"{a}/key/bias": ("bias", None),
                  f"{a}/value/bias": ("bias", None), f"{a}/out/bias": ("bias", None),
                  f"{p}/MlpBlock_3/Dense_0/kernel": ("hidden", (0,)), f"{p}/MlpBlock_3/Dense_0/bias": ("bias", None),
                  f"{p}/MlpBlock_3/Dense_1/kernel": ("hidden", (0,)), f"{p}/MlpBlock_3/Dense_1/bias": ("bias", None)})
  return roles


def image_loss(model, batch):
  """Softmax cross-entropy of the class logits."""
  return optax.softmax_cross_entropy_with_integer_labels(model(batch["images"]), batch["labels"]).mean()


def image_batch(key, batch_size=4):
  k1, k2 = jax.random.split(key)
  return {"images": jax.random.normal(k1, (batch_size, IMAGE, IMAGE, CHANNELS)),
          "labels": jax.random.randint(k2, (batch_size,), 0, CLASSES)}


class NnxBlock(nnx.Module):

  def __init__(self, width, rngs):
    self.norm = nnx.RMSNorm(width, rngs=rngs)
    self.fc_in = nnx.Linear(width, 4 * width, rngs=rngs)
    self.fc_out = nnx.Linear(4 * width, width, rngs=rngs)

  def __call__(self, x):
    return x + self.fc_out(nnx.gelu(self.fc_in(self.norm(x))))


class NnxLM(nnx.Module):
  """An nnx language model whose token table is also the readout."""

  def __init__(self, width, rngs, depth=2):
    self.embed = nnx.Embed(VOCAB, width, rngs=rngs)
    self.blocks = nnx.List([NnxBlock(width, rngs) for _ in range(depth)])
    self.norm = nnx.RMSNorm(width, rngs=rngs)

  def __call__(self, tokens):
    x = self.embed(tokens)
    for block in self.blocks:
      x = block(x)
    return self.embed.attend(self.norm(x))


def _nnx_roles():
  roles = {"embed/embedding": ("embedding", (0,)), "norm/scale": ("norm", None)}
  for i in range(2):
    roles.update({f"blocks/{i}/norm/scale": ("norm", None), f"blocks/{i}/fc_in/kernel": ("hidden", (0,)),
                  f"blocks/{i}/fc_in/bias": ("bias", None), f"blocks/{i}/fc_out/kernel": ("hidden", (0,)),
                  f"blocks/{i}/fc_out/bias": ("bias", None)})
  return roles


# name -> (factory of the width, loss, batch maker, hand-written {path: (kind, fan-in axes)}, tied path or None)
MODELS: dict[str, tuple[Any, Any, Any, dict[str, tuple[str, Any]], str | None]] = {
    "gpt2_tied": (lambda w: Gpt2(w), lm_loss, lm_batch, _gpt2_roles(True), "wte/embedding"),
    "gpt2_untied": (lambda w: Gpt2(w, tied=False), lm_loss, lm_batch, _gpt2_roles(False), None),
    "mixer": (lambda w: Mixer(w), image_loss, image_batch, _mixer_roles(), None),
    "vit": (lambda w: ViT(w), image_loss, image_batch, _vit_roles(), None),
    "nnx_tied": (lambda w, rngs: NnxLM(w, rngs), lm_loss, lm_batch, _nnx_roles(), "embed/embedding"),
}
