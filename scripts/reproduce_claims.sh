#!/usr/bin/env bash
# Measures every claim of the notes; writes the verdict tables into docs/claims.md (the section of the mode: quick or
# cpu_hour; other modes leave the page alone) and the headline into README.md.
# Usage: scripts/reproduce_claims.sh [OUT_DIR] [TEXT_FILE] [MODE]   (defaults: runs/, tiny Shakespeare, cpu_hour)
# MODE=quick takes minutes on 2 CPU cores; MODE=cpu_hour is planned for about an hour there; MODE=paper is the notes'
# setting, for an accelerator (scripts/device_claims.sh). Each run prints its planned training and expected time first.
set -euo pipefail
python=${PYTHON:-python3}  # the interpreter (PYTHON=... picks another, e.g. a virtualenv's)
cd "$(dirname "$0")/.."
out=${1:-runs}
text=${2:-../shared/data/tinyshakespeare.txt}
mode=${3:-cpu_hour}
run="$out/claims_$mode"  # one folder per mode
"$python" -m experiments.claims --mode="$mode" --text_file="$text" --out_dir="$run"
case "$mode" in  # the section of docs/claims.md that shows this mode's tables
  quick) section=claims ;;
  cpu_hour) section=claims_cpu_hour ;;
  *) section="" ;;
esac
if [[ -n "$section" ]]; then "$python" scripts/update_readme.py "$section" "$run/claims_readme.md"; fi
"$python" scripts/headline.py "$run" "$run/headline.md"
"$python" scripts/update_readme.py headline "$run/headline.md"
echo "verdicts: $run/claims.md"
