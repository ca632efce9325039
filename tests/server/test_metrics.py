"""The Prometheus page (:metrics-port/metrics) of the real server: every series, label set and value, with GPU telemetry
from the fake NVML the tests build (tests/server/fake_nvml.c, loaded through CINFER_NVML_LIBRARY), and without NVML.
The text format is checked by prometheus_client's parser and by a stricter line-by-line reading of our own."""
import contextlib
import json
import math
import os
import pathlib
import re
import time

import numpy as np
import onnx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import ADD_CONFIG, SERVER, Server, add_model, mlp_model, write_model

FAKE_NVML = os.environ.get("CINFER_FAKE_NVML", str(pathlib.Path(SERVER).parent / "fake_nvml" / "libnvidia-ml.so"))
CACHE_S = 0.5  # the server's telemetry sample lifetime (metrics_options.cache_ms default)

G0 = "GPU-11111111-2222-3333-4444-555555555555"  # the fake's GPU 0: everything but ECC supported
G1 = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"  # GPU 1: MIG mode on, no utilisation or PCIe
MA = "MIG-11112222-3333-4444-5555-666677778888"  # its MIG instances (memory only)
MB = "MIG-99990000-aaaa-bbbb-cccc-ddddeeeeffff"

NV_GPU_FAMILIES = ("nv_gpu_utilization", "nv_gpu_memory_total_bytes", "nv_gpu_memory_used_bytes", "nv_gpu_power_usage",
                   "nv_gpu_power_limit", "nv_energy_consumption")
HISTOGRAMS = ("cinfer_inference_request_duration_us", "cinfer_inference_queue_duration_us",
              "cinfer_inference_compute_duration_us")
LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@contextlib.contextmanager
def environment(**changes):
    """Sets (value str) or unsets (value None) environment variables for servers started inside the block."""
    saved = {k: os.environ.get(k) for k in changes}
    for k, v in changes.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def fake_nvml():
    assert os.path.exists(FAKE_NVML), f"the fake NVML is not built at {FAKE_NVML} (cmake --build builds fake_nvml)"
    return FAKE_NVML


def parse(text):
    """Strict reading of the text format: returns ({(name, ((label, value), ...)): value string}, {family: type}).
    Fails on a sample without HELP and TYPE before it, a family split in two groups, a duplicate series, or a line
    that is not `name{labels} value`."""
    samples, types, helps, seen_families, current = {}, {}, set(), [], None
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split()[2]
            assert name not in helps, f"second HELP for {name}"
            helps.add(name)
            continue
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split()
            assert name in helps and name not in types, f"TYPE of {name} without HELP before it, or twice"
            assert typ in ("counter", "gauge", "histogram")
            types[name] = typ
            assert name not in seen_families, f"family {name} appears in two groups"
            seen_families.append(name)
            current = name
            continue
        assert line and not line.startswith("#"), f"unexpected line {line!r}"
        m = LINE.match(line)
        assert m, f"malformed sample line {line!r}"
        name, labels, value = m.groups()
        family = name
        if types.get(current) == "histogram":
            family = re.sub(r"_(bucket|sum|count)$", "", name)
        assert family == current, f"sample {name} outside its family group (current: {current})"
        pairs = tuple(LABEL.findall(labels or ""))
        assert ",".join(f'{k}="{v}"' for k, v in pairs) == (labels or ""), f"malformed labels in {line!r}"
        key = (name, pairs)
        assert key not in samples, f"duplicate series {line!r}"
        float(value)
        samples[key] = value
    # and the reference parser accepts the page too
    parsed = {f.name: f.type for f in text_string_to_metric_families(text)}
    for name, typ in types.items():
        assert parsed.get(name[:-6] if typ == "counter" and name.endswith("_total") else name) == typ, name
    return samples, types


def series(samples, name):
    """{frozen labels dict items: float} of one metric name."""
    return {labels: float(v) for (n, labels), v in samples.items() if n == name}


def value(samples, name, **labels):
    want = tuple(labels.items())
    for (n, ls), v in samples.items():
        if n == name and sorted(ls) == sorted(want):
            return float(v)
    raise AssertionError(f"no series {name}{labels}")


def infer_mlp(s, batch):
    x = np.arange(batch * 16, dtype=np.float32).reshape(batch, 16) / 100
    body = json.dumps({"inputs": [{"name": "x", "shape": [batch, 16], "datatype": "FP32", "data": x.flatten().tolist()}]})
    status, _, data = s.request("POST", "/v2/models/mlp/infer", body)
    assert status == 200, data


def infer_add(s, version):
    a = np.ones((2, 3), np.float32)
    body = json.dumps({"inputs": [{"name": n, "shape": [2, 3], "datatype": "FP32", "data": a.flatten().tolist()}
                                  for n in ("a", "b")]})
    status, _, data = s.request("POST", f"/v2/models/add/versions/{version}/infer", body)
    assert status == 200, data


@pytest.fixture(scope="module")
def metrics_repo(tmp_path_factory):
    repo = tmp_path_factory.mktemp("metrics") / "models"
    write_model(repo, "mlp", {1: mlp_model()})
    write_model(repo, "add", {1: add_model(1), 2: add_model(2)}, ADD_CONFIG)
    return repo


@pytest.fixture(scope="module")
def gpu_server(metrics_repo, tmp_path_factory):
    """A server with the fake NVML (two GPUs, the second in MIG mode with two instances); FAKE_NVML_TRACE records
    nvmlInit and nvmlShutdown."""
    trace = tmp_path_factory.mktemp("nvml") / "trace"
    with environment(CINFER_NVML_LIBRARY=fake_nvml(), FAKE_NVML_TRACE=str(trace), CUDA_VISIBLE_DEVICES=None,
                     FAKE_NVML_COUNT=None, FAKE_NVML_INIT_FAIL=None):
        s = Server(metrics_repo)
    s.trace = trace
    yield s
    rc = s.stop()
    assert rc == 0, f"server exit status {rc} after SIGTERM:\n{s.logs()}"
    assert trace.read_text() == "init\nshutdown\n"  # NVML initialised once and shut down at exit


def test_model_series_and_histograms(gpu_server):
    s = gpu_server
    for _ in range(7):
        infer_mlp(s, 3)
    status, _, _ = s.request("POST", "/v2/models/mlp/infer", '{"inputs": []}')  # fails: counted as OTHER
    assert status == 400
    for v, n in ((1, 4), (2, 2)):
        for _ in range(n):
            infer_add(s, v)
    samples, types = parse(s.metrics())
    versions = {(("model", "mlp"), ("version", "1")): (7, 21, 1), (("model", "add"), ("version", "1")): (4, 4, 0),
                (("model", "add"), ("version", "2")): (2, 2, 0)}
    for fam in ("nv_inference_request_success", "nv_inference_count", "nv_inference_exec_count",
                "nv_inference_request_duration_us", "nv_inference_queue_duration_us",
                "nv_inference_compute_input_duration_us", "nv_inference_compute_infer_duration_us",
                "nv_inference_compute_output_duration_us", "nv_inference_request_failure"):
        assert types[fam] == "counter", fam
    assert types["nv_inference_pending_request_count"] == "gauge"
    for labels, (ok, inferences, failed) in versions.items():
        lab = dict(labels)
        assert value(samples, "nv_inference_request_success", **lab) == ok
        assert value(samples, "nv_inference_count", **lab) == inferences
        assert value(samples, "nv_inference_exec_count", **lab) == ok  # sequential requests: one execution each
        assert value(samples, "nv_inference_pending_request_count", **lab) == 0
        for reason in ("REJECTED", "CANCELED", "BACKEND", "OTHER"):
            assert value(samples, "nv_inference_request_failure", reason=reason, **lab) == (failed if reason == "OTHER" else 0)
        for h in HISTOGRAMS:
            assert types[h] == "histogram"
            buckets = {dict(ls)["le"]: v for ls, v in series(samples, h + "_bucket").items()
                       if all(dict(ls)[k] == lab[k] for k in lab)}
            les = list(buckets)
            assert les[-1] == "+Inf" and [float(x) for x in les[:-1]] == sorted(float(x) for x in les[:-1])
            assert [float(x) for x in les[:-1]] == [25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000,
                                                    250000, 500000, 1000000, 2500000, 5000000, 10000000]
            counts = list(buckets.values())
            assert all(a <= b for a, b in zip(counts, counts[1:])), f"{h} buckets not cumulative: {counts}"
            assert buckets["+Inf"] == value(samples, h + "_count", **lab) == ok  # successes only
            assert value(samples, h + "_sum", **lab) > 0
        # the histograms' sums agree with Triton's cumulative counters (which floor to whole microseconds)
        queue_sum = value(samples, "cinfer_inference_queue_duration_us_sum", **lab)
        assert abs(queue_sum - value(samples, "nv_inference_queue_duration_us", **lab)) <= 1
        compute = sum(value(samples, f"nv_inference_compute_{p}_duration_us", **lab) for p in ("input", "infer", "output"))
        assert abs(value(samples, "cinfer_inference_compute_duration_us_sum", **lab) - compute) <= 3
        request = value(samples, "cinfer_inference_request_duration_us_sum", **lab)  # successes only, as Triton
        assert abs(request - value(samples, "nv_inference_request_duration_us", **lab)) <= 1
    # the same page is the KServe statistics, in other units
    st = s.json("GET", "/v2/models/mlp/versions/1/stats")[1]["model_stats"][0]
    assert st["inference_stats"]["success"]["count"] == 7 and st["inference_count"] == 21
    assert abs(value(samples, "nv_inference_queue_duration_us", model="mlp", version="1")
               - st["inference_stats"]["queue"]["ns"] / 1000) <= 1


def test_model_memory(gpu_server):
    samples, types = parse(gpu_server.metrics())
    assert types["cinfer_model_memory_bytes"] == "gauge"
    mem = {dict(ls)["model"] + "/" + dict(ls)["version"] + "/" + dict(ls)["kind"] + dict(ls)["device_id"]: v
           for ls, v in series(samples, "cinfer_model_memory_bytes").items()}
    params = sum(onnx.numpy_helper.to_array(t).nbytes for t in mlp_model().graph.initializer)
    add_params = sum(onnx.numpy_helper.to_array(t).nbytes for t in add_model(1).graph.initializer)
    assert mem == {"mlp/1/CPU0": params, "add/1/CPU0": add_params, "add/2/CPU0": add_params}  # CPU-only: no GPU entries
    st = gpu_server.json("GET", "/v2/models/mlp/stats")[1]["model_stats"][0]
    assert st["memory_usage"] == [{"type": "CPU", "id": 0, "byte_size": params}]


def test_gpu_series_from_fake_nvml(gpu_server):
    text = gpu_server.metrics()
    samples, types = parse(text)
    for fam in NV_GPU_FAMILIES:
        assert types[fam] == ("counter" if fam == "nv_energy_consumption" else "gauge")
        for labels in series(samples, fam):
            assert [k for k, _ in labels] == ["gpu_uuid"], f"{fam} must carry exactly the label gpu_uuid: {labels}"
    gpu = {fam: {dict(ls)["gpu_uuid"]: v for ls, v in series(samples, fam).items()} for fam in NV_GPU_FAMILIES}
    # NOT_SUPPORTED answers leave the series out for that device: utilisation on the MIG-mode GPU and on MIG instances,
    # power, limit and energy on MIG instances
    assert gpu["nv_gpu_utilization"] == {G0: 0.37}
    assert gpu["nv_gpu_memory_total_bytes"] == {G0: 150323855360, G1: 85899345920, MA: 42949672960, MB: 21474836480}
    assert gpu["nv_gpu_memory_used_bytes"] == {G0: 2147483648, G1: 12884901888, MA: 1073741824, MB: 0}
    assert gpu["nv_gpu_power_usage"] == {G0: 123.456, G1: 250}
    assert gpu["nv_gpu_power_limit"] == {G0: 700, G1: 400}
    assert gpu["nv_energy_consumption"] == {G0: 250, G1: 100}  # joules since the server started
    # plain decimals, as perf_analyzer's regex reads them
    for fam in NV_GPU_FAMILIES:
        lines = [l for l in text.splitlines() if l.startswith(fam + "{")]
        assert lines and all(re.fullmatch(fam + r'\{gpu_uuid="[^"]+"\} \d+\.?\d*', l) for l in lines), lines
    pa = {m.group(1): float(m.group(2))
          for m in re.finditer(r'\nnv_gpu_power_usage\{gpu_uuid="([^"]+)"\} (\d+\.?\d*)', text)}
    assert pa == {G0: 123.456, G1: 250.0}

    info = {dict(ls)["gpu_uuid"]: (dict(ls), v) for ls, v in series(samples, "cinfer_gpu_info").items()}
    assert {u: (d["index"], d["name"], d["mig_gi"], d["mig_ci"], v) for u, (d, v) in info.items()} == {
        G0: ("0", "NVIDIA Fake H200", "", "", 1), G1: ("1", "NVIDIA Fake A100", "", "", 1),
        MA: ("1", "NVIDIA Fake A100 MIG 3g.40gb", "1", "0", 1), MB: ("1", "NVIDIA Fake A100 MIG 2g.20gb", "2", "0", 1)}
    for ls in series(samples, "cinfer_gpu_info"):
        assert [k for k, _ in ls] == ["gpu_uuid", "index", "name", "mig_gi", "mig_ci"]

    def by(name, second):
        return {(dict(ls)["gpu_uuid"], dict(ls).get(second)): v for ls, v in series(samples, name).items()}

    assert by("cinfer_gpu_temperature_celsius", None) == {(G0, None): 41, (G1, None): 55}  # MIG A: NO_PERMISSION
    assert by("cinfer_gpu_memory_utilization", None) == {(G0, None): 0.12}
    reasons = ("gpu_idle", "sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
               "hw_power_brake_slowdown")
    expected = {(G0, r): float(r in ("gpu_idle", "sw_power_cap")) for r in reasons}
    expected.update({(G1, r): float(r in ("hw_thermal_slowdown", "hw_power_brake_slowdown")) for r in reasons})
    assert by("cinfer_gpu_clock_throttle_reason", "reason") == expected
    assert by("cinfer_gpu_ecc_errors", "type") == {(G1, "corrected"): 7, (G1, "uncorrected"): 0}  # volatile; G0: none
    assert by("cinfer_gpu_pcie_throughput_bytes_per_second", "direction") == {(G0, "tx"): 1024000, (G0, "rx"): 2560000}
    assert types["cinfer_gpu_ecc_errors"] == "counter" and types["cinfer_gpu_clock_throttle_reason"] == "gauge"
    # a CPU-only server never asks CUDA for allocator statistics
    assert not [n for n, _ in samples if n.startswith("cinfer_gpu_allocator_")]


def test_nvml_failure_reported_once(gpu_server):
    gpu_server.metrics()
    time.sleep(CACHE_S + 0.1)  # past the sample lifetime: the next scrape samples NVML again
    gpu_server.metrics()
    logs = gpu_server.logs()
    assert logs.count(f"NVML: nvmlDeviceGetTemperature failed on {MA}: Insufficient Permissions (code 4)") == 1, logs
    assert "GPU telemetry: NVML" in logs and "sees 2 GPUs" in logs


def test_host_series(gpu_server):
    s = gpu_server
    pid = s.proc.pid
    clk = os.sysconf("SC_CLK_TCK")

    def proc_cpu():
        fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / clk  # utime + stime

    time.sleep(CACHE_S + 0.1)
    before = proc_cpu()
    samples, types = parse(s.metrics())
    after = proc_cpu()
    cpu = value(samples, "process_cpu_seconds_total")
    assert types["process_cpu_seconds_total"] == "counter"
    assert before - 2 / clk <= cpu <= after + 2 / clk  # this process's CPU time (clock-tick resolution in /proc)
    meminfo = dict(l.split(":", 1) for l in pathlib.Path("/proc/meminfo").read_text().splitlines())
    assert value(samples, "nv_cpu_memory_total_bytes") == int(meminfo["MemTotal"].split()[0]) * 1024
    assert 0 < value(samples, "nv_cpu_memory_used_bytes") < value(samples, "nv_cpu_memory_total_bytes")
    assert 0 <= value(samples, "nv_cpu_utilization") <= 1
    status = dict(l.split(":", 1) for l in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines())
    rss = value(samples, "process_resident_memory_bytes")
    assert 0.5 <= rss / (int(status["VmRSS"].split()[0]) * 1024) <= 2
    assert rss < value(samples, "process_virtual_memory_bytes")
    for name in ("nv_cpu_utilization", "nv_cpu_memory_total_bytes", "nv_cpu_memory_used_bytes",
                 "process_resident_memory_bytes", "process_virtual_memory_bytes"):
        assert types[name] == "gauge"

    # CPU time per inference: process CPU time over inferences between two samples
    def totals(samples):
        return value(samples, "process_cpu_seconds_total"), sum(series(samples, "nv_inference_count").values())

    cpu1, n1 = totals(samples)
    for _ in range(20):
        infer_mlp(s, 2)
    time.sleep(CACHE_S + 0.1)
    samples, types = parse(s.metrics())
    cpu2, n2 = totals(samples)
    assert n2 - n1 == 40
    per = value(samples, "cinfer_cpu_time_per_inference_us")
    assert types["cinfer_cpu_time_per_inference_us"] == "gauge"
    assert per > 0 and math.isclose(per, (cpu2 - cpu1) * 1e6 / (n2 - n1), abs_tol=0.1)


def test_visible_devices_select_gpus_and_mig_instances(metrics_repo, start_server):
    with environment(CINFER_NVML_LIBRARY=fake_nvml(), CUDA_VISIBLE_DEVICES="MIG-9999", FAKE_NVML_TRACE=None,
                     FAKE_NVML_COUNT=None, FAKE_NVML_INIT_FAIL=None):
        s = start_server(metrics_repo)
    samples, _ = parse(s.metrics())
    # the instance, and its GPU for the whole-GPU figures; GPU 0 and the other instance are not visible
    assert sorted(dict(ls)["gpu_uuid"] for ls in series(samples, "cinfer_gpu_info")) == [G1, MB]
    assert sorted(dict(ls)["gpu_uuid"] for ls in series(samples, "nv_gpu_memory_used_bytes")) == [G1, MB]


@pytest.mark.parametrize("env,reason", [
    ({"CINFER_NVML_LIBRARY": "/nonexistent/libnvidia-ml.so.1"}, "cannot load /nonexistent/libnvidia-ml.so.1"),
    ({"FAKE_NVML_INIT_FAIL": "1"}, "nvmlInit_v2 failed: Driver Not Loaded (code 9)"),
    ({"FAKE_NVML_COUNT": "0"}, "reports no GPU"),
], ids=["missing", "init-fails", "no-gpu"])
def test_without_nvml_the_page_has_no_gpu_series(metrics_repo, start_server, env, reason):
    full = {"CINFER_NVML_LIBRARY": fake_nvml(), "FAKE_NVML_INIT_FAIL": None, "FAKE_NVML_COUNT": None,
            "FAKE_NVML_TRACE": None, "CUDA_VISIBLE_DEVICES": None, **env}
    with environment(**full):
        s = start_server(metrics_repo)
    infer_mlp(s, 1)
    text = s.metrics()
    samples, types = parse(text)
    assert not re.search(r"^(# (HELP|TYPE) )?(nv_gpu_|nv_energy_|cinfer_gpu_)", text, re.M), text
    assert value(samples, "nv_inference_request_success", model="mlp", version="1") == 1
    assert "process_cpu_seconds_total" in types and "nv_cpu_memory_total_bytes" in types
    off = [l for l in s.logs().splitlines() if "GPU telemetry off: " in l]
    assert len(off) == 1 and reason in off[0], s.logs()
    assert "NVML:" not in s.logs()
    infer_mlp(s, 2)  # still serving
    assert value(parse(s.metrics())[0], "nv_inference_count", model="mlp", version="1") == 3


def test_real_gpus_match_nvidia_smi(metrics_repo, start_server):
    """On a machine with GPUs: the real NVML's figures against nvidia-smi (skips elsewhere, saying why)."""
    import shutil
    import subprocess
    smi = shutil.which("nvidia-smi")
    if not smi:
        pytest.skip("no GPU here: nvidia-smi is not installed")
    q = subprocess.run([smi, "--query-gpu=uuid,name,memory.total,enforced.power.limit,temperature.gpu",
                        "--format=csv,noheader,nounits"], capture_output=True, text=True)
    if q.returncode != 0 or not q.stdout.strip():
        pytest.skip(f"no GPU here: nvidia-smi failed: {q.stderr.strip() or q.stdout.strip()}")
    smi_gpus = {}
    for line in q.stdout.strip().splitlines():
        uuid, name, mem, limit, temp = [f.strip() for f in line.split(",")]
        smi_gpus[uuid] = (name, float(mem), limit, temp)
    with environment(CINFER_NVML_LIBRARY=None, FAKE_NVML_TRACE=None, FAKE_NVML_COUNT=None, FAKE_NVML_INIT_FAIL=None):
        s = start_server(metrics_repo)
    samples, _ = parse(s.metrics())
    info = {dict(ls)["gpu_uuid"]: dict(ls) for ls in series(samples, "cinfer_gpu_info")}
    physical = {u: d for u, d in info.items() if d["mig_gi"] == ""}
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    assert physical, s.logs()
    if visible is None:
        assert set(physical) == set(smi_gpus)
    for uuid, d in physical.items():
        name, mem_mib, limit, temp = smi_gpus[uuid]
        assert d["name"] == name
        total = value(samples, "nv_gpu_memory_total_bytes", gpu_uuid=uuid)
        assert abs(total / 2**20 - mem_mib) <= 1, (uuid, total, mem_mib)
        if limit not in ("[N/A]", "[Not Supported]"):
            assert abs(value(samples, "nv_gpu_power_limit", gpu_uuid=uuid) - float(limit)) <= 0.01
        if temp not in ("[N/A]", "[Not Supported]"):
            assert abs(value(samples, "cinfer_gpu_temperature_celsius", gpu_uuid=uuid) - float(temp)) <= 5
        assert 0 <= value(samples, "nv_gpu_power_usage", gpu_uuid=uuid) <= value(samples, "nv_gpu_power_limit", gpu_uuid=uuid) * 1.5
        assert value(samples, "nv_gpu_memory_used_bytes", gpu_uuid=uuid) <= total
