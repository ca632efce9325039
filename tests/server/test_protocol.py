"""KServe v2 protocol through Triton's own client (tritonclient.http) and raw HTTP: health, metadata, config,
inference (JSON and binary, every datatype family, output subsets, id echo), statistics and metrics."""
import gzip
import json
import zlib

import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest
from cinfer_ctypes import Library  # noqa: E402
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import mlp_model


@pytest.fixture(scope="module")
def client(main_server):
    c = httpclient.InferenceServerClient(main_server.url, concurrency=8)
    yield c
    c.close()


@pytest.fixture(scope="module")
def mlp_reference():
    sess = ort.InferenceSession(mlp_model().SerializeToString(), providers=["CPUExecutionProvider"])
    return lambda x: sess.run(None, {"x": x})[0]


def test_health_and_server_metadata(main_server, client):
    assert client.is_server_live() and client.is_server_ready()
    for path in ("/v2/health/live", "/v2/health/ready"):
        status, _, body = main_server.request("GET", path)
        assert status == 200 and body == b""
    meta = client.get_server_metadata()
    assert meta["name"] == "cinfer" and meta["version"] == "0.1.0"
    assert {"binary_tensor_data", "model_repository", "model_configuration", "statistics"} <= set(meta["extensions"])


def test_model_metadata_and_readiness(main_server, client):
    meta = client.get_model_metadata("mlp")
    assert meta == {"name": "mlp", "versions": ["1"], "platform": "onnxruntime_onnx",
                    "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 16]}],
                    "outputs": [{"name": "probs", "datatype": "FP32", "shape": [-1, 5]}]}
    add = client.get_model_metadata("add", "2")
    assert add["versions"] == ["1", "2"] and add["inputs"][0]["shape"] == [2, 3]  # no batch dim: max_batch_size 0
    typed = client.get_model_metadata("typed")
    assert [(t["name"], t["datatype"]) for t in typed["inputs"]] == [
        ("h", "FP16"), ("bf", "BF16"), ("i", "INT64"), ("f", "BOOL"), ("d", "FP64")]
    assert client.is_model_ready("mlp") and client.is_model_ready("add", "1") and client.is_model_ready("add", "2")
    assert not client.is_model_ready("add", "3") and not client.is_model_ready("nope")
    status, body = main_server.json("GET", "/v2/models/nope")
    assert status == 404 and "unknown model" in body["error"] and "'nope'" in body["error"]
    status, body = main_server.json("GET", "/v2/models/add/versions/9")
    assert status == 404 and body["error"] == "model 'add' has no version 9 loaded"
    status, body = main_server.json("GET", "/v2/models/add/versions/x1/ready")
    assert status == 400 and "not a version number" in body["error"]


def test_model_config(client):
    cfg = client.get_model_config("mlp")
    assert cfg["name"] == "mlp" and cfg["max_batch_size"] == 4  # auto-completed: every first dim is dynamic
    assert cfg["input"] == [{"name": "x", "data_type": "TYPE_FP32", "format": "FORMAT_NONE", "dims": [16],
                             "is_shape_tensor": False, "is_non_linear_format_io": False, "allow_ragged_batch": False,
                             "optional": False}]
    assert cfg["output"][0]["dims"] == [5] and cfg["output"][0]["data_type"] == "TYPE_FP32"
    # default placement: one instance per visible GPU, else one CPU instance
    gpus, _ = Library().cuda_devices()
    group = cfg["instance_group"][0]
    if gpus:
        assert group["kind"] == "KIND_GPU" and group["count"] == 1 and group["gpus"] == list(range(len(gpus))), group
    else:
        assert group["kind"] == "KIND_CPU" and group["count"] == 1, group
    assert cfg["model_transaction_policy"] == {"decoupled": False} and cfg["response_cache"] == {"enable": False}
    assert "sequence_batching" not in cfg  # auto-completed batching turns the dynamic batcher on, as Triton's ONNX backend
    assert cfg["dynamic_batching"]["preferred_batch_size"] == [] and cfg["dynamic_batching"]["max_queue_delay_microseconds"] == 0
    add = client.get_model_config("add")
    assert add["max_batch_size"] == 0 and add["version_policy"] == {"all": {}}
    assert add["instance_group"][0]["count"] == 2 and add["instance_group"][0]["name"] == "add_0"
    assert add["parameters"] == {"note": {"string_value": "versions 1 and 2 add 1 and 2"}}
    for key in ("platform", "backend", "optimization", "model_warmup", "default_model_filename", "batch_input"):
        assert key in add


@pytest.mark.parametrize("binary_in,binary_out", [(False, False), (True, True), (True, False), (False, True)])
def test_infer_matches_onnxruntime(client, mlp_reference, binary_in, binary_out):
    x = np.random.default_rng(1).standard_normal((3, 16)).astype(np.float32)
    inp = httpclient.InferInput("x", [3, 16], "FP32")
    inp.set_data_from_numpy(x, binary_data=binary_in)
    out = httpclient.InferRequestedOutput("probs", binary_data=binary_out)
    res = client.infer("mlp", [inp], outputs=[out], request_id="req-42")
    got = res.as_numpy("probs")
    assert got.dtype == np.float32 and got.shape == (3, 5)
    np.testing.assert_allclose(got, mlp_reference(x), rtol=1e-5, atol=1e-6)
    r = res.get_response()
    assert r["id"] == "req-42" and r["model_name"] == "mlp" and r["model_version"] == "1"
    assert ("parameters" in r["outputs"][0]) == binary_out


def test_async_infer(client, mlp_reference):
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((1 + i % 4, 16)).astype(np.float32) for i in range(24)]
    pending = []
    for x in xs:
        inp = httpclient.InferInput("x", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        pending.append(client.async_infer("mlp", [inp]))
    for x, p in zip(xs, pending):
        np.testing.assert_allclose(p.get_result().as_numpy("probs"), mlp_reference(x), rtol=1e-5, atol=1e-6)


def test_every_datatype_family(client):
    rng = np.random.default_rng(3)
    h = rng.standard_normal((2, 4)).astype(np.float16)
    bf = np.array(rng.standard_normal((2, 4)), dtype=ml_dtypes.bfloat16)
    i = rng.integers(-3_000_000_000, 3_000_000_000, (2, 4), dtype=np.int64)
    f = rng.integers(0, 2, (2, 4)).astype(bool)
    d = rng.standard_normal((2, 4))
    inputs = []
    for name, arr, dt in (("h", h, "FP16"), ("bf", bf, "BF16"), ("i", i, "INT64"), ("f", f, "BOOL"), ("d", d, "FP64")):
        t = httpclient.InferInput(name, list(arr.shape), dt)
        t.set_data_from_numpy(arr, binary_data=dt in ("FP16", "BF16") or name == "i")
        inputs.append(t)
    outs = [httpclient.InferRequestedOutput(n, binary_data=n in ("h2", "fn")) for n in ("h2", "bf_f", "i2", "fn", "d2")]
    res = client.infer("typed", inputs, outputs=outs)
    np.testing.assert_array_equal(res.as_numpy("h2"), h + h)
    np.testing.assert_array_equal(res.as_numpy("bf_f"), bf.astype(np.float32))
    np.testing.assert_array_equal(res.as_numpy("i2"), i * i)
    np.testing.assert_array_equal(res.as_numpy("fn"), ~f)
    np.testing.assert_array_equal(res.as_numpy("d2"), d * 2)
    assert res.as_numpy("fn").dtype == bool and res.as_numpy("i2").dtype == np.int64
    # FP16 output asked for as JSON: refused before running, naming the output and the fix
    outs = [httpclient.InferRequestedOutput("h2", binary_data=False)]
    with pytest.raises(InferenceServerException, match="output 'h2' of model 'typed' has datatype FP16, which is only returned as binary"):
        client.infer("typed", inputs, outputs=outs)
    # BYTES where the model expects FP32
    t = httpclient.InferInput("x", [1, 16], "BYTES")
    t.set_data_from_numpy(np.array([[b"a"] * 16], dtype=np.object_))
    with pytest.raises(InferenceServerException, match="data-type is 'BYTES', but model 'mlp' expects 'FP32'"):
        client.infer("mlp", [t])


def test_output_subset_versions_and_binary_parameter(main_server):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.full((2, 3), 10, np.float32)
    req = {"id": "v", "inputs": [{"name": "a", "shape": [2, 3], "datatype": "FP32", "data": a.tolist()},
                                 {"name": "b", "shape": [2, 3], "datatype": "FP32", "data": b.flatten().tolist()}],
           "outputs": [{"name": "diff"}]}
    for version, offset in (("1", 1), ("2", 2)):
        status, body = main_server.json("POST", f"/v2/models/add/versions/{version}/infer", req)
        assert status == 200, body
        assert body["model_version"] == version and [o["name"] for o in body["outputs"]] == ["diff"]
        assert body["outputs"][0]["data"] == (a - b).flatten().tolist()
        req2 = dict(req, outputs=[{"name": "sum"}])
        status, body = main_server.json("POST", f"/v2/models/add/versions/{version}/infer", req2)
        assert body["outputs"][0]["data"] == (a + b + offset).flatten().tolist()
    # unversioned: the highest version; all outputs binary through binary_data_output
    req3 = {"parameters": {"binary_data_output": True}, "inputs": req["inputs"]}
    status, headers, data = main_server.request("POST", "/v2/models/add/infer", json.dumps(req3))
    assert status == 200 and headers["content-type"] == "application/octet-stream"
    hlen = int(headers["inference-header-content-length"])
    head = json.loads(data[:hlen])
    assert head["model_version"] == "2" and [o["parameters"]["binary_data_size"] for o in head["outputs"]] == [24, 24]
    np.testing.assert_array_equal(np.frombuffer(data[hlen:hlen + 24], np.float32).reshape(2, 3), a + b + 2)
    np.testing.assert_array_equal(np.frombuffer(data[hlen + 24:], np.float32).reshape(2, 3), a - b)


def test_raw_binary_and_compressed_bodies(main_server, mlp_reference):
    x = np.random.default_rng(4).standard_normal((1, 16)).astype(np.float32)
    # Inference-Header-Content-Length: 0 -> the body is the single input (batch 1)
    status, headers, data = main_server.request("POST", "/v2/models/mlp/infer", x.tobytes(),
                                                {"Inference-Header-Content-Length": "0"})
    assert status == 200
    hlen = int(headers["inference-header-content-length"])
    np.testing.assert_allclose(np.frombuffer(data[hlen:], np.float32).reshape(1, 5), mlp_reference(x), rtol=1e-5, atol=1e-6)
    req = json.dumps({"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32", "data": x.flatten().tolist()}]}).encode()
    for enc, body in (("gzip", gzip.compress(req)), ("deflate", zlib.compress(req))):
        status, _, data = main_server.request("POST", "/v2/models/mlp/infer", body, {"Content-Encoding": enc})
        assert status == 200, data
        np.testing.assert_allclose(np.array(json.loads(data)["outputs"][0]["data"], np.float32).reshape(1, 5),
                                   mlp_reference(x), rtol=1e-5, atol=1e-6)
    status, _, data = main_server.request("POST", "/v2/models/mlp/infer", b"not gzip", {"Content-Encoding": "gzip"})
    assert status == 400 and "not valid gzip data" in json.loads(data)["error"]


def test_statistics_and_metrics(start_server, main_repo):
    s = start_server(main_repo)
    c = httpclient.InferenceServerClient(s.url)
    stats = c.get_inference_statistics("mlp")["model_stats"]
    assert len(stats) == 1
    st = stats[0]
    zero = {"count": 0, "ns": 0}
    assert st["name"] == "mlp" and st["version"] == "1" and st["last_inference"] == 0
    assert st["inference_count"] == 0 and st["execution_count"] == 0 and st["batch_stats"] == []
    assert set(st["inference_stats"]) == {"success", "fail", "queue", "compute_input", "compute_infer", "compute_output",
                                          "cache_hit", "cache_miss"}
    assert all(v == zero for v in st["inference_stats"].values())
    assert st["memory_usage"][0]["type"] == "CPU" and st["memory_usage"][0]["byte_size"] > 0
    batches = [1, 3, 3, 4]
    for n in batches:
        t = httpclient.InferInput("x", [n, 16], "FP32")
        t.set_data_from_numpy(np.ones((n, 16), np.float32))
        c.infer("mlp", [t])
    bad = httpclient.InferInput("x", [5, 16], "FP32")  # above max_batch_size 4
    bad.set_data_from_numpy(np.ones((5, 16), np.float32))
    with pytest.raises(InferenceServerException, match=r"batch-size 5 for input 'x' must be in \[1, 4\]"):
        c.infer("mlp", [bad])
    st = c.get_inference_statistics("mlp", "1")["model_stats"][0]
    i = st["inference_stats"]
    assert i["success"]["count"] == 4 and i["fail"]["count"] == 1
    assert st["execution_count"] == 4 and st["inference_count"] == sum(batches)
    for k in ("queue", "compute_input", "compute_infer", "compute_output"):
        assert i[k]["count"] == 4 and i[k]["ns"] > 0
    assert i["success"]["ns"] >= i["compute_infer"]["ns"]
    assert {b["batch_size"]: b["compute_infer"]["count"] for b in st["batch_stats"]} == {1: 1, 3: 2, 4: 1}
    assert st["last_inference"] > 1_600_000_000_000
    everything = c.get_inference_statistics()["model_stats"]
    assert sorted((m["name"], m["version"]) for m in everything) == [("add", "1"), ("add", "2"), ("mlp", "1"), ("typed", "1")]
    status, body = s.json("GET", "/v2/models/nope/stats")
    assert status == 404 and "nope" in body["error"]
    text = s.metrics()
    assert 'nv_inference_request_success{model="mlp",version="1"} 4' in text
    assert 'nv_inference_request_failure{model="mlp",reason="OTHER",version="1"} 1' in text
    assert f'nv_inference_count{{model="mlp",version="1"}} {sum(batches)}' in text
    assert 'nv_inference_exec_count{model="mlp",version="1"} 4' in text
    assert 'nv_inference_pending_request_count{model="mlp",version="1"} 0' in text
    assert 'nv_inference_request_success{model="add",version="2"} 0' in text
    for fam in ("request_duration_us", "queue_duration_us", "compute_input_duration_us", "compute_infer_duration_us",
                "compute_output_duration_us"):
        assert f"# TYPE nv_inference_{fam} counter" in text
        line = next(l for l in text.splitlines() if l.startswith(f'nv_inference_{fam}{{model="mlp"'))
        assert int(line.split()[-1]) >= 0
    status, _, _ = s.request("GET", "/nope", port=s.metrics_port)
    assert status == 404
    c.close()
