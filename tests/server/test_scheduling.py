"""The instance scheduler and the queue policy: where batches go (instances pull; a slowed instance of three takes at
most a third), instance placement from instance_group, priority levels under a mixed load, queue timeouts (an
expired request is never executed), cancelled requests, max_queue_size (503, or 429 when configured) and
preserve_ordering.

Slow instances come from the test-only switch CINFER_SERVE_TEST_SLOW_INSTANCE=<model>:<index>:<ms>[,...] (the
instance sleeps that long after each execution). Where a test compares times, the sleeps are hundreds of
milliseconds against margins of tens, so a loaded 2-core machine does not change the outcome."""
import json
import os
import socket
import threading
import time

import numpy as np
import pytest
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper

from conftest import OPSET, Server, write_model

V = helper.make_tensor_value_info


def double_model():
    """x [batch, 4] FP32 -> y = 2x."""
    g = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "double", [V("x", TensorProto.FLOAT, ["b", 4])],
                          [V("y", TensorProto.FLOAT, ["b", 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="cinfer-server-tests")
    m.ir_version = 9
    return m


def config(extra, max_batch=8):
    return f"""
max_batch_size: {max_batch}
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "y" data_type: TYPE_FP32 dims: [ 4 ] }} ]
{extra}
"""


def body(rows, seed=0, **params):
    x = np.random.default_rng(seed).integers(-50, 50, (rows, 4)).astype(np.float32)
    req = {"inputs": [{"name": "x", "shape": [rows, 4], "datatype": "FP32", "data": x.flatten().tolist()}]}
    if params:
        req["parameters"] = params
    return x, json.dumps(req)


def check_double(x, status, data):
    assert status == 200, data
    out = json.loads(data)["outputs"][0]
    np.testing.assert_array_equal(np.array(out["data"], np.float32).reshape(out["shape"]), 2 * x)


def model_stats(server, model):
    status, b = server.json("GET", f"/v2/models/{model}/stats")
    assert status == 200, b
    return b["model_stats"][0]


def wait_for(cond, what, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.002)
    raise AssertionError(f"timed out waiting until {what}")


def pending(server, model):
    key = f'nv_inference_pending_request_count{{model="{model}",version="1"}} '
    line = next((l for l in server.metrics().splitlines() if l.startswith(key)), None)
    return int(line.split()[-1]) if line else 0


def busy(server, model, index=0):
    return model_stats(server, model)["instance_stats"][index]["in_flight"] == 1


def post_in_background(server, model, payload, out, key):
    def send():
        t0 = time.monotonic()
        status, _, data = server.request("POST", f"/v2/models/{model}/infer", payload)
        out[key] = (status, data, t0, time.monotonic())

    t = threading.Thread(target=send)
    t.start()
    return t


# ---- where batches go ----

BALANCE = config("instance_group [ { kind: KIND_CPU count: 3 } ]\ndynamic_batching { }", max_batch=4)


def test_slowed_instance_of_three_takes_at_most_a_third(start_server, tmp_path, monkeypatch):
    """Instances pull work when free, so the one slowed by 40 ms per execution comes back for less: it runs at most
    a third of the batches (counted per instance in instance_stats), and every result is right."""
    repo = tmp_path / "models"
    write_model(repo, "balance", {1: double_model()}, BALANCE)
    monkeypatch.setenv("CINFER_SERVE_TEST_SLOW_INSTANCE", "balance:1:40")
    s = start_server(repo, "--http-threads", "8")
    assert "instance 1 (balance_0_1) is slowed down by 40 ms" in s.logs()
    results, errors = {}, []

    def client(k):
        for j in range(12):
            x, payload = body(1 + (k + j) % 3, 100 * k + j)
            status, _, data = s.request("POST", "/v2/models/balance/infer", payload)
            try:
                check_double(x, status, data)
            except AssertionError as e:
                errors.append(str(e))
            results[(k, j)] = status

    threads = [threading.Thread(target=client, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(results) == 16 * 12
    st = model_stats(s, "balance")
    per = [i["execution_count"] for i in st["instance_stats"]]
    assert [i["name"] for i in st["instance_stats"]] == ["balance_0_0", "balance_0_1", "balance_0_2"]
    assert sum(per) == st["execution_count"] and sum(i["inference_count"] for i in st["instance_stats"]) == st["inference_count"]
    print("executions per instance:", per)
    assert per[1] * 3 <= sum(per), f"slowed instance ran {per[1]} of {sum(per)} batches: {per}"
    assert per[0] > 0 and per[2] > 0


def test_light_load_spreads_over_idle_instances(start_server, tmp_path):
    """With one request at a time, an arriving request wakes the instance idle longest, so three idle instances take
    turns rather than one doing all the work."""
    repo = tmp_path / "models"
    write_model(repo, "balance", {1: double_model()}, BALANCE)
    s = start_server(repo)
    for j in range(30):
        x, payload = body(1, j)
        check_double(x, *s.request("POST", "/v2/models/balance/infer", payload)[::2])
    per = [i["execution_count"] for i in model_stats(s, "balance")["instance_stats"]]
    assert sum(per) == 30 and min(per) >= 5, per


def test_instance_groups_are_placed(start_server, tmp_path):
    """count per group, names per Triton (<group>_<k>), kind and device per instance; KIND_GPU and --device cuda
    without a visible GPU fail the load with the reason."""
    repo = tmp_path / "models"
    write_model(repo, "two_groups", {1: double_model()},
                config('instance_group [ { name: "fast" kind: KIND_CPU count: 2 }, { count: 1 } ]'))
    write_model(repo, "gpu_only", {1: double_model()}, config("instance_group [ { kind: KIND_GPU } ]"))
    s = start_server(repo, "--strict-readiness", "false")
    inst = model_stats(s, "two_groups")["instance_stats"]
    assert [(i["name"], i["kind"], i["device"]) for i in inst] == [
        ("fast_0", "KIND_CPU", "cpu"), ("fast_1", "KIND_CPU", "cpu"), ("two_groups_1_0", "KIND_CPU", "cpu")]
    cfg = s.json("GET", "/v2/models/two_groups/config")[1]
    assert [(g["kind"], g["count"]) for g in cfg["instance_group"]] == [("KIND_CPU", 2), ("KIND_CPU", 1)]  # AUTO resolved
    index = {e["name"]: e for e in s.json("POST", "/v2/repository/index")[1]}
    assert index["gpu_only"]["state"] == "UNAVAILABLE"
    assert "model 'gpu_only' instance_group 0 is KIND_GPU but no GPU is visible" in index["gpu_only"]["reason"]
    assert index["two_groups"]["state"] == "READY"
    s2 = start_server(repo, "--device", "cuda", "--strict-readiness", "false")
    index = {e["name"]: e for e in s2.json("POST", "/v2/repository/index")[1]}
    assert "--device cuda but no GPU is visible" in index["two_groups"]["reason"]


LANES = 'parameters { key: "cinfer_instance_lanes" value: { string_value: "%s" } }\n'


def test_lanes_run_batches_of_one_instance_at_once(start_server, tmp_path, monkeypatch):
    """An instance with two lanes (cinfer_instance_lanes; the GPU default) runs two batches at once: with the
    instance slowed by 600 ms per execution and two requests sent together, its in_flight reaches 2, and both
    results are right. One lane (the CPU default) never has more than one batch in flight. A bad lane count fails
    the load, naming the parameter."""
    repo = tmp_path / "models"
    write_model(repo, "lanes2", {1: double_model()}, config("instance_group [ { kind: KIND_CPU count: 1 } ]\n" + LANES % 2,
                                                          max_batch=1))
    write_model(repo, "lanes1", {1: double_model()}, config("instance_group [ { kind: KIND_CPU count: 1 } ]", max_batch=1))
    write_model(repo, "lanes_bad", {1: double_model()}, config(LANES % "nine", max_batch=1))
    monkeypatch.setenv("CINFER_SERVE_TEST_SLOW_INSTANCE", "lanes2:0:600,lanes1:0:600")
    s = start_server(repo, "--http-threads", "4", "--strict-readiness", "false")
    index = {e["name"]: e for e in s.json("POST", "/v2/repository/index")[1]}
    assert index["lanes_bad"]["state"] == "UNAVAILABLE"
    assert "parameter 'cinfer_instance_lanes' is 'nine': give the batches each instance runs at once, from 1 to 8" \
        in index["lanes_bad"]["reason"]
    for model, lanes in (("lanes2", 2), ("lanes1", 1)):
        inst = model_stats(s, model)["instance_stats"]
        assert [(i["name"], i["lanes"]) for i in inst] == [(f"{model}_0_0", lanes)]
        out, seen = {}, []
        xs = [np.full((1, 4), k + 1, np.float32) for k in range(2)]
        threads = [post_in_background(s, model, json.dumps({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32",
                                                                         "data": xs[k].flatten().tolist()}]}), out, k)
                   for k in range(2)]
        while len(out) < 2:  # sample in_flight until both answers are in
            seen.append(model_stats(s, model)["instance_stats"][0]["in_flight"])
        for t in threads:
            t.join()
        for k in range(2):
            check_double(xs[k], out[k][0], out[k][1])
        assert max(seen) == lanes, (model, seen[:50])
        assert model_stats(s, model)["instance_stats"][0]["execution_count"] == 2


def test_lanes_prefer_the_idle_instance(start_server, tmp_path, monkeypatch):
    """Least-loaded dispatch counts batches per instance, not per lane: with two instances of two lanes each, both
    slowed, two requests sent together run one on each instance, not both on the lanes of one."""
    repo = tmp_path / "models"
    write_model(repo, "spread", {1: double_model()}, config("instance_group [ { kind: KIND_CPU count: 2 } ]\n" + LANES % 2,
                                                          max_batch=1))
    monkeypatch.setenv("CINFER_SERVE_TEST_SLOW_INSTANCE", "spread:0:300,spread:1:300")
    s = start_server(repo, "--http-threads", "4")
    for rnd in range(3):
        out = {}
        xs = [np.full((1, 4), 10 * rnd + k, np.float32) for k in range(2)]
        threads = [post_in_background(s, "spread", json.dumps({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32",
                                                                          "data": xs[k].flatten().tolist()}]}), out, k)
                   for k in range(2)]
        for t in threads:
            t.join()
        for k in range(2):
            check_double(xs[k], out[k][0], out[k][1])
    per = [i["execution_count"] for i in model_stats(s, "spread")["instance_stats"]]
    assert per == [3, 3], per


# ---- priorities ----

PRIO = config("dynamic_batching { priority_levels: 2 default_priority_level: 2 }", max_batch=4)


def test_high_priority_waits_less(start_server, tmp_path, monkeypatch):
    """Issue 4: under a mixed load (24 low-priority clients, 4 high-priority ones, one instance taking 20 ms per batch
    of at most 4) the high level's p99 latency - its queue time plus the same execution - is below the low level's.
    The low requests wait behind about six batches, the high ones behind at most one."""
    repo = tmp_path / "models"
    write_model(repo, "prio", {1: double_model()}, PRIO)
    monkeypatch.setenv("CINFER_SERVE_TEST_SLOW_INSTANCE", "prio:0:20")
    s = start_server(repo, "--http-threads", "8")
    lat = {1: [], 2: []}
    stop = time.monotonic() + 3.0
    errors = []

    def client(k, priority):
        j = 0
        while time.monotonic() < stop:
            x, payload = body(1, 1000 * k + j, priority=priority)
            t0 = time.monotonic()
            status, _, data = s.request("POST", "/v2/models/prio/infer", payload)
            lat[priority].append(time.monotonic() - t0)
            if status != 200:
                errors.append(data)
            j += 1

    threads = [threading.Thread(target=client, args=(k, 1 if k < 4 else 2)) for k in range(28)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(lat[1]) >= 20 and len(lat[2]) >= 20, (len(lat[1]), len(lat[2]))
    p99 = {p: float(np.percentile(v, 99)) for p, v in lat.items()}
    print("p99 latency by priority level (s):", p99, "samples:", len(lat[1]), len(lat[2]))
    assert p99[1] < p99[2], p99
    # and an unknown level is refused up front
    status, _, data = s.request("POST", "/v2/models/prio/infer", body(1, priority=3)[1])
    assert status == 400 and "priority 3 is out of range for model 'prio': it has 2 priority levels" in json.loads(data)["error"]


# ---- queue policy: timeouts, cancellation, queue size ----

TIMEOUTS = {
    # no default timeout: the request's own "timeout" parameter applies
    "tmo": "dynamic_batching { }",
    # default 50 ms that a request may not lengthen
    "tmo_default": "dynamic_batching { default_queue_policy { default_timeout_microseconds: 50000 } }",
    # default 50 ms that a request may lengthen (allow_timeout_override)
    "tmo_override": "dynamic_batching { default_queue_policy { default_timeout_microseconds: 50000 "
                    "allow_timeout_override: true } }",
}


@pytest.fixture(scope="module")
def timeout_server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("timeouts") / "models"
    for name, extra in TIMEOUTS.items():
        write_model(repo, name, {1: double_model()}, config(extra))
    write_model(repo, "qfull", {1: double_model()}, config("dynamic_batching { default_queue_policy { max_queue_size: 1 } }"))
    write_model(repo, "qfull429", {1: double_model()},
                config('dynamic_batching { default_queue_policy { max_queue_size: 1 } }\n'
                       'parameters { key: "cinfer_queue_full_status" value { string_value: "429" } }'))
    write_model(repo, "cancel", {1: double_model()}, config("dynamic_batching { }"))
    slow = ",".join(f"{m}:0:300" for m in [*TIMEOUTS, "qfull", "qfull429", "cancel"])
    old = os.environ.get("CINFER_SERVE_TEST_SLOW_INSTANCE")
    os.environ["CINFER_SERVE_TEST_SLOW_INSTANCE"] = slow
    try:
        s = Server(repo, ("--http-threads", "8"))
    finally:
        if old is None:
            del os.environ["CINFER_SERVE_TEST_SLOW_INSTANCE"]
        else:
            os.environ["CINFER_SERVE_TEST_SLOW_INSTANCE"] = old
    yield s
    assert s.stop() == 0, s.logs()


def occupy(server, model, out):
    """Starts a full batch (8 rows) on the model's one instance and waits until that instance is running it, so the
    next request must wait ~300 ms in the queue."""
    xa, pa = body(8, 1)
    t = post_in_background(server, model, pa, out, "a")
    wait_for(lambda: busy(server, model), f"{model}'s instance runs the first batch")
    return xa, t


@pytest.mark.parametrize("model,params,expires", [
    ("tmo", {"timeout": 50000}, True),              # the request's own timeout
    ("tmo_default", {"timeout": 10000000}, True),   # cannot lengthen the default without allow_timeout_override
    ("tmo_default", {}, True),                      # the default applies
    ("tmo_override", {"timeout": 10000000}, False), # may lengthen it with allow_timeout_override
])
def test_expired_request_is_never_executed(timeout_server, model, params, expires):
    """Issue 4: a request whose queue timeout passed while it waited is answered 503 with Triton's message and never
    runs: the model counts one execution (the batch it waited behind), not two."""
    s = timeout_server
    before = model_stats(s, model)
    out = {}
    xa, ta = occupy(s, model, out)
    xb, pb = body(1, 2, **params)
    status, _, data = s.request("POST", f"/v2/models/{model}/infer", pb)
    ta.join()
    check_double(xa, *out["a"][:2])
    after = model_stats(s, model)
    if expires:
        assert status == 503, data
        assert json.loads(data)["error"].startswith(f"request timeout expired: the request to model '{model}' waited ")
        assert after["execution_count"] - before["execution_count"] == 1
        assert after["inference_count"] - before["inference_count"] == 8
        assert after["inference_stats"]["fail"]["count"] - before["inference_stats"]["fail"]["count"] == 1
    else:
        check_double(xb, status, data)
        assert after["execution_count"] - before["execution_count"] == 2
        assert after["inference_count"] - before["inference_count"] == 9


def test_cancelled_request_is_dropped_before_running(timeout_server):
    """A client that disconnects while its request waits: the request is dropped when its batch is formed, never
    executed, and counted as CANCELED."""
    s = timeout_server
    before = model_stats(s, "cancel")
    out = {}
    xa, ta = occupy(s, "cancel", out)
    _, pb = body(1, 3)
    sock = socket.create_connection(("127.0.0.1", s.port))
    sock.sendall(f"POST /v2/models/cancel/infer HTTP/1.1\r\nHost: x\r\nContent-Length: {len(pb)}\r\n"
                 f"Content-Type: application/json\r\n\r\n{pb}".encode())
    wait_for(lambda: pending(s, "cancel") >= 2, "the second request is queued")
    sock.close()
    ta.join()
    check_double(xa, *out["a"][:2])
    wait_for(lambda: pending(s, "cancel") == 0, "the cancelled request is dropped")
    after = model_stats(s, "cancel")
    assert after["execution_count"] - before["execution_count"] == 1
    assert after["inference_stats"]["fail"]["count"] - before["inference_stats"]["fail"]["count"] == 1
    assert 'nv_inference_request_failure{model="cancel",reason="CANCELED",version="1"} 1' in s.metrics()


@pytest.mark.parametrize("model,code", [("qfull", 503), ("qfull429", 429)])
def test_queue_full_answers_503_or_429(timeout_server, model, code):
    """max_queue_size counts waiting requests (not running ones). Beyond it: 503 as Triton, or 429 Too Many Requests
    for a model whose config sets parameter cinfer_queue_full_status to "429". Counted as REJECTED."""
    s = timeout_server
    out = {}
    xa, ta = occupy(s, model, out)
    xb, pb = body(1, 4)
    tb = post_in_background(s, model, pb, out, "b")
    wait_for(lambda: pending(s, model) >= 2, "the second request is queued")
    status, _, data = s.request("POST", f"/v2/models/{model}/infer", body(1, 5)[1])
    assert status == code, data
    assert json.loads(data)["error"] == f"exceeds maximum queue size: model '{model}' already has 1 queued requests"
    ta.join()
    tb.join()
    check_double(xa, *out["a"][:2])
    check_double(xb, *out["b"][:2])
    assert f'nv_inference_request_failure{{model="{model}",reason="REJECTED",version="1"}} 1' in s.metrics()


# ---- response order ----

ORDER = "instance_group [ { kind: KIND_CPU count: 3 } ]\ndynamic_batching { %s }"


@pytest.mark.parametrize("preserve", [True, False])
def test_preserve_ordering(start_server, tmp_path, monkeypatch, preserve):
    """Six requests 40 ms apart over three idle instances, one of which takes 400 ms: the first three go to three
    different instances (the one idle longest is woken), so one lands on the slow instance. With preserve_ordering
    every later request's response leaves after that one's; without it, the later ones come back long before."""
    repo = tmp_path / "models"
    write_model(repo, "order", {1: double_model()}, config(ORDER % ("preserve_ordering: true" if preserve else "")))
    monkeypatch.setenv("CINFER_SERVE_TEST_SLOW_INSTANCE", "order:1:400")
    s = start_server(repo, "--http-threads", "8")
    out, threads, xs = {}, [], []
    for i in range(6):
        x, payload = body(1, 10 + i)
        xs.append(x)
        threads.append(post_in_background(s, "order", payload, out, i))
        time.sleep(0.04)
    for t in threads:
        t.join()
    for i in range(6):
        check_double(xs[i], *out[i][:2])
    lat = [out[i][3] - out[i][2] for i in range(6)]
    slow = max(range(6), key=lambda i: lat[i])
    assert slow < 3 and lat[slow] >= 0.4, lat
    done = [out[i][3] for i in range(6)]
    later = range(slow + 1, 6)
    if preserve:
        assert all(done[j] >= done[slow] - 0.05 for j in later), (slow, lat)
    else:
        assert any(done[j] < done[slow] - 0.15 for j in later), (slow, lat)
    assert model_stats(s, "order")["instance_stats"][1]["execution_count"] == 1
