"""Offline validation of the manifests sdtk renders.

- Core kinds (Deployment, StatefulSet, Service, ConfigMap, PVC, HPA, RBAC, ...): the Kubernetes
  OpenAPI schemas bundled with `kubernetes-validate`, in strict mode (unknown fields are errors).
- LeaderWorkerSet (leaderworkerset.x-k8s.io/v1, a CRD): the envelope against a schema written
  from kubernetes-sigs/lws `api/leaderworkerset/v1/leaderworkerset_types.go` (@024af08: field
  names, enums and defaults of LeaderWorkerSetSpec, LeaderWorkerTemplate, RolloutStrategy,
  NetworkConfig), and its leader and worker pod templates with the core `PodTemplate` schema.
- ServiceMonitor (monitoring.coreos.com/v1, a CRD): against a schema written from
  prometheus-operator `pkg/apis/monitoring/v1/servicemonitor_types.go` (@05cc9e6) for the fields
  sdtk uses; the selector with the core LabelSelector rules.
- DynamoGraphDeployment (nvidia.com/v1beta1, a CRD): the envelope and components against
  schemas/dynamographdeployment-v1beta1.json (transcribed from ai-dynamo/dynamo's v1beta1 Go types,
  cited there), component names unique case-insensitively (the CRD's CEL rule), and each
  component's podTemplate with the core `PodTemplate` schema.

Needs `kubernetes-validate` (the `ops` extra), which brings jsonschema.
"""

from __future__ import annotations

import copy
from typing import Any

from toolkit.errors import SdtkError, ToolNotFound

DEFAULT_K8S_VERSION = "1.30"

_STR = {"type": "string"}
_INT = {"type": "integer"}
_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}
_META = {
    "type": "object",
    "properties": {"name": _STR, "namespace": _STR, "labels": _LABELS, "annotations": _LABELS},
    "required": ["name"],
    "additionalProperties": False,
}
_INT_OR_STR = {"anyOf": [{"type": "integer"}, {"type": "string"}]}

LWS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "leaderworkerset.x-k8s.io/v1"},
        "kind": {"const": "LeaderWorkerSet"},
        "metadata": _META,
        "spec": {
            "type": "object",
            "required": ["leaderWorkerTemplate"],
            "additionalProperties": False,
            "properties": {
                "replicas": {"type": "integer", "minimum": 0},
                "startupPolicy": {"enum": ["LeaderCreated", "LeaderReady"]},
                "rolloutStrategy": {
                    "type": "object",
                    "required": ["type"],
                    "additionalProperties": False,
                    "properties": {
                        "type": {"enum": ["RollingUpdate"]},
                        "rollingUpdateConfiguration": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "partition": {"type": "integer", "minimum": 0},
                                "maxUnavailable": _INT_OR_STR,
                                "maxSurge": _INT_OR_STR,
                            },
                        },
                    },
                },
                "networkConfig": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"subdomainPolicy": {"enum": ["Shared", "UniquePerReplica"]}},
                },
                "leaderWorkerTemplate": {
                    "type": "object",
                    "required": ["workerTemplate"],
                    "additionalProperties": False,
                    "properties": {
                        "size": {"type": "integer", "minimum": 1},
                        "restartPolicy": {
                            "enum": [
                                "Default",
                                "RecreateGroupOnPodRestart",
                                "RecreateGroupAfterStart",
                                "None",
                            ]
                        },
                        # Pod templates: validated separately against the core PodTemplate schema.
                        "leaderTemplate": {"type": "object"},
                        "workerTemplate": {"type": "object"},
                        "subGroupPolicy": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "subGroupPolicyType": {"enum": ["LeaderWorker", "LeaderExcluded"]},
                                "subGroupSize": {"type": "integer", "minimum": 1},
                            },
                        },
                    },
                },
            },
        },
    },
}

SERVICEMONITOR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": _META,
        "spec": {
            "type": "object",
            "required": ["selector", "endpoints"],
            "additionalProperties": False,
            "properties": {
                "jobLabel": _STR,
                "targetLabels": {"type": "array", "items": _STR},
                "podTargetLabels": {"type": "array", "items": _STR},
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"matchLabels": _LABELS, "matchExpressions": {"type": "array"}},
                },
                "namespaceSelector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "any": {"type": "boolean"},
                        "matchNames": {"type": "array", "items": _STR},
                    },
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "port": _STR,
                            "targetPort": _INT_OR_STR,
                            "path": {"type": "string", "pattern": "^/"},
                            "scheme": {"enum": ["http", "https"]},
                            "interval": {
                                "type": "string",
                                "pattern": r"^(0|(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
                            },
                            "scrapeTimeout": {"type": "string"},
                            "honorLabels": {"type": "boolean"},
                        },
                        "anyOf": [{"required": ["port"]}, {"required": ["targetPort"]}],
                    },
                },
                "sampleLimit": {"type": "integer", "minimum": 0},
            },
        },
    },
}


class ManifestError(SdtkError):
    """A rendered manifest that does not validate (a bug in sdtk's renderer, or bad parameters)."""

    def __init__(self, kind: str, name: str, message: str):
        self.kind = kind
        self.name = name
        super().__init__(f"{kind} '{name}' does not validate: {message}")


def _kv() -> Any:
    try:
        import kubernetes_validate
    except ImportError:
        raise ToolNotFound(
            "kubernetes-validate", hint="pip install 'sdtk[ops]' (or pip install kubernetes-validate)"
        ) from None
    return kubernetes_validate


def _where(e: Any) -> str:
    path = "/".join(str(p) for p in getattr(e, "absolute_path", []) or getattr(e, "path", []))
    msg = getattr(e, "message", None) or str(e).splitlines()[0]
    return f"{path}: {msg}" if path else msg


def _core(obj: dict, version: str, name: str) -> str:
    kv = _kv()
    try:
        return kv.validate(obj, version, strict=True)
    except kv.ValidationError as e:
        raise ManifestError(obj.get("kind", "?"), name, _where(e)) from None
    except kv.SchemaNotFoundError as e:
        raise ManifestError(obj.get("kind", "?"), name, f"no schema: {e}") from None


def _json_schema(obj: dict, schema: dict, name: str) -> None:
    import jsonschema

    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(obj), key=lambda e: list(e.path))
    if errors:
        raise ManifestError(obj.get("kind", "?"), name, _where(errors[0]))


def _pod_template(template: dict, version: str, owner: str) -> None:
    wrapper = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": owner}, "template": template}
    _core(wrapper, version, owner)


def dgd_schema() -> dict[str, Any]:
    """The transcribed DynamoGraphDeployment v1beta1 schema (its `$comment` cites the source)."""
    import json
    from importlib import resources

    text = (resources.files("toolkit.ops") / "schemas" / "dynamographdeployment-v1beta1.json").read_text()
    return dict(json.loads(text))


def _dgd(obj: dict, version: str, name: str) -> str:
    _json_schema(obj, dgd_schema(), name)
    components = obj["spec"].get("components", [])
    names = [c["name"].lower() for c in components]
    if len(set(names)) != len(names):  # the CRD's CEL rule on spec.components
        raise ManifestError(
            "DynamoGraphDeployment", name, "component names must be unique case-insensitively"
        )
    for c in components:
        if "podTemplate" in c:
            _pod_template(copy.deepcopy(c["podTemplate"]), version, f"{name}-{c['name'].lower()}")
    return (
        f"DynamoGraphDeployment v1beta1 schema (dynamographdeployment_types.go) + core PodTemplate {version}"
    )


def validate_manifest(obj: dict, k8s_version: str = DEFAULT_K8S_VERSION) -> str:
    """Validate one object; returns what it was validated against, raises ManifestError."""
    name = (obj.get("metadata") or {}).get("name", "?")
    api, kind = obj.get("apiVersion", ""), obj.get("kind", "")
    if api == "leaderworkerset.x-k8s.io/v1" and kind == "LeaderWorkerSet":
        _json_schema(obj, LWS_SCHEMA, name)
        lwt = obj["spec"]["leaderWorkerTemplate"]
        for role in ("leaderTemplate", "workerTemplate"):
            if role in lwt:
                _pod_template(copy.deepcopy(lwt[role]), k8s_version, f"{name}-{role}")
        return f"LWS schema (leaderworkerset_types.go) + core PodTemplate {k8s_version}"
    if api == "nvidia.com/v1beta1" and kind == "DynamoGraphDeployment":
        return _dgd(obj, k8s_version, name)
    if api == "monitoring.coreos.com/v1" and kind == "ServiceMonitor":
        _json_schema(obj, SERVICEMONITOR_SCHEMA, name)
        return "ServiceMonitor schema (servicemonitor_types.go)"
    return f"Kubernetes {_core(obj, k8s_version, name)} (strict)"


def validate_all(objs: list[dict], k8s_version: str = DEFAULT_K8S_VERSION) -> list[str]:
    return [validate_manifest(o, k8s_version) for o in objs]
