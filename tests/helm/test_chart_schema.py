"""values.schema.json refuses unknown keys and wrong values: one case per rule."""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

import helm_python as helm
import pytest
import yaml

from rlm.config import Settings, TopicSettings
from tests.helm.chart import CHART, chart, rendered
from tests.helm.values import REQUIRED, VALUE_SETS

SCHEMA: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())


def _with(path: str, value: Any) -> dict[str, Any]:
    """The required values plus ``value`` at the dotted ``path`` (a key may hold dots: ``a/b.c``)."""
    values: dict[str, Any] = json.loads(json.dumps(REQUIRED))
    keys = path.split("/") if "/" in path else path.split(".")
    node = values
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value
    return values


CASES = [
    # (rule, path, wrong value, words of Helm's message)
    ("unknown top-level key", "replicas", 3, "additional properties 'replicas' not allowed"),
    ("unknown nested key", "image.tagg", "1.0", "additional properties 'tagg' not allowed"),
    ("unknown probe key", "livenessProbe.path", "/x", "additional properties 'path' not allowed"),
    ("mode is sidecar or standalone", "mode", "daemonset", "mode"),
    ("integer, not string", "replicaCount", "two", "got string, want integer"),
    ("at least one replica", "replicaCount", 0, "minimum"),
    ("boolean, not string", "auth.enabled", "yes", "got string, want boolean"),
    ("port range", "containerPorts.http", 70000, "maximum"),
    ("remote URL scheme", "config.remoteUrl", "bucket/prefix", "does not match pattern"),
    ("absolute log dirs", "config.logDirs", ["data"], "does not match pattern"),
    ("broker id is a number or null", "config.brokerId", "one", "want"),
    ("broker id not negative", "config.brokerId", -1, "minimum"),
    ("settings: only rlm settings", "config/settings/retention.msec", 1, "retention.msec"),
    ("settings: not the ones the chart sets", "config/settings/log.dirs", "/x", "log.dirs"),
    ("topic settings are rlm's", "config/topics/orders", {"retention.hours": 1}, "retention.hours"),
    ("topic names are Kafka's", "config/topics/bad name", {"retention.ms": 1}, "bad name"),
    ("image digest", "image.digest", "latest", "does not match pattern"),
    ("pull policy", "image.pullPolicy", "Sometimes", "pullPolicy"),
    ("service type", "service.type", "ExternalName", "type"),
    ("absolute mount path", "sidecar.dataMountPath", "bitnami/kafka", "does not match pattern"),
    ("wait not negative", "sidecar.waitForBrokerIdSeconds", -1, "minimum"),
    ("label values are strings", "commonLabels", {"tier": 1}, "got number, want string"),
    ("percent or count", "pdb.maxUnavailable", "half", "does not match pattern"),
    ("utilization percent", "autoscaling.targetCPU", 150, "maximum"),
    ("probe period", "readinessProbe.periodSeconds", 0, "minimum"),
    ("resource quantity", "resources.limits.memory", "lots", "does not match pattern"),
    ("log level", "logLevel", "trace", "logLevel"),
    ("seccomp profile type", "containerSecurityContext.seccompProfile.type", "Strict", "type"),
    ("scrape interval", "metrics.serviceMonitor.interval", "often", "does not match pattern"),
    ("alert duration", "metrics.prometheusRule.for", "10 minutes", "does not match pattern"),
    ("tokens without blanks", "secrets.readToken", "two words", "does not match pattern"),
    # In the tokens file the chart writes, `read #x` is a scope and a comment.
    ("read token not starting with #", "secrets.readToken", "#x", "does not match pattern"),
    ("admin token not starting with #", "secrets.adminToken", "#x", "does not match pattern"),
]


@pytest.mark.parametrize(("rule", "path", "value", "words"), CASES, ids=[c[0] for c in CASES])
def test_the_schema_rejects(rule: str, path: str, value: Any, words: str) -> None:
    with pytest.raises(helm.HelmValuesError) as err:
        chart().validate_schema(_with(path, value))
    assert words in str(err.value), rule


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_the_schema_accepts_every_value_set(value_set: str) -> None:
    chart().validate_schema(VALUE_SETS[value_set])


def test_the_defaults_are_valid() -> None:
    chart().validate_schema({})


def test_every_object_of_the_schema_refuses_unknown_keys() -> None:
    open_maps = []

    def walk(node: dict[str, Any], where: str) -> None:
        if node.get("type") == "object" and "properties" in node:
            if node.get("additionalProperties") is not False:
                open_maps.append(where)
            for key, child in node["properties"].items():
                walk(child, f"{where}.{key}")

    walk(SCHEMA, "values")
    assert open_maps == []


def test_config_settings_lists_every_rlm_setting_the_chart_does_not_set_itself() -> None:
    every = {f.name.replace("_", ".") for f in fields(Settings)} - {
        "topic.defaults",
        "topic.overrides",
        "topic.override.keys",
    }
    allowed = set(SCHEMA["properties"]["config"]["properties"]["settings"]["propertyNames"]["enum"])
    written = set()  # what the chart writes itself, besides what config.settings asks
    for name, values in VALUE_SETS.items():
        keys = set(yaml.safe_load(rendered(name).one("ConfigMap", "rlm")["data"]["rlm.yaml"]))
        written |= keys - set(values.get("config", {}).get("settings", {}))
    by_secret = {"metadata.url", "auth.tokens", "auth.tokens.file"}  # RLM_METADATA_URL_FILE, the token file
    assert allowed <= every
    assert not allowed & written
    assert every == allowed | (written - {"topics"}) | by_secret
    topic_keys = set(
        SCHEMA["properties"]["config"]["properties"]["topics"]["additionalProperties"]["properties"]
    )
    assert topic_keys == {f.name.replace("_", ".") for f in fields(TopicSettings)}
