"""Requests with very many fields (issue 24, quadratic work): 80,000 requested outputs or inputs used to take one HTTP
thread 17 s because duplicate names were checked pairwise. The checks are linear now; these tests hold the answers
(the first duplicate named, the first unknown output named) at that size and check that the server still answers.
No timing is asserted: bench/server/many_names.py measures the time (bench/BENCHMARKS.md)."""
import json

N = 80_000
X = {"name": "x", "shape": [1, 16], "datatype": "FP32", "data": [0.0] * 16}


def _infer(server, body):
    status, _, data = server.request("POST", "/v2/models/mlp/infer", json.dumps(body).encode(), timeout=120)
    return status, json.loads(data)


def test_many_output_names(main_server):
    names = [f"o{i}" for i in range(N)]
    # entry N-2 repeats o1 before entry N-1 repeats o0: the first duplicate in request order is the one named
    status, body = _infer(main_server, {"inputs": [X], "outputs": [{"name": n} for n in names[:-2] + ["o1", "o0"]]})
    assert status == 400 and body["error"] == "output 'o1' is requested twice", body
    # all distinct: parsed, then refused by binding on the first name the model does not have
    status, body = _infer(main_server, {"inputs": [X], "outputs": [{"name": n} for n in names]})
    assert status == 400 and "unexpected inference output 'o0' for model 'mlp'" in body["error"], body
    assert main_server.request("GET", "/v2/health/live")[0] == 200


def test_many_inputs(main_server):
    inputs = [{"name": f"i{i}", "shape": [1], "datatype": "FP32", "data": [1.0]} for i in range(N)]
    inputs[-1] = dict(inputs[0])
    status, body = _infer(main_server, {"inputs": inputs})
    assert status == 400 and body["error"] == "input 'i0' is given twice", body
    inputs[-1] = dict(inputs[0], name="x")
    status, body = _infer(main_server, {"inputs": inputs})
    assert status == 400 and "unexpected inference input 'i0' for model 'mlp'" in body["error"], body
    assert main_server.request("GET", "/v2/health/live")[0] == 200
