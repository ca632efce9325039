#!/usr/bin/env bash
# Creates or updates .zoo-venv, the model-coverage suite's own venv (requirements-zoo.txt: torch, torchvision,
# transformers, onnxscript, onnxruntime, the trained all-MiniLM-L6-v2): the exporters and oracles of tests/zoo and of
# `scripts/quickstart.sh --trained`. It is kept apart from .venv because PyPI's torch is the CUDA build (~6 GB
# installed), which the engine, the server and the default quickstart never need. Like scripts/setup.sh for .venv, a
# stamp holds the pins last installed, so a changed pin installs again and an unchanged venv costs nothing.
# Usage: scripts/zoo_venv.sh        (scripts/test.sh and scripts/quickstart.sh --trained call it; prints the venv's
#                                    python as its last line)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.zoo-venv"

if [ ! -x "$VENV/bin/python" ]; then
    echo "zoo venv: creating $VENV (torch's CUDA wheel: ~6 GB, a few minutes)" >&2
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip >&2
fi
if ! cat requirements.txt requirements-zoo.txt | cmp -s - "$VENV/.requirements-zoo.stamp"; then
    echo "zoo venv: installing requirements-zoo.txt into $VENV" >&2
    started=$(date +%s)
    "$VENV/bin/pip" install -q -r requirements-zoo.txt >&2
    cat requirements.txt requirements-zoo.txt >"$VENV/.requirements-zoo.stamp"
    echo "zoo venv: installed in $(( $(date +%s) - started ))s" >&2
fi
echo "$VENV/bin/python"
