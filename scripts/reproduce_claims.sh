#!/usr/bin/env bash
# Measures every claim of the notes and writes the verdict table shown in README.md.
# Usage: scripts/reproduce_claims.sh [OUT_DIR]   (default runs/)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs}
python -m experiments.claims --out_dir="$out/claims"
echo "verdicts: $out/claims/claims.md"
