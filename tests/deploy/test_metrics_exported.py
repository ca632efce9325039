"""Every metric the alert rules, the Grafana dashboard and the HPA's prometheus-adapter rule query is one that
cinfer-server really exports: a real server (with the fake NVML of tests/server/fake_nvml.c, so GPU series exist)
is scraped after some traffic, and every selector of every query is checked against the page: the metric name, the
label names it matches on (and groups by), and the label values it asks for by equality or by a list of
alternatives. Exceptions are named: `up` (Prometheus) and kube-state-metrics' readiness series."""
import os
import re
import subprocess
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

import kit
from conftest import ROOT, TARGET_LABELS, Server, fake_nvml, infer, write_repository

# Series that come from elsewhere: Prometheus itself and kube-state-metrics.
EXTERNAL = {"up": "Prometheus (scrape health)", "kube_pod_container_status_ready": "kube-state-metrics"}
# Families that appear only while a CUDA device is in use (the caching allocator's statistics).
CUDA_ONLY = re.compile(r"^cinfer_gpu_allocator_")


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: -?\d+)?$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def page_index(text):
    """{series name: {label: {values}}} and the set of histogram families of a /metrics page, with series named as
    Prometheus stores them (prometheus_client's parser would add _total to counters; Prometheus does not)."""
    index, histograms = {}, set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            if kind == "histogram":
                histograms.add(name)
            continue
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        float(m.group(3))
        labels = index.setdefault(m.group(1), {})
        for k, v in LABEL.findall(m.group(2) or ""):
            labels.setdefault(k, set()).add(v)
    list(text_string_to_metric_families(text))  # and the reference parser accepts the page
    return index, histograms


def gpu_present():
    cli = os.environ.get("CINFER_CLI", str(ROOT / "build" / "cinfer"))
    try:
        r = subprocess.run([cli, "gpus"], capture_output=True, text=True, timeout=60)
    except OSError:
        return False
    return r.returncode == 0 and "GPU" in r.stdout


@pytest.fixture(scope="module")
def scraped(tmp_path_factory):
    """The page of a server with the fake NVML's two GPUs (one in MIG mode), after successful and failed requests
    and two telemetry samples (the CPU-time-per-inference gauge needs inferences between two of them)."""
    tmp = tmp_path_factory.mktemp("scrape")
    s = Server(write_repository(tmp / "models"), ["--device", "cpu"], {"CINFER_NVML_LIBRARY": fake_nvml()}).wait()
    try:
        s.metrics()
        for batch in (1, 2, 3):
            assert infer(s, batch)[0] == 200
        assert s.get("/v2/models/dense/infer", method="POST", body='{"inputs": []}')[0] == 400  # counted as a failure
        time.sleep(0.6)  # the telemetry sample lives 0.5 s
        yield s.metrics()
    finally:
        rc = s.stop()
    assert rc == 0, f"cinfer-server exit status {rc} after SIGTERM:\n{s.logs()}"


def test_the_page_has_gpu_model_and_host_series(scraped):
    """The fixture really exercises what the kit reads (a guard against a silently empty page)."""
    index, histograms = page_index(scraped)
    for name in ("nv_gpu_utilization", "cinfer_gpu_temperature_celsius", "cinfer_gpu_ecc_errors",
                 "cinfer_gpu_clock_throttle_reason", "nv_inference_request_success", "nv_cpu_utilization",
                 "cinfer_cpu_time_per_inference_us"):
        assert name in index, f"{name} missing from the page:\n{scraped}"
    assert "cinfer_inference_queue_duration_us" in histograms


def check_queries(queries, index):
    """Problems found in [(where, expr)] against a page index; also returns the metric names read and the CUDA-only
    families that were not on the page."""
    cuda_only, problems, checked = set(), [], set()
    for where, expr in queries:
        reads = kit.Reads(expr)
        families = set()
        for name, matchers in reads.selectors:
            if not name:
                problems.append(f"{where}: a selector without a literal metric name ({expr!r})")
                continue
            checked.add(name)
            if name in EXTERNAL:
                continue
            if CUDA_ONLY.match(name) and name not in index:
                cuda_only.add(name)
                continue
            if name not in index:
                problems.append(f"{where}: {name} is not on cinfer-server's /metrics page")
                continue
            labels = index[name]
            families.add(name)
            for label, op, val in matchers:
                if label in TARGET_LABELS:
                    continue
                if label not in labels:
                    problems.append(f"{where}: {name} has no label {label!r} (it has {sorted(labels)})")
                elif op in ("Equal", "NotEqual") and val not in labels[label]:
                    problems.append(f"{where}: {name}{{{label}={val!r}}} matches no value the server prints "
                                    f"({sorted(labels[label])})")
                elif op in ("Re", "NotRe") and re.fullmatch(r"[\w|]+", val):
                    missing = [alt for alt in val.split("|") if alt not in labels[label]]
                    if missing:
                        problems.append(f"{where}: {name}{{{label}=~...}} names values the server never prints: "
                                        f"{missing} (it prints {sorted(labels[label])})")
        known = set(TARGET_LABELS) | {"le"}
        for f in families:
            known |= set(index[f])
        if not any(CUDA_ONLY.match(n or "") for n in reads.metrics):
            for label in sorted(reads.grouping - known):
                problems.append(f"{where}: groups or matches on label {label!r}, which none of "
                                f"{sorted(reads.metrics)} has")
    return problems, checked, cuda_only


def test_every_queried_metric_is_exported(scraped):
    index, _ = page_index(scraped)
    problems, checked, cuda_only = check_queries(kit.all_queries(), index)
    assert not problems, "\n".join(problems)
    # The kit reads what the issue asks for.
    for name in ("cinfer_gpu_temperature_celsius", "nv_gpu_memory_used_bytes", "nv_gpu_utilization", "cinfer_gpu_ecc_errors",
                 "cinfer_gpu_clock_throttle_reason", "cinfer_inference_queue_duration_us_bucket",
                 "nv_inference_request_failure", "nv_gpu_power_usage", "cinfer_gpu_allocator_reserved_bytes",
                 "cinfer_inference_request_duration_us_bucket", "nv_inference_exec_count", "nv_inference_count"):
        assert name in checked, f"nothing in the kit reads {name}"
    if cuda_only:
        check_cuda_only_families(cuda_only)


@pytest.mark.parametrize("expr, complaint", [
    ('cinfer_gpu_temprature_celsius > 85', "cinfer_gpu_temprature_celsius is not on"),
    ('cinfer_gpu_ecc_errors{kind="uncorrected"}', "has no label 'kind'"),
    ('cinfer_gpu_ecc_errors{type="uncorected"}', "matches no value"),
    ('cinfer_gpu_clock_throttle_reason{reason=~"hw_slowdown|thermal"}', "['thermal']"),
    ('sum by (gpu) (nv_gpu_utilization)', "label 'gpu'"),
    ('{__name__=~"nv_gpu_.*"}', "without a literal metric name"),
])
def test_the_check_catches_mistakes(scraped, expr, complaint):
    """A misspelt metric, label, label value or grouping label is reported (the check is not vacuous)."""
    problems, _, _ = check_queries([("example", expr)], page_index(scraped)[0])
    assert any(complaint in p for p in problems), problems


def check_cuda_only_families(names):
    """The allocator families need a CUDA device in use. With a GPU, a server on it must print them; without one
    (CI here), they are checked in the metrics writer's source: the family names and their label set."""
    if gpu_present():
        pytest.fail(f"a GPU is present but these were not scraped; rerun with the server on --device cuda: {sorted(names)}")
    src = (ROOT / "src" / "serve" / "metrics.c").read_text()
    missing = [n for n in sorted(names) if f'"{n}"' not in src]
    assert not missing, f"allocator families the kit reads that src/serve/metrics.c does not write: {missing}"
    assert 'device=\\"%d\\",gpu_uuid=\\"%s\\"' in src, "allocator series no longer carry device and gpu_uuid labels"
    print(f"no GPU: {len(names)} allocator families checked in src/serve/metrics.c only: {sorted(names)}")


def test_adapter_rule_maps_an_exported_series_to_the_hpa_metric(scraped):
    """The prometheus-adapter rule discovers a series the server exports and names it as the HPA asks."""
    from conftest import DEPLOY, load_yaml
    index, _ = page_index(scraped)
    hpa = load_yaml(DEPLOY / "k8s" / "hpa.yaml")
    wanted = {m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"}
    served = set()
    for rule in kit.adapter_rules():
        series = kit.Reads(rule["seriesQuery"]).metrics
        assert len(series) == 1
        (name,) = series
        assert name in index, f"adapter seriesQuery reads {name}, which the server does not export"
        as_name = re.sub(rule["name"]["matches"], rule["name"]["as"], name)
        assert as_name != name, "the adapter rule's name.matches does not match its own series"
        served.add(as_name)
        assert set(rule["resources"]["overrides"]) == {"namespace", "pod"}
    assert wanted and wanted <= served, f"HPA metrics {wanted}, adapter serves {served}"
