"""Failure isolation in the dynamic batcher (docs/server.md "Batch failure isolation"): a request whose Gather index
is out of range, batched with valid ones, makes the engine refuse the whole batch; the server then runs each request
of that batch alone, so only the culprit gets a 400 naming its index, and the others get their correct results.
Counted in instance_stats[].isolation_retries and cinfer_isolation_retries_total, logged once per batch.

Batches form deterministically: preferred_batch_size 9 with a 5 s queue delay sends the batch the moment the ninth
request is queued, and the lone instance is idle until then."""
import threading

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from conftest import OPSET, write_model

V = helper.make_tensor_value_info
ROWS, WIDTH, BATCH = 10, 4, 9
TABLE = np.arange(ROWS * WIDTH, dtype=np.float32).reshape(ROWS, WIDTH) * 0.5 - 3

CONFIG = f"""
name: "lookup"
max_batch_size: 16
input [ {{ name: "idx", data_type: TYPE_INT64, dims: [ 1 ] }} ]
output [ {{ name: "y", data_type: TYPE_FP32, dims: [ 1, {WIDTH} ] }} ]
dynamic_batching {{ preferred_batch_size: [ {BATCH} ] max_queue_delay_microseconds: 5000000 }}
instance_group [ {{ kind: KIND_CPU, count: 1 }} ]
"""


def lookup_model():
    """idx [batch, 1] INT64 -> y = table[idx] [batch, 1, 4]: the index is request data, checked at run time."""
    g = helper.make_graph([helper.make_node("Gather", ["table", "idx"], ["y"], axis=0, name="lookup_rows")], "lookup",
                          [V("idx", TensorProto.INT64, ["b", 1])], [V("y", TensorProto.FLOAT, ["b", 1, WIDTH])],
                          [numpy_helper.from_array(TABLE, "table")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = 9
    return m


def infer(server, index):
    body = {"inputs": [{"name": "idx", "shape": [1, 1], "datatype": "INT64", "data": [index]}]}
    return server.json("POST", "/v2/models/lookup/infer", body)


def send_together(server, indices):
    """One request per index, all at once; returns [(status, body)] in the same order."""
    results = [None] * len(indices)
    start = threading.Barrier(len(indices))

    def send(i):
        start.wait()
        results[i] = infer(server, indices[i])

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(indices))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def instance_stats(server):
    status, body = server.json("GET", "/v2/models/lookup/stats")
    assert status == 200, body
    stats = body["model_stats"][0]
    return stats, stats["instance_stats"][0]


def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + "{") and 'model="lookup"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name} for lookup on the metrics page:\n{text}")


def check_good(status, body, index):
    assert status == 200, (index, body)
    y = np.array(body["outputs"][0]["data"], np.float32).reshape(body["outputs"][0]["shape"])
    np.testing.assert_array_equal(y, TABLE[[index]].reshape(1, 1, WIDTH))


def test_one_bad_index_fails_alone_and_the_rest_of_its_batch_succeeds(start_server, tmp_path):
    repo = tmp_path / "models"
    write_model(repo, "lookup", {1: lookup_model()}, CONFIG)
    s = start_server(repo, "--http-threads", "12")
    stats0, inst0 = instance_stats(s)
    assert inst0["isolation_retries"] == 0

    # 1 bad + 8 good in one batch of 9: 8 answers, 1 400 naming the op, node and index
    indices = [3, 0, 9, 42, -1, 5, 7, -10, 2]
    results = send_together(s, indices)
    for index, (status, body) in zip(indices, results):
        if index == 42:
            assert status == 400, body
            assert "Gather node 'lookup_rows': index 42 is out of range for axis 0 of size 10" in body["error"], body
        else:
            check_good(status, body, index)
    stats1, inst1 = instance_stats(s)
    assert inst1["isolation_retries"] == 1, (inst1, s.logs())
    # the refused batch of 9 is no execution; the 8 good requests then ran alone (one execution each) and the bad one
    # failed alone: no request ran twice, none was answered twice
    assert inst1["execution_count"] - inst0["execution_count"] == 8, inst1
    assert stats1["inference_stats"]["success"]["count"] - stats0["inference_stats"]["success"]["count"] == 8
    assert stats1["inference_stats"]["fail"]["count"] - stats0["inference_stats"]["fail"]["count"] == 1
    assert {b["batch_size"] for b in stats1["batch_stats"]} == {1}, stats1["batch_stats"]
    assert s.logs().count("running each request alone") == 1, s.logs()

    # two culprits in one batch: each gets its own index in its own message
    indices = [1, 10, 2, 3, -11, 4, 5, 6, 8]
    results = send_together(s, indices)
    for index, (status, body) in zip(indices, results):
        if index in (10, -11):
            assert status == 400, body
            assert f"index {index} is out of range for axis 0 of size 10" in body["error"], body
        else:
            check_good(status, body, index)
    _, inst2 = instance_stats(s)
    assert inst2["isolation_retries"] == 2, inst2
    assert metric(s.metrics(), "cinfer_isolation_retries_total") == 2

    # a batch of good requests is one execution of 9, never isolated
    indices = list(range(BATCH))
    for index, (status, body) in zip(indices, send_together(s, indices)):
        check_good(status, body, index)
    stats3, inst3 = instance_stats(s)
    assert inst3["execution_count"] - inst2["execution_count"] == 1 and inst3["isolation_retries"] == 2, inst3
    assert any(b["batch_size"] == BATCH for b in stats3["batch_stats"]), stats3["batch_stats"]
    assert s.logs().count("running each request alone") == 2, s.logs()
