"""The objects of each mode fit together: selectors select, names resolve, hooks come first."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

import pytest
import yaml

from tests.helm.chart import Manifest, render, rendered, sidecar_values
from tests.helm.values import REQUIRED, merge


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_standalone_is_a_deployment_with_autoscaling_and_a_disruption_budget() -> None:
    r = rendered("standalone-full")
    deployment = r.one("Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert "replicas" not in deployment["spec"]  # the autoscaler owns it
    hpa = r.one("HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "rlm"}
    assert [m["resource"]["name"] for m in hpa["spec"]["metrics"]] == ["cpu", "memory"]
    pdb = r.one("PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == "25%"
    job_labels = r.one("Job")["spec"]["template"]["metadata"]["labels"]
    for selector in (
        deployment["spec"]["selector"]["matchLabels"],
        pdb["spec"]["selector"]["matchLabels"],
        r.one("Service")["spec"]["selector"],
        r.one("NetworkPolicy")["spec"]["podSelector"]["matchLabels"],
    ):
        assert _selects(selector, pod_labels) and not _selects(selector, job_labels)
    spec = deployment["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == r.one("ServiceAccount")["metadata"]["name"]
    annotations = r.one("ServiceAccount")["metadata"]["annotations"]
    assert annotations["eks.amazonaws.com/role-arn"].startswith("arn:aws:iam::")
    settings = yaml.safe_load(r.one("ConfigMap", "rlm")["data"]["rlm.yaml"])
    assert "log.dirs" not in settings and "broker.id" not in settings  # the query tier
    assert settings["remote.log.offset.reader.threads"] == 8
    assert settings["topics"]["orders"] == {"retention.bytes": 1073741824, "cleanup.policy": "compact,delete"}


def test_standalone_network_policy_admits_the_api_ports_from_labelled_clients() -> None:
    r = rendered("standalone-full")
    policy = r.one("NetworkPolicy")["spec"]
    (ingress,) = policy["ingress"]
    assert {p["port"] for p in ingress["ports"]} == {8080, 9090}
    assert {"podSelector": {"matchLabels": {"rlm-client": "true"}}} in ingress["from"]
    assert {"namespaceSelector": {"matchLabels": {"name": "monitoring"}}} in ingress["from"]


def test_the_sidecar_mode_renders_no_workload_of_its_own_and_a_headless_service_on_the_brokers() -> None:
    r = rendered("sidecar")
    assert {o["kind"] for o in r.objects} == {
        "ConfigMap", "Secret", "Service", "Job", "ServiceMonitor", "PrometheusRule",
    }  # fmt: skip
    service = r.one("Service")["spec"]
    assert service["clusterIP"] == "None"
    broker_labels = {
        "app.kubernetes.io/name": "kafka",
        "app.kubernetes.io/instance": "kafka",
        "app.kubernetes.io/component": "broker",
    }
    assert _selects(service["selector"], broker_labels)
    (sidecar,) = sidecar_values(r.notes)["broker"]["sidecars"]
    ports = {p["name"] for p in sidecar["ports"]}
    assert {p["targetPort"] for p in service["ports"]} <= ports
    assert "--wait-for-broker-id" in sidecar["args"]  # one spec for every broker pod


def test_every_volume_the_sidecar_mounts_is_the_brokers_or_comes_with_it() -> None:
    r = rendered("sidecar")
    broker = sidecar_values(r.notes)["broker"]
    (sidecar,) = broker["sidecars"]
    given = {v["name"] for v in broker["extraVolumes"]}
    assert {m["name"] for m in sidecar["volumeMounts"]} == given | {"data"}
    names = {o["metadata"]["name"] for o in r.objects}
    for volume in broker["extraVolumes"]:
        ref = volume.get("configMap", {}).get("name") or volume.get("secret", {}).get("secretName")
        assert ref is None or ref in names, volume


def test_an_existing_secret_replaces_the_charts() -> None:
    r = rendered("existing-secret")
    assert r.of_kind("Secret") == []
    referenced = yaml.safe_dump(sidecar_values(r.notes)) + yaml.safe_dump(r.objects)
    assert "secretName: rlm-credentials" in referenced
    monitor = r.one("ServiceMonitor")["spec"]["endpoints"][0]
    assert monitor["authorization"]["credentials"] == {"name": "rlm-credentials", "key": "metrics-token"}


def test_tls_serves_both_apis_from_the_certificate_secret() -> None:
    for value_set in ("tls", "tls-standalone"):
        r = rendered(value_set)
        settings = yaml.safe_load(r.one("ConfigMap", "rlm")["data"]["rlm.yaml"])
        workloads: list[tuple[Manifest, list[Manifest]]] = [
            (c, s["volumes"]) for _, s in r.pod_specs() for c in s["containers"] if c["name"] == "rlm"
        ]
        if "# --- rlm sidecar values: begin ---" in r.notes:
            broker = sidecar_values(r.notes)["broker"]
            workloads += [(c, broker["extraVolumes"]) for c in broker["sidecars"]]
        assert workloads
        for container, volumes in workloads:
            (mount,) = [m for m in container["volumeMounts"] if m["name"] == "rlm-tls"]
            for key in ("tls.cert.file", "tls.key.file"):
                assert PurePosixPath(settings[key]).parent == PurePosixPath(mount["mountPath"])
            (volume,) = [v for v in volumes if v["name"] == "rlm-tls"]
            assert volume["secret"]["secretName"] == "rlm-tls"
    monitor = rendered("tls").one("ServiceMonitor")["spec"]["endpoints"][0]
    assert monitor["scheme"] == "https" and monitor["tlsConfig"] == {"insecureSkipVerify": True}


def test_the_service_monitor_scrapes_the_service_with_the_read_token() -> None:
    r = rendered("standalone-full")
    monitor = r.one("ServiceMonitor")
    service = r.one("Service")
    assert _selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    credentials = endpoint["authorization"]["credentials"]
    assert credentials["key"] in r.one("Secret", credentials["name"])["data"]
    assert monitor["metadata"]["labels"]["release"] == "prometheus"


def test_the_dashboard_config_map_is_labelled_for_the_grafana_sidecar() -> None:
    dashboard = rendered("standalone-full").one("ConfigMap", "rlm-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["metadata"]["annotations"]["grafana_folder"] == "Kafka"
    assert list(dashboard["data"]) == ["rlm.json"]


def test_a_set_broker_id_is_written_and_nothing_waits_for_meta_properties() -> None:
    r = rendered("tls")  # config.brokerId: 3
    assert yaml.safe_load(r.one("ConfigMap", "rlm")["data"]["rlm.yaml"])["broker.id"] == 3
    (sidecar,) = sidecar_values(r.notes)["broker"]["sidecars"]
    assert "--wait-for-broker-id" not in sidecar["args"]


def test_a_settings_change_rolls_the_broker_pods_that_run_the_sidecar() -> None:
    # rlm reads rlm.yaml, a subPath mount the kubelet never updates, at start only: without a
    # checksum in the broker pods' template, a longer retention.ms given to `helm upgrade rlm` would
    # never reach the running sidecars, which would go on deleting by the old one.
    def printed(extra: dict[str, Any]) -> dict[str, Any]:
        broker: dict[str, Any] = sidecar_values(render(merge(REQUIRED, extra)).notes)["broker"]
        return broker

    week = printed({"config": {"topics": {"defaults": {"retention.ms": 604800000}}}})
    month = printed({"config": {"topics": {"defaults": {"retention.ms": 2592000000}}}})
    assert week.get("podAnnotations") and month.get("podAnnotations")
    assert week["podAnnotations"] != month["podAnnotations"]
    assert printed({"config": {"topics": {"defaults": {"retention.ms": 604800000}}}}) == week
    # What rlm does not read (labels, annotations, the chart's version in them) restarts no broker.
    relabelled = printed(
        {"config": {"topics": {"defaults": {"retention.ms": 604800000}}}, "commonLabels": {"team": "x"}}
    )
    assert relabelled["podAnnotations"] == week["podAnnotations"]


def test_the_printed_sidecar_values_open_the_kafka_network_policy_to_the_rlm_ports() -> None:
    # Bitnami Kafka's NetworkPolicy admits Kafka's ports only: without the rlm ports in it, nothing
    # reaches rlm's REST and gRPC, nor Prometheus its /metrics (and no alert ever fires).
    printed = sidecar_values(render(merge(REQUIRED, {"containerPorts": {"http": 8081, "grpc": 9091}})).notes)
    (sidecar,) = printed["broker"]["sidecars"]
    ports = {p["containerPort"] for p in sidecar["ports"]}
    assert ports == {8081, 9091}
    admitted = {p["port"] for rule in printed["networkPolicy"]["extraIngress"] for p in rule["ports"]}
    assert ports <= admitted


def test_the_default_disruption_budget_never_blocks_a_node_drain() -> None:
    # One replica without the autoscaler: a budget of minAvailable 1 would allow no eviction at
    # all, and `kubectl drain` of its node would hang until someone deletes the pod by hand.
    for replicas in (1, 2, 3):
        values = merge(
            REQUIRED, {"mode": "standalone", "autoscaling": {"enabled": False}, "replicaCount": replicas}
        )
        spec = render(values).one("PodDisruptionBudget")["spec"]
        allowed = spec["maxUnavailable"] if "maxUnavailable" in spec else replicas - spec["minAvailable"]
        assert allowed == 1, (replicas, spec)


@pytest.mark.parametrize("value_set", ["sidecar", "tls"])
def test_the_broker_pod_starts_without_the_objects_of_the_rlm_release(value_set: str) -> None:
    # The broker pods mount the rlm release's ConfigMap and Secrets. A volume of a ConfigMap or
    # Secret that is not there keeps the whole pod from starting, Kafka with it: after `helm
    # uninstall rlm`, or when the Kafka values land before the rlm release (GitOps), every broker
    # that restarted would stay down. Optional, only the rlm container fails (RlmDown says so).
    broker = sidecar_values(rendered(value_set).notes)["broker"]
    sources = [v.get("configMap") or v.get("secret") for v in broker["extraVolumes"]]
    sources = [s for s in sources if s is not None]
    assert sources
    for source in sources:
        assert source.get("optional") is True, source
