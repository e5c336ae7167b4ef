"""Attention autotune: the cache key, the on-disk cache, and implementation="auto" dispatching on both sides."""

import json
import os
import pathlib
from unittest import mock

from absl.testing import absltest
import chex
import jax
import jax.numpy as jnp

from scaling.attention import dispatch as attention
from scaling.attention import logits as logits_lib
from scaling.attention import autotune
from scaling.attention import blockwise

Q_SHAPE, K_SHAPE = (1, 256, 2, 16), (1, 256, 1, 16)  # S = BLOCKWISE_MIN_KV_LEN: the smallest tuned case


def _opts(**kwargs):
  options = dict(scale=None, rule=None, logit_soft_cap=None, logit_clamp=None, float32_softmax=True,
                 subtract_max=True)
  return logits_lib.resolve_logit_options(16, **{**options, **kwargs})


FIXED_CHOICE = attention.select_implementation(Q_SHAPE, K_SHAPE, _opts(), is_causal=True)
FIXED = attention.fixed_tiles(FIXED_CHOICE)[0]
"""The fixed rule's tile under differentiation for these shapes, whatever its limits."""


def _inputs():
  keys = jax.random.split(jax.random.PRNGKey(3), 3)
  return tuple(jax.random.normal(k, s) for k, s in zip(keys, (Q_SHAPE, K_SHAPE, K_SHAPE)))


def _key(**kwargs):
  return autotune.cache_key(Q_SHAPE, K_SHAPE, jnp.float32, _opts(), is_causal=True, **kwargs)


class AutotuneTest(chex.TestCase):

  def setUp(self):
    super().setUp()
    self.path = self.create_tempdir().full_path + "/tune.json"
    # The cache file through the library's own override, not the environment: restoring os.environ after a test
    # rewrites every variable with setenv, which can crash a process whose XLA threads read the environment.
    self.enter_context(autotune.cache_file(self.path))
    self.blocks = []  # (block_q, block_k) of every blockwise call traced (the public function's and the dispatcher's)
    real = blockwise.blockwise_attention_unchecked

    def spy(*args, **kwargs):
      self.blocks.append((kwargs.get("block_q"), kwargs.get("block_k")))
      return real(*args, **kwargs)
    self.enter_context(mock.patch.object(blockwise, "blockwise_attention_unchecked", spy))

  def _store_choice(self, impl, bq=None, bk=None):
    autotune.store(_key(), {"choice": {"implementation": impl, "block_q": bq, "block_k": bk}})

  def _fake_measure(self, fastest, fastest_forward=None):
    """A measure that times nothing: ``fastest`` takes 1 ms, the others 2; counts its calls.

    Timing the forward pass alone, ``fastest_forward`` (default: ``fastest``) takes 1 ms instead.
    """
    calls = []

    def measure(choices, *args, differentiated=True, **kwargs):
      calls.append([autotune.choice_name(c) for c in choices])
      best = fastest if differentiated or fastest_forward is None else fastest_forward
      return {autotune.choice_name(c): 1e-3 if autotune.choice_name(c) == best else 2e-3 for c in choices}
    self.enter_context(mock.patch.object(autotune, "measure", measure))
    return calls

  def _auto(self, implementation="auto"):
    """Gradients of a jitted call (differentiated, the fixed rule's small causal blockwise runs blockwise)."""
    q, k, v = _inputs()
    loss = lambda q, k, v: jnp.sum(attention.dot_product_attention(q, k, v, is_causal=True,
                                                                   implementation=implementation))
    return jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(q, k, v)

  def test_key_is_stable_and_names_the_case(self):
    self.assertEqual(_key(), _key())
    self.assertEqual(autotune.cache_key(list(Q_SHAPE), list(K_SHAPE), "float32", _opts(), is_causal=True), _key())
    variants = [
        _key(),
        autotune.cache_key(Q_SHAPE, K_SHAPE, jnp.bfloat16, _opts(), is_causal=True),
        autotune.cache_key(Q_SHAPE, K_SHAPE, jnp.float32, _opts(), is_causal=False),
        autotune.cache_key((2, 256, 2, 16), (2, 256, 1, 16), jnp.float32, _opts(), is_causal=True),
        autotune.cache_key(Q_SHAPE, (1, 512, 1, 16), jnp.float32, _opts(), is_causal=True),
        autotune.cache_key(Q_SHAPE, (1, 256, 2, 16), jnp.float32, _opts(), is_causal=True),
        _key(local_window_size=8), _key(local_window_size=(8, 0)), _key(has_bias=True), _key(has_mask=True),
        _key(has_lengths=True), _key(backend="gpu", device_kind="H100"),
        autotune.cache_key(Q_SHAPE, K_SHAPE, jnp.float32, _opts(logit_soft_cap=30.0), is_causal=True),
        autotune.cache_key(Q_SHAPE, K_SHAPE, jnp.float32, _opts(logit_clamp=30.0), is_causal=True),
        autotune.cache_key(Q_SHAPE, K_SHAPE, jnp.float32, _opts(rule="qk_norm"), is_causal=True),
        autotune.cache_key(Q_SHAPE, K_SHAPE, jnp.float32, _opts(float32_softmax=False), is_causal=True),
    ]
    self.assertLen(set(variants), len(variants))
    self.assertIn("q1x256x2x16", _key())
    self.assertIn("float32", _key())

  def test_cache_round_trip_corrupt_file_and_atomic_write(self):
    self.assertEqual(autotune.load(), {})  # missing file
    entry = {"choice": {"implementation": "blockwise", "block_q": 64, "block_k": 128}, "ms": {"dense": 1.5}}
    autotune.store("a", entry)
    autotune.store("b", {"choice": {"implementation": "dense"}})
    self.assertEqual(json.loads(open(self.path).read()), {"a": entry, "b": {"choice": {"implementation": "dense"}}})
    before = open(self.path).read()
    with mock.patch.object(os, "replace", side_effect=OSError("disk full")):
      with self.assertRaises(OSError):
        autotune.store("c", entry)
    self.assertEqual(open(self.path).read(), before)  # the cache is untouched and no temporary file is left
    self.assertEqual(os.listdir(os.path.dirname(self.path)), ["tune.json"])
    with open(self.path, "w") as f:
      f.write('{"a": {"choice": ')  # cut short
    with self.assertWarnsRegex(UserWarning, "unreadable"):
      self.assertEqual(autotune.load(), {})
    other = self.create_tempdir().full_path + "/other.json"
    with autotune.cache_file(other):
      self.assertEqual(str(autotune.cache_path()), other)
      autotune.store("x", entry)
    self.assertEqual(str(autotune.cache_path()), self.path)
    self.assertEqual(autotune.load(pathlib.Path(other)), {"x": entry})

  def test_auto_runs_the_cached_choice(self):
    self._store_choice("blockwise", 64, 128)
    calls = self._fake_measure("dense")
    self._auto()
    self.assertEqual(self.blocks, [(64, 128)])
    self.assertEqual(calls, [])

  def test_auto_without_entry_tunes_once_then_hits_the_cache(self):
    calls = self._fake_measure("blockwise 64x128")
    self._auto()
    self._auto()  # a second program (a new jit) of the same case
    q, k, v = _inputs()
    attention.dot_product_attention(q, k, v, is_causal=True, implementation="auto")
    paths = autotune.candidates_for(Q_SHAPE, K_SHAPE, None, attention.fixed_tiles(FIXED_CHOICE))
    candidates = [autotune.choice_name(c) for c in paths]
    self.assertIn("blockwise {}x{}".format(*FIXED), candidates)  # the fixed rule's tile is a candidate
    self.assertLen(set(candidates), len(candidates))
    self.assertTrue(all(c.block_q <= Q_SHAPE[1] and c.block_k <= K_SHAPE[1] for c in paths if c.block_q))  # fit T, S
    self.assertEqual(calls, [candidates, candidates])  # one tuning: forward+backward, then forward alone
    self.assertEqual(self.blocks, [(64, 128)] * 3)
    self.assertEqual(autotune.load()[_key()]["choice"],
                     {"implementation": "blockwise", "block_q": 64, "block_k": 128})
    self.assertEqual(autotune.load()[_key()]["jax"], jax.__version__)

  def test_auto_tunes_the_forward_alone_and_runs_it_when_not_differentiated(self):
    calls = self._fake_measure("blockwise 64x128", fastest_forward="blockwise 128x256")
    q, k, v = _inputs()
    self._auto()  # tunes: the choice is 64x128 with a forward of its own, 128x256
    self.assertLen(calls, 2)
    self.assertEqual(autotune.load()[_key()]["choice"], {
        "implementation": "blockwise", "block_q": 64, "block_k": 128,
        "forward": {"implementation": "blockwise", "block_q": 128, "block_k": 256}})
    choice = attention.auto_choice(Q_SHAPE, K_SHAPE, jnp.float32, _opts(), is_causal=True, local_window_size=None,
                                   has_bias=False, has_mask=False, has_lengths=False, return_weights=False)
    self.assertEqual(autotune.choice_name(choice), "blockwise 64x128, forward blockwise 128x256")
    self.blocks.clear()
    out = jax.jit(lambda q, k, v: attention.dot_product_attention(q, k, v, is_causal=True, implementation="auto"))(
        q, k, v)
    self.assertEqual(self.blocks, [(128, 256)])  # alone: the forward's tile
    chex.assert_trees_all_close(out, jax.nn.dot_product_attention(q, k, v, is_causal=True), atol=1e-5)
    self.blocks.clear()
    self._auto()
    self.assertEqual(self.blocks[-1], (64, 128))  # differentiated: the choice's own tile, forward and backward
    self.assertNotIn((128, 256), self.blocks)
    self.assertLen(calls, 2)  # no further tuning
    self._store_choice("blockwise", 64, 128)
    autotune.store(_key(), {"choice": {"implementation": "blockwise", "block_q": 64, "block_k": 128,
                                       "forward": {"implementation": "blockwise", "block_q": 512, "block_k": 512}}})
    self.blocks.clear()
    with self.assertWarnsRegex(UserWarning, "malformed or its tile does not fit"):
      self._auto()  # a forward tile larger than T = S = 256: the entry is unusable
    self.assertEqual(self.blocks, [FIXED])

  def test_tuned_dense_forward_keeps_its_tiles_where_the_call_cannot_split(self):
    # S = 256: a tuned "blockwise 64x128, forward dense" with a residual requested (as the model's attention="auto"
    # asks) runs its blockwise tile, not dense (only the fixed rule's S < 256 choices fall back to dense).
    autotune.store(_key(), {"choice": {"implementation": "blockwise", "block_q": 64, "block_k": 128,
                                       "forward": {"implementation": "dense"}}})
    q, k, v = _inputs()
    out, lse = jax.jit(lambda q, k, v: attention.dot_product_attention(
        q, k, v, is_causal=True, implementation="auto", return_residual=True))(q, k, v)
    self.assertEqual(self.blocks, [(64, 128)])
    chex.assert_trees_all_close(out, jax.nn.dot_product_attention(q, k, v, is_causal=True), atol=1e-5)

  def test_default_ignores_the_cache(self):
    self._store_choice("blockwise", 64, 128)
    calls = self._fake_measure("dense")
    self._auto(implementation=None)
    self.assertEqual(self.blocks, [FIXED])
    self.assertEqual(calls, [])

  def test_bad_entry_falls_back_to_the_fixed_rule(self):
    self._store_choice("blockwise", 512, 512)  # larger than T = S = 256
    calls = self._fake_measure("dense")
    with self.assertWarnsRegex(UserWarning, "does not fit"):
      self._auto()
    self.assertEqual(self.blocks, [FIXED])
    self.assertEqual(calls, [])

  def test_nothing_to_tune_uses_the_fixed_rule(self):
    calls = self._fake_measure("blockwise 64x128")
    q, k, v = _inputs()
    short = jax.jit(lambda q, k, v: attention.dot_product_attention(q[:, :128], k[:, :128], v[:, :128],
                                                                    is_causal=True, implementation="auto"))(
                                                                        q, k, v)  # S < BLOCKWISE_MIN_KV_LEN: dense
    masked = jax.jit(lambda q, k, v: attention.dot_product_attention(
        q, k, v, mask=jnp.ones((256, 256), bool), is_causal=True, implementation="auto"))(q, k, v)
    self.assertEqual(calls, [])
    self.assertEqual(self.blocks, [FIXED])
    chex.assert_trees_all_close(short, jax.nn.dot_product_attention(q[:, :128], k[:, :128], v[:, :128],
                                                                    is_causal=True), atol=1e-5)
    chex.assert_trees_all_close(masked, jax.nn.dot_product_attention(q, k, v, is_causal=True), atol=1e-5)

  def test_auto_measures_under_jit_and_grad_and_matches_jax_nn(self):
    self.enter_context(mock.patch.object(autotune, "TILE_CANDIDATES", ((64, 128),)))
    self.enter_context(mock.patch.object(autotune, "DENSE_MAX_TUNE_LOGITS", 0))  # no dense candidate
    self.enter_context(mock.patch.object(autotune, "REPEATS", 1))
    q, k, v = _inputs()
    ct = jax.random.normal(jax.random.PRNGKey(4), Q_SHAPE)

    def loss(fn):
      return jax.jit(jax.value_and_grad(lambda q, k, v: jnp.vdot(fn(q, k, v), ct), argnums=(0, 1, 2)))

    ours = loss(lambda q, k, v: attention.dot_product_attention(q, k, v, is_causal=True, implementation="auto"))
    expected = loss(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True))(q, k, v)
    chex.assert_trees_all_close(ours(q, k, v), expected, atol=2e-5, rtol=2e-5)
    entry = autotune.load()[_key()]
    self.assertEqual(set(entry["ms"]), {"blockwise 64x128", "blockwise {}x{}".format(*FIXED)})
    self.assertEqual(set(entry["forward_ms"]), set(entry["ms"]))  # the forward alone, timed too
    self.assertTrue(all(ms > 0 for ms in [*entry["ms"].values(), *entry["forward_ms"].values()]))
    best = min(entry["ms"], key=entry["ms"].get)
    self.assertEqual(self.blocks[-1], tuple(int(n) for n in best.split()[1].split("x")))


if __name__ == "__main__":
  absltest.main()
