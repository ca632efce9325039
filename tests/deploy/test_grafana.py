"""deploy/grafana/cinfer-dashboard.json: importable as is (Grafana's dashboard JSON model: no instance id, a
Prometheus data-source variable every panel and query uses, unique panel ids, panels on the 24-column grid without
overlaps), every template variable it uses is defined, every query parses as PromQL, units are Grafana unit ids, it
shows what the issue asks for, and it is what deploy/generate.py writes. That the queries read exported series is
test_metrics_exported.py; that they return data from a real Prometheus is test_prometheus_live.py."""
import json
import re
import subprocess
import sys

import promql_parser
import pytest

import kit
from conftest import DEPLOY

UNITS = {"none", "short", "percentunit", "reqps", "ops", "µs", "ms", "s", "bytes", "Bps", "celsius", "watt"}
PANEL_TYPES = {"row", "timeseries", "stat", "state-timeline", "table"}
BUILTIN_VARIABLES = {"__rate_interval", "__interval"}


@pytest.fixture(scope="module")
def dash():
    return json.loads(kit.DASHBOARD.read_text())


def test_generated_file_is_current():
    r = subprocess.run([sys.executable, str(DEPLOY / "generate.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_importable_as_is(dash):
    assert "id" not in dash and "__inputs" not in dash, "an export with an instance id or __inputs needs editing to import"
    assert dash["uid"] == "cinfer-overview" and dash["title"] == "cinfer"
    assert isinstance(dash["schemaVersion"], int) and dash["schemaVersion"] >= 36
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    ds = variables["datasource"]
    assert ds["type"] == "datasource" and ds["query"] == "prometheus"
    for v in variables.values():
        if v["type"] == "query":
            assert v["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, v["name"]
            assert v["query"]["query"] == v["definition"]
    assert variables["job"]["current"]["value"] == "cinfer", "the job the scrape configs and alert rules use"
    for name in ("instance", "model", "gpu"):
        assert variables[name]["multi"] and variables[name]["includeAll"] and variables[name]["allValue"] == ".*"


def test_panels_layout_and_queries(dash):
    ids, cells = set(), {}
    for p in dash["panels"]:
        assert p["type"] in PANEL_TYPES, p["type"]
        assert p["id"] not in ids, f"duplicate panel id {p['id']}"
        ids.add(p["id"])
        g = p["gridPos"]
        assert g["x"] >= 0 and g["w"] >= 1 and g["x"] + g["w"] <= 24 and g["h"] >= 1, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"panels {cells.get((x, y))!r} and {p['title']!r} overlap"
                cells[(x, y)] = p["title"]
        if p["type"] == "row":
            assert not p["panels"] and not p["collapsed"]
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["fieldConfig"]["defaults"]["unit"] in UNITS, (p["title"], p["fieldConfig"]["defaults"]["unit"])
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["datasource"] == p["datasource"]
            promql_parser.parse(kit.grafana_substitute(t["expr"]))


def test_variables_used_are_defined(dash):
    defined = {v["name"] for v in dash["templating"]["list"]} | BUILTIN_VARIABLES
    text = json.dumps(dash)
    used = set(re.findall(r"\$\{(\w+)\}|\$(\w+)", text))
    used = {a or b for a, b in used}
    assert used <= defined, f"undefined variables: {sorted(used - defined)}"
    assert {"job", "instance", "model", "gpu", "datasource", "__rate_interval"} <= used


def test_shows_what_the_issue_asks_for(dash):
    """Per GPU: utilisation, memory, temperature, power, throttle reasons, ECC; per model: request rate, latency
    percentiles from the histograms, queue time, batch size achieved, failures; allocator memory."""
    exprs = {p["title"]: " ".join(t["expr"] for t in p.get("targets", [])) for p in dash["panels"]}
    wanted = {
        "GPU utilisation": r"nv_gpu_utilization",
        "GPU memory used": r"nv_gpu_memory_used_bytes\{.*\} / nv_gpu_memory_total_bytes",
        "GPU temperature": r"cinfer_gpu_temperature_celsius",
        "GPU power": r"nv_gpu_power_usage.*nv_gpu_power_limit",
        "GPU clock throttle reasons (1 = active)": r"cinfer_gpu_clock_throttle_reason",
        "GPU ECC errors (volatile count)": r"cinfer_gpu_ecc_errors",
        "Successful requests by model": r"sum by \(model, version\) \(rate\(nv_inference_request_success",
        "Request latency (arrival to response)": r"histogram_quantile\(0\.99, sum by \(model, le\) \(rate\(cinfer_inference_request_duration_us_bucket",
        "Queue time": r"histogram_quantile\(0\.99, sum by \(model, le\) \(rate\(cinfer_inference_queue_duration_us_bucket",
        "Batch size achieved (inferences per execution)": r"rate\(nv_inference_count.*/ .*rate\(nv_inference_exec_count",
        "Failed requests by reason": r"sum by \(model, reason\) \(rate\(nv_inference_request_failure",
        "GPU allocator memory": r"cinfer_gpu_allocator_reserved_bytes",
    }
    for title, pattern in wanted.items():
        assert title in exprs, f"no panel {title!r}"
        assert re.search(pattern, exprs[title]), f"{title}: {exprs[title]}"
    rows = [p["title"] for p in dash["panels"] if p["type"] == "row"]
    assert rows == ["Overview", "Requests", "GPUs", "Memory", "Host"]
