"""JSON schemas (draft 2020-12, strict: no unknown fields) for the custom resources the kit ships, which the
Kubernetes schemas of kubernetes-validate do not cover: ServiceMonitor and PrometheusRule (Prometheus Operator,
monitoring.coreos.com/v1), ServingRuntime (KServe serving.kserve.io/v1alpha1) and InferenceService
(serving.kserve.io/v1beta1). They list the fields of those APIs this kit uses or that sit beside them, written from
the projects' API references, and embed the core Kubernetes types (Container, ObjectMeta, LabelSelector, ...) by
reference to the pinned Kubernetes release's strict schemas, so a container inside a ServingRuntime is checked as
strictly as one inside a Deployment. A field of these APIs that is not listed here fails validation: add it."""
K8S = "https://kubernetes.io/api/_definitions.json#/$defs/"


def ref(name):
    return {"$ref": K8S + name}


CORE = "io.k8s.api.core.v1."
META = "io.k8s.apimachinery.pkg.apis.meta.v1."
DURATION = {"type": "string", "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"}
STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}


def obj(properties, required=()):
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


def resource(api_version, kind, spec):
    return obj({"apiVersion": {"const": api_version}, "kind": {"const": kind}, "metadata": ref(META + "ObjectMeta"),
                "spec": spec}, ("apiVersion", "kind", "metadata", "spec"))


RELABEL = obj({"action": {"type": "string"}, "modulus": {"type": "integer"}, "regex": {"type": "string"},
               "replacement": {"type": "string"}, "separator": {"type": "string"},
               "sourceLabels": {"type": "array", "items": {"type": "string"}}, "targetLabel": {"type": "string"}})

SERVICE_MONITOR = resource("monitoring.coreos.com/v1", "ServiceMonitor", obj({
    "endpoints": {"type": "array", "minItems": 1, "items": obj({
        "port": {"type": "string"}, "targetPort": {"type": ["string", "integer"]}, "path": {"type": "string"},
        "scheme": {"enum": ["http", "https"]}, "interval": DURATION, "scrapeTimeout": DURATION,
        "honorLabels": {"type": "boolean"}, "honorTimestamps": {"type": "boolean"},
        "followRedirects": {"type": "boolean"}, "enableHttp2": {"type": "boolean"}, "filterRunning": {"type": "boolean"},
        "params": {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}}},
        "relabelings": {"type": "array", "items": RELABEL}, "metricRelabelings": {"type": "array", "items": RELABEL},
        "tlsConfig": {"type": "object"}, "authorization": {"type": "object"}, "basicAuth": {"type": "object"},
        "bearerTokenSecret": ref(CORE + "SecretKeySelector")})},
    "selector": ref(META + "LabelSelector"),
    "namespaceSelector": obj({"any": {"type": "boolean"}, "matchNames": {"type": "array", "items": {"type": "string"}}}),
    "jobLabel": {"type": "string"}, "targetLabels": {"type": "array", "items": {"type": "string"}},
    "podTargetLabels": {"type": "array", "items": {"type": "string"}}, "sampleLimit": {"type": "integer", "minimum": 0},
    "attachMetadata": obj({"node": {"type": "boolean"}}),
}, ("endpoints", "selector")))

RULE = {"type": "object", "additionalProperties": False, "properties": {
    "alert": {"type": "string"}, "record": {"type": "string"}, "expr": {"type": ["string", "integer"]},
    "for": DURATION, "keep_firing_for": DURATION, "labels": STRING_MAP, "annotations": STRING_MAP},
    "required": ["expr"], "oneOf": [{"required": ["alert"]}, {"required": ["record"]}]}

PROMETHEUS_RULE = resource("monitoring.coreos.com/v1", "PrometheusRule", obj({
    "groups": {"type": "array", "items": obj({
        "name": {"type": "string", "minLength": 1}, "interval": DURATION, "limit": {"type": "integer"},
        "partial_response_strategy": {"type": "string"},
        "rules": {"type": "array", "minItems": 1, "items": RULE}}, ("name", "rules"))}}))

MODEL_FORMAT = obj({"name": {"type": "string", "minLength": 1}, "version": {"type": "string"}}, ("name",))

SERVING_RUNTIME = resource("serving.kserve.io/v1alpha1", "ServingRuntime", obj({
    "supportedModelFormats": {"type": "array", "minItems": 1, "items": obj({
        "name": {"type": "string", "minLength": 1}, "version": {"type": "string"}, "autoSelect": {"type": "boolean"},
        "priority": {"type": "integer", "minimum": 1}}, ("name",))},
    "protocolVersions": {"type": "array", "items": {"enum": ["v1", "v2", "grpc-v1", "grpc-v2"]}},
    "multiModel": {"type": "boolean"}, "disabled": {"type": "boolean"},
    "grpcEndpoint": {"type": "string"}, "grpcDataEndpoint": {"type": "string"}, "httpDataEndpoint": {"type": "string"},
    "replicas": {"type": "integer", "minimum": 0}, "storageHelper": obj({"disabled": {"type": "boolean"}}),
    "builtInAdapter": {"type": "object"},
    "containers": {"type": "array", "minItems": 1, "items": ref(CORE + "Container")},
    "volumes": {"type": "array", "items": ref(CORE + "Volume")},
    "nodeSelector": STRING_MAP, "affinity": ref(CORE + "Affinity"),
    "tolerations": {"type": "array", "items": ref(CORE + "Toleration")},
    "imagePullSecrets": {"type": "array", "items": ref(CORE + "LocalObjectReference")},
    "labels": STRING_MAP, "annotations": STRING_MAP, "hostIPC": {"type": "boolean"},
}, ("containers",)))

# predictor.model: the model fields plus the fields of a core Container (env, resources, args, ...).
_CONTAINER_FIELDS = ["args", "command", "env", "envFrom", "image", "imagePullPolicy", "livenessProbe", "name", "ports",
                     "readinessProbe", "resources", "securityContext", "startupProbe", "volumeMounts", "workingDir"]
MODEL = {"type": "object", "additionalProperties": False, "properties": {
    "modelFormat": MODEL_FORMAT, "runtime": {"type": "string"}, "storageUri": {"type": "string"},
    "protocolVersion": {"enum": ["v1", "v2", "grpc-v1", "grpc-v2"]},
    **{f: {"$ref": K8S + CORE + "Container/properties/" + f} for f in _CONTAINER_FIELDS}},
    "required": ["modelFormat"]}

INFERENCE_SERVICE = resource("serving.kserve.io/v1beta1", "InferenceService", obj({
    "predictor": obj({
        "model": MODEL, "minReplicas": {"type": "integer", "minimum": 0}, "maxReplicas": {"type": "integer", "minimum": 0},
        "scaleTarget": {"type": "integer"}, "scaleMetric": {"enum": ["cpu", "memory", "concurrency", "rps"]},
        "serviceAccountName": {"type": "string"}, "nodeSelector": STRING_MAP,
        "tolerations": {"type": "array", "items": ref(CORE + "Toleration")}, "affinity": ref(CORE + "Affinity"),
        "volumes": {"type": "array", "items": ref(CORE + "Volume")}, "labels": STRING_MAP, "annotations": STRING_MAP,
    }, ("model",))}, ("predictor",)))

SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): SERVICE_MONITOR,
    ("monitoring.coreos.com/v1", "PrometheusRule"): PROMETHEUS_RULE,
    ("serving.kserve.io/v1alpha1", "ServingRuntime"): SERVING_RUNTIME,
    ("serving.kserve.io/v1beta1", "InferenceService"): INFERENCE_SERVICE,
}
