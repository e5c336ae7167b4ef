"""scaling.runs.timesplit: compilation, compute and the rest measured while a run goes, against what the run did (how
many new programs it compiled, how long its compute regions took by a clock read here)."""

import threading
import time

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from scaling.training.data.config import DataConfig
from scaling.training.model.family import ModelFamily
from scaling.training.optimizer import OptimizerConfig
from scaling.runs import timesplit
from scaling.training.loop import run as loop_lib


class TimeSplitTest(absltest.TestCase):

  def test_parts_add_up_and_compiles_are_counted(self):
    # Two new programs (two shapes of one function); the second call of a shape compiles nothing.
    f = jax.jit(lambda x: jnp.tanh(x @ x.T).sum())
    x1, x2 = np.ones((37, 5), np.float32), np.ones((41, 3), np.float32)  # shapes no other test compiles
    with timesplit.TimeSplit() as split:
      with timesplit.computing():
        f(x1).block_until_ready()
        f(x2).block_until_ready()
        f(x1).block_until_ready()
      time.sleep(0.05)  # the rest
    self.assertEqual(split.compiles, 2)
    self.assertGreater(split.compile_s, 0.0)
    self.assertGreaterEqual(split.rest_s, 0.05)
    self.assertAlmostEqual(split.wall_s, split.compile_s + split.compute_s + split.rest_s, places=9)
    self.assertIn("2 programs", split.summary())
    self.assertLessEqual(split.cache_hits, split.compiles)

  def test_compute_region_excludes_its_compilation(self):
    g = jax.jit(lambda x: jnp.sin(x) * 3.0)
    x = np.ones((53,), np.float32)
    with timesplit.TimeSplit() as split:
      start = time.perf_counter()
      with timesplit.computing():
        g(x).block_until_ready()
        time.sleep(0.1)  # stands for compute
      region = time.perf_counter() - start
    self.assertGreater(split.compile_s, 0.0)
    self.assertAlmostEqual(split.compute_s, region - split.compile_s, delta=0.02)
    self.assertGreaterEqual(split.compute_s, 0.1)

  def test_nested_regions_count_once_and_splits_nest(self):
    with timesplit.TimeSplit() as outer:
      with timesplit.TimeSplit() as inner:
        with timesplit.computing():
          with timesplit.computing():
            time.sleep(0.05)
      time.sleep(0.02)
    self.assertAlmostEqual(inner.compute_s, outer.compute_s, delta=1e-6)
    self.assertLess(inner.compute_s, 0.07)
    self.assertGreater(outer.wall_s, inner.wall_s)

  def test_a_training_run_is_mostly_compile_and_compute(self):
    dataset = DataConfig(seq_len=8, batch_size=2).make(0)
    cfg = ModelFamily(depth=1, num_heads=2, base_width=16).model_config(
        "sp", 24, vocab_size=dataset.vocab_size, max_len=8)  # width 24: a program no other test compiles
    with timesplit.TimeSplit() as split:
      loop_lib.run_training(cfg, OptimizerConfig(steps=3), dataset, loop_lib.Runs(seed=0))
    self.assertGreaterEqual(split.compiles, 2)  # at least the init and the step
    self.assertGreater(split.compute_s, 0.0)
    self.assertLess(split.rest_s, 0.5 * split.wall_s)

  def test_compiled_ahead_is_counted_apart_and_a_wait_is_compilation(self):
    f = jax.jit(lambda x: jnp.cos(x @ x.T).sum())
    x = np.ones((29, 7), np.float32)  # a shape no other test compiles
    with timesplit.TimeSplit() as split:
      def ahead():
        with timesplit.compiling_ahead():
          f.lower(jax.ShapeDtypeStruct(x.shape, x.dtype)).compile()
      thread = threading.Thread(target=ahead)
      with timesplit.computing():
        with timesplit.waiting_for_compilation():
          thread.start()
          thread.join()
          time.sleep(0.05)
        f(x).block_until_ready()  # compiled ahead: nothing compiles here
    self.assertEqual(split.compiles, 0)
    self.assertGreaterEqual(split.ahead_compiles, 1)
    self.assertGreater(split.ahead_s, 0.0)
    self.assertGreaterEqual(split.compile_s, 0.05)  # the wait
    self.assertLess(split.compute_s, split.compile_s)
    self.assertAlmostEqual(split.wall_s, split.compile_s + split.compute_s + split.rest_s, places=9)
    self.assertIn("ahead", split.summary())

  def test_compute_in_a_thread_working_ahead_is_not_the_runs(self):
    with timesplit.TimeSplit() as split:
      def ahead():
        with timesplit.compiling_ahead(), timesplit.computing():
          time.sleep(0.3)  # a grid trained beside the run
      thread = threading.Thread(target=ahead)
      thread.start()
      with timesplit.computing():
        time.sleep(0.05)
      thread.join()
    self.assertGreaterEqual(split.compute_s, 0.05)
    self.assertLess(split.compute_s, 0.25)  # the run's own region only, not the thread's 0.3 s
    self.assertAlmostEqual(split.wall_s, split.compile_s + split.compute_s + split.rest_s, places=9)



if __name__ == "__main__":
  absltest.main()
