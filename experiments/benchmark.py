"""Benchmarks, each timed side by side in one run and reported as ratios.

  python -m experiments.benchmark                      # every suite
  python -m experiments.benchmark --suite=sweep --quick

Suites live in experiments/bench_<suite>.py and expose run(out_dir, quick=...).
Each prints a table and writes <suite>.json and <suite>.png into --out_dir.
"""

from __future__ import annotations

import dataclasses
import importlib
import time

from absl import flags

from experiments import common
from scaling import io

SUITES = ("sweep", "attention", "train")

_SUITE = common.define_enum_list("suite", ",".join(SUITES), SUITES, "Suites to run, comma-separated.")
_QUICK = flags.DEFINE_boolean("quick", False, "Tiny sizes: a smoke run, not a measurement.")
_OUT_DIR = flags.DEFINE_string("out_dir", "runs/benchmark", "Output directory.")


@dataclasses.dataclass(frozen=True)
class BenchmarkConfig:
  suites: tuple[str, ...]
  quick: bool
  out_dir: str


def main(argv):
  common.reject_extra_args(argv)
  config = BenchmarkConfig(tuple(dict.fromkeys(_SUITE.value)), _QUICK.value, _OUT_DIR.value)
  modules = {}
  for suite in config.suites:
    try:
      modules[suite] = importlib.import_module(f"experiments.bench_{suite}")
    except ModuleNotFoundError as e:
      common.fail(f"--suite={suite}: suite is not available ({e})")
  out_dir = common.prepare_out_dir(config.out_dir)
  summary = {}
  for suite, module in modules.items():
    print(f"== suite {suite}", flush=True)
    start = time.perf_counter()
    summary[suite] = module.run(out_dir, quick=config.quick)
    summary[suite]["wall_s"] = time.perf_counter() - start
  io.write_json(out_dir / "summary.json", summary)
  print(f"wrote {', '.join(f'{s}.json' for s in summary)} and summary.json to {out_dir}")


if __name__ == "__main__":
  common.run(main)
