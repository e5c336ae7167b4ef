#!/usr/bin/env bash
# u-muP at initialization under the paper's op scales and under the covariance correction, and a small
# learning-rate transfer across width and depth under each; writes the tables into docs/umup.md
# (about 30 min on 2 CPU cores).
# Usage: scripts/reproduce_umup.sh [OUT_DIR] [TEXT_FILE]
set -euo pipefail
python=${PYTHON:-python3}  # the interpreter (PYTHON=... picks another, e.g. a virtualenv's)
cd "$(dirname "$0")/.."
out=${1:-runs}
text=${2:-shakespeare}
"$python" scripts/unit_scale_check.py --out="$out/unit_scale.md" --umup_scales=covariance
"$python" scripts/update_readme.py unit_scale "$out/unit_scale.md"
"$python" scripts/unit_scale_check.py --out="$out/unit_scale_paper.md" --umup_scales=paper
"$python" scripts/update_readme.py unit_scale_paper "$out/unit_scale_paper.md"
for s in paper covariance; do
  "$python" -m experiments.transfer --parametrizations=umup --umup_scales="$s" --task=text --text_file="$text" \
    --widths=32,64,128 --depth=2 --log2_lrs=-6,-4,-2,0,2 --num_seeds=1 --steps=100 --seq_len=32 --batch_size=8 \
    --out_dir="$out/umup_width_$s"
  "$python" -m experiments.transfer --axis=depth --depths=2,4,8 --width=64 --parametrizations=umup --umup_scales="$s" \
    --task=text --text_file="$text" --log2_lrs=-6,-4,-2,0,2 --num_seeds=1 --steps=100 --seq_len=32 --batch_size=8 \
    --out_dir="$out/umup_depth_$s"
  "$python" scripts/update_readme.py "umup_width_$s" "$out/umup_width_$s/optimum.md"
  "$python" scripts/update_readme.py "umup_depth_$s" "$out/umup_depth_$s/optimum.md"
done
