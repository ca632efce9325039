"""deploy/k8s and deploy/kserve: every manifest validates, strictly (unknown fields are errors), against the schemas
of a pinned Kubernetes release (kubernetes-validate from PyPI) or, for the custom resources, against crd_schemas.py
with the same core types; and the pieces fit together: selectors select, ports and probes name what the server
serves (a real cinfer-server is started with the manifests' own arguments and probed on the probes' paths), the
GPU, MIG and time-slicing resources are well-formed, the MIG variant differs from the Deployment only where it
must, the HPA's metric is the one the adapter rule serves, and the pod's user is the image's."""
import copy
import re

import jsonschema
import kubernetes_validate
import pytest
import referencing
import yaml
from kubernetes_validate import utils as kv_utils

import crd_schemas
import kit
from conftest import DEPLOY, dockerfile, load_yaml_docs

K8S_VERSION = "1.33.0"  # the Kubernetes release the manifests are validated against
MANIFESTS = sorted((DEPLOY / "k8s").glob("*.yaml")) + sorted((DEPLOY / "kserve").glob("*.yaml"))
QUANTITY = re.compile(r"^(\d+(\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")
MIG_RESOURCE = re.compile(r"^nvidia\.com/mig-\d+g\.\d+gb$")


def k8s_definitions():
    d = f"kubernetes-json-schema/v{K8S_VERSION}-local-strict/_definitions.json"
    return referencing.Resource.from_contents(kv_utils.schema_contents(d, K8S_VERSION))


def validate(doc):
    """Raises jsonschema.ValidationError (or kubernetes_validate's errors) when doc is not valid."""
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key in crd_schemas.SCHEMAS:
        registry = k8s_definitions() @ referencing.Registry()
        jsonschema.Draft202012Validator(crd_schemas.SCHEMAS[key], registry=registry).validate(doc)
    else:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def docs_of(path):
    return load_yaml_docs(path)


def by_kind(kind, name=None):
    found = [d for p in MANIFESTS for d in docs_of(p) if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert found, f"no {kind} {name or ''} in deploy/"
    return found


def test_the_kit_has_what_the_issue_asks_for():
    kinds = sorted((d["kind"], d["metadata"]["name"]) for p in MANIFESTS for d in docs_of(p))
    for want in [("Deployment", "cinfer"), ("Deployment", "cinfer-mig"), ("Service", "cinfer"),
                 ("ServiceMonitor", "cinfer"), ("HorizontalPodAutoscaler", "cinfer"), ("ConfigMap", "adapter-config"),
                 ("ConfigMap", "time-slicing-config"), ("PrometheusRule", "cinfer"), ("ServingRuntime", "cinfer"),
                 ("InferenceService", "resnet")]:
        assert want in kinds, f"{want} missing: {kinds}"


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_manifest_validates_strictly(path):
    assert path.read_text().startswith("# "), f"{path.name}: the file opens with a comment saying what it is for"
    docs = docs_of(path)
    assert docs
    for doc in docs:
        try:
            validate(doc)
        except (jsonschema.ValidationError, kubernetes_validate.ValidationError) as e:
            pytest.fail(f"{path.name}: {doc['kind']}/{doc['metadata']['name']}: {'.'.join(map(str, e.path))}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError as e:
            pytest.fail(f"{path.name}: no schema for {doc['kind']} {doc['apiVersion']} (add one to crd_schemas.py): {e.message}")


@pytest.mark.parametrize("kind, edit", [
    ("Deployment", lambda d: d["spec"]["template"]["spec"]["containers"][0].update(readinesProbe={})),
    ("Deployment", lambda d: d["spec"]["template"]["spec"]["containers"][0]["startupProbe"].update(failureThreshold="60")),
    ("HorizontalPodAutoscaler", lambda d: d["spec"].update(minReplica=1)),
    ("ServiceMonitor", lambda d: d["spec"]["endpoints"][0].update(intervall="10s")),
    ("ServiceMonitor", lambda d: d["spec"]["endpoints"][0].update(interval="ten seconds")),
    ("ServingRuntime", lambda d: d["spec"]["containers"][0].update(readinesProbe={})),
    ("ServingRuntime", lambda d: d["spec"].update(protocolVersions=["v3"])),
    ("InferenceService", lambda d: d["spec"]["predictor"]["model"]["resources"].update(limit={})),
    ("PrometheusRule", lambda d: d["spec"]["groups"][0]["rules"][0].update(fore="5m")),
])
def test_validation_is_strict(kind, edit):
    """A misspelt field or a wrong type fails validation, in core kinds and in the custom resources alike."""
    doc = copy.deepcopy(by_kind(kind)[0])
    edit(doc)
    with pytest.raises((jsonschema.ValidationError, kubernetes_validate.ValidationError)):
        validate(doc)


def containers():
    out = []
    for d in by_kind("Deployment"):
        out += [(d["metadata"]["name"], c) for c in d["spec"]["template"]["spec"]["containers"]]
    out += [("servingruntime", c) for c in by_kind("ServingRuntime")[0]["spec"]["containers"]]
    out += [("inferenceservice", by_kind("InferenceService")[0]["spec"]["predictor"]["model"])]
    return out


def test_resource_quantities():
    for where, c in containers():
        res = c["resources"]
        for section in ("requests", "limits"):
            for name, q in res.get(section, {}).items():
                assert QUANTITY.match(str(q)), f"{where}: {section}.{name}: {q!r} is not a Kubernetes quantity"
                if name.startswith("nvidia.com/"):
                    assert isinstance(q, int) and q >= 1, f"{where}: {name} must be a whole number of devices"
        for name, q in res.get("requests", {}).items():  # extended resources: request == limit (no overcommit)
            if name.startswith("nvidia.com/"):
                assert res["limits"].get(name) == q, f"{where}: {name} request and limit differ"
        assert "memory" in res.get("limits", {}), f"{where}: no memory limit"


def gpu_resources(container):
    return {k for k in container["resources"]["limits"] if k.startswith("nvidia.com/")}


def test_gpu_deployment():
    (d,) = by_kind("Deployment", "cinfer")
    pod = d["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert gpu_resources(c) == {"nvidia.com/gpu"}
    env = {e["name"]: e["value"] for e in c["env"]}
    n = c["resources"]["limits"]["nvidia.com/gpu"]
    assert env["CUDA_VISIBLE_DEVICES"] == ",".join(str(i) for i in range(n)), "explicit CUDA_VISIBLE_DEVICES for the pod's GPUs"
    assert c["args"][c["args"].index("--device") + 1] == "cuda"
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"http": int(c["args"][c["args"].index("--http-port") + 1]),
                     "metrics": int(c["args"][c["args"].index("--metrics-port") + 1])}
    assert c["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    assert c["startupProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    exit_timeout = int(c["args"][c["args"].index("--exit-timeout-secs") + 1])
    pre_stop = c["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pod["terminationGracePeriodSeconds"] > exit_timeout + pre_stop, "SIGKILL before the server drains"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    repo = c["args"][c["args"].index("--model-repository") + 1]
    assert mounts[repo]["readOnly"] is True
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True


def test_pod_user_is_the_images_user():
    users = set()
    for name in ("Dockerfile", "Dockerfile.cpu"):
        parser = dockerfile(DEPLOY / "docker" / name)
        users.add([i["value"] for i in parser.structure if i["instruction"] == "USER"][-1])
    (user,) = users
    uid, gid = (int(x) for x in user.split(":"))
    for d in by_kind("Deployment"):
        sc = d["spec"]["template"]["spec"]["securityContext"]
        assert (sc["runAsUser"], sc["runAsGroup"]) == (uid, gid)
    assert by_kind("ServingRuntime")[0]["spec"]["containers"][0]["securityContext"]["runAsUser"] == uid


def test_mig_variant_differs_only_where_it_must():
    (gpu,) = by_kind("Deployment", "cinfer")
    (mig,) = by_kind("Deployment", "cinfer-mig")
    c = mig["spec"]["template"]["spec"]["containers"][0]
    (res,) = gpu_resources(c)
    assert MIG_RESOURCE.match(res), f"{res}: MIG slices are nvidia.com/mig-<g>g.<gb>gb"
    assert c["resources"]["limits"][res] == 1
    expected = copy.deepcopy(gpu)
    expected["metadata"]["name"] = "cinfer-mig"
    for labels in (expected["metadata"]["labels"], expected["spec"]["selector"]["matchLabels"],
                   expected["spec"]["template"]["metadata"]["labels"]):
        labels["app.kubernetes.io/instance"] = "cinfer-mig"
    expected["spec"]["template"]["spec"]["containers"][0]["resources"] = c["resources"]
    assert mig == expected
    # both variants are selected by the Service, the ServiceMonitor (through it) and the PodDisruptionBudget
    assert gpu["spec"]["selector"]["matchLabels"] != mig["spec"]["selector"]["matchLabels"]


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def test_service_monitor_and_budget_select_the_pods():
    (svc,) = by_kind("Service", "cinfer")
    (sm,) = by_kind("ServiceMonitor", "cinfer")
    (pdb,) = by_kind("PodDisruptionBudget", "cinfer")
    for d in by_kind("Deployment"):
        pod_labels = d["spec"]["template"]["metadata"]["labels"]
        assert selects(svc["spec"]["selector"], pod_labels)
        assert selects(pdb["spec"]["selector"]["matchLabels"], pod_labels)
        assert selects(d["spec"]["selector"]["matchLabels"], pod_labels)
        port_names = {p["name"] for p in d["spec"]["template"]["spec"]["containers"][0]["ports"]}
        assert {p["targetPort"] for p in svc["spec"]["ports"]} <= port_names
    assert selects(sm["spec"]["selector"]["matchLabels"], svc["metadata"]["labels"])
    assert [e["port"] for e in sm["spec"]["endpoints"]] == ["metrics"]
    assert "metrics" in {p["name"] for p in svc["spec"]["ports"]}
    assert sm["spec"]["endpoints"][0]["path"] == "/metrics"
    # the Operator names the job after the Service (no jobLabel): the job the alert rules and dashboard select
    assert "jobLabel" not in sm["spec"] and svc["metadata"]["name"] == "cinfer"
    assert all('job="cinfer"' in r["expr"] for r in kit.alert_rules() if r["alert"] != "CinferInstanceNotReady")


def test_hpa_scales_the_deployment_on_the_adapter_metric():
    (hpa,) = by_kind("HorizontalPodAutoscaler", "cinfer")
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"], target["apiVersion"]) == ("Deployment", "cinfer", "apps/v1")
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods"
    names = {r["name"]["as"] for r in kit.adapter_rules()}
    assert metric["pods"]["metric"]["name"] in names
    assert metric["pods"]["target"]["type"] == "AverageValue" and QUANTITY.match(metric["pods"]["target"]["averageValue"])
    assert 1 <= hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
    assert "replicas" in by_kind("Deployment", "cinfer")[0]["spec"]
    for rule in kit.adapter_rules():
        assert set(rule) == {"seriesQuery", "resources", "name", "metricsQuery"}
        assert re.search(rule["name"]["matches"], next(iter(kit.Reads(rule["seriesQuery"]).metrics)))
        assert "<<.GroupBy>>" in rule["metricsQuery"] and "<<.LabelMatchers>>" in rule["metricsQuery"]


def test_time_slicing_config():
    (cm,) = by_kind("ConfigMap", "time-slicing-config")
    assert cm["metadata"]["namespace"] == "gpu-operator"
    for key, text in cm["data"].items():
        cfg = yaml.safe_load(text)
        assert cfg["version"] == "v1"
        assert cfg["flags"]["migStrategy"] in ("none", "single", "mixed")
        ts = cfg["sharing"]["timeSlicing"]
        assert set(ts) <= {"renameByDefault", "failRequestsGreaterThanOne", "resources"}
        assert ts["failRequestsGreaterThanOne"] is True, "a pod asking for 2 slices would get 1 GPU's time, not 2"
        for r in ts["resources"]:
            assert set(r) <= {"name", "rename", "replicas", "devices"}
            assert r["name"] == "nvidia.com/gpu" or MIG_RESOURCE.match(r["name"])
            assert isinstance(r["replicas"], int) and r["replicas"] >= 2


def test_serving_runtime_speaks_v2_to_kserve():
    (rt,) = by_kind("ServingRuntime", "cinfer")
    spec = rt["spec"]
    assert "v2" in spec["protocolVersions"]
    assert any(f["name"] == "onnx" and f.get("autoSelect") for f in spec["supportedModelFormats"])
    (c,) = spec["containers"]
    assert c["name"] == "kserve-container"
    args = c["args"]
    assert args[args.index("--model-repository") + 1] == "/mnt/models"   # where KServe's storage initializer puts it
    http = int(args[args.index("--http-port") + 1])
    assert [p["containerPort"] for p in c["ports"]] == [http]
    assert c["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": http}
    assert spec["annotations"]["prometheus.kserve.io/port"] == args[args.index("--metrics-port") + 1]
    (isvc,) = by_kind("InferenceService")
    model = isvc["spec"]["predictor"]["model"]
    assert model["runtime"] == "cinfer" and model["modelFormat"]["name"] == "onnx"


def probe_port(container, probe):
    """The port number a probe targets, resolving a port name through the container's ports."""
    port = container[probe]["httpGet"]["port"]
    if isinstance(port, str):
        port = {p["name"]: p["containerPort"] for p in container["ports"]}[port]
    return port


@pytest.mark.parametrize("where", ["cinfer", "cinfer-mig", "servingruntime"])
def test_manifest_arguments_run_a_real_server_that_answers_its_probes(start_server, where):
    """The container's own arguments (ports made free, loopback, CPU) start cinfer-server, and every probe's path
    answers 200 on the port the probe names, once the model is loaded."""
    c = dict(containers())[where]
    args = c["args"]
    s = start_server(args)
    http = int(args[args.index("--http-port") + 1])
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        if probe not in c:
            continue
        assert probe_port(c, probe) == http, f"{where}: {probe} is not on the HTTP port"
        status, _ = s.get(c[probe]["httpGet"]["path"])
        assert status == 200, f"{where}: {probe} {c[probe]['httpGet']['path']} answered {status}"
    assert "nv_inference_count" in s.metrics()
