"""Concurrency, queue policy, unload and shutdown while requests are in flight, and the command line."""
import json
import os
import re
import signal
import subprocess
import threading
import time

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import ROOT, SERVER, mlp_model, slow_model, write_model
from free_ports import free_ports


def test_hundreds_of_concurrent_requests_all_correct(main_server):
    sess = ort.InferenceSession(mlp_model().SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(11)
    xs = [rng.standard_normal((1 + i % 4, 16)).astype(np.float32) for i in range(400)]
    c = httpclient.InferenceServerClient(main_server.url, concurrency=64)
    pending = []
    for i, x in enumerate(xs):
        t = httpclient.InferInput("x", list(x.shape), "FP32")
        t.set_data_from_numpy(x, binary_data=i % 2 == 0)
        pending.append(c.async_infer("mlp", [t], request_id=str(i),
                                     outputs=[httpclient.InferRequestedOutput("probs", binary_data=i % 3 == 0)]))
    for i, (x, p) in enumerate(zip(xs, pending)):
        r = p.get_result()
        assert r.get_response()["id"] == str(i)
        np.testing.assert_allclose(r.as_numpy("probs"), sess.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
    # and from plain threads with their own clients, to mix connections
    errors = []

    def worker(k):
        cl = httpclient.InferenceServerClient(main_server.url)
        for j in range(25):
            x = xs[(k * 25 + j) % len(xs)]
            t = httpclient.InferInput("x", list(x.shape), "FP32")
            t.set_data_from_numpy(x)
            got = cl.infer("mlp", [t]).as_numpy("probs")
            if not np.allclose(got, sess.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6):
                errors.append((k, j))
        cl.close()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    c.close()


SLOW_CONFIG = """
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 512 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 512 ] } ]
dynamic_batching { default_queue_policy { max_queue_size: 3 default_timeout_microseconds: 0 allow_timeout_override: true } }
"""


@pytest.fixture(scope="module")
def slow_repo(tmp_path_factory):
    repo = tmp_path_factory.mktemp("slow") / "models"
    write_model(repo, "slow", {1: slow_model()}, SLOW_CONFIG)
    write_model(repo, "slowauto", {1: slow_model()})
    return repo


def slow_input(rows=4, seed=0):
    x = np.random.default_rng(seed).standard_normal((rows, 512)).astype(np.float32)
    t = httpclient.InferInput("x", [rows, 512], "FP32")
    t.set_data_from_numpy(x)
    return x, t


def slow_reference(x):
    sess = ort.InferenceSession(slow_model().SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def post_concurrently(server, path, bodies):
    """Sends every body at once from its own thread and connection; returns [(status, body bytes)] in order."""
    out = [None] * len(bodies)
    go = threading.Barrier(len(bodies))

    def send(i):
        go.wait()
        status, _, data = server.request("POST", path, bodies[i])
        out[i] = (status, data)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def slow_json(rows, seed=0, **extra):
    x = np.random.default_rng(seed).standard_normal((rows, 512)).astype(np.float32)
    return json.dumps(dict(extra, inputs=[{"name": "x", "shape": [rows, 512], "datatype": "FP32", "data": x.flatten().tolist()}]))


def test_queue_full_and_queue_timeout(start_server, slow_repo):
    s = start_server(slow_repo)
    results = post_concurrently(s, "/v2/models/slow/infer", [slow_json(8, i) for i in range(16)])
    ok = [r for r in results if r[0] == 200]
    refused = [json.loads(r[1])["error"] for r in results if r[0] != 200]
    # one running + at most 3 queued at any time: of 16 requests sent at once, some must be refused with 503
    assert len(ok) >= 4 and refused and len(ok) + len(refused) == 16
    assert all(r[0] in (200, 503) for r in results)
    assert all(e == "exceeds maximum queue size: model 'slow' already has 3 queued requests" for e in refused), refused
    # a request whose timeout (1 us) expires while it waits behind others is rejected and never runs
    before = s.json("GET", "/v2/models/slow/stats")[1]["model_stats"][0]
    results = post_concurrently(s, "/v2/models/slow/infer", [slow_json(8, 1), slow_json(8, 2)])
    assert [r[0] for r in results] == [200, 200]
    busy = threading.Thread(target=post_concurrently, args=(s, "/v2/models/slow/infer", [slow_json(8, 3), slow_json(8, 4)]))
    busy.start()
    time.sleep(0.002)
    status, _, data = s.request("POST", "/v2/models/slow/infer", slow_json(1, 5, parameters={"timeout": 1}))
    busy.join()
    assert status == 503 and "request timeout expired: the request to model 'slow' waited" in json.loads(data)["error"], data
    after = s.json("GET", "/v2/models/slow/stats")[1]["model_stats"][0]
    assert after["execution_count"] - before["execution_count"] == 4  # the expired request never ran
    assert after["inference_stats"]["fail"]["count"] - before["inference_stats"]["fail"]["count"] == 1
    assert 'nv_inference_request_failure{model="slow",reason="REJECTED",version="1"} ' + str(len(refused) + 1) in s.metrics()


def wait_pending(server, model, at_least, timeout=10):
    """Waits until the metrics page shows at least `at_least` requests of `model` queued or running."""
    deadline = time.time() + timeout
    key = f'nv_inference_pending_request_count{{model="{model}",version="1"}} '
    while time.time() < deadline:
        line = next((l for l in server.metrics().splitlines() if l.startswith(key)), None)
        if line and int(line.split()[-1]) >= at_least:
            return int(line.split()[-1])
        time.sleep(0.001)
    raise AssertionError(f"{model} never had {at_least} pending requests")


def send_in_background(server, model, xs):
    """Posts each input from its own thread; returns (threads, results list filled with (status, body))."""
    results = [None] * len(xs)

    def send(i):
        body = json.dumps({"inputs": [{"name": "x", "shape": list(xs[i].shape), "datatype": "FP32",
                                       "data": xs[i].flatten().tolist()}]})
        try:
            status, _, data = server.request("POST", f"/v2/models/{model}/infer", body)
            results[i] = (status, data)
        except OSError as e:
            results[i] = (0, str(e).encode())

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    return threads, results


def check_results(xs, results):
    for x, (status, data) in zip(xs, results):
        assert status == 200, data
        out = json.loads(data)["outputs"][0]
        np.testing.assert_allclose(np.array(out["data"], np.float32).reshape(out["shape"]), slow_reference(x),
                                   rtol=1e-4, atol=1e-5)


def test_unload_drains_queued_requests(start_server, slow_repo):
    s = start_server(slow_repo, "--model-control-mode", "explicit", "--load-model", "slowauto", "--http-threads", "2")
    xs = [np.random.default_rng(i).standard_normal((4, 512)).astype(np.float32) for i in range(8)]
    threads, results = send_in_background(s, "slowauto", xs)
    pending = wait_pending(s, "slowauto", 4)
    status, body = s.json("POST", "/v2/repository/models/slowauto/unload")  # returns once the queue ran dry
    assert status == 200, body
    for t in threads:
        t.join()
    # every request queued before the unload ran to completion; any that arrived later got a clean 503
    done = [(x, r) for x, r in zip(xs, results) if r[0] == 200]
    assert len(done) >= pending
    check_results(*zip(*done))
    for status, data in results:
        assert status == 200 or (status == 503 and b"slowauto" in data and (b"unload" in data)), data
    status, body = s.json("GET", "/v2/models/slowauto/ready")
    assert status == 400 and "not ready" in body["error"]
    assert "unloaded model 'slowauto' (1 version drained and freed)" in s.logs()
    # unload and load again under load, repeatedly: no deadlock, no lost request
    for round_ in range(3):
        assert s.json("POST", "/v2/repository/models/slowauto/load")[0] == 200
        threads, results = send_in_background(s, "slowauto", xs)
        wait_pending(s, "slowauto", 2)
        assert s.json("POST", "/v2/repository/models/slowauto/unload")[0] == 200
        for t in threads:
            t.join()
        assert all(r[0] == 200 or (r[0] == 503 and b"unload" in r[1]) for r in results), results


def test_sigterm_finishes_in_flight_requests(slow_repo, start_server):
    s = start_server(slow_repo)
    xs = [np.random.default_rng(100 + i).standard_normal((4, 512)).astype(np.float32) for i in range(8)]
    threads, results = send_in_background(s, "slowauto", xs)
    pending = wait_pending(s, "slowauto", 4)
    s.proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join()
    # requests queued or running at the signal finish correctly; later ones are refused cleanly (503 or no connection)
    done = [(x, r) for x, r in zip(xs, results) if r[0] == 200]
    assert len(done) >= pending
    check_results(*zip(*done))
    for status, data in results:
        assert status in (200, 0) or (status == 503 and b"shutting down" in data), data
    assert s.proc.wait(timeout=30) == 0
    logs = s.logs()
    assert "received SIGTERM: stopping gracefully" in logs and "server stopped" in logs
    n = int(logs.split("shutting down: finishing ")[1].split()[0])
    assert n >= pending - 1 > 0
    with pytest.raises(OSError):
        s.request("GET", "/v2/health/live", timeout=2)


def run_cli(*args):
    return subprocess.run([SERVER, *args], capture_output=True, text=True, timeout=30)


def test_help_documents_every_flag():
    """Every flag of the parser's table (tools/cinfer_server.c long_options, aliases included) is in --help."""
    p = run_cli("--help")
    assert p.returncode == 0
    table = re.findall(r'\{"([a-z0-9-]+)",\s*(?:no|required|optional)_argument',
                       (ROOT / "tools" / "cinfer_server.c").read_text())
    for flag in ("model-repository", "http-port", "http-idle-timeout", "http-header-timeout", "http-body-timeout",
                 "http-max-connections", "http-max-connections-per-ip", "version", "help"):
        assert flag in table, flag  # the table was read
    refused = {"control-token", "inference-token"}  # in the table only to be refused (docs/security.md)
    missing = [f"--{f}" for f in table  # each whole, not as a longer flag's prefix
               if f not in refused and not re.search(rf"--{f}(?![\w-])", p.stdout)]
    assert not missing, missing
    assert run_cli("--version").stdout.strip() == "cinfer-server 0.1.0"


@pytest.mark.parametrize("args,message", [
    (["--bogus"], "unknown flag '--bogus'"),
    ([], "--model-repository DIR is required"),
    (["--model-repository", "/tmp", "--http-port", "70000"], "--http-port needs an integer from 0 to 65535"),
    (["--model-repository", "/tmp", "--http-port"], "--http-port needs a value"),
    (["--model-repository", "/tmp", "--model-control-mode", "sometimes"], "use none, poll or explicit"),
    (["--model-repository", "/tmp", "--log-format", "xml"], "use text or json"),
    (["--model-repository", "/tmp", "--device", "tpu"], "use cpu, cuda or cuda:N"),
    (["--model-repository", "/tmp", "--load-model", "m"], "--load-model needs --model-control-mode explicit"),
])
def test_bad_flags_exit_2(args, message):
    p = run_cli(*args)
    assert p.returncode == 2 and message in p.stderr, p.stderr


def test_missing_repository_exits_1(tmp_path):
    p = run_cli("--model-repository", str(tmp_path / "nope"), "--http-port", "0", "--metrics-port", "0")
    assert p.returncode == 1 and "is not a folder" in p.stderr


@pytest.mark.parametrize("busy", ["HTTP", "metrics"])
def test_second_server_on_a_busy_port_exits_1(start_server, tmp_path, busy):
    """A port another server listens on fails the start (exit 1, naming the port and the front end): with
    SO_REUSEPORT both bound it and the kernel split the connections between them."""
    repo = tmp_path / "models"
    write_model(repo, "mlp", {1: mlp_model()})
    first = start_server(repo)
    free_http, free_metrics = free_ports(2)
    http_port = first.port if busy == "HTTP" else free_http
    metrics_port = first.metrics_port if busy == "metrics" else free_metrics
    taken = first.port if busy == "HTTP" else first.metrics_port
    p = run_cli("--model-repository", str(repo), "--http-port", str(http_port), "--metrics-port", str(metrics_port))
    assert p.returncode == 1, p.stderr
    assert f"port {taken} is in use ({busy})" in p.stderr, p.stderr
    # the first server still answers on both ports, every time (no connection goes elsewhere)
    for _ in range(20):
        assert first.request("GET", "/v2/health/ready")[0] == 200
    assert "nv_inference_count" in first.metrics()


def test_json_logs(start_server, tmp_path):
    repo = tmp_path / "models"
    write_model(repo, "mlp", {1: mlp_model()})
    s = start_server(repo, "--log-format", "json")
    assert s.stop() == 0
    lines = [json.loads(l) for l in s.logs().splitlines() if l.strip()]
    assert any(l["msg"].startswith("loaded model 'mlp' version 1") and l["level"] == "info" for l in lines)
    assert all(set(l) == {"ts", "level", "msg"} for l in lines)
