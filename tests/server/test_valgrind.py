"""A short cinfer-server run under valgrind memcheck: start, load a model (explicit mode), JSON and binary inferences,
statistics, metrics, unload, SIGTERM. Memcheck must report no errors and no leaks ("definitely lost" and "indirectly
lost" 0 bytes); suppressions (tests/server/valgrind.supp) cover third-party libraries only. Needs a build without
sanitizers (tests.cmake registers it only then). Skips without valgrind, except under CI."""
import http.client
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest

from conftest import SERVER, free_ports, mlp_model, write_model

SUPP = pathlib.Path(__file__).resolve().parent / "valgrind.supp"


def request(port, method, path, body=None, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def test_server_run_under_memcheck(tmp_path):
    if not shutil.which("valgrind"):
        if os.environ.get("CI"):
            pytest.fail("valgrind must be installed in CI (scripts/setup.sh --test)")
        pytest.skip("valgrind is not installed")
    repo = tmp_path / "models"
    write_model(repo, "mlp", {1: mlp_model()})
    port, mport = free_ports(2)
    log = tmp_path / "memcheck.log"
    cmd = ["valgrind", "--tool=memcheck", "--leak-check=full", "--show-leak-kinds=definite,indirect",
           "--errors-for-leak-kinds=definite,indirect", "--error-exitcode=99", f"--suppressions={SUPP}",
           f"--log-file={log}", SERVER, "--model-repository", str(repo), "--http-port", str(port), "--metrics-port",
           str(mport), "--threads", "1", "--http-threads", "2", "--model-control-mode", "explicit"]
    out = open(tmp_path / "server.log", "w")
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
    try:
        deadline = time.time() + 180
        while True:
            assert proc.poll() is None, (tmp_path / "server.log").read_text()
            try:
                if request(port, "GET", "/v2/health/live")[0] == 200:
                    break
            except OSError:
                pass
            assert time.time() < deadline, "the server under valgrind did not come up in 180 s"
            time.sleep(0.5)
        assert request(port, "POST", "/v2/repository/models/mlp/load")[0] == 200
        x = np.random.default_rng(1).standard_normal((2, 16)).astype(np.float32)
        body = json.dumps({"inputs": [{"name": "x", "shape": [2, 16], "datatype": "FP32", "data": x.ravel().tolist()}]})
        for _ in range(3):
            status, data = request(port, "POST", "/v2/models/mlp/infer", body)
            assert status == 200, data
        hdr = json.dumps({"inputs": [{"name": "x", "shape": [2, 16], "datatype": "FP32",
                                      "parameters": {"binary_data_size": x.nbytes}}],
                          "outputs": [{"name": "probs", "parameters": {"binary_data": True}}]}).encode()
        for _ in range(3):
            status, data = request(port, "POST", "/v2/models/mlp/infer", hdr + x.tobytes(),
                                   {"Inference-Header-Content-Length": str(len(hdr))})
            assert status == 200, data
        assert request(port, "POST", "/v2/models/mlp/infer", b"{not json")[0] == 400  # an error path too
        status, data = request(port, "GET", "/v2/models/mlp/stats")
        assert status == 200 and json.loads(data)["model_stats"][0]["inference_count"] == 12
        status, data = request(mport, "GET", "/metrics")
        assert status == 200 and b"nv_inference_count" in data
        assert request(port, "POST", "/v2/repository/models/mlp/unload")[0] == 200
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        out.close()
    text = log.read_text()
    summary = "\n".join(l for l in text.splitlines() if re.search(r"lost:|ERROR SUMMARY|in use at exit|heap blocks", l))
    print(summary)
    assert rc == 0, f"exit status {rc} (99: memcheck found errors or leaks)\n{text[-6000:]}"
    assert re.search(r"ERROR SUMMARY: 0 errors", text), text[-6000:]
    for kind in ("definitely", "indirectly"):
        m = re.search(rf"{kind} lost: ([\d,]+) bytes", text)
        assert m is None or m.group(1) == "0", f"{kind} lost: {m.group(1)} bytes\n{text[-6000:]}"
    assert "All heap blocks were freed" in text or re.search(r"definitely lost: 0 bytes", text), text[-3000:]
