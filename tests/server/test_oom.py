"""OOM adaptation (docs/resilience.md): an execution that runs out of memory is split in halves and retried, the
instance's batch cap drops so later batches fit, it rises again after successful executions, a request that cannot
fit even alone gets a 503 naming the model, and cinfer_oom_retries_total counts the events. On a CPU the OOM is
injected (CINFER_SERVE_FAULTS rule oom_above, re-read from a file so one server run sees it switched on and off);
on a GPU a tight allocator limit (--cuda-memory-limit) gives a real one, and --probe-max-batch is checked."""
import os
import re
import threading

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import OPSET, write_model

V = helper.make_tensor_value_info
THRESHOLD = 4


def affine_model():
    """x [batch, 4] FP32 -> y = 3x + 1 (exact for small integers, in any batch)."""
    nodes = [helper.make_node("Mul", ["x", "three"], ["m"]), helper.make_node("Add", ["m", "one"], ["y"])]
    g = helper.make_graph(nodes, "affine", [V("x", TensorProto.FLOAT, ["b", 4])], [V("y", TensorProto.FLOAT, ["b", 4])],
                          [numpy_helper.from_array(np.array(3, np.float32), "three"),
                           numpy_helper.from_array(np.array(1, np.float32), "one")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = 9
    return m


def batching_config(name, recover_after, kind="KIND_CPU"):
    return f"""
name: "{name}"
max_batch_size: 8
input [ {{ name: "x", data_type: TYPE_FP32, dims: [ 4 ] }} ]
output [ {{ name: "y", data_type: TYPE_FP32, dims: [ 4 ] }} ]
dynamic_batching {{ max_queue_delay_microseconds: 30000 }}
instance_group [ {{ kind: {kind}, count: 1 }} ]
parameters {{ key: "cinfer_oom_recover_after" value {{ string_value: "{recover_after}" }} }}
"""


def infer(server, model, x, rid=None):
    body = {"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32", "data": x.flatten().tolist()}]}
    if rid:
        body["id"] = rid
    return server.json("POST", f"/v2/models/{model}/infer", body)


def hammer(server, models, threads=16, per_thread=6):
    """Concurrent single-row requests with distinct values; returns the failures (model, status, body)."""
    failures, lock = [], threading.Lock()

    def work(t):
        for k in range(per_thread):
            model = models[(t + k) % len(models)]
            x = np.full((1, 4), t * 100 + k, np.float32) + np.arange(4, dtype=np.float32)
            status, body = infer(server, model, x)
            ok = status == 200 and np.array_equal(np.array(body["outputs"][0]["data"], np.float32).reshape(1, 4), 3 * x + 1)
            if not ok:
                with lock:
                    failures.append((model, status, body))

    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return failures


def metric(text, name, **labels):
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        if line.startswith(f"{name}{{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name}{{{want}}} on the metrics page:\n{text}")


def request_counts(text, model, version="1"):
    """(failures with reason BACKEND, successes) of a model version on the metrics page."""
    return (metric(text, "nv_inference_request_failure", model=model, reason="BACKEND", version=version),
            metric(text, "nv_inference_request_success", model=model, version=version))


def stats(server, model):
    status, body = server.json("GET", f"/v2/models/{model}/stats")
    assert status == 200, body
    return body["model_stats"][0]


def executed_sizes(st):
    """{batch size: successful executions} from the statistics' batch_stats."""
    return {b["batch_size"]: b["compute_infer"]["count"] for b in st["batch_stats"] if b["compute_infer"]["count"]}


@pytest.fixture
def oom_server(tmp_path, monkeypatch, start_server):
    repo = tmp_path / "models"
    write_model(repo, "oomfix", {1: affine_model()}, batching_config("oomfix", 1000000))
    write_model(repo, "oomrec", {1: affine_model()}, batching_config("oomrec", 2))
    faults = tmp_path / "faults.txt"
    faults.write_text(f"oom_above=oomfix:{THRESHOLD}\noom_above=oomrec:{THRESHOLD}\n")
    monkeypatch.setenv("CINFER_SERVE_FAULTS", f"@{faults}")
    return start_server(repo), faults


def test_oom_splits_caps_and_recovers(oom_server):
    s, faults = oom_server
    assert "fault injection is on" in s.logs()
    # 1. the injected OOM on batches above 4: every request still gets its own correct result
    failures = hammer(s, ["oomfix", "oomrec"])
    assert not failures, failures[:3]
    m = s.metrics()
    assert metric(m, "cinfer_oom_retries_total", model="oomfix", version="1") == 1, s.logs()
    assert metric(m, "cinfer_oom_retries_total", model="oomrec", version="1") >= 1
    assert metric(m, "nv_inference_request_failure", model="oomfix", reason="BACKEND", version="1") == 0
    st = stats(s, "oomfix")
    inst = st["instance_stats"][0]
    assert inst["oom_events"] == 1 and inst["batch_cap"] <= THRESHOLD, inst
    sizes = executed_sizes(st)
    assert max(sizes) <= THRESHOLD and max(sizes) >= 2, sizes  # batches still formed, none above the cap
    logs = s.logs()
    assert re.search(r"model 'oomfix' version 1 instance \S+ \(cpu\) ran out of memory on a batch of \d+ inferences", logs), logs
    assert "host memory (no device allocator)" in logs and "batch cap lowered to" in logs
    assert len(re.findall(r"model 'oomfix' version 1 instance \S+ \(cpu\) ran out of memory", logs)) == 1  # once per event
    # 2. a request that cannot fit even alone: a clear 503 naming the model, counted as a backend failure
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    status, body = infer(s, "oomfix", x)
    assert status == 503, body
    assert "model 'oomfix'" in body["error"] and "ran out of memory" in body["error"], body
    m = s.metrics()
    assert metric(m, "nv_inference_request_failure", model="oomfix", reason="BACKEND", version="1") == 1
    assert metric(m, "cinfer_oom_retries_total", model="oomfix", version="1") == 2
    # 3. the fault cleared: oomrec's cap climbs back to 8 (one step per 2 successes) and batches above 4 run
    faults.write_text("")
    assert max(executed_sizes(stats(s, "oomrec"))) <= THRESHOLD
    for _ in range(6):
        assert not hammer(s, ["oomrec"], threads=16, per_thread=4)
        if stats(s, "oomrec")["instance_stats"][0]["batch_cap"] == 8:
            break
    st = stats(s, "oomrec")
    assert st["instance_stats"][0]["batch_cap"] == 8, (st["instance_stats"], s.logs())
    assert "batch cap raised to 8" in s.logs()
    assert not hammer(s, ["oomrec"], threads=16, per_thread=4)
    assert max(executed_sizes(stats(s, "oomrec"))) > THRESHOLD, executed_sizes(stats(s, "oomrec"))
    # oomfix keeps its lowered cap (recover_after 1000000) and keeps serving
    assert stats(s, "oomfix")["instance_stats"][0]["batch_cap"] <= THRESHOLD


def test_oom_recover_after_is_checked(tmp_path, start_server):
    repo = tmp_path / "models"
    write_model(repo, "bad", {1: affine_model()}, batching_config("bad", "soon"))
    s = start_server(repo, "--strict-readiness", "false")
    status, body = s.json("POST", "/v2/repository/index", {})
    entry = [e for e in body if e["name"] == "bad"][0]
    assert entry["state"] == "UNAVAILABLE" and "cinfer_oom_recover_after" in entry["reason"] and "'soon'" in entry["reason"], entry


def test_probe_max_batch_on_cpu_is_reported_as_skipped(tmp_path, start_server):
    repo = tmp_path / "models"
    write_model(repo, "probed", {1: affine_model()}, batching_config("probed", 8))
    s = start_server(repo, "--probe-max-batch")
    assert "--probe-max-batch skipped: CPU instances are not probed" in s.logs()
    assert "probed_max_batch" not in stats(s, "probed")["instance_stats"][0]


def _gpu_or_skip():
    from cinfer_ctypes import Library
    devices, why = Library().cuda_devices()
    if not devices:
        pytest.skip(f"no GPU here: {why}")
    return devices


def big_model(width=4096, layers=4):
    """x [batch, width] FP32 through `layers` MatMuls: activations of batch*width*4 bytes per layer, so a tight
    allocator limit runs out of memory as the batch grows."""
    rng = np.random.default_rng(1)
    nodes, inits, x = [], {}, "x"
    for i in range(layers):
        inits[f"w{i}"] = (rng.standard_normal((width, width)) / width).astype(np.float32)
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"h{i}"]))
        x = f"h{i}"
    nodes.append(helper.make_node("Identity", [x], ["y"]))
    g = helper.make_graph(nodes, "big", [V("x", TensorProto.FLOAT, ["b", width])], [V("y", TensorProto.FLOAT, ["b", width])],
                          [numpy_helper.from_array(a, n) for n, a in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = 9
    return m


def gpu_config(width):
    return f"""
name: "big"
max_batch_size: 8192
input [ {{ name: "x", data_type: TYPE_FP32, dims: [ {width} ] }} ]
output [ {{ name: "y", data_type: TYPE_FP32, dims: [ {width} ] }} ]
dynamic_batching {{ max_queue_delay_microseconds: 50000 }}
instance_group [ {{ kind: KIND_GPU, count: 1, gpus: [ 0 ] }} ]
"""


def test_real_gpu_oom_under_a_tight_limit(tmp_path, start_server):
    """A real OOM: 256 MiB of weights (plus a 32 MiB workspace) under a 360 MiB allocator cap leave about 40 MiB
    for a run, about 640 rows (64 KiB per row: two activations and the io). Each request is 64 rows; the instance is
    slowed (test switch) so that while one execution sleeps the 48 clients queue far more than 640 rows: the next
    execution runs out of memory, is split and retried, every request succeeds, and the cap drops below the batch
    that failed. (Measured on the H200: without the slowdown requests arrived too slowly to batch past the cap.)
    A GPU instance's second lane (its own session and workspace) does not fit under that cap: the instance runs one
    lane, and says so."""
    _gpu_or_skip()
    width, rows, clients = 4096, 64, 48
    repo = tmp_path / "models"
    write_model(repo, "big", {1: big_model(width)}, gpu_config(width))
    os.environ["CINFER_SERVE_TEST_SLOW_INSTANCE"] = "big:0:300"
    try:
        s = start_server(repo, "--cuda-memory-limit", str(360 << 20))
    finally:
        del os.environ["CINFER_SERVE_TEST_SLOW_INSTANCE"]
    failures, lock = [], threading.Lock()

    def work(t):
        x = np.random.default_rng(t).standard_normal((rows, width)).astype(np.float32)
        for _ in range(3):
            status, body = infer(s, "big", x)
            if status != 200:
                with lock:
                    failures.append((status, body if status != 200 else None))

    ts = [threading.Thread(target=work, args=(t,)) for t in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    inst = stats(s, "big")["instance_stats"][0]
    assert not failures, failures[:3]
    assert inst["oom_events"] >= 1, (inst, "no real OOM happened: raise the load or lower the limit", s.logs())
    assert inst["batch_cap"] < clients * rows, inst
    assert metric(s.metrics(), "cinfer_oom_retries_total", model="big", version="1") == inst["oom_events"]
    logs = s.logs()
    assert "allocator on cuda:0: allocated" in logs and f"limit {360 << 20} B" in logs, logs
    assert inst["lanes"] == 1 and "instance big_0_0 (cuda:0): lane 2 of 2 does not fit" in logs, (inst, logs)


def test_probe_max_batch_on_gpu(tmp_path, start_server):
    """--probe-max-batch under a 900 MiB cap: 320 MiB in use and 20% headroom leave about 400 MiB, about 6400 rows
    of 64 KiB: a batch between 1 and max_batch_size (8192), logged, in the statistics, and the instance's batch cap.
    (A 400 MiB cap, tried first on the H200, left no room at all once weights and workspace were in.)"""
    _gpu_or_skip()
    width = 4096
    repo = tmp_path / "models"
    write_model(repo, "big", {1: big_model(width)}, gpu_config(width))
    s = start_server(repo, "--cuda-memory-limit", str(900 << 20), "--probe-max-batch")
    m = re.search(r"--probe-max-batch: the largest batch that fits with 20% headroom is (\d+)", s.logs())
    assert m, s.logs()
    inst = stats(s, "big")["instance_stats"][0]
    assert inst["probed_max_batch"] == int(m.group(1)) and 1 <= inst["probed_max_batch"] < 8192, inst
    assert inst["batch_cap"] == inst["probed_max_batch"], inst
