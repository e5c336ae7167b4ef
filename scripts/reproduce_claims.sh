#!/usr/bin/env bash
# Measures every claim of the notes; writes the verdict tables into docs/claims.md and the headline into README.md.
# Usage: scripts/reproduce_claims.sh [OUT_DIR] [TEXT_FILE] [MODE]   (defaults: runs/, tiny Shakespeare, full)
# Full mode trains the training claims at the sizes of docs/claims.md (hours on a 2-core CPU); MODE=quick takes minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs}
text=${2:-../shared/data/tinyshakespeare.txt}
mode=${3:-full}
python -m experiments.claims --mode="$mode" --text_file="$text" --out_dir="$out/claims"
python scripts/update_readme.py claims "$out/claims/claims_readme.md"
python scripts/headline.py "$out/claims" "$out/claims/headline.md"
python scripts/update_readme.py headline "$out/claims/headline.md"
echo "verdicts: $out/claims/claims.md"
