"""Tests of the training data (DataConfig, the synthetic tasks, text): oracles in plain Python, text loading, errors."""

import hashlib
import json
import os
import pathlib
import random
import tempfile
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import chex
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import jax
import jax.numpy as jnp
import numpy as np

from scaling.training.data import dataset as dataset_lib
from scaling.training import resources
from scaling.training.data import synthetic_tasks as tasks_lib
from scaling.training.data import text_corpus
from scaling.training.data.config import DataConfig

SHAKESPEARE_MD5 = "6fb458f1232090904fb40fe944165e91"
"""The md5 of Karpathy's tiny Shakespeare (char-rnn's data/tinyshakespeare/input.txt), as corpora/README.md states."""

B, T = 4, 16
# A few fixed configurations, shared by the tests so that each compiles once.
RECALL = dict(seq_len=T, batch_size=8, vocab_size=32, num_pairs=5, num_queries=2)
INDUCTION = dict(seq_len=T, batch_size=B, vocab_size=12, prefix_len=5)


def _make(task, seed=0, **options):
  """The dataset of ``DataConfig(task=task, **options)``."""
  return DataConfig(task=task, **options).make(seed)


def _np(batch):
  return {k: np.asarray(v) for k, v in batch.items()}


def _full_sequences(batch):
  """The length-(T + 1) sequences: inputs plus the last target."""
  return np.concatenate([batch["inputs"], batch["targets"][:, -1:]], axis=1)


def _check_recall_oracle(test, batch, vocab_size, num_pairs, num_queries):
  """Decodes every sequence by hand and checks the answers, ranges, padding and weights."""
  num_keys = (vocab_size - 1) // 2
  inputs, targets, weights = batch["inputs"], batch["targets"], batch["weights"]
  for row in range(inputs.shape[0]):
    seq = list(inputs[row]) + [targets[row, -1]]
    pairs = {}
    for p in range(num_pairs):
      k, v = int(seq[2 * p]), int(seq[2 * p + 1])
      test.assertBetween(k, 1, num_keys)
      test.assertBetween(v, num_keys + 1, vocab_size - 1)
      test.assertNotIn(k, pairs, "keys must be distinct within a sequence")
      pairs[k] = v
    expected_weights = [0.0] * len(inputs[row])
    for j in range(num_queries):
      pos = 2 * num_pairs + 2 * j
      query = int(inputs[row, pos])
      test.assertIn(query, pairs)
      test.assertEqual(int(targets[row, pos]), pairs[query])
      test.assertEqual(int(seq[pos + 1]), pairs[query])
      expected_weights[pos] = 1.0
    for t in range(2 * (num_pairs + num_queries), len(seq)):
      test.assertEqual(int(seq[t]), tasks_lib.PAD_TOKEN)
    np.testing.assert_array_equal(weights[row], np.array(expected_weights, np.float32))


def _check_induction_oracle(test, batch, vocab_size, prefix_len, distinct):
  """For each scored position, finds the earlier occurrence of the input token and checks the target follows it."""
  inputs, targets, weights = batch["inputs"], batch["targets"], batch["weights"]
  for row in range(inputs.shape[0]):
    seq = [int(x) for x in inputs[row]] + [int(targets[row, -1])]
    prefix = seq[:prefix_len]
    test.assertTrue(all(0 <= x < vocab_size for x in seq))
    if distinct:
      test.assertLen(set(prefix), prefix_len)
    for t in range(len(inputs[row])):
      scored = t >= prefix_len
      test.assertEqual(float(weights[row, t]), 1.0 if scored else 0.0)
      if scored:
        test.assertEqual(seq[t], prefix[(t - prefix_len) % prefix_len])  # the repeat equals the prefix
        if distinct:
          earlier = seq[:t].index(seq[t])
          test.assertEqual(int(targets[row, t]), seq[earlier + 1])


class SyntheticTest(chex.TestCase, parameterized.TestCase):

  def test_recall_answers_match_oracle(self):
    ds = _make("recall", **RECALL)
    for step in range(3):
      _check_recall_oracle(self, _np(ds.batch(step, seed=1)), 32, 5, 2)
    _check_recall_oracle(self, _np(ds.eval_batch(0)), 32, 5, 2)

  def test_recall_default_fills_sequence(self):
    ds = _make("recall", seq_len=T, batch_size=B)
    # The (T + 1) // 2 slots are shared evenly between pairs and queries.
    slots = (T + 1) // 2
    self.assertEqual((ds.num_pairs, ds.num_queries, ds.vocab_size), (slots - slots // 2, slots // 2, 64))
    summary = json.loads(json.dumps(dataset_lib.describe(ds)))
    self.assertEqual(summary, {"name": "recall", "seq_len": T, "batch_size": B, "vocab_size": 64,
                               "seed": 0, "num_pairs": 4, "num_queries": 4,
                               "chance_accuracy": 1 / 32})
    _check_recall_oracle(self, _np(ds.batch(0)), 64, ds.num_pairs, ds.num_queries)

  def test_recall_query_spread_and_chance(self):
    ds = _make("recall", **RECALL)
    b = _np(jax.tree.map(lambda *x: jnp.concatenate(x), *[ds.batch(s) for s in range(128)]))
    self.assertLen(b["inputs"], 1024)
    context = list(range(0, 10, 2))
    which = [list(b["inputs"][r, context]).index(b["inputs"][r, pos])
             for r in range(1024) for pos in (10, 12)]
    counts = np.bincount(which, minlength=5)
    self.assertTrue(np.all(np.abs(counts / len(which) - 0.2) < 0.04), counts)
    answers = b["targets"][:, [10, 12]].reshape(-1)
    best_constant = np.bincount(answers).max() / len(answers)
    self.assertAlmostEqual(ds.chance_accuracy, 1 / 16)
    self.assertLess(best_constant, 1.5 * ds.chance_accuracy)

  def test_induction_second_copy_matches_oracle(self):
    ds = _make("induction", **INDUCTION)
    for step in range(2):
      _check_induction_oracle(self, _np(ds.batch(step)), 12, 5, True)
    _check_induction_oracle(self, _np(ds.eval_batch(0)), 12, 5, True)

  def test_induction_default(self):
    ds = _make("induction", seq_len=T, batch_size=B)
    self.assertEqual((ds.prefix_len, ds.vocab_size, ds.distinct), ((T + 1) // 2, 64, True))
    b = _np(ds.batch(3))
    seq = _full_sequences(b)
    np.testing.assert_array_equal(seq[:, ds.prefix_len:2 * ds.prefix_len], seq[:, :ds.prefix_len])
    self.assertEqual(int(b["weights"].sum()), B * (T - ds.prefix_len))
    self.assertAlmostEqual(ds.chance_accuracy, 1 / 64)

  @parameterized.parameters("recall", "induction")
  def test_shapes_dtypes_and_shift(self, name):
    ds = _make(name, seq_len=T, batch_size=B)
    for b in (ds.batch(0), ds.eval_batch(0)):
      chex.assert_shape([b["inputs"], b["targets"], b["weights"]], (B, T))
      self.assertEqual(b["inputs"].dtype, jnp.int32)
      self.assertEqual(b["targets"].dtype, jnp.int32)
      self.assertEqual(b["weights"].dtype, jnp.float32)
      np.testing.assert_array_equal(b["targets"][:, :-1], b["inputs"][:, 1:])
      self.assertTrue(np.all((np.asarray(b["weights"]) == 0) | (np.asarray(b["weights"]) == 1)))
      self.assertTrue(np.all(np.asarray(b["inputs"]) < ds.vocab_size))

  @parameterized.parameters("recall", "induction")
  def test_determinism(self, name):
    a = _make(name, seq_len=T, batch_size=B, seed=3)
    b = _make(name, seq_len=T, batch_size=B, seed=3)
    later = a.batch(5)  # order of calls does not matter
    chex.assert_trees_all_equal(a.batch(2), b.batch(2))
    chex.assert_trees_all_equal(later, b.batch(5))
    chex.assert_trees_all_equal(a.batch(2, seed=7), b.batch(2, seed=7))
    self.assertFalse(np.array_equal(a.batch(2)["inputs"], a.batch(3)["inputs"]))
    self.assertFalse(np.array_equal(a.batch(2)["inputs"], a.batch(2, seed=4)["inputs"]))
    self.assertFalse(np.array_equal(a.batch(2)["inputs"], a.eval_batch(2)["inputs"]))
    chex.assert_trees_all_equal(a.eval_batch(1), b.eval_batch(1))

  def test_key_contract(self):
    ds = _make("induction", **INDUCTION)
    sample = jax.jit(lambda k: tasks_lib.induction_batch(k, **INDUCTION))
    base = jax.random.key(9)
    chex.assert_trees_all_equal(ds.batch(4, 9), sample(jax.random.fold_in(base, 4)))
    chex.assert_trees_all_equal(ds.eval_batch(4, 9),
                                sample(jax.random.fold_in(base, np.uint32(2**32 - 1 - 4))))

  def test_vmap_over_seeds_and_scan_over_steps(self):
    ds = _make("induction", **INDUCTION)

    @jax.jit
    def both(seeds, steps):
      per_seed = jax.vmap(lambda s: ds.batch(7, s))(seeds)
      _, per_step = jax.lax.scan(lambda c, s: (c, ds.batch(s, 2)), 0, steps)
      return per_seed, per_step

    per_seed, per_step = both(jnp.arange(3), jnp.arange(3))
    for i in range(3):
      chex.assert_trees_all_equal(jax.tree.map(lambda x: x[i], per_seed), ds.batch(7, i))
    for s in range(3):
      chex.assert_trees_all_equal(jax.tree.map(lambda x: x[s], per_step), ds.batch(s, 2))
    _check_induction_oracle(self, _np(jax.tree.map(lambda x: x[1], per_seed)), 12, 5, True)

  def test_dataset_as_jit_argument_no_retrace(self):
    ds = _make("recall", **RECALL)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def step_fn(dataset, step, seed):
      return dataset.batch(step, seed), dataset.eval_batch(step, seed)

    for step, seed in ((0, 0), (1, 0), (5, 3)):
      train, held_out = step_fn(ds, jnp.int32(step), jnp.int32(seed))
      chex.assert_trees_all_equal(train, ds.batch(step, seed))
      chex.assert_trees_all_equal(held_out, ds.eval_batch(step, seed))

  @settings(max_examples=15, deadline=None)
  @given(seed=st.integers(0, 2**31 - 1), step=st.integers(0, 10**6))
  def test_recall_oracle_property(self, seed, step):
    ds = _make("recall", **RECALL)
    _check_recall_oracle(self, _np(ds.batch(step, seed)), 32, 5, 2)

  @parameterized.named_parameters(
      ("seq_len_zero", "recall", dict(seq_len=0, batch_size=B), "seq_len"),
      ("batch_negative", "induction", dict(seq_len=T, batch_size=-1), "batch_size"),
      ("batch_float", "recall", dict(seq_len=T, batch_size=2.0), "batch_size"),
      ("vocab_zero", "recall", dict(seq_len=T, batch_size=B, vocab_size=0), "vocab_size"),
      ("recall_too_short", "recall", dict(seq_len=T, batch_size=B, num_pairs=8), "seq_len >= .* = 17"),
      ("recall_no_room", "recall", dict(seq_len=2, batch_size=B), "seq_len >= 3"),
      ("recall_vocab", "recall", dict(seq_len=T, batch_size=B, vocab_size=10, num_pairs=6),
       "vocab_size >= 13"),
      ("induction_short", "induction", dict(seq_len=T, batch_size=B, prefix_len=T), "seq_len >= .* = 17"),
      ("induction_prefix", "induction", dict(seq_len=T, batch_size=B, prefix_len=1), "prefix_len must be at least 2"),
      ("induction_default_prefix", "induction", dict(seq_len=2, batch_size=B), "prefix_len >= 2"),
      ("induction_vocab", "induction", dict(seq_len=T, batch_size=B, vocab_size=6, prefix_len=8),
       "vocab_size >= 8"),
      ("unknown_name", "copy", dict(seq_len=T, batch_size=B), "task must be one of recall, induction, text"),
      ("unknown_opt", "recall", dict(seq_len=T, batch_size=B, prefix_len=3), "prefix_len only applies"),
      ("text_no_file", "text", dict(seq_len=T, batch_size=B), "needs text_file"),
      ("file_for_recall", "recall", dict(seq_len=T, batch_size=B, text_file="x.txt"), "text_file selects"),
      ("seed_float", "recall", dict(seq_len=T, batch_size=B, seed=1.5), "seed"),
  )
  def test_bad_sizes(self, name, kwargs, message):
    with self.assertRaisesRegex(ValueError, message):
      _make(name, **kwargs)

  def test_induction_vocab_ok_without_distinct(self):
    ds = tasks_lib.induction_task(seq_len=T, batch_size=B, vocab_size=3, seed=0, prefix_len=6, distinct=False)
    b = _np(ds.batch(0))
    _check_induction_oracle(self, b, 3, 6, False)
    self.assertLess(len(set(b["inputs"][0, :6].tolist())), 6)  # repeats within the prefix occur


class TextTest(chex.TestCase, parameterized.TestCase):

  def setUp(self):
    super().setUp()
    tmp = tempfile.TemporaryDirectory()
    self.addCleanup(tmp.cleanup)
    self.dir = tmp.name
    rng = random.Random(0)
    self.train_text = "".join(rng.choice("abc de\n") for _ in range(900))
    self.val_text = "".join(rng.choice("XYZ é") for _ in range(100))
    self.path = self._write("text.txt", (self.train_text + self.val_text).encode("utf-8"))

  def _write(self, name, raw):
    path = os.path.join(self.dir, name)
    with open(path, "wb") as f:
      f.write(raw)
    return path

  def test_vocab_and_round_trip(self):
    ds = _make("text", seq_len=T, batch_size=B, text_file=self.path)
    expected = sorted(set(self.train_text + self.val_text))
    self.assertEqual(list(ds.chars), expected)
    self.assertEqual(ds.vocab_size, len(expected))
    ids = ds.encode(self.val_text)
    self.assertEqual(ids.dtype, np.int32)
    self.assertEqual([expected[i] for i in ids], list(self.val_text))
    self.assertEqual(ds.decode(ids), self.val_text)
    self.assertEqual(ds.decode(jnp.asarray(ids)), self.val_text)
    with self.assertRaisesRegex(ValueError, "'q'"):
      ds.encode("abq")
    self.assertEqual(text_corpus.build_vocab("cab\na"), ("\n", "a", "b", "c"))

  def test_split_and_windows(self):
    ds = _make("text", seq_len=T, batch_size=B, text_file=self.path)
    self.assertEqual((ds.train_tokens.shape[0], ds.val_tokens.shape[0]), (900, 100))
    for step in range(4):
      b = _np(ds.batch(step))
      chex.assert_shape([b["inputs"], b["targets"], b["weights"]], (B, T))
      self.assertEqual((b["inputs"].dtype, b["weights"].dtype), (np.int32, np.float32))
      np.testing.assert_array_equal(b["weights"], np.ones((B, T), np.float32))
      np.testing.assert_array_equal(b["targets"][:, :-1], b["inputs"][:, 1:])
      for row in _full_sequences(b):
        self.assertIn(ds.decode(row), self.train_text)
    for i in range(2):
      for row in _full_sequences(_np(ds.eval_batch(i))):
        window = ds.decode(row)
        self.assertIn(window, self.val_text)
        self.assertFalse(set(window) & set("abcd\n"), "validation window overlaps training text")

  def test_window_starts_cover_range(self):
    path = self._write("short.txt", "abcdefghijklmnopqrst".encode())  # 18 train, 2 validation chars
    ds = _make("text", seq_len=1, batch_size=64, text_file=path)
    firsts = set()
    for step in range(4):
      firsts |= set(ds.decode(ds.batch(step)["inputs"][:, 0]))
    self.assertEqual(firsts, set("abcdefghijklmnopq"))  # starts 0..16, all reachable, none past
    exact = self._write("exact.txt", "abcdefghijklmnopqrABCDEFGHIJKLMNOPQR".encode())
    ds = text_corpus.load_text_dataset(exact, seq_len=17, batch_size=2, val_fraction=0.5)
    self.assertEqual(ds.decode(_full_sequences(_np(ds.batch(0)))[1]), "abcdefghijklmnopqr")
    self.assertEqual(ds.decode(_full_sequences(_np(ds.eval_batch(3)))[0]), "ABCDEFGHIJKLMNOPQR")

  def test_determinism(self):
    a = _make("text", seq_len=T, batch_size=B, text_file=self.path, seed=1)
    b = _make("text", seq_len=T, batch_size=B, text_file=self.path, seed=1)
    chex.assert_trees_all_equal(a.batch(3), b.batch(3))
    chex.assert_trees_all_equal(a.batch(3, 5), b.batch(3, 5))
    self.assertFalse(np.array_equal(a.batch(3)["inputs"], a.batch(4)["inputs"]))
    self.assertFalse(np.array_equal(a.batch(3)["inputs"], a.batch(3, 2)["inputs"]))
    per_seed = jax.jit(jax.vmap(lambda s: a.batch(0, s)))(jnp.arange(2))
    chex.assert_trees_all_equal(jax.tree.map(lambda x: x[1], per_seed), a.batch(0, 1))

  def test_larger_vocab_allowed_smaller_rejected(self):
    n = len(set(self.train_text + self.val_text))
    ds = _make("text", seq_len=T, batch_size=B, text_file=self.path, vocab_size=n + 7)
    self.assertEqual(ds.vocab_size, n + 7)
    with self.assertRaisesRegex(ValueError, "smaller than"):
      _make("text", seq_len=T, batch_size=B, text_file=self.path, vocab_size=n - 1)
    with self.assertRaisesRegex(ValueError, "val_fraction"):
      text_corpus.load_text_dataset(self.path, seq_len=T, batch_size=B, val_fraction=1.0)

  @parameterized.named_parameters(
      ("missing", None, "does not exist"),
      ("directory", "dir", "directory"),
      ("empty", b"", "empty"),
      ("nul", b"hello\x00world" * 10, "binary"),
      ("invalid_utf8", b"hello \xff\xfe world" * 10, "UTF-8"),
      ("too_short", b"abcdefghij" * 10, "too short"),  # 90 train, 10 validation < T + 1
      ("shorter_than_a_sequence", b"abc", "too short for one sequence"),
      ("fifo", "fifo", "not a regular file"),  # reading a pipe could block forever
      ("empty_path", "", "path is empty"),
  )
  def test_bad_file(self, raw, message):
    if raw is None:
      path = os.path.join(self.dir, "missing.txt")
    elif raw == "dir":
      path = os.path.join(self.dir, "a_dir")
      os.mkdir(path)
    elif raw == "fifo":
      path = os.path.join(self.dir, "a_fifo")
      os.mkfifo(path)
    elif raw == "":
      path = ""
    else:
      path = self._write("bad.txt", raw)
    with self.assertRaisesRegex(text_corpus.DataError, message) as ctx:
      _make("text", seq_len=T, batch_size=B, text_file=path)
    self.assertIn(path, str(ctx.exception))
    self.assertNotIn("\n", str(ctx.exception))
    self.assertIsInstance(ctx.exception, ValueError)

  def test_file_larger_than_memory(self):
    path = self._write("big.txt", b"abcdefgh" * 64)  # 512 bytes
    with mock.patch.object(resources, "host_available_bytes", lambda: 512 * text_corpus.TEXT_BYTES_PER_CHAR - 1):
      with self.assertRaisesRegex(text_corpus.DataError, "has 512 bytes; encoding it needs"):
        text_corpus.load_text(path)
    with mock.patch.object(resources, "host_available_bytes", lambda: 512 * text_corpus.TEXT_BYTES_PER_CHAR):
      self.assertLen(text_corpus.load_text(path), 512)

  def test_the_shipped_corpus_is_tiny_shakespeare_unchanged(self):
    path = text_corpus.corpus_path("shakespeare")
    self.assertEqual(hashlib.md5(path.read_bytes()).hexdigest(), SHAKESPEARE_MD5)
    readme = (path.parent / "README.md").read_text(encoding="utf-8")
    self.assertIn(SHAKESPEARE_MD5, readme)
    self.assertIn("`shakespeare`", readme)

  def test_a_name_of_a_corpus_reads_it_and_any_other_value_is_a_path(self):
    self.assertEqual(text_corpus.load_text("shakespeare"), text_corpus.corpus_path("shakespeare").read_text("utf-8"))
    self.assertEqual(text_corpus.corpus_path("shakespeare.txt"), pathlib.Path("shakespeare.txt"))
    with self.assertRaisesRegex(text_corpus.DataError, "'shakespeare.txt' does not exist"):
      text_corpus.load_text("shakespeare.txt")

  def test_tinyshakespeare(self):
    ds = _make("text", seq_len=64, batch_size=B, text_file="shakespeare")
    self.assertEqual(ds.vocab_size, 65)
    self.assertEqual(dataset_lib.describe(ds)["num_tokens"], 1115394)
    text = text_corpus.corpus_path("shakespeare").read_text(encoding="utf-8")
    self.assertEqual(ds.train_tokens.shape[0] + ds.val_tokens.shape[0], len(text))
    self.assertEqual(ds.decode(ds.val_tokens[:50]), text[-ds.val_tokens.shape[0]:][:50])
    b = _np(ds.batch(0))
    chex.assert_shape(b["inputs"], (B, 64))
    for row in _full_sequences(b):
      self.assertIn(ds.decode(row), text)


if __name__ == "__main__":
  absltest.main()
