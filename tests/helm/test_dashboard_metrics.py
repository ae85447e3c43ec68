"""Every metric the Grafana dashboard and the alert rules query is one rlm exports.

The names come from parsing each PromQL expression (promql-parser), and are checked against the
exposition names of rlm's real registry (``Metrics(CollectorRegistry())``): a counter ``x`` is
exposed as ``x_total``, a histogram as ``x_bucket``, ``x_sum`` and ``x_count``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import promql_parser
import pytest
from prometheus_client import CollectorRegistry

from rlm.metrics import Metrics
from tests.helm.chart import CHART, rendered

#: Grafana's variables, replaced by what Grafana substitutes before the query reaches Prometheus.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$namespace": "kafka", "$topic": "orders"}
LABEL_VALUES = re.compile(r"^label_values\((.+),\s*\w+\)$")


def _exposed_names() -> set[str]:
    names = {"up"}  # Prometheus's own, one per scraped target
    for family in Metrics(CollectorRegistry()).registry.collect():
        if family.type == "counter":
            names |= {f"{family.name}_total", f"{family.name}_created"}
        elif family.type == "histogram":
            names |= {f"{family.name}_{s}" for s in ("bucket", "sum", "count", "created")}
        else:
            names.add(family.name)
    return names


def _metric_names(expr: str) -> set[str]:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    names: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector) and node.name:
            names.add(node.name)
        for attr in ("expr", "lhs", "rhs", "vector_selector", "param"):
            child = getattr(node, attr, None)
            if child is not None and not isinstance(child, str | int | float):
                visit(child)
        for arg in getattr(node, "args", None) or []:
            visit(arg)

    visit(promql_parser.parse(expr))
    return names


def _dashboard_queries() -> Iterator[tuple[str, str]]:
    dashboard = json.loads((CHART / "files" / "dashboards" / "rlm.json").read_text())
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            found = LABEL_VALUES.match(variable["query"]["query"])
            assert found, variable["query"]
            yield f"variable {variable['name']}", found.group(1)


def _alert_queries() -> Iterator[tuple[str, str]]:
    rule = rendered("standalone-full").one("PrometheusRule")
    for group in rule["spec"]["groups"]:
        for alert in group["rules"]:
            yield alert["alert"], alert["expr"]


QUERIES = [*_dashboard_queries(), *_alert_queries()]


def test_the_parser_finds_every_selector() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le) (rate(a_bucket{x="1"}[5m]))) / on() b + max(c) and d offset 5m'
    )
    assert _metric_names(expr) == {"a_bucket", "b", "c", "d"}


@pytest.mark.parametrize(("where", "expr"), QUERIES, ids=[w for w, _ in QUERIES])
def test_every_queried_metric_is_exported(where: str, expr: str) -> None:
    exposed = _exposed_names()
    names = _metric_names(expr)
    assert names, f"{where}: no metric in {expr}"
    unknown = names - exposed
    assert unknown == set(), f"{where} queries metrics rlm does not export: {unknown}"


def test_the_dashboard_covers_what_operators_watch() -> None:
    queried = {name for _, expr in _dashboard_queries() for name in _metric_names(expr)}
    assert {
        "rlm_copy_lag_segments", "rlm_copy_lag_bytes", "rlm_copy_lag_seconds",
        "rlm_copy_bytes_total", "rlm_copy_errors_total",
        "rlm_lookup_seconds_bucket", "rlm_lookup_seconds_count", "rlm_fetch_seconds_bucket",
        "rlm_fetch_seconds_count", "rlm_pool_task_queue_size", "rlm_remote_list_offsets_expirations_total",
        "rlm_metadata_errors_total", "rlm_remote_log_size_bytes",
    } <= queried  # fmt: skip


def test_the_alerts_watch_what_loses_records_or_stops_tiering() -> None:
    alerted = {name for _, expr in _alert_queries() for name in _metric_names(expr)}
    assert {
        # Records the broker deleted before they were tiered: gone from both tiers.
        "rlm_copy_gaps_total",
        # A partition's copying stopped at a segment it cannot copy, until repaired or skipped:
        # the broker's local retention goes on deleting what is behind it.
        "rlm_copy_blocked",
        # A pass of the copier or of retention ended by an error (retention then enforces nothing).
        "rlm_loop_errors_total",
    } <= alerted


def _selectors(node: Any) -> Iterator[promql_parser.VectorSelector]:
    if isinstance(node, promql_parser.VectorSelector):
        yield node
    for attr in ("expr", "lhs", "rhs", "vector_selector", "param"):
        child = getattr(node, attr, None)
        if child is not None and not isinstance(child, str | int | float):
            yield from _selectors(child)
    for arg in getattr(node, "args", None) or []:
        yield from _selectors(arg)


@pytest.mark.parametrize("value_set", ["sidecar", "standalone-full"])
def test_an_alert_fires_when_the_scraped_rlm_is_down(value_set: str) -> None:
    # A sidecar that crash-loops (settings refused, a wrong password) exports nothing: every other
    # alert stays silent while the broker's local retention deletes what was never tiered. Only
    # Prometheus's `up` of the ServiceMonitor's targets tells.
    r = rendered(value_set)
    service = r.one("Service")["metadata"]
    monitor = r.one("ServiceMonitor")["spec"]
    assert service["namespace"] in monitor["namespaceSelector"]["matchNames"]
    assert monitor["selector"]["matchLabels"].items() <= service["labels"].items()
    found = []
    for group in r.one("PrometheusRule")["spec"]["groups"]:
        for alert in group["rules"]:
            for selector in _selectors(promql_parser.parse(alert["expr"])):
                if selector.name == "up":
                    matchers = {m.name: m.value for m in selector.matchers.matchers}
                    found.append((alert["alert"], matchers))
    assert found, "no alert on up"
    for _, matchers in found:
        # The Prometheus Operator labels a target with its Service's name and namespace.
        assert matchers == {"namespace": service["namespace"], "service": service["name"]}
