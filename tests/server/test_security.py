"""Security controls of cinfer-server (docs/security.md): loopback by default, bearer tokens for control and inference
endpoints (401 + WWW-Authenticate + {"error"}; tokens only from files or the environment), request body and element
limits, model names and paths that cannot leave the repository, and range-checked config values."""
import json
import os
import pathlib
import socket
import subprocess

import numpy as np
import onnx
import pytest
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper

from conftest import SERVER, add_model, mlp_model, write_model, ADD_CONFIG

CONTROL = "c" * 8 + "0123456789abcdef-control"
INFER = "i" * 8 + "0123456789abcdef-infer"


def infer_body(batch=1):
    return json.dumps({"inputs": [{"name": "x", "shape": [batch, 16], "datatype": "FP32", "data": [0.5] * (16 * batch)}]})


def bearer(tok):
    return {"Authorization": f"Bearer {tok}"}


@pytest.fixture
def token_files(tmp_path):
    c, i = tmp_path / "control.token", tmp_path / "infer.token"
    c.write_text(CONTROL + "\n")
    i.write_text(INFER + "\n")
    os.chmod(c, 0o600)
    os.chmod(i, 0o600)
    return str(c), str(i)


@pytest.fixture
def repo(tmp_path):
    r = tmp_path / "models"
    write_model(r, "mlp", {1: mlp_model()})
    write_model(r, "add", {1: add_model(1)}, ADD_CONFIG.replace("version_policy: { all { } }", ""))
    return r


def test_listens_on_loopback_by_default(repo, start_server):
    s = start_server(repo)
    # the listening sockets of this process: every one is 127.0.0.1 (0100007F in /proc/net/tcp)
    inodes = set()
    for fd in pathlib.Path(f"/proc/{s.proc.pid}/fd").iterdir():
        try:
            link = os.readlink(fd)
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    listening = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in pathlib.Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:  # state LISTEN
                listening.append(f[1])
    ports = {int(a.split(":")[1], 16) for a in listening}
    assert ports == {s.port, s.metrics_port}, listening
    assert all(a.split(":")[0] == "0100007F" for a in listening), listening
    assert "listening on 127.0.0.1:" in s.logs()


def test_tokens_protect_their_endpoints(repo, token_files, start_server):
    s = start_server(repo, "--model-control-mode", "explicit", "--load-model", "mlp", "--control-token-file", token_files[0],
                     "--inference-token-file", token_files[1])
    # health stays open
    assert s.request("GET", "/v2/health/live")[0] == 200
    assert s.request("GET", "/v2/health/ready")[0] == 200
    # no token: 401, a Bearer challenge without error=, a JSON error naming what is needed
    for method, path, body in [("POST", "/v2/models/mlp/infer", infer_body()), ("GET", "/v2/models/mlp", None),
                               ("GET", "/v2/models/mlp/config", None), ("GET", "/v2/models/mlp/ready", None),
                               ("GET", "/v2/models/stats", None), ("GET", "/v2", None),
                               ("POST", "/v2/repository/index", "{}"), ("POST", "/v2/repository/models/add/load", ""),
                               ("GET", "/v2/systemsharedmemory/status", None)]:
        status, headers, data = s.request(method, path, body)
        assert status == 401, (path, status, data)
        assert headers["www-authenticate"] == 'Bearer realm="cinfer"', headers
        assert "token" in json.loads(data)["error"]
    # a wrong token, or not a Bearer one: invalid_token
    status, headers, data = s.request("POST", "/v2/models/mlp/infer", infer_body(), bearer(INFER + "x"))
    assert status == 401 and headers["www-authenticate"] == 'Bearer realm="cinfer", error="invalid_token"'
    assert "not valid" in json.loads(data)["error"]
    status, _, data = s.request("GET", "/v2/models/mlp", None, {"Authorization": "Basic " + INFER})
    assert status == 401 and "not a Bearer token" in json.loads(data)["error"]
    assert s.request("GET", "/v2/models/mlp", None, bearer(INFER[:-1]))[0] == 401  # a prefix is not the token
    # the inference token: inference routes yes, control routes no
    assert s.request("POST", "/v2/models/mlp/infer", infer_body(), bearer(INFER))[0] == 200
    assert s.request("POST", "/v2/models/mlp/infer", infer_body(), {"Authorization": "bearer   " + INFER})[0] == 200
    for path in ("/v2", "/v2/models/mlp", "/v2/models/mlp/stats", "/v2/models/mlp/config", "/v2/models/mlp/ready"):
        assert s.request("GET", path, None, bearer(INFER))[0] == 200, path
    status, headers, _ = s.request("POST", "/v2/repository/index", "{}", bearer(INFER))
    assert status == 401 and "invalid_token" in headers["www-authenticate"]
    assert s.request("POST", "/v2/systemsharedmemory/region/r/register",
                     json.dumps({"key": "/nope", "byte_size": 4}), bearer(INFER))[0] == 401
    assert s.request("POST", "/v2/repository/models/add/load", "", bearer(INFER))[0] == 401
    # the control token: control routes, and inference too
    assert s.request("POST", "/v2/repository/models/add/load", "", bearer(CONTROL))[0] == 200
    assert s.request("POST", "/v2/repository/index", "{}", bearer(CONTROL))[0] == 200
    assert s.request("GET", "/v2/systemsharedmemory/status", None, bearer(CONTROL))[0] == 200
    assert s.request("POST", "/v2/models/mlp/infer", infer_body(), bearer(CONTROL))[0] == 200
    assert s.request("POST", "/v2/repository/models/add/unload", "", bearer(CONTROL))[0] == 200
    # metrics stay open (scrapers); a large body without a token gets its 401, not a body-size error, at once (the
    # body is not read: the answer comes after the headers alone)
    assert "nv_inference_count" in s.metrics()
    c = socket.create_connection(("127.0.0.1", s.port), timeout=10)
    c.sendall(b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (80 << 20))
    data = c.recv(65536)
    c.close()
    assert data.startswith(b"HTTP/1.1 401"), data
    # tritonclient passes the header through
    c = httpclient.InferenceServerClient(s.url)
    x = httpclient.InferInput("x", [1, 16], "FP32")
    x.set_data_from_numpy(np.ones((1, 16), np.float32))
    assert c.infer("mlp", [x], headers=bearer(INFER)).as_numpy("probs").shape == (1, 5)
    with pytest.raises(Exception, match="token"):
        c.infer("mlp", [x])
    # the token is not in the process's command line
    cmdline = pathlib.Path(f"/proc/{s.proc.pid}/cmdline").read_bytes()
    assert INFER.encode() not in cmdline and CONTROL.encode() not in cmdline


def test_inference_token_alone_also_guards_control(repo, start_server, monkeypatch):
    monkeypatch.setenv("CINFER_INFERENCE_TOKEN", INFER)
    s = start_server(repo, "--model-control-mode", "explicit", "--load-model", "mlp")
    assert s.request("POST", "/v2/repository/index", "{}")[0] == 401
    assert s.request("POST", "/v2/repository/index", "{}", bearer(INFER))[0] == 200
    assert s.request("POST", "/v2/models/mlp/infer", infer_body(), bearer(INFER))[0] == 200
    assert s.request("GET", "/v2/health/ready")[0] == 200


def test_control_token_alone_leaves_inference_open(repo, start_server, monkeypatch):
    monkeypatch.setenv("CINFER_CONTROL_TOKEN", CONTROL)
    s = start_server(repo, "--model-control-mode", "explicit", "--load-model", "mlp")
    assert s.request("POST", "/v2/models/mlp/infer", infer_body())[0] == 200
    assert s.request("POST", "/v2/repository/index", "{}")[0] == 401
    assert s.request("POST", "/v2/repository/index", "{}", bearer(CONTROL))[0] == 200


def run_cli(*args, env=None):
    return subprocess.run([SERVER, *args], capture_output=True, text=True, timeout=30, env=env)


@pytest.mark.parametrize("args,env,message", [
    (["--control-token", CONTROL], {}, "tokens are never taken on the command line"),
    (["--inference-token=" + INFER], {}, "use --inference-token-file PATH"),
    (["--control-token-file", "/nonexistent/token"], {}, "cannot read the token file /nonexistent/token"),
    ([], {"CINFER_INFERENCE_TOKEN": "short"}, "environment variable CINFER_INFERENCE_TOKEN has 5 characters; it needs 16"),
    ([], {"CINFER_CONTROL_TOKEN": "has a space in it, long enough"}, "non-printable"),
    (["--control-token-file", "TOKENFILE"], {"CINFER_CONTROL_TOKEN": CONTROL}, "give one"),
])
def test_bad_token_configuration_exits_2(tmp_path, args, env, message):
    tf = tmp_path / "t"
    tf.write_text(CONTROL)
    args = [str(tf) if a == "TOKENFILE" else a for a in args]
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("CINFER_") or k == "CINFER_SERVER"}
    full_env.update(env)
    p = run_cli("--model-repository", str(tmp_path), "--http-port", "0", "--metrics-port", "0", *args, env=full_env)
    assert p.returncode == 2 and message in p.stderr, p.stderr


def test_help_lists_security_flags():
    out = run_cli("--help").stdout
    for flag in ("--control-token-file", "--inference-token-file", "--max-tensor-elements", "--max-request-elements",
                 "CINFER_CONTROL_TOKEN", "CINFER_INFERENCE_TOKEN"):
        assert flag in out, flag


def test_body_and_element_limits(repo, start_server):
    s = start_server(repo, "--max-input-bytes", "4096", "--max-tensor-elements", "40", "--max-request-elements", "10")
    # the add model's two inputs have 6 elements each: 12 > 10 in all
    body = json.dumps({"inputs": [{"name": n, "shape": [2, 3], "datatype": "FP32", "data": [1] * 6} for n in "ab"]})
    status, data = s.json("POST", "/v2/models/add/infer", body)
    assert status == 400 and "more than 10 elements in all (--max-request-elements)" in data["error"], data
    s2 = start_server(repo, "--max-input-bytes", "4096", "--max-tensor-elements", "40")
    assert s2.json("POST", "/v2/models/mlp/infer", infer_body(2))[0] == 200  # 32 elements
    status, data = s2.json("POST", "/v2/models/mlp/infer", infer_body(3))  # 48
    assert status == 400 and "input 'x' has 48 elements, more than the limit of 40 per tensor" in data["error"], data
    # the shape alone counts (binary data, checked before the size is matched): a huge declared shape is refused
    hdr = json.dumps({"inputs": [{"name": "x", "shape": [1 << 20, 16], "datatype": "FP32",
                                  "parameters": {"binary_data_size": 64}}]}).encode()
    status, _, data = s2.request("POST", "/v2/models/mlp/infer", hdr + b"\0" * 64,
                                 {"Inference-Header-Content-Length": str(len(hdr))})
    assert status == 400 and "more than the limit of 40 per tensor" in json.loads(data)["error"], data
    status, _, data = s2.request("POST", "/v2/models/mlp/infer", b" " * 5000)
    assert status == 413 and "exceeds the limit of 4096 bytes (--max-input-bytes)" in json.loads(data)["error"]
    assert s2.request("GET", "/v2/health/live")[0] == 200


def _external_model(location):
    """mlp-like: y = x + w with w [16] stored as external data at `location` (relative to the version folder)."""
    w = numpy_helper.from_array(np.ones(16, np.float32), "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", "64")):
        e = w.external_data.add()
        e.key, e.value = k, v
    V = helper.make_tensor_value_info
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "ext", [V("x", TensorProto.FLOAT, [1, 16])],
                          [V("y", TensorProto.FLOAT, [1, 16])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    return m


def test_paths_cannot_leave_the_repository(tmp_path, start_server):
    repo = tmp_path / "models"
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.ones(16, np.float32).tobytes())
    # a good external-data model loads (so the refusals below are about the path, not the model)
    d = write_model(repo, "ext_ok", {1: _external_model("w.bin")})
    (d / "1" / "w.bin").write_bytes(np.ones(16, np.float32).tobytes())
    write_model(repo, "ext_dotdot", {1: _external_model("../../../secret.bin")})
    d = write_model(repo, "ext_link", {1: _external_model("w.bin")})
    (d / "1" / "w.bin").symlink_to(secret)
    write_model(repo, "ext_abs", {1: _external_model(str(secret))})
    write_model(repo, "fname", {1: mlp_model()}, 'name: "fname"\ndefault_model_filename: "../../mlp/1/model.onnx"\n')
    write_model(repo, "mlp", {1: mlp_model()})
    s = start_server(repo, "--model-control-mode", "explicit")
    assert s.request("POST", "/v2/repository/models/ext_ok/load")[0] == 200
    for name in ("ext_dotdot", "ext_link", "ext_abs"):
        status, data = s.json("POST", f"/v2/repository/models/{name}/load")
        assert status == 400 and "escapes the model's folder" in data["error"], (name, data)
    status, data = s.json("POST", "/v2/repository/models/fname/load")
    assert status == 400 and "default_model_filename" in data["error"] and "no '/'" in data["error"], data
    # model names that would leave the repository (the URL is decoded before routing)
    for name in ("..", "%2E%2E", ".hidden", "..%2Fmodels%2Fmlp", "%2E%2E%2F%2E%2E%2Fetc"):
        status, _, data = s.request("POST", f"/v2/repository/models/{name}/load")
        assert status in (400, 404), (name, status, data)
        assert status == 404 or "not a valid model name" in json.loads(data)["error"], (name, data)
    status, data = s.json("POST", "/v2/repository/index")
    assert {e["name"]: e["state"] for e in data}["ext_ok"] == "READY"
    assert not any(e["name"].startswith(".") for e in data)
    assert s.request("GET", "/v2/health/live")[0] == 200


BASE = 'name: "m"\nmax_batch_size: 4\n'


@pytest.mark.parametrize("extra,message", [
    ("max_batch_size: 2000000\n", "max_batch_size': 2000000 is out of range [0, 1048576]"),
    ("instance_group [{ kind: KIND_CPU, count: 0 }]\n", "instance_group.count': 0 is out of range [1, 1024]"),
    ("instance_group [{ kind: KIND_CPU, count: 5000 }]\n", "instance_group.count': 5000 is out of range"),
    ("dynamic_batching { max_queue_delay_microseconds: 9223372036854775807 }\n",
     "max_queue_delay_microseconds': 9223372036854775807 is out of range [0, 86400000000]"),
    ("dynamic_batching { max_queue_delay_microseconds: -1 }\n", "max_queue_delay_microseconds': -1 is out of range"),
    ("dynamic_batching { default_queue_policy { default_timeout_microseconds: 100000000000 } }\n",
     "default_timeout_microseconds': 100000000000 is out of range"),
    ("dynamic_batching { default_queue_policy { max_queue_size: -5 } }\n", "max_queue_size': -5 is out of range"),
    ("dynamic_batching { priority_levels: 1001 }\n", "priority_levels': 1001 is out of range [0, 1000]"),
    ("dynamic_batching { priority_levels: 2 default_priority_level: 3 }\n", "default_priority_level 3 must be in [1, priority_levels = 2]"),
    ("dynamic_batching { preferred_batch_size: [ 8 ] }\n", "8 exceeds max_batch_size 4"),
    ('model_warmup [{ name: "w" batch_size: 8 inputs { key: "x" value { data_type: TYPE_FP32 dims: [16] zero_data: true } } }]\n',
     "model_warmup.batch_size': 8 (warm-up 'w') exceeds max_batch_size 4"),
])
def test_config_values_are_range_checked(tmp_path, start_server, extra, message):
    repo = tmp_path / "models"
    cfg = BASE + extra
    if extra.startswith("max_batch_size"):
        cfg = 'name: "m"\n' + extra
    write_model(repo, "m", {1: mlp_model()}, cfg)
    s = start_server(repo, "--model-control-mode", "explicit")
    status, data = s.json("POST", "/v2/repository/models/m/load")
    assert status == 400 and message in data["error"], data
