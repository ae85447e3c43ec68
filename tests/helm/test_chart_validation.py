"""The chart renders, lints and validates offline for every value set: Helm SDK render and lint,
kubernetes-validate --strict against Kubernetes 1.30 and the newest schemas it has, yamllint."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml
from yamllint import linter
from yamllint.config import YamlLintConfig

from tests.helm.chart import CHART, EXAMPLES, NOTES, ROOT, render, rendered, sidecar_values
from tests.helm.crd_schemas import SCHEMAS, validate_custom
from tests.helm.values import VALUE_SETS, merge

#: The oldest Kubernetes the chart supports (Chart.yaml's kubeVersion) and the newest schemas
#: kubernetes-validate ships.
KUBERNETES = ("1.30.0", f"{kubernetes_validate.latest_version()}.0")
YAMLLINT = YamlLintConfig(file=str(ROOT / ".yamllint.yaml"))


def _lint_problems(text: str, path: str) -> list[str]:
    return [f"{path}:{p.line}: {p.desc} ({p.rule})" for p in linter.run(text, YAMLLINT, path)]


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_helm_lint_is_clean(value_set: str) -> None:
    report = helm.lint(CHART, VALUE_SETS[value_set], strict=True, kube_version=f"v{KUBERNETES[0]}")
    problems = [m for m in report["messages"] if m["severity"] >= 2] + report["errors"]
    assert problems == []
    assert report["total_charts_linted"] == 1


@pytest.mark.parametrize("version", KUBERNETES)
@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_every_manifest_validates_strictly(value_set: str, version: str) -> None:
    objects = rendered(value_set).objects
    assert objects
    for manifest in objects:
        if manifest["kind"] in SCHEMAS:
            validate_custom(manifest)
        else:
            kubernetes_validate.validate(manifest, version, strict=True)


def test_strict_validation_rejects_a_misspelt_field() -> None:
    deployment = rendered("standalone-full").one("Deployment")
    broken = yaml.safe_load(yaml.safe_dump(deployment))
    broken["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES[0], strict=True)
    monitor = yaml.safe_load(yaml.safe_dump(rendered("standalone-full").one("ServiceMonitor")))
    monitor["spec"]["endpoints"][0]["intervall"] = "30s"
    with pytest.raises(Exception, match="intervall"):
        validate_custom(monitor)


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_rendered_manifests_pass_yamllint(value_set: str) -> None:
    problems = []
    for path, text in rendered(value_set).files.items():
        if path != NOTES and text.strip():
            # As `helm template` prints it: the template's text without its leading blank lines.
            problems += _lint_problems(text.strip() + "\n", path)
    assert problems == []


def test_chart_and_example_files_pass_yamllint() -> None:
    files = [CHART / "Chart.yaml", CHART / "values.yaml", *sorted(EXAMPLES.glob("*.yaml"))]
    problems = [p for f in files for p in _lint_problems(f.read_text(), str(f.relative_to(ROOT)))]
    assert problems == []


def test_the_defaults_alone_stop_naming_every_required_value() -> None:
    with pytest.raises(helm.HelmRenderError) as err:
        render({})
    message = str(err.value)
    for needed in ("config.remoteUrl", "secrets.metadataUrl (or existingSecret)", "secrets.readToken"):
        assert needed in message


def test_tls_without_its_secret_stops() -> None:
    with pytest.raises(helm.HelmRenderError, match="tls.existingSecret"):
        render({**VALUE_SETS["defaults"], "tls": {"enabled": True}})


def test_the_bitnami_example_is_what_the_chart_prints() -> None:
    example: dict[str, Any] = yaml.safe_load((EXAMPLES / "bitnami-kafka-values.yaml").read_text())
    printed = sidecar_values(rendered("sidecar").notes)
    assert example == printed
    # Bitnami Kafka 32.x: the broker's data volume and the log directory the sidecar reads.
    sidecar = example["broker"]["sidecars"][0]
    assert {"name": "data", "mountPath": "/bitnami/kafka", "readOnly": True} in sidecar["volumeMounts"]
    rlm_ports = {p["containerPort"] for p in sidecar["ports"]}
    assert rlm_ports == {p["port"] for p in example["networkPolicy"]["extraIngress"][0]["ports"]}


def _service_monitor(**settings: Any) -> dict[str, Any]:
    return merge(VALUE_SETS["defaults"], {"metrics": {"serviceMonitor": {"enabled": True, **settings}}})


def test_a_service_monitor_in_another_namespace_without_a_token_secret_there_stops() -> None:
    # The Prometheus Operator reads a ServiceMonitor's authorization Secret from the
    # ServiceMonitor's own namespace: the release's Secret is not there, and nothing is scraped.
    with pytest.raises(helm.HelmRenderError) as err:
        render(_service_monitor(namespace="monitoring"))
    message = str(err.value)
    assert "metrics.serviceMonitor.namespace" in message and "monitoring" in message
    assert "metrics.serviceMonitor.tokenSecretName" in message


@pytest.mark.parametrize(
    ("values", "secret", "namespace"),
    [
        (_service_monitor(), "rlm", "kafka"),
        (_service_monitor(namespace="kafka"), "rlm", "kafka"),
        (_service_monitor(namespace="monitoring", tokenSecretName="rlm-scrape"), "rlm-scrape", "monitoring"),
    ],
)
def test_a_service_monitor_reads_a_token_secret_of_its_own_namespace(
    values: dict[str, Any], secret: str, namespace: str
) -> None:
    monitor = render(values).one("ServiceMonitor")
    assert monitor["metadata"]["namespace"] == namespace
    assert monitor["spec"]["endpoints"][0]["authorization"]["credentials"]["name"] == secret


def test_a_service_monitor_elsewhere_needs_no_secret_without_auth() -> None:
    values = merge(_service_monitor(namespace="monitoring"), {"auth": {"enabled": False}})
    monitor = render(values).one("ServiceMonitor")
    assert "authorization" not in monitor["spec"]["endpoints"][0]


@pytest.mark.parametrize(
    "probes",
    [
        {"sidecar": {"waitForBrokerIdSeconds": 600}},  # the startup probe gives 60 periods of 5 s
        {"startupProbe": {"enabled": False}},  # then the liveness probe, 6 periods of 10 s, comes first
    ],
    ids=["longer wait", "no startup probe"],
)
def test_a_wait_for_the_broker_id_longer_than_the_probes_allow_stops(probes: dict[str, Any]) -> None:
    # rlm serves nothing while it waits for meta.properties: a probe window shorter than the wait
    # kills it, again and again, on a broker's first start.
    with pytest.raises(helm.HelmRenderError, match="sidecar.waitForBrokerIdSeconds"):
        render(merge(VALUE_SETS["defaults"], probes))
    # With the broker id given, nothing waits.
    render(merge(VALUE_SETS["defaults"], merge(probes, {"config": {"brokerId": 1}})))


@pytest.mark.parametrize("given", ["awsAccessKeyId", "awsSecretAccessKey"])
def test_half_an_s3_key_pair_stops(given: str) -> None:
    # The id alone reached rlm with an empty secret key (botocore: partial credentials, every S3
    # call failing); the secret key alone was dropped without a word, for the AWS chain.
    with pytest.raises(helm.HelmRenderError, match="secrets.awsAccessKeyId"):
        render(merge(VALUE_SETS["defaults"], {"secrets": {given: "x"}}))
