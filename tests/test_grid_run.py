"""scaling.studies.grid.run.GridPlanner.compile_ahead: a grid's programs compiled in a thread beforehand are the
ones its training runs (it compiles no init or step of its own), and the trained grid is the same."""

import collections
from concurrent import futures
import dataclasses
import threading
from unittest import mock

from absl.testing import absltest
import chex
import jax
import numpy as np

from scaling.training.data.config import DataConfig
from scaling.training.model import transformer as model_lib
from scaling.training.model.family import ModelFamily
from scaling.training.optimizer import OptimizerConfig
from scaling.runs import timesplit
from scaling.studies.grid import run as grid_run


def _spec(width: int, rule: str, depth: int = 2) -> grid_run.GridSpec:
  data = DataConfig(seq_len=8, batch_size=2)
  config = ModelFamily(depth=depth, num_heads=2, base_width=16, rule=rule).model_config(
      "sp", width, vocab_size=data.make(0).vocab_size, max_len=8)
  return grid_run.GridSpec(config, OptimizerConfig(steps=3), data, 0, (-8.0, -6.0), (0, 1), label=rule)


class CompileAheadTest(absltest.TestCase):

  def test_training_finds_its_programs_compiled(self):
    spec = _spec(40, "qk_norm", depth=1)  # programs no other test compiles (one block: they compile sooner)
    compiled = collections.Counter()

    def listen(event, duration, fun_name="?", **_):
      if event == "/jax/core/compile/backend_compile_duration":
        compiled[(threading.current_thread() is threading.main_thread(), fun_name)] += 1

    jax.monitoring.register_event_duration_secs_listener(listen)
    planner = grid_run.GridPlanner()
    with timesplit.TimeSplit() as split:
      planner.compile_ahead([spec, spec], train=False)
      trained = planner.train(spec)
      planner.close()
    in_main = {name for (main, name), n in compiled.items() if main}
    self.assertFalse({n for n in in_main if "grid_step" in n or "init_state" in n}, in_main)
    self.assertTrue(any("grid_step" in name for (main, name) in compiled if not main))
    self.assertEqual(split.ahead_compiles, 2)  # the init and the step, once
    expected = grid_run.train_grid(spec, DataConfig(seq_len=8, batch_size=2).make(0))
    np.testing.assert_array_equal(trained.records["loss"], expected.records["loss"])

  def test_a_failure_ahead_leaves_training_to_compile(self):
    spec = _spec(32, "sqrt")  # the program other tests of this file train too
    planner = grid_run.GridPlanner()
    with mock.patch.object(grid_run.loop_lib, "compile_grid", side_effect=RuntimeError("no")):
      try:
        planner.compile_ahead([spec], train=False)
        run = planner.train(spec)
      finally:
        planner.close()
    self.assertTrue(np.all(np.isfinite(run.records["loss"])))


class TrainAheadTest(absltest.TestCase):
  """Grids trained in the thread beside the run against the same grids trained by train_grid (the same programs on
  the same inputs: equal numbers)."""

  def _record_threads(self, started=None):
    where = {}
    real = grid_run.train_grid

    def recording(spec, dataset, callback=None):
      where[spec.label] = threading.current_thread().name
      if started is not None and spec.label in started:
        started[spec.label].set()
      return real(spec, dataset, callback=callback)

    return where, mock.patch.object(grid_run, "train_grid", recording)

  def test_grids_trained_ahead_are_those_trained_here(self):
    specs = [_spec(32, "sqrt"), dataclasses.replace(_spec(32, "sqrt"), log2_lrs=(-9.0, -5.0), label="other")]
    where, patch = self._record_threads()
    planner = grid_run.GridPlanner()
    with patch:
      try:
        planner.compile_ahead(specs, train=True)
        futures.wait(list(planner._trained_ahead.values()))  # pylint: disable=protected-access
        runs = [planner.train(spec) for spec in specs]
      finally:
        planner.close()
    self.assertTrue(all(name.startswith("compile-ahead") for name in where.values()), where)
    data = DataConfig(seq_len=8, batch_size=2).make(0)
    for spec, run in zip(specs, runs):
      expected = grid_run.train_grid(spec, data)
      for key in expected.records:
        np.testing.assert_array_equal(run.records[key], expected.records[key], err_msg=key)
      chex.assert_trees_all_equal(run.final_params, expected.final_params)

  def test_the_caller_trains_what_was_not_started_ahead_and_close_stops_the_rest(self):
    specs = [dataclasses.replace(_spec(32, "sqrt"), log2_lrs=(-9.0 - i, -5.0), label=f"grid {i}") for i in range(3)]
    long = dataclasses.replace(specs[2], opt_config=OptimizerConfig(steps=10_000), label="long")
    started = {"long": threading.Event()}
    where, patch = self._record_threads(started)
    planner = grid_run.GridPlanner()
    with patch:
      try:
        planner.compile_ahead([*specs, long], train=True)  # trained ahead from the last: the long grid first
        self.assertTrue(started["long"].wait(timeout=300))
        runs = [planner.train(spec) for spec in specs]  # here: the thread there is busy with the long grid
      finally:
        planner.close()  # stops the long grid at its next step
    self.assertTrue(where["long"].startswith("compile-ahead"), where)
    self.assertTrue(all(where[spec.label] == threading.main_thread().name for spec in specs), where)
    data = DataConfig(seq_len=8, batch_size=2).make(0)
    for spec, run in zip(specs, runs):
      np.testing.assert_array_equal(run.records["loss"], grid_run.train_grid(spec, data).records["loss"])
    after = planner.train(dataclasses.replace(long, opt_config=OptimizerConfig(steps=3)))  # the planner goes on
    self.assertEqual(after.records["loss"].shape[0], 3)


class JoinRunsTest(absltest.TestCase):
  """join_runs against the grid of the union of rates trained in one program (members are independent)."""

  def test_a_grid_and_its_widening_are_the_grid_of_all_their_rates(self):
    spec = _spec(32, "sqrt")
    data = DataConfig(seq_len=8, batch_size=2).make(0)
    part = lambda rates: grid_run.train_grid(dataclasses.replace(spec, log2_lrs=rates, label="part"), data)
    # The widening on both sides, in any order; both parts have as many members (one program for the two).
    joined = grid_run.join_runs(part((-9.0, -8.0)), part((-10.0, -6.0)))
    whole = grid_run.train_grid(dataclasses.replace(spec, log2_lrs=(-10.0, -9.0, -8.0, -6.0)), data)
    self.assertEqual(joined.log2_lrs, (-10.0, -9.0, -8.0, -6.0))
    self.assertEqual(joined.spec, whole.spec)
    for key in whole.records:
      np.testing.assert_allclose(joined.records[key], whole.records[key], rtol=1e-5, atol=1e-7, err_msg=key)
    chex.assert_trees_all_close(joined.final_params, whole.final_params, rtol=1e-5, atol=1e-7)

  def test_rejects_grids_that_differ_in_more_than_their_rates(self):
    spec = _spec(32, "sqrt")
    run = lambda s: grid_run.GridRun(spec=s, records={"loss": np.zeros((3, s.members))}, final_params=None,
                                     wall_time=0.0)
    with self.assertRaisesRegex(ValueError, "differ only in their learning rates"):
      grid_run.join_runs(run(spec), run(dataclasses.replace(spec, log2_lrs=(-4.0,), data_seed=1)))
    with self.assertRaisesRegex(ValueError, "share learning rates"):
      grid_run.join_runs(run(spec), run(dataclasses.replace(spec, log2_lrs=(-6.0, -4.0))))
    with self.assertRaisesRegex(ValueError, "not grids of logit multipliers"):
      multipliers = dataclasses.replace(spec, log2_lrs=(-8.0,), attn_mults=(1.0, 2.0))
      grid_run.join_runs(run(multipliers), run(dataclasses.replace(multipliers, log2_lrs=(-6.0,))))


class TrainLikeTest(absltest.TestCase):
  """GridPlanner.train(spec, like=grid): the widening runs the grid's compiled step, with the unpadded results."""

  def test_a_widening_runs_its_grids_step_with_its_own_results(self):
    # The grid's program is JoinRunsTest's whole grid's (4 rates x 2 seeds); the widening's own (1 rate x 2 seeds) is
    # no other test's, so compiling it would show.
    grid = dataclasses.replace(_spec(32, "sqrt"), log2_lrs=(-16.0, -14.0, -13.0, -12.0))
    widening = dataclasses.replace(grid, log2_lrs=(-10.0,), label="widening")
    planner = grid_run.GridPlanner()
    planner.train(grid)
    compiled = []

    def listen(event, duration, fun_name="?", **_):
      if event == "/jax/core/compile/backend_compile_duration":
        compiled.append(fun_name)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
      wider = planner.train(widening, like=grid)
    finally:
      jax.monitoring.unregister_event_duration_listener(listen)
    self.assertFalse([n for n in compiled if "grid_step" in n], compiled)  # the grid's step, not a new one
    self.assertIs(planner.train(widening), wider)  # trained once
    alone = grid_run.train_grid(widening, planner.dataset(grid.data, grid.data_seed))
    self.assertEqual(wider.spec, widening)
    self.assertEqual(wider.records["loss"].shape, alone.records["loss"].shape)
    for key in alone.records:
      np.testing.assert_allclose(wider.records[key], alone.records[key], rtol=1e-5, atol=1e-7, err_msg=key)
    # Adam moves a coordinate by up to its rate per step whatever the gradient's size, so rounding in a near-zero
    # gradient can move it by 2 × rate × steps; another member's parameters (another seed) differ by ~0.1.
    chex.assert_trees_all_close(wider.final_params, alone.final_params, rtol=0, atol=2 * 2.0 ** -10 * grid.steps)
    self.assertGreater(float(np.abs(wider.final_params["readout"]["kernel"][0]
                                    - alone.final_params["readout"]["kernel"][1]).max()), 2 * 2.0 ** -10 * grid.steps)

  def test_padding_repeats_the_last_value_and_refuses_another_program(self):
    grid = _spec(32, "sqrt")
    one = dataclasses.replace(grid, log2_lrs=(-4.0,))
    self.assertEqual(one.padded(3).log2_lrs, (-4.0, -4.0, -4.0))
    self.assertEqual(one.padded(1), one)
    mults = dataclasses.replace(grid, log2_lrs=(-8.0,), attn_mults=(1.0, 2.0))
    self.assertEqual(mults.padded(3).attn_mults, (1.0, 2.0, 2.0))
    self.assertEqual(mults.padded(3).log2_lrs, (-8.0,))
    planner = grid_run.GridPlanner()
    with self.assertRaisesRegex(ValueError, "differ in more than their swept values"):
      planner.train(dataclasses.replace(one, opt_config=OptimizerConfig(steps=4)), like=dataclasses.replace(grid, log2_lrs=(-8.0, -6.0, -5.0)))
    with self.assertRaisesRegex(TypeError, "like must be a GridSpec"):
      planner.train(one, like="grid")
    with self.assertRaisesRegex(ValueError, "is not the start of"):
      run = grid_run.GridRun(spec=grid, records={"loss": np.zeros((3, grid.members))}, final_params=None,
                             wall_time=0.0)
      run.first(dataclasses.replace(grid, log2_lrs=(-6.0,)))


class ScannedGridTest(absltest.TestCase):

  def test_a_scanned_grid_trains_as_the_unrolled_one_and_returns_its_layout(self):
    # Depth 2 (two blocks in one scan, the default): the scanned grid is the program the other tests of this file
    # train.
    scanned = dataclasses.replace(_spec(32, "sqrt"), log2_lrs=(-14.0, -12.0))
    self.assertTrue(model_lib.scans_blocks(scanned.model_config))
    spec = dataclasses.replace(scanned, model_config=dataclasses.replace(scanned.model_config, scan_layers=False))
    data = DataConfig(seq_len=8, batch_size=2).make(0)
    a, b = grid_run.train_grid(spec, data), grid_run.train_grid(scanned, data)
    for key in a.records:
      np.testing.assert_allclose(b.records[key], a.records[key], rtol=1e-5, atol=1e-7, err_msg=key)
    self.assertIn("block_1", b.final_params)
    self.assertEqual(set(b.final_params), set(a.final_params))  # block_0, block_1, each [M, ...]
    # Adam moves a coordinate by up to its rate per step whatever the gradient's size (see TrainLikeTest).
    chex.assert_trees_all_close(b.final_params, a.final_params, rtol=0, atol=2 * 2.0 ** -12 * spec.steps)
    # The same draws in both layouts (identical with XLA's default flags; the tests' flags may round the two
    # programs' draws apart in the last bits: tests/test_param_draws.py).
    chex.assert_trees_all_close(b.initial_params(), a.initial_params(), rtol=1e-6, atol=0)

  def test_a_default_model_trains_scanned_and_returns_one_block_per_block(self):
    # The scanned grid of test_a_scanned_grid_trains_as_the_unrolled_one_and_returns_its_layout (its compiled step):
    # a scan runs any number of blocks as one.
    spec = dataclasses.replace(_spec(32, "sqrt"), log2_lrs=(-14.0, -12.0))
    self.assertTrue(spec.model_config.scan_layers)  # the default of ModelFamily and ModelConfig
    self.assertTrue(model_lib.scans_blocks(spec.model_config))
    run = grid_run.train_grid(spec, DataConfig(seq_len=8, batch_size=2).make(0))
    self.assertEqual({k for k in run.final_params if k.startswith("block_")}, {"block_0", "block_1"})
    shapes = jax.eval_shape(lambda: model_lib.init_params(jax.random.PRNGKey(0), spec.model_config))
    chex.assert_trees_all_equal_shapes(jax.tree.map(lambda a: a[0], run.final_params), shapes)


if __name__ == "__main__":
  absltest.main()
