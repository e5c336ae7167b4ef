#!/usr/bin/env bash
# Every benchmark suite (sweep, attention, train, attention_profile, attention_rule, studies); the numbers in
# docs/benchmarks.md.
# Usage: scripts/reproduce_benchmarks.sh [OUT_DIR]
set -euo pipefail
python=${PYTHON:-python3}  # the interpreter (PYTHON=... picks another, e.g. a virtualenv's)
cd "$(dirname "$0")/.."
out="${1:-runs}/benchmark"
"$python" -m experiments.benchmark --suite=sweep,attention,train,attention_profile,attention_rule,studies \
  --out_dir="$out"
# suite's Markdown -> its section of docs/benchmarks.md
for pair in sweep:bench_sweep train:bench_train attention:attention attention_profile:bench_attention_profile \
    attention_rule:bench_attention_rule studies:bench_studies; do
  suite=${pair%%:*}
  if [ -f "$out/$suite.md" ]; then
    "$python" scripts/update_readme.py "${pair#*:}" "$out/$suite.md"
  fi
done
