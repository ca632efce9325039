"""Every PromQL query of the operations kit, where it comes from, and what it reads: the alert rules
(deploy/prometheus/alerts.yml), the Grafana dashboard's panels and variables (deploy/grafana/cinfer-dashboard.json)
and the prometheus-adapter rule behind the HPA (deploy/k8s/prometheus-adapter.yaml). Queries are parsed with
promql-parser (PyPI), after Grafana's and the adapter's template variables are replaced by plain values."""
import json
import re

import promql_parser
import yaml

from conftest import DEPLOY, load_yaml

ALERTS = DEPLOY / "prometheus" / "alerts.yml"
DASHBOARD = DEPLOY / "grafana" / "cinfer-dashboard.json"
ADAPTER = DEPLOY / "k8s" / "prometheus-adapter.yaml"

# Grafana variables -> values that keep a query's meaning (".*" = All) and make it valid PromQL.
GRAFANA_VALUES = {"job": "cinfer", "instance": ".*", "model": ".*", "gpu": ".*", "__rate_interval": "1m",
                  "__interval": "1m", "datasource": "prometheus"}


def grafana_substitute(expr, values=None):
    values = dict(GRAFANA_VALUES, **(values or {}))

    def sub(m):
        name = m.group(1) or m.group(2)
        assert name in values, f"unknown Grafana variable ${name} in {expr!r}"
        return values[name]
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", sub, expr)


def adapter_rules():
    cm = load_yaml(ADAPTER)
    return yaml.safe_load(cm["data"]["config.yaml"])["rules"]


def adapter_substitute(query, group_by="namespace, pod", matchers='namespace="ml",pod=~"cinfer-a|cinfer-b"'):
    """prometheus-adapter's Go-template fields: <<.GroupBy>> (the resource labels) and <<.LabelMatchers>>."""
    out = query.replace("<<.GroupBy>>", group_by).replace("<<.LabelMatchers>>", matchers)
    assert "<<" not in out, f"unsupported adapter template field in {query!r}"
    return out


def dashboard():
    return json.loads(DASHBOARD.read_text())


def dashboard_queries():
    """(where, raw expr) for every panel target and every query variable; label_values(m{...}, label) as m{...}."""
    d = dashboard()
    out = []
    for v in d["templating"]["list"]:
        if v["type"] != "query":
            continue
        m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", v["definition"])
        assert m, f"variable {v['name']}: expected label_values(selector, label), got {v['definition']!r}"
        out.append((f"dashboard variable {v['name']}", m.group(1)))
    for p in d["panels"]:
        for t in p.get("targets", []):
            out.append((f"dashboard panel {p['title']!r} {t['refId']}", t["expr"]))
    return out


def alert_rules():
    return [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]


def all_queries():
    """(where, PromQL ready to parse) for the whole kit."""
    out = [(f"alert {r['alert']}", r["expr"]) for r in alert_rules()]
    out += [(w, grafana_substitute(e)) for w, e in dashboard_queries()]
    for i, r in enumerate(adapter_rules()):
        out.append((f"adapter rule {i} seriesQuery", r["seriesQuery"]))
        out.append((f"adapter rule {i} metricsQuery", adapter_substitute(r["metricsQuery"])))
    return out


class Reads:
    """What one query reads: selectors [(metric name, [(label, op, value)])] and the labels named in by/on/group_*."""

    def __init__(self, expr):
        self.selectors, self.grouping = [], set()
        ast = promql_parser.parse(expr)

        def visit(node):
            kind = type(node).__name__
            if kind == "VectorSelector":
                matchers = [(m.name, str(m.op).split(".")[-1], m.value) for m in node.matchers.matchers]
                self.selectors.append((node.name, matchers))
            elif kind == "AggregateExpr" and node.modifier is not None:
                self.grouping |= set(node.modifier.labels)
            elif kind == "BinaryExpr" and node.modifier is not None:
                if node.modifier.matching is not None:
                    self.grouping |= set(node.modifier.matching.labels)
                if node.modifier.card is not None and getattr(node.modifier.card, "labels", None):
                    self.grouping |= set(node.modifier.card.labels)
        promql_parser.walk(ast, visit)

    @property
    def metrics(self):
        return {name for name, _ in self.selectors}


def family_of(sample_name, histograms):
    """Family name of a series name: histogram series carry _bucket, _sum and _count."""
    for suffix in ("_bucket", "_sum", "_count"):
        if sample_name.endswith(suffix) and sample_name[: -len(suffix)] in histograms:
            return sample_name[: -len(suffix)]
    return sample_name
