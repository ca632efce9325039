"""A real Prometheus (Debian package prometheus) scrapes a real cinfer-server (with the fake NVML) using the scrape
job of deploy/prometheus/prometheus.yml and the rules of alerts.yml, every 2 s, on loopback, under steady
traffic. Then: the target is up, every rule evaluates without error, exactly the alerts that the fake GPUs and the
traffic call for are pending, and every dashboard query and the HPA's adapter query run without error and return
data (the allocator panels excepted: they need a CUDA device)."""
import json
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
import yaml

import kit
from conftest import DEPLOY, Server, fake_nvml, free_ports, infer, load_yaml, tool, write_repository

GPU0 = "GPU-11111111-2222-3333-4444-555555555555"  # the fake NVML's GPU 0: 37% busy, 41 °C
GPU1 = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"  # GPU 1: MIG mode, thermally throttled


class Prometheus:
    def __init__(self, binary, workdir, target):
        cfg = load_yaml(DEPLOY / "prometheus" / "prometheus.yml")
        job = cfg["scrape_configs"][0]
        job.update(scrape_interval="2s", scrape_timeout="2s")  # generous: CI runs other suites beside this one
        job["static_configs"] = [{"targets": [target]}]
        cfg["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
        cfg.pop("alerting", None)  # no Alertmanager here
        shutil.copy(DEPLOY / "prometheus" / "alerts.yml", workdir / "alerts.yml")
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(cfg))
        self.port = free_ports(1)[0]
        self.log = open(workdir / "prometheus.log", "w")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.logfile = workdir / "prometheus.log"

    def api(self, path, **params):
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return body["data"]

    def ready(self):
        """True once the TSDB has opened: before that every API call answers 503 Service Unavailable (an
        HTTPError, an OSError, which wait_for retries)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=10) as r:
            return r.status == 200

    def query(self, expr):
        try:
            return self.api("query", query=expr)["result"]
        except urllib.error.HTTPError as e:
            raise AssertionError(f"{expr!r}: {e.read().decode()}") from None

    def wait_for(self, check, what, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            assert self.proc.poll() is None, f"prometheus exited:\n{self.logfile.read_text()}"
            try:
                if check():
                    return
            except OSError:
                pass
            time.sleep(0.25)
        raise AssertionError(f"prometheus: {what} not within {timeout}s:\n{self.logfile.read_text()}")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


class Traffic(threading.Thread):
    """One request every 0.2 s until stopped (at most 10 minutes), so rates, histograms and the CPU-time-per-
    inference gauge (present only while inferences happen between telemetry samples) have data. Every fifth request
    is invalid (400, counted as a failure): a steady 20% failure ratio."""

    def __init__(self, server):
        super().__init__(daemon=True)
        self.server, self.done, self.errors = server, threading.Event(), []

    def run(self):
        deadline, n = time.time() + 600, 0
        while not self.done.is_set() and time.time() < deadline:
            n += 1
            if n % 5:
                status, body = infer(self.server, 2)
                if status != 200:
                    self.errors.append((status, body))
            else:
                status, body = self.server.get("/v2/models/dense/infer", method="POST", body='{"inputs": []}')
                if status != 400:
                    self.errors.append((status, body))
            self.done.wait(0.2)


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    binary = tool("prometheus")
    tmp = tmp_path_factory.mktemp("live")
    server = Server(write_repository(tmp / "models"), ["--device", "cpu"], {"CINFER_NVML_LIBRARY": fake_nvml()}).wait()
    prom, traffic = None, Traffic(server)
    try:
        prom = Prometheus(binary, tmp, f"127.0.0.1:{server.metrics_port}")
        prom.wait_for(prom.ready, "ready to answer queries")
        prom.wait_for(lambda: prom.query('up{job="cinfer"} == 1'), "the cinfer target up")
        traffic.start()
        prom.wait_for(lambda: prom.query('increase(nv_inference_request_failure{job="cinfer"}[1m]) > 0'),
                      "the failed request in a rate")
        prom.wait_for(lambda: prom.query('rate(nv_inference_count{job="cinfer"}[1m]) > 0'), "inferences in a rate")
        prom.wait_for(lambda: prom.query('cinfer_cpu_time_per_inference_us{job="cinfer"}'), "CPU time per inference")
        yield prom, server
    finally:
        traffic.done.set()
        if traffic.is_alive():
            traffic.join()
        if prom:
            prom.stop()
        rc = server.stop()
    assert not traffic.errors, traffic.errors[:3]
    assert rc == 0, server.logs()


def test_target_is_up_with_the_job_the_rules_select(live):
    prom, _ = live
    targets = prom.api("targets")["activeTargets"]
    assert [(t["labels"]["job"], t["health"]) for t in targets] == [("cinfer", "up")], targets


def test_every_rule_evaluates_without_error(live):
    prom, _ = live
    prom.wait_for(lambda: all(r.get("lastEvaluation", "").startswith("2") or r.get("evaluationTime", 0) > 0
                              for g in prom.api("rules")["groups"] for r in g["rules"]), "every rule evaluated")
    time.sleep(1.5)
    rules = [r for g in prom.api("rules")["groups"] for r in g["rules"]]
    assert sorted(r["name"] for r in rules) == sorted(r["alert"] for r in kit.alert_rules())
    bad = [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    assert not bad, bad


def test_exactly_the_alerts_the_fake_gpus_and_traffic_call_for_are_pending(live):
    """The fake NVML's GPU 0 is 37% busy (under the 40% idle line), 41 °C, 2 of 140 GiB used, and throttled only for
    idle and power cap (not alerted); GPU 1 is throttled by hw_thermal_slowdown and hw_power_brake_slowdown, 55 °C,
    with 7 corrected and no uncorrected ECC errors. The traffic fails 20% of requests. So, within a minute (before
    any `for` elapses): CinferGPUIdle for GPU 0, CinferGPUThrottled twice for GPU 1, CinferRequestFailureRatioHigh
    for the model, all pending, and nothing else."""
    prom, _ = live
    want = [("CinferGPUIdle", GPU0, None, "pending"),
            ("CinferGPUThrottled", GPU1, "hw_power_brake_slowdown", "pending"),
            ("CinferGPUThrottled", GPU1, "hw_thermal_slowdown", "pending"),
            ("CinferRequestFailureRatioHigh", None, None, "pending")]

    def active():
        return sorted((a["labels"]["alertname"], a["labels"].get("gpu_uuid"), a["labels"].get("reason"), a["state"])
                      for a in prom.api("alerts")["alerts"])
    prom.wait_for(lambda: len(active()) >= len(want), "the alerts to go active")
    time.sleep(2)  # a few more evaluations: anything else that would go active has by now
    assert active() == want
    (failing,) = [a for a in prom.api("alerts")["alerts"] if a["labels"]["alertname"] == "CinferRequestFailureRatioHigh"]
    assert failing["labels"]["model"] == "dense" and 0.1 < float(failing["value"]) < 0.3, failing


def test_dashboard_and_adapter_queries_return_data(live):
    prom, server = live
    instance = f"127.0.0.1:{server.metrics_port}"
    empty, checked = [], 0
    queries = list(kit.all_queries())
    (rule,) = kit.adapter_rules()  # per instance here (no namespace/pod labels outside Kubernetes)
    queries.append(("adapter metricsQuery by instance",
                    kit.adapter_substitute(rule["metricsQuery"], "instance", f'instance="{instance}"')))
    for where, expr in queries:
        if where.startswith("alert ") or where.endswith("seriesQuery") or where == "adapter rule 0 metricsQuery":
            continue  # alerts: evaluated above; the Kubernetes form of the adapter query needs pod labels
        result = prom.query(expr)
        checked += 1
        if not result and "cinfer_gpu_allocator_" not in expr:
            empty.append(f"{where}: {expr}")
    assert checked > 40
    assert not empty, "queries that returned nothing:\n" + "\n".join(empty)


def test_adapter_value_is_mean_queue_time(live):
    """By instance, the adapter query equals the server's own queue time over successes."""
    prom, server = live
    (rule,) = kit.adapter_rules()
    instance = f"127.0.0.1:{server.metrics_port}"
    expr = kit.adapter_substitute(rule["metricsQuery"].replace("[1m]", "[1h]"), "instance", f'instance="{instance}"')
    (sample,) = prom.query(expr)
    queue = prom.query(f'sum(nv_inference_queue_duration_us{{instance="{instance}"}})')
    ok = prom.query(f'sum(nv_inference_request_success{{instance="{instance}"}})')
    mean = float(queue[0]["value"][1]) / float(ok[0]["value"][1])
    assert float(ok[0]["value"][1]) >= 5
    # rate() extrapolates both counters alike, so their ratio is the mean over the window
    assert abs(float(sample["value"][1]) - mean) <= max(1.0, 0.05 * mean), (sample, mean)
