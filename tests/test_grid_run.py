"""scaling.studies.grid_run.GridPlanner.compile_ahead: a grid's programs compiled in a thread beforehand are the
ones its training runs (it compiles no init or step of its own), and the trained grid is the same."""

import collections
import threading
from unittest import mock

from absl.testing import absltest
import jax
import numpy as np

from scaling import data as data_lib
from scaling import model as model_lib
from scaling import optim
from scaling import timesplit
from scaling.studies import grid_run


def _spec(width: int, rule: str) -> grid_run.GridSpec:
  data = data_lib.DataConfig(seq_len=8, batch_size=2)
  config = model_lib.ModelFamily(depth=2, num_heads=2, base_width=16, rule=rule).model_config(
      "sp", width, vocab_size=data.make(0).vocab_size, max_len=8)
  return grid_run.GridSpec(config, optim.OptimizerConfig(steps=3), data, 0, (-8.0, -6.0), (0, 1), label=rule)


class CompileAheadTest(absltest.TestCase):

  def test_training_finds_its_programs_compiled(self):
    spec = _spec(40, "qk_norm")  # width 40: programs no other test compiles
    compiled = collections.Counter()

    def listen(event, duration, fun_name="?", **_):
      if event == "/jax/core/compile/backend_compile_duration":
        compiled[(threading.current_thread() is threading.main_thread(), fun_name)] += 1

    jax.monitoring.register_event_duration_secs_listener(listen)
    planner = grid_run.GridPlanner()
    with timesplit.TimeSplit() as split:
      planner.compile_ahead([spec, spec])
      trained = planner.train(spec)
      planner.close()
    in_main = {name for (main, name), n in compiled.items() if main}
    self.assertFalse({n for n in in_main if "grid_step" in n or "init_state" in n}, in_main)
    self.assertTrue(any("grid_step" in name for (main, name) in compiled if not main))
    self.assertEqual(split.ahead_compiles, 2)  # the init and the step, once
    expected = grid_run.train_grid(spec, data_lib.DataConfig(seq_len=8, batch_size=2).make(0))
    np.testing.assert_array_equal(trained.records["loss"], expected.records["loss"])

  def test_a_failure_ahead_leaves_training_to_compile(self):
    spec = _spec(24, "sqrt")
    planner = grid_run.GridPlanner()
    with mock.patch.object(grid_run.train_lib, "compile_grid", side_effect=RuntimeError("no")):
      try:
        planner.compile_ahead([spec])
        run = planner.train(spec)
      finally:
        planner.close()
    self.assertTrue(np.all(np.isfinite(run.records["loss"])))


if __name__ == "__main__":
  absltest.main()
