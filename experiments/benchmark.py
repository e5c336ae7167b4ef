"""Benchmarks, each timed side by side in one run and reported as ratios.

  python -m experiments.benchmark                      # every suite but studies and attention_rule
  python -m experiments.benchmark --suite=studies      # the studies' time split (about an hour on 2 cores)
  python -m experiments.benchmark --suite=attention_rule   # the attention rule's timings (about 20 min on 2 cores)
  python -m experiments.benchmark --suite=tests        # the test suite's wall time (README's test-time line)
  python -m experiments.benchmark --suite=sweep --quick
  python -m experiments.benchmark --suite=attention --seq_lens=512,2048 --head_dims=64 --repeats=3

The suites live in benchmarks/ (sweep.py, attention.py,
train.py, attention_profile.py, attention_rule.py, studies.py, pytest_time.py). Each prints a
table and writes <suite>.json and <suite>.png (and
<suite>.md, for the generated sections of docs/benchmarks.md) into --out_dir; --quick runs
each on tiny sizes (a smoke run, not a measurement). --seq_lens, --head_dims,
--repeats and --max_call_s size the attention suite, --rule_tables,
--rule_repeats and --rule_max_gflop the attention_rule suite. The suites time
compilation, so they run with JAX's persistent compilation cache off whatever
--compilation_cache_dir says (the sweep and studies suites measure the cache in
processes of their own).
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
import time
from typing import Any, Callable, Collection

from experiments import cli
from scaling.base import config as config_lib
from scaling.studies import process
from scaling.runs import report
from scaling.runs import results
from scaling.base.config import option
from scaling.base.config import Options
from benchmarks import attention as attention_bench
from benchmarks import attention_profile as attention_profile_bench
from benchmarks import attention_rule as attention_rule_bench
from benchmarks import pytest_time as tests_bench
from benchmarks import studies as studies_bench
from benchmarks import sweep as sweep_bench
from benchmarks import train as train_bench
from scaling.base.validation import ConfigError

SUITES: dict[str, tuple[Callable[[Any, pathlib.Path], dict], Options, Options]] = {
    "sweep": (sweep_bench.run, sweep_bench.SweepBenchConfig(), sweep_bench.QUICK),
    "attention": (attention_bench.run, attention_bench.AttentionBenchConfig(), attention_bench.QUICK),
    "train": (train_bench.run, train_bench.TrainBenchConfig(), train_bench.QUICK),
    "attention_profile": (attention_profile_bench.run, attention_profile_bench.AttentionProfileConfig(),
                          attention_profile_bench.QUICK),
    "attention_rule": (attention_rule_bench.run, attention_rule_bench.AttentionRuleConfig(),
                       attention_rule_bench.QUICK),
    "studies": (studies_bench.run, studies_bench.StudiesBenchConfig(), studies_bench.QUICK),
    "tests": (tests_bench.run, tests_bench.TestsBenchConfig(), tests_bench.QUICK),
}
"""Suite name: (its run(config, out_dir), its default config, its quick config)."""
DEFAULT_SUITES = tuple(name for name in SUITES if name not in ("studies", "attention_rule", "tests"))
"""The suites of a plain run: all but studies (which runs the claims, coordinate check and transfer, twice each),
attention_rule (a few hundred compiled attention programs) and tests (the whole test suite)."""
RULE_COMMAND_LINE = ("rule_tables", "rule_repeats", "rule_max_gflop")
"""The options of ``attention_rule.AttentionRuleConfig`` that have flags."""


@dataclasses.dataclass(frozen=True)
class BenchmarkConfig(Options):
  """Which suites to run, the sizes of the attention suite (those of ``attention.COMMAND_LINE``) and the
  attention_rule suite's tables (``RULE_COMMAND_LINE``)."""

  HIDDEN = tuple(spec.name for spec in config_lib.option_specs(attention_bench.AttentionBenchConfig)
                 if spec.name not in attention_bench.COMMAND_LINE)

  suite: tuple[str, ...] = option(DEFAULT_SUITES, "Suites to run, comma-separated (studies, about an hour of "
                                  "other experiments' runs, attention_rule and tests only when named).",
                                  choices=tuple(SUITES))
  quick: bool = option(False, "Tiny sizes: a smoke run, not a measurement.")
  attention: attention_bench.AttentionBenchConfig = option(SUITES["attention"][1], "The attention suite.")
  attention_rule: attention_rule_bench.AttentionRuleConfig = option(SUITES["attention_rule"][1],
                                                                    "The attention_rule suite.")
  output: results.OutputConfig = option(results.OutputConfig("runs/benchmark"), "Output.")

  def check_given(self, given: Collection[str]) -> None:
    """ConfigError naming an attention-suite option typed without the attention suite, or with --quick."""
    for suite, names in (("attention", attention_bench.COMMAND_LINE), ("attention_rule", RULE_COMMAND_LINE)):
      typed = [name for name in names if name in given]
      if typed and (suite not in self.suite or self.quick):
        why = "--quick sets its own sizes" if self.quick else f"--suite does not include {suite}"
        raise ConfigError(f"--{typed[0]} sizes the {suite} suite, but {why}")

  def suite_config(self, suite: str) -> Options:
    """The config ``suite`` runs with: its quick sizes with --quick, else its defaults (attention: the flags)."""
    if suite not in SUITES:
      raise ConfigError(f"suite must be one of {', '.join(SUITES)}; got {suite!r}")
    _, default, quick = SUITES[suite]
    if self.quick:
      return quick
    return {"attention": self.attention, "attention_rule": self.attention_rule}.get(suite, default)


def run(config: BenchmarkConfig, out_dir: pathlib.Path) -> dict:
  """Runs each suite, each printing its table, and writes summary.json."""
  results.make_dir(out_dir)
  summary = {}
  suites = list(dict.fromkeys(config.suite))
  with report.Progress(len(suites), "benchmark", every_s=0.0) as progress:
    for suite in suites:
      print(f"== suite {suite}", flush=True)
      start = time.perf_counter()
      with process.persistent_compilation_cache(None):
        summary[suite] = SUITES[suite][0](config.suite_config(suite), out_dir)
      summary[suite]["wall_s"] = time.perf_counter() - start
      progress.update(f"{suite} ({summary[suite]['wall_s']:.0f}s)")
  results.write_json(out_dir / "summary.json", summary)
  print(f"wrote {', '.join(f'{s}.json' for s in summary)} and summary.json to {out_dir}")
  return summary


def main(argv=None) -> int:
  return cli.main(BenchmarkConfig, run, argv, __doc__)


if __name__ == "__main__":
  sys.exit(main())
