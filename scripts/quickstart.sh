#!/usr/bin/env bash
# The README's first command: installs what is missing (apt packages, a venv with onnx and numpy only), builds the
# cinfer tool and cinfer-server (nothing else: no tests, fuzzers or examples; the CUDA module only when a GPU is
# visible, and then for that GPU's architecture alone), runs the bundled example models with `cinfer run`, then
# serves them with cinfer-server (KServe v2 on 127.0.0.1; GPU instances when a GPU is visible, else the CPU) and
# sends a sample inference over HTTP. Each step prints how long it took. The server keeps running; the last line
# says how to stop it.
# --trained: also a trained model: makes the zoo venv (scripts/zoo_venv.sh: torch, transformers; ~6 GB, minutes the
# first time), exports sentence-transformers' all-MiniLM-L6-v2 to ONNX (tests/zoo/minilm.py, into build/trained),
# runs it on two sentences with `cinfer run`, serves it beside the examples and asks the server for their embeddings.
# Usage: scripts/quickstart.sh [--trained]
# Environment: CINFER_HTTP_PORT (8000), CINFER_METRICS_PORT (8002); CINFER_CUDA=ON|OFF overrides the GPU check;
# CUDAARCHS sets the CUDA architectures (default: the visible GPU's, `native`).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
TRAINED=0
case "${1:-}" in
    "") ;;
    --trained) TRAINED=1 ;;
    *) echo "usage: scripts/quickstart.sh [--trained]" >&2; exit 2 ;;
esac
SENTENCES=("A man is playing a guitar." "Someone plays an instrument.")
OUT="${CINFER_EXAMPLE_OUT:-$ROOT/build/example-outputs}"
HTTP_PORT="${CINFER_HTTP_PORT:-8000}"
METRICS_PORT="${CINFER_METRICS_PORT:-8002}"
started=$(date +%s)
step_start=0
step() { step_start=$(date +%s); echo; echo "== $1"; }
step_done() { echo "-- $1 took $(( $(date +%s) - step_start ))s"; }

step "setup: apt packages and the Python venv (scripts/setup.sh --no-build)"
scripts/setup.sh --no-build
step_done "setup"

# The CUDA module takes minutes to compile, so it is built only where it can run: a GPU is visible (or CINFER_CUDA=ON
# asks for it). It is then compiled for the visible GPU alone (CMAKE_CUDA_ARCHITECTURES=native), not for the
# project's default list (cmake/cuda_backend.cmake), which scripts/test.sh and the images keep.
gpu_visible() { [ -e /dev/nvidia0 ] || { command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; }; }
have_nvcc() { command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; }
CUDA_FLAGS=(-DCINFER_CUDA=OFF)
TARGETS=(cinfer cinfer-server)
if [ "${CINFER_CUDA:-}" = ON ] || { [ "${CINFER_CUDA:-}" != OFF ] && gpu_visible; }; then
    if [ "${CINFER_CUDA:-}" = ON ] || have_nvcc; then
        CUDA_FLAGS=(-DCINFER_CUDA=ON)
        gpu_visible && CUDA_FLAGS+=(-DCMAKE_CUDA_ARCHITECTURES="${CUDAARCHS:-native}")
        have_nvcc && ! command -v nvcc >/dev/null && CUDA_FLAGS+=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
        TARGETS+=(cinfer_cuda)
    else
        echo "quickstart: a GPU is visible but no CUDA toolkit (nvcc): building for the CPU only"
    fi
fi

step "configure (${CUDA_FLAGS[*]})"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$ROOT/.venv/bin/python" "${CUDA_FLAGS[@]}" \
      >/dev/null
step_done "configure"

step "build ${TARGETS[*]}"
cmake --build build -j"$(nproc)" --target "${TARGETS[@]}"
step_done "build"

step "cinfer $(build/cinfer version | cut -d' ' -f2): running the bundled example models with the cinfer tool"
build/cinfer inspect examples/models/tiny_cnn.onnx
echo
build/cinfer run examples/models/mlp.onnx --input x=examples/models/mlp_x.npy --output-dir "$OUT/mlp"
build/cinfer run examples/models/tiny_cnn.onnx --input image=examples/models/tiny_cnn_image.npy --output-dir "$OUT/tiny_cnn"
echo "outputs written under $OUT (numpy .npy files)"
step_done "cinfer run"

if [ "$TRAINED" = 1 ]; then
    step "trained model: all-MiniLM-L6-v2 exported to ONNX (zoo venv, tests/zoo/minilm.py) and run with cinfer run"
    ZOO_PYTHON="$(scripts/zoo_venv.sh | tail -n 1)"
    "$ZOO_PYTHON" tests/zoo/minilm.py --cache build/trained --cinfer build/cinfer "${SENTENCES[@]}"
    step_done "trained model export and run"
fi

# A Triton-layout repository of the examples (no config.pbtxt: the server completes it from the ONNX models).
REPO="$ROOT/build/example-repository"
step "serving $REPO with cinfer-server on http://127.0.0.1:$HTTP_PORT (metrics on :$METRICS_PORT)"
for m in mlp tiny_cnn; do
    mkdir -p "$REPO/$m/1"
    cp "examples/models/$m.onnx" "$REPO/$m/1/model.onnx"
done
if [ "$TRAINED" = 1 ]; then
    mkdir -p "$REPO/all_minilm_l6_v2/1"
    cp build/trained/all-MiniLM-L6-v2.onnx "$REPO/all_minilm_l6_v2/1/model.onnx"
fi
PIDFILE="$ROOT/build/example-server.pid"
if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    echo "stopping the example server started earlier (pid $(cat "$PIDFILE"))"
    kill "$(cat "$PIDFILE")" && sleep 1
fi
nohup build/cinfer-server --model-repository "$REPO" --http-port "$HTTP_PORT" --metrics-port "$METRICS_PORT" \
    >"$ROOT/build/example-server.log" 2>&1 &
echo $! >"$PIDFILE"
.venv/bin/python - "$HTTP_PORT" <<'PY'
import json, sys, time, urllib.request, urllib.error
import numpy as np
base = f"http://127.0.0.1:{sys.argv[1]}"
for _ in range(300):
    try:
        if urllib.request.urlopen(base + "/v2/health/ready", timeout=1).status == 200:
            break
    except (urllib.error.URLError, ConnectionError):
        time.sleep(0.1)
else:
    sys.exit("cinfer-server did not become ready: see build/example-server.log")
meta = json.load(urllib.request.urlopen(base + "/v2/models/mlp"))
print("model metadata:", json.dumps(meta))
x = np.load("examples/models/mlp_x.npy")
body = {"inputs": [{"name": meta["inputs"][0]["name"], "shape": list(x.shape), "datatype": "FP32",
                    "data": x.ravel().tolist()}]}
req = urllib.request.Request(base + "/v2/models/mlp/infer", data=json.dumps(body).encode(),
                             headers={"Content-Type": "application/json"})
print("POST /v2/models/mlp/infer ->", urllib.request.urlopen(req).read().decode())
PY
if [ "$TRAINED" = 1 ]; then
    "$ZOO_PYTHON" tests/zoo/minilm.py --cache build/trained --server "http://127.0.0.1:$HTTP_PORT" \
        --model all_minilm_l6_v2 "${SENTENCES[@]}"
fi
step_done "server start + sample inference"
echo
echo "quickstart took $(( $(date +%s) - started ))s in all"
echo "cinfer-server is serving (pid $(cat "$PIDFILE"), log build/example-server.log); stop it with: kill $(cat "$PIDFILE")"
