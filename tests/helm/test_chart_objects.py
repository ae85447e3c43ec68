"""What the rendered objects must hold: real rlm settings, real routes and commands, secrets only
in Secrets, the broker's log directories mounted read-only, a non-root pod writing only to its
emptyDir volumes."""

from __future__ import annotations

import base64
import re
from dataclasses import fields
from pathlib import Path, PurePosixPath
from typing import Any

import helm_python as helm
import pytest
import yaml

from api.auth import Scope, TokenAuthenticator
from api.rest.app import create_app
from rlm.cli import build_parser
from rlm.config import Settings, check_variable_names, load_settings
from rlm.errors import BrokerIdUnknownError
from tests.helm.chart import ROOT, Manifest, Rendered, render, rendered, sidecar_values
from tests.helm.values import REQUIRED, VALUE_SETS, merge

SETTINGS_VARIABLES = {"RLM_" + f.name.upper() for f in fields(Settings)} - {
    "RLM_TOPIC_DEFAULTS",
    "RLM_TOPIC_OVERRIDES",
    "RLM_TOPIC_OVERRIDE_KEYS",
}
#: Read by load_settings besides the settings themselves: the settings file.
SETTINGS_FILE_VARIABLE = "RLM_CONFIG"


def _containers(r: Rendered) -> list[tuple[str, Manifest, Manifest]]:
    """(where, container, pod spec) of every rlm container: the workloads', and the sidecar the
    NOTES print for the Kafka chart (with its pod's volumes)."""
    found = [(name, c, spec) for name, spec in r.pod_specs() for c in spec["containers"]]
    if "# --- rlm sidecar values: begin ---" in r.notes:
        broker = sidecar_values(r.notes)["broker"]
        found += [("kafka broker pod", c, {"volumes": broker["extraVolumes"]}) for c in broker["sidecars"]]
    return found


def _settings_file(r: Rendered) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(r.one("ConfigMap", "rlm")["data"]["rlm.yaml"])
    return loaded


ALL = sorted(VALUE_SETS)


@pytest.mark.parametrize("value_set", ALL)
def test_every_rlm_variable_is_a_real_setting(value_set: str) -> None:
    names = [e["name"] for _, c, _ in _containers(rendered(value_set)) for e in c.get("env", [])]
    rlm_names = [n for n in names if n.startswith("RLM_")]
    assert "RLM_CONFIG" in rlm_names
    for name in rlm_names:
        setting = name.removesuffix("_FILE") if name not in SETTINGS_VARIABLES else name
        assert name == SETTINGS_FILE_VARIABLE or setting in SETTINGS_VARIABLES, name
    check_variable_names(dict.fromkeys(rlm_names, ""))  # rlm refuses a variable it does not read


@pytest.mark.parametrize("value_set", ALL)
def test_the_settings_file_is_one_rlm_loads_and_holds_no_secret(value_set: str, tmp_path: Any) -> None:
    r = rendered(value_set)
    text = r.one("ConfigMap", "rlm")["data"]["rlm.yaml"]
    path = tmp_path / "rlm.yaml"
    path.write_text(text)
    settings_file = _settings_file(r)
    if "log.dirs" in settings_file:  # the broker id is read from meta.properties in the pod
        settings_file.setdefault("broker.id", 0)
        path.write_text(yaml.safe_dump(settings_file))
    settings = load_settings(path, env={})
    assert settings.remote_url == VALUE_SETS[value_set]["config"]["remoteUrl"]
    assert "metadata.url" not in settings_file and "auth.tokens" not in settings_file


@pytest.mark.parametrize("value_set", ALL)
def test_secrets_are_never_in_a_config_map(value_set: str) -> None:
    values = VALUE_SETS[value_set]
    secret_values = [v for v in values.get("secrets", {}).values() if v]
    r = rendered(value_set)
    for config_map in r.of_kind("ConfigMap"):
        text = yaml.safe_dump(config_map)
        for secret in secret_values:
            assert secret not in text, (config_map["metadata"]["name"], secret)
    for _, container, _ in _containers(r):
        plain = [e.get("value", "") for e in container.get("env", [])]
        assert not any(secret in v for v in plain for secret in secret_values)
    if not values.get("existingSecret"):
        stored = {base64.b64decode(v).decode() for s in r.of_kind("Secret") for v in s["data"].values()}
        words = {word for text in stored for word in [text, *text.split()]}
        auth = values.get("auth", {}).get("enabled", True)
        kept = [v for k, v in values["secrets"].items() if v and (auth or not k.endswith("Token"))]
        assert set(kept) <= words


def test_the_tokens_file_the_chart_writes_holds_exactly_its_tokens(tmp_path: Path) -> None:
    # A # inside a token is part of it: rlm must not read `read ab#cd` as the token ab.
    values = merge(REQUIRED, {"secrets": {"readToken": "ab#cd", "adminToken": "ef#gh"}})
    secret = render(values).one("Secret", "rlm")
    tokens = tmp_path / "auth-tokens"
    tokens.write_bytes(base64.b64decode(secret["data"]["auth-tokens"]))
    auth = TokenAuthenticator.from_settings(Settings(auth_tokens_file=tokens))
    assert auth.authenticate("Bearer ab#cd") is Scope.READ
    assert auth.authenticate("Bearer ef#gh") is Scope.ADMIN
    assert auth.authenticate("Bearer ab") is None and auth.authenticate("Bearer ef") is None


@pytest.mark.parametrize("value_set", ALL)
def test_probes_hit_real_routes_on_the_rest_port(value_set: str) -> None:
    app = create_app(Settings(auth_enabled=False))
    routes = set(app.openapi()["paths"])
    r = rendered(value_set)
    port = _settings_file(r)["http.port"]
    tls = VALUE_SETS[value_set].get("tls", {}).get("enabled", False)
    for where, container, _ in _containers(r):
        if container["name"] != "rlm":
            continue
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        probes = {
            k: container[k] for k in ("livenessProbe", "readinessProbe", "startupProbe") if k in container
        }
        assert {"livenessProbe", "startupProbe"} <= set(probes), where
        for kind, probe in probes.items():
            get = probe["httpGet"]
            assert get["path"] in routes, (where, kind)
            assert get["path"] == ("/readyz" if kind == "readinessProbe" else "/healthz")
            assert ports[get["port"]] == port
            assert get["scheme"] == ("HTTPS" if tls else "HTTP")


def test_readiness_is_probed_in_standalone_mode_and_in_the_sidecar_only_when_asked() -> None:
    def probed(value_set: str) -> set[bool]:
        return {"readinessProbe" in c for _, c, _ in _containers(rendered(value_set)) if c["name"] == "rlm"}

    assert probed("standalone-full") == {True}
    assert probed("sidecar") == {False}  # it would take the broker out of its Services
    assert probed("tls") == {True}  # sidecar.readinessProbe: true


@pytest.mark.parametrize("value_set", ALL)
def test_every_command_is_one_rlm_takes(value_set: str) -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["rlm"]' in dockerfile
    parser = build_parser()
    for where, container, _ in _containers(rendered(value_set)):
        assert "command" not in container, where  # the image's entrypoint, rlm
        args = parser.parse_args(container["args"])
        assert args.command in ("serve", "db", "spark"), where


@pytest.mark.parametrize("value_set", ALL)
def test_the_hook_job_runs_rlm_db_upgrade_before_install_and_upgrade(value_set: str) -> None:
    r = rendered(value_set)
    job = r.one("Job", "rlm-db-upgrade")
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade"
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["db", "upgrade"]
    assert build_parser().parse_args(container["args"]).func.__name__ == "_upgrade"
    assert [e["name"] for e in container["env"]] == ["RLM_METADATA_URL_FILE"]
    # What the Job mounts exists before it runs: a hook Secret of a lower weight, or an existing one.
    (volume,) = [v for v in job["spec"]["template"]["spec"]["volumes"] if "secret" in v]
    secret_name = volume["secret"]["secretName"]
    existing = VALUE_SETS[value_set].get("existingSecret")
    if existing:
        assert secret_name == existing
    else:
        hook_secret = r.one("Secret", secret_name)["metadata"]["annotations"]
        assert hook_secret["helm.sh/hook"] == annotations["helm.sh/hook"]
        assert int(hook_secret["helm.sh/hook-weight"]) < int(annotations["helm.sh/hook-weight"])
    assert "serviceAccountName" not in job["spec"]["template"]["spec"]  # the chart's comes after hooks


def test_the_verify_cron_job_runs_rlm_spark_verify_from_the_spark_image() -> None:
    assert rendered("defaults").of_kind("CronJob") == []  # off unless asked for
    cron = rendered("standalone-full").one("CronJob", "rlm-verify")
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"  # never two scrubs at once
    assert cron["spec"]["timeZone"] == "Etc/UTC"
    (container,) = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    args = build_parser().parse_args(container["args"])
    assert args.func.__name__ == "_verify"
    assert (args.master, args.topic, args.deep) == ("local[*]", ["orders", "payments"], True)
    assert args.conf == ["spark.sql.shuffle.partitions=8"]
    app_version = yaml.safe_load((ROOT / "helm" / "rlm" / "Chart.yaml").read_text())["appVersion"]
    assert container["image"] == f"registry.example.com/rlm:{app_version}-spark"  # a digest is the service's
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert mounts == {"/etc/rlm/rlm.yaml", "/etc/rlm/secrets", "/tmp"}  # no broker disk
    env = {e["name"] for e in container["env"]}
    assert {"RLM_CONFIG", "RLM_METADATA_URL_FILE", "JAVA_TOOL_OPTIONS"} <= env
    shallow = rendered("existing-secret").one("CronJob", "rlm-verify")
    (container,) = shallow["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "rlm-spark:1.2.3"
    assert build_parser().parse_args(container["args"]).deep is False


def test_the_compact_cron_job_runs_rlm_spark_compact_on_the_compacted_topics() -> None:
    r = rendered("standalone-full")
    cron = r.one("CronJob", "rlm-compact")
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    (container,) = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    args = build_parser().parse_args(container["args"])
    assert args.func.__name__ == "_compact"
    assert (args.topic, args.dry_run, args.quiet) == (["orders"], False, True)
    # The topic it compacts is one the rendered settings give a compact policy.
    settings = _settings_file(r)
    assert "compact" in settings["topics"]["orders"]["cleanup.policy"]


def test_a_k8s_master_runs_executors_as_pods_the_job_may_create() -> None:
    r = rendered("standalone-full")
    cron = r.one("CronJob", "rlm-compact")
    spec = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    args = build_parser().parse_args(container["args"])
    assert args.master == "k8s://https://kubernetes.default.svc"
    conf = dict(c.split("=", 1) for c in args.conf)
    assert conf["spark.kubernetes.container.image"] == container["image"]
    assert conf["spark.kubernetes.namespace"] == "kafka"
    assert conf["spark.kubernetes.authenticate.driver.serviceAccountName"] == spec["serviceAccountName"]
    assert conf["spark.kubernetes.authenticate.executor.serviceAccountName"] == spec["serviceAccountName"]
    # Executors reach the driver at the pod's IP, which Kubernetes puts in the argument.
    assert conf["spark.driver.host"] == "$(POD_IP)"
    (pod_ip,) = [e for e in container["env"] if e["name"] == "POD_IP"]
    assert pod_ip["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert conf["spark.kubernetes.executor.secretKeyRef.AWS_ACCESS_KEY_ID"] == "rlm:aws-access-key-id"
    assert spec["automountServiceAccountToken"] is True  # the driver calls the API
    role = r.one("Role", "rlm-spark")
    (rule,) = role["rules"]
    assert "pods" in rule["resources"] and {"create", "delete", "watch"} <= set(rule["verbs"])
    binding = r.one("RoleBinding", "rlm-spark")
    assert binding["roleRef"]["name"] == "rlm-spark"
    account = {"kind": "ServiceAccount", "name": spec["serviceAccountName"], "namespace": "kafka"}
    assert binding["subjects"] == [account]
    # A local master needs none of it.
    verify = r.one("CronJob", "rlm-verify")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert verify["automountServiceAccountToken"] is False
    assert rendered("existing-secret").of_kind("Role") == []
    # Without static keys in the Secret, executors take the AWS chain (IRSA) of the service account.
    irsa = render(
        merge(
            REQUIRED, {"mode": "standalone", "pipelines": {"verify": {"enabled": True, "master": "k8s://x"}}}
        )
    )
    (container,) = irsa.one("CronJob", "rlm-verify")["spec"]["jobTemplate"]["spec"]["template"]["spec"][
        "containers"
    ]
    assert not [c for c in container["args"] if "secretKeyRef" in c]


@pytest.mark.parametrize("value_set", ALL)
def test_every_pod_runs_under_a_service_account_that_exists(value_set: str) -> None:
    r = rendered(value_set)
    accounts = {o["metadata"]["name"] for o in r.of_kind("ServiceAccount")}
    for where, spec in r.pod_specs():
        name = spec.get("serviceAccountName")
        if name is not None:
            assert name in accounts, where


def test_the_verify_cron_job_loads_its_settings_without_the_brokers_disks(tmp_path: Any) -> None:
    r = render(merge(REQUIRED, {"pipelines": {"verify": {"enabled": True}}}))  # sidecar, no broker.id
    config = tmp_path / "rlm.yaml"
    config.write_text(yaml.safe_dump(_settings_file(r)))
    with pytest.raises(BrokerIdUnknownError):  # the sidecar's settings need a broker's meta.properties
        load_settings(config, env={})
    (container,) = r.one("CronJob", "rlm-verify")["spec"]["jobTemplate"]["spec"]["template"]["spec"][
        "containers"
    ]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e and e["name"].startswith("RLM_")}
    env.pop("RLM_METADATA_URL_FILE")  # a file of the pod
    settings = load_settings(env.pop("RLM_CONFIG").replace("/etc/rlm/rlm.yaml", str(config)), env=env)
    assert settings.log_dirs == () and settings.remote_url == REQUIRED["config"]["remoteUrl"]


@pytest.mark.parametrize("value_set", ["defaults", "sidecar", "tls"])
def test_the_log_dirs_are_mounted_read_only_in_the_sidecar(value_set: str) -> None:
    r = rendered(value_set)
    log_dirs = [PurePosixPath(d) for d in _settings_file(r)["log.dirs"]]
    (sidecar,) = [c for where, c, _ in _containers(r) if where == "kafka broker pod"]
    holding = [m for m in sidecar["volumeMounts"] if any(d.is_relative_to(m["mountPath"]) for d in log_dirs)]
    assert holding and all(m.get("readOnly") is True for m in holding)


@pytest.mark.parametrize("value_set", ALL)
def test_the_pod_runs_non_root_and_writes_only_to_its_empty_dirs(value_set: str) -> None:
    r = rendered(value_set)
    user = int(re.findall(r"^USER (\d+):(\d+)$", (ROOT / "Dockerfile").read_text(), re.M)[-1][0])
    writable = {"/tmp", "/var/cache/rlm"}
    for where, container, spec in _containers(r):
        security = container["securityContext"]
        assert security["runAsNonRoot"] is True and security["runAsUser"] == user != 0, where
        assert security["readOnlyRootFilesystem"] is True
        assert security["allowPrivilegeEscalation"] is False and security["privileged"] is False
        assert security["capabilities"]["drop"] == ["ALL"]
        assert security["seccompProfile"] == {"type": "RuntimeDefault"}
        volumes = {v["name"]: v for v in spec["volumes"]}
        for mount in container["volumeMounts"]:
            if not mount.get("readOnly"):
                assert mount["mountPath"] in writable, (where, mount)
                assert "emptyDir" in volumes[mount["name"]], (where, mount)
    cache = PurePosixPath(_settings_file(r)["remote.log.index.cache.dir"])
    assert cache.is_relative_to("/var/cache/rlm")


#: Helm reads the values (values.yaml, -f) as JSON numbers, float64: an integer above 2**53 reaches
#: the templates rounded, so `retention.ms: 9223372036854775807` would be rendered 9223372036854776000.
UNSAFE_INTEGERS = [
    ("config/topics/defaults/retention.ms", 2**63 - 1),
    ("config/topics/orders/retention.bytes", 2**53 + 1),
    ("config/settings/remote.log.manager.copy.max.bytes.per.second", 2**60 + 1),
    ("indexCache/maxBytes", 2**53 + 1),
]


def _at(path: str, value: Any) -> dict[str, Any]:
    keys = path.split("/")
    extra: dict[str, Any] = {keys[-1]: value}
    for key in reversed(keys[:-1]):
        extra = {key: extra}
    return merge(REQUIRED, extra)


@pytest.mark.parametrize(("path", "value"), UNSAFE_INTEGERS, ids=[p for p, _ in UNSAFE_INTEGERS])
def test_an_integer_helm_would_round_is_refused_not_rendered_wrong(path: str, value: int) -> None:
    try:
        r = render(_at(path, value))
    except helm.HelmError as err:
        assert path.replace("/", ".") in str(err)
        assert "quote" in str(err)  # the way out: a string rlm parses exactly
        return
    text = r.one("ConfigMap", "rlm")["data"]["rlm.yaml"]
    assert str(value) in text, f"{path}: {value} rendered as\n{text}"


def test_a_quoted_long_max_reaches_rlm_exactly(tmp_path: Path) -> None:
    values = merge(
        REQUIRED,
        {
            "config": {
                "brokerId": 0,
                "topics": {
                    "defaults": {"retention.ms": str(2**63 - 1)},
                    "orders": {"retention.bytes": 2**53 - 1},
                },
            }
        },
    )
    path = tmp_path / "rlm.yaml"
    path.write_text(render(values).one("ConfigMap", "rlm")["data"]["rlm.yaml"])
    settings = load_settings(path, env={})
    assert settings.topic_defaults.retention_ms == 2**63 - 1
    assert settings.topic_overrides["orders"].retention_bytes == 2**53 - 1


#: Kafka's defaults: log.segment.bytes, and message.max.bytes (the largest batch).
KAFKA_SEGMENT_BYTES, KAFKA_MAX_BATCH_BYTES = 1073741824, 1048588
UNITS = {"": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def _bytes(quantity: str) -> int:
    found = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti)?", quantity)
    assert found, quantity
    return int(found.group(1)) * UNITS[found.group(2) or ""]


def test_tmp_holds_a_segment_for_every_copier_thread_at_once() -> None:
    # Each copier thread (remote.log.manager.copier.thread.pool.size of them, one partition each)
    # may write a trimmed or joined segment under /tmp at the same time, e.g. after an unclean
    # election on many partitions. Past its emptyDir's sizeLimit the kubelet evicts the pod: in
    # sidecar mode the Kafka broker with it.
    r = rendered("defaults")
    (volume,) = [v for v in sidecar_values(r.notes)["broker"]["extraVolumes"] if v["name"] == "rlm-tmp"]
    threads = Settings().remote_log_manager_copier_thread_pool_size
    assert _bytes(volume["emptyDir"]["sizeLimit"]) >= threads * (KAFKA_SEGMENT_BYTES + KAFKA_MAX_BATCH_BYTES)
