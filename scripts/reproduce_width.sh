#!/usr/bin/env bash
# The muP coordinate check across width and depth and the learning-rate transfer on tiny Shakespeare, and the
# logit-scale rules compared by learning-rate sensitivity: their figures copied into docs/ (coord_check.png,
# coord_check_depth.png, transfer.png, transfer_rules*.png) and their tables into docs/coord_check.md and
# docs/transfer.md.
# Usage: scripts/reproduce_width.sh [OUT_DIR] [TEXT_FILE]
set -euo pipefail
python=${PYTHON:-python3}  # the interpreter (PYTHON=... picks another, e.g. a virtualenv's)
cd "$(dirname "$0")/.."
out=${1:-runs}
text=${2:-shakespeare}
"$python" -m experiments.coord_check --task=text --text_file="$text" --out_dir="$out/coord_check"
"$python" scripts/docs_figure.py "$out/coord_check/coord_check.png" docs/coord_check.png
"$python" scripts/update_readme.py coord_check_width "$out/coord_check/slopes.md"
"$python" -m experiments.coord_check --axis=depth --depths=2,4,8,16 --width=64 --depth_alphas=0,0.5,1 \
  --parametrizations=mup --text_file="$text" --out_dir="$out/coord_check_depth"
"$python" scripts/docs_figure.py "$out/coord_check_depth/coord_check.png" docs/coord_check_depth.png
"$python" scripts/update_readme.py coord_check_depth "$out/coord_check_depth/slopes.md"
"$python" -m experiments.transfer --task=text --text_file="$text" --widths=32,64,128,256 --depth=2 \
  --log2_lrs=-11,-10,-9,-8,-7,-6,-5,-4 --num_seeds=2 --steps=200 --seq_len=32 --batch_size=8 \
  --out_dir="$out/transfer"
"$python" scripts/docs_figure.py "$out/transfer/transfer.png" docs/transfer.png
"$python" scripts/update_readme.py transfer_width "$out/transfer/optimum.md"
"$python" -m experiments.transfer --task=text --text_file="$text" --parametrizations=mup \
  --rules=none,sqrt,linear,qk_norm --widths=16,32,64 --depth=2 --log2_lrs=-8,-6,-4,-2,0 --num_seeds=2 --steps=100 \
  --seq_len=32 --batch_size=8 --out_dir="$out/transfer_rules"
"$python" scripts/docs_figure.py "$out/transfer_rules/transfer.png" docs/transfer_rules.png
"$python" scripts/docs_figure.py "$out/transfer_rules/sensitivity.png" docs/transfer_rules_sensitivity.png
"$python" scripts/update_readme.py transfer_rules "$out/transfer_rules/sensitivity.md"
"$python" scripts/update_readme.py transfer_rules_optimum "$out/transfer_rules/optimum.md"
