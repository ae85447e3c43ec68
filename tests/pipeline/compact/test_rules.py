"""The winner rules and the reference compaction, rule by rule (issue 14 §2, §3)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from rlm.config import TopicSettings, load_settings
from rlm.errors import ConfigError
from rlm.pipeline.compact.engine import segment_change
from rlm.pipeline.compact.rules import Fact, Kind, Strategy, compactable_end, decide, header_value, order_key

OFFSET = Strategy("offset")
TIMESTAMP = Strategy("timestamp")
HEADER = Strategy("header", "v")


def long(n: int) -> bytes:
    return struct.pack(">q", n)


def fact(
    offset: int,
    key: bytes | None = b"k",
    *,
    order: tuple[int, int, int] | None = None,
    kind: Kind = Kind.DATA,
    batch_last: int | None = None,
    tombstone: bool = False,
    aborted: bool = False,
    producer_id: int = -1,
    transactional: bool = False,
    horizon_passed: bool = False,
    has_horizon: bool = False,
    young: bool = False,
    held: bool = False,
) -> Fact:
    return Fact(
        offset,
        offset if batch_last is None else batch_last,
        kind,
        key,
        (0, 0, offset) if order is None else order,
        tombstone,
        aborted,
        producer_id,
        transactional,
        horizon_passed or False,
        has_horizon or horizon_passed,
        young,
        held,
    )


# -- settings -------------------------------------------------------------------------------------


def test_compaction_settings_read_from_yaml_and_env(tmp_path: Path) -> None:
    config = tmp_path / "rlm.yaml"
    config.write_text(
        "topics:\n  users: {cleanup.policy: 'delete,compact', compaction.strategy: Header,"
        " compaction.strategy.header: version, segment.bytes: 4096}\n"
    )
    settings = load_settings(config, env={"RLM_DELETE_RETENTION_MS": "5", "RLM_MIN_COMPACTION_LAG_MS": "7"})
    users = settings.topic("users")
    assert users.cleanup_policy == "compact,delete"
    assert (users.compaction_strategy, users.compaction_strategy_header) == ("header", "version")
    assert (users.delete_retention_ms, users.min_compaction_lag_ms, users.segment_bytes) == (5, 7, 4096)
    assert settings.topic("other").cleanup_policy == "delete"
    assert settings.topic("other").delete_retention_ms == 5
    assert load_settings(env={}).remote_compaction_delete_delay_ms == 300_000


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"compaction_strategy": "newest"}, "compaction.strategy must be one of offset, timestamp, header"),
        ({"cleanup_policy": "compact,shred"}, "cleanup.policy must be delete, compact or compact,delete"),
        ({"delete_retention_ms": -1}, "delete.retention.ms must be ≥ 0"),
    ],
)
def test_bad_settings_are_refused_by_name(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TopicSettings(**changes)


def test_a_topic_without_compact_is_refused() -> None:
    with pytest.raises(ConfigError, match="topic 'orders' has cleanup.policy=delete"):
        Strategy.of("orders", TopicSettings())
    assert Strategy.of("t", TopicSettings(cleanup_policy="compact,delete")) == OFFSET


def test_a_blank_header_name_falls_back_to_offset() -> None:
    settings = TopicSettings(cleanup_policy="compact", compaction_strategy="header")
    assert Strategy.of("t", settings) == OFFSET
    named = TopicSettings(
        cleanup_policy="compact", compaction_strategy="header", compaction_strategy_header=" v "
    )
    assert Strategy.of("t", named) == HEADER


# -- winner order ---------------------------------------------------------------------------------


def test_header_value_is_the_last_occurrence_of_8_bytes() -> None:
    assert header_value([("v", long(3)), ("v", long(9))], "v") == 9
    assert header_value([("v", long(9)), ("v", b"short")], "v") is None  # the last one counts
    assert header_value([("v", long(9)), ("v", None)], "v") is None
    assert header_value([("w", long(9))], "v") is None
    assert header_value([("v", long(-2))], "v") == -2  # signed


def test_offset_strategy_orders_by_offset_only() -> None:
    assert order_key(OFFSET, 5, 1000, [("v", long(1))]) < order_key(OFFSET, 6, 1, ())


def test_timestamp_strategy_ties_go_to_the_highest_offset() -> None:
    assert order_key(TIMESTAMP, 9, 100, ()) < order_key(TIMESTAMP, 5, 200, ())
    assert order_key(TIMESTAMP, 5, 100, ()) < order_key(TIMESTAMP, 9, 100, ())


def test_header_strategy_rules() -> None:
    with_low = order_key(HEADER, 9, 0, [("v", long(1))])
    with_high = order_key(HEADER, 5, 0, [("v", long(2))])
    without = order_key(HEADER, 20, 0, ())
    bad = order_key(HEADER, 21, 0, [("v", b"1234567")])
    assert with_low < with_high  # the highest value wins
    assert without < with_low  # a record with the header beats one without
    assert without < bad  # a non-8-byte value counts as none: then the highest offset
    assert order_key(HEADER, 5, 0, [("v", long(2))]) < order_key(HEADER, 6, 0, [("v", long(2))])


# -- decisions ------------------------------------------------------------------------------------


def test_the_winner_per_key_is_kept_and_null_keys_go() -> None:
    facts = [fact(0, b"a"), fact(1, b"b"), fact(2, None), fact(3, b"a"), fact(4, b"c")]
    assert decide(facts, last=4).kept == {1, 3, 4}


def test_timestamp_winner_may_be_an_earlier_offset() -> None:
    facts = [fact(0, b"a", order=(500, 0, 0)), fact(1, b"a", order=(100, 0, 1)), fact(2, b"z")]
    assert decide(facts, last=2).kept == {0, 2}


def test_the_last_record_is_always_kept() -> None:
    facts = [fact(0, b"a"), fact(1, b"a", order=(0, 0, 0)), fact(2, None)]
    # offset 2 has no key, yet it ends the tiered range
    assert decide([fact(0, b"a"), fact(1, None)], last=1).kept == {0, 1}
    assert 2 in decide(facts, last=2).kept


def test_tombstones_follow_the_delete_horizon() -> None:
    before = [fact(0, b"a"), fact(1, b"a", tombstone=True), fact(2, b"z")]
    assert decide(before, last=2).kept == {1, 2}
    stamped = [fact(1, b"a", tombstone=True, has_horizon=True), fact(2, b"z")]
    assert decide(stamped, last=2).kept == {1, 2}
    passed = [fact(1, b"a", tombstone=True, horizon_passed=True), fact(2, b"z")]
    assert decide(passed, last=2).kept == {2}


def test_aborted_records_go_and_their_marker_waits_for_its_horizon() -> None:
    txn: dict[str, Any] = {"producer_id": 7, "transactional": True}
    facts = [
        fact(0, b"a", aborted=True, **txn),
        fact(1, b"b", aborted=True, **txn),
        fact(2, None, kind=Kind.CONTROL, **txn),
        fact(3, b"z"),
        # the producer's next transaction: its last data batch is not the aborted one
        fact(4, b"y", **txn),
        fact(5, None, kind=Kind.CONTROL, **txn),
    ]
    decided = decide(facts, last=5)
    assert decided.kept == {2, 3, 4, 5} and decided.empty_markers == {2}
    facts[2] = fact(2, None, kind=Kind.CONTROL, horizon_passed=True, **txn)
    assert decide(facts, last=5).kept == {3, 4, 5}


def test_a_committed_marker_stays_while_a_record_of_its_transaction_does() -> None:
    txn: dict[str, Any] = {"producer_id": 7, "transactional": True}
    facts = [
        fact(0, b"a", **txn),
        fact(1, b"b", **txn),
        fact(2, None, kind=Kind.CONTROL, horizon_passed=True, **txn),
        fact(3, b"a"),
    ]
    decided = decide(facts, last=3)
    assert decided.kept == {1, 2, 3} and not decided.empty_markers
    facts.append(fact(4, b"b"))
    # the producer's last data batch stays, empty: so does the marker of its transaction
    assert decide(facts, last=4).kept == {2, 3, 4}
    facts += [fact(5, b"c", **txn), fact(6, None, kind=Kind.CONTROL, **txn)]
    assert decide(facts, last=6).kept == {3, 4, 5, 6}  # the transaction is empty, its horizon passed


def test_the_last_data_batch_of_a_producer_keeps_its_transactions_marker() -> None:
    # Kafka's cleaner keeps the batch of a producer's last data offset (a marker is no data
    # batch), empty when its records go; the marker after it stays while it does.
    txn: dict[str, Any] = {"producer_id": 7, "transactional": True}
    facts = [
        fact(0, b"a", batch_last=1, **txn),
        fact(1, b"b", batch_last=1, **txn),
        fact(2, None, kind=Kind.CONTROL, horizon_passed=True, **txn),
        fact(3, b"a"),
        fact(4, b"b"),
    ]
    decided = decide(facts, last=4)
    assert decided.last_batches == {1}
    assert decided.kept == {2, 3, 4} and not decided.empty_markers
    aborted = [f._replace(aborted=True) if f.offset < 2 else f for f in facts]
    assert decide(aborted, last=4).kept == {2, 3, 4}  # an ABORT marker too
    # once emptied (an earlier run), the batch is a fact of its own: the marker still stays
    emptied = [fact(1, None, kind=Kind.EMPTY, **txn), *facts[2:]]
    assert decide(emptied, last=4).kept == {2, 3, 4}
    assert decide(emptied, last=4).last_batches == {1}


def test_an_empty_batch_no_longer_its_producers_last_goes_and_frees_its_marker() -> None:
    txn: dict[str, Any] = {"producer_id": 7, "transactional": True}
    facts = [
        fact(1, None, kind=Kind.EMPTY, **txn),
        fact(2, None, kind=Kind.CONTROL, horizon_passed=True, **txn),
        fact(3, b"a", **txn),
        fact(4, None, kind=Kind.CONTROL, **txn),
    ]
    decided = decide(facts, last=4)
    assert decided.last_batches == {3}
    assert decided.kept == {3, 4}  # the marker of the empty batch's transaction goes
    change = segment_change(facts, decided)
    assert (change.removed, change.kept, change.total) == (2, 2, 4)  # the empty batch goes too
    held = [f._replace(held=True) for f in facts]  # a segment read in part stays as it is
    assert segment_change(held[:1], decide(held, last=4)).removed == 0


def test_a_producer_with_no_data_batch_keeps_its_last_marker() -> None:
    # Its data batches went with retention: the last marker is the only batch with its epoch left
    # (Kafka's isBatchLastRecordOfProducer without a lastDataOffset), so it outlives its horizon.
    txn: dict[str, Any] = {"producer_id": 7, "transactional": True}
    facts = [
        fact(0, None, kind=Kind.CONTROL, horizon_passed=True, **txn),
        fact(1, None, kind=Kind.CONTROL, horizon_passed=True, **txn),
        fact(2, b"a"),
        fact(3, b"a"),
    ]
    decided = decide(facts, last=3)
    assert decided.kept == {1, 3} and decided.empty_markers == {1}  # it gets a horizon if it has none
    # once a data batch of the producer is tiered, that batch holds the epoch: the marker goes
    later = [*facts, fact(4, b"b", **txn), fact(5, None, kind=Kind.CONTROL, **txn)]
    assert decide(later, last=5).kept == {3, 4, 5}
    # another producer's data batch changes nothing for producer 7
    other = [*facts, fact(4, b"b", producer_id=8)]
    assert decide(other, last=4).kept == {1, 3, 4}


def test_young_records_and_open_transactions_end_the_compactable_range() -> None:
    facts = [fact(0, b"a"), fact(1, b"a", young=True), fact(2, b"a")]
    decided = decide(facts, last=2)
    assert decided.end == 0 and decided.kept == {0}  # offsets 1..2 are untouched (not listed)
    txn: dict[str, Any] = {"producer_id": 3, "transactional": True}
    facts = [fact(0, b"a"), fact(1, b"b", **txn), fact(2, b"a")]
    assert compactable_end(facts, 2) == 0
    assert decide(facts, last=2).kept == {0}


def test_the_last_batch_of_each_producer_is_known() -> None:
    facts = [
        fact(0, b"a", producer_id=1, batch_last=1),
        fact(1, b"a", producer_id=1),
        fact(5, b"b", producer_id=2),
    ]
    assert decide(facts, last=5).last_batches == {1, 5}


def test_legacy_records_are_never_listed_as_kept() -> None:
    facts = [fact(0, b"a", kind=Kind.LEGACY), fact(1, b"a")]
    assert decide(facts, last=1).kept == {1}
