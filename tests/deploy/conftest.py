"""Shared helpers for the operations-kit tests (label deploy): paths of deploy/, the external tools (promtool,
prometheus, hadolint) with CI's rule that a missing tool fails instead of skipping, YAML loading, a tiny model
repository, and the real cinfer-server started on loopback ports (optionally with the fake NVML the server tests
build, so GPU series exist), then stopped with SIGTERM."""
import http.client
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "python"))
from free_ports import free_ports  # noqa: E402

DEPLOY = ROOT / "deploy"
DOCS = ROOT / "docs"
SERVER = os.environ.get("CINFER_SERVER", str(ROOT / "build" / "cinfer-server"))
FAKE_NVML = os.environ.get("CINFER_FAKE_NVML", str(pathlib.Path(SERVER).parent / "fake_nvml" / "libnvidia-ml.so"))
VENV_BIN = pathlib.Path(sys.executable).parent
IN_CI = bool(os.environ.get("CI"))

# Labels Prometheus (or the Prometheus Operator) attaches to every scraped series; not on the server's page.
TARGET_LABELS = {"job", "instance", "namespace", "pod", "container", "service", "endpoint"}


def tool(name):
    """Path of an external tool (the venv's bin first, then PATH). Missing: skip, except under CI (CI set), where the
    test fails: scripts/setup.sh --test installs every one of them."""
    for cand in (VENV_BIN / name, shutil.which(name)):
        if cand and os.access(str(cand), os.X_OK):
            return str(cand)
    msg = f"{name} not found: scripts/setup.sh --test installs it"
    if IN_CI:
        pytest.fail(msg)
    pytest.skip(msg)


def run(cmd, **kw):
    """Runs a command, returns CompletedProcess with text output (never raises on a non-zero status)."""
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)


def load_yaml_docs(path):
    return [d for d in yaml.safe_load_all(pathlib.Path(path).read_text()) if d]


def load_yaml(path):
    docs = load_yaml_docs(path)
    assert len(docs) == 1, f"{path}: expected one YAML document, found {len(docs)}"
    return docs[0]


def dockerfile(path):
    """dockerfile-parse's view of a Dockerfile (any file name)."""
    import io
    from dockerfile_parse import DockerfileParser
    return DockerfileParser(fileobj=io.BytesIO(pathlib.Path(path).read_bytes()))


# ---- a model repository ----

def write_repository(repo):
    """`dense`: x [batch, 8] FP32 -> y = relu(x @ w) [batch, 4], max_batch_size 8, two CPU instances.
    Returns the repository path."""
    rng = np.random.default_rng(11)
    w = rng.standard_normal((8, 4)).astype(np.float32)
    V = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])], "dense",
        [V("x", TensorProto.FLOAT, ["batch", 8])], [V("y", TensorProto.FLOAT, ["batch", 4])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], producer_name="cinfer-deploy-tests")
    model.ir_version = 9
    d = pathlib.Path(repo) / "dense"
    (d / "1").mkdir(parents=True)
    onnx.save(model, str(d / "1" / "model.onnx"))
    (d / "config.pbtxt").write_text(
        'name: "dense"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
        'input [ { name: "x", data_type: TYPE_FP32, dims: [ 8 ] } ]\n'
        'output [ { name: "y", data_type: TYPE_FP32, dims: [ 4 ] } ]\n'
        'instance_group [ { kind: KIND_CPU, count: 2 } ]\n')
    return pathlib.Path(repo)


# ---- the real server ----

def _flag_value(args, flag, default=None):
    return args[args.index(flag) + 1] if flag in args else default


def local_args(args, repo, http_port, metrics_port):
    """A manifest's or image's cinfer-server arguments made runnable here: the repository path, the ports and the
    listen address replaced (loopback only), a CUDA device replaced by the CPU (no GPU on the test machines).
    Everything else is passed as written, so an unknown or malformed flag fails the test."""
    out, i = [], 0
    replace = {"--model-repository": str(repo), "--http-port": str(http_port), "--metrics-port": str(metrics_port),
               "--host": "127.0.0.1"}
    while i < len(args):
        a = args[i]
        if a in replace and i + 1 < len(args):
            out += [a, replace[a]]
            i += 2
        elif a == "--device" and i + 1 < len(args):
            out += [a, "cpu" if args[i + 1].startswith("cuda") else args[i + 1]]
            i += 2
        else:
            out.append(a)
            i += 1
    return out


class Server:
    """cinfer-server started with `args` (flags as a manifest or image passes them; see local_args)."""

    def __init__(self, repo, args, env=None, log_dir=None):
        if not os.path.exists(SERVER):
            pytest.fail(f"cinfer-server not built at {SERVER} (CINFER_SERVER)")
        self.http_port, self.metrics_port = free_ports(2)
        self.args = local_args(list(args), repo, self.http_port, self.metrics_port)
        for flag, default in (("--model-repository", str(repo)), ("--http-port", str(self.http_port)),
                              ("--metrics-port", str(self.metrics_port))):
            if flag not in self.args:
                self.args += [flag, default]
        self.http_port = int(_flag_value(self.args, "--http-port"))
        self.metrics_port = int(_flag_value(self.args, "--metrics-port"))
        self.log_path = pathlib.Path(log_dir or pathlib.Path(repo).parent) / f"server-{self.http_port}.log"
        self.log = open(self.log_path, "w")
        full_env = dict(os.environ)
        full_env.pop("CUDA_VISIBLE_DEVICES", None)
        full_env.update(env or {})
        self.proc = subprocess.Popen([SERVER, *self.args], stdout=self.log, stderr=subprocess.STDOUT, env=full_env)

    def logs(self):
        self.log.flush()
        return self.log_path.read_text()

    def get(self, path, port=None, method="GET", body=None, timeout=30):
        c = http.client.HTTPConnection("127.0.0.1", port or self.http_port, timeout=timeout)
        try:
            c.request(method, path, body=body)
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def wait(self, path="/v2/health/ready", timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            assert self.proc.poll() is None, f"cinfer-server {self.args} exited with {self.proc.returncode}:\n{self.logs()}"
            try:
                if self.get(path)[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"cinfer-server not answering {path} within {timeout}s:\n{self.logs()}")

    def metrics(self):
        status, body = self.get("/metrics", port=self.metrics_port)
        assert status == 200, body
        return body.decode()

    def stop(self, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


@pytest.fixture
def start_server(tmp_path):
    """start_server(args, env=None) -> Server waiting for readiness; every server must exit 0 after SIGTERM."""
    servers = []
    repo = write_repository(tmp_path / "models")

    def start(args=(), env=None, wait="/v2/health/ready"):
        s = Server(repo, args, env, log_dir=tmp_path)
        servers.append(s)
        return s.wait(wait) if wait else s

    yield start
    for s in servers:
        rc = s.stop()
        assert rc == 0, f"cinfer-server exit status {rc} after SIGTERM:\n{s.logs()}"


def fake_nvml():
    if not os.path.exists(FAKE_NVML):
        pytest.fail(f"the fake NVML is not built at {FAKE_NVML} (tests/server/tests.cmake builds fake_nvml)")
    return FAKE_NVML


def infer(server, batch=2, model="dense"):
    import json
    x = (np.arange(batch * 8, dtype=np.float32) / 10).reshape(batch, 8)
    body = json.dumps({"inputs": [{"name": "x", "shape": [batch, 8], "datatype": "FP32", "data": x.ravel().tolist()}]})
    return server.get(f"/v2/models/{model}/infer", method="POST", body=body)
