"""Triton's command-line and config.pbtxt habits: --flag=value, Triton's flag names and aliases, the gRPC flags refused
until gRPC exists, --disable-auto-complete-config / --strict-model-config, --exit-on-error, the log-level flags, and
config fields cinfer maps (intra_op_thread_count, TensorRT's FP16 precision mode) or accepts and logs as ignored."""
import subprocess
import time

import numpy as np
import pytest
import tritonclient.http as httpclient

from conftest import SERVER, Server, mlp_model, server_env, write_model
from free_ports import free_ports

MLP_CONFIG = """
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "probs" data_type: TYPE_FP32 dims: [ 5 ] } ]
"""


def run_cli(*args):
    return subprocess.run([SERVER, *map(str, args)], capture_output=True, text=True, timeout=60, env=server_env())


class RawServer(Server):
    """A server started with exactly `args` (no flags of the test harness's own, so aliases are what it gets)."""

    def __init__(self, tmp_path, args):
        self.port, self.metrics_port = free_ports(2)
        self.url = f"127.0.0.1:{self.port}"
        self.log_path = tmp_path / f"server-{self.port}.log"
        self.log = open(self.log_path, "w")
        argv = [a.format(port=self.port, metrics=self.metrics_port) for a in args]
        self.proc = subprocess.Popen([SERVER, *argv], stdout=self.log, stderr=subprocess.STDOUT, env=server_env())
        self._wait("/v2/health/ready")


@pytest.fixture
def raw_server(tmp_path):
    servers = []

    def start(*args):
        s = RawServer(tmp_path, args)
        servers.append(s)
        return s

    yield start
    for s in servers:
        assert s.stop() == 0, s.logs()


def infer(url, model, x):
    c = httpclient.InferenceServerClient(url)
    inp = httpclient.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return c.infer(model, [inp]).as_numpy("probs")


def test_equals_form_aliases_and_ignored_triton_flags(raw_server, tmp_path):
    repo = tmp_path / "models"
    write_model(repo, "mlp", {1: mlp_model()})
    s = raw_server(f"--model-store={repo}", "--http-port={port}", "--metrics-port={metrics}", "--http-address=127.0.0.1",
                   "--http-thread-count=2", "--threads=1", "--allow-grpc=false", "--allow-http", "true",
                   "--backend-directory=/opt/tritonserver/backends", "--id", "triton-0", "--log-verbose", "1",
                   "--strict-readiness=true", "--exit-timeout-secs=10", "--log-format=default")
    x = np.ones((2, 16), np.float32)
    assert infer(s.url, "mlp", x).shape == (2, 5)
    logs = s.logs()
    assert "ignored Triton flags (no such part in cinfer): --backend-directory, --id" in logs
    assert "listening on 127.0.0.1:" in logs


@pytest.mark.parametrize("args,message", [
    (["--grpc-port=8001"], "--grpc-port: cinfer-server has no gRPC endpoint yet"),
    (["--grpc-port", "8001"], "--grpc-port: cinfer-server has no gRPC endpoint yet"),
    (["--allow-grpc=true"], "--allow-grpc=true: cinfer-server has no gRPC endpoint yet"),
    (["--allow-http=false"], "HTTP is cinfer-server's only endpoint"),
    (["--allow-metrics=perhaps"], "--allow-metrics 'perhaps': use true or false"),
    (["--http-port=99999"], "--http-port needs an integer from 0 to 65535"),
    (["--strict-model-config"], "--strict-model-config needs a value"),
    (["--log-verbose=loud"], "--log-verbose needs an integer"),
    (["--exit-on-error=maybe"], "--exit-on-error 'maybe': use true or false"),
    (["stray"], "unexpected argument 'stray'"),
    (["--bogus=1"], "unknown flag '--bogus'"),
    (["--control-token=secret"], "tokens are never taken on the command line"),
])
def test_bad_triton_flags_exit_2(tmp_path, args, message):
    p = run_cli("--model-repository", tmp_path, *args)
    assert p.returncode == 2 and message in p.stderr, p.stderr


def test_allow_metrics_false_turns_the_metrics_listener_off(raw_server, tmp_path):
    repo = tmp_path / "models"
    repo.mkdir()
    s = raw_server("--model-repository", str(repo), "--http-port", "{port}", "--metrics-port", "{metrics}",
                   "--allow-metrics=false")
    assert "metrics off" in s.logs()
    with pytest.raises(OSError):
        s.request("GET", "/metrics", port=s.metrics_port, timeout=2)


def test_log_level_flags(raw_server, tmp_path):
    repo = tmp_path / "models"
    write_model(repo, "broken", {1: b"not an onnx file"})
    s = raw_server("--model-repository", str(repo), "--http-port", "{port}", "--metrics-port", "0",
                   "--strict-readiness=false", "--log-info=false")
    logs = s.logs()
    assert " info " not in logs and "server ready" not in logs
    assert " warn " in logs or " error " in logs  # the failed load is still reported


def test_disable_auto_complete_config(raw_server, tmp_path):
    repo = tmp_path / "models"
    write_model(repo, "bare", {1: mlp_model()})                       # no config.pbtxt
    write_model(repo, "partial", {1: mlp_model()}, "max_batch_size: 8\n")  # no inputs or outputs listed
    write_model(repo, "complete", {1: mlp_model()}, MLP_CONFIG)
    for flags in (["--disable-auto-complete-config"], ["--strict-model-config=true"]):
        s = raw_server("--model-repository", str(repo), "--http-port", "{port}", "--metrics-port", "0",
                       "--strict-readiness=false", *flags)
        c = httpclient.InferenceServerClient(s.url)
        index = {m["name"]: m for m in c.get_model_repository_index()}
        assert index["complete"]["state"] == "READY"
        assert index["bare"]["state"] == "UNAVAILABLE" and "config.pbtxt" in index["bare"]["reason"]
        assert "auto-complete" in index["bare"]["reason"]
        assert index["partial"]["state"] == "UNAVAILABLE" and "input" in index["partial"]["reason"]
        assert "auto-complete" in index["partial"]["reason"]
        logs = s.logs()
        assert ("deprecated" in logs) == (flags[0].startswith("--strict-model-config"))
        assert s.stop() == 0
    # --strict-model-config=false: completion as usual
    s = raw_server("--model-repository", str(repo), "--http-port", "{port}", "--metrics-port", "0",
                   "--strict-model-config=false")
    assert infer(s.url, "bare", np.ones((1, 16), np.float32)).shape == (1, 5)


def test_exit_on_error(tmp_path):
    repo = tmp_path / "models"
    write_model(repo, "good", {1: mlp_model()})
    write_model(repo, "broken", {1: b"not an onnx file"})
    port, = free_ports(1)
    p = run_cli("--model-repository", repo, "--http-port", port, "--metrics-port", "0", "--exit-on-error=true")
    assert p.returncode == 1, p.stderr
    assert "broken" in p.stderr and "--exit-on-error" in p.stderr


def test_config_fields_mapped_or_logged_as_ignored(start_server, tmp_path):
    repo = tmp_path / "models"
    ignored = MLP_CONFIG + """
optimization {
  graph { level: 1 }
  input_pinned_memory { enable: true }
  cuda { graphs: true graph_spec [ { batch_size: 4 } ] }
  execution_accelerators { cpu_execution_accelerator [ { name: "openvino" } ] }
}
instance_group [ { kind: KIND_CPU count: 1 rate_limiter { resources [ { name: "R1" count: 1 } ] } } ]
model_repository_agents { agents [ { name: "checksum" } ] }
parameters { key: "intra_op_thread_count" value { string_value: "1" } }
parameters { key: "inter_op_thread_count" value { string_value: "1" } }
"""
    write_model(repo, "ignored", {1: mlp_model()}, ignored)
    # on the CPU as "ignored" is: the comparison below is bitwise, and a GPU's float32 sums round differently
    write_model(repo, "reference", {1: mlp_model()}, MLP_CONFIG + "instance_group [ { kind: KIND_CPU count: 1 } ]\n")
    trt_fp16 = MLP_CONFIG + """
optimization { execution_accelerators { gpu_execution_accelerator [ {
  name: "tensorrt" parameters { key: "precision_mode" value: "FP16" } } ] } }
"""
    write_model(repo, "trt_fp16", {1: mlp_model()}, trt_fp16)
    write_model(repo, "bad_threads", {1: mlp_model()},
                MLP_CONFIG + 'parameters { key: "intra_op_thread_count" value { string_value: "many" } }\n')
    s = start_server(repo, "--strict-readiness", "false")
    c = httpclient.InferenceServerClient(s.url)
    index = {m["name"]: m for m in c.get_model_repository_index()}
    assert index["ignored"]["state"] == "READY" and index["trt_fp16"]["state"] == "READY"
    assert index["bad_threads"]["state"] == "UNAVAILABLE"
    assert "'intra_op_thread_count' is 'many': expected a thread count" in index["bad_threads"]["reason"]
    logs = s.logs()
    line = next(l for l in logs.splitlines() if "model 'ignored'" in l and "ignored" in l.split("model 'ignored'")[1])
    for field in ("optimization.graph (line", "optimization.input_pinned_memory", "optimization.cuda.graph_spec",
                  "optimization.execution_accelerators", "instance_group.rate_limiter", "model_repository_agents",
                  "parameters 'inter_op_thread_count'"):
        assert field in line, (field, line)
    assert "intra_op_thread_count" not in line  # honoured: the instance's engine threads
    assert not any("model 'reference'" in l and "ignored" in l for l in logs.splitlines())
    x = np.random.default_rng(2).standard_normal((3, 16)).astype(np.float32)
    ref = infer(s.url, "reference", x)
    np.testing.assert_array_equal(infer(s.url, "ignored", x), ref)
    half = infer(s.url, "trt_fp16", x)  # TensorRT's FP16 precision mode runs the engine in fp16
    assert half.dtype == np.float32 and np.max(np.abs(half - ref)) < 2e-3 and not np.array_equal(half, ref)
