"""Reload under load loses no request: a model reloaded (POST .../load of a loaded model, or a poll-mode rescan that
sees its file change) while clients keep sending inferences. The old version serves until the new one is ready; every
request that looked it up is queued, run and answered by it, including those still parsing their body at the swap;
requests that look the model up after the swap go to the new one (Triton's behaviour).

The model is cheap to run and its requests are large (4 x 32768 FP32 as JSON, ~0.5 MB), so the server's HTTP threads
spend most of their time between looking the model up and queueing the request: the window in which a reload used
to refuse requests with 503 "unloading" (before the fix, about half of the requests sent during these reloads
failed). The versions add different offsets, so every answer says which version computed it."""
import json
import os
import threading
import time

import numpy as np
from onnx import TensorProto, helper

from conftest import _model, write_model

WIDTH = 32768


def offset_model(offset):
    """x [n, WIDTH] FP32 -> y [n, 1] = sum(x, axis 1) + offset."""
    V = helper.make_tensor_value_info
    nodes = [helper.make_node("ReduceSum", ["x", "axes"], ["s"], keepdims=1), helper.make_node("Add", ["s", "off"], ["y"])]
    return _model("wide", nodes, [V("x", TensorProto.FLOAT, ["n", WIDTH])], [V("y", TensorProto.FLOAT, ["n", 1])],
                  {"axes": np.array([1], np.int64), "off": np.array(float(offset), np.float32)})


def requests(count=4):
    """[(JSON body, row sums)]: small integers, so every sum is exact in FP32."""
    out = []
    for i in range(count):
        x = np.random.default_rng(i).integers(-3, 4, (4, WIDTH)).astype(np.float32)
        body = json.dumps({"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}]})
        out.append((body, x.sum(axis=1, dtype=np.float64)))
    return out


class Clients:
    """`n` threads sending inferences to `model` one after another until stop(). Each answer is recorded as
    (sent, status, offset) where offset is which version answered, or (sent, status, error text)."""

    def __init__(self, server, model, n):
        self.server, self.model, self.reqs = server, model, requests()
        self.results, self.lock, self.halt = [], threading.Lock(), threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(k,), daemon=True) for k in range(n)]
        for t in self.threads:
            t.start()

    def run(self, k):
        i = k
        while not self.halt.is_set():
            body, sums = self.reqs[i % len(self.reqs)]
            i += 1
            sent = time.monotonic()
            try:
                status, _, data = self.server.request("POST", f"/v2/models/{self.model}/infer", body, timeout=120)
            except OSError as e:
                status, data = 0, str(e).encode()
            if status == 200:
                y = np.array(json.loads(data)["outputs"][0]["data"], np.float64) - sums
                got = int(round(y[0])) if np.all(y == round(y[0])) else f"wrong answer: offsets {y}"
            else:
                got = data.decode(errors="replace")
            with self.lock:
                self.results.append((sent, status, got))

    def stop(self):
        self.halt.set()
        for t in self.threads:
            t.join(timeout=180)
        return self.results


def assert_no_failures(results, offsets):
    bad = [r for r in results if r[1] != 200 or r[2] not in offsets]
    assert not bad, f"{len(bad)} of {len(results)} requests failed during the reloads, e.g. {bad[:3]}"


def test_reload_under_load_loses_no_request(start_server, tmp_path):
    repo = tmp_path / "models"
    write_model(repo, "wide", {1: offset_model(1)})
    s = start_server(repo, "--model-control-mode", "explicit", "--load-model", "wide", "--http-threads", "8")
    clients = Clients(s, "wide", 16)
    reloads = 12
    try:
        for n in range(reloads):
            offset = 2 if n % 2 == 0 else 1  # every reload changes the answer
            write_model(repo, "wide", {1: offset_model(offset)})
            status, body = s.json("POST", "/v2/repository/models/wide/load")
            assert status == 200, body
            swapped = time.monotonic()
            time.sleep(0.25)
    finally:
        results = clients.stop()
    assert len(results) >= 2 * reloads, f"only {len(results)} requests were sent: too light a load to test anything"
    assert_no_failures(results, (1, 2))
    # a request sent after the last reload returned is answered by the new version
    late = [r[2] for r in results if r[0] > swapped]
    assert late and set(late) == {offset}, f"requests sent after the last reload got offsets {set(late)}, not {offset}"
    assert s.logs().count("loaded model 'wide' version 1") == 1 + reloads


def test_poll_reload_under_load_loses_no_request(start_server, tmp_path):
    repo = tmp_path / "models"
    write_model(repo, "wide", {1: offset_model(1)})
    s = start_server(repo, "--model-control-mode", "poll", "--repository-poll-secs", "1", "--http-threads", "8")
    clients = Clients(s, "wide", 16)
    reloads = 3
    try:
        for n in range(reloads):
            tmp = tmp_path / "model.onnx.tmp"  # written outside the repository and renamed in: a poll never sees half a file
            tmp.write_bytes(offset_model(2 if n % 2 == 0 else 1).SerializeToString())
            os.replace(tmp, repo / "wide" / "1" / "model.onnx")
            deadline = time.time() + 60
            while s.logs().count("loaded model 'wide' version 1") < 2 + n and time.time() < deadline:
                time.sleep(0.05)
            assert time.time() < deadline, f"the poll did not reload the model:\n{s.logs()}"
            time.sleep(0.5)
    finally:
        results = clients.stop()
    assert len(results) >= 2 * reloads, f"only {len(results)} requests were sent"
    assert_no_failures(results, (1, 2))
