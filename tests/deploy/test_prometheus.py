"""deploy/prometheus with promtool (Debian package prometheus): the scrape configuration and the alert rules are
valid, the unit tests in alerts_test.yml pass, they cover every alert both firing and silent, and they are not
vacuous: an alert that never fires, or one without its `for` delay, makes them fail. The prometheus-adapter query
behind the HPA is evaluated by promtool on known counters, and the generated PrometheusRule matches alerts.yml."""
import re
import shutil
import subprocess
import sys

import pytest
import yaml

import kit
from conftest import DEPLOY, DOCS, load_yaml, run, tool

PROM = DEPLOY / "prometheus"


@pytest.fixture(scope="module")
def promtool():
    return tool("promtool")


def test_promtool_has_rule_unit_tests(promtool):
    r = run([promtool, "--help"])
    assert r.returncode == 0, r.stderr
    assert re.search(r"^\s+test rules", r.stdout + r.stderr, re.M), "this promtool has no `test rules`"


def test_check_config(promtool):
    r = run([promtool, "check", "config", PROM / "prometheus.yml"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout + r.stderr
    cfg = load_yaml(PROM / "prometheus.yml")
    assert [j["job_name"] for j in cfg["scrape_configs"]] == ["cinfer"], "alerts and dashboard select job=\"cinfer\""
    assert cfg["rule_files"] == ["alerts.yml"]
    assert cfg["scrape_configs"][0]["static_configs"][0]["targets"] == ["localhost:8002"]


def test_check_rules(promtool):
    r = run([promtool, "check", "rules", PROM / "alerts.yml"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"SUCCESS: {len(kit.alert_rules())} rules found" in r.stdout


def test_alert_unit_tests_pass(promtool):
    r = run([promtool, "test", "rules", "alerts_test.yml"], cwd=PROM)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


def test_every_alert_is_tested_firing_and_silent():
    tests = yaml.safe_load((PROM / "alerts_test.yml").read_text())
    assert tests["rule_files"] == ["alerts.yml"]
    fired, silent = set(), set()
    for group in tests["tests"]:
        for case in group.get("alert_rule_test", []):
            (fired if case["exp_alerts"] else silent).add(case["alertname"])
    names = [r["alert"] for r in kit.alert_rules()]
    assert len(names) == len(set(names)), "duplicate alert names"
    assert not set(names) - fired, f"never tested firing: {sorted(set(names) - fired)}"
    assert not set(names) - silent, f"never tested silent: {sorted(set(names) - silent)}"


def test_alerts_are_documented():
    """Every alert has a severity, a summary, a description and a runbook anchor that docs/operations.md has."""
    doc = (DOCS / "operations.md").read_text()
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-")
               for h in re.findall(r"^#+ (.*)$", doc, re.M)}
    for r in kit.alert_rules():
        assert r["labels"]["severity"] in ("info", "warning", "critical"), r["alert"]
        ann = r["annotations"]
        assert ann["summary"] and ann["description"], r["alert"]
        path, anchor = ann["runbook"].split("#")
        assert path == "docs/operations.md" and anchor == r["alert"].lower(), ann["runbook"]
        assert anchor in anchors, f"docs/operations.md has no heading for {r['alert']}"


def _mutated_run(promtool, tmp_path, mutate):
    """Runs alerts_test.yml against a copy of alerts.yml changed by mutate(rules list)."""
    doc = yaml.safe_load((PROM / "alerts.yml").read_text())
    mutate([r for g in doc["groups"] for r in g["rules"]])
    (tmp_path / "alerts.yml").write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
    shutil.copy(PROM / "alerts_test.yml", tmp_path / "alerts_test.yml")
    return run([promtool, "test", "rules", "alerts_test.yml"], cwd=tmp_path)


@pytest.mark.parametrize("alert", [r["alert"] for r in kit.alert_rules()])
def test_unit_tests_fail_when_an_alert_never_fires(promtool, tmp_path, alert):
    def mutate(rules):
        for r in rules:
            if r["alert"] == alert:
                r["expr"] = f"({r['expr']}) unless on() vector(1)"
    r = _mutated_run(promtool, tmp_path, mutate)
    assert r.returncode != 0 and f"alertname: {alert}," in r.stdout + r.stderr, r.stdout + r.stderr


@pytest.mark.parametrize("alert", [r["alert"] for r in kit.alert_rules() if "for" in r])
def test_unit_tests_fail_when_an_alert_fires_without_its_delay(promtool, tmp_path, alert):
    def mutate(rules):
        for r in rules:
            if r["alert"] == alert:
                del r["for"]
    r = _mutated_run(promtool, tmp_path, mutate)
    assert r.returncode != 0 and f"alertname: {alert}," in r.stdout + r.stderr, r.stdout + r.stderr


def test_adapter_query_gives_mean_queue_time_per_pod(promtool, tmp_path):
    """The HPA's metric, evaluated by promtool on known counters: pod a queued 60 requests a minute for 1.2 s in
    total (20 ms each), pod b is idle (0, not NaN, so the HPA can scale in), pod c is another job's."""
    (rule,) = kit.adapter_rules()
    query = kit.adapter_substitute(rule["metricsQuery"], "namespace, pod", 'namespace="ml",pod=~"cinfer-a|cinfer-b|other"')
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(
        {"groups": [{"name": "adapter", "rules": [{"record": rule["name"]["as"], "expr": query}]}]}))
    labels = 'job="cinfer",namespace="ml",instance="{i}",pod="{p}",model="m",version="1"'
    series = [
        ("nv_inference_queue_duration_us{" + labels.format(i="a:8002", p="cinfer-a") + "}", "0+1200000x10"),
        ("nv_inference_request_success{" + labels.format(i="a:8002", p="cinfer-a") + "}", "0+60x10"),
        ("nv_inference_queue_duration_us{" + labels.format(i="b:8002", p="cinfer-b") + "}", "500x10"),
        ("nv_inference_request_success{" + labels.format(i="b:8002", p="cinfer-b") + "}", "7x10"),
        ("nv_inference_queue_duration_us{" + labels.format(i="c:8002", p="other").replace('job="cinfer"', 'job="triton"') + "}",
         "0+9000000x10"),
        ("nv_inference_request_success{" + labels.format(i="c:8002", p="other").replace('job="cinfer"', 'job="triton"') + "}",
         "0+60x10"),
    ]
    name = rule["name"]["as"]
    test = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": [{"series": s, "values": v} for s, v in series],
        "promql_expr_test": [{"expr": name, "eval_time": "5m", "exp_samples": [
            {"labels": f'{name}{{namespace="ml",pod="cinfer-a"}}', "value": 20000},
            {"labels": f'{name}{{namespace="ml",pod="cinfer-b"}}', "value": 0}]}]}]}
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test))
    r = run([promtool, "test", "rules", "test.yml"], cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


def test_prometheus_rule_is_generated_from_alerts():
    """deploy/k8s/prometheusrule.yaml carries exactly the groups of alerts.yml (deploy/generate.py --check)."""
    r = subprocess.run([sys.executable, str(DEPLOY / "generate.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rule = load_yaml(DEPLOY / "k8s" / "prometheusrule.yaml")
    assert rule["spec"]["groups"] == yaml.safe_load((PROM / "alerts.yml").read_text())["groups"]


def test_prometheus_rule_groups_pass_promtool(promtool, tmp_path):
    rule = load_yaml(DEPLOY / "k8s" / "prometheusrule.yaml")
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, allow_unicode=True))
    r = run([promtool, "check", "rules", tmp_path / "rules.yml"])
    assert r.returncode == 0, r.stdout + r.stderr
