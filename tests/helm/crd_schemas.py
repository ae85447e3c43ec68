"""Schemas of the Prometheus Operator objects the chart renders (monitoring.coreos.com/v1), which
kubernetes-validate has none of: the fields of the operator's CRDs this chart uses, with their
types, and nothing else (an unknown or misspelt field is an error, as the CRD's structural schema
would drop it and the API server's strict field validation would refuse it)."""

from __future__ import annotations

from typing import Any

import jsonschema

_STR = {"type": "string"}
_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_DURATION = {
    "type": "string",
    "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
}
_SECRET_KEY = {
    "type": "object",
    "additionalProperties": False,
    "required": ["key"],
    "properties": {"name": _STR, "key": _STR, "optional": {"type": "boolean"}},
}
_METADATA = {
    "type": "object",
    "required": ["name"],
    "properties": {"name": _STR, "namespace": _STR, "labels": _MAP, "annotations": _MAP},
}


def _object(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": properties,
        "required": list(required),
    }


_ENDPOINT = _object(
    {
        "port": _STR,
        "path": _STR,
        "scheme": {"enum": ["http", "https"]},
        "interval": _DURATION,
        "scrapeTimeout": _DURATION,
        "authorization": _object({"type": _STR, "credentials": _SECRET_KEY}),
        "tlsConfig": _object(
            {
                "insecureSkipVerify": {"type": "boolean"},
                "serverName": _STR,
                "ca": {"type": "object"},
                "cert": {"type": "object"},
                "keySecret": _SECRET_KEY,
            }
        ),
        "relabelings": {"type": "array", "items": {"type": "object"}},
        "metricRelabelings": {"type": "array", "items": {"type": "object"}},
    }
)

SERVICE_MONITOR = _object(
    {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": _METADATA,
        "spec": _object(
            {
                "jobLabel": _STR,
                "namespaceSelector": _object(
                    {"any": {"type": "boolean"}, "matchNames": {"type": "array", "items": _STR}}
                ),
                "selector": _object({"matchLabels": _MAP}),
                "endpoints": {"type": "array", "minItems": 1, "items": _ENDPOINT},
            },
            ("selector", "endpoints"),
        ),
    },
    ("apiVersion", "kind", "metadata", "spec"),
)

_RULE = _object(
    {
        "alert": {"type": "string", "pattern": "^[a-zA-Z_][a-zA-Z0-9_]*$"},
        "expr": _STR,
        "for": _DURATION,
        "labels": _MAP,
        "annotations": _MAP,
    },
    ("alert", "expr"),
)

PROMETHEUS_RULE = _object(
    {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PrometheusRule"},
        "metadata": _METADATA,
        "spec": _object(
            {
                "groups": {
                    "type": "array",
                    "items": _object(
                        {"name": _STR, "rules": {"type": "array", "items": _RULE}}, ("name", "rules")
                    ),
                }
            },
            ("groups",),
        ),
    },
    ("apiVersion", "kind", "metadata", "spec"),
)

SCHEMAS = {"ServiceMonitor": SERVICE_MONITOR, "PrometheusRule": PROMETHEUS_RULE}


def validate_custom(manifest: dict[str, Any]) -> None:
    """Validate a Prometheus Operator object.

    Raises:
        jsonschema.ValidationError: it breaks the schema.
        KeyError: a kind this module has no schema of.
    """
    jsonschema.Draft7Validator(SCHEMAS[manifest["kind"]]).validate(manifest)
