"""Attention as pure functions on ``[batch, length, heads, head_dim]`` arrays: the dispatcher ``dispatch``
(``dot_product_attention``, a drop-in for jax.nn's), the implementations ``dense``, ``blockwise`` and ``pallas``,
``autotune``, ``logits`` (options, checks, the softmax), ``masking``, logit-scale ``rules``, ``rope``, per-head
``metrics`` and ``flax_adapter`` (our rules inside Flax's attention modules).

Imports: ``scaling.base`` only (no model, no training, no run plumbing).
"""
