"""System shared memory (Triton's extension) through tritonclient.http and tritonclient.utils.shared_memory: register,
status, unregister; inputs read from and outputs written to regions (offsets, mixed with binary outputs); the error
cases (each a 400/404/405 naming the region, input or output); and regions unregistered while requests that use
them are still queued (the region must outlive the registration); objects shrunk by their owner under a registered
region (a 400 naming it, never a crash)."""
import json
import os
import re
import threading
import time

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from conftest import mlp_model, slow_model, write_model

TAG = f"cinfer_test_{os.getpid()}"


@pytest.fixture
def regions():
    """regions(name, byte_size) -> handle of a new POSIX shm object with key /<TAG>_<name>; all destroyed at the end."""
    made = []

    def make(name, byte_size):
        h = shm.create_shared_memory_region(name, f"/{TAG}_{name}", byte_size)
        made.append(h)
        return h

    yield make
    for h in made:
        shm.destroy_shared_memory_region(h)


@pytest.fixture
def client(main_server):
    c = httpclient.InferenceServerClient(main_server.url)
    c.unregister_system_shared_memory()
    yield c
    c.unregister_system_shared_memory()
    c.close()


@pytest.fixture(scope="module")
def mlp_reference():
    sess = ort.InferenceSession(mlp_model().SerializeToString(), providers=["CPUExecutionProvider"])
    return lambda x: sess.run(None, {"x": x})[0]


def test_extension_listed(client):
    assert "system_shared_memory" in client.get_server_metadata()["extensions"]


def test_register_status_unregister(client, regions):
    regions("a", 1024)
    regions("b", 8192)
    assert client.get_system_shared_memory_status() == []
    client.register_system_shared_memory("ra", f"/{TAG}_a", 1024)
    client.register_system_shared_memory("rb", f"/{TAG}_b", 4000, offset=100)
    client.register_system_shared_memory("rb2", f"/{TAG}_b", 8192)  # one key, two regions
    assert client.get_system_shared_memory_status() == [
        {"name": "ra", "key": f"/{TAG}_a", "offset": 0, "byte_size": 1024},
        {"name": "rb", "key": f"/{TAG}_b", "offset": 100, "byte_size": 4000},
        {"name": "rb2", "key": f"/{TAG}_b", "offset": 0, "byte_size": 8192}]
    assert client.get_system_shared_memory_status("rb") == [{"name": "rb", "key": f"/{TAG}_b", "offset": 100, "byte_size": 4000}]
    client.unregister_system_shared_memory("rb")
    client.unregister_system_shared_memory("never-registered")  # not an error, as in Triton
    assert [r["name"] for r in client.get_system_shared_memory_status()] == ["ra", "rb2"]
    client.unregister_system_shared_memory()
    assert client.get_system_shared_memory_status() == []
    client.register_system_shared_memory("ra", f"/{TAG}_a", 512)  # the name is free again
    assert client.get_system_shared_memory_status("ra")[0]["byte_size"] == 512


def test_infer_input_and_output_in_shared_memory(client, regions, mlp_reference):
    x = np.random.default_rng(11).standard_normal((3, 16)).astype(np.float32)
    hin, hout = regions("in", x.nbytes), regions("out", 3 * 5 * 4)
    shm.set_shared_memory_region(hin, [x])
    client.register_system_shared_memory("in", f"/{TAG}_in", x.nbytes)
    client.register_system_shared_memory("out", f"/{TAG}_out", 60)
    inp = httpclient.InferInput("x", [3, 16], "FP32")
    inp.set_shared_memory("in", x.nbytes)
    out = httpclient.InferRequestedOutput("probs")
    out.set_shared_memory("out", 60)
    res = client.infer("mlp", [inp], outputs=[out])
    # the response names the output without data (Triton's way); the data is in the region
    assert res.get_response()["outputs"] == [{"name": "probs", "datatype": "FP32", "shape": [3, 5]}]
    got = shm.get_contents_as_numpy(hout, np.float32, [3, 5])
    np.testing.assert_allclose(got, mlp_reference(x), rtol=1e-5, atol=1e-6)
    # the same input through the socket gives the same bytes
    inp2 = httpclient.InferInput("x", [3, 16], "FP32")
    inp2.set_data_from_numpy(x)
    np.testing.assert_array_equal(client.infer("mlp", [inp2]).as_numpy("probs"), got)


def test_offsets_unaligned_and_mixed_outputs(client, regions):
    """Two inputs at odd offsets of one region registered at a non-page offset; one output into shared memory at an
    offset, the other returned as binary in the response."""
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.full((2, 3), 0.5, np.float32)
    h = regions("ab", 5000)
    shm.set_shared_memory_region(h, [a], offset=4096 + 3)
    shm.set_shared_memory_region(h, [b], offset=4096 + 3 + 24 + 5)
    client.register_system_shared_memory("ab", f"/{TAG}_ab", 900, offset=4096)  # region = bytes 4096..4995
    hout = regions("sum", 100)
    client.register_system_shared_memory("sum", f"/{TAG}_sum", 90, offset=10)
    ia = httpclient.InferInput("a", [2, 3], "FP32").set_shared_memory("ab", 24, offset=3)
    ib = httpclient.InferInput("b", [2, 3], "FP32").set_shared_memory("ab", 24, offset=3 + 24 + 5)
    osum = httpclient.InferRequestedOutput("sum")
    osum.set_shared_memory("sum", 24, offset=7)
    odiff = httpclient.InferRequestedOutput("diff", binary_data=True)
    res = client.infer("add", [ia, ib], outputs=[osum, odiff], model_version="2")
    np.testing.assert_array_equal(shm.get_contents_as_numpy(hout, np.float32, [2, 3], offset=10 + 7), a + b + 2)
    np.testing.assert_array_equal(res.as_numpy("diff"), a - b)
    outs = res.get_response()["outputs"]
    assert outs[0] == {"name": "sum", "datatype": "FP32", "shape": [2, 3]}
    assert outs[1]["parameters"] == {"binary_data_size": 24}


def _post_infer(server, model, inputs, outputs=None):
    body = {"inputs": inputs}
    if outputs is not None:
        body["outputs"] = outputs
    return server.json("POST", f"/v2/models/{model}/infer", body)


def X_SHM(region, size=64, offset=None, **extra):
    params = {"shared_memory_region": region, "shared_memory_byte_size": size}
    if offset is not None:
        params["shared_memory_offset"] = offset
    return {"name": "x", "shape": [1, 16], "datatype": "FP32", "parameters": params, **extra}


def test_infer_errors(main_server, client, regions):
    regions("err", 256)
    client.register_system_shared_memory("err", f"/{TAG}_err", 128)
    out_ok = [{"name": "probs", "parameters": {"shared_memory_region": "err", "shared_memory_byte_size": 20}}]
    cases = [
        ([X_SHM("nope")], None, "input 'x': unable to find system shared memory region 'nope'"),
        ([X_SHM("err", 64, offset=100)], None,
         "input 'x': shared_memory_offset 100 + shared_memory_byte_size 64 runs past the end of system shared memory "
         "region 'err', which has 128 bytes"),
        ([X_SHM("err", 64, offset=2**62)], None, "runs past the end of system shared memory region 'err'"),
        ([X_SHM("err", 32)], None, "input 'x': shape [1,16] of FP32 needs 64 bytes but 32 were given"),
        ([X_SHM("err", 64, data=[0.0] * 16)], None, "input 'x' has shared_memory_region and also 'data'"),
        ([{"name": "x", "shape": [1, 16], "datatype": "FP32", "parameters": {"shared_memory_region": "err"}}], None,
         "input 'x': shared_memory_region 'err' needs shared_memory_byte_size"),
        ([{"name": "x", "shape": [1, 16], "datatype": "FP32", "data": [0.0] * 16, "parameters": {"shared_memory_byte_size": 64}}],
         None, "input 'x': shared_memory_byte_size is given without shared_memory_region"),
        ([X_SHM("err", 64, offset=-1)], None, "input 'x': shared_memory_offset must be a non-negative integer"),
        ([dict(X_SHM("err"), parameters={"shared_memory_region": "err", "shared_memory_byte_size": 64,
                                          "shared_memory_size": 1})], None, "input 'x': unknown parameter 'shared_memory_size'"),
        ([X_SHM("err")], [{"name": "probs", "parameters": {"shared_memory_region": "err", "shared_memory_byte_size": 19}}],
         "output 'probs' of model 'mlp' needs 20 bytes but its shared_memory_byte_size is 19"),
        ([X_SHM("err")], [{"name": "probs", "parameters": {"shared_memory_region": "nope", "shared_memory_byte_size": 20}}],
         "output 'probs': unable to find system shared memory region 'nope'"),
        ([X_SHM("err")], [{"name": "probs", "parameters": {"shared_memory_region": "err", "shared_memory_byte_size": 20,
                                                           "shared_memory_offset": 120}}],
         "output 'probs': shared_memory_offset 120 + shared_memory_byte_size 20 runs past the end"),
        ([X_SHM("err")], [{"name": "probs", "parameters": {"shared_memory_region": "err", "shared_memory_byte_size": 20,
                                                           "binary_data": True}}],
         "output 'probs' sets both shared_memory_region and binary_data: true"),
    ]
    for inputs, outputs, text in cases:
        status, body = _post_infer(main_server, "mlp", inputs, outputs)
        assert status == 400 and text in body["error"], (inputs, outputs, body)
    # the valid form of the same request works on the same server
    status, body = _post_infer(main_server, "mlp", [X_SHM("err")], out_ok)
    assert status == 200 and body["outputs"] == [{"name": "probs", "datatype": "FP32", "shape": [1, 5]}], body
    # failures are counted against the model, as any other failed request
    stats = client.get_inference_statistics("mlp")["model_stats"][0]["inference_stats"]
    assert stats["fail"]["count"] >= len(cases)


def test_region_errors(main_server, client, regions):
    regions("reg", 4096)
    key = f"/{TAG}_reg"
    client.register_system_shared_memory("reg", key, 4096)
    expect = [
        ("/v2/systemsharedmemory/region/reg/register", {"key": key, "byte_size": 16}, 400,
         "system shared memory region 'reg' is already registered"),
        ("/v2/systemsharedmemory/region/r2/register", {"key": f"/{TAG}_missing", "byte_size": 16}, 400,
         f"system shared memory region 'r2': cannot open shared memory key '/{TAG}_missing': No such file or directory"),
        ("/v2/systemsharedmemory/region/r2/register", {"key": key, "offset": 4000, "byte_size": 100}, 400,
         f"offset 4000 + byte_size 100 = 4100 runs past the end of key '{key}', which has 4096 bytes"),
        ("/v2/systemsharedmemory/region/r2/register", {"key": key, "byte_size": 0}, 400, "byte_size must be at least 1"),
        ("/v2/systemsharedmemory/region/r2/register", {"byte_size": 16}, 400, "needs 'key', a string"),
        ("/v2/systemsharedmemory/region/r2/register", {"key": key}, 400, "needs 'byte_size', a non-negative integer"),
        ("/v2/systemsharedmemory/region/r2/register", {"key": key, "byte_size": 16, "offset": "0"}, 400,
         "'offset' must be a non-negative integer"),
        ("/v2/systemsharedmemory/register", {"key": key, "byte_size": 16}, 400, "needs a region name"),
        ("/v2/systemsharedmemory/region/r2/status", None, 405, "method POST is not allowed"),
        ("/v2/systemsharedmemory/region/r2/frobnicate", None, 404, "no such route"),
    ]
    for path, body, code, text in expect:
        status, got = main_server.json("POST", path, body)
        assert status == code and text in got["error"], (path, got)
    status, got = main_server.json("GET", "/v2/systemsharedmemory/region/reg/register")
    assert status == 405 and "use POST" in got["error"]
    status, got = main_server.json("GET", "/v2/systemsharedmemory/region/r2/status")
    assert status == 404 and got["error"] == "Unable to find system shared memory region: 'r2'"
    with pytest.raises(InferenceServerException, match="Unable to find system shared memory region: 'r2'"):
        client.get_system_shared_memory_status("r2")
    assert [r["name"] for r in client.get_system_shared_memory_status()] == ["reg"]  # failures registered nothing


def _pending(server, model):
    m = re.search(rf'^nv_inference_pending_request_count{{model="{model}",version="1"}} (\d+)', server.metrics(), re.M)
    return int(m.group(1)) if m else 0


def test_unregister_while_requests_are_queued(tmp_path, start_server):
    """Requests reading and writing a region are queued behind a slow model; the client unregisters every region
    (and re-registers the names elsewhere) while they wait. Each request must still write its output into the
    original object (its input was read when it was accepted): had the server closed it, they would write nowhere."""
    model = slow_model(layers=48)
    repo = tmp_path / "models"
    write_model(repo, "slow", {1: model})
    server = start_server(repo)
    client = httpclient.InferenceServerClient(server.url)
    n, batch, width = 12, 4, 512
    row = batch * width * 4
    x = np.random.default_rng(5).standard_normal((batch, width)).astype(np.float32)
    hin = shm.create_shared_memory_region("in", f"/{TAG}_qin", row)
    hout = shm.create_shared_memory_region("out", f"/{TAG}_qout", n * row)
    hother = shm.create_shared_memory_region("other", f"/{TAG}_qother", 64)
    try:
        shm.set_shared_memory_region(hin, [x])
        client.register_system_shared_memory("in", f"/{TAG}_qin", row)
        client.register_system_shared_memory("out", f"/{TAG}_qout", n * row)
        body = lambda i: {"inputs": [{"name": "x", "shape": [batch, width], "datatype": "FP32",
                                      "parameters": {"shared_memory_region": "in", "shared_memory_byte_size": row}}],
                          "outputs": [{"name": "y", "parameters": {"shared_memory_region": "out", "shared_memory_byte_size": row,
                                                                   "shared_memory_offset": i * row}}]}
        results = [None] * n
        def send(i):
            results[i] = server.json("POST", "/v2/models/slow/infer", body(i))
        threads = [threading.Thread(target=send, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        # wait until every request is parsed and queued (or done): success count first, then pending, so a request
        # finishing between the two reads is counted in neither and the loop goes on
        deadline = time.time() + 30
        while time.time() < deadline:
            done = client.get_inference_statistics("slow")["model_stats"][0]["inference_stats"]["success"]["count"]
            if done + _pending(server, "slow") >= n:
                break
            time.sleep(0.002)
        client.unregister_system_shared_memory()
        still_pending = _pending(server, "slow")
        # the names are free at once, even while the old regions are in use
        assert client.get_system_shared_memory_status() == []
        client.register_system_shared_memory("in", f"/{TAG}_qother", 64)
        client.register_system_shared_memory("out", f"/{TAG}_qother", 64)
        for t in threads:
            t.join(60)
        assert still_pending >= 1, "every request had finished before the unregister: the test proved nothing"
        for i, (status, resp) in enumerate(results):
            assert status == 200, (i, resp)
            assert resp["outputs"] == [{"name": "y", "datatype": "FP32", "shape": [batch, width]}]
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        for i in range(n):
            np.testing.assert_allclose(shm.get_contents_as_numpy(hout, np.float32, [batch, width], offset=i * row), want,
                                       rtol=1e-4, atol=1e-5)
        # the re-registered names point at the new key, the old requests did not touch it
        assert client.get_system_shared_memory_status("in") == [{"name": "in", "key": f"/{TAG}_qother", "offset": 0, "byte_size": 64}]
        assert not shm.get_contents_as_numpy(hother, np.uint8, [64]).any()
        client.unregister_system_shared_memory()
    finally:
        for h in (hin, hout, hother):
            shm.destroy_shared_memory_region(h)
        client.close()


def _shrink(key, size):
    """What a client that owns the object can do at any time: ftruncate it (POSIX shm objects live in /dev/shm)."""
    os.truncate(f"/dev/shm/{key.lstrip('/')}", size)


def test_truncated_region_is_a_400_not_a_crash(main_server, client, regions, mlp_reference):
    """The owner shrinks the object under a registered input or output region: the server used to map regions and
    died of SIGBUS on the next inference. Now the request is refused with a 400 naming the region and the bytes it
    holds, the server stays up, and once the object is grown back the same region works again."""
    x = np.random.default_rng(3).standard_normal((1, 16)).astype(np.float32)
    hin, hout = regions("tin", 64), regions("tout", 20)
    shm.set_shared_memory_region(hin, [x])
    client.register_system_shared_memory("tin", f"/{TAG}_tin", 64)
    client.register_system_shared_memory("tout", f"/{TAG}_tout", 20)
    out = [{"name": "probs", "parameters": {"shared_memory_region": "tout", "shared_memory_byte_size": 20}}]

    for size, held in ((0, 0), (40, 40)):
        _shrink(f"/{TAG}_tin", size)
        status, body = _post_infer(main_server, "mlp", [X_SHM("tin")], out)
        assert status == 400, body
        assert f"shared memory region 'tin' holds {held} bytes at offset 0, the input 'x' needs 64" in body["error"], body
        assert main_server.request("GET", "/v2/health/live")[0] == 200
    _shrink(f"/{TAG}_tin", 64)
    shm.set_shared_memory_region(hin, [x])  # the grown pages are new (zeros): the client writes its input again
    status, body = _post_infer(main_server, "mlp", [X_SHM("tin")], out)
    assert status == 200, body
    np.testing.assert_allclose(shm.get_contents_as_numpy(hout, np.float32, [1, 5]), mlp_reference(x), rtol=1e-5, atol=1e-6)

    _shrink(f"/{TAG}_tout", 0)
    status, body = _post_infer(main_server, "mlp", [X_SHM("tin")], out)
    assert status == 400, body
    assert "shared memory region 'tout' holds 0 bytes at offset 0, the output 'probs' needs 20" in body["error"], body
    assert os.stat(f"/dev/shm/{TAG}_tout").st_size == 0  # the refused write did not grow the object back
    assert main_server.request("GET", "/v2/health/live")[0] == 200
    _shrink(f"/{TAG}_tout", 20)
    status, body = _post_infer(main_server, "mlp", [X_SHM("tin")], out)
    assert status == 200, body
    np.testing.assert_allclose(shm.get_contents_as_numpy(hout, np.float32, [1, 5]), mlp_reference(x), rtol=1e-5, atol=1e-6)
