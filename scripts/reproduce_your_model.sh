#!/usr/bin/env bash
# docs/your_model.md: the first example's output (its block run as it is), and the examples (linen and nnx; an MLP on a
# synthetic task, a transformer on a text file) made muP from their shapes, coordinate-checked and transferred; their
# figures copied into docs/ and tables into the page.
# Usage: scripts/reproduce_your_model.sh [OUT_DIR] [TEXT_FILE]
set -euo pipefail
python=${PYTHON:-python3}  # the interpreter (PYTHON=... picks another, e.g. a virtualenv's)
cd "$(dirname "$0")/.."
out=${1:-runs}/examples
text=${2:-shakespeare}
"$python" scripts/run_doc_block.py your_model_first_example
"$python" -m examples.linen_mlp --out_dir="$out/linen_mlp" --coord_seeds=8
"$python" -m examples.nnx_mlp --out_dir="$out/nnx_mlp" --coord_seeds=8
"$python" -m examples.linen_transformer --text_file="$text" --out_dir="$out/linen_transformer"
"$python" scripts/docs_figure.py "$out/linen_transformer/transfer.png" docs/your_model_linen_transformer_transfer.png
"$python" -m examples.nnx_transformer --text_file="$text" --out_dir="$out/nnx_transformer"
for name in linen_mlp nnx_mlp linen_transformer nnx_transformer; do
  "$python" scripts/docs_figure.py "$out/$name/coord_check.png" "docs/your_model_$name.png"
  "$python" scripts/update_readme.py "your_model_${name}_coord" "$out/$name/coord_check.md"
  if [ -f "$out/$name/transfer.md" ]; then
    "$python" scripts/update_readme.py "your_model_${name}_transfer" "$out/$name/transfer.md"
  fi
done
# This engine beside microsoft/mup (PyTorch and mup from the package registry; not dependencies of the package) and
# the base model against the model as written.
if "$python" -c "import torch, mup" 2>/dev/null; then
  "$python" scripts/compare_mup.py --out_dir="$out/compare_mup"
  "$python" scripts/update_readme.py your_model_mup_tied "$out/compare_mup/tied.md"
  "$python" scripts/update_readme.py your_model_mup_mlp "$out/compare_mup/mlp_transfer.md"
else
  echo "skipping scripts/compare_mup.py: it needs torch and mup (pip install torch mup)" >&2
fi
"$python" scripts/base_model_check.py --out_dir="$out/base_model_check"
"$python" scripts/update_readme.py your_model_base_equality "$out/base_model_check/base_equality.md"
"$python" scripts/update_readme.py your_model_init_modes "$out/base_model_check/init_modes.md"
