"""One training program for every model: ``scaling.training.loop.run.run_training`` of a ``FunctionalProgram`` (any model
and its optimizer factory) against a plain optax loop written here; grids in chunks equal all at once; a single run
resumed from a mid-run state equals one in one go; the studies of any model resume what a killed run left."""

import functools
import json
import pathlib
import shutil
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

import scaling
from scaling.training.optimizer import OptimizerConfig
from scaling.training.loop import run as loop_lib
from scaling.training.loop import programs as programs_lib
from scaling.mup import user_model
from scaling.studies.coord_check import any_model as coord_check
from scaling.studies.transfer import any_model as transfer

D_IN, D_OUT = 6, 3


class MLP(nn.Module):
  width: int

  @nn.compact
  def __call__(self, x):
    x = nn.relu(nn.Dense(self.width, name="hidden")(x))
    return nn.Dense(D_OUT, name="readout")(x)


def mse(model, batch):
  return jnp.mean((model(batch["x"]) - batch["y"]) ** 2)


def batches(step):
  x = jax.random.normal(jax.random.fold_in(jax.random.key(7), step), (8, D_IN))
  return {"x": x, "y": jnp.tanh(x[:, :D_OUT])}


def adam(width, params, learning_rate):
  del width, params
  return optax.adam(learning_rate)


@functools.cache
def _program(width=16, record_outputs=False):
  """One program per setting for the module: run_training compiles each of its programs once, whichever test runs."""
  fm = user_model.functional_model(MLP, mse, width, batches(0))
  return programs_lib.FunctionalProgram(fm, adam, record_outputs=record_outputs), fm


@functools.partial(jax.jit, static_argnums=0)
def _plain_step(fm, params, state, opt_state, batch, lr):
  loss, grads = jax.value_and_grad(fm.loss)(params, state, batch)
  updates, opt_state = optax.adam(lr).update(grads, opt_state, params)
  return optax.apply_updates(params, updates), opt_state, loss


@functools.cache
def _plain_loop(fm, seed, lr, steps):
  """The reference: a hand-written optax loop over the same batches (its step one jitted program for every run)."""
  params, state = fm.init(jax.random.PRNGKey(seed))
  opt_state = optax.adam(lr).init(params)
  losses = []
  for t in range(steps):
    params, opt_state, loss = _plain_step(fm, params, state, opt_state, batches(t), lr)
    losses.append(float(loss))
  return np.asarray(losses)


class FunctionalProgramTest(parameterized.TestCase):

  @parameterized.parameters(None, 1)
  def test_grid_members_equal_plain_loops(self, chunk):
    program, fm = _program()
    steps, seeds, lrs = 5, [0, 1, 0], [1e-2, 1e-2, 3e-3]
    result = loop_lib.run_training(program, OptimizerConfig(steps=steps), user_model.Batches.of(batches, steps),
                                   loop_lib.Runs(seed=seeds, learning_rates=lrs, chunk=chunk),
                                   loop_lib.RunOptions(record=("loss",)))
    for i, (seed, lr) in enumerate(zip(seeds, lrs)):
      np.testing.assert_allclose(result.records["loss"][:, i], _plain_loop(fm, seed, lr, steps), rtol=2e-5,
                                 err_msg=f"member {i}")

  def test_single_run_resumed_equals_one_go(self):
    program, _ = _program()
    data = user_model.Batches.of(batches, 6)
    run = lambda steps, **options: loop_lib.run_training(
        program, OptimizerConfig(steps=steps, learning_rate=1e-2), data, loop_lib.Runs(seed=3),
        loop_lib.RunOptions(record=("loss",), **options))
    whole = run(6)
    first = run(3)
    rest = run(6, state=first.state, initial_loss=first.initial_loss)
    np.testing.assert_allclose(np.concatenate([first.records["loss"], rest.records["loss"]]), whole.records["loss"],
                               rtol=1e-6)
    chex.assert_trees_all_close(rest.state.params, whole.state.params, rtol=1e-6)

  def test_recorded_outputs_are_the_modules(self):
    program, fm = _program(record_outputs=True)
    result = loop_lib.run_training(program, OptimizerConfig(steps=2, learning_rate=1e-2),
                                   user_model.Batches.of(batches, 2), loop_lib.Runs(seed=[0]),
                                   loop_lib.RunOptions(record=("rms/hidden", "delta_rms/readout")))
    params, state = fm.init(jax.random.PRNGKey(0))
    _, outs = fm.captured(params, state, batches(0))
    want = float(jnp.sqrt(jnp.mean(jnp.square(outs["hidden"]))))
    self.assertAlmostEqual(float(result.records["rms/hidden"][0, 0]), want, places=5)
    self.assertEqual(float(result.records["delta_rms/readout"][0, 0]), 0.0)  # no update yet
    self.assertGreater(float(result.records["delta_rms/readout"][1, 0]), 0.0)

  def test_the_init_is_traced_once_for_its_shapes(self):
    """A model's init is traced once for its shapes (nothing computed), and the program and the outputs a study
    records share that trace: it is traced again only when its program compiles."""
    traced = []
    own = user_model.functional_model(MLP, mse, 16, batches(0))

    def init(key):
      traced.append(key)
      return own.init(key)

    fm = user_model.FunctionalModel(own.kind, own.width, init, own.loss, own.captured)
    params, state = user_model.abstract_init(fm)
    self.assertLen(traced, 1)
    chex.assert_trees_all_equal_shapes_and_dtypes(params, own.init(jax.random.key(0))[0])
    self.assertIs(user_model.abstract_init(fm), user_model.abstract_init(fm))
    program = programs_lib.FunctionalProgram(fm, adam)
    self.assertLen(traced, 1)
    chex.assert_trees_all_equal_shapes_and_dtypes(program.shapes, params)
    self.assertEqual(state, {})

  def test_a_user_init_is_checked_on_the_trace_its_program_reuses(self):
    """With an optimizer factory and an init(width, params, key), the boundary's check of that init traces it once per
    width for its shapes (and computes it once at the smallest width), and each width's program takes its shapes from
    that trace."""
    traced = []

    def init(width, params, key):
      del key
      traced.append(width)
      return params

    found = scaling.mup.width_family.runs(MLP, mse, batches(0), optimizer=adam, init=init, name="own", schemes=(),
                                          widths=(8, 16), base_width=None)
    self.assertEqual(sorted(traced), [8, 8, 16])  # 8: its shapes, and the init computed there once
    for width in (8, 16):
      program = programs_lib.FunctionalProgram(found[0].model_at(width), adam)
      chex.assert_trees_all_equal_shapes_and_dtypes(program.shapes, _program(width)[1].init(jax.random.key(0))[0])
    self.assertEqual(sorted(traced), [8, 8, 16])

  def test_bad_programs_are_refused(self):
    with self.assertRaisesRegex(TypeError, "FunctionalModel"):
      programs_lib.FunctionalProgram(MLP, adam)
    program, _ = _program()
    with self.assertRaisesRegex(ValueError, "attn_mults apply to the built-in"):
      loop_lib.run_training(program, OptimizerConfig(steps=1), user_model.Batches.of(batches, 1),
                            loop_lib.Runs(seed=[0], attn_mults=[1.0]))


class ResumeTest(absltest.TestCase):
  """A study of any model given an out_dir trains only what a killed run had not finished."""

  def setUp(self):
    super().setUp()
    self.out = pathlib.Path(tempfile.mkdtemp())
    self.addCleanup(shutil.rmtree, self.out, ignore_errors=True)

  def test_coord_check_resumes_after_a_failure(self):
    calls = []

    def flaky(width, params, learning_rate):
      calls.append(width)
      if width == 32 and calls.count(32) == 1:  # the second width fails once, as if the run were killed
        raise KeyboardInterrupt
      return optax.adam(learning_rate)

    kw = dict(widths=(16, 32), steps=2, seeds=(0,), progress=False, out_dir=self.out)
    with self.assertRaises(KeyboardInterrupt):
      coord_check.coord_check(MLP, mse, batches(0), flaky, **kw)
    done = [json.loads(l)["width"] for l in (self.out / "results.partial.jsonl").read_text().splitlines()]
    self.assertEqual(set(done), {16})
    result = coord_check.coord_check(MLP, mse, batches(0), flaky, **kw)
    self.assertEqual({r["width"] for r in result.rows}, {16, 32})
    timed = [json.loads(l)["width"] for l in (self.out / "timings.jsonl").read_text().splitlines()]
    self.assertEqual(sorted(timed), [16, 32])  # width 16 was trained once
    fresh = coord_check.coord_check(MLP, mse, batches(0), adam, widths=(16, 32), steps=2, seeds=(0,), progress=False)
    np.testing.assert_allclose([r["rms"] for r in result.rows], [r["rms"] for r in fresh.rows], rtol=1e-6)

  def test_other_options_into_the_same_folder_are_refused(self):
    kw = dict(widths=(16, 32), log2_lrs=(-8.0, -6.0), steps=3, progress=False, out_dir=self.out)
    transfer.transfer(MLP, mse, batches, schemes=("mup",), **kw)
    again = transfer.transfer(MLP, mse, batches, schemes=("mup",), **kw)  # all reused
    self.assertLen(again.rows, 4)
    with self.assertRaisesRegex(ValueError, "other options"):
      transfer.transfer(MLP, mse, batches, schemes=("mup",), **{**kw, "steps": 4})


if __name__ == "__main__":
  absltest.main()
