#!/usr/bin/env bash
# u-muP at initialization under the paper's op scales and under the covariance correction, and a small
# learning-rate transfer across width and depth under each, then the larger covariance transfer runs with their
# figures; writes the tables into docs/umup.md and the figures transfer_umup*.png
# (about 40 min on 2 CPU cores).
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
# The larger transfer runs of docs/umup.md (covariance op scales): across width 64-512 and depth 2-8, with figures.
"$python" -m experiments.transfer --task=text --text_file="$text" --parametrizations=umup --widths=64,128,256,512 \
  --depth=2 --log2_lrs=-5,-4,-3,-2,-1,0,1 --num_seeds=2 --steps=200 --seq_len=32 --batch_size=8 \
  --umup_scales=covariance --out_dir="$out/transfer_umup"
"$python" scripts/docs_figure.py "$out/transfer_umup/transfer.png" docs/transfer_umup.png
"$python" scripts/update_readme.py transfer_umup "$out/transfer_umup/optimum.md"
"$python" -m experiments.transfer --axis=depth --depths=2,4,8 --width=64 --parametrizations=umup \
  --text_file="$text" --num_seeds=2 --log2_lrs=-5,-4,-3,-2,-1,0,1 --steps=200 --seq_len=32 --batch_size=8 \
  --umup_scales=covariance --out_dir="$out/transfer_umup_depth"
"$python" scripts/docs_figure.py "$out/transfer_umup_depth/transfer.png" docs/transfer_umup_depth.png
"$python" scripts/update_readme.py transfer_umup_depth "$out/transfer_umup_depth/optimum.md"
