#!/usr/bin/env bash
# The muP coordinate check and learning-rate transfer on tiny Shakespeare (docs/coord_check.png, docs/transfer.png),
# and the logit-scale rules compared by learning-rate sensitivity (docs/transfer_rules*.png).
# Usage: scripts/reproduce_width.sh [OUT_DIR] [TEXT_FILE]
set -euo pipefail
python=${PYTHON:-python3}  # the interpreter (PYTHON=... picks another, e.g. a virtualenv's)
cd "$(dirname "$0")/.."
out=${1:-runs}
text=${2:-shakespeare}
"$python" -m experiments.coord_check --task=text --text_file="$text" --out_dir="$out/coord_check"
"$python" -m experiments.transfer --task=text --text_file="$text" --widths=32,64,128,256 --depth=2 \
  --log2_lrs=-11,-10,-9,-8,-7,-6,-5,-4 --num_seeds=2 --steps=200 --seq_len=32 --batch_size=8 \
  --out_dir="$out/transfer"
"$python" -m experiments.transfer --task=text --text_file="$text" --parametrizations=mup \
  --rules=none,sqrt,linear,qk_norm --widths=16,32,64 --depth=2 --log2_lrs=-8,-6,-4,-2,0 --num_seeds=2 --steps=100 \
  --seq_len=32 --batch_size=8 --out_dir="$out/transfer_rules"
