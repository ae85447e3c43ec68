"""Each topic's remote retention: rlm's topic settings over the broker's topic configs.

In Kafka's tiered storage the remote tier follows the topic's own ``retention.ms`` and
``retention.bytes``. A KRaft broker's metadata log holds the topics' overrides (``kafka-configs
--alter --entity-type topics``, :attr:`rlm.log.cluster_metadata.ClusterMetadata.configs`), so
retention takes each of the two from, first found:

1. the topic's own entry in rlm's ``topics:`` settings, when it sets that key (the operator's
   choice; a warning, once, when it is shorter than the broker's override);
2. the broker's override of the topic in the metadata log;
3. rlm's ``topics.defaults`` (or the built-in default).

The broker's overrides come from the latest snapshot's image (committed) and from the log after it
(pending: a new leader may truncate them); of the two outcomes, the one keeping more counts, so a
pending override may lengthen retention at once but shortens it only once a snapshot holds it.
An override that is no integer of at least -1 (any Java long for ``retention.bytes``: Kafka's
``LogConfig`` lets it be negative, and a negative size keeps everything) makes the topic's
retention unknown: its time and size retention are skipped (deleting by the log start offset goes
on), with a warning and ``rlm_retention_unreadable_topic_config_total``. So are every topic's
(unless rlm's own entry sets both keys) while parts of the metadata log cannot be read
(``ClusterMetadata.unreadable``): the overrides in them are unknown; and while ``metadata.log.dir``
is set and holds no metadata log, or none could be read yet (:meth:`TopicRetention.unknown`).
Without a metadata log (none set, none found), rlm's settings alone count.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
from collections.abc import Mapping
from typing import NamedTuple

from rlm.config import Settings, TopicSettings
from rlm.errors import ConfigError
from rlm.log.cluster_metadata import ClusterMetadata
from rlm.metrics import Metrics

log = logging.getLogger("rlm.retention")

#: The broker's topic configs retention follows, by TopicSettings field.
RETENTION_KEYS = {"retention_ms": "retention.ms", "retention_bytes": "retention.bytes"}

_LONG_MAX = 2**63 - 1
_Overrides = Mapping[str, Mapping[str, str]]


class Unreadable(NamedTuple):
    """A broker override of a topic that is not a retention value."""

    key: str
    value: str


def longer(a: int, b: int) -> int:
    """The retention keeping more of ``a`` and ``b`` (-1: unlimited)."""
    return -1 if -1 in (a, b) else max(a, b)


def broker_value(overrides: Mapping[str, str] | None, field_name: str) -> int | Unreadable | None:
    """The topic's override of ``field_name`` (``retention_ms``...) if set, checked as rlm checks
    its own settings; :class:`Unreadable` if it is none."""
    key = RETENTION_KEYS[field_name]
    raw = None if overrides is None else overrides.get(key)
    if raw is None:
        return None
    try:
        value = int(raw.strip())
        if not -_LONG_MAX - 1 <= value <= _LONG_MAX:  # no Java long: the broker would not write it
            raise ValueError(raw)
        if key == "retention.bytes" and value < 0:
            value = -1  # LogConfig validates no range for it: any negative size is unlimited
        # rlm's own range check of the setting
        TopicSettings(retention_ms=value) if key == "retention.ms" else TopicSettings(retention_bytes=value)
    except (ValueError, ConfigError):
        return Unreadable(key, raw)
    return value


@dataclasses.dataclass(frozen=True)
class Resolved:
    """A topic's settings for retention, and what resolving them found."""

    settings: TopicSettings
    unreadable: tuple[Unreadable, ...] = ()
    """Broker overrides that could not be read: time and size retention are off in ``settings``."""
    shorter: tuple[tuple[str, int, int], ...] = ()
    """``(key, rlm's value, the broker's)`` where rlm's own topic entry keeps less."""
    incomplete: bool = False
    """The metadata log was read incompletely and rlm's entry does not set both keys: the broker's
    overrides may be missing, so time and size retention are off in ``settings``."""


def resolve(
    settings: Settings, topic: str, committed: _Overrides, pending: _Overrides, *, incomplete: bool = False
) -> Resolved:
    """The settings retention applies to ``topic`` (pure: no I/O); see the module's docstring.
    ``incomplete``: parts of the metadata log could not be read (its overrides may be missing)."""
    base = settings.topic(topic)
    changes: dict[str, int] = {}
    unreadable: list[Unreadable] = []
    unknown = False
    shorter: list[tuple[str, int, int]] = []
    for field_name, key in RETENTION_KEYS.items():
        found = [broker_value(image.get(topic), field_name) for image in (committed, pending)]
        bad = [v for v in found if isinstance(v, Unreadable)]
        ours: int = getattr(base, field_name)
        if settings.topic_sets(topic, field_name):
            brokers = [v for v in found if isinstance(v, int)]
            theirs = functools.reduce(longer, brokers) if brokers else None
            if theirs is not None and longer(ours, theirs) != ours:
                shorter.append((key, ours, theirs))
            continue
        if bad:
            unreadable.extend(bad)
            continue
        unknown |= incomplete
        # Each image's outcome: its override, else rlm's default; the longer one counts.
        layered = [v if isinstance(v, int) else ours for v in found]
        changes[field_name] = longer(*layered)
    if unreadable or unknown:
        changes = {"retention_ms": -1, "retention_bytes": -1}  # delete nothing by time or size
    resolved = dataclasses.replace(
        base,
        retention_ms=changes.get("retention_ms", base.retention_ms),
        retention_bytes=changes.get("retention_bytes", base.retention_bytes),
    )
    return Resolved(resolved, tuple(dict.fromkeys(unreadable)), tuple(shorter), unknown)


class TopicRetention:
    """The settings retention applies to each topic, from rlm's settings and the broker's
    metadata log as last read (:meth:`update`); thread-safe, warns once per finding."""

    def __init__(self, settings: Settings, metrics: Metrics) -> None:
        self.settings = settings
        self.metrics = metrics
        self._committed: _Overrides = {}
        self._pending: _Overrides = {}
        self._incomplete = False
        self._said: set[tuple[object, ...]] = set()
        self._lock = threading.Lock()

    def update(self, metadata: ClusterMetadata | None) -> None:
        """Follow ``metadata`` (None: no metadata log; rlm's settings alone count)."""
        with self._lock:
            if metadata is None:
                self._committed, self._pending, self._incomplete = {}, {}, False
            else:
                self._committed, self._pending = metadata.committed_configs, metadata.configs
                self._incomplete = metadata.unreadable > 0

    def unknown(self) -> None:
        """The broker's overrides cannot be known now (``metadata.log.dir`` set and holding no
        metadata log, or never read whole): time and size retention are off as for a log read
        incompletely, until :meth:`update` brings a read."""
        with self._lock:
            self._incomplete = True

    def topic(self, name: str) -> TopicSettings:
        """The settings retention applies to topic ``name`` now."""
        with self._lock:
            committed, pending, incomplete = self._committed, self._pending, self._incomplete
        resolved = resolve(self.settings, name, committed, pending, incomplete=incomplete)
        if resolved.incomplete:
            self.metrics.unreadable_topic_configs.labels(name).inc()
            if self._first(("incomplete", name)):
                log.warning(
                    "topic %s: parts of the broker's cluster metadata log could not be read, so its "
                    "retention overrides may be missing: its remote segments are not deleted by "
                    "time or size until they can be read",
                    name,
                )
        for key, value in resolved.unreadable:
            self.metrics.unreadable_topic_configs.labels(name).inc()
            if self._first(("unreadable", name, key, value)):
                log.warning(
                    "topic %s: the broker's %s override %r (cluster metadata log) is no retention "
                    "value: its remote segments are not deleted by time or size until it is",
                    name,
                    key,
                    value,
                )
        for key, ours, theirs in resolved.shorter:
            if self._first(("shorter", name, key, ours, theirs)):
                log.warning(
                    "topic %s: rlm's topics.%s sets %s=%d, shorter than the broker's override %d; "
                    "the remote tier follows rlm's",
                    name,
                    name,
                    key,
                    ours,
                    theirs,
                )
        return resolved.settings

    def _first(self, finding: tuple[object, ...]) -> bool:
        with self._lock:
            if finding in self._said:
                return False
            self._said.add(finding)
            return True
