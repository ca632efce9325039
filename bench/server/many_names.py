#!/usr/bin/env python3
"""Request-field benchmark (issue 24, quadratic work): the time one infer request with N requested output names (or
N inputs) spends in the server, for the duplicate-name checks that used to compare every pair. The server answers
400 (a duplicate at the end, or an output the model does not have); the time is wall time from sending the body
until the answer, the median of --repeat runs, against an idle server with one CPU model.

Usage: .venv/bin/python bench/server/many_names.py [--server build/cinfer-server] [--names 80000] [--repeat 3]
"""
import argparse
import http.client
import json
import pathlib
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np
import onnx

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "models"))
import builders  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(base, seconds, proc):
    end = time.time() + seconds
    while time.time() < end and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"{base}/v2/health/ready", timeout=2) as r:
                if r.status == 200:
                    return True
        except OSError:
            time.sleep(0.05)
    return False


def timed_post(port, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        t = time.perf_counter()
        c.request("POST", "/v2/models/mlp/infer", body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        return time.perf_counter() - t, r.status, json.loads(data)
    finally:
        c.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", default=str(ROOT / "build" / "cinfer-server"))
    ap.add_argument("--names", type=int, default=80_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    work = pathlib.Path(tempfile.mkdtemp(prefix="cinfer-bench-names-"))
    (work / "models" / "mlp" / "1").mkdir(parents=True)
    model, _ = builders.mlp(np.random.default_rng(7), features=16, hidden=(32,), classes=5)
    onnx.save(model, str(work / "models" / "mlp" / "1" / "model.onnx"))
    port = free_port()
    log = open(work / "server.log", "w")
    server = subprocess.Popen([args.server, "--model-repository", str(work / "models"), "--http-port", str(port),
                               "--metrics-port", "0", "--threads", "1"], stdout=log, stderr=subprocess.STDOUT)
    n = args.names
    x = {"name": "x", "shape": [1, 16], "datatype": "FP32", "data": [0.0] * 16}
    cases = {
        f"{n} output names, the last a duplicate": {"inputs": [x], "outputs": [{"name": f"o{i}"} for i in range(n - 1)] + [{"name": "o0"}]},
        f"{n} output names, all distinct (unknown to the model)": {"inputs": [x], "outputs": [{"name": f"o{i}"} for i in range(n)]},
        f"{n} inputs, the last a duplicate": {"inputs": [{"name": f"i{i}", "shape": [1], "datatype": "FP32", "data": [1.0]}
                                                     for i in range(n - 1)] + [{"name": "i0", "shape": [1], "datatype": "FP32", "data": [1.0]}]},
    }
    try:
        if not wait_ready(f"http://127.0.0.1:{port}", 30, server):
            sys.exit(f"server not ready:\n{(work / 'server.log').read_text()}")
        print(f"server: {args.server}")
        print("| request | body MB | status | answer | median s |")
        print("|---|---|---|---|---|")
        for what, req in cases.items():
            body = json.dumps(req).encode()
            runs = [timed_post(port, body) for _ in range(args.repeat)]
            secs, status, answer = statistics.median(r[0] for r in runs), runs[-1][1], runs[-1][2]
            print(f"| {what} | {len(body) / 1e6:.1f} | {status} | {answer.get('error', '')[:60]} | {secs:.3f} |")
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(60)
        log.close()


if __name__ == "__main__":
    main()
