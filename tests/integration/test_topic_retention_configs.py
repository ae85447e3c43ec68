"""Remote retention follows the topics' own ``retention.ms`` / ``retention.bytes`` from the broker's
KRaft metadata log (ConfigRecords), under rlm's explicit topic entries and over its defaults
(:mod:`rlm.tiering.topic_retention`)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from rlm.config import Settings, TopicSettings
from rlm.metastore.model import SegmentState
from rlm.tiering.retention import Retention
from tests.clock import FakeClock
from tests.cluster_metadata_support import MetadataLogWriter, config_record, topic_record
from tests.integration.test_retention import HOUR, HOURLY, NOW, TP, _write
from tests.tiering_support import Backend, Tiering

TieringFactory = Callable[..., Tiering]
ORDERS = uuid.UUID(int=0x0D)
FINISHED = SegmentState.COPY_SEGMENT_FINISHED
DELETED = SegmentState.DELETE_SEGMENT_FINISHED


def _tiered(
    factory: TieringFactory, backend: Backend, log_dir: Path, *image: bytes, pending: bytes = b""
) -> Tiering:
    """``orders`` written and tiered, the broker's metadata log holding ``image`` in its snapshot
    (committed) and ``pending`` after it; rlm's default retention.ms is one hour."""
    _write(log_dir, HOURLY)
    with MetadataLogWriter(log_dir) as log:
        values = [topic_record("orders", ORDERS), *image]
        log.append(*values)
        log.snapshot(log.next_offset, values)
        if pending:
            log.append(pending)
    tiering = factory(backend, log_dir, FakeClock(NOW))
    assert all(o.error is None for o in tiering.copier().run_once())
    return tiering


def _kept_forever(factory: TieringFactory, backend: Backend, tmp_path: Path) -> Tiering:
    """:func:`_tiered` with the broker keeping ``orders`` for good (``retention.ms=-1``)."""
    return _tiered(factory, backend, tmp_path / "logs", config_record("orders", "retention.ms", "-1"))


def _hourly(settings: Settings, **topics: TopicSettings) -> Settings:
    return settings.replace(topic_defaults=TopicSettings(retention_ms=HOUR), topic_overrides=topics)


def _deleted(tiering: Tiering, settings: Settings | Retention) -> int:
    retention = settings if isinstance(settings, Retention) else tiering.retention(settings=settings)
    (outcome,) = [o for o in retention.run_once() if o.topic_partition == TP]
    assert outcome.error is None
    return outcome.deleted_segments


def test_a_topic_the_broker_keeps_forever_keeps_its_remote_segments(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path
) -> None:
    tiering = _kept_forever(tiering_factory, backend, tmp_path)
    assert _deleted(tiering, _hourly(tiering.settings)) == 0
    assert {r.state for r in tiering.segments(TP)} == {FINISHED}


def test_a_metadata_log_gone_after_a_read_keeps_the_overrides_last_read(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path
) -> None:
    # The log directory holding it offline or unmounted: its overrides are not forgotten (rlm's
    # shorter default would delete what the broker keeps), as when reading it fails.
    tiering = _kept_forever(tiering_factory, backend, tmp_path)
    retention = tiering.retention(settings=_hourly(tiering.settings))
    assert _deleted(tiering, retention) == 0
    metadata_log = tmp_path / "logs" / "__cluster_metadata-0"
    metadata_log.rename(tmp_path / "away")
    assert _deleted(tiering, retention) == 0
    assert {r.state for r in tiering.segments(TP)} == {FINISHED}


def test_a_metadata_log_dir_set_and_not_there_yet_deletes_nothing_by_time_or_size(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path
) -> None:
    # metadata.log.dir names a volume not mounted (yet): the broker's overrides cannot be known, so
    # rlm's shorter default must not apply, as when the log cannot be read; once it is, they count.
    tiering = _kept_forever(tiering_factory, backend, tmp_path)
    mounted = tmp_path / "metadata"
    retention = tiering.retention(settings=_hourly(tiering.settings).replace(metadata_log_dir=mounted))
    assert _deleted(tiering, retention) == 0
    assert {r.state for r in tiering.segments(TP)} == {FINISHED}
    # Mounted, holding no override of orders: rlm's default applies.
    with MetadataLogWriter(mounted) as log:
        values = [topic_record("orders", ORDERS)]
        log.append(*values)
        log.snapshot(log.next_offset, values)
    assert _deleted(tiering, retention) > 0


def test_an_unreadable_snapshot_with_no_log_below_it_deletes_nothing_by_time_or_size(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path
) -> None:
    # The broker keeps orders forever, but its only snapshot is damaged and its log starts at the
    # snapshot's end: what the override is cannot be known, so rlm's default must not apply.
    tiering = _kept_forever(tiering_factory, backend, tmp_path)
    metadata_log = tmp_path / "logs" / "__cluster_metadata-0"
    (snapshot,) = metadata_log.glob("*.checkpoint")
    end = int(snapshot.name[:20])
    for segment in metadata_log.glob("0000*"):
        if segment.suffix in (".log", ".index", ".timeindex"):
            segment.unlink()
    (metadata_log / f"{end:020d}.log").touch()
    data = bytearray(snapshot.read_bytes())
    data[-80] ^= 0xFF  # inside the batch of the override: its CRC fails
    snapshot.write_bytes(bytes(data))
    assert _deleted(tiering, _hourly(tiering.settings)) == 0
    assert {r.state for r in tiering.segments(TP)} == {FINISHED}


def test_a_broker_override_shorter_than_rlms_default_deletes_per_the_broker(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path
) -> None:
    four_hours = config_record("orders", "retention.ms", str(4 * HOUR))
    tiering = _tiered(tiering_factory, backend, tmp_path / "logs", four_hours)
    week = tiering.settings.replace(topic_defaults=TopicSettings(retention_ms=7 * 24 * HOUR))
    assert _deleted(tiering, week) == 3  # 6h, 5h and 4h old


def test_a_broker_size_override_applies(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path
) -> None:
    tiering = _tiered(
        tiering_factory, backend, tmp_path / "logs", config_record("orders", "retention.bytes", "0")
    )
    forever = tiering.settings.replace(topic_defaults=TopicSettings(retention_ms=-1))
    assert _deleted(tiering, forever) >= 1


def test_a_negative_broker_size_override_keeps_time_retention_going(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path
) -> None:
    # Kafka lets retention.bytes be any negative long (unlimited): time retention still deletes.
    four_hours = config_record("orders", "retention.ms", str(4 * HOUR))
    unlimited = config_record("orders", "retention.bytes", "-2")
    tiering = _tiered(tiering_factory, backend, tmp_path / "logs", four_hours, unlimited)
    week = tiering.settings.replace(topic_defaults=TopicSettings(retention_ms=7 * 24 * HOUR))
    assert _deleted(tiering, week) == 3  # 6h, 5h and 4h old
    labels = {"topic": "orders"}
    assert tiering.registry.get_sample_value("rlm_retention_unreadable_topic_config_total", labels) is None


def test_rlms_explicit_topic_entry_wins_and_warns_once_when_shorter(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tiering = _kept_forever(tiering_factory, backend, tmp_path)
    retention = tiering.retention(
        settings=_hourly(tiering.settings, orders=TopicSettings(retention_ms=4 * HOUR))
    )
    with caplog.at_level(logging.WARNING, "rlm.retention"):
        assert _deleted(tiering, retention) == 3
        assert _deleted(tiering, retention) == 0  # said once
    said = [r.getMessage() for r in caplog.records if "shorter than the broker's" in r.getMessage()]
    assert said == [f"topic orders: rlm's topics.orders sets retention.ms={4 * HOUR}, shorter than the "
                    "broker's override -1; the remote tier follows rlm's"]  # fmt: skip


def test_an_rlm_topic_entry_that_does_not_set_retention_leaves_the_brokers(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path
) -> None:
    tiering = _kept_forever(tiering_factory, backend, tmp_path)
    compacting = TopicSettings(retention_ms=HOUR, cleanup_policy="compact,delete")
    settings = _hourly(tiering.settings, orders=compacting).replace(
        topic_override_keys={"orders": frozenset({"cleanup_policy"})}
    )
    assert _deleted(tiering, settings) == 0


@pytest.mark.parametrize("value", ["forever", "-2", "1e9", ""])
def test_an_unreadable_broker_override_deletes_nothing_by_time_or_size_and_warns(
    backend: Backend,
    tiering_factory: TieringFactory,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    value: str,
) -> None:
    tiering = _tiered(
        tiering_factory, backend, tmp_path / "logs", config_record("orders", "retention.ms", value)
    )
    retention = tiering.retention(settings=_hourly(tiering.settings))
    with caplog.at_level(logging.WARNING, "rlm.retention"):
        assert _deleted(tiering, retention) == 0
        assert _deleted(tiering, retention) == 0  # said once
    said = [r.getMessage() for r in caplog.records if "is no retention value" in r.getMessage()]
    assert len(said) == 1 and f"retention.ms override {value!r}" in said[0] and "orders" in said[0]
    labels = {"topic": "orders"}
    assert tiering.registry.get_sample_value("rlm_retention_unreadable_topic_config_total", labels) == 2


def test_a_pending_override_lengthens_at_once_but_shortens_only_once_committed(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path
) -> None:
    forever = config_record("orders", "retention.ms", "-1")
    tiering = _tiered(tiering_factory, backend, tmp_path / "logs", pending=forever)
    assert _deleted(tiering, _hourly(tiering.settings)) == 0

    shorter = config_record("orders", "retention.ms", str(4 * HOUR))
    tiering = _tiered(tiering_factory, backend, tmp_path / "other", forever, pending=shorter)
    assert _deleted(tiering, _hourly(tiering.settings)) == 0


def test_without_a_metadata_log_rlms_settings_alone_count(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path
) -> None:
    log_dir = tmp_path / "logs"
    _write(log_dir, HOURLY)
    tiering = tiering_factory(backend, log_dir, FakeClock(NOW))
    assert all(o.error is None for o in tiering.copier().run_once())
    settings = _hourly(tiering.settings)
    assert _deleted(tiering, settings) == 6  # 6h to 1h old


def test_an_override_appended_to_the_log_counts_at_the_next_pass_without_a_new_snapshot(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path
) -> None:
    log_dir = tmp_path / "logs"
    _write(log_dir, HOURLY)
    clock = FakeClock(NOW)
    with MetadataLogWriter(log_dir) as log:
        image = [topic_record("orders", ORDERS), config_record("orders", "retention.ms", str(7 * HOUR))]
        log.append(*image)
        log.snapshot(log.next_offset, image)
        tiering = tiering_factory(backend, log_dir, clock)
        assert all(o.error is None for o in tiering.copier().run_once())
        retention = tiering.retention(settings=_hourly(tiering.settings))
        assert _deleted(tiering, retention) == 0  # 6h to 1h old, under the broker's 7h
        # kafka-configs --alter --add-config retention.ms=-1: in the log, in no snapshot yet.
        log.append(config_record("orders", "retention.ms", "-1"))
        clock.advance(3 * HOUR)
        assert _deleted(tiering, retention) == 0  # 7h older would have gone
    assert {r.state for r in tiering.segments(TP)} == {FINISHED}
