#!/usr/bin/env bash
# Reproduces the d_k sweeps behind docs/sweep.md: default (its figure and table written into docs/), causal, pitfalls,
# float16 failure demo, width mode.
# Usage: scripts/reproduce_sweep.sh [OUT_DIR]   (default runs/)
set -euo pipefail
python=${PYTHON:-python3}  # the interpreter (PYTHON=... picks another, e.g. a virtualenv's)
cd "$(dirname "$0")/.."
out=${1:-runs}
"$python" -m experiments.sweep --out_dir="$out/sweep"
"$python" scripts/docs_figure.py "$out/sweep/summary.png" docs/sweep.png
"$python" scripts/update_readme.py sweep "$out/sweep/summary.md"
"$python" -m experiments.sweep --causal --out_dir="$out/sweep_causal"
"$python" -m experiments.sweep --rules=none,sqrt,quadratic,post_softmax,temperature --tau=8 \
  --out_dir="$out/sweep_pitfalls"
"$python" -m experiments.sweep --dtype=float16 --nofloat32_softmax --nosubtract_max --rules=none,sqrt \
  --d_k=16,64,256 --out_dir="$out/sweep_fp16_unsafe"
"$python" -m experiments.sweep --parametrization=sp,mup --width=64,256,1024 --d_k=16,64,256 \
  --out_dir="$out/sweep_width"
"$python" -m experiments.sweep --parametrization=mup --width=64,256,1024 --d_k=16,64,256 --zero_query \
  --out_dir="$out/sweep_width_zero_query"
echo "sweeps written under $out/"
