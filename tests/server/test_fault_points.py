"""Engine fault points (docs/resilience.md, src/runtime/fault_backend.h) and a failed device simulated on a CPU.

With CINFER_FAULT_INJECTION=1, CINFER_FAULT_ALLOC fails chosen backend allocations (a plan's arena or io block) as
out of memory and CINFER_FAULT_COPY fails chosen host<->device copies (the CPU then runs as a device, copying by
memcpy). Each test arms a rule by writing its file, so it knows which request meets the fault: that request gets a
clear error naming the fault, the failure is counted, the model's other requests and the other model keep serving,
a failed plan gives back every block it took (the fault messages report the session's blocks at each point, and
the session's final account, printed when it is freed, holds nothing). CINFER_SERVE_FAULTS=device_fail marks a CPU
instance's device failed, as a sticky CUDA error does a GPU's: the model is UNAVAILABLE in the repository index with
the reason, not ready, 503; liveness and readiness answer 400; the other model keeps serving."""
import re
import threading

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import OPSET, write_model
from test_oom import batching_config, metric, request_counts

V = helper.make_tensor_value_info


def affine(graph_name, width=4):
    """x [batch, width] FP32 -> y = 3x + 1, its graph named after the model (rules select sessions by graph name).
    The 3 is a [width] vector, so the two steps stay two kernels with an intermediate in the plan's arena (scalars
    would fuse into one ElementwiseChain writing the output directly: no arena for the fault points to hit)."""
    nodes = [helper.make_node("Mul", ["x", "three"], ["m"]), helper.make_node("Add", ["m", "one"], ["y"])]
    g = helper.make_graph(nodes, graph_name, [V("x", TensorProto.FLOAT, ["b", width])],
                          [V("y", TensorProto.FLOAT, ["b", width])],
                          [numpy_helper.from_array(np.full(width, 3, np.float32), "three"),
                           numpy_helper.from_array(np.array(1, np.float32), "one")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = 9
    return m


def config(name, width=4):
    return batching_config(name, 1).replace("dims: [ 4 ]", f"dims: [ {width} ]")


def infer(server, model, x, rid=None):
    body = {"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32", "data": x.flatten().tolist()}]}
    if rid:
        body["id"] = rid
    return server.json("POST", f"/v2/models/{model}/infer", body)


def correct(status, body, x):
    return status == 200 and np.array_equal(np.array(body["outputs"][0]["data"], np.float32).reshape(x.shape), 3 * x + 1)


def held_before(message):
    """(blocks, bytes) the session held at an injected fault, from its message."""
    m = re.search(r"the session held (\d+) backend blocks, (\d+) bytes, before it", message)
    assert m, message
    return int(m.group(1)), int(m.group(2))


def serve_steady(server, rounds=15, threads=4):
    """Starts clients of model 'steady'; join() returns the requests that did not get their correct answer."""
    bad, ts = [], []

    def load(t):
        for k in range(rounds):
            x = np.full((2, 4), 10 * t + k, np.float32)
            status, body = infer(server, "steady", x)
            if not correct(status, body, x):
                bad.append((status, body))

    ts = [threading.Thread(target=load, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()

    def join():
        for t in ts:
            t.join()
        return bad
    return join


@pytest.fixture
def points(tmp_path, monkeypatch, start_server):
    """A server with the engine's fault points on, both rule files absent (no faults yet)."""
    repo = tmp_path / "models"
    write_model(repo, "fragile", {1: affine("fragile")}, config("fragile"))
    write_model(repo, "steady", {1: affine("steady")}, config("steady"))
    write_model(repo, "wide", {1: affine("wide", 256)}, config("wide", 256))
    alloc, copy = tmp_path / "alloc.rule", tmp_path / "copy.rule"
    monkeypatch.setenv("CINFER_FAULT_INJECTION", "1")
    monkeypatch.setenv("CINFER_FAULT_ALLOC", f"@{alloc}")
    monkeypatch.setenv("CINFER_FAULT_COPY", f"@{copy}")
    return start_server(repo), alloc, copy


def test_allocation_failures_at_chosen_points(points):
    s, alloc, _ = points
    x2, x3 = np.ones((2, 4), np.float32), np.arange(12, dtype=np.float32).reshape(3, 4)
    assert correct(*infer(s, "fragile", x2), x2)  # a plan for batch 2 is built and kept: the baseline
    steady = serve_steady(s)
    errors = []
    # a new plan (batch 3) takes two blocks: its arena (#1) and its io block (#2); fail each in turn
    for rule in ("graph=fragile,nth=1", "graph=fragile,nth=2", "nth=1,graph=fragile"):
        alloc.write_text(rule)
        status, body = infer(s, "fragile", x3)
        assert status == 503, body
        err = body["error"]
        assert "model 'fragile' version 1 ran out of memory" in err and "injected allocation failure" in err and \
            f"CINFER_FAULT_ALLOC={rule}" in err and "for graph 'fragile'" in err, err
        errors.append(err)
    # the io block's failure came after the arena was taken; the next failed plan starts from the baseline again
    base, after_arena, again = (held_before(e) for e in errors)
    assert after_arena[0] == base[0] + 1 and after_arena[1] > base[1], errors
    assert again == base, errors
    alloc.unlink()
    assert correct(*infer(s, "fragile", x3), x3)
    assert not steady(), "the other model failed while fragile's allocations did"
    m = s.metrics()
    assert request_counts(m, "fragile")[0] == 3
    assert metric(m, "cinfer_oom_retries_total", model="fragile", version="1") == 3
    assert request_counts(m, "steady") == (0, 60)
    assert s.request("GET", "/v2/health/live")[0] == 200 and s.request("GET", "/v2/models/fragile/ready")[0] == 200
    assert s.stop() == 0
    freed = re.findall(r"backend cpu of graph '(\w+)' freed: (\d+) allocations, (\d+) releases, (\d+) blocks \((\d+) "
                       r"bytes\) never released", s.logs())
    assert {g for g, *_ in freed} == {"fragile", "steady", "wide"}, freed
    for g, allocs, releases, blocks, nbytes in freed:
        assert allocs == releases and blocks == "0" and nbytes == "0", (g, allocs, releases, blocks, nbytes)


def test_allocation_failures_by_size(points):
    """min_bytes: every allocation of that size fails, as a model too large for the memory left: a batch of 8 rows
    (its io block 16 KiB) gets the 503 alone while batches of 4 (8 KiB) run."""
    s, alloc, _ = points
    alloc.write_text("graph=wide min_bytes=8193")
    x8, x4 = np.ones((8, 256), np.float32), np.full((4, 256), 2, np.float32)
    for _ in range(2):  # every time, not once
        status, body = infer(s, "wide", x8)
        assert status == 503 and "injected allocation failure" in body["error"] and "of 16384 bytes" in body["error"], body
    assert correct(*infer(s, "wide", x4), x4)
    x2 = np.ones((2, 4), np.float32)
    assert correct(*infer(s, "fragile", x2), x2)


def test_copy_failures_at_chosen_points(points):
    s, _, copy = points
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    assert correct(*infer(s, "fragile", x), x)
    steady = serve_steady(s)
    copy.write_text("graph=fragile dir=d2h nth=1")  # the next output download fails, once
    status, body = infer(s, "fragile", x)
    assert status == 500, body
    err = body["error"]
    assert "model 'fragile' version 1 failed to run: CINFER_ERR_RUNTIME: injected copy failure: device-to-host copy #1 " \
           "of 32 bytes on cpu (as a device) for graph 'fragile'" in err, err
    assert correct(*infer(s, "fragile", x + 1), x + 1)
    copy.write_text("graph=fragile dir=h2d")  # every input upload fails
    for k in range(3):
        status, body = infer(s, "fragile", x + k)
        assert status == 500 and "injected copy failure: host-to-device copy" in body["error"], body
    copy.unlink()
    assert correct(*infer(s, "fragile", x + 5), x + 5)
    assert not steady(), "the other model failed while fragile's copies did"
    m = s.metrics()
    assert metric(m, "nv_inference_request_failure", model="fragile", reason="BACKEND", version="1") == 4
    assert metric(m, "nv_inference_request_success", model="fragile", version="1") == 3
    assert metric(m, "nv_inference_request_failure", model="steady", reason="BACKEND", version="1") == 0
    assert s.request("GET", "/v2/health/live")[0] == 200
    assert "cinfer: fault injection: injected copy failure" in s.logs()


def test_fault_points_are_off_without_the_gate(tmp_path, monkeypatch, start_server):
    repo = tmp_path / "models"
    write_model(repo, "fragile", {1: affine("fragile")}, config("fragile"))
    monkeypatch.delenv("CINFER_FAULT_INJECTION", raising=False)
    monkeypatch.setenv("CINFER_FAULT_ALLOC", "nth=1")
    monkeypatch.setenv("CINFER_FAULT_COPY", "nth=1")
    s = start_server(repo)
    x = np.ones((2, 4), np.float32)
    assert correct(*infer(s, "fragile", x), x)
    assert "fault injection" not in s.logs() and "fault points" not in s.logs()


def index(server, **body):
    status, entries = server.json("POST", "/v2/repository/index", body)
    assert status == 200, entries
    return {e["name"]: e for e in entries}


def test_failed_device_makes_the_model_unavailable_in_the_index(tmp_path, monkeypatch, start_server):
    repo = tmp_path / "models"
    write_model(repo, "fragile", {1: affine("fragile")}, config("fragile"))
    write_model(repo, "steady", {1: affine("steady")}, config("steady"))
    monkeypatch.setenv("CINFER_SERVE_FAULTS", "device_fail=fragile:poison")
    s = start_server(repo)
    x = np.ones((1, 4), np.float32)
    assert {n: e["state"] for n, e in index(s).items()} == {"fragile": "READY", "steady": "READY"}
    assert correct(*infer(s, "fragile", x, rid="fine"), x)
    status, body = infer(s, "fragile", x, rid="poison")  # the run that "hits the sticky error"
    assert status == 503, body
    assert "model 'fragile' version 1 is unavailable: its device cpu failed" in body["error"] and \
        "injected device failure" in body["error"], body
    # from now on: the index says so, with the reason; not ready, 503; not live; the other model serves
    entry = index(s)["fragile"]
    assert entry["state"] == "UNAVAILABLE" and entry["version"] == "1", entry
    assert "its device cpu failed with an injected device failure" in entry["reason"], entry
    assert index(s)["steady"]["state"] == "READY"
    assert set(index(s, ready=True)) == {"steady"}
    assert s.request("GET", "/v2/health/live")[0] == 400
    assert s.request("GET", "/v2/health/ready")[0] == 400
    status, _, data = s.request("GET", "/v2/models/fragile/ready")
    assert status == 400 and b"device cpu failed" in data, data
    status, body = infer(s, "fragile", x, rid="after")
    assert status == 503 and "device cpu failed" in body["error"], body
    assert s.request("GET", "/v2/models/steady/ready")[0] == 200
    for k in range(5):
        assert correct(*infer(s, "steady", x + k), x + k)
    m = s.metrics()
    assert metric(m, "nv_inference_request_failure", model="fragile", reason="BACKEND", version="1") == 1
    assert metric(m, "nv_inference_request_success", model="steady", version="1") == 5
    assert "has failed (injected:" in s.logs()
