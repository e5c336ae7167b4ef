"""Each public attention and metrics function checks its arguments once, at its start; what it calls trusts them.

The checks are counted by wrapping the check functions of ``scaling.base.validation``, ``scaling.attention.logits``,
``scaling.attention.metrics`` and ``scaling.attention.blockwise`` (modules call them through the module, so the wrappers see every call).
A call is traced with ``jax.eval_shape``: the checks run while tracing, so nothing is computed.
"""

from __future__ import annotations

import collections
import contextlib
import functools
from typing import Iterator

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp

from scaling.attention import dispatch as attention
from scaling.attention import blockwise
from scaling.attention import dense as dense_attention
from scaling.attention import logits
from scaling.attention import metrics
from scaling.attention import pallas as pallas_attention
from scaling.base import validation
from scaling.studies import sweep

CHECKS = {
    validation: tuple(name for name in dir(validation) if name.startswith("check_")),
    logits: ("check_qkv", "check_attention_args", "check_flags", "check_scores", "resolve_logit_options"),
    metrics: ("check_metric_inputs",),
    blockwise: ("check_blocks", "check_softmax"),
}
ONCE_PER_CALL = ("logits.check_qkv", "logits.check_attention_args", "logits.resolve_logit_options")
RULE_HEAD_DIM = ("validation.check_positive_int", "head_dim")
"""A rule's ``logit_scale`` and ``weight_scale`` each check the head dim they are given (a rule's own contract, as
users call them too): the one check that may run twice while the options are resolved."""


@contextlib.contextmanager
def counted() -> Iterator[collections.Counter]:
  """Counts the calls of every check while the block runs: (module.function,) or, for ``scaling.base.validation``'s
  checks, (module.function, the argument's name)."""
  counts = collections.Counter()
  originals = []
  for module, names in CHECKS.items():
    short = module.__name__.split(".")[-1]
    for name in names:
      original = getattr(module, name)

      @functools.wraps(original)
      def wrapper(*args, _original=original, _key=f"{short}.{name}", _named=module is validation, **kwargs):
        counts[(_key, args[0]) if _named and args and isinstance(args[0], str) else (_key,)] += 1
        return _original(*args, **kwargs)

      originals.append((module, name, original))
      setattr(module, name, wrapper)
  try:
    yield counts
  finally:
    for module, name, original in originals:
      setattr(module, name, original)


B, T, N, K, H = 2, 8, 4, 2, 16
Q = jax.ShapeDtypeStruct((B, T, N, H), jnp.float32)
KV = jax.ShapeDtypeStruct((B, T, K, H), jnp.float32)
LONG_Q, LONG_KV = jax.ShapeDtypeStruct((1, 512, 2, 16), jnp.float32), jax.ShapeDtypeStruct((1, 512, 2, 16), jnp.float32)
BIAS = jax.ShapeDtypeStruct((B, N, T, T), jnp.float32)
MASK = jax.ShapeDtypeStruct((1, 1, T, T), jnp.bool_)
BNTS = jax.ShapeDtypeStruct((B, N, T, T), jnp.float32)


def _grad(fn):
  """The gradient of sum(fn(q, k, v)) with respect to q, k and v."""
  return jax.grad(lambda q, k, v: jnp.sum(fn(q, k, v)), argnums=(0, 1, 2))


CALLS = (
    ("dpa_default", attention.dot_product_attention, (Q, KV, KV), {}),
    ("dpa_dense_bias_mask", lambda q, k, v, b, m: attention.dot_product_attention(
        q, k, v, b, m, is_causal=True, implementation="dense"), (Q, KV, KV, BIAS, MASK), {}),
    ("dpa_blockwise", functools.partial(attention.dot_product_attention, implementation="blockwise", is_causal=True),
     (Q, KV, KV), {}),
    ("dpa_long_split_forward", functools.partial(attention.dot_product_attention, is_causal=True),
     (LONG_Q, LONG_KV, LONG_KV), {}),
    ("dpa_long_split_grad", _grad(functools.partial(attention.dot_product_attention, is_causal=True)),
     (LONG_Q, LONG_KV, LONG_KV), {}),
    ("dpa_pallas", functools.partial(attention.dot_product_attention, implementation="pallas", is_causal=True),
     (Q, KV, KV), {}),
    ("pallas_attention", functools.partial(pallas_attention.pallas_attention, block_q=4, block_k=4), (Q, KV, KV), {}),
    ("dpa_unbatched", attention.dot_product_attention, (jax.ShapeDtypeStruct((T, N, H), jnp.float32),
                                                        jax.ShapeDtypeStruct((T, K, H), jnp.float32),
                                                        jax.ShapeDtypeStruct((T, K, H), jnp.float32)), {}),
    ("attention_with_aux", functools.partial(dense_attention.attention_with_aux, rule="qk_norm"), (Q, KV, KV), {}),
    ("dense_attention", functools.partial(dense_attention.dense_attention, return_residual=True), (Q, KV, KV), {}),
    ("blockwise_attention", functools.partial(blockwise.blockwise_attention, block_q=4, block_k=4, rule="linear"),
     (Q, KV, KV), {}),
    ("blockwise_grad", _grad(functools.partial(blockwise.blockwise_attention, block_q=4, block_k=4)), (Q, KV, KV),
     {}),
    ("attention_metrics_per_head", functools.partial(metrics.attention_metrics_per_head, is_causal=True),
     (Q, KV, KV, Q), {}),
    ("blockwise_attention_metrics_per_head", functools.partial(metrics.blockwise_attention_metrics_per_head,
                                                               block_q=4, block_k=4, is_causal=True),
     (Q, KV, KV, Q), {}),
    ("weight_stats_per_head", metrics.weight_stats_per_head, (BNTS, MASK), {}),
    ("logit_stats_per_head", metrics.logit_stats_per_head, (BNTS,), {}),
)


class ValidationOnceTest(parameterized.TestCase):

  def assert_each_check_once(self, counts: collections.Counter, calls: int = 1):
    """Every check ran ``calls`` times (once per public call), the checks of ``ONCE_PER_CALL`` among them."""
    self.assertNotEmpty(counts)
    for key, count in counts.items():
      self.assertEqual(count, 2 * calls if key == RULE_HEAD_DIM else calls, (key, dict(counts)))

  @parameterized.named_parameters(*CALLS)
  def test_a_public_call_checks_each_argument_once(self, fn, args, kwargs):
    with counted() as counts:
      jax.eval_shape(functools.partial(fn, **kwargs), *args)
    self.assert_each_check_once(counts)
    if fn not in (metrics.weight_stats_per_head, metrics.logit_stats_per_head):
      for key in ONCE_PER_CALL:
        self.assertEqual(counts[(key,)], 1, (key, dict(counts)))
      for name in ("query", "key", "value", "is_causal"):
        self.assertIn(("validation.check_floating" if name != "is_causal" else "validation.check_bool", name),
                      counts)
    else:
      self.assertEqual(counts[("logits.check_scores",)], 1)

  def test_the_counter_sees_a_repeated_check(self):
    def twice(q, k, v):
      return dense_attention.attention_with_aux(q, k, v)[0] + dense_attention.attention_with_aux(q, k, v)[0]

    with counted() as counts:
      jax.eval_shape(twice, Q, KV, KV)
    self.assert_each_check_once(counts, calls=2)
    with self.assertRaises(AssertionError):
      self.assert_each_check_once(counts)

  def test_bad_input_is_still_refused_by_name(self):
    with self.assertRaisesRegex(TypeError, "cotangent must have a floating dtype"):
      metrics.attention_metrics_per_head(jnp.ones((2, 8, 4, 16)), jnp.ones((2, 8, 2, 16)), jnp.ones((2, 8, 2, 16)),
                                         jnp.ones((2, 8, 4, 16), jnp.int32))
    with self.assertRaisesRegex(ValueError, "mask of shape"):
      metrics.attention_metrics_per_head(jnp.ones((2, 8, 4, 16)), jnp.ones((2, 8, 2, 16)), jnp.ones((2, 8, 2, 16)),
                                         jnp.ones((2, 8, 4, 16)), mask=jnp.ones((8, 7), bool))
    with self.assertRaisesRegex(ValueError, "block_q must be a positive integer"):
      metrics.blockwise_attention_metrics_per_head(jnp.ones((2, 8, 4, 16)), jnp.ones((2, 8, 2, 16)),
                                                   jnp.ones((2, 8, 2, 16)), jnp.ones((2, 8, 4, 16)), block_q=0)
    with self.assertRaisesRegex(ValueError, "float32_softmax=False and subtract_max=False exist only on the dense"):
      attention.dot_product_attention(jnp.ones((2, 8, 4, 16)), jnp.ones((2, 8, 2, 16)), jnp.ones((2, 8, 2, 16)),
                                      implementation="blockwise", float32_softmax=False)

  @parameterized.parameters("dense", "blockwise")
  def test_one_sweep_point_checks_its_inputs_once(self, attention_path):
    sweep.make_shape_fn.cache_clear()
    config = sweep.SweepConfig(d_k=(8,), rules=("sqrt",), qk_std=(1.0,), num_seeds=1, seq_len=(16,), batch=1,
                               attention=attention_path, block_size=8)
    with counted() as counts:
      rows = sweep.run_sweep(config)
    self.assertLen(rows, 1)
    for key in (*ONCE_PER_CALL, "metrics.check_metric_inputs"):
      self.assertEqual(counts[(key,)], 1, (key, dict(counts)))
    self.assertEqual(counts[("logits.check_scores",)], 0, dict(counts))  # the softmax and metrics trust their input
    for name in ("query", "key", "value", "cotangent"):
      self.assertEqual(counts[("validation.check_floating", name)], 1, (name, dict(counts)))


if __name__ == "__main__":
  absltest.main()
