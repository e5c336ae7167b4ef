#!/usr/bin/env bash
# Measures every claim of the notes; writes the verdict tables into docs/claims.md and the headline into README.md.
# Usage: scripts/reproduce_claims.sh [OUT_DIR] [TEXT_FILE] [MODE]   (defaults: runs/, tiny Shakespeare, cpu_hour)
# MODE=quick takes minutes on 2 CPU cores; MODE=cpu_hour is planned for about an hour there; MODE=paper is the notes'
# setting, for an accelerator (scripts/device_claims.sh). Each run prints its planned training and expected time first.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs}
text=${2:-../shared/data/tinyshakespeare.txt}
mode=${3:-cpu_hour}
python -m experiments.claims --mode="$mode" --text_file="$text" --out_dir="$out/claims"
python scripts/update_readme.py claims "$out/claims/claims_readme.md"
python scripts/headline.py "$out/claims" "$out/claims/headline.md"
python scripts/update_readme.py headline "$out/claims/headline.md"
echo "verdicts: $out/claims/claims.md"
