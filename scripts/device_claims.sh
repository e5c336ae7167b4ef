#!/usr/bin/env bash
# Measures the claims in paper mode (the notes' setting: d_k 64, width 512 with 8 heads, sequences of 256, depths 2, 6
# and 12, pre- and post-LN, float32 and bfloat16, 2000 steps, learning rates in octaves, 3 seeds, tiny Shakespeare)
# on one accelerator, and writes their tables (claims.md, claims_readme.md) to OUT_DIR.
# Usage: scripts/device_claims.sh [OUT_DIR] [TEXT_FILE] [FLAG ...]   (defaults: runs/device_claims, tiny Shakespeare)
# It prints the planned training and its expected time on the present device first; --dry_run stops there. Further
# flags go to experiments.claims (e.g. --ids=... for a subset, or --mode=quick --d_k=64,128 --seq_len=16 to try the
# script at tiny sizes on a CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/device_claims}
text=${2:-../shared/data/tinyshakespeare.txt}
shift $(( $# < 2 ? $# : 2 ))
python -m experiments.claims --mode=paper --text_file="$text" --out_dir="$out" "$@"
for f in claims.md claims_readme.md; do
  if [[ -f "$out/$f" ]]; then echo "tables: $out/$f"; fi
done
