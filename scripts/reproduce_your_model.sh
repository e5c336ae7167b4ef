#!/usr/bin/env bash
# docs/your_model.md: the examples (linen and nnx; an MLP on a synthetic task, a transformer on a text file) made muP
# from their shapes, coordinate-checked and transferred; their figures copied into docs/ and tables into the page.
# Usage: scripts/reproduce_your_model.sh [OUT_DIR] [TEXT_FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs}/examples
text=${2:-../shared/data/tinyshakespeare.txt}
python -m examples.linen_mlp --out_dir="$out/linen_mlp" --coord_seeds=8
python -m examples.nnx_mlp --out_dir="$out/nnx_mlp" --coord_seeds=8
python -m examples.linen_transformer --text_file="$text" --out_dir="$out/linen_transformer"
cp "$out/linen_transformer/transfer.png" docs/your_model_linen_transformer_transfer.png
python -m examples.nnx_transformer --text_file="$text" --out_dir="$out/nnx_transformer"
for name in linen_mlp nnx_mlp linen_transformer nnx_transformer; do
  cp "$out/$name/coord_check.png" "docs/your_model_$name.png"
  python scripts/update_readme.py "your_model_${name}_coord" "$out/$name/coord_check.md"
  if [ -f "$out/$name/transfer.md" ]; then
    python scripts/update_readme.py "your_model_${name}_transfer" "$out/$name/transfer.md"
  fi
done
