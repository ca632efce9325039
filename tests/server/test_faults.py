"""Fault injection (docs/resilience.md): a kernel failure injected for chosen requests of one model gets a clear 500
counted as nv_inference_request_failure{reason="BACKEND"} while that model's other requests and the other models keep
serving; the switch is off unless CINFER_SERVE_FAULTS is set; and on a GPU a real sticky CUDA error
(CINFER_FAULT_INJECTION) turns that device's models not-ready, UNAVAILABLE in the repository index and 503, makes /v2/health/live answer 400 so an
orchestrator restarts the process, while a CPU model keeps serving."""
import threading

import numpy as np
import pytest

from conftest import write_model
from test_oom import affine_model, batching_config, infer, request_counts


def correct(status, body, x):
    return status == 200 and np.array_equal(np.array(body["outputs"][0]["data"], np.float32).reshape(x.shape), 3 * x + 1)


@pytest.fixture
def fault_repo(tmp_path):
    repo = tmp_path / "models"
    write_model(repo, "fragile", {1: affine_model()}, batching_config("fragile", 8))
    write_model(repo, "steady", {1: affine_model()}, batching_config("steady", 8))
    return repo


def test_injected_kernel_failure_is_a_clear_500_and_the_rest_keeps_serving(fault_repo, monkeypatch, start_server):
    monkeypatch.setenv("CINFER_SERVE_FAULTS", "run_error=fragile:boom")
    s = start_server(fault_repo)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    steady_bad = []

    def load():
        for k in range(20):
            xs = x + k
            st, body = infer(s, "steady", xs, rid=f"steady-{k}")
            if not correct(st, body, xs):
                steady_bad.append((st, body))

    ts = [threading.Thread(target=load) for _ in range(6)]
    for t in ts:
        t.start()
    for _ in range(3):  # the chosen request fails each time, while the other model is under load
        status, body = infer(s, "fragile", x, rid="boom")
        assert status == 500, body
        err = body["error"]
        assert "model 'fragile' version 1 failed to run" in err and "CINFER_ERR_RUNTIME" in err and \
            "injected kernel failure for request 'boom'" in err, err
    for t in ts:
        t.join()
    assert not steady_bad, steady_bad[:3]
    for k in range(5):  # the same model's other requests are fine
        assert correct(*infer(s, "fragile", x + k, rid=f"fine-{k}"), x + k)
    m = s.metrics()
    assert request_counts(m, "fragile") == (3, 5)
    assert request_counts(m, "steady") == (0, 120)
    assert s.request("GET", "/v2/health/live")[0] == 200 and s.request("GET", "/v2/models/fragile/ready")[0] == 200


def test_faults_are_off_unless_the_switch_is_set(fault_repo, monkeypatch, start_server):
    monkeypatch.delenv("CINFER_SERVE_FAULTS", raising=False)
    s = start_server(fault_repo)
    x = np.ones((2, 4), np.float32)
    assert correct(*infer(s, "fragile", x, rid="boom"), x)
    assert "fault injection" not in s.logs()


def test_sticky_cuda_error_poisons_the_device_not_the_server(tmp_path, monkeypatch, start_server):
    """The engine's own fault injection makes node 'poison' write out of bounds on the GPU: the device fails stickily."""
    from cinfer_ctypes import Library
    devices, why = Library().cuda_devices()
    if not devices:
        pytest.skip(f"no GPU here: {why}")
    repo = tmp_path / "models"
    gpu = affine_model()
    gpu.graph.node[0].name = "poison"
    write_model(repo, "ongpu", {1: gpu}, batching_config("ongpu", 8, kind="KIND_GPU"))
    write_model(repo, "oncpu", {1: affine_model()}, batching_config("oncpu", 8))
    monkeypatch.setenv("CINFER_FAULT_INJECTION", "1")
    monkeypatch.setenv("CINFER_FAULT_NODE", "poison")
    s = start_server(repo)
    assert s.request("GET", "/v2/health/live")[0] == 200
    x = np.ones((1, 4), np.float32)
    status, body = infer(s, "ongpu", x)  # the run that hits the sticky error
    assert status in (500, 503), body
    assert "model 'ongpu'" in body["error"], body
    # from now on: not live (restart me), the GPU model not ready and refusing with 503, the CPU model serving
    assert s.request("GET", "/v2/health/live")[0] == 400
    assert s.request("GET", "/v2/health/ready")[0] == 400
    assert s.request("GET", "/v2/models/ongpu/ready")[0] == 400
    status, body = infer(s, "ongpu", x)
    assert status == 503 and "device cuda:" in body["error"] and "failed" in body["error"], body
    status, entries = s.json("POST", "/v2/repository/index", {})
    states = {e["name"]: e for e in entries}
    assert states["ongpu"]["state"] == "UNAVAILABLE" and "device cuda:" in states["ongpu"]["reason"], entries
    assert states["oncpu"]["state"] == "READY", entries
    assert s.request("GET", "/v2/models/oncpu/ready")[0] == 200
    assert correct(*infer(s, "oncpu", x), x)
    assert "has failed (sticky CUDA error)" in s.logs()
