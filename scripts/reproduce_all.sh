#!/usr/bin/env bash
# Every experiment behind README.md and docs/, in order (about an hour on 2 CPU cores).
# Usage: scripts/reproduce_all.sh [OUT_DIR]
set -euo pipefail
here="$(dirname "$0")"
out=${1:-runs}
"$here/reproduce_sweep.sh" "$out"
"$here/reproduce_claims.sh" "$out"
"$here/reproduce_width.sh" "$out"
"$here/reproduce_training_claims.sh" "$out"
"$here/reproduce_stability.sh" "$out"
"$here/reproduce_umup.sh" "$out"
"$here/reproduce_benchmarks.sh" "$out"
