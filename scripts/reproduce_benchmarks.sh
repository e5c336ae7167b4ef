#!/usr/bin/env bash
# Every benchmark suite (sweep, attention, train); the numbers in docs/benchmarks.md.
# Usage: scripts/reproduce_benchmarks.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
python -m experiments.benchmark --out_dir="${1:-runs}/benchmark"
for suite in sweep train; do
  if [ -f "${1:-runs}/benchmark/$suite.md" ]; then
    python scripts/update_readme.py "bench_$suite" "${1:-runs}/benchmark/$suite.md"
  fi
done
