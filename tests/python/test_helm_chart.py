"""The Helm chart in helm/leased: lint, render, validate every manifest, and check what matters.

Rendering uses helm-python-sdk (Helm's own Go engine through a C library, offline: no cluster and
no helm binary). Every rendered core object is validated with `kubernetes-validate --strict`
(offline JSON schemas of the Kubernetes API, unknown fields rejected) against the oldest
Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest that kubernetes-validate
bundles. kubernetes-validate has no schema for CRDs such as the Prometheus Operator's
ServiceMonitor and PodMonitor (it only prints a WARN and passes), so this file keeps those out of
its input and checks them against small structural schemas of its own instead (see
SERVICE_MONITOR_SCHEMA and POD_MONITOR_SCHEMA).

`lookup` finds nothing in an offline render, so every render here makes a new token for the
chart-made tokens Secret; that the token survives `helm upgrade` (lookup reads it back) needs a
cluster and is not tested here.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import helm_python as helm
import jsonschema
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "leased"
KUBERNETES_VALIDATE = Path(sys.executable).parent / "kubernetes-validate"
RELEASE = "demo"
NAMESPACE = "leases"
FULLNAME = f"{RELEASE}-leased"

# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion: native gRPC probes are GA in
# 1.27) and the newest that kubernetes-validate 1.37 bundles schemas for.
OLDEST_KUBERNETES = "1.27.0"
NEWEST_KUBERNETES = "1.37.0"

# Kinds kubernetes-validate has schemas for; anything else must be checked here by hand.
CORE_API_VERSIONS = {"v1", "apps/v1", "policy/v1", "autoscaling/v2", "networking.k8s.io/v1"}

# Every operation a token may have (docs/src/operations/security.md); the chart-made admin token
# has them all.
OPERATIONS = ["acquire", "renew", "release", "describe", "watch", "check", "list", "revoke"]

# Running without access control takes both of these (the chart refuses auth.enabled=false alone).
INSECURE = {"enabled": False, "insecure": True}

MONITORING_NAMESPACE = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}
}

EVERYTHING_ON = {
    "tls": {
        "enabled": True,
        "secretName": "leased-tls",
        "clientCA": {"enabled": True, "secretName": "leased-client-ca"},
    },
    "auth": {"enabled": True, "existingSecret": "leased-tokens"},
    "console": {"enabled": True, "hosts": ["leases.example.com"]},
    "metrics": {
        "enabled": True,
        "hosts": ["leased-metrics.monitoring.example"],
        "service": {"enabled": True},
        "serviceMonitor": {
            "enabled": True,
            "namespace": "monitoring",
            "labels": {"release": "prometheus"},
            "relabelings": [
                {"action": "replace", "targetLabel": "team", "replacement": "platform"}
            ],
        },
    },
    "autoscaling": {
        "enabled": True,
        "minReplicas": 3,
        "maxReplicas": 12,
        "targetMemoryUtilizationPercentage": 80,
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": 300}},
    },
    "redis": {"existingSecret": "redis-credentials", "existingSecretKey": "url"},
    "topologySpreadConstraints": [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway",
        },
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": RELEASE}},
            "matchLabelKeys": ["pod-template-hash"],
        },
    ],
    "podDisruptionBudget": {"maxUnavailable": None, "minAvailable": "50%"},
    "config": {"drainGraceSeconds": 20, "maxMessageBytes": 1048576, "logFormat": "text"},
    "terminationGracePeriodSeconds": 45,
    "extraEnv": [{"name": "EXTRA", "value": "1"}],
    "podAnnotations": {"example.com/owner": "platform"},
    "podLabels": {"team": "platform"},
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [
        {"key": "dedicated", "operator": "Equal", "value": "leases", "effect": "NoSchedule"}
    ],
    "affinity": {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "leased"}},
                    },
                }
            ]
        }
    },
    "imagePullSecrets": [{"name": "regcred"}],
    "priorityClassName": "leases-critical",
    "image": {
        "repository": "registry.example.com/platform/leased",
        "tag": "0.1.0",
        "digest": "sha256:" + "0123456789abcdef" * 4,
        "pullPolicy": "Always",
    },
    "serviceAccount": {"name": "leased-sa", "annotations": {"example.com/role": "none"}},
    "service": {"type": "ClusterIP", "port": 443, "annotations": {"example.com/lb": "grpc"}},
    "networkPolicy": {
        "grpcFrom": [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "payments"}}},
            {
                "podSelector": {
                    "matchExpressions": [{"key": "team", "operator": "In", "values": ["platform"]}]
                }
            },
        ],
        "metricsFrom": [
            {
                **MONITORING_NAMESPACE,
                "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
            }
        ],
        "healthFrom": [{"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.0.255.0/24"]}}],
        "extraIngress": [
            {
                "from": [{"ipBlock": {"cidr": "192.0.2.0/24"}}],
                "ports": [{"port": 50051, "protocol": "TCP"}],
            }
        ],
    },
}

# Metrics scraped by a PodMonitor, from the pods' container port: nothing on the Service.
POD_MONITOR = {
    "metrics": {
        "enabled": True,
        "podMonitor": {
            "enabled": True,
            "namespace": "monitoring",
            "labels": {"release": "prometheus"},
            "annotations": {"example.com/owner": "platform"},
            "interval": "15s",
            "scrapeTimeout": "5s",
            "relabelings": [
                {"action": "replace", "targetLabel": "team", "replacement": "platform"}
            ],
            "metricRelabelings": [
                {"action": "drop", "sourceLabels": ["__name__"], "regex": "go_.*"}
            ],
        },
    },
    "networkPolicy": {"metricsFrom": [MONITORING_NAMESPACE]},
}

# name -> (values, Kubernetes versions to validate against)
SCENARIOS = {
    "defaults": ({}, (OLDEST_KUBERNETES, NEWEST_KUBERNETES)),
    "everything-on": (EVERYTHING_ON, (OLDEST_KUBERNETES, NEWEST_KUBERNETES)),
    "in-process-single-replica": (
        {"replicaCount": 1, "redis": {"url": ""}, "podDisruptionBudget": {"enabled": False}},
        (OLDEST_KUBERNETES, NEWEST_KUBERNETES),
    ),
    "tls-only-plain-redis-url": (
        {
            "tls": {"enabled": True, "secretName": "leased-tls"},
            "auth": INSECURE,
            "redis": {"url": "rediss://:s3cret@redis.example.internal:6380/0"},
            "metrics": {"enabled": True},
            "serviceAccount": {"create": False, "name": "shared"},
            "podDisruptionBudget": {"maxUnavailable": "25%"},
            "autoscaling": {"targetCPUUtilizationPercentage": None},
        },
        (OLDEST_KUBERNETES, NEWEST_KUBERNETES),
    ),
    # The preStop sleep action exists from Kubernetes 1.30 on (the values comment says so).
    "prestop-sleep": (
        {"lifecycle": {"preStop": {"sleep": {"seconds": 5}}}, "terminationGracePeriodSeconds": 20},
        ("1.30.0", NEWEST_KUBERNETES),
    ),
    "pod-monitor": (POD_MONITOR, (OLDEST_KUBERNETES, NEWEST_KUBERNETES)),
    # Auth on (the default) permits a LoadBalancer; the NetworkPolicy then needs the clients.
    "load-balancer-with-auth": (
        {
            "service": {"type": "LoadBalancer"},
            "networkPolicy": {"grpcFrom": [{"ipBlock": {"cidr": "203.0.113.0/24"}}]},
        },
        (OLDEST_KUBERNETES, NEWEST_KUBERNETES),
    ),
    # No peers at all: the NetworkPolicy closes every port (ingress: []).
    "network-policy-closed": (
        {"networkPolicy": {"grpcFrom": []}, "metrics": {"enabled": True}},
        (OLDEST_KUBERNETES, NEWEST_KUBERNETES),
    ),
    "insecure-without-network-policy": (
        {"auth": INSECURE, "networkPolicy": {"enabled": False}},
        (OLDEST_KUBERNETES, NEWEST_KUBERNETES),
    ),
}

# What this test checks of a ServiceMonitor, since kubernetes-validate has no schema for it: the
# fields the chart emits, with types and patterns taken from the Prometheus Operator's CRD
# (monitoring.coreos.com/v1), unknown fields rejected. Not a full CRD schema.
PROMETHEUS_DURATION = r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
SERVICE_MONITOR_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {
            "type": "object",
            "required": ["name", "namespace"],
            "properties": {
                "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
                "namespace": {"type": "string", "minLength": 1},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector", "endpoints"],
            "properties": {
                "jobLabel": {"type": "string"},
                "namespaceSelector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "any": {"type": "boolean"},
                        "matchNames": {"type": "array", "items": {"type": "string"}},
                    },
                },
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["matchLabels"],
                    "properties": {
                        "matchLabels": {
                            "type": "object",
                            "minProperties": 1,
                            "additionalProperties": {"type": "string"},
                        }
                    },
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["port"],
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string", "pattern": "^/"},
                            "scheme": {"enum": ["http", "https", "HTTP", "HTTPS"]},
                            "interval": {"type": "string", "pattern": PROMETHEUS_DURATION},
                            "scrapeTimeout": {"type": "string", "pattern": PROMETHEUS_DURATION},
                            "relabelings": {"type": "array", "items": {"type": "object"}},
                            "metricRelabelings": {"type": "array", "items": {"type": "object"}},
                        },
                    },
                },
            },
        },
    },
}

# The same for a PodMonitor: its endpoints are podMetricsEndpoints, whose port names a container
# port of the selected pods.
POD_MONITOR_SCHEMA = copy.deepcopy(SERVICE_MONITOR_SCHEMA)
POD_MONITOR_SCHEMA["properties"]["kind"] = {"const": "PodMonitor"}
_pod_spec = POD_MONITOR_SCHEMA["properties"]["spec"]
_pod_spec["properties"]["podMetricsEndpoints"] = _pod_spec["properties"].pop("endpoints")
_pod_spec["required"] = ["selector", "podMetricsEndpoints"]

CUSTOM_SCHEMAS = {"ServiceMonitor": SERVICE_MONITOR_SCHEMA, "PodMonitor": POD_MONITOR_SCHEMA}


# ---------------------------------------------------------------------------------------------
# Helpers


@pytest.fixture(scope="module")
def chart():
    loaded = helm.Chart.load(CHART)
    yield loaded
    loaded.close()


def render(chart, values):
    """Renders the chart: (objects parsed from every manifest, NOTES.txt text)."""
    rendered = chart.render(values, name=RELEASE, namespace=NAMESPACE)
    objects, notes = [], None
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            notes = text
            continue
        assert path.endswith(".yaml"), f"unexpected rendered file {path}"
        objects.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return objects, notes


def find(objects, kind):
    found = [o for o in objects if o["kind"] == kind]
    assert len(found) <= 1, f"more than one {kind}"
    return found[0] if found else None


def find_named(objects, kind, name):
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found[0] if found else None


def container(objects):
    deployment = find(objects, "Deployment")
    assert deployment is not None
    (leased,) = deployment["spec"]["template"]["spec"]["containers"]
    return leased


def env_of(leased):
    return {e["name"]: e for e in leased.get("env", [])}


def config_map_data(objects):
    return find(objects, "ConfigMap")["data"]


def seconds(duration: str) -> int:
    match = re.fullmatch(r"(\d+)s", duration)
    assert match, f"drain grace {duration!r} is not in whole seconds"
    return int(match.group(1))


def kubernetes_validate(tmp_path, objects, versions):
    """Runs `kubernetes-validate --strict` on the core objects; returns how many it passed."""
    assert KUBERNETES_VALIDATE.exists(), (
        f"{KUBERNETES_VALIDATE} is missing: pip install -r tests/python/requirements.txt"
    )
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    command = [str(KUBERNETES_VALIDATE), "--strict"]
    for version in versions:
        command += ["-k", version]
    result = subprocess.run(
        command + [str(manifest)], capture_output=True, text=True, timeout=300, check=False
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    # A kind without a schema only WARNs and exits 0: make sure every object really was checked.
    assert "WARN" not in output, output
    passed = len(re.findall(r"^INFO .* passed for resource ", output, flags=re.M))
    assert passed == len(objects) * len(versions), output
    return passed


# ---------------------------------------------------------------------------------------------
# Lint and metadata


def test_chart_metadata(chart):
    metadata = chart.metadata
    assert metadata["apiVersion"] == "v2"
    assert metadata["name"] == "leased"
    assert metadata["appVersion"] == "0.1.0"
    assert metadata["type"] == "application"
    # helm install enforces this; lint and the SDK's offline render do not check it.
    assert metadata["kubeVersion"] == f">={OLDEST_KUBERNETES}-0"


@pytest.mark.parametrize("values", [None, EVERYTHING_ON], ids=["defaults", "everything-on"])
def test_lint_has_no_errors_or_warnings(values):
    report = helm.lint(CHART, values, strict=True, namespace=NAMESPACE)
    assert report["errors"] == [], report
    # Severity 1 is info (e.g. "icon is recommended"); 2 warning, 3 error.
    assert [m for m in report["messages"] if m["severity"] >= 2] == [], report


def test_schema_types_every_default_value(chart):
    """values.schema.json names a type for every option in values.yaml, down to the leaves."""
    schema = chart.schema
    assert schema is not None

    def walk(values, node, path):
        assert node is not None, f"{path or '(root)'} has no schema"
        assert "type" in node or "oneOf" in node or "enum" in node, f"{path} has no type"
        if isinstance(values, dict) and "properties" in node:
            for key, value in values.items():
                walk(value, node["properties"].get(key), f"{path}.{key}".lstrip("."))

    walk(chart.values, schema, "")
    # The schema itself is valid draft-07 and accepts the defaults.
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.validate(chart.values, schema)


# ---------------------------------------------------------------------------------------------
# Every scenario: renders, and every manifest is valid


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_rendered_manifests_are_valid(chart, scenario, tmp_path):
    values, versions = SCENARIOS[scenario]
    objects, notes = render(chart, values)
    assert notes and "grpcurl" in notes

    identities = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert len(identities) == len(set(identities)), identities
    for o in objects:
        labels = o["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "leased"
        assert labels["app.kubernetes.io/instance"] == RELEASE
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/version"]
        assert labels["helm.sh/chart"] == "leased-0.1.0"

    core = [o for o in objects if o["apiVersion"] in CORE_API_VERSIONS]
    custom = [o for o in objects if o["apiVersion"] not in CORE_API_VERSIONS]
    assert core, "nothing rendered"
    kubernetes_validate(tmp_path, core, versions)
    # Anything kubernetes-validate cannot check must be a kind this file checks itself.
    for o in custom:
        assert o["kind"] in CUSTOM_SCHEMAS, f"no validation for {o['apiVersion']} {o['kind']}"
        jsonschema.validate(o, CUSTOM_SCHEMAS[o["kind"]])


# ---------------------------------------------------------------------------------------------
# What the defaults give


def test_defaults(chart):
    objects, notes = render(chart, {})
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == [
        "ConfigMap",
        "Deployment",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "Secret",
        "Secret",
        "Service",
        "ServiceAccount",
    ]
    deployment = find(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    leased = container(objects)
    env = env_of(leased)

    assert deployment["spec"]["replicas"] == 3
    assert leased["image"] == "registry.example.com/leased:0.1.0"
    assert leased["args"] == ["serve"], "a --listen in args would override LEASED_LISTEN"
    assert env["LEASED_LISTEN"]["value"] == "0.0.0.0:50051"
    assert [p["containerPort"] for p in leased["ports"]] == [50051]

    # Native gRPC probes on grpc.health.v1 on the main (plaintext) port.
    # Liveness ignores Redis ("leased.liveness"); readiness follows it ("").
    for probe, service in (("livenessProbe", "leased.liveness"), ("readinessProbe", "")):
        assert leased[probe]["grpc"] == {"port": 50051, "service": service}, probe
        assert not {"httpGet", "tcpSocket", "exec"} & leased[probe].keys()

    # Auth on: the chart makes a tokens Secret with one admin token and mounts it; leased needs
    # no insecure opt-in.
    tokens_secret = find_named(objects, "Secret", f"{FULLNAME}-tokens")
    assert tokens_secret is not None
    assert tokens_secret["type"] == "Opaque"
    assert "helm.sh/resource-policy" not in tokens_secret["metadata"].get("annotations", {})
    assert set(tokens_secret["data"]) == {"tokens.json"}
    tokens_file = json.loads(base64.b64decode(tokens_secret["data"]["tokens.json"]))
    (admin,) = tokens_file["tokens"]
    assert admin.keys() == {"client", "token", "prefixes", "operations"}
    assert admin["client"] == "admin"
    assert re.fullmatch(r"[A-Za-z0-9]{48}", admin["token"]), admin["token"]
    assert len(admin["token"]) >= 16  # leased's own minimum
    assert admin["prefixes"] == [""]
    assert sorted(admin["operations"]) == sorted(OPERATIONS)
    assert env["LEASED_AUTH_TOKENS"]["value"] == "/etc/leased/auth/tokens.json"
    assert "LEASED_INSECURE_LISTEN" not in env
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["auth-tokens"]["secret"]["secretName"] == f"{FULLNAME}-tokens"
    assert volumes["auth-tokens"]["secret"]["items"] == [
        {"key": "tokens.json", "path": "tokens.json"}
    ]
    (mount,) = leased["volumeMounts"]
    assert mount == {"name": "auth-tokens", "mountPath": "/etc/leased/auth", "readOnly": True}
    assert "LEASED_TLS_CERT" not in env and "LEASED_HEALTH_LISTEN" not in env
    assert "LEASED_METRICS_LISTEN" not in env
    assert "WARNING" not in notes
    assert (
        f"kubectl --namespace {NAMESPACE} get secret {FULLNAME}-tokens "
        "-o jsonpath='{.data.tokens\\.json}' | base64 -d"
    ) in notes
    assert "auth.existingSecret" in notes, "NOTES must point at per-client tokens"
    # The token is the secret: it appears nowhere but in its Secret.
    assert admin["token"] not in json.dumps([o for o in objects if o is not tokens_secret])

    # The NetworkPolicy admits gRPC from the release's namespace only, nothing else.
    policy = find(objects, "NetworkPolicy")
    assert policy["metadata"]["name"] == FULLNAME
    assert policy["spec"]["podSelector"] == deployment["spec"]["selector"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [
        {"from": [{"podSelector": {}}], "ports": [{"port": "grpc", "protocol": "TCP"}]}
    ]
    assert {p["name"] for p in leased["ports"]} == {"grpc"}

    # The Redis URL comes from the chart-made Secret, never from plain env or the ConfigMap.
    secret = find_named(objects, "Secret", f"{FULLNAME}-redis")
    assert secret["type"] == "Opaque"
    assert set(secret["data"]) == {"redis-url"}
    assert env["LEASED_REDIS_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": secret["metadata"]["name"],
        "key": "redis-url",
    }
    assert "LEASED_REDIS_URL" not in config_map_data(objects)
    assert leased["envFrom"] == [{"configMapRef": {"name": FULLNAME}}]
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert {"checksum/config", "checksum/secret", "checksum/auth-tokens"} <= annotations.keys()

    # Settings: every documented flag has its variable, with the documented default.
    assert config_map_data(objects) == {
        "LEASED_MAX_TTL": "24h",
        "LEASED_MAX_WAIT": "10m",
        "LEASED_REDIS_TIMEOUT": "2s",
        "LEASED_REDIS_POOL_SIZE": "4",
        "LEASED_KEY_PREFIX": "leased:",
        "LEASED_REDIS_COUNTER_KEEP": "10m",
        "LEASED_REDIS_WAIT_REPLICAS": "0",
        "LEASED_MAX_CONCURRENT_STREAMS": "1024",
        "LEASED_MAX_WAITERS_PER_NAME": "1024",
        "LEASED_MAX_LIMIT": "10000",
        "LEASED_MAX_LEASES_PER_STREAM": "1024",
        "LEASED_MAX_FOLLOWED_NAMES": "20000",
        "LEASED_MAX_FOLLOWED_NAMES_PER_TOKEN": "5000",
        "LEASED_MAX_MESSAGE_BYTES": "16384",
        "LEASED_MAX_CONNECTIONS": "10000",
        "LEASED_HANDSHAKE_TIMEOUT": "5s",
        "LEASED_DRAIN_GRACE": "10s",
        "LEASED_LOG_FORMAT": "json",
        "RUST_LOG": "info",
    }
    assert pod["terminationGracePeriodSeconds"] > seconds(
        config_map_data(objects)["LEASED_DRAIN_GRACE"]
    )

    # Locked down: non-root, read-only root filesystem, no privilege escalation, no capabilities.
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = leased["securityContext"]
    assert security["runAsNonRoot"] is True
    assert security["runAsUser"] == 65532
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    assert pod["enableServiceLinks"] is False
    assert pod["serviceAccountName"] == FULLNAME
    assert leased["resources"]["requests"] and leased["resources"]["limits"]

    pdb = find(objects, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert "minAvailable" not in pdb["spec"]
    assert pdb["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]

    service = find(objects, "Service")
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert service["spec"]["ports"] == [
        {"name": "grpc", "port": 50051, "targetPort": "grpc", "protocol": "TCP", "appProtocol": "grpc"}
    ]

    assert f"kubectl --namespace {NAMESPACE} port-forward svc/{FULLNAME} 50051:50051" in notes
    assert "grpcurl -plaintext localhost:50051 list" in notes


# ---------------------------------------------------------------------------------------------
# Every optional feature at once


def test_everything_on(chart):
    objects, notes = render(chart, EVERYTHING_ON)
    deployment = find(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    leased = container(objects)
    env = env_of(leased)
    ports = {p["name"]: p["containerPort"] for p in leased["ports"]}
    assert ports == {"grpc": 50051, "health": 50052, "metrics": 9090}

    # TLS on the gRPC port: the kubelet's plaintext gRPC probes go to the health-only port.
    assert env["LEASED_HEALTH_LISTEN"]["value"] == "0.0.0.0:50052"
    for probe, service in (("livenessProbe", "leased.liveness"), ("readinessProbe", "")):
        assert leased[probe]["grpc"] == {"port": 50052, "service": service}, probe

    # TLS material and the mTLS client CA come from Secrets, mounted read-only.
    mounts = {m["name"]: m for m in leased["volumeMounts"]}
    volumes = {v["name"]: v["secret"] for v in pod["volumes"]}
    assert env["LEASED_TLS_CERT"]["value"] == "/etc/leased/tls/tls.crt"
    assert env["LEASED_TLS_KEY"]["value"] == "/etc/leased/tls/tls.key"
    assert env["LEASED_TLS_CLIENT_CA"]["value"] == "/etc/leased/client-ca/ca.crt"
    assert volumes["tls"]["secretName"] == "leased-tls"
    assert {i["key"] for i in volumes["tls"]["items"]} == {"tls.crt", "tls.key"}
    assert volumes["client-ca"]["secretName"] == "leased-client-ca"
    assert volumes["client-ca"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]
    assert mounts["tls"]["mountPath"] == "/etc/leased/tls"
    assert mounts["client-ca"]["mountPath"] == "/etc/leased/client-ca"

    # Auth on: tokens file mounted (as a directory, so Secret updates arrive), no insecure opt-in.
    assert env["LEASED_AUTH_TOKENS"]["value"] == "/etc/leased/auth/tokens.json"
    assert volumes["auth-tokens"]["secretName"] == "leased-tokens"
    assert "subPath" not in mounts["auth-tokens"]
    assert "LEASED_INSECURE_LISTEN" not in env
    assert all(m["readOnly"] for m in mounts.values())
    assert 'authorization: Bearer $TOKEN' in notes
    # The tokens are the operator's: the chart makes no tokens Secret and cannot checksum them.
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert "checksum/auth-tokens" not in annotations
    assert "Secret leased-tokens" in notes
    assert "-cert client.crt -key client.key" in notes

    # Redis from an existing Secret: the chart makes none.
    assert env["LEASED_REDIS_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "redis-credentials",
        "key": "url",
    }
    assert find(objects, "Secret") is None

    # Metrics: env, Service port (metrics.service.enabled), ServiceMonitor scraping that port
    # from the release namespace.
    assert env["LEASED_METRICS_LISTEN"]["value"] == "0.0.0.0:9090"
    service = find(objects, "Service")
    service_ports = {p["name"]: p for p in service["spec"]["ports"]}
    assert service_ports["grpc"]["port"] == 443
    assert service_ports["metrics"]["targetPort"] == "metrics"
    assert "health" not in service_ports
    monitor = find(objects, "ServiceMonitor")
    assert monitor["metadata"]["namespace"] == "monitoring"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert find(objects, "PodMonitor") is None

    # NetworkPolicy: one rule per port, each from its own peers, then the extra rules as given.
    network = EVERYTHING_ON["networkPolicy"]
    policy = find(objects, "NetworkPolicy")
    assert policy["spec"]["podSelector"] == deployment["spec"]["selector"]
    assert policy["spec"]["ingress"] == [
        {"from": network["grpcFrom"], "ports": [{"port": "grpc", "protocol": "TCP"}]},
        {"from": network["metricsFrom"], "ports": [{"port": "metrics", "protocol": "TCP"}]},
        # With TLS the kubelet probes the plaintext health port.
        {"from": network["healthFrom"], "ports": [{"port": "health", "protocol": "TCP"}]},
        *network["extraIngress"],
    ]
    # Every named port of a rule is a port of the container.
    named = {p["port"] for rule in policy["spec"]["ingress"] for p in rule.get("ports", [])}
    assert {n for n in named if isinstance(n, str)} <= ports.keys()

    # HPA owns the replica count.
    hpa = find(objects, "HorizontalPodAutoscaler")
    assert "replicas" not in deployment["spec"]
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": FULLNAME,
    }
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 12)
    targets = {m["resource"]["name"]: m["resource"]["target"] for m in hpa["spec"]["metrics"]}
    assert targets["cpu"]["averageUtilization"] == 70
    assert targets["memory"]["averageUtilization"] == 80

    # Topology spread: a constraint without a labelSelector gets the pods' selector labels.
    spread = pod["topologySpreadConstraints"]
    assert spread[0]["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert spread[1]["labelSelector"] == {"matchLabels": {"app.kubernetes.io/instance": RELEASE}}
    assert spread[1]["matchLabelKeys"] == ["pod-template-hash"]

    # Drain grace follows the values, and the kubelet waits longer than that.
    assert config_map_data(objects)["LEASED_DRAIN_GRACE"] == "20s"
    assert config_map_data(objects)["LEASED_MAX_MESSAGE_BYTES"] == "1048576"
    assert pod["terminationGracePeriodSeconds"] == 45 > 20

    assert find(objects, "PodDisruptionBudget")["spec"]["minAvailable"] == "50%"
    assert leased["image"] == (
        "registry.example.com/platform/leased:0.1.0@sha256:" + "0123456789abcdef" * 4
    )
    assert leased["imagePullPolicy"] == "Always"
    assert pod["serviceAccountName"] == "leased-sa"
    assert find(objects, "ServiceAccount")["metadata"]["name"] == "leased-sa"
    assert env["EXTRA"]["value"] == "1"
    assert deployment["spec"]["template"]["metadata"]["labels"]["team"] == "platform"


def test_tracing_otlp_endpoint(chart):
    """tracing.otlpEndpoint reaches leased as LEASED_OTLP_ENDPOINT, and tracing.sampleRatio as
    LEASED_OTLP_SAMPLE_RATIO; empty (the default), tracing stays off and neither is set."""
    objects, _ = render(chart, {})
    assert "LEASED_OTLP_ENDPOINT" not in config_map_data(objects)
    assert "LEASED_OTLP_ENDPOINT" not in env_of(container(objects))

    assert "LEASED_OTLP_SAMPLE_RATIO" not in config_map_data(objects)

    endpoint = "http://otel-collector.observability:4317"
    objects, _ = render(chart, {"tracing": {"otlpEndpoint": endpoint}})
    assert config_map_data(objects)["LEASED_OTLP_ENDPOINT"] == endpoint
    # A tenth of the RPCs traced unless set (leased's own default is every RPC).
    assert config_map_data(objects)["LEASED_OTLP_SAMPLE_RATIO"] == "0.1"
    for ratio, variable in [(1, "1"), (0, "0"), (0.25, "0.25")]:
        values = {"tracing": {"otlpEndpoint": endpoint, "sampleRatio": ratio}}
        objects, _ = render(chart, values)
        assert config_map_data(objects)["LEASED_OTLP_SAMPLE_RATIO"] == variable
    tracing = chart.schema["properties"]["tracing"]
    for refused in [-0.1, 1.5, "0.1"]:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({"sampleRatio": refused}, tracing)
    # The pods read the ConfigMap whole, and roll when it changes.
    leased = container(objects)
    assert any(
        source.get("configMapRef", {}).get("name") == FULLNAME for source in leased["envFrom"]
    ), leased["envFrom"]


def test_in_process_store_with_one_replica(chart):
    objects, notes = render(chart, SCENARIOS["in-process-single-replica"][0])
    env = env_of(container(objects))
    assert "LEASED_REDIS_URL" not in env
    assert find_named(objects, "Secret", f"{FULLNAME}-redis") is None
    secrets = [o["metadata"]["name"] for o in objects if o["kind"] == "Secret"]
    assert secrets == [f"{FULLNAME}-tokens"]
    assert find(objects, "Deployment")["spec"]["replicas"] == 1
    assert "in-process" in notes


def test_tls_without_mtls_and_a_plain_redis_url(chart):
    values = SCENARIOS["tls-only-plain-redis-url"][0]
    objects, notes = render(chart, values)
    leased = container(objects)
    env = env_of(leased)
    assert "LEASED_TLS_CLIENT_CA" not in env
    assert leased["readinessProbe"]["grpc"]["port"] == 50052
    # auth.insecure: TLS is not access control, so leased must still be told to listen without it.
    assert env["LEASED_INSECURE_LISTEN"]["value"] == "true"
    assert "LEASED_AUTH_TOKENS" not in env
    assert "WARNING: ACCESS CONTROL IS OFF" in notes
    # Metrics on, but neither on the Service nor open to anyone (metricsFrom is empty).
    assert env["LEASED_METRICS_LISTEN"]["value"] == "0.0.0.0:9090"
    assert [p["name"] for p in find(objects, "Service")["spec"]["ports"]] == ["grpc"]
    assert find(objects, "NetworkPolicy")["spec"]["ingress"] == [
        {"from": [{"podSelector": {}}], "ports": [{"port": "grpc", "protocol": "TCP"}]}
    ]
    (secret,) = [o for o in objects if o["kind"] == "Secret"]
    stored = secret["data"]["redis-url"]
    assert base64.b64decode(stored).decode() == values["redis"]["url"]
    assert values["redis"]["url"] not in json.dumps(objects).replace(stored, "")
    assert find(objects, "ServiceAccount") is None
    assert find(objects, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "shared"


# ---------------------------------------------------------------------------------------------
# Access control, the metrics port and the NetworkPolicy (security review, issue 32)


def test_generated_token_is_random_and_rolls_the_pods(chart):
    """Offline, `lookup` finds no stored Secret, so each render makes a new token (in a cluster
    the stored one is read back and the checksum stays put)."""

    def token_and_checksum():
        objects, _ = render(chart, {})
        secret = find_named(objects, "Secret", f"{FULLNAME}-tokens")
        (admin,) = json.loads(base64.b64decode(secret["data"]["tokens.json"]))["tokens"]
        annotations = find(objects, "Deployment")["spec"]["template"]["metadata"]["annotations"]
        return admin["token"], annotations["checksum/auth-tokens"]

    (first, first_sum), (second, second_sum) = token_and_checksum(), token_and_checksum()
    assert first != second
    assert first_sum != second_sum


def test_stored_tokens_file_is_kept(tmp_path):
    """What `helm upgrade` does when `lookup` finds the chart-made Secret: keep its file as it is.
    Offline `lookup` finds nothing, so this renders a copy of the chart whose lookup returns a
    stored Secret."""
    copy_dir = tmp_path / "leased"
    shutil.copytree(CHART, copy_dir)
    helpers = copy_dir / "templates" / "_helpers.tpl"
    stored = {
        "tokens": [{"client": "ops", "token": "s" * 32, "prefixes": [""], "operations": ["list"]}]
    }
    stored_b64 = base64.b64encode(json.dumps(stored).encode()).decode()
    lookup = 'lookup "v1" "Secret" .Release.Namespace $name'
    text = helpers.read_text()
    assert text.count(lookup) == 1, "the tokens helper no longer looks the Secret up"
    helpers.write_text(text.replace(lookup, f'dict "data" (dict "tokens.json" "{stored_b64}")'))

    copied = helm.Chart.load(copy_dir)
    try:
        renders = [render(copied, {})[0] for _ in range(2)]
    finally:
        copied.close()
    for objects in renders:
        secret = find_named(objects, "Secret", f"{FULLNAME}-tokens")
        assert secret["data"] == {"tokens.json": stored_b64}
        annotations = find(objects, "Deployment")["spec"]["template"]["metadata"]["annotations"]
        # The checksum follows the stored file, so it stays put from one upgrade to the next.
        assert annotations["checksum/auth-tokens"] == hashlib.sha256(stored_b64.encode()).hexdigest()


def test_generated_tokens_secret_follows_auth_key(chart):
    objects, _ = render(chart, {"auth": {"key": "leased-tokens.json"}})
    secret = find_named(objects, "Secret", f"{FULLNAME}-tokens")
    assert set(secret["data"]) == {"leased-tokens.json"}
    assert json.loads(base64.b64decode(secret["data"]["leased-tokens.json"]))["tokens"]
    env = env_of(container(objects))
    assert env["LEASED_AUTH_TOKENS"]["value"] == "/etc/leased/auth/leased-tokens.json"


def test_insecure_mode(chart):
    objects, notes = render(chart, SCENARIOS["insecure-without-network-policy"][0])
    leased = container(objects)
    env = env_of(leased)
    assert env["LEASED_INSECURE_LISTEN"]["value"] == "true"
    assert "LEASED_AUTH_TOKENS" not in env
    assert "volumeMounts" not in leased
    assert find_named(objects, "Secret", f"{FULLNAME}-tokens") is None
    annotations = find(objects, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert "checksum/auth-tokens" not in annotations
    assert find(objects, "NetworkPolicy") is None
    assert "WARNING: ACCESS CONTROL IS OFF (auth.enabled=false, auth.insecure=true)" in notes
    assert "networkPolicy.enabled is false too" in notes


@pytest.mark.parametrize("service_enabled", [False, True])
def test_metrics_port_is_on_the_service_only_when_asked(chart, service_enabled):
    objects, notes = render(
        chart, {"metrics": {"enabled": True, "service": {"enabled": service_enabled}}}
    )
    leased = container(objects)
    ports = {p["name"]: p["containerPort"] for p in leased["ports"]}
    assert ports == {"grpc": 50051, "metrics": 9090}
    assert env_of(leased)["LEASED_METRICS_LISTEN"]["value"] == "0.0.0.0:9090"
    service_ports = {p["name"]: p for p in find(objects, "Service")["spec"]["ports"]}
    if service_enabled:
        assert service_ports["metrics"] == {
            "name": "metrics",
            "port": 9090,
            "targetPort": "metrics",
            "protocol": "TCP",
            "appProtocol": "http",
        }
        assert f"http://{FULLNAME}.{NAMESPACE}.svc:9090/metrics" in notes
        # Scraping by the Service's names is not refused as DNS rebinding.
        service = f"{FULLNAME}.{NAMESPACE}"
        assert env_of(leased)["LEASED_METRICS_HOST"]["value"] == (
            f"{FULLNAME},{service},{service}.svc,{service}.svc.cluster.local"
        )
    else:
        assert service_ports.keys() == {"grpc"}
        assert "not on the Service" in notes
        # Prometheus and probes reach the pods by IP, which the metrics port always accepts.
        assert "LEASED_METRICS_HOST" not in env_of(leased)
    # Either way, nobody may scrape until networkPolicy.metricsFrom names Prometheus.
    rules = find(objects, "NetworkPolicy")["spec"]["ingress"]
    assert [p["port"] for rule in rules for p in rule["ports"]] == ["grpc"]
    assert "metricsFrom is empty" in notes


def test_pod_monitor(chart):
    objects, notes = render(chart, POD_MONITOR)
    deployment = find(objects, "Deployment")
    leased = container(objects)
    monitor = find(objects, "PodMonitor")
    values = POD_MONITOR["metrics"]["podMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["name"] == FULLNAME
    assert monitor["metadata"]["namespace"] == "monitoring"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["metadata"]["annotations"] == values["annotations"]
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    # It selects the release's pods and scrapes their "metrics" container port.
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector == deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint == {
        "port": "metrics",
        "path": "/metrics",
        "scheme": "http",
        "interval": "15s",
        "scrapeTimeout": "5s",
        "relabelings": values["relabelings"],
        "metricRelabelings": values["metricRelabelings"],
    }
    assert "metrics" in {p["name"] for p in leased["ports"]}
    # No Service port and no ServiceMonitor needed.
    assert [p["name"] for p in find(objects, "Service")["spec"]["ports"]] == ["grpc"]
    assert find(objects, "ServiceMonitor") is None
    # The NetworkPolicy lets the monitoring namespace (and only it) reach the metrics port.
    assert find(objects, "NetworkPolicy")["spec"]["ingress"][1] == {
        "from": [MONITORING_NAMESPACE],
        "ports": [{"port": "metrics", "protocol": "TCP"}],
    }
    assert f"scraped via PodMonitor {FULLNAME}" in notes

    # In the release namespace: no namespaceSelector needed.
    objects, _ = render(chart, {"metrics": {"enabled": True, "podMonitor": {"enabled": True}}})
    monitor = find(objects, "PodMonitor")
    assert monitor["metadata"]["namespace"] == NAMESPACE
    assert "namespaceSelector" not in monitor["spec"]


def test_network_policy_without_tls_lets_health_peers_reach_the_grpc_port(chart):
    """Without TLS the kubelet probes the gRPC port, so healthFrom opens that one."""
    nodes = [{"ipBlock": {"cidr": "10.0.0.0/16"}}]
    objects, _ = render(chart, {"networkPolicy": {"healthFrom": nodes}})
    grpc_port = [{"port": "grpc", "protocol": "TCP"}]
    assert find(objects, "NetworkPolicy")["spec"]["ingress"] == [
        {"from": [{"podSelector": {}}], "ports": grpc_port},
        {"from": nodes, "ports": grpc_port},
    ]


def test_network_policy_with_no_peers_closes_every_port(chart):
    objects, notes = render(chart, SCENARIOS["network-policy-closed"][0])
    assert find(objects, "NetworkPolicy")["spec"]["ingress"] == []
    assert "grpcFrom is empty: NO client may connect" in notes


def test_network_policy_disabled(chart):
    objects, notes = render(chart, {"networkPolicy": {"enabled": False}})
    assert find(objects, "NetworkPolicy") is None
    assert "No NetworkPolicy" in notes


def test_load_balancer_with_auth(chart):
    values = SCENARIOS["load-balancer-with-auth"][0]
    objects, notes = render(chart, values)
    assert find(objects, "Service")["spec"]["type"] == "LoadBalancer"
    assert "LEASED_INSECURE_LISTEN" not in env_of(container(objects))
    assert find(objects, "NetworkPolicy")["spec"]["ingress"][0]["from"] == (
        values["networkPolicy"]["grpcFrom"]
    )
    assert "service.type is LoadBalancer: add the clients' addresses" in notes


# ---------------------------------------------------------------------------------------------
# Values the chart must refuse


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"replicaCount": "three"}, "/replicaCount"),
        ({"replicaCount": -1}, "/replicaCount"),
        ({"replicas": 3}, "replicas"),
        ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
        ({"image": {"digest": "latest"}}, "/image/digest"),
        ({"service": {"port": 70000}}, "/service/port"),
        ({"service": {"type": "ExternalName"}}, "/service/type"),
        ({"redis": {"url": "http://redis:6379"}}, "/redis/url"),
        ({"config": {"maxTtl": "24"}}, "/config/maxTtl"),
        ({"config": {"logFormat": "xml"}}, "/config/logFormat"),
        ({"tracing": {"otlpEndpoint": "otel-collector:4317"}}, "/tracing/otlpEndpoint"),
        ({"config": {"redisPoolSize": 0}}, "/config/redisPoolSize"),
        ({"config": {"drainGraceSeconds": "10s"}}, "/config/drainGraceSeconds"),
        ({"auth": {"enabled": "yes"}}, "/auth/enabled"),
        ({"auth": {"insecure": "yes"}}, "/auth/insecure"),
        ({"metrics": {"service": {"enabled": 1}}}, "/metrics/service/enabled"),
        ({"metrics": {"podMonitor": {"interval": "15 seconds"}}}, "/metrics/podMonitor/interval"),
        ({"networkPolicy": {"enabled": "true"}}, "/networkPolicy/enabled"),
        ({"networkPolicy": {"grpcFrom": {"podSelector": {}}}}, "/networkPolicy/grpcFrom"),
        ({"networkPolicy": {"grpcFrom": [{"podSelectors": {}}]}}, "/networkPolicy/grpcFrom/0"),
        ({"networkPolicy": {"metricsFrom": [{}]}}, "/networkPolicy/metricsFrom/0"),
        (
            {"networkPolicy": {"healthFrom": [{"ipBlock": {}}]}},
            "/networkPolicy/healthFrom/0/ipBlock",
        ),
        ({"networkPolicy": {"extraIngress": ["all"]}}, "/networkPolicy/extraIngress/0"),
        ({"tls": {"enabled": True, "secretName": 5}}, "/tls/secretName"),
        ({"metrics": {"serviceMonitor": {"interval": "30 seconds"}}}, "/metrics/serviceMonitor/interval"),
        ({"podDisruptionBudget": {"minAvailable": "half"}}, "/podDisruptionBudget/minAvailable"),
        ({"resources": {"limits": {"memory": "lots"}}}, "/resources/limits/memory"),
        ({"livenessProbe": {"periodSeconds": 0}}, "/livenessProbe/periodSeconds"),
        ({"topologySpreadConstraints": [{"maxSkew": 1}]}, "/topologySpreadConstraints/0"),
        # A host name only: leased refuses a port (any is accepted) and an IP (every one is).
        ({"console": {"hosts": ["leases.example:8080"]}}, "/console/hosts/0"),
        ({"metrics": {"hosts": ["10.0.0.7"]}}, "/metrics/hosts/0"),
    ],
)
def test_schema_rejects(chart, values, where):
    with pytest.raises(helm.HelmValuesError) as refused:
        chart.render(values, name=RELEASE, namespace=NAMESPACE)
    assert where in str(refused.value), str(refused.value)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"redis": {"url": ""}}, "more than one replica"),
        (
            {"replicaCount": 1, "redis": {"url": ""}, "autoscaling": {"enabled": True}},
            "needs Redis",
        ),
        ({"tls": {"enabled": True}}, "tls.enabled needs tls.secretName"),
        ({"tls": {"clientCA": {"enabled": True}}}, "tls.clientCA.enabled (mTLS) needs tls.enabled"),
        # Running without access control takes two values, and never outside the cluster.
        ({"auth": {"enabled": False}}, "or confirm with auth.insecure=true"),
        ({"auth": {"insecure": True}}, "auth.insecure=true applies only with auth.enabled=false"),
        (
            {"auth": INSECURE, "service": {"type": "LoadBalancer"}},
            "auth.insecure=true is refused with service.type=LoadBalancer",
        ),
        (
            {"auth": INSECURE, "service": {"type": "NodePort"}},
            "auth.insecure=true is refused with service.type=NodePort",
        ),
        (
            {"metrics": {"serviceMonitor": {"enabled": True}}},
            "metrics.serviceMonitor.enabled needs metrics.enabled",
        ),
        (
            {"metrics": {"enabled": True, "serviceMonitor": {"enabled": True}}},
            "metrics.serviceMonitor.enabled needs metrics.service.enabled",
        ),
        (
            {"metrics": {"service": {"enabled": True}}},
            "metrics.service.enabled needs metrics.enabled",
        ),
        (
            {"metrics": {"podMonitor": {"enabled": True}}},
            "metrics.podMonitor.enabled needs metrics.enabled",
        ),
        (
            {"terminationGracePeriodSeconds": 10},
            "terminationGracePeriodSeconds (10) must exceed config.drainGraceSeconds (10)",
        ),
        ({"podDisruptionBudget": {"minAvailable": 2}}, "set only one of"),
        ({"podDisruptionBudget": {"maxUnavailable": None}}, "needs podDisruptionBudget.minAvailable"),
        ({"autoscaling": {"enabled": True, "minReplicas": 5, "maxReplicas": 2}}, "maxReplicas"),
        ({"metrics": {"enabled": True, "port": 50051}}, "must differ"),
    ],
)
def test_render_refuses_inconsistent_values(chart, values, message):
    with pytest.raises(helm.HelmRenderError) as refused:
        chart.render(values, name=RELEASE, namespace=NAMESPACE)
    assert message in str(refused.value), str(refused.value)


def test_console_is_on_the_pods_loopback_only(chart):
    objects, notes = render(chart, {"console": {"enabled": True, "port": 8088}})
    leased = container(objects)
    assert env_of(leased)["LEASED_CONSOLE_LISTEN"]["value"] == "127.0.0.1:8088"
    # Reached with kubectl port-forward only: no container port, no Service port, no policy rule.
    assert {p["name"] for p in leased["ports"]} == {"grpc"}
    assert {p["name"] for p in find(objects, "Service")["spec"]["ports"]} == {"grpc"}
    rules = find(objects, "NetworkPolicy")["spec"]["ingress"]
    assert [p["port"] for rule in rules for p in rule["ports"]] == ["grpc"]
    assert f"port-forward deployment/{FULLNAME} 8088:8088" in notes
    assert "paste a token" in notes
    # kubectl port-forward's Host is 127.0.0.1 or localhost: the console needs no names of its own.
    assert "LEASED_CONSOLE_HOST" not in env_of(leased)
    defaults, default_notes = render(chart, {})
    assert "LEASED_CONSOLE_LISTEN" not in env_of(container(defaults))
    assert "Console" not in default_notes


def test_host_names_the_side_ports_answer_to(chart):
    """console.hosts and metrics.hosts become LEASED_CONSOLE_HOST and LEASED_METRICS_HOST (after
    the Service's names, with metrics.service.enabled)."""
    values = {
        "console": {"enabled": True, "hosts": ["leases.example.com", "leases-proxy"]},
        "metrics": {"enabled": True, "hosts": ["leased-metrics.monitoring.example"]},
    }
    objects, _ = render(chart, values)
    env = env_of(container(objects))
    assert env["LEASED_CONSOLE_HOST"]["value"] == "leases.example.com,leases-proxy"
    assert env["LEASED_METRICS_HOST"]["value"] == "leased-metrics.monitoring.example"
    values["metrics"]["service"] = {"enabled": True}
    objects, _ = render(chart, values)
    names = env_of(container(objects))["LEASED_METRICS_HOST"]["value"].split(",")
    assert names[0] == FULLNAME and names[-1] == "leased-metrics.monitoring.example"
    # Without the port they serve, the names are not set.
    objects, _ = render(chart, {"console": {"hosts": ["x.example"]}, "metrics": {"hosts": ["y"]}})
    assert {"LEASED_CONSOLE_HOST", "LEASED_METRICS_HOST"}.isdisjoint(env_of(container(objects)))
