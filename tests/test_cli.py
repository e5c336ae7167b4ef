"""Flags derived from the config declarations: one declaration per option, shared groups with one meaning."""

import dataclasses
import json
import pathlib
import re

from absl.testing import absltest
from absl.testing import parameterized

from experiments import cli
from experiments import train as train_main
import experiment_main
from scaling.base import config as config_lib
from scaling.training.data.config import DataConfig
from scaling.training.model.family import ModelFamily
from scaling.training.optimizer import OptimizerConfig
from scaling.base import validation
from scaling.studies.claims import study as claims
from scaling.studies.coord_check import study as coord_check
from scaling.studies import sweep
from scaling.studies import train as training
from scaling.studies.transfer import study as transfer
from benchmarks import memory

TRAINING_STUDIES = (training.TrainConfig, coord_check.CoordCheckConfig, transfer.TransferConfig)
SHARED_GROUPS = (DataConfig, ModelFamily, OptimizerConfig)


def _names(cls):
  return {spec.name for _, spec in config_lib.flat_options(cls)}


class SharedOptionsTest(parameterized.TestCase):

  @parameterized.parameters(*TRAINING_STUDIES)
  def test_every_training_study_exposes_the_shared_groups(self, cls):
    names = _names(cls)
    for group in SHARED_GROUPS:
      expected = {s.name for s in config_lib.option_specs(group)} - set(cls.HIDDEN)
      self.assertLessEqual(expected, names, (cls.__name__, group.__name__))
    self.assertIn("out_dir", names)
    self.assertIn("seed", names)

  def test_shared_options_have_the_same_meaning(self):
    argv = ["prog", "--text_file=/tmp/some.txt", "--seq_len=16", "--batch_size=3", "--depth=3", "--head_dim=8",
            "--rule=qk_norm", "--optimizer=sgd", "--momentum=0.5", "--steps=7", "--schedule=cosine",
            "--warmup_steps=2", "--seed=5", "--zero_query", "--out_dir=/tmp/x"]
    configs = [cli.parse(cls, argv + ([] if cls is transfer.TransferConfig else ["--learning_rate=0.1"]))
               for cls in TRAINING_STUDIES]
    for c in configs:
      self.assertEqual(c.data, DataConfig(text_file="/tmp/some.txt", seq_len=16, batch_size=3))
      self.assertEqual(c.data.name, "text")  # --text_file alone selects text, everywhere
      self.assertEqual(c.model, ModelFamily(depth=3, head_dim=8, rule="qk_norm", zero_query=True))
      self.assertEqual((c.optim.optimizer, c.optim.momentum, c.optim.steps, c.optim.schedule, c.optim.warmup),
                       ("sgd", 0.5, 7, "cosine", 2))
      self.assertEqual(c.seeds.seed, 5)
      self.assertEqual(c.output.out_dir, "/tmp/x")

  def test_declared_once(self):
    # A leaf option appears once per study: the flag namespace is derived, not written by hand.
    for cls in TRAINING_STUDIES:
      names = [spec.name for _, spec in config_lib.flat_options(cls)]
      self.assertEqual(len(names), len(set(names)), cls.__name__)

  def test_hidden_options_have_no_flag(self):
    with self.assertRaisesRegex(cli.UsageError, "learning_rate"):
      cli.parse(transfer.TransferConfig, ["prog", "--learning_rate=0.1"])
    with self.assertRaisesRegex(cli.UsageError, "num_seeds"):
      cli.parse(training.TrainConfig, ["prog", "--num_seeds=2"])

  def test_study_defaults_come_from_the_group_instance(self):
    self.assertEqual(cli.parse(coord_check.CoordCheckConfig, ["prog"]).data.seq_len, 32)
    self.assertEqual(cli.parse(transfer.TransferConfig, ["prog"]).data.seq_len, 32)
    self.assertEqual(cli.parse(training.TrainConfig, ["prog"]).data.seq_len, 24)


class EpsScalingFlagTest(parameterized.TestCase):
  """--eps_scaling is an enum flag: its choices parse; the boolean spellings end in one line naming the flag."""

  @parameterized.parameters((["--eps_scaling=mup"], "mup"), (["--eps_scaling=none"], "none"), ([], "none"),
                            (["--eps_scaling=mup", "--eps_scaling=none"], "none"))
  def test_values(self, args, want):
    self.assertEqual(cli.parse(training.TrainConfig, ["prog", *args]).optim.eps_scaling, want)

  def test_flagfile(self):
    path = self.create_tempfile(content="--eps_scaling=mup\n--steps=3\n").full_path
    config = cli.parse(training.TrainConfig, ["prog", f"--flagfile={path}"])
    self.assertEqual((config.optim.eps_scaling, config.optim.steps), ("mup", 3))

  @parameterized.parameters((["--eps_scaling=true"], "--eps_scaling=true: 'true': must be one of none, mup"),
                            (["--eps_scaling=False"], "--eps_scaling=False: 'False': must be one of none, mup"),
                            (["--eps_scaling=yes"], "--eps_scaling=yes: 'yes': must be one of none, mup"),
                            (["--eps_scaling=mp"], "--eps_scaling=mp: 'mp': must be one of none, mup (did you mean "
                             "'mup'?)"),
                            (["--eps_scaling"], "Missing value for flag --eps_scaling"),
                            (["-eps_scaling"], "Missing value for flag -eps_scaling"),
                            (["--noeps_scaling"], "unknown flag --noeps_scaling; did you mean --eps_scaling?"),
                            (["--lr=0.1"], "unknown flag --lr; did you mean --learning_rate?"))
  def test_boolean_spellings_are_refused(self, args, message):
    with self.assertRaises(cli.UsageError) as ctx:
      cli.parse(training.TrainConfig, ["prog", *args])
    self.assertIn(message, str(ctx.exception))
    self.assertNotIn("\n", str(ctx.exception))

  def test_boolean_value_in_python_names_the_choices(self):
    for value in (True, False):
      with self.assertRaisesRegex(ValueError, f"eps_scaling must be one of none, mup; got {value}"):
        OptimizerConfig(eps_scaling=value)

  def test_positionals_are_refused(self):
    with self.assertRaisesRegex(cli.UsageError, "unexpected positional arguments: --eps_scaling=mup"):
      cli.parse(training.TrainConfig, ["prog", "--", "--eps_scaling=mup"])

  def test_main_prints_one_line(self):
    out = self.create_tempdir().full_path + "/out"
    for flag, needle in ((True, "Missing value for flag --eps_scaling"), ("true", "'true': must be one of none, mup")):
      code, stdout, stderr = experiment_main.run_main(train_main, out_dir=out, eps_scaling=flag)  # the flag last
      experiment_main.assert_one_line_error(self, code, stdout, stderr, needle, out)


class DerivedValuesTest(absltest.TestCase):

  def test_mup_equals_sp_logit_scale_at_the_base_width(self):
    # experiments.train's defaults: width 64 = base width, 4 heads of 16. μP's α/d_k must equal SP's 1/√d_k there.
    config = cli.parse(training.TrainConfig, ["prog", "--parametrization=mup"])
    dataset = config.data.make()
    mup = config.model_config(dataset)
    sp = dataclasses.replace(config, parametrization="sp").model_config(dataset)
    self.assertEqual(mup.head_dim, 16)
    self.assertAlmostEqual(mup.attention_rule.logit_scale(16), 0.25)
    self.assertAlmostEqual(sp.attention_rule.logit_scale(16), 0.25)

  def test_base_head_dim_follows_base_width_and_heads(self):
    self.assertEqual(ModelFamily(base_width=64).base_head_dim, 16)
    self.assertEqual(ModelFamily(base_width=64, num_heads=2).base_head_dim, 32)
    self.assertEqual(ModelFamily(base_width=64, head_dim=8).base_head_dim, 8)


@dataclasses.dataclass(frozen=True)
class _Inner(config_lib.Options):
  rate: float = config_lib.option(0.5, "A rate.", positive=True)
  names: tuple[str, ...] = config_lib.option(("a",), "Names.", choices=("a", "b"))


@dataclasses.dataclass(frozen=True)
class _Middle(config_lib.Options):
  inner: _Inner = config_lib.option(_Inner(rate=2.0), "Inner group.")
  count: int = config_lib.option(3, "A count.", lower=1)


@dataclasses.dataclass(frozen=True)
class _Outer(config_lib.Options):
  middle: _Middle = config_lib.option(_Middle(count=7), "Middle group.")
  flag: bool = config_lib.option(False, "A flag.")


@dataclasses.dataclass(frozen=True)
class _Picky(_Outer):
  def check_given(self, given):
    if "count" in given and not self.flag:
      raise ValueError("count only applies with flag=True")


class OptionTest(parameterized.TestCase):

  def test_nested_groups_keep_their_instance_defaults(self):
    self.assertEqual(config_lib.build(_Outer, {}), _Outer())
    self.assertEqual(config_lib.build(_Outer, {}).middle.inner.rate, 2.0)
    built = config_lib.build(_Outer, {"names": ("b",), "flag": True})
    self.assertEqual(built, _Outer(middle=_Middle(inner=_Inner(rate=2.0, names=("b",)), count=7), flag=True))
    self.assertEqual([s.name for _, s in config_lib.flat_options(_Outer)], ["rate", "names", "count", "flag"])
    parsed = cli.parse(_Outer, ["prog", "--rate=3", "--names=a,b", "--count=9"])
    self.assertEqual(parsed.middle, _Middle(inner=_Inner(rate=3.0, names=("a", "b")), count=9))
    with self.assertRaisesRegex(cli.UsageError, "--names"):
      cli.parse(_Outer, ["prog", "--names=c"])

  def test_check_given_sees_the_typed_options(self):
    self.assertIsNone(_Outer().check_given({"count", "flag"}))  # the base accepts whatever was typed
    self.assertEqual(cli.parse(_Outer, ["prog", "--count=3"]).middle.count, 3)
    self.assertEqual(cli.parse(_Picky, ["prog", "--count=7", "--flag"]).middle.count, 7)
    self.assertEqual(cli.parse(_Picky, ["prog"]).middle.count, 7)
    with self.assertRaises(cli.UsageError) as ctx:  # typed at its default, still typed
      cli.parse(_Picky, ["prog", "--count=7"])
    self.assertEqual(str(ctx.exception), "--count only applies with --flag")

  @parameterized.parameters(
      (DataConfig, {"seq_len": 0}, "seq_len must be at least 1"),
      (DataConfig, {"task": "text"}, "^task='text' needs text_file$"),
      (DataConfig, {"task": "recall", "text_file": "x"}, "^text_file selects task='text', but task='recall'"),
      (DataConfig, {"task": "induction", "num_pairs": 2}, "^num_pairs and num_queries only apply"),
      (OptimizerConfig, {"weight_decay": 0.1}, "^weight_decay needs optimizer='adamw'"),
      (OptimizerConfig, {"momentum": 1.0, "optimizer": "sgd"}, "momentum must be below 1"),
      (OptimizerConfig, {"warmup_steps": 5, "steps": 5}, "^warmup_steps=5 must be smaller than steps=5$"),
      (OptimizerConfig, {"learning_rate": float("nan")}, "finite"),
      (OptimizerConfig, {"optimizer": "lamb"}, "optimizer must be one of"),
      (ModelFamily, {"tau": 2.0}, "^tau only applies to rule='temperature'$"),
      (ModelFamily, {"num_heads": 4, "num_kv_heads": 3}, "^num_heads=4 must be a multiple of num_kv_heads=3$"),
  )
  def test_bad_values_name_the_option_as_a_field(self, cls, kwargs, message):
    with self.assertRaisesRegex(ValueError, message):
      cls(**kwargs)

  @parameterized.parameters(
      # (message, fields, the command line's text) for _Outer: flags rate, names, count, flag (a boolean).
      ("count only applies with flag=True", (), "--count only applies with --flag"),
      ("count only applies with flag=False", (), "--count only applies with --noflag"),
      ("rate=0.5 and names=('a', 'b') conflict", (), "--rate=0.5 and --names=a,b conflict"),
      ("names=('b',): too few", (), "--names=b: too few"),
      ("a rate of 2 needs names='a' (x=1 is no flag)", (), "a rate of 2 needs --names=a (x=1 is no flag)"),
      ("give rate or count, not both", ("rate", "count"), "give --rate or --count, not both"),
      ("give rate or count, not both", ("rate",), "give --rate or count, not both"),  # only the listed words
      ("the count-rate table counts count; 'count' is a name", ("count",),
       "the count-rate table counts --count; 'count' is a name"),
      ("rate: too high", (), "--rate: too high"), ("ratex is no option", (), "ratex is no option"),
      ("width mode needs rate", ("width", "rate"), "width mode needs --rate"),  # width is no flag of _Outer
  )
  def test_flag_text_writes_the_fields_as_flags(self, message, fields, expected):
    error = validation.ConfigError(message, fields=fields)
    self.assertEqual(str(error), message)  # the library's own text is left alone
    self.assertEqual(cli.flag_text(error, _Outer), expected)

  def test_library_errors_through_main_name_flags(self):
    out = self.create_tempdir().full_path + "/never"
    code, stdout, stderr = experiment_main.run_main(train_main, out_dir=out, tau=2.0)  # the config's check
    experiment_main.assert_one_line_error(self, code, stdout, stderr, "", out)
    self.assertEqual(stderr.strip(), "error: --tau only applies to --rule=temperature")
    code, stdout, stderr = experiment_main.run_main(train_main, out_dir=out, qk_norm="layer", qk_norm_gains=False)
    self.assertEqual(stderr.strip(), "error: --qk_norm=layer and --noqk_norm_gains only apply to --rule=qk_norm")
    blocker = pathlib.Path(self.create_tempdir().full_path) / "file"
    blocker.write_text("x")
    code, stdout, stderr = experiment_main.run_main(train_main, out_dir=blocker / "sub", steps=1)  # while running
    experiment_main.assert_one_line_error(self, code, stdout, stderr, "", None)
    self.assertRegex(stderr.strip(), f"^error: --out_dir={re.escape(str(blocker / 'sub'))}: cannot create directory")

  def test_bad_flag_becomes_one_line_naming_it(self):
    with self.assertRaises(cli.UsageError) as ctx:
      cli.parse(training.TrainConfig, ["prog", "--warmup_steps=9", "--steps=9"])
    self.assertEqual(str(ctx.exception), "--warmup_steps=9 must be smaller than --steps=9")
    with self.assertRaises(cli.UsageError) as ctx:
      cli.parse(training.TrainConfig, ["prog", "--seq_len=0"])
    self.assertIn("--seq_len", str(ctx.exception))


@dataclasses.dataclass(frozen=True)
class _Optional(config_lib.Options):
  level: int | None = config_lib.option(3, "A level, or None.")


# Configs typed on the command line: (class, flags). Lists, nested groups, booleans both ways, floats, None defaults.
TYPED = (
    (sweep.SweepConfig, ["--d_k=8,32", "--rules=sqrt,temperature", "--nofloat32_softmax", "--causal", "--tau=8"]),
    (claims.ClaimsConfig, ["--mode=cpu_hour", "--ids=variance_is_dk,cite_t5_fixed_sqrt", "--d_k=64,128"]),
    (coord_check.CoordCheckConfig, ["--widths=16,32", "--steps=1", "--num_seeds=1", "--depth=1", "--zero_query",
                                    "--learning_rate=0.03", "--text_file=/tmp/t.txt"]),
    (transfer.TransferConfig, ["--widths=16,32", "--log2_lrs=-6,-4", "--parametrizations=mup", "--steps=3"]),
    (training.TrainConfig, ["--rule=qk_norm", "--learning_rate=0.1", "--warmup_steps=2", "--steps=7"]),
    (memory.MemoryConfig, ["--impl=dense", "--seq_len=64", "--nocausal", "--max_memory_fraction=0.25"]),
)


class DictAndCommandLineTest(parameterized.TestCase):
  """``from_dict`` reads back what ``to_dict`` wrote (through JSON); ``command_line`` types a config's changes."""

  @parameterized.parameters(*TYPED)
  def test_json_round_trip(self, cls, flags):
    for config in (cls(), cli.parse(cls, ["prog", *flags])):
      self.assertEqual(config_lib.from_dict(cls, json.loads(json.dumps(config_lib.to_dict(config)))), config)

  @parameterized.parameters(*TYPED)
  def test_command_line_types_the_config(self, cls, flags):
    config = cli.parse(cls, ["prog", *flags])
    typed = config_lib.command_line(config)
    self.assertLen(typed, len(flags))
    self.assertEqual(cli.parse(cls, ["prog", *typed]), config)
    self.assertEqual(config_lib.command_line(cls()), ())

  def test_nested_defaults_and_booleans(self):
    config = _Outer(middle=_Middle(inner=_Inner(rate=2.0, names=("a", "b")), count=7), flag=True)
    self.assertEqual(config_lib.command_line(config), ("--names=a,b", "--flag"))
    self.assertEqual(config_lib.command_line(_Outer(middle=_Middle(inner=_Inner()))), ("--rate=0.5", "--count=3"))
    self.assertEqual(config_lib.from_dict(_Outer, {"middle": {"count": 4}}), _Outer(middle=_Middle(count=4)))
    self.assertEqual(config_lib.from_dict(_Outer, {}), _Outer())

  def test_what_no_flag_gives_is_refused(self):
    with self.assertRaisesRegex(ValueError, "level is None"):
      config_lib.command_line(_Optional(level=None))
    hidden = dataclasses.replace(transfer.TransferConfig(), optim=OptimizerConfig(learning_rate=0.5))
    with self.assertRaisesRegex(ValueError, "optim.learning_rate is changed, but it has no flag"):
      config_lib.command_line(hidden)
    with self.assertRaisesRegex(TypeError, "config must be an Options config"):
      config_lib.command_line({"level": 3})

  def test_from_dict_bad_input(self):
    with self.assertRaisesRegex(ValueError, "_Outer has no option 'flags' \\(did you mean 'flag'\\?\\)"):
      config_lib.from_dict(_Outer, {"flags": True})
    with self.assertRaisesRegex(ValueError, "count must be at least 1"):
      config_lib.from_dict(_Outer, {"middle": {"count": 0}})
    with self.assertRaisesRegex(TypeError, "cls must be an Options class"):
      config_lib.from_dict(dict, {})
    with self.assertRaisesRegex(TypeError, "data must be a mapping"):
      config_lib.from_dict(_Outer, [("flag", True)])


if __name__ == "__main__":
  absltest.main()
