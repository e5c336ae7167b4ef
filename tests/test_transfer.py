"""μTransfer: the vmapped grid against separate runs, final losses and optima with diverged runs, the experiment."""

import dataclasses
import functools
import json
import pathlib
import shutil
import tempfile
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import chex
from hypothesis import given
from hypothesis import strategies as st
import numpy as np

import experiment_main
from experiments import transfer as transfer_exp
from scaling.training.data.config import DataConfig
from scaling.training.model.family import ModelFamily
from scaling.training.optimizer import OptimizerConfig
from scaling.runs import results
from scaling.training.loop import initialization as init_lib
from scaling.training.loop import run as loop_lib
from scaling.training.loop import step as step_lib
from scaling.base.config import Seeds
from scaling.studies.grid import points as grid_lib
from scaling.studies.grid import optimum as optimum_lib
from scaling.studies.transfer import study as transfer
from scaling.studies.transfer import report as transfer_report

# One tiny configuration shared by the grid test and the experiment's smoke test (compiled once per width).
TASK = dict(seq_len=8, batch_size=2)
FAMILY = ModelFamily(depth=1, num_heads=2, base_width=16)
STEPS = 6
WARMUP = 2
LOG2_LRS = (-9.0, -6.0, -3.0)
# The experiment's optimizer for these flags (its hidden learning_rate keeps the default).
OPT = OptimizerConfig(steps=STEPS, schedule="cosine", warmup_steps=WARMUP, end_factor=0.1)
FLAGS_TINY = dict(widths=[16], depth=1, num_heads=2, base_width=16, log2_lrs=list(LOG2_LRS), num_seeds=2,
                  steps=STEPS, warmup_steps=WARMUP, schedule="cosine", end_factor=0.1, **TASK)
TEXT = "".join(f"line {i}: to be, or not to be, that is the question.\n" for i in range(40))


def _tempdir(test) -> pathlib.Path:
  path = pathlib.Path(tempfile.mkdtemp())
  test.addCleanup(shutil.rmtree, path, ignore_errors=True)
  return path


_WHOLE = []


@functools.cache
def _whole_run() -> tuple[int, str, pathlib.Path]:
  """(exit code, stdout, folder) of one uninterrupted run with FLAGS_TINY, which two tests read (neither writes)."""
  out = pathlib.Path(tempfile.mkdtemp()) / "tr"
  _WHOLE.append(out.parent)
  code, stdout, _ = experiment_main.run_with(transfer_exp, FLAGS_TINY, out)
  return code, stdout, out


def tearDownModule():
  for path in _WHOLE:
    shutil.rmtree(path, ignore_errors=True)


def _dataset():
  return DataConfig(**TASK).make(0)


def _config(**kw):
  base = dict(grid=grid_lib.WidthGrid(parametrizations=("sp",), widths=(16,)), log2_lrs=LOG2_LRS,
              seeds=Seeds(num_seeds=2), data=DataConfig(**TASK), model=FAMILY, optim=OPT)
  base.update(kw)
  return transfer.TransferConfig(**base)


class GridTest(chex.TestCase):

  def test_lr_grid_order(self):
    lrs, seeds = grid_lib.lr_grid([-3.0, 1.0], [5, 6, 7])
    np.testing.assert_array_equal(lrs, [0.125] * 3 + [2.0] * 3)
    np.testing.assert_array_equal(seeds, [5, 6, 7, 5, 6, 7])

  def test_vmapped_grid_equals_separate_runs(self):
    dataset = _dataset()
    cfg = FAMILY.model_config("sp", 16, vocab_size=dataset.vocab_size, max_len=TASK["seq_len"])
    lrs, member_seeds = grid_lib.lr_grid(LOG2_LRS, [0, 1])
    grid = loop_lib.run_training(cfg, OPT, dataset, loop_lib.Runs(seed=member_seeds, learning_rates=lrs),
                                 loop_lib.RunOptions(record=("loss", "attn_logits_rms"), stop_on_divergence=False))
    losses = grid.records["loss"]
    chex.assert_shape(losses, (STEPS, 6))
    chex.assert_shape(grid.records["attn_logits_rms"], (STEPS, 6, 1))
    step = step_lib.make_train_step(cfg, OPT, grid=True, donate=True,  # the step run_training uses
                                    chunk=step_lib.default_grid_chunk(cfg, len(lrs)))
    self.assertEqual(step._cache_size(), 1)  # pylint: disable=protected-access
    # Reference: scaling.training.loop.step's own step, one run at a time, optimizer built with the run's learning rate.
    ref_opt = dataclasses.replace(OPT, learning_rate=2.0**-6)
    step = step_lib.make_train_step(cfg, ref_opt)
    for member, (log2_lr, seed) in ((2, (-6.0, 0)), (5, (-3.0, 1))):
      state = init_lib.init_train_state(seed, cfg, ref_opt,
                                        learning_rate=None if log2_lr == -6.0 else 2.0**log2_lr)
      single = []
      for t in range(STEPS):
        state, metrics = step(state, dataset.batch(t, seed))
        single.append(float(metrics["loss"]))
      np.testing.assert_allclose(losses[:, member], single, rtol=2e-5, atol=2e-6)
    # Different learning rates really train differently.
    self.assertGreater(np.max(np.abs(losses[-1, 0] - losses[-1, 4])), 1e-3)
    # run_width summarizes the same grid (same compiled step): final loss = mean of the last `last` losses.
    config = _config()
    rows = transfer.run_point(config, {"parametrization": "sp", "width": 16}, dataset)
    step = step_lib.make_train_step(cfg, OPT, grid=True, donate=True,  # the step run_training uses
                                    chunk=step_lib.default_grid_chunk(cfg, len(lrs)))
    self.assertEqual(step._cache_size(), 1)  # pylint: disable=protected-access
    self.assertLen(rows, len(LOG2_LRS))
    self.assertEqual(config.last, 1)
    for i, r in enumerate(rows):
      self.assertEqual((r["parametrization"], r["width"], r["log2_lr"], r["steps"]), ("sp", 16, LOG2_LRS[i], STEPS))
      np.testing.assert_allclose(r["final_loss_seeds"], losses[-1, 2 * i:2 * i + 2], rtol=1e-6)

  def test_model_family(self):
    fixed_heads = ModelFamily(num_heads=4, base_width=32)
    self.assertEqual(fixed_heads.heads(128), (4, 32))
    self.assertEqual(fixed_heads.base_head_dim, 8)
    cfg = fixed_heads.model_config("mup", 128, vocab_size=10, max_len=8)
    self.assertEqual((cfg.num_heads, cfg.head_dim, cfg.parametrization.base_head_dim, cfg.parametrization.base_width),
                     (4, 32, 8, 32))
    fixed_dim = ModelFamily(head_dim=16).with_base_width([64, 32])
    self.assertEqual(fixed_dim.base_width, 32)
    self.assertEqual(fixed_dim.heads(128), (8, 16))
    self.assertEqual(fixed_dim.model_config("mup", 128, vocab_size=10, max_len=8).parametrization.base_head_dim, 16)
    # Both given: the number of heads and the head dim are fixed.
    self.assertEqual(ModelFamily(num_heads=2, head_dim=8).heads(64), (2, 8))
    self.assertEqual(ModelFamily(base_width=8).with_base_width([16]).base_width, 8)
    with self.assertRaisesRegex(ValueError, "width 20 is not divisible into num_heads=8 heads; pass head_dim or "
                                "num_heads$"):
      ModelFamily(num_heads=8).heads(20)
    with self.assertRaisesRegex(ValueError, "multiple of head_dim=16"):
      ModelFamily(head_dim=16).heads(24)
    with self.assertRaisesRegex(ValueError, "base_width"):
      ModelFamily().base_head_dim  # pylint: disable=expression-not-assigned
    with self.assertRaisesRegex(ValueError, "tau"):
      ModelFamily(tau=2.0)
    with self.assertRaisesRegex(ValueError, "width 24"):
      ModelFamily(head_dim=16, base_width=16).check(("sp",), (16, 24), vocab_size=10, max_len=8)

  def test_optimizer_config_validation(self):
    for kw, text in (({"optimizer": "lion"}, "lion"), ({"schedule": "step"}, "schedule"),
                     ({"schedule": "cosine", "steps": 4, "warmup_steps": 4}, "warmup_steps"),
                     ({"warmup_steps": 4, "steps": 3}, "warmup_steps"),
                     ({"weight_decay": 0.1}, "adamw"), ({"momentum": 0.9}, "sgd"),
                     ({"learning_rate": 0.0}, "learning_rate"), ({"end_factor": -1.0}, "end_factor")):
      with self.assertRaisesRegex(ValueError, text):
        OptimizerConfig(**kw)
    self.assertEqual(OptimizerConfig(steps=40, schedule="cosine").warmup, 4)

  def test_transfer_config_validation(self):
    for make, text in ((lambda: _config(log2_lrs=()), "empty"),
                       (lambda: _config(log2_lrs=(float("nan"),)), "log2_lr"),
                       (lambda: _config(log2_lrs=(-200.0,)), "log2_lr"),
                       (lambda: _config(grid=grid_lib.WidthGrid(widths=(0,))), "width"),
                       (lambda: _config(grid=grid_lib.WidthGrid(widths=())), "empty"),
                       (lambda: _config(optim=OptimizerConfig(steps=10), average_last=11), "average_last"),
                       (lambda: _config(grid=grid_lib.WidthGrid(parametrizations=("sp", "nope"))), "nope"),
                       (lambda: _config(seeds=Seeds(num_seeds=0)), "num_seeds")):
      with self.assertRaisesRegex(ValueError, text):
        make()
    self.assertEqual(_config(optim=OptimizerConfig(steps=35)).last, 3)
    self.assertEqual(_config(optim=OptimizerConfig(steps=5)).last, 1)
    self.assertEqual(_config(average_last=4).last, 4)
    self.assertEqual(_config(log2_lrs=(-3, -3.0, -4)).log2_lrs, (-3.0, -4.0))  # deduplicated, in order
    self.assertEqual(grid_lib.WidthGrid(widths=(32, 16, 32)).widths, (32, 16))
    self.assertEqual(_config(grid=grid_lib.WidthGrid(widths=(64, 32))).family.base_width, 16)  # FAMILY's own
    self.assertEqual(_config(model=ModelFamily(), grid=grid_lib.WidthGrid(widths=(64, 32))).family
                     .base_width, 32)


class SummaryTest(parameterized.TestCase):

  def test_summarize_grid_with_diverged_seeds(self):
    # 2 learning rates x 2 seeds, 4 steps; member 3 (lr 1, seed 1) diverges at step 1 and comes back finite.
    losses = np.array([[4.0, 4.0, 4.0, 4.0],
                       [3.0, 2.5, 3.5, np.inf],
                       [2.0, 1.5, 3.0, 1.0],
                       [1.0, 0.5, 2.0, 1.0]])
    rows = optimum_lib.summarize_grid(losses, [-4.0, -2.0], num_seeds=2, last=2)
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
      optimum_lib.summarize_grid(np.zeros((3, 5)), [-1.0, -2.0], 2, 1)
    with self.assertRaisesRegex(ValueError, "last"):
      optimum_lib.summarize_grid(np.zeros((3, 4)), [-1.0, -2.0], 2, 4)

  def test_find_optimum_treats_diverged_as_infinite(self):
    rows = [{"parametrization": "sp", "width": 32, "log2_lr": x, "final_loss": y}
            for x, y in ((-8, 3.0), (-7, 2.0), (-6, 2.5), (-5, None), (-4, float("nan")))]
    rows += [{"parametrization": "sp", "width": 64, "log2_lr": x, "final_loss": y}
             for x, y in ((-4, None), (-8, 1.0), (-6, None))]
    rows += [{"parametrization": "mup", "width": 32, "log2_lr": x, "final_loss": None} for x in (-8, -7)]
    best = {(o["parametrization"], o["width"]): o for o in optimum_lib.find_optimum(rows)}
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
    self.assertAlmostEqual(optimum_lib.parabola_vertex(xs, ys), vertex, places=6)

  def test_parabola_vertex_none_when_not_convex(self):
    self.assertIsNone(optimum_lib.parabola_vertex([0.0, 1.0, 2.0], [1.0, 2.0, 3.0]))
    self.assertIsNone(optimum_lib.parabola_vertex([0.0, 1.0, 2.0], [1.0, 2.0, 1.0]))


class ExperimentTest(parameterized.TestCase):

  def test_main_writes_files(self):
    code, stdout, out = _whole_run()
    self.assertEqual(code, 0)
    self.assertIn("optimal learning rate", stdout)
    rows = results.read_jsonl(out / "results.jsonl")
    self.assertLen(rows, 2 * 3)
    self.assertEqual({(r["parametrization"], r["log2_lr"]) for r in rows},
                     {(p, x) for p in ("sp", "mup") for x in LOG2_LRS})
    for r in rows:
      self.assertContainsSubset({"parametrization", "width", "log2_lr", "final_loss", "final_loss_seeds",
                                 "diverged_seeds"}, set(r))
      self.assertLen(r["final_loss_seeds"], 2)
    optimum = results.read_jsonl(out / "optimum.jsonl")
    self.assertEqual([(o["parametrization"], o["width"]) for o in optimum], [("sp", 16), ("mup", 16)])
    for o in optimum:
      finite = [r["final_loss"] for r in rows if r["parametrization"] == o["parametrization"] and r["final_loss"]]
      self.assertEqual(o["final_loss"], min(finite))
    # At the base width μP is SP (same init, multipliers, learning rates and logit scale): identical losses.
    by = {(r["parametrization"], r["log2_lr"]): r["final_loss"] for r in rows}
    for x in LOG2_LRS:
      self.assertAlmostEqual(by[("sp", x)], by[("mup", x)], places=5)
    self.assertGreater((out / "transfer.png").stat().st_size, 1000)
    self.assertFalse((out / "results.partial.jsonl").exists())
    config = json.loads((out / "config.json").read_text())
    self.assertEqual(config["config"]["optim"]["warmup_steps"], WARMUP)
    self.assertEqual(config["config"]["optim"]["steps"], STEPS)
    self.assertEqual(config["config"]["grid"]["widths"], [16])
    self.assertEqual(config["dataset"]["name"], "recall")
    self.assertNotIn("u-μP op scales", (out / "optimum.md").read_text())

  def test_umup_heading_names_its_op_scales(self):
    out = _tempdir(self) / "tr_umup"
    flags = dict(FLAGS_TINY, parametrizations=["umup"], umup_scales="covariance")
    code, _, _ = experiment_main.run_with(transfer_exp, flags, out)
    self.assertEqual(code, 0)
    self.assertIn("u-μP op scales covariance;", (out / "optimum.md").read_text().splitlines()[0])
    self.assertEqual(json.loads((out / "config.json").read_text())["config"]["model"]["umup_scales"], "covariance")

  def test_text_file_alone_selects_the_text_task(self):
    stdout, out = experiment_main.assert_runs_on_text_file_alone(
        self, transfer_exp, FLAGS_TINY, TEXT, str(_tempdir(self)), parametrizations=["sp"], log2_lrs=[-6.0],
        num_seeds=1, steps=2, warmup_steps=None)
    self.assertIn("optimal learning rate", stdout)
    rows = results.read_jsonl(pathlib.Path(out) / "results.jsonl")
    self.assertLen(rows, 1)
    self.assertIsNotNone(rows[0]["final_loss"])

  def test_finished_widths_survive_an_interruption(self):
    out = _tempdir(self) / "tr"
    real = transfer.run_point
    calls = []

    def flaky(config, point, dataset):
      calls.append(point["parametrization"])
      if len(calls) == 2:
        raise KeyboardInterrupt
      return real(config, point, dataset)

    with mock.patch.object(transfer, "run_point", flaky):
      code, _, _ = experiment_main.run_with(transfer_exp, FLAGS_TINY, out)
    self.assertEqual(code, 130)
    # The finished width's rows were streamed into the partial files, which an interrupted run leaves in place.
    self.assertFalse((out / "results.jsonl").exists())
    rows = results.read_jsonl(out / "results.partial.jsonl")
    self.assertEqual({r["parametrization"] for r in rows}, {"sp"})
    self.assertLen(rows, 3)
    self.assertFalse((out / "optimum.jsonl").exists())  # made from the complete rows at the end
    # Rerun with the same flags: only the unfinished width trains, and the files are those of a whole run.
    calls.clear()
    with mock.patch.object(transfer, "run_point", lambda *a: calls.append(a[1]["parametrization"]) or real(*a)):
      code, _, _ = experiment_main.run_with(transfer_exp, FLAGS_TINY, out)
    self.assertEqual(code, 0)
    self.assertEqual(calls, ["mup"])
    code, _, whole = _whole_run()
    self.assertEqual(code, 0)
    for name in ("results.jsonl", "optimum.jsonl"):
      self.assertEqual((out / name).read_bytes(), (whole / name).read_bytes(), name)

  @parameterized.parameters(
      ("--log2_lrs=nan", "--log2_lrs"), ("--log2_lrs=", "--log2_lrs"), ("--log2_lrs=-8,x", "--log2_lrs"),
      ("--widths=0", "--widths"), ("--num_seeds=0", "--num_seeds"), ("--steps=0", "--steps"),
      ("--parametrizations=sp,xp", "--parametrizations"), ("--schedule=step", "--schedule"),
      ("--batch_size=0", "--batch_size"), ("--head_dim=-1", "--head_dim"), ("--end_factor=-1", "--end_factor"),
      ("--learning_rate=0.1", "learning_rate"),  # hidden: the grid sets the learning rates
      ("--task=images", "--task"), ("--rule=nope", "--rule"), ("--seed=-1", "--seed"),
  )
  def test_parse_errors_are_one_line(self, arg, name):
    flag, value = arg[2:].split("=", 1)
    out = _tempdir(self) / "never"
    code, stdout, stderr = experiment_main.run_main(transfer_exp, out_dir=str(out), **{flag: value})
    experiment_main.assert_one_line_error(self, code, stdout, stderr, name, out)

  @parameterized.named_parameters(
      ("lr_out_of_range", dict(log2_lrs=[-8.0, 200.0]), "--log2_lrs"),
      ("warmup_too_long", dict(warmup_steps=STEPS), "--warmup_steps"),
      ("average_last_too_long", dict(average_last=STEPS + 1), "--average_last"),
      ("width_not_multiple_of_head_dim", dict(num_heads=None, head_dim=8, widths=[16, 20]), "width 20"),
      ("tau_without_temperature", dict(tau=2.0), "--tau"),
      ("text_without_file", dict(task="text"), "--text_file"),
      ("recall_with_text_file", dict(task="recall", text_file=b"abc" * 100), "--text_file"),
      ("missing_file", dict(text_file="/nonexistent/x.txt"), "does not exist"),
      ("empty_file", dict(text_file=b""), "empty"),
      ("binary_file", dict(text_file=b"\x89PNG\x00\x00" * 20), "binary"),
      ("short_file", dict(text_file=b"to be"), "too short"),
  )
  def test_bad_input_fails_before_writing(self, kw, text):
    kw = dict(kw)
    if isinstance(kw.get("text_file"), bytes):
      path = _tempdir(self) / "data.txt"
      path.write_bytes(kw["text_file"])
      kw["text_file"] = str(path)
    out = _tempdir(self) / "never"
    code, stdout, stderr = experiment_main.run_with(transfer_exp, FLAGS_TINY, out, **kw)
    experiment_main.assert_one_line_error(self, code, stdout, stderr, text, out)


if __name__ == "__main__":
  absltest.main()


class OptimumMarkdownTest(absltest.TestCase):

  def test_table_and_spread_of_known_optima(self):
    rows = [
        {"parametrization": "mup", "depth_alpha": 1.0, "width": 64, "depth": 2, "log2_lr": -7.0,
         "log2_lr_interp": -6.75, "final_loss": 2.3, "at_edge": False},
        {"parametrization": "mup", "depth_alpha": 1.0, "width": 64, "depth": 8, "log2_lr": -8.0,
         "log2_lr_interp": None, "final_loss": 2.1, "at_edge": True},
        {"parametrization": "mup", "depth_alpha": 0.0, "width": 64, "depth": 2, "log2_lr": None,
         "log2_lr_interp": None, "final_loss": None, "at_edge": None},
    ]
    lines = transfer_report.optimum_markdown(rows, "Heading:").splitlines()
    self.assertEqual(lines[:3], ["Heading:", "", "| parametrization | α | width | depth | best log2 lr (grid) | "
                                                "optimum (parabola) | final loss | at grid edge |"])
    self.assertEqual(lines[4], "| mup | 1 | 64 | 2 | -7 | -6.75 | 2.300 | no |")
    self.assertEqual(lines[5], "| mup | 1 | 64 | 8 | -8 | – | 2.100 | yes |")
    self.assertEqual(lines[6], "| mup | 0 | 64 | 2 | – | – | – | – |")
    # α = 1 moves from -6.75 (parabola) to -8 (grid): 1.25 octaves; α = 0 has a point where everything diverged.
    self.assertIn("- mup α=1: the optimum moves 1.25 octaves", lines[8])
    self.assertTrue(lines[8].endswith("within 1 octave: no."), lines[8])
    self.assertIn("- mup α=0: the optimum moves n/a", lines[9])
    # Within one octave when the deeper optimum is 0.75 octaves away.
    rows[1] = {**rows[1], "log2_lr": -7.5}
    lines = transfer_report.optimum_markdown(rows, "Heading:").splitlines()
    self.assertTrue(lines[8].endswith("within 1 octave: yes."))
