#!/usr/bin/env bash
# Measures the training claims of note 2 §4 (NaN within 100 steps, attention gradients below 1e-6, the depth-6 model
# worse / oscillating / slow / converging with a tiny learning rate and clipping, depth 12 "cannot converge", and
# stable gradients with the scale) at the notes' model on one accelerator in under 8 minutes, and writes their tables
# (claims.md, claims_readme.md) to OUT_DIR.
# It runs --mode=paper_8min: d_k 64, width 512 with 8 heads, sequences of 256, depths 2, 6 and 12, 3 seeds, tiny
# Shakespeare, depth 12 pre-LN and post-LN (post-LN with and without warmup), float32, 3 learning rates (the octaves
# around 1e-3), 300 steps at depths 2 and 12 and 600 at depth 6 (scaling/studies/claims/training/sizes.py, SIZES). It is
# not --mode=paper (the notes' full setting: 6 learning rates, 2,000 steps, float32 and bfloat16, every claim), whose
# plan does not fit 8 minutes on one H200; pass --mode=paper and --ids=... after the two arguments to run that instead.
# Usage: scripts/device_claims.sh [OUT_DIR] [TEXT_FILE] [FLAG ...]   (defaults: runs/device_claims, tiny Shakespeare)
# It prints the planned training, its expected time on the present device and on one H200 (datasheet peaks, see
# scaling/training/resources.py) and whether that fits 8 minutes first; --dry_run stops there. Further flags go to
# experiments.claims (e.g. --mode=quick --d_k=64,128 --seq_len=16 to try the script at tiny sizes on a CPU).
# The H200 plan assumes a fraction of the datasheet peak; run `python -m experiments.benchmark --suite=train` on
# the H200 first and pass --device_efficiency_from=runs/benchmark/latest/train.json to plan at the training
# step's measured FLOP/s instead (the suite's model is smaller than the notes', so that plan errs long).
set -euo pipefail
python=${PYTHON:-python3}  # the interpreter (PYTHON=... picks another, e.g. a virtualenv's)
cd "$(dirname "$0")/.."
out=${1:-runs/device_claims}
text=${2:-shakespeare}
shift $(( $# < 2 ? $# : 2 ))
ids=train_nan_within_100_steps,train_grad_norm_below_1e-6,train_depth6_converges_worse,train_depth6_oscillates
ids=$ids,train_depth6_slow,train_depth6_tiny_lr_clipping,train_depth12_cannot_converge,train_scaled_grads_stable
ids=$ids,train_attention_hard_selection  # reads the grids above: nothing more is trained
"$python" -m experiments.claims --mode=paper_8min --ids="$ids" --text_file="$text" --out_dir="$out" "$@"
for f in claims.md claims_readme.md; do
  if [[ -f "$out/$f" ]]; then echo "tables: $out/$f"; fi
done
