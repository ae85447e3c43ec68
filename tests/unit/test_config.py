"""Settings from YAML and the environment."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rlm.config import Settings, TopicSettings, check_variable_names, load_settings
from rlm.errors import ConfigError


def test_defaults_file_environment_and_overrides_layer(tmp_path: Path) -> None:
    config = tmp_path / "rlm.yaml"
    config.write_text(
        "log.dirs: [/data/a, /data/b]\n"
        "broker.id: 2\n"
        "remote.url: s3://bucket/prefix\n"
        "remote.log.offset.reader.threads: 8\n"
        "topics:\n"
        "  defaults: {retention.ms: 1000}\n"
        "  orders: {retention.bytes: 5000, remote.storage.enable: false}\n"
    )
    env = {"RLM_BROKER_ID": "7", "RLM_REMOTE_LIST_OFFSETS_REQUEST_TIMEOUT_MS": "1500"}
    settings = load_settings(config, env=env, http_port=0)
    assert settings.log_dirs == (Path("/data/a"), Path("/data/b"))
    assert settings.broker_id == 7  # the environment wins over the file
    assert settings.remote_url == "s3://bucket/prefix"
    assert settings.remote_log_offset_reader_threads == 8
    assert settings.remote_list_offsets_request_timeout_ms == 1500
    assert settings.http_port == 0
    assert settings.topic("clicks") == TopicSettings(retention_ms=1000)
    assert settings.topic("orders") == TopicSettings(
        retention_ms=1000, retention_bytes=5000, remote_storage_enable=False
    )


def test_environment_names_a_config_file(tmp_path: Path) -> None:
    config = tmp_path / "rlm.yaml"
    config.write_text("broker.id: 4\n")
    assert load_settings(env={"RLM_CONFIG": str(config)}).broker_id == 4


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RLM_BROKER_ID": "seven"}, "broker.id"),
        ({"RLM_REMOTE_LOG_OFFSET_READER_THREADS": "0"}, "remote.log.offset.reader.threads must be > 0"),
        ({"RLM_RETENTION_MS": "-5"}, "retention.ms must be -1"),
        ({"RLM_REMOTE_STORAGE_ENABLE": "maybe"}, "remote.storage.enable"),
        ({"RLM_HTTP_PORT": "70000"}, "http.port must be a port number"),
    ],
)
def test_bad_values_name_the_setting(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(env=env)


def test_unknown_keys_and_bad_files_are_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("retention.msec: 5\n")
    with pytest.raises(ConfigError, match="unknown setting 'retention.msec'"):
        load_settings(bad, env={})
    bad.write_text("topics:\n  orders: {retention.msec: 5}\n")
    with pytest.raises(ConfigError, match="topics.orders: unknown topic setting"):
        load_settings(bad, env={})
    with pytest.raises(ConfigError, match="cannot read settings file"):
        load_settings(tmp_path / "missing.yaml", env={})


def test_replace_validates() -> None:
    with pytest.raises(ConfigError, match="copy.max.bytes.per.second"):
        Settings().replace(remote_log_manager_copy_max_bytes_per_second=0)


@pytest.mark.parametrize(
    ("topics", "message"),
    [
        # YAML reads this name as a boolean: the override would be another topic's, and the
        # topic itself would silently get the defaults (a week's retention).
        ("  on: {retention.ms: -1}\n", r"topics: the key True .*bool.*quote"),
        ("  orders: -1\n", r"topics.orders must be a mapping of topic settings, not '-1'"),
        ("  defaults: [retention.ms]\n", r"topics.defaults must be a mapping of topic settings"),
    ],
)
def test_topic_overrides_that_cannot_be_meant_are_errors(tmp_path: Path, topics: str, message: str) -> None:
    config = tmp_path / "rlm.yaml"
    config.write_text("topics:\n" + topics)
    with pytest.raises(ConfigError, match=message):
        load_settings(config, env={})


def test_numbers_are_read_in_decimal_as_kafka_reads_them(tmp_path: Path) -> None:
    # YAML 1.1 reads 03600000 as octal (983040) and 1:30 as 90: an hour's retention.ms typed
    # with a leading zero would have expired records after 16 minutes. Kafka's Long.parseLong
    # reads 03600000 as 3600000.
    config = tmp_path / "rlm.yaml"
    config.write_text(
        "remote.log.manager.copier.thread.pool.size: 010\n"
        "topics:\n  defaults: {retention.ms: 03600000}\n  010: {retention.bytes: -1}\n"
    )
    settings = load_settings(config, env={})
    assert settings.remote_log_manager_copier_thread_pool_size == 10
    assert settings.topic_defaults.retention_ms == 3_600_000
    assert settings.topic("010").retention_bytes == -1  # the topic's name as written, not 8
    assert settings.topic("8") == settings.topic_defaults


@pytest.mark.parametrize("written", ["0x10", "1:30", "1_000", "1e3", "+5", "1.5", ".inf"])
def test_number_forms_kafka_refuses_are_errors_naming_the_setting(tmp_path: Path, written: str) -> None:
    config = tmp_path / "rlm.yaml"
    config.write_text(f"topics:\n  defaults: {{retention.ms: {written}}}\n")
    with pytest.raises(ConfigError, match=rf"retention\.ms.*{re.escape(written)}.*not an integer"):
        load_settings(config, env={})


def test_topics_must_be_a_mapping(tmp_path: Path) -> None:
    config = tmp_path / "rlm.yaml"
    config.write_text("topics: [orders]\n")
    with pytest.raises(ConfigError, match="topics must be a mapping of topic names"):
        load_settings(config, env={})
    config.write_text("topics:\n  'on': {retention.ms: -1}\n  '010': {retention.bytes: 5}\n  orders:\n")
    settings = load_settings(config, env={})
    assert settings.topic("on").retention_ms == -1
    assert settings.topic("010").retention_bytes == 5
    assert settings.topic("orders") == settings.topic_defaults


def test_an_optional_setting_written_without_a_value_is_unset(tmp_path: Path) -> None:
    # YAML reads `key:` with nothing after it as null: the setting left at its default, never
    # the text "None" (an endpoint URL 'None', TLS switched on with a certificate file 'None').
    config = tmp_path / "rlm.yaml"
    config.write_text(
        "s3.endpoint.url:\n"
        "s3.region: ~\n"
        "tls.cert.file:\n"
        "tls.key.file:\n"
        "metadata.log.dir: null\n"
        "export.iceberg.warehouse:\n"
        "export.iceberg.catalog.url:\n"
        "auth.tokens.file:\n"
    )
    settings = load_settings(config, env={})
    assert settings.s3_endpoint_url is None
    assert settings.s3_region is None
    assert settings.tls_cert_file is None and settings.tls_key_file is None
    assert settings.metadata_log_dir is None
    assert settings.export_iceberg_warehouse is None
    assert settings.export_iceberg_catalog_url is None
    assert settings.auth_tokens_file is None


@pytest.mark.parametrize(
    ("written", "key"),
    [
        ("remote.url:\n", "remote.url"),
        ("metadata.url: null\n", "metadata.url"),
        ("http.port:\n", "http.port"),
        ("log.dirs:\n", "log.dirs"),
        ("auth.enabled:\n", "auth.enabled"),
        ("remote.log.index.cache.dir:\n", "remote.log.index.cache.dir"),
        ("topics:\n  defaults: {retention.ms: null}\n", "retention.ms"),
        ("topics:\n  orders:\n    cleanup.policy:\n", "cleanup.policy"),
    ],
)
def test_a_setting_without_a_value_that_needs_one_is_an_error(tmp_path: Path, written: str, key: str) -> None:
    config = tmp_path / "rlm.yaml"
    config.write_text(written)
    with pytest.raises(ConfigError, match=rf"^{re.escape(key)} has no value"):
        load_settings(config, env={})


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("RLM_REMOTE_ULR", "RLM_REMOTE_URL"),
        ("RLM_METADATA_URL_FLIE", "RLM_METADATA_URL_FILE"),
        ("RLM_RETENTION_MSEC", "RLM_RETENTION_MS"),
        ("RLM_GPRC_PORT", "RLM_GRPC_PORT"),  # shaped like a service link's _PORT, but not one
        ("RLM_CONFIG_FILE", "RLM_CONFIG"),
    ],
)
def test_a_misspelt_variable_is_an_error_naming_the_one_meant(name: str, meant: str) -> None:
    # A YAML key that is no setting is an error: so is a variable, instead of a sidecar silently
    # tiering into the embedded default because RLM_REMOTE_URL was misspelt.
    with pytest.raises(ConfigError, match=rf"^{name} is no setting.*did you mean {meant}\?"):
        load_settings(env={name: "9090"})


def test_an_unknown_variable_like_no_setting_is_an_error_too() -> None:
    with pytest.raises(ConfigError, match=r"^RLM_QWERTY is no setting") as refused:
        load_settings(env={"RLM_QWERTY": "1"})
    assert "did you mean" not in str(refused.value)


def test_variables_rlm_reads_elsewhere_and_kubernetes_service_links_are_accepted() -> None:
    env = {
        "RLM_TOKEN": "t",  # rlm lookup --grpc
        "RLM_TEST_POSTGRES_URL": "postgresql+psycopg://postgres@db/postgres",  # the tests
        "RLM_ALLOW_PURE_PYTHON": "1",
        # What Kubernetes puts in every pod of a namespace with a Service named rlm or rlm-metrics.
        "RLM_SERVICE_HOST": "10.96.0.12",
        "RLM_SERVICE_PORT": "8080",
        "RLM_SERVICE_PORT_HTTP": "8080",
        "RLM_SERVICE_PORT_GRPC": "9090",
        "RLM_PORT": "tcp://10.96.0.12:8080",
        "RLM_PORT_8080_TCP": "tcp://10.96.0.12:8080",
        "RLM_PORT_8080_TCP_PROTO": "tcp",
        "RLM_PORT_8080_TCP_PORT": "8080",
        "RLM_PORT_8080_TCP_ADDR": "10.96.0.12",
        "RLM_METRICS_PORT": "tcp://10.96.0.13:9100",
        "RLM_METRICS_SERVICE_HOST": "10.96.0.13",
    }
    assert load_settings(env=env, http_port=1).http_port == 1


def test_every_variable_the_docs_and_the_chart_name_is_accepted() -> None:
    root = Path(__file__).resolve().parents[2]
    texts = [root / "README.md", root / "Makefile", root / "helm" / "rlm" / "README.md"]
    texts += [*(root / "examples").rglob("*"), *(root / "helm" / "rlm" / "templates").rglob("*")]
    names = {
        n for t in texts if t.is_file() for n in re.findall(r"\bRLM_[A-Z0-9_]*[A-Z0-9]\b", t.read_text())
    }
    assert {"RLM_CONFIG", "RLM_METADATA_URL_FILE", "RLM_AUTH_TOKENS_FILE"} <= names
    names.remove("RLM_REMOTE_ULR")  # the README's example of a misspelt variable, refused
    check_variable_names(dict.fromkeys(names, "tcp://10.96.0.12:8080"))  # the README names RLM_PORT


@pytest.mark.parametrize("where", ["file", "variable", "secret file"])
def test_an_empty_remote_url_is_an_error_not_the_embedded_directory(tmp_path: Path, where: str) -> None:
    # `remote.url:` without a value is an error; so is one given empty (a variable set from an
    # unset one, a Secret's empty key): the embedded default, a directory under the working
    # directory, would take the broker's segments while the metadata store, which other sidecars
    # and the query tiers read, said they were tiered.
    config = tmp_path / "rlm.yaml"
    config.write_text('remote.url: ""\n' if where == "file" else "{}\n")
    secret = tmp_path / "remote-url"
    secret.write_text("\n")
    env = {"variable": {"RLM_REMOTE_URL": ""}, "secret file": {"RLM_REMOTE_URL_FILE": str(secret)}}
    with pytest.raises(ConfigError, match=r"^remote\.url is empty"):
        load_settings(config, env=env.get(where, {}))
    assert load_settings(env={}).remote_url.endswith("/build/rlm/remote")  # left out: the default


@pytest.mark.parametrize(
    ("written", "key"),
    [
        # The second `orders` replaced the first: its retention.ms -1 was lost, and the topic's
        # remote segments went after the default week.
        (
            "topics:\n  orders: {retention.ms: -1}\n  clicks: {retention.ms: 1000}\n"
            "  orders: {retention.bytes: 5000}\n",
            "orders",
        ),
        ("topics:\n  orders:\n    retention.ms: -1\n    retention.ms: 1000\n", "retention.ms"),
        ("remote.url: s3://a/p\nbroker.id: 1\nremote.url: s3://b/p\n", "remote.url"),
        ("topics:\n  orders: {retention.ms: -1, retention_ms: 1000}\n", "retention_ms"),
        ("remote.log.reader.threads: 4\nremote-log-reader-threads: 8\n", "remote-log-reader-threads"),
    ],
)
def test_a_key_given_twice_is_an_error_not_the_last_one_silently(
    tmp_path: Path, written: str, key: str
) -> None:
    path = tmp_path / "twice.yaml"
    path.write_text(written)
    with pytest.raises(ConfigError) as refused:
        load_settings(path, env={})
    assert key in str(refused.value) and "twice" in str(refused.value)


def test_yaml_merge_keys_still_merge(tmp_path: Path) -> None:
    config = tmp_path / "rlm.yaml"
    config.write_text(
        "topics:\n"
        "  defaults: &base {retention.ms: 1000, retention.bytes: 5}\n"
        "  orders: {<<: *base, retention.ms: -1}\n"
    )
    settings = load_settings(config, env={})
    assert (settings.topic("orders").retention_ms, settings.topic("orders").retention_bytes) == (-1, 5)


def test_an_empty_index_cache_dir_is_an_error_not_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Path("") is ".": the index cache took the working directory, locked it, and at start
    # deleted every *.tmp file there as a cache write cut short.
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "rlm.yaml"
    for env, text in (
        ({"RLM_REMOTE_LOG_INDEX_CACHE_DIR": ""}, "{}\n"),
        ({}, 'remote.log.index.cache.dir: ""\n'),
    ):
        config.write_text(text)
        with pytest.raises(ConfigError, match=r"^remote\.log\.index\.cache\.dir has no value"):
            load_settings(config, env=env)


def test_reader_threads_are_held_at_start_to_what_a_change_at_run_time_may_set() -> None:
    # PATCH /v1/config refuses more than 256: a settings file or variable may not start more.
    assert Settings(remote_log_offset_reader_threads=256).remote_log_offset_reader_threads == 256
    with pytest.raises(ConfigError, match=r"remote.log.offset.reader.threads must be 1 to 256, not 100000"):
        Settings(remote_log_offset_reader_threads=100_000)
    with pytest.raises(ConfigError, match="remote.log.offset.reader.threads must be 1 to 256"):
        load_settings(env={"RLM_REMOTE_LOG_OFFSET_READER_THREADS": "257"})
