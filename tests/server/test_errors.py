"""Malformed and unsupported requests: each gets the right 4xx/5xx status and a JSON {"error"} body whose message
names what is wrong, and the server keeps serving afterwards."""
import json

import numpy as np
import pytest

X = {"name": "x", "shape": [1, 16], "datatype": "FP32", "data": [0.5] * 16}


def infer_body(**kw):
    body = {"inputs": [X]}
    body.update(kw)
    return json.dumps(body)


# (method, path, body, headers, status, text the error message must contain)
CASES = [
    ("GET", "/nope", None, {}, 404, "no such route: /nope"),
    ("GET", "/v2/models/mlp/bogus", None, {}, 404, "no such route"),
    ("GET", "/v2/repository/whatever", None, {}, 404, "no such route"),
    ("DELETE", "/v2/models/mlp", None, {}, 405, "method DELETE is not allowed"),
    ("GET", "/v2/models/mlp/infer", None, {}, 405, "use POST"),
    ("GET", "/v2/repository/index", None, {}, 405, "use POST"),
    ("POST", "/v2", "{}", {}, 405, "use GET"),
    ("POST", "/v2/models/nope/infer", infer_body(), {}, 404, "unknown model: 'nope'"),
    ("POST", "/v2/models/mlp/versions/7/infer", infer_body(), {}, 404, "model 'mlp' has no version 7"),
    ("POST", "/v2/models/mlp/versions/abc/infer", infer_body(), {}, 400, "version 'abc' of model 'mlp' is not a version number"),
    ("POST", "/v2/models/mlp/infer", "{", {}, 400, "malformed JSON in the request at line 1"),
    ("POST", "/v2/models/mlp/infer", "", {}, 400, "malformed JSON"),
    ("POST", "/v2/models/mlp/infer", "[1, 2]", {}, 400, "the request must be a JSON object"),
    ("POST", "/v2/models/mlp/infer", json.dumps({"inputs": []}), {}, 400, "non-empty 'inputs' array"),
    ("POST", "/v2/models/mlp/infer", json.dumps({"inputs": [dict(X, name="y")]}), {}, 400,
     "unexpected inference input 'y' for model 'mlp' (its inputs: 'x')"),
    ("POST", "/v2/models/mlp/infer", json.dumps({"inputs": [dict(X, datatype="INT32", data=[1] * 16)]}), {}, 400,
     "inference input 'x' data-type is 'INT32', but model 'mlp' expects 'FP32'"),
    ("POST", "/v2/models/mlp/infer", json.dumps({"inputs": [dict(X, shape=[1, 15], data=[0.5] * 15)]}), {}, 400,
     "unexpected shape for input 'x' for model 'mlp'. Expected [-1,16], got [1,15]"),
    ("POST", "/v2/models/mlp/infer", json.dumps({"inputs": [dict(X, shape=[16], data=[0.5] * 16)]}), {}, 400,
     "Expected [-1,16], got [16]"),
    ("POST", "/v2/models/mlp/infer", json.dumps({"inputs": [dict(X, data=[0.5] * 15)]}), {}, 400,
     "input 'x': shape [1,16] needs 16 elements but 'data' has 15"),
    ("POST", "/v2/models/mlp/infer", json.dumps({"inputs": [dict(X, data=["a"] * 16)]}), {}, 400,
     "input 'x': data element 0 must be a number for datatype FP32"),
    ("POST", "/v2/models/mlp/infer", json.dumps({"inputs": [dict(X, datatype="FP99")]}), {}, 400, "unknown datatype 'FP99'"),
    ("POST", "/v2/models/mlp/infer", json.dumps({"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32"}]}), {}, 400,
     "input 'x' has neither 'data' nor a binary_data_size parameter"),
    ("POST", "/v2/models/mlp/infer", json.dumps({"inputs": [dict(X, shape="1,16")]}), {}, 400, "'shape' must be an array"),
    ("POST", "/v2/models/mlp/infer", json.dumps({"inputs": [dict(X, shape=[1, -16])]}), {}, 400, "shape[1] must be a non-negative"),
    ("POST", "/v2/models/mlp/infer", json.dumps({"inputs": [X, X]}), {}, 400, "input 'x' is given twice"),
    ("POST", "/v2/models/mlp/infer", infer_body(outputs=[{"name": "nope"}]), {}, 400,
     "unexpected inference output 'nope' for model 'mlp'"),
    ("POST", "/v2/models/mlp/infer", infer_body(id=5), {}, 400, "request 'id' must be a string"),
    ("POST", "/v2/models/mlp/infer", infer_body(parameters={"sequence_id": 3, "sequence_start": True}), {}, 400,
     "sequence batching is not supported"),
    ("POST", "/v2/models/mlp/infer", infer_body(parameters={"triton_enable_empty_final_response": True}), {}, 400,
     "request parameter 'triton_enable_empty_final_response' is reserved"),
    ("POST", "/v2/models/mlp/infer", infer_body(parameters={"priority": -1}), {}, 400, "'priority' must be a non-negative integer"),
    ("POST", "/v2/models/mlp/infer", infer_body(parameters={"binary_data_output": "yes"}), {}, 400, "must be a boolean"),
    ("POST", "/v2/models/mlp/infer", infer_body(parameters={"shared_memory_region": "r"}), {}, 400,
     "request parameter 'shared_memory_region' belongs in the parameters of an input or a requested output"),
    ("POST", "/v2/models/mlp/infer", json.dumps({"inputs": [dict(X, shape=[5, 16], data=[0.5] * 80)]}), {}, 400,
     "inference request batch-size 5 for input 'x' must be in [1, 4] (max_batch_size of model 'mlp')"),
    ("POST", "/v2/models/mlp/infer",
     json.dumps({"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32", "parameters": {"binary_data_size": 64}}]}),
     {}, 400, "has binary_data_size but the request has no Inference-Header-Content-Length header"),
    ("POST", "/v2/models/mlp/infer", infer_body(), {"Inference-Header-Content-Length": "abc"}, 400,
     "Inference-Header-Content-Length 'abc' is not a non-negative integer"),
    ("POST", "/v2/models/mlp/infer", infer_body(), {"Inference-Header-Content-Length": "100000"}, 400,
     "Inference-Header-Content-Length is 100000 but the body has only"),
    ("POST", "/v2/models/mlp/infer", b"\x00" * 63, {"Inference-Header-Content-Length": "0"}, 400,
     "63 bytes is not a whole number of elements of input 'x'"),
    ("POST", "/v2/models/add/infer", b"\x00" * 24, {"Inference-Header-Content-Length": "0"}, 400,
     "needs a model with exactly one input; model 'add' has 2"),
    ("POST", "/v2/models/mlp/infer", infer_body(), {"Content-Encoding": "br"}, 400, "unsupported Content-Encoding 'br'"),
    ("POST", "/v2/models/typed/infer",
     json.dumps({"inputs": [{"name": "h", "shape": [1, 4], "datatype": "FP16", "data": [1, 2, 3, 4]}]}), {}, 400,
     "input 'h': datatype FP16 is only supported as binary data"),
    ("POST", "/v2/models/add/infer",
     json.dumps({"inputs": [{"name": "a", "shape": [2, 3], "datatype": "FP32", "data": [1] * 6}]}), {}, 400,
     "expected 2 inputs but got 1 inputs for model 'add': input 'b' is missing"),
    ("POST", "/v2/models/mlp/infer", infer_body(outputs=[{"name": "probs", "parameters": {"classification": 2}}]), {}, 400,
     "classification extension is not supported"),
    ("POST", "/v2/repository/models/mlp/load", None, {}, 400,
     "explicit model load is not allowed: the server runs with --model-control-mode none"),
    ("POST", "/v2/repository/models/mlp/unload", None, {}, 400, "explicit model unload is not allowed"),
    ("POST", "/v2/repository/index", "{oops", {}, 400, "malformed JSON body"),
    ("GET", "/v2/cudasharedmemory/status", None, {}, 501, "cudasharedmemory is not supported yet"),
]


@pytest.mark.parametrize("method,path,body,headers,status,text", CASES, ids=[f"{c[0]} {c[1]} {c[5][:40]}" for c in CASES])
def test_malformed_request(main_server, method, path, body, headers, status, text):
    got, hdrs, data = main_server.request(method, path, body, headers)
    assert got == status, data
    assert hdrs["content-type"] == "application/json"
    err = json.loads(data)
    assert list(err) == ["error"] and text in err["error"], err
    # still serving, and correctly
    ok, body2 = main_server.json("POST", "/v2/models/mlp/infer", {"inputs": [X]})
    assert ok == 200 and len(body2["outputs"][0]["data"]) == 5


def test_health_failures_have_empty_bodies(start_server, tmp_path):
    from conftest import broken_model, mlp_model, write_model
    repo = tmp_path / "models"
    write_model(repo, "good", {1: mlp_model()})
    write_model(repo, "bad", {1: broken_model()})
    s = start_server(repo, wait_ready=False)  # strict readiness: a failed model keeps the server not ready
    import time
    deadline = time.time() + 30
    while time.time() < deadline and s.json("POST", "/v2/repository/index")[1] in (None, []):
        time.sleep(0.05)
    status, _, body = s.request("GET", "/v2/health/ready")
    assert status == 400 and body == b""
    status, _, body = s.request("GET", "/v2/health/live")
    assert status == 200 and body == b""


def test_body_limit(start_server, main_repo):
    s = start_server(main_repo, "--max-input-bytes", "4096")
    big = json.dumps({"inputs": [dict(X, data=[0.123456789] * 16)], "pad": "x" * 8000})
    status, _, data = s.request("POST", "/v2/models/mlp/infer", big)
    assert status == 413 and "exceeds the limit of 4096 bytes (--max-input-bytes)" in json.loads(data)["error"]
    # decompressed size counts too
    import gzip
    status, _, data = s.request("POST", "/v2/models/mlp/infer", gzip.compress(big.encode()), {"Content-Encoding": "gzip"})
    assert status == 400 and "decompressed request body exceeds the limit of 4096" in json.loads(data)["error"]
    status, body = s.json("POST", "/v2/models/mlp/infer", {"inputs": [X]})
    assert status == 200 and np.isclose(sum(body["outputs"][0]["data"]), 1.0, atol=1e-5)
