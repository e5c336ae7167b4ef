#!/usr/bin/env bash
# Output log Z with and without z-loss, and Adam, Adam with muP-scaled epsilon and Adam-atan2 over learning rates,
# on character-level tiny Shakespeare; writes the tables into docs/stability.md (about 6 CPU-minutes).
# Usage: scripts/reproduce_stability.sh [OUT_DIR] [TEXT_FILE]
set -euo pipefail
python=${PYTHON:-python3}  # the interpreter (PYTHON=... picks another, e.g. a virtualenv's)
cd "$(dirname "$0")/.."
out=${1:-runs}
text=${2:-shakespeare}
"$python" -m experiments.stability --text_file="$text" --out_dir="$out/stability"
"$python" scripts/update_readme.py stability "$out/stability/stability.md"
