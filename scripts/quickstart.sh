#!/usr/bin/env bash
# The README's first command: installs what is missing, builds cinfer, and runs the bundled example models
# on their sample inputs with `cinfer run`, printing the outputs.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
scripts/setup.sh
OUT="${CINFER_EXAMPLE_OUT:-$ROOT/build/example-outputs}"
echo
echo "== cinfer $(build/cinfer version | cut -d' ' -f2): running the bundled example models on the CPU"
build/cinfer inspect examples/models/tiny_cnn.onnx
echo
build/cinfer run examples/models/mlp.onnx --input x=examples/models/mlp_x.npy --output-dir "$OUT/mlp"
build/cinfer run examples/models/tiny_cnn.onnx --input image=examples/models/tiny_cnn_image.npy --output-dir "$OUT/tiny_cnn"
echo
echo "outputs written under $OUT (numpy .npy files)"
