#!/usr/bin/env bash
# The accelerator check (under 8 minutes on one GPU): the Pallas kernel compiled and jax.nn's cuDNN kernel for every
# plain-scale rule against the dense path (values and gradients), the attention benchmark (ours against jax.nn's XLA
# and cuDNN paths, as fractions of the chip's measured bf16/fp32 matmul peak) and the train-step throughput.
# Usage: scripts/device_check.sh [OUT_DIR]      (on CPU: ${PYTHON:-python3} scripts/device_check.py --dry_run)
set -euo pipefail
python=${PYTHON:-python3}  # the interpreter (PYTHON=... picks another, e.g. a virtualenv's)
cd "$(dirname "$0")/.."
"$python" scripts/device_check.py --out_dir="${1:-runs}/device_check"
