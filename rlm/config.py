"""Settings: Kafka-style keys from a YAML file and ``RLM_*`` environment variables.

Every setting has a Kafka-style dotted key (``remote.log.offset.reader.threads``) and an
environment name (``RLM_REMOTE_LOG_OFFSET_READER_THREADS``); the environment wins over the file,
the file over the defaults. Topic settings (``retention.ms``, ...) have defaults under
``topics.defaults`` and per-topic overrides under ``topics.<name>``.

A secret need not sit in the environment: ``RLM_<NAME>_FILE`` names a file holding the value of
``RLM_<NAME>`` (a Kubernetes Secret mounted as files), for every setting but ``auth.tokens``, whose
``auth.tokens.file`` (``RLM_AUTH_TOKENS_FILE``) is a setting of its own. ``broker.id`` left unset is
read from the ``meta.properties`` of the log directories (``node.id``, else ``broker.id``).

```yaml
log.dirs: [/var/lib/kafka/data]
broker.id: 1
metadata.url: postgresql+psycopg://rlm@db/rlm
remote.url: s3://tiered/prod
topics:
  defaults: {retention.ms: 604800000}
  orders: {retention.ms: 2592000000, retention.bytes: 107374182400}
```

Numbers are read as Kafka reads its properties, in decimal: the file's numbers reach the settings
as written, not as YAML 1.1 reads them (``0100`` is 64 there, ``0x10`` 16, ``1:30`` 90, ``1_000``
1000), and a form Kafka refuses is an error naming the setting. A topic whose name YAML would read
as a number (``010``) keeps its name.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from rlm.arguments import INT32_MAX, check_int, parse_int
from rlm.errors import ConfigError, InvalidArgumentError
from rlm.log.identity import broker_id_from_log_dirs, check_broker_id

DEFAULT_METADATA_URL = "sqlite:///build/rlm/metadata.db"
EMBEDDED_REMOTE_DIR = Path("build/rlm/remote")


def _key(name: str) -> str:
    """Dataclass field ``retention_ms`` → Kafka-style key ``retention.ms``."""
    return name.replace("_", ".")


def _env(key: str) -> str:
    """Kafka-style key ``retention.ms`` → environment variable ``RLM_RETENTION_MS``."""
    return "RLM_" + key.replace(".", "_").replace("-", "_").upper()


#: The longest ``remote.list.offsets.request.timeout.ms``: what a request's own ``timeout_ms`` and
#: a change at run time (``PATCH /v1/config``) may ask for, an hour.
MAX_REQUEST_TIMEOUT_MS = 3_600_000
#: The most ``remote.log.offset.reader.threads``, at start and when changed at run time.
MAX_READER_THREADS = 256

#: ``compaction.strategy`` values (KIP-280).
COMPACTION_STRATEGIES = ("offset", "timestamp", "header")


def _cleanup_policy(value: object) -> str:
    """``cleanup.policy`` in its canonical spelling (``delete``, ``compact``, ``compact,delete``)."""
    words = {w.strip().lower() for w in str(value).split(",") if w.strip()}
    if not words or not words <= {"compact", "delete"}:
        raise ConfigError(f"cleanup.policy must be delete, compact or compact,delete, not {value!r}")
    return ",".join(w for w in ("compact", "delete") if w in words)


@dataclass(frozen=True)
class TopicSettings:
    """Per-topic settings of the remote tier (Kafka's topic configs of the same names)."""

    remote_storage_enable: bool = True
    """``remote.storage.enable``: tier this topic's rolled segments."""
    retention_ms: int = 604_800_000
    """``retention.ms``: delete remote segments whose max timestamp is older; -1 keeps forever."""
    retention_bytes: int = -1
    """``retention.bytes``: cap on the partition's total (remote + local-only) size; -1 is none."""
    local_retention_ms: int = -2
    """``local.retention.ms``: how long the broker keeps tiered segments locally (-2: retention.ms)."""
    local_retention_bytes: int = -2
    """``local.retention.bytes``: local size cap (-2: retention.bytes)."""
    cleanup_policy: str = "delete"
    """``cleanup.policy``: ``delete``, ``compact`` or ``compact,delete``; ``rlm spark compact``
    compacts the remote tier of topics whose policy has ``compact``."""
    compaction_strategy: str = "offset"
    """``compaction.strategy`` (KIP-280): which record of a key compaction keeps: ``offset``,
    ``timestamp`` or ``header``."""
    compaction_strategy_header: str = ""
    """``compaction.strategy.header``: the header whose 8-byte value orders records of a key under
    the ``header`` strategy; blank falls back to ``offset``."""
    delete_retention_ms: int = 86_400_000
    """``delete.retention.ms``: how long compaction keeps tombstones and transaction markers after
    it first kept them (the delete horizon, KIP-534)."""
    min_compaction_lag_ms: int = 0
    """``min.compaction.lag.ms``: records younger than this (by timestamp) are never compacted away."""
    segment_bytes: int = 1_073_741_824
    """``segment.bytes``: target size of the segments compaction writes; 14 to 2147483647 (an int,
    as Kafka's)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "cleanup_policy", _cleanup_policy(self.cleanup_policy))
        strategy = str(self.compaction_strategy).strip().lower()
        if strategy not in COMPACTION_STRATEGIES:
            raise ConfigError(
                f"compaction.strategy must be one of {', '.join(COMPACTION_STRATEGIES)}, "
                f"not {self.compaction_strategy!r}"
            )
        object.__setattr__(self, "compaction_strategy", strategy)
        for name in ("delete_retention_ms", "min_compaction_lag_ms"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{_key(name)} must be ≥ 0, not {getattr(self, name)}")
        if not 14 <= self.segment_bytes <= INT32_MAX:
            # An int, as Kafka's: an offset index entry addresses no byte past 2 GiB.
            raise ConfigError(f"segment.bytes must be 14 to {INT32_MAX}, not {self.segment_bytes}")
        for name in ("retention_ms", "retention_bytes"):
            if getattr(self, name) < -1:
                raise ConfigError(f"{_key(name)} must be -1 or ≥ 0, not {getattr(self, name)}")
        for name in ("local_retention_ms", "local_retention_bytes"):
            if getattr(self, name) < -2:
                raise ConfigError(f"{_key(name)} must be -2, -1 or ≥ 0, not {getattr(self, name)}")


@dataclass(frozen=True)
class Settings:
    """Everything rlm is configured with. Built by :func:`load_settings`; immutable."""

    log_dirs: tuple[Path, ...] = ()
    """``log.dirs``: the broker's log directories (read-only for rlm)."""
    log_dirs_watch: bool = True
    """``log.dirs.watch``: learn of the broker's changes to its segments and checkpoints from
    inotify (Linux) rather than ``stat`` on every lookup; off for a filesystem another host writes."""
    broker_id: int = 0
    """``broker.id``: the broker this sidecar runs beside; owner of its copy leases. Unset, it is read
    from the log directories' ``meta.properties``; without log directories (a query tier) it is 0."""
    metadata_url: str = DEFAULT_METADATA_URL
    """``metadata.url``: SQLAlchemy URL of the metadata store (Postgres or SQLite)."""
    metadata_pool_size: int = 10
    """``metadata.pool.size``: connections to the metadata database held open, at most."""
    metadata_pool_timeout_ms: int = 5_000
    """``metadata.pool.timeout.ms``: how long a metadata call waits for a free pooled connection."""
    metadata_connect_timeout_ms: int = 5_000
    """``metadata.connect.timeout.ms``: how long opening a connection may take (PostgreSQL counts
    whole seconds, at least 2, as libpq does)."""
    metadata_statement_timeout_ms: int = 10_000
    """``metadata.statement.timeout.ms``: PostgreSQL cancels a statement (lock waits included) that
    runs longer, and rlm closes a connection whose server has not answered a second after that;
    on SQLite, how long a writer waits for another's lock. At most 2147483647 (PostgreSQL's)."""
    metadata_retry_backoff_ms: int = 1_000
    """``metadata.retry.backoff.ms``: after the metadata store failed to answer, lookups answer
    without it (from the broker's log where that is exact, else at once with a retriable error)
    for this long before one of them asks it again."""
    readiness_timeout_ms: int = 2_000
    """``readiness.timeout.ms``: how long ``/readyz`` and the gRPC health service wait for the
    metadata store and the remote storage to answer before reporting them unreachable."""
    list_offsets_max_partitions: int = 10_000
    """``list.offsets.max.partitions``: partitions one ListOffsets request may name, in all (a
    topic without partitions counts as one); a bigger request is refused (400, INVALID_ARGUMENT)."""
    remote_url: str = ""
    """``remote.url``: ``s3://bucket/prefix`` or ``file:///path``; left out, the embedded default,
    ``build/rlm/remote`` under the working directory (given empty, an error)."""
    s3_endpoint_url: str | None = None
    """``s3.endpoint.url``: endpoint of an S3-compatible store."""
    s3_region: str | None = None
    """``s3.region``: the bucket's region (for S3-compatible stores, the one their signatures
    expect, often ``us-east-1`` or ``auto``); unset takes it from the AWS chain."""
    s3_addressing_style: str = "auto"
    """``s3.addressing.style``: ``auto``, ``path`` (``host/bucket/key``: stores that do not serve
    ``bucket.host`` names) or ``virtual`` (``bucket.host/key``)."""
    s3_checksums: str = "crc32c"
    """``s3.checksums``: what each put carries for the store to check: ``crc32c`` (``on``), ``md5``
    (``Content-MD5``) or ``off``. With ``md5`` and ``off`` no ``x-amz-checksum-*`` or
    ``x-amz-sdk-checksum-algorithm`` header is sent on any call."""
    s3_content_md5: str = "auto"
    """``s3.content.md5``: ``Content-MD5`` on DeleteObjects: ``on``, ``off``, or ``auto`` (on unless
    ``s3.checksums`` is ``crc32c``), for stores that answer ``MissingContentMD5``."""
    s3_multipart_checksum_type: str = "COMPOSITE"
    """``s3.multipart.checksum.type``: ``COMPOSITE`` or ``FULL_OBJECT`` (with ``crc32c`` checksums)."""
    s3_verify_after_put: str = "head"
    """``s3.verify.after.put``: ``head`` (size and reported CRC-32C), ``read-back`` (read the object
    back and compare its CRC-32C: for stores that ignore checksums) or ``off``."""
    http_port: int = 8080
    grpc_port: int = 9090
    http_host: str = "0.0.0.0"
    grpc_host: str = "0.0.0.0"
    auth_enabled: bool = True
    """``auth.enabled``: require bearer tokens on the APIs (everything but health checks)."""
    auth_tokens: str = ""
    """``auth.tokens``: ``scope:token`` pairs, comma-separated (scopes ``read``, ``admin``)."""
    auth_tokens_file: Path | None = None
    """``auth.tokens.file``: a secrets file with one ``scope token`` pair per line."""
    tls_cert_file: Path | None = None
    """``tls.cert.file``: PEM certificate; with ``tls.key.file`` both servers use TLS."""
    tls_key_file: Path | None = None
    remote_log_manager_task_interval_ms: int = 30_000
    """How often the copier and retention loops run."""
    remote_log_manager_copier_thread_pool_size: int = 4
    """Partitions copied in parallel."""
    remote_log_manager_copy_max_bytes_per_second: int = -1
    """Upload rate limit in bytes/s; -1 is unlimited."""
    remote_log_manager_lease_ttl_ms: int = 60_000
    """How long a copy lease lasts without renewal; at most 2147483647."""
    remote_log_metadata_deleted_segments_retention_ms: int = 86_400_000
    """``remote.log.metadata.deleted.segments.retention.ms``: how long the metadata store keeps the
    row of a segment whose deletion finished (for verification and orphan scans that started
    before it went); the retention loop purges older ones. -1 keeps them forever."""
    metadata_log_dir: Path | None = None
    """``metadata.log.dir``: the broker's setting of that name, where it keeps the KRaft cluster
    metadata log (``__cluster_metadata-0``); unset, the first log directory holding one."""
    remote_log_delete_removed_topics: bool = True
    """``remote.log.delete.removed.topics``: retention deletes from the remote tier the partitions
    of the topics the cluster deleted, as Kafka does, once the broker's metadata log holds their
    committed ``RemoveTopicRecord`` (:mod:`rlm.tiering.removed_topics`). Off, only ``rlm retention
    delete-topic`` deletes them."""
    remote_log_start_offset_from_broker: bool = False
    """``remote.log.start.offset.from.broker``: retention also deletes the remote segments wholly
    below the log start offset the broker checkpointed (``log-start-offset-checkpoint``, moved by
    DeleteRecords). Off by default: a follower checkpoints the leader's log start offset, which the
    leader's own local retention moves, so that a copier beside a follower would delete remote
    segments as soon as the brokers delete their local copies. Turn it on where every partition's
    copy lease is held beside its leader, or where the brokers keep their segments until rlm's
    retention (local retention off)."""
    remote_compaction_delete_delay_ms: int = 300_000
    """``remote.compaction.delete.delay.ms``: how long the segments a compaction replaced keep
    their objects, so that lookups and fetches in flight over them finish."""
    remote_compaction_lease_ttl_ms: int = 600_000
    """``remote.compaction.lease.ttl.ms``: how long a compaction job's per-partition lease lasts
    without renewal (the job renews it between stages); at most 2147483647."""
    remote_log_offset_reader_threads: int = 5
    remote_log_offset_read_max_pending_tasks: int = 100
    remote_list_offsets_request_timeout_ms: int = 30_000
    """``remote.list.offsets.request.timeout.ms``: how long a lookup that brings no timeout of its
    own waits; 1 to 3600000 (an hour), as a request's ``timeout_ms`` and a change at run time."""
    remote_log_reader_threads: int = 10
    remote_log_reader_max_pending_tasks: int = 100
    remote_log_index_file_cache_total_size_bytes: int = 1_073_741_824
    remote_fetch_stream_buffer_bytes: int = 4 * 1024 * 1024
    """``remote.fetch.stream.buffer.bytes``: read bytes one record stream holds at most (two chunks
    of half this: the one being sent and the one read ahead); a slow client slows the reads."""
    remote_fetch_max_streams: int = 64
    """``remote.fetch.max.streams``: record streams sent at once; another is refused (429 with
    ``Retry-After``, gRPC RESOURCE_EXHAUSTED)."""
    remote_log_index_cache_dir: Path = Path("build/rlm/index-cache")
    export_iceberg_catalog_url: str | None = None
    """``export.iceberg.catalog.url``: the SQL catalog (a SQLAlchemy URL) of ``rlm spark export
    --format iceberg``; unset uses ``metadata.url``, in a schema of its own on PostgreSQL
    (``rlm_iceberg``)."""
    export_iceberg_warehouse: str | None = None
    """``export.iceberg.warehouse``: where new Iceberg tables keep their files (a directory URI
    Spark writes and pyiceberg reads: ``file:///...``, ``s3://...``); required to create a table."""
    topic_defaults: TopicSettings = field(default_factory=TopicSettings)
    topic_overrides: Mapping[str, TopicSettings] = field(default_factory=dict)
    topic_override_keys: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """The fields (``retention_ms``, ...) each ``topics.<name>`` entry of the settings file sets
    itself; the others it takes from the defaults. A topic of ``topic_overrides`` not named here
    sets every field (settings built in code)."""

    def topic(self, name: str) -> TopicSettings:
        """The settings of ``name``: its override, else the defaults."""
        return self.topic_overrides.get(name, self.topic_defaults)

    def topic_sets(self, name: str, field_name: str) -> bool:
        """Whether the settings of topic ``name`` set ``field_name`` (``retention_ms``...) themselves
        rather than taking it from the defaults."""
        if name not in self.topic_overrides:
            return False
        keys = self.topic_override_keys.get(name)
        return keys is None or field_name in keys

    def replace(self, **changes: Any) -> Settings:
        """A copy with ``changes`` applied (validated again)."""
        return dataclasses.replace(self, **changes)

    def __post_init__(self) -> None:
        for name, allowed in _CHOICES.items():
            # Settings are frozen: the spelling read is replaced by the canonical one.
            object.__setattr__(self, name, _choice(name, getattr(self, name), allowed))
        positive = (
            "remote_log_manager_task_interval_ms",
            "remote_log_manager_copier_thread_pool_size",
            "remote_log_manager_lease_ttl_ms",
            "remote_compaction_lease_ttl_ms",
            "remote_log_offset_reader_threads",
            "remote_log_offset_read_max_pending_tasks",
            "remote_list_offsets_request_timeout_ms",
            "remote_log_reader_threads",
            "remote_log_reader_max_pending_tasks",
            "remote_log_index_file_cache_total_size_bytes",
            "remote_fetch_max_streams",
            "metadata_pool_size",
            "metadata_pool_timeout_ms",
            "metadata_connect_timeout_ms",
            "metadata_statement_timeout_ms",
            "metadata_retry_backoff_ms",
            "readiness_timeout_ms",
            "list_offsets_max_partitions",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"{_key(name)} must be > 0, not {getattr(self, name)}")
        for name in ("remote_log_manager_lease_ttl_ms", "remote_compaction_lease_ttl_ms"):
            # A lease expires at now + ttl, a claim is kept 10 ttls: both stay in a BIGINT.
            if getattr(self, name) > INT32_MAX:
                raise ConfigError(f"{_key(name)} must be 1 to {INT32_MAX}, not {getattr(self, name)}")
        threads = self.remote_log_offset_reader_threads
        if threads > MAX_READER_THREADS:
            raise ConfigError(
                f"remote.log.offset.reader.threads must be 1 to {MAX_READER_THREADS}, not {threads}"
            )
        statement = self.metadata_statement_timeout_ms
        if statement > INT32_MAX:
            raise ConfigError(
                f"metadata.statement.timeout.ms must be 1 to {INT32_MAX} (PostgreSQL's statement_timeout "
                f"takes no more), not {statement}"
            )
        timeout = self.remote_list_offsets_request_timeout_ms
        if timeout > MAX_REQUEST_TIMEOUT_MS:
            raise ConfigError(
                f"remote.list.offsets.request.timeout.ms must be 1 to {MAX_REQUEST_TIMEOUT_MS}, not {timeout}"
            )
        if self.remote_compaction_delete_delay_ms < 0:
            raise ConfigError(
                f"remote.compaction.delete.delay.ms must be ≥ 0, not {self.remote_compaction_delete_delay_ms}"
            )
        kept = self.remote_log_metadata_deleted_segments_retention_ms
        if kept < -1:
            raise ConfigError(
                f"remote.log.metadata.deleted.segments.retention.ms must be -1 or ≥ 0, not {kept}"
            )
        rate = self.remote_log_manager_copy_max_bytes_per_second
        if rate == 0 or rate < -1:
            raise ConfigError(f"remote.log.manager.copy.max.bytes.per.second must be -1 or > 0, not {rate}")
        window = self.remote_fetch_stream_buffer_bytes
        if window < 2 * 1024:
            raise ConfigError(f"remote.fetch.stream.buffer.bytes must be ≥ 2048, not {window}")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ConfigError("tls.cert.file and tls.key.file must be set together")
        for name in ("http_port", "grpc_port"):
            if not 0 <= getattr(self, name) <= 65535:
                raise ConfigError(f"{_key(name)} must be a port number, not {getattr(self, name)}")


#: Settings that take one of a few words (compared without regard to case; on/off also as
#: true/false, yes/no or 1/0, the forms YAML turns them into).
_CHOICES = {
    "s3_addressing_style": ("auto", "path", "virtual"),
    "s3_checksums": ("crc32c", "md5", "off"),
    "s3_content_md5": ("auto", "on", "off"),
    "s3_multipart_checksum_type": ("COMPOSITE", "FULL_OBJECT"),
    "s3_verify_after_put": ("head", "read-back", "off"),
}
_SWITCH_WORDS = {"true": "on", "yes": "on", "1": "on", "false": "off", "no": "off", "0": "off"}


def _choice(name: str, value: object, allowed: tuple[str, ...]) -> str:
    """The allowed word ``value`` spells, for setting ``name``."""
    word = str(value).strip().lower()
    word = _SWITCH_WORDS.get(word, word)
    if name == "s3_checksums" and word == "on":
        word = "crc32c"
    for option in allowed:
        if option.lower() == word:
            return option
    raise ConfigError(f"{_key(name)} must be one of {', '.join(allowed)}, not {value!r}")


_TOPIC_FIELDS = {f.name: f for f in fields(TopicSettings)}
#: The fields of Settings that hold the topics' settings: not settings of their own.
_TOPIC_SETTINGS = ("topic_defaults", "topic_overrides", "topic_override_keys")
_SETTINGS_FIELDS = {f.name: f for f in fields(Settings) if f.name not in _TOPIC_SETTINGS}
#: The variables that are settings themselves (``RLM_AUTH_TOKENS_FILE``): never read as ``<name>_FILE``.
_OWN_VARIABLES = frozenset(_env(_key(name)) for name in (*_SETTINGS_FIELDS, *_TOPIC_FIELDS))
#: Every ``RLM_*`` variable :func:`load_settings` reads: the settings, ``<setting>_FILE`` and the
#: settings file.
_READ_VARIABLES = _OWN_VARIABLES | {f"{n}_FILE" for n in _OWN_VARIABLES} | {"RLM_CONFIG"}
#: ``RLM_*`` variables that are no settings but are read by other parts of rlm: the token of
#: ``rlm lookup --grpc``, and the test suite's (a developer's shell that runs both has them set).
_OTHER_VARIABLES = frozenset({"RLM_TOKEN", "RLM_TEST_POSTGRES_URL", "RLM_ALLOW_PURE_PYTHON"})
#: What Kubernetes puts in every pod of a namespace for a Service named ``rlm`` or ``rlm-*`` (the
#: chart's own, when the release is named so): ``<SERVICE>_SERVICE_HOST``, ``_SERVICE_PORT[_<PORT>]``,
#: ``_PORT=tcp://ip:port`` and ``_PORT_<n>_<PROTO>[_PROTO|_PORT|_ADDR]``.
_SERVICE_LINK = re.compile(
    r"RLM(_[A-Z0-9_]+)?_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT_[0-9]+_(TCP|UDP|SCTP)(_PROTO|_PORT|_ADDR)?)"
)
_SERVICE_LINK_PORT = re.compile(r"RLM(_[A-Z0-9_]+)?_PORT")
_SERVICE_LINK_URL = re.compile(r"(tcp|udp|sctp)://\S+")


def check_variable_names(env: Mapping[str, str]) -> None:
    """Refuse an ``RLM_*`` variable rlm does not read, as an unknown key of the settings file is.

    A misspelt ``RLM_REMOTE_URL`` would otherwise leave the embedded default in place, silently.
    Kubernetes' service links (``RLM_SERVICE_HOST``... for a Service named ``rlm``) are no typos.

    Raises:
        ConfigError: names the first such variable, and the one it probably meant when one is close.
    """
    for name in sorted(env):
        if not name.startswith("RLM_") or name in _READ_VARIABLES or name in _OTHER_VARIABLES:
            continue
        if _SERVICE_LINK.fullmatch(name) or (
            _SERVICE_LINK_PORT.fullmatch(name) and _SERVICE_LINK_URL.fullmatch(env[name])
        ):
            continue
        close = difflib.get_close_matches(name, sorted(_READ_VARIABLES | _OTHER_VARIABLES), n=1)
        meant = f": did you mean {close[0]}?" if close else ""
        raise ConfigError(
            f"{name} is no setting (the environment names a setting RLM_ + its key in capitals, "
            f"with _ for .){meant}"
        )


class _SettingsLoader(yaml.SafeLoader):
    """YAML's safe loader with numbers left as the text written (see the module's docstring), that
    refuses a key given twice in one mapping (YAML forbids it; PyYAML keeps the last silently: a
    topic's second entry would drop the first's ``retention.ms: -1``). Merge keys still merge."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, list | dict):
                continue  # unhashable: SafeLoader's own error names it
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping",
                    node.start_mark,
                    f"the key {key!r} is given twice",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
_SettingsLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag not in _NUMBER_TAGS]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


#: The settings' types (as annotated) whose value may be left unset.
_OPTIONAL_KINDS = ("str | None", "Path | None")


def _convert(name: str, kind: Any, raw: Any) -> Any:
    """``raw`` (as YAML read it, or an environment variable's text) as setting ``name`` takes it.

    YAML reads ``key:`` with nothing after it (or ``~``, ``null``) as None: an optional setting
    (``s3.endpoint.url``, ``tls.cert.file``...) left unset, never the text "None" (an endpoint
    named 'None', TLS on with a certificate file named 'None'); for any other setting an error.
    """
    if raw is None or (isinstance(raw, list) and None in raw):
        if raw is None and kind in _OPTIONAL_KINDS:
            return None
        raise ConfigError(f"{_key(name)} has no value: give it one, or leave the key out for its default")
    text = str(raw).strip()
    try:
        if kind in (int, "int"):
            # Strictly (rlm.arguments): YAML's `true` is not 1, nor "+5" five.
            return parse_int(text, _key(name)) if isinstance(raw, str) else check_int(raw, _key(name))
        if kind in (bool, "bool"):
            if isinstance(raw, bool):
                return raw
            if text.lower() in ("true", "1", "yes"):
                return True
            if text.lower() in ("false", "0", "no"):
                return False
            raise ValueError(text)
        if kind in ("tuple[Path, ...]",):
            items = raw if isinstance(raw, list) else [p for p in text.split(",") if p.strip()]
            return tuple(Path(str(p).strip()) for p in items)
        if kind in (Path, "Path"):
            if not text:  # Path("") is ".", the working directory
                raise ConfigError(
                    f"{_key(name)} has no value: give it one, or leave the key out for its default"
                )
            return Path(text)
        if kind in ("str | None",):
            return text or None
        if kind in ("Path | None",):
            return Path(text) if text else None
        return text
    except InvalidArgumentError as exc:
        raise ConfigError(str(exc)) from None
    except ValueError as exc:
        raise ConfigError(f"{_key(name)}: {raw!r} is not a valid {kind}") from exc


def _from_env(env: Mapping[str, str], name: str) -> str | None:
    """The value of the variable ``name``, or the content of the file ``<name>_FILE`` names.

    Raises:
        ConfigError: both are set, or the file cannot be read (the message never holds its content).
    """
    file_var = name + "_FILE"
    path = None if file_var in _OWN_VARIABLES else env.get(file_var)
    if path is None:
        return env.get(name)
    if name in env:
        raise ConfigError(f"{name} and {file_var} are both set: set one of them")
    try:
        return Path(path).read_text().rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{file_var}: cannot read {path}: {exc}") from exc


def _topics(raw: object) -> dict[str, Any]:
    """The ``topics:`` mapping of a settings file, checked: topic names as written, each value a
    mapping (or empty).

    YAML turns some unquoted names into other things (``on``, ``yes`` into ``True``): an
    override under such a key would silently be another name's, and the topic would get the
    defaults (a week's ``retention.ms`` where the override said to keep everything).

    Raises:
        ConfigError: ``topics`` is no mapping, a key is no string, or a value no mapping.
    """
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"topics must be a mapping of topic names to topic settings, not {raw!r}")
    topics: dict[str, Any] = {}
    for name, values in raw.items():
        if not isinstance(name, str):
            raise ConfigError(
                f"topics: the key {name!r} is not a topic name as written (YAML read it as "
                f"{type(name).__name__}): quote the topic's name"
            )
        if values is not None and not isinstance(values, Mapping):
            raise ConfigError(f"topics.{name} must be a mapping of topic settings, not {values!r}")
        topics[name] = values or {}
    return topics


def _topic_settings(values: Mapping[str, Any], base: TopicSettings, where: str) -> TopicSettings:
    changes = {}
    for key, raw in values.items():
        name = str(key).replace(".", "_")
        if name not in _TOPIC_FIELDS:
            raise ConfigError(f"{where}: unknown topic setting {key!r}")
        if name in changes:
            raise ConfigError(f"{where}: {key!r} gives {_key(name)} twice")
        changes[name] = _convert(name, _TOPIC_FIELDS[name].type, raw)
    return dataclasses.replace(base, **changes)


def load_settings(
    path: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    **overrides: Any,
) -> Settings:
    """Build settings from defaults, then ``path`` (YAML), then ``env`` (``RLM_*``), then overrides.

    Raises:
        ConfigError: unreadable file, unknown key or ``RLM_*`` variable (:func:`check_variable_names`)
            or a value out of range; the message names it.
    """
    env = os.environ if env is None else env
    check_variable_names(env)
    data: dict[str, Any] = {}
    if path is None and env.get("RLM_CONFIG"):
        path = env["RLM_CONFIG"]
    if path is not None:
        try:
            loaded = yaml.load(Path(path).read_text(), Loader=_SettingsLoader) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read settings file {path}: {exc}") from exc
        if not isinstance(loaded, dict):
            raise ConfigError(f"settings file {path} must hold a mapping of settings")
        data = loaded
    topics = _topics(data.pop("topics", None))
    values: dict[str, Any] = {}
    for key, raw in data.items():
        name = str(key).replace(".", "_").replace("-", "_")
        if name not in _SETTINGS_FIELDS:
            raise ConfigError(f"{path}: unknown setting {key!r}")
        if name in values:
            raise ConfigError(f"{path}: {key!r} gives {_key(name)} twice")
        values[name] = _convert(name, _SETTINGS_FIELDS[name].type, raw)
    for name, f in _SETTINGS_FIELDS.items():
        raw_env = _from_env(env, _env(_key(name)))
        if raw_env is not None:
            values[name] = _convert(name, f.type, raw_env)
    if values.get("remote_url") == "":
        raise ConfigError(
            "remote.url is empty: give s3://bucket/prefix or file:///path, or leave it out for the "
            f"embedded default ({EMBEDDED_REMOTE_DIR} under the working directory)"
        )
    values.update(overrides)
    if values.get("log_dirs"):
        if "broker_id" in values:
            check_broker_id(values["log_dirs"], values["broker_id"])
        else:
            values["broker_id"] = broker_id_from_log_dirs(values["log_dirs"])
    defaults = _topic_settings(topics.get("defaults", {}), TopicSettings(), "topics.defaults")
    for name, f in _TOPIC_FIELDS.items():
        raw_env = _from_env(env, _env(_key(name)))
        if raw_env is not None:
            defaults = dataclasses.replace(defaults, **{name: _convert(name, f.type, raw_env)})
    per_topic = {
        topic: _topic_settings(v, defaults, f"topics.{topic}")
        for topic, v in topics.items()
        if topic != "defaults"
    }
    keys = {
        topic: frozenset(str(key).replace(".", "_") for key in v)
        for topic, v in topics.items()
        if topic != "defaults"
    }
    defaults = values.pop("topic_defaults", defaults)
    given = values.pop("topic_overrides", {})
    per_topic = {**per_topic, **given}
    keys = {**{t: k for t, k in keys.items() if t not in given}, **values.pop("topic_override_keys", {})}
    if not values.get("remote_url"):
        values["remote_url"] = EMBEDDED_REMOTE_DIR.resolve().as_uri()
    try:
        return Settings(
            topic_defaults=defaults, topic_overrides=per_topic, topic_override_keys=keys, **values
        )
    except TypeError as exc:
        raise ConfigError(str(exc)) from exc
