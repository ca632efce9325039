"""perf_analyzer (Triton's load generator, installed by scripts/perf_analyzer.sh) against the real server with a tiny
CPU model: a short sweep at concurrency 1, 4 and 8 with binary tensors, and one run with --shared-memory=system.
Each run must exit 0 and report throughput > 0; the server's inference_count must cover every request perf_analyzer
counted; the shared-memory run must really have registered regions. Count windows, 3 trials, and a stability
threshold wide enough that a loaded 2-core machine settles in 3 windows (no timing is asserted)."""
import csv
import io
import os
import pathlib
import re
import subprocess
import threading
import time

import pytest
import tritonclient.http as httpclient

from conftest import mlp_model, write_model

ROOT = pathlib.Path(__file__).resolve().parents[2]
PERF = os.environ.get("CINFER_PERF_ANALYZER", str(ROOT / "scripts" / "perf_analyzer.sh"))


def _perf_available():
    if PERF.endswith("perf_analyzer.sh"):
        r = subprocess.run([PERF, "--check"], capture_output=True, text=True)
        return r.returncode == 0, r.stdout.strip()
    return os.access(PERF, os.X_OK), f"{PERF} is not executable"


@pytest.fixture(scope="module")
def perf():
    ok, why = _perf_available()
    if not ok:
        if os.environ.get("CI"):
            pytest.fail(f"perf_analyzer must be installed in CI: {why}")
        pytest.skip(why)
    return PERF


@pytest.fixture
def mlp_server(tmp_path, start_server):
    repo = tmp_path / "models"
    write_model(repo, "mlp", {1: mlp_model()})
    return start_server(repo, "--http-threads", "4")


def run_perf(perf, server, tmp_path, concurrency, *extra):
    """Runs one perf_analyzer measurement; returns (csv row dict, client request count, server inference count)."""
    out = tmp_path / f"pa-c{concurrency}{'-shm' if extra else ''}.csv"
    cmd = [perf, "-m", "mlp", "-u", server.url, "-i", "http", "--concurrency-range", str(concurrency),
           "--measurement-mode", "count_windows", "--measurement-request-count", "100", "--max-trials", "3",
           "--stability-percentage", "1000", "--input-tensor-format", "binary", "--output-tensor-format", "binary",
           "-f", str(out), *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"perf_analyzer exited {r.returncode}:\n{r.stdout}\n{r.stderr}\nserver log:\n{server.logs()}"
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert len(rows) == 1 and int(rows[0]["Concurrency"]) == concurrency, rows
    client = re.search(r"Client:\s*\n\s*Request count: (\d+)", r.stdout)
    srv = re.search(r"Server:\s*\n\s*Inference count: (\d+)", r.stdout)
    assert client and srv, r.stdout  # "Server:" appears only when the statistics extension works
    return rows[0], int(client.group(1)), int(srv.group(1))


def _inference_count(client):
    return client.get_inference_statistics("mlp")["model_stats"][0]["inference_count"]


def test_perf_analyzer_sweep(perf, mlp_server, tmp_path):
    client = httpclient.InferenceServerClient(mlp_server.url)
    before = _inference_count(client)
    counted = 0
    for c in (1, 4, 8):
        row, n, server_window = run_perf(perf, mlp_server, tmp_path, c)
        assert float(row["Inferences/Second"]) > 0 and n > 0, row
        assert int(row["p99 latency"]) >= int(row["p50 latency"]) > 0, row
        assert server_window > 0
        counted += n
    # every request perf_analyzer counted was executed by the server (it also sends warm-up and unstable windows)
    after = _inference_count(client)
    assert after - before >= counted, (before, after, counted)

    # one run through system shared memory: watch the registry while it runs
    seen = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            status, regions = mlp_server.json("GET", "/v2/systemsharedmemory/status")
            seen.append(len(regions) if status == 200 else -status)
            time.sleep(0.02)

    w = threading.Thread(target=watch)
    w.start()
    try:
        row, n, _ = run_perf(perf, mlp_server, tmp_path, 4, "--shared-memory", "system",
                             "--output-shared-memory-size", "4096")
    finally:
        stop.set()
        w.join()
    assert float(row["Inferences/Second"]) > 0 and n > 0, row
    assert max(seen) >= 2, f"perf_analyzer never had an input and an output region registered: {seen[:20]}"
    assert client.get_system_shared_memory_status() == []  # perf_analyzer unregisters what it registered
    assert _inference_count(client) - after >= n
    client.close()
