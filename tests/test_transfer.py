"""μTransfer: the vmapped grid against separate runs, final losses and optima with diverged runs, the experiment."""

import contextlib
import io as std_io
import json
import pathlib
from unittest import mock

from absl.testing import absltest
from absl.testing import flagsaver
from absl.testing import parameterized
import chex
from hypothesis import given
from hypothesis import strategies as st
import jax
import numpy as np

import experiment_main
from experiments import common
from experiments import transfer as transfer_exp
from scaling import data as data_lib
from scaling import optim
from scaling import train as train_lib
from scaling import transfer

# One tiny configuration shared by the grid test and the experiment's smoke test (compiled once per width).
TASK = dict(seq_len=8, batch_size=2)
FAMILY = transfer.WidthFamily(depth=1, num_heads=2, base_width=16)
STEPS = 6
WARMUP = 2
FLAGS_TINY = dict(widths=[16], depth=1, num_heads=2, base_width=16, log2_lrs=[-9.0, -6.0, -3.0], num_seeds=2,
                  steps=STEPS, warmup_steps=WARMUP, schedule="cosine", end_factor=0.1, task="recall", **TASK)


class GridTest(chex.TestCase):

  def test_lr_grid_order(self):
    lrs, seeds = transfer.lr_grid([-3.0, 1.0], [5, 6, 7])
    np.testing.assert_array_equal(lrs, [0.125] * 3 + [2.0] * 3)
    np.testing.assert_array_equal(seeds, [5, 6, 7, 5, 6, 7])

  def test_vmapped_grid_equals_separate_runs(self):
    dataset = data_lib.make_dataset("recall", **TASK)
    cfg = FAMILY.model_config("sp", 16, vocab_size=dataset.vocab_size, max_len=TASK["seq_len"])
    spec = transfer.OptimizerSpec("adam", schedule="cosine", warmup_steps=WARMUP, total_steps=STEPS,
                                  end_factor=0.1)
    log2_lrs, seeds = [-9.0, -6.0, -3.0], [0, 1]
    lrs, member_seeds = transfer.lr_grid(log2_lrs, seeds)
    grid = transfer.train_grid(cfg, spec, dataset, lrs, member_seeds, STEPS)
    chex.assert_shape(grid["loss"], (STEPS, 6))
    chex.assert_shape(grid["attn_logits_rms"], (STEPS, 6, 1))
    self.assertEqual(transfer.grid_step_fn(cfg, spec)._cache_size(), 1)  # pylint: disable=protected-access
    # Reference: scaling.train's own step, one run at a time, optimizer built with the run's learning rate.
    opt = optim.make_optimizer("adam", 2.0**-6, cfg.make_parametrization(), 16,
                               schedule=optim.warmup_cosine_schedule(1.0, WARMUP, STEPS, end_value=0.1))
    step = train_lib.make_train_step(cfg, opt)
    init = jax.jit(lambda key: train_lib.init_train_state(key, cfg, opt))
    for member, (log2_lr, seed) in ((2, (-6.0, 0)), (5, (-3.0, 1))):
      state = init(jax.random.PRNGKey(seed))
      if log2_lr != -6.0:
        state = train_lib.set_hyperparam(state, "learning_rate", 2.0**log2_lr)
      losses = []
      for t in range(STEPS):
        state, metrics = step(state, dataset.batch(t, seed))
        losses.append(float(metrics["loss"]))
      np.testing.assert_allclose(grid["loss"][:, member], losses, rtol=2e-5, atol=2e-6)
    # Different learning rates really train differently.
    self.assertGreater(np.max(np.abs(grid["loss"][-1, 0] - grid["loss"][-1, 4])), 1e-3)

  def test_init_grid_shapes_and_learning_rates(self):
    cfg = FAMILY.model_config("mup", 16, vocab_size=16, max_len=8)
    states = transfer.init_grid(cfg, transfer.OptimizerSpec("adam"), [3, 4], [0.5, 0.25])
    np.testing.assert_allclose(states.opt_state.hyperparams["learning_rate"], [0.5, 0.25])
    chex.assert_shape(states.params["embed"]["embedding"], (2, 16, 16))
    self.assertFalse(np.allclose(states.params["embed"]["embedding"][0], states.params["embed"]["embedding"][1]))

  def test_width_family(self):
    fixed_heads = transfer.WidthFamily(num_heads=4, base_width=32)
    self.assertEqual(fixed_heads.heads(128), (4, 32))
    cfg = fixed_heads.model_config("mup", 128, vocab_size=10, max_len=8)
    self.assertEqual((cfg.num_heads, cfg.head_dim, cfg.base_head_dim, cfg.base_width), (4, 32, 8, 32))
    fixed_dim = transfer.WidthFamily(head_dim=16).with_base_width([64, 32])
    self.assertEqual(fixed_dim.base_width, 32)
    self.assertEqual(fixed_dim.heads(128), (8, 16))
    self.assertEqual(fixed_dim.model_config("mup", 128, vocab_size=10, max_len=8).base_head_dim, 16)
    with self.assertRaisesRegex(ValueError, "not both"):
      transfer.WidthFamily(num_heads=2, head_dim=8)
    with self.assertRaisesRegex(ValueError, "width 20 is not divisible into num_heads=8"):
      transfer.WidthFamily(num_heads=8).heads(20)
    with self.assertRaisesRegex(ValueError, "multiple of head_dim"):
      transfer.WidthFamily(head_dim=16).heads(24)

  def test_optimizer_spec_validation(self):
    for kw, text in (({"name": "lion"}, "lion"), ({"schedule": "step"}, "schedule"),
                     ({"schedule": "cosine"}, "total_steps"),
                     ({"schedule": "cosine", "total_steps": 4, "warmup_steps": 4}, "warmup_steps"),
                     ({"weight_decay": 0.1}, "adamw")):
      with self.assertRaisesRegex(ValueError, text):
        transfer.OptimizerSpec(**kw)

  def test_transfer_config_validation(self):
    for kw, text in (({"log2_lrs": ()}, "empty"), ({"log2_lrs": (float("nan"),)}, "log2_lr"),
                     ({"log2_lrs": (-200.0,)}, "log2_lr"), ({"widths": (0,)}, "width"),
                     ({"steps": 10, "average_last": 11}, "average_last"),
                     ({"steps": 10, "optimizer": transfer.OptimizerSpec(schedule="cosine", total_steps=20)},
                      "total_steps"),
                     ({"parametrizations": ("sp", "nope")}, "nope")):
      with self.assertRaisesRegex(ValueError, text):
        transfer.TransferConfig(**kw)
    self.assertEqual(transfer.TransferConfig(steps=35).last, 3)
    self.assertEqual(transfer.TransferConfig(steps=5).last, 1)


class SummaryTest(parameterized.TestCase):

  def test_summarize_grid_with_diverged_seeds(self):
    # 2 learning rates x 2 seeds, 4 steps; member 3 (lr 1, seed 1) diverges at step 1 and comes back finite.
    losses = np.array([[4.0, 4.0, 4.0, 4.0],
                       [3.0, 2.5, 3.5, np.inf],
                       [2.0, 1.5, 3.0, 1.0],
                       [1.0, 0.5, 2.0, 1.0]])
    rows = transfer.summarize_grid(losses, [-4.0, -2.0], num_seeds=2, last=2)
    self.assertLen(rows, 2)
    self.assertEqual(rows[0]["final_loss_seeds"], [1.5, 1.0])
    self.assertAlmostEqual(rows[0]["final_loss"], 1.25)
    self.assertAlmostEqual(rows[0]["final_loss_std"], 0.25)
    self.assertEqual(rows[0]["diverged_seeds"], 0)
    self.assertEqual(rows[0]["learning_rate"], 2.0**-4)
    self.assertEqual(rows[0]["initial_loss"], 4.0)
    self.assertIsNone(rows[1]["final_loss"])
    self.assertEqual(rows[1]["final_loss_seeds"], [2.5, None])
    self.assertEqual(rows[1]["diverged_seeds"], 1)
    json.dumps(rows, allow_nan=False)  # JSON-ready: no NaN or inf

  def test_summarize_grid_rejects_bad_shapes(self):
    with self.assertRaisesRegex(ValueError, "members"):
      transfer.summarize_grid(np.zeros((3, 5)), [-1.0, -2.0], 2, 1)
    with self.assertRaisesRegex(ValueError, "last"):
      transfer.summarize_grid(np.zeros((3, 4)), [-1.0, -2.0], 2, 4)

  def test_find_optimum_treats_diverged_as_infinite(self):
    rows = [{"parametrization": "sp", "width": 32, "log2_lr": x, "final_loss": y}
            for x, y in ((-8, 3.0), (-7, 2.0), (-6, 2.5), (-5, None), (-4, float("nan")))]
    rows += [{"parametrization": "sp", "width": 64, "log2_lr": x, "final_loss": y}
             for x, y in ((-4, None), (-8, 1.0), (-6, None))]
    rows += [{"parametrization": "mup", "width": 32, "log2_lr": x, "final_loss": None} for x in (-8, -7)]
    best = {(o["parametrization"], o["width"]): o for o in transfer.find_optimum(rows)}
    self.assertEqual(best[("sp", 32)]["log2_lr"], -7)
    self.assertEqual(best[("sp", 32)]["final_loss"], 2.0)
    self.assertFalse(best[("sp", 32)]["at_edge"])
    self.assertEqual(best[("sp", 32)]["num_diverged"], 2)
    # Vertex of the parabola through (-8, 3), (-7, 2), (-6, 2.5): a = 0.75, vertex at -7 + 0.25/1.5.
    self.assertAlmostEqual(best[("sp", 32)]["log2_lr_interp"], -7 + 0.25 / 1.5)
    self.assertEqual(best[("sp", 64)]["log2_lr"], -8)  # sorted by learning rate: -8 is the smallest, an edge
    self.assertTrue(best[("sp", 64)]["at_edge"])
    self.assertIsNone(best[("sp", 64)]["log2_lr_interp"])
    self.assertIsNone(best[("mup", 32)]["log2_lr"])
    self.assertIsNone(best[("mup", 32)]["final_loss"])
    self.assertEqual(list(best), [("sp", 32), ("sp", 64), ("mup", 32)])

  @given(st.floats(-20, 0), st.floats(0.1, 5.0), st.floats(-0.49, 0.49))
  def test_parabola_vertex_closed_form(self, center, curvature, offset):
    xs = [center - 1.0, center, center + 1.0]
    vertex = center + offset
    ys = [curvature * (x - vertex) ** 2 + 1.0 for x in xs]
    self.assertAlmostEqual(transfer.parabola_vertex(xs, ys), vertex, places=6)

  def test_parabola_vertex_none_when_not_convex(self):
    self.assertIsNone(transfer.parabola_vertex([0.0, 1.0, 2.0], [1.0, 2.0, 3.0]))
    self.assertIsNone(transfer.parabola_vertex([0.0, 1.0, 2.0], [1.0, 2.0, 1.0]))


class ExperimentTest(parameterized.TestCase):

  def test_main_writes_files(self):
    out = pathlib.Path(self.create_tempdir().full_path) / "tr"
    code, stdout, _ = experiment_main.run_main(transfer_exp, out_dir=str(out), **FLAGS_TINY)
    self.assertIsNone(code)
    self.assertIn("optimal learning rate", stdout)
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    self.assertLen(rows, 2 * 3)
    self.assertEqual({(r["parametrization"], r["log2_lr"]) for r in rows},
                     {(p, x) for p in ("sp", "mup") for x in (-9.0, -6.0, -3.0)})
    for r in rows:
      self.assertContainsSubset({"parametrization", "width", "log2_lr", "final_loss", "final_loss_seeds",
                                 "diverged_seeds"}, set(r))
      self.assertLen(r["final_loss_seeds"], 2)
    optimum = [json.loads(line) for line in (out / "optimum.jsonl").read_text().splitlines()]
    self.assertEqual([(o["parametrization"], o["width"]) for o in optimum], [("sp", 16), ("mup", 16)])
    for o in optimum:
      finite = [r["final_loss"] for r in rows if r["parametrization"] == o["parametrization"] and r["final_loss"]]
      self.assertEqual(o["final_loss"], min(finite))
    # At the base width μP is SP (same init, multipliers, learning rates and logit scale): identical losses.
    by = {(r["parametrization"], r["log2_lr"]): r["final_loss"] for r in rows}
    for x in (-9.0, -6.0, -3.0):
      self.assertAlmostEqual(by[("sp", x)], by[("mup", x)], places=5)
    self.assertGreater((out / "transfer.png").stat().st_size, 1000)
    config = json.loads((out / "config.json").read_text())
    self.assertEqual(config["config"]["optimizer"]["warmup_steps"], WARMUP)

  def test_finished_widths_survive_an_interruption(self):
    out = pathlib.Path(self.create_tempdir().full_path) / "tr"
    real = transfer.run_width
    calls = []

    def flaky(config, name, width, dataset):
      calls.append(name)
      if len(calls) == 2:
        raise KeyboardInterrupt
      return real(config, name, width, dataset)

    with mock.patch.object(transfer, "run_width", flaky), self.assertRaises(KeyboardInterrupt):
      experiment_main.run_main(transfer_exp, out_dir=str(out), **FLAGS_TINY)
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    self.assertEqual({r["parametrization"] for r in rows}, {"sp"})
    self.assertLen(rows, 3)
    self.assertLen((out / "optimum.jsonl").read_text().splitlines(), 1)

  @parameterized.parameters(
      ("--log2_lrs=nan", "--log2_lrs"), ("--log2_lrs=", "--log2_lrs"), ("--log2_lrs=-8,x", "--log2_lrs"),
      ("--widths=0", "--widths"), ("--num_seeds=0", "--num_seeds"), ("--steps=0", "--steps"),
      ("--parametrizations=sp,xp", "--parametrizations"), ("--schedule=step", "--schedule"),
      ("--batch_size=0", "--batch_size"), ("--head_dim=-1", "--head_dim"), ("--end_factor=-1", "--end_factor"),
  )
  def test_parse_errors_are_one_line(self, arg, name):
    err = std_io.StringIO()
    with flagsaver.flagsaver(), contextlib.redirect_stderr(err):
      with self.assertRaises(SystemExit) as ctx:
        common._parse_flags(["transfer", arg])  # pylint: disable=protected-access
    self.assertEqual(ctx.exception.code, 2)
    lines = err.getvalue().strip().splitlines()
    self.assertLen(lines, 1)
    self.assertTrue(lines[0].startswith("error:"), lines[0])
    self.assertIn(name, lines[0])

  @parameterized.named_parameters(
      ("lr_out_of_range", dict(log2_lrs=[-8.0, 200.0]), "--log2_lrs"),
      ("warmup_too_long", dict(warmup_steps=STEPS), "--warmup_steps"),
      ("average_last_too_long", dict(average_last=STEPS + 1), "--average_last"),
      ("width_not_multiple_of_head_dim", dict(num_heads=None, head_dim=8, widths=[16, 20]), "--widths"),
      ("both_head_flags", dict(head_dim=8), "--num_heads and --head_dim"),
      ("text_without_file", dict(task="text"), "--text_file"),
      ("missing_file", dict(task="text", text_file="/nonexistent/x.txt"), "does not exist"),
      ("empty_file", dict(task="text", text_file=b""), "empty"),
      ("binary_file", dict(task="text", text_file=b"\x89PNG\x00\x00" * 20), "binary"),
      ("short_file", dict(task="text", text_file=b"to be"), "too short"),
  )
  def test_bad_input_fails_before_writing(self, kw, text):
    kw = dict(kw)
    if isinstance(kw.get("text_file"), bytes):
      path = pathlib.Path(self.create_tempdir().full_path) / "data.txt"
      path.write_bytes(kw["text_file"])
      kw["text_file"] = str(path)
    out = pathlib.Path(self.create_tempdir().full_path) / "never"
    code, stdout, stderr = experiment_main.run_main(transfer_exp, out_dir=str(out), **{**FLAGS_TINY, **kw})
    self.assertEqual(code, 2)
    lines = stderr.strip().splitlines()
    self.assertLen(lines, 1, stderr)
    self.assertTrue(lines[0].startswith("error: --"), lines[0])
    self.assertIn(text, lines[0])
    self.assertEqual(stdout, "")
    self.assertFalse(out.exists())


if __name__ == "__main__":
  absltest.main()
