"""Benchmarks, each timed side by side in one run and reported as ratios.

  python -m experiments.benchmark                      # every suite
  python -m experiments.benchmark --suite=sweep --quick

Suites live in experiments/bench_<suite>.py and expose run(out_dir, quick=...).
Each prints a table and writes <suite>.json and <suite>.png into --out_dir. The
suites time compilation, so they run with JAX's persistent compilation cache
off whatever --compilation_cache_dir says (the sweep suite measures the cache in
processes of its own).
"""

from __future__ import annotations

import dataclasses
import importlib
import pathlib
import sys
import time

from experiments import cli
from scaling import results
from scaling.config import option
from scaling.config import Options

SUITES = ("sweep", "attention", "train")


@dataclasses.dataclass(frozen=True)
class BenchmarkConfig(Options):
  """Which suites to run."""

  suite: tuple[str, ...] = option(SUITES, "Suites to run, comma-separated.", choices=SUITES)
  quick: bool = option(False, "Tiny sizes: a smoke run, not a measurement.")
  output: results.OutputConfig = option(results.OutputConfig("runs/benchmark"), "Output.")


def run(config: BenchmarkConfig, out_dir: pathlib.Path) -> dict:
  """Runs each suite, each printing its table, and writes summary.json."""
  results.make_dir(out_dir)
  modules = {suite: importlib.import_module(f"experiments.bench_{suite}") for suite in dict.fromkeys(config.suite)}
  summary = {}
  for suite, module in modules.items():
    print(f"== suite {suite}", flush=True)
    start = time.perf_counter()
    with cli.persistent_compilation_cache(None):
      summary[suite] = module.run(out_dir, quick=config.quick)
    summary[suite]["wall_s"] = time.perf_counter() - start
  results.write_json(out_dir / "summary.json", summary)
  print(f"wrote {', '.join(f'{s}.json' for s in summary)} and summary.json to {out_dir}")
  return summary


def main(argv=None) -> int:
  return cli.main(BenchmarkConfig, run, argv, __doc__)


if __name__ == "__main__":
  sys.exit(main())
