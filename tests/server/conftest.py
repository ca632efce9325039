"""Fixtures for the server tests: generated ONNX models written into a Triton-layout repository in a tmp dir, and
the real cinfer-server binary started on free loopback ports, waited for, and stopped with SIGTERM (exit 0)."""
import http.client
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "python"))
from free_ports import free_ports  # noqa: E402
sys.path.insert(0, str(ROOT / "tests" / "models"))
import builders  # noqa: E402

SERVER = os.environ.get("CINFER_SERVER", str(ROOT / "build" / "cinfer-server"))
OPSET = 18


def _model(name, nodes, inputs, outputs, inits=None):
    g = helper.make_graph(nodes, name, inputs, outputs,
                          [numpy_helper.from_array(a, n) for n, a in (inits or {}).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="cinfer-server-tests")
    m.ir_version = 9
    return m


def mlp_model():
    """The builders' MLP at a small size: x [batch, 16] FP32 -> probs [batch, 5]."""
    model, _ = builders.mlp(np.random.default_rng(7), features=16, hidden=(32,), classes=5)
    return model


def typed_model():
    """One input and output per datatype family, all with a dynamic first dim (batched by auto-completion):
    h FP16 -> h2 = h + h; bf BF16 -> bf_f = float(bf); i INT64 -> i2 = i * i; f BOOL -> fn = not f; d FP64 -> d2 = d * 2."""
    V = helper.make_tensor_value_info
    nodes = [helper.make_node("Add", ["h", "h"], ["h2"]), helper.make_node("Cast", ["bf"], ["bf_f"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["i", "i"], ["i2"]), helper.make_node("Not", ["f"], ["fn"]),
             helper.make_node("Mul", ["d", "two"], ["d2"])]
    return _model("typed", nodes,
                  [V("h", TensorProto.FLOAT16, ["n", 4]), V("bf", TensorProto.BFLOAT16, ["n", 4]),
                   V("i", TensorProto.INT64, ["n", 4]), V("f", TensorProto.BOOL, ["n", 4]), V("d", TensorProto.DOUBLE, ["n", 4])],
                  [V("h2", TensorProto.FLOAT16, ["n", 4]), V("bf_f", TensorProto.FLOAT, ["n", 4]),
                   V("i2", TensorProto.INT64, ["n", 4]), V("fn", TensorProto.BOOL, ["n", 4]), V("d2", TensorProto.DOUBLE, ["n", 4])],
                  {"two": np.array(2.0, np.float64)})


def add_model(offset):
    """Fixed shapes, no batching: a [2, 3] FP32 + b [2, 3] FP32 + offset -> sum; a - b -> diff. The offset tells versions apart."""
    V = helper.make_tensor_value_info
    nodes = [helper.make_node("Add", ["a", "b"], ["s0"]), helper.make_node("Add", ["s0", "off"], ["sum"]),
             helper.make_node("Sub", ["a", "b"], ["diff"])]
    return _model("add", nodes, [V("a", TensorProto.FLOAT, [2, 3]), V("b", TensorProto.FLOAT, [2, 3])],
                  [V("sum", TensorProto.FLOAT, [2, 3]), V("diff", TensorProto.FLOAT, [2, 3])],
                  {"off": np.array(float(offset), np.float32)})


def slow_model(layers=32, size=512):
    """x [batch, size] FP32 through `layers` MatMul+Tanh layers: slow enough (tens of ms) to keep requests in flight."""
    rng = np.random.default_rng(3)
    nodes, inits, x = [], {}, "x"
    for i in range(layers):
        inits[f"w{i}"] = (rng.standard_normal((size, size)) / np.sqrt(size)).astype(np.float32)
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]), helper.make_node("Tanh", [f"m{i}"], [f"t{i}"])]
        x = f"t{i}"
    nodes.append(helper.make_node("Identity", [x], ["y"]))
    V = helper.make_tensor_value_info
    return _model("slow", nodes, [V("x", TensorProto.FLOAT, ["batch", size])], [V("y", TensorProto.FLOAT, ["batch", size])], inits)


def broken_model():
    """A model using an op cinfer does not implement, so loading fails with a reason naming it."""
    V = helper.make_tensor_value_info
    return _model("broken", [helper.make_node("NotAnOp", ["x"], ["y"], domain="com.example")],
                  [V("x", TensorProto.FLOAT, [1])], [V("y", TensorProto.FLOAT, [1])])


ADD_CONFIG = """
# two fixed-shape inputs, no batching
name: "add"
platform: "onnxruntime_onnx"
max_batch_size: 0
input [
  { name: "a", data_type: TYPE_FP32, dims: [ 2, 3 ] },
  { name: "b", data_type: TYPE_FP32, dims: [ 2, 3 ] }
]
output [
  { name: "sum", data_type: TYPE_FP32, dims: [ 2, 3 ] },
  { name: "diff", data_type: TYPE_FP32, dims: [ 2, 3 ] }
]
instance_group [ { kind: KIND_CPU, count: 2 } ]
version_policy: { all { } }
parameters { key: "note" value { string_value: "versions 1 and 2 add 1 and 2" } }
"""


def write_model(repo, name, versions, config=None):
    """versions: {version number: ModelProto or raw bytes}."""
    d = pathlib.Path(repo) / name
    d.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (d / "config.pbtxt").write_text(config)
    for v, m in versions.items():
        (d / str(v)).mkdir(exist_ok=True)
        path = d / str(v) / "model.onnx"
        if isinstance(m, bytes):
            path.write_bytes(m)
        else:
            onnx.save(m, str(path))
    return d


def server_env():
    """The server's environment. Under the sanitizer build (ctest preloads ASan into Python with detect_leaks=0, as
    Python's own allocations are not ours) the server gets LeakSanitizer back, with tests/server/lsan.supp: a leak
    then fails the test through the server's exit status (1) and its report in the log."""
    env = dict(os.environ)
    asan = env.get("ASAN_OPTIONS", "")
    if "detect_leaks=0" in asan:
        env["ASAN_OPTIONS"] = asan.replace("detect_leaks=0", "detect_leaks=1")
        env.setdefault("LSAN_OPTIONS", f"suppressions={ROOT / 'tests' / 'server' / 'lsan.supp'}:print_suppressions=0")
    return env


class Server:
    """A running cinfer-server process on loopback."""

    def __init__(self, repo, args=(), wait_ready=True):
        self.repo = repo
        self.port, self.metrics_port = free_ports(2)
        self.url = f"127.0.0.1:{self.port}"
        self.log_path = pathlib.Path(repo).parent / f"server-{self.port}.log"
        self.log = open(self.log_path, "w")
        cmd = [SERVER, "--model-repository", str(repo), "--http-port", str(self.port), "--metrics-port",
               str(self.metrics_port), "--threads", "1", *args]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=server_env())
        self._wait("/v2/health/ready" if wait_ready else "/v2/health/live")

    def _wait(self, path, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            assert self.proc.poll() is None, f"server exited with {self.proc.returncode}:\n{self.logs()}"
            try:
                if self.request("GET", path)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"server not answering {path} within {timeout}s:\n{self.logs()}")

    def logs(self):
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_text()

    def request(self, method, path, body=None, headers=None, port=None, timeout=60):
        """Raw HTTP: returns (status, headers dict, body bytes)."""
        c = http.client.HTTPConnection("127.0.0.1", port or self.port, timeout=timeout)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            c.close()

    def json(self, method, path, body=None, headers=None):
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        status, _, data = self.request(method, path, body, headers)
        return status, (json.loads(data) if data else None)

    def metrics(self):
        status, _, data = self.request("GET", "/metrics", port=self.metrics_port)
        assert status == 200
        return data.decode()

    def stop(self, timeout=60):
        """SIGTERM, then the exit status (the test fails when it is not 0)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"server did not stop within {timeout}s after SIGTERM:\n{self.logs()}")
        self.log.close()
        return self.proc.returncode


@pytest.fixture
def start_server():
    """start_server(repo, *args, wait_ready=True) -> Server; every server is stopped at the end and must exit 0."""
    servers = []

    def start(repo, *args, wait_ready=True):
        s = Server(repo, args, wait_ready)
        servers.append(s)
        return s

    yield start
    for s in servers:
        rc = s.stop()
        assert rc == 0, f"server exit status {rc} after SIGTERM:\n{s.logs()}"


@pytest.fixture(scope="module")
def main_repo(tmp_path_factory):
    """mlp (auto-completed, batched), typed (every datatype family), add (config.pbtxt, versions 1 and 2)."""
    repo = tmp_path_factory.mktemp("repo") / "models"
    write_model(repo, "mlp", {1: mlp_model()})
    write_model(repo, "typed", {1: typed_model()})
    write_model(repo, "add", {1: add_model(1), 2: add_model(2)}, ADD_CONFIG)
    return repo


@pytest.fixture(scope="module")
def main_server(main_repo):
    s = Server(main_repo)
    yield s
    rc = s.stop()
    assert rc == 0, f"server exit status {rc} after SIGTERM:\n{s.logs()}"
