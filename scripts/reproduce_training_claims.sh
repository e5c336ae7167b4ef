#!/usr/bin/env bash
# Trains unscaled (rule none) and 1/sqrt(d_k) transformers of depth 6 and 12 on character-level tiny Shakespeare:
# single runs with full logs and plots, beside the training claims of experiments.claims (~25 min on 2 CPU cores).
# Usage: scripts/reproduce_training_claims.sh [OUT_DIR] [TEXT_FILE]
set -euo pipefail
python=${PYTHON:-python3}  # the interpreter (PYTHON=... picks another, e.g. a virtualenv's)
cd "$(dirname "$0")/.."
out=${1:-runs}
text=${2:-shakespeare}
for depth_steps in 6:300 12:200; do
  depth=${depth_steps%:*}
  steps=${depth_steps#*:}
  for rule in none sqrt; do
    "$python" -m experiments.train --rule="$rule" --text_file="$text" --width=128 --depth="$depth" --num_heads=2 \
      --head_dim=64 --seq_len=128 --batch_size=16 --steps="$steps" --learning_rate=1e-3 --log_every=10 \
      --print_every=50 --out_dir="$out/train_depth${depth}_$rule"
  done
done
