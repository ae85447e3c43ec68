"""The value sets the chart is rendered with: each one a way an operator installs it."""

from __future__ import annotations

from typing import Any

import yaml

from tests.helm.chart import EXAMPLES

#: What every installation must give (the chart stops, naming them, without).
REQUIRED: dict[str, Any] = {
    "config": {"remoteUrl": "s3://tiered-kafka/prod"},
    "secrets": {"metadataUrl": "postgresql+psycopg://rlm:pw@postgres:5432/rlm", "readToken": "read-token-1"},
}


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        out[key] = (
            merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        )
    return out


def _example(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    return loaded


VALUE_SETS: dict[str, dict[str, Any]] = {
    # The chart's defaults and nothing but the required values.
    "defaults": REQUIRED,
    # The sidecar beside Bitnami Kafka, as the README installs it.
    "sidecar": merge(REQUIRED, _example("rlm-sidecar-values.yaml")),
    # The query tier with every option on.
    "standalone-full": merge(
        REQUIRED,
        {
            "mode": "standalone",
            "commonLabels": {"team": "streaming"},
            "commonAnnotations": {"owner": "streaming@example.com"},
            "image": {
                "registry": "registry.example.com",
                "digest": "sha256:" + "ab" * 32,
                "pullSecrets": ["regcred"],
            },
            "config": {
                "s3EndpointUrl": "https://minio.example.com:9000",
                "settings": {
                    "remote.log.offset.reader.threads": 8,
                    "remote.list.offsets.request.timeout.ms": 5000,
                },
                "topics": {
                    "defaults": {"retention.ms": 604800000},
                    "orders": {"retention.bytes": 1073741824, "cleanup.policy": "compact,delete"},
                },
            },
            "secrets": {
                "adminToken": "admin-token-1",
                "awsAccessKeyId": "AKIA0000",
                "awsSecretAccessKey": "s3cret",
            },
            "autoscaling": {"enabled": True, "targetMemory": 80},
            "pdb": {"create": True, "maxUnavailable": "25%"},
            "podAnnotations": {"example.com/scrape": "false"},
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "tolerations": [
                {"key": "dedicated", "operator": "Equal", "value": "kafka", "effect": "NoSchedule"}
            ],
            "topologySpreadConstraints": [
                {
                    "maxSkew": 1,
                    "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "ScheduleAnyway",
                    "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "rlm"}},
                }
            ],
            "priorityClassName": "high",
            "serviceAccount": {
                "annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/rlm"}
            },
            "networkPolicy": {
                "enabled": True,
                "allowExternal": False,
                "ingressNSMatchLabels": {"name": "monitoring"},
            },
            "pipelines": {
                "verify": {
                    "enabled": True,
                    "deep": True,
                    "topics": ["orders", "payments"],
                    "conf": {"spark.sql.shuffle.partitions": 8},
                    "timeZone": "Etc/UTC",
                },
                "compact": {
                    "enabled": True,
                    "topics": ["orders"],
                    "master": "k8s://https://kubernetes.default.svc",
                },
                "extraEnvVars": [{"name": "JAVA_TOOL_OPTIONS", "value": "-Xss4m"}],
            },
            "metrics": {
                "serviceMonitor": {
                    "enabled": True,
                    "labels": {"release": "prometheus"},
                    "scrapeTimeout": "10s",
                },
                "prometheusRule": {"enabled": True, "labels": {"release": "prometheus"}},
                "dashboard": {"enabled": True, "annotations": {"grafana_folder": "Kafka"}},
            },
        },
    ),
    # Secrets kept outside the chart (e.g. by an external secrets operator).
    "existing-secret": {
        "config": {"remoteUrl": "s3://tiered-kafka/prod"},
        "existingSecret": "rlm-credentials",
        "metrics": {"serviceMonitor": {"enabled": True}},
        "pipelines": {"verify": {"enabled": True}, "image": {"repository": "rlm-spark", "tag": "1.2.3"}},
    },
    # TLS on REST and gRPC from a cert-manager Secret, in both modes' shape.
    "tls": merge(
        REQUIRED,
        {
            "tls": {"enabled": True, "existingSecret": "rlm-tls"},
            "config": {"brokerId": 3},
            "metrics": {"serviceMonitor": {"enabled": True, "tlsConfig": {"insecureSkipVerify": True}}},
            "sidecar": {"readinessProbe": True},
        },
    ),
    "tls-standalone": merge(
        REQUIRED,
        {
            "mode": "standalone",
            "tls": {"enabled": True, "existingSecret": "rlm-tls"},
            "auth": {"enabled": False},
        },
    ),
}
