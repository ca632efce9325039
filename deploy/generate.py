#!/usr/bin/env python3
"""Writes the generated files of the operations kit from their sources, so they cannot drift apart:
  deploy/grafana/cinfer-dashboard.json  the Grafana dashboard, from the panel list below
  deploy/k8s/prometheusrule.yaml        the Prometheus Operator PrometheusRule, from deploy/prometheus/alerts.yml
Usage: deploy/generate.py            rewrite both
       deploy/generate.py --check    exit 1 if a committed file differs from what would be written (CI runs this)
Needs PyYAML: run it with the project's venv, .venv/bin/python deploy/generate.py."""
import json
import pathlib
import sys

import yaml

DEPLOY = pathlib.Path(__file__).resolve().parent
DASHBOARD = DEPLOY / "grafana" / "cinfer-dashboard.json"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
PROMETHEUS_RULE = DEPLOY / "k8s" / "prometheusrule.yaml"

# ---- the dashboard ----

DS = {"type": "prometheus", "uid": "${datasource}"}
RATE = "[$__rate_interval]"
S = 'job="$job",instance=~"$instance"'          # every series of the selected servers
M = S + ',model=~"$model"'                       # per-model series
G = S + ',gpu_uuid=~"$gpu"'                      # per-GPU series
NOT_CANCELED = ',reason!="CANCELED"'


def q(expr, legend="", instant=False, fmt=None):
    t = {"expr": expr, "legendFormat": legend}
    if instant:
        t["instant"], t["range"] = True, False
    if fmt:
        t["format"] = fmt
    return t


def quantiles(hist, by, label, qs=(0.5, 0.95, 0.99)):
    return [q(f"histogram_quantile({x}, sum by ({by}, le) (rate({hist}_bucket{{{M}}}{RATE})))",
              f"{label} p{int(x * 100)}") for x in qs]


def per_request(counter, legend):
    return q(f"sum by (model) (rate({counter}{{{M}}}{RATE})) / sum by (model) (rate(nv_inference_request_success{{{M}}}{RATE}))",
             legend)


FAILED = f"sum(rate(nv_inference_request_failure{{{M}{NOT_CANCELED}}}{RATE}))"
SUCCEEDED = f"sum(rate(nv_inference_request_success{{{M}}}{RATE}))"

# (row title, [(panel type, title, unit, width, targets, extra options)])
ROWS = [
    ("Overview", [
        ("stat", "Servers up", "none", 4, [q(f"sum(up{{{S}}})")], {}),
        ("stat", "Requests / s", "reqps", 5, [q(SUCCEEDED)], {}),
        ("stat", "Failed requests (not canceled)", "percentunit", 5,
         [q(f"{FAILED} / ({SUCCEEDED} + {FAILED})")], {"thresholds": [(None, "green"), (0.01, "orange"), (0.05, "red")]}),
        ("stat", "Request latency p99", "µs", 5,
         [q(f"histogram_quantile(0.99, sum by (le) (rate(cinfer_inference_request_duration_us_bucket{{{M}}}{RATE})))")], {}),
        ("stat", "GPUs reported", "none", 5, [q(f"count(cinfer_gpu_info{{{G}}})")], {}),
    ]),
    ("Requests", [
        ("timeseries", "Successful requests by model", "reqps", 12,
         [q(f"sum by (model, version) (rate(nv_inference_request_success{{{M}}}{RATE}))", "{{model}} v{{version}}")], {}),
        ("timeseries", "Failed requests by reason", "reqps", 12,
         [q(f"sum by (model, reason) (rate(nv_inference_request_failure{{{M}}}{RATE})) > 0", "{{model}} {{reason}}")], {}),
        ("timeseries", "Request latency (arrival to response)", "µs", 8,
         quantiles("cinfer_inference_request_duration_us", "model", "{{model}}"), {}),
        ("timeseries", "Queue time", "µs", 8,
         quantiles("cinfer_inference_queue_duration_us", "model", "{{model}}", (0.5, 0.99))
         + [per_request("nv_inference_queue_duration_us", "{{model}} mean")], {}),
        ("timeseries", "Compute time (input + infer + output)", "µs", 8,
         quantiles("cinfer_inference_compute_duration_us", "model", "{{model}}", (0.5, 0.99)), {}),
        ("timeseries", "Compute per request (mean)", "µs", 8,
         [per_request("nv_inference_compute_input_duration_us", "{{model}} input"),
          per_request("nv_inference_compute_infer_duration_us", "{{model}} infer"),
          per_request("nv_inference_compute_output_duration_us", "{{model}} output")], {"stack": True}),
        ("timeseries", "Batch size achieved (inferences per execution)", "short", 8,
         [q(f"sum by (model) (rate(nv_inference_count{{{M}}}{RATE})) / sum by (model) (rate(nv_inference_exec_count{{{M}}}{RATE}))",
            "{{model}}")], {}),
        ("timeseries", "Pending requests", "short", 8,
         [q(f"sum by (model) (nv_inference_pending_request_count{{{M}}})", "{{model}}")], {}),
    ]),
    ("GPUs", [
        ("timeseries", "GPU utilisation", "percentunit", 8,
         [q(f"nv_gpu_utilization{{{G}}}", "{{instance}} {{gpu_uuid}}")], {"max": 1}),
        ("timeseries", "GPU memory used", "percentunit", 8,
         [q(f"nv_gpu_memory_used_bytes{{{G}}} / nv_gpu_memory_total_bytes{{{G}}}", "{{instance}} {{gpu_uuid}}")],
         {"max": 1, "thresholds": [(None, "green"), (0.9, "red")]}),
        ("timeseries", "GPU memory used (bytes)", "bytes", 8,
         [q(f"nv_gpu_memory_used_bytes{{{G}}}", "{{instance}} {{gpu_uuid}} used"),
          q(f"nv_gpu_memory_total_bytes{{{G}}}", "{{instance}} {{gpu_uuid}} total")], {}),
        ("timeseries", "GPU memory busy (share of time read or written)", "percentunit", 8,
         [q(f"cinfer_gpu_memory_utilization{{{G}}}", "{{instance}} {{gpu_uuid}}")], {"max": 1}),
        ("timeseries", "GPU temperature", "celsius", 8,
         [q(f"cinfer_gpu_temperature_celsius{{{G}}}", "{{instance}} {{gpu_uuid}}")],
         {"thresholds": [(None, "green"), (85, "red")]}),
        ("timeseries", "GPU power", "watt", 8,
         [q(f"nv_gpu_power_usage{{{G}}}", "{{instance}} {{gpu_uuid}}"),
          q(f"nv_gpu_power_limit{{{G}}}", "{{instance}} {{gpu_uuid}} limit")], {}),
        ("state-timeline", "GPU clock throttle reasons (1 = active)", "none", 12,
         [q(f"cinfer_gpu_clock_throttle_reason{{{G}}}", "{{gpu_uuid}} {{reason}}")], {}),
        ("timeseries", "GPU ECC errors (volatile count)", "short", 12,
         [q(f"cinfer_gpu_ecc_errors{{{G}}}", "{{instance}} {{gpu_uuid}} {{type}}")], {}),
        ("timeseries", "GPU PCIe throughput", "Bps", 12,
         [q(f"cinfer_gpu_pcie_throughput_bytes_per_second{{{G}}}", "{{instance}} {{gpu_uuid}} {{direction}}")], {}),
        ("table", "GPUs and MIG instances", "none", 12,
         [q(f"cinfer_gpu_info{{{G}}}", instant=True, fmt="table")], {}),
    ]),
    ("Memory", [
        ("timeseries", "Model parameter memory", "bytes", 12,
         [q(f"cinfer_model_memory_bytes{{{M}}}", "{{model}} v{{version}} {{kind}} {{device_id}}")], {}),
        ("timeseries", "GPU allocator memory", "bytes", 12,
         [q(f"cinfer_gpu_allocator_allocated_bytes{{{G}}}", "{{instance}} cuda:{{device}} allocated"),
          q(f"cinfer_gpu_allocator_reserved_bytes{{{G}}}", "{{instance}} cuda:{{device}} reserved"),
          q(f"cinfer_gpu_allocator_peak_reserved_bytes{{{G}}}", "{{instance}} cuda:{{device}} peak reserved"),
          q(f"cinfer_gpu_allocator_inactive_split_bytes{{{G}}}", "{{instance}} cuda:{{device}} fragmented"),
          q(f"cinfer_gpu_allocator_limit_bytes{{{G}}} > 0", "{{instance}} cuda:{{device}} limit")], {}),
        ("timeseries", "GPU allocator events", "ops", 12,
         [q(f"rate(cinfer_gpu_allocator_device_mallocs{{{G}}}{RATE})", "{{instance}} cuda:{{device}} cudaMalloc"),
          q(f"rate(cinfer_gpu_allocator_device_frees{{{G}}}{RATE})", "{{instance}} cuda:{{device}} cudaFree"),
          q(f"rate(cinfer_gpu_allocator_alloc_retries{{{G}}}{RATE})", "{{instance}} cuda:{{device}} retries"),
          q(f"rate(cinfer_gpu_allocator_ooms{{{G}}}{RATE})", "{{instance}} cuda:{{device}} out of memory")], {}),
        ("timeseries", "Pinned host staging memory and live blocks", "bytes", 12,
         [q(f"cinfer_gpu_allocator_pinned_reserved_bytes{{{G}}}", "{{instance}} cuda:{{device}} pinned"),
          q(f"cinfer_gpu_allocator_active_blocks{{{G}}}", "{{instance}} cuda:{{device}} live blocks")],
         {"overrides": [("/live blocks/", "short")]}),
    ]),
    ("Host", [
        ("timeseries", "CPU", "percentunit", 8,
         [q(f"nv_cpu_utilization{{{S}}}", "{{instance}} machine"),
          q(f"rate(process_cpu_seconds_total{{{S}}}{RATE})", "{{instance}} cinfer-server (cores)")], {}),
        ("timeseries", "CPU time per inference", "µs", 8,
         [q(f"cinfer_cpu_time_per_inference_us{{{S}}}", "{{instance}}")], {}),
        ("timeseries", "Host memory", "bytes", 8,
         [q(f"nv_cpu_memory_used_bytes{{{S}}}", "{{instance}} machine used"),
          q(f"nv_cpu_memory_total_bytes{{{S}}}", "{{instance}} machine total"),
          q(f"process_resident_memory_bytes{{{S}}}", "{{instance}} cinfer-server resident")], {}),
    ]),
]


def variable(name, label, query, multi):
    v = {"name": name, "label": label, "type": "query", "datasource": DS, "definition": query,
         "query": {"query": query, "refId": f"{name}-variable"}, "refresh": 2, "sort": 1, "hide": 0,
         "multi": multi, "includeAll": multi, "options": [], "current": {}}
    if multi:
        v["allValue"] = ".*"
    return v


def panel(pid, kind, title, unit, width, x, y, targets, extra):
    height = 5 if kind == "stat" else 8
    thresholds = extra.get("thresholds", [(None, "green")])
    defaults = {"unit": unit, "thresholds": {"mode": "absolute", "steps": [
        {"color": color, "value": value} for value, color in thresholds]}}
    if "max" in extra:
        defaults["min"], defaults["max"] = 0, extra["max"]
    if kind == "timeseries":
        defaults["custom"] = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10 if extra.get("stack") else 0,
                              "showPoints": "never", "spanNulls": False,
                              "stacking": {"mode": "normal" if extra.get("stack") else "none", "group": "A"},
                              "thresholdsStyle": {"mode": "line" if "thresholds" in extra else "off"}}
    if kind == "state-timeline":
        defaults["mappings"] = [{"type": "value", "options": {"0": {"text": "no", "color": "green"},
                                                              "1": {"text": "throttled", "color": "red"}}}]
        defaults["color"] = {"mode": "thresholds"}
    overrides = [{"matcher": {"id": "byRegexp", "options": pattern}, "properties": [{"id": "unit", "value": u}]}
                 for pattern, u in extra.get("overrides", [])]
    options = {
        "timeseries": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                       "tooltip": {"mode": "multi", "sort": "desc"}},
        "stat": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}, "colorMode": "value",
                 "graphMode": "area", "justifyMode": "auto", "orientation": "auto", "textMode": "auto"},
        "state-timeline": {"mergeValues": True, "showValue": "never", "alignValue": "left", "rowHeight": 0.9,
                           "legend": {"displayMode": "list", "placement": "bottom", "showLegend": False},
                           "tooltip": {"mode": "single", "sort": "none"}},
        "table": {"showHeader": True, "cellHeight": "sm", "footer": {"show": False, "reducer": ["sum"], "fields": ""}},
    }[kind]
    p = {"id": pid, "type": kind, "title": title, "datasource": DS,
         "gridPos": {"h": height, "w": width, "x": x, "y": y},
         "fieldConfig": {"defaults": defaults, "overrides": overrides}, "options": options,
         "targets": [dict(t, refId=chr(ord("A") + i), datasource=DS) for i, t in enumerate(targets)]}
    if kind == "table":
        p["transformations"] = [{"id": "organize", "options": {
            "excludeByName": {"Time": True, "Value": True, "__name__": True, "job": True},
            "indexByName": {"instance": 0, "gpu_uuid": 1, "index": 2, "name": 3, "mig_gi": 4, "mig_ci": 5}}}]
    return p


def dashboard():
    panels, pid, y = [], 1, 0
    for title, row in ROWS:
        panels.append({"id": pid, "type": "row", "title": title, "collapsed": False, "panels": [],
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}})
        pid, y, x, row_height = pid + 1, y + 1, 0, 0
        for kind, ptitle, unit, width, targets, extra in row:
            if x + width > 24:
                x, y, row_height = 0, y + row_height, 0
            p = panel(pid, kind, ptitle, unit, width, x, y, targets, extra)
            panels.append(p)
            pid, x, row_height = pid + 1, x + width, max(row_height, p["gridPos"]["h"])
        y += row_height
    return {
        "title": "cinfer",
        "uid": "cinfer-overview",
        "description": "cinfer-server: requests, latency histograms, queue time, batching, GPUs (NVML), allocator and host. "
                       "Generated by deploy/generate.py; see docs/operations.md.",
        "tags": ["cinfer", "inference", "gpu"],
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s",
        "timezone": "browser",
        "annotations": {"list": []},
        "links": [],
        "templating": {"list": [
            {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus", "hide": 0,
             "refresh": 1, "regex": "", "options": [], "current": {}},
            variable("job", "Job", "label_values(nv_cpu_memory_total_bytes, job)", False) | {
                "current": {"selected": True, "text": "cinfer", "value": "cinfer"}},
            variable("instance", "Server", 'label_values(nv_cpu_memory_total_bytes{job="$job"}, instance)', True),
            variable("model", "Model", 'label_values(nv_inference_count{job="$job",instance=~"$instance"}, model)', True),
            variable("gpu", "GPU", 'label_values(cinfer_gpu_info{job="$job",instance=~"$instance"}, gpu_uuid)', True),
        ]},
        "panels": panels,
    }


def dashboard_text():
    return json.dumps(dashboard(), indent=2, ensure_ascii=False) + "\n"


# ---- the PrometheusRule ----

class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper, s):
    return dumper.represent_scalar("tag:yaml.org,2002:str", s, style="|" if "\n" in s else None)


_Dumper.add_representer(str, _str)


def prometheus_rule_text():
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    rule = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": "cinfer", "labels": {"app.kubernetes.io/name": "cinfer"}},
            "spec": {"groups": groups}}
    head = ("# Prometheus Operator PrometheusRule with the alert rules of deploy/prometheus/alerts.yml (generated from it by\n"
            "# deploy/generate.py: edit alerts.yml, not this file). Your Prometheus resource's ruleSelector must match its\n"
            "# labels (kube-prometheus-stack: add `release: <its release name>`).\n")
    return head + yaml.dump(rule, Dumper=_Dumper, sort_keys=False, width=1000, allow_unicode=True)


OUTPUTS = {DASHBOARD: dashboard_text, PROMETHEUS_RULE: prometheus_rule_text}


def main(argv):
    check = "--check" in argv
    stale = []
    for path, make in OUTPUTS.items():
        text = make()
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(path)
        else:
            path.write_text(text)
            print(f"wrote {path.relative_to(DEPLOY.parent)}")
    for path in stale:
        print(f"{path.relative_to(DEPLOY.parent)} is out of date: run deploy/generate.py", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
