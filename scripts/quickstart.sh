#!/usr/bin/env bash
# The README's first command: installs what is missing, builds cinfer, runs the bundled example models with
# `cinfer run`, then serves them with cinfer-server (KServe v2 on 127.0.0.1; GPU instances when a GPU is visible,
# else the CPU) and sends a sample inference over HTTP. The server keeps running; the last line says how to stop it.
# Environment: CINFER_HTTP_PORT (8000), CINFER_METRICS_PORT (8002).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
scripts/setup.sh
OUT="${CINFER_EXAMPLE_OUT:-$ROOT/build/example-outputs}"
HTTP_PORT="${CINFER_HTTP_PORT:-8000}"
METRICS_PORT="${CINFER_METRICS_PORT:-8002}"
echo
echo "== cinfer $(build/cinfer version | cut -d' ' -f2): running the bundled example models with the cinfer tool"
build/cinfer inspect examples/models/tiny_cnn.onnx
echo
build/cinfer run examples/models/mlp.onnx --input x=examples/models/mlp_x.npy --output-dir "$OUT/mlp"
build/cinfer run examples/models/tiny_cnn.onnx --input image=examples/models/tiny_cnn_image.npy --output-dir "$OUT/tiny_cnn"
echo "outputs written under $OUT (numpy .npy files)"

# A Triton-layout repository of the examples (no config.pbtxt: the server completes it from the ONNX models).
REPO="$ROOT/build/example-repository"
for m in mlp tiny_cnn; do
    mkdir -p "$REPO/$m/1"
    cp "examples/models/$m.onnx" "$REPO/$m/1/model.onnx"
done
PIDFILE="$ROOT/build/example-server.pid"
if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    echo "stopping the example server started earlier (pid $(cat "$PIDFILE"))"
    kill "$(cat "$PIDFILE")" && sleep 1
fi
echo
echo "== serving $REPO with cinfer-server on http://127.0.0.1:$HTTP_PORT (metrics on :$METRICS_PORT)"
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
echo
echo "cinfer-server is serving (pid $(cat "$PIDFILE"), log build/example-server.log); stop it with: kill $(cat "$PIDFILE")"
