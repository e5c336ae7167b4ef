#!/usr/bin/env bash
# Measures every claim of the notes and regenerates all of docs/claims.md's tables (the quick and the cpu_hour
# sections, each stamped with the commit and day of its run) and the README's headline (from the last mode run).
# Usage: scripts/reproduce_claims.sh [OUT_DIR] [TEXT_FILE] [MODES]   (defaults: runs/, tiny Shakespeare, "quick cpu_hour")
# quick takes minutes on 2 CPU cores; cpu_hour is planned for about an hour there; paper is the notes' setting, for an
# accelerator (scripts/device_claims.sh; it has no section here). Each run prints its planned training and expected
# time first.
set -euo pipefail
python=${PYTHON:-python3}  # the interpreter (PYTHON=... picks another, e.g. a virtualenv's)
cd "$(dirname "$0")/.."
out=${1:-runs}
text=${2:-shakespeare}
modes=${3:-quick cpu_hour}
for mode in $modes; do
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
done
