"""Reading the KRaft cluster metadata log again and again: on from where the last read stopped
when it can (:class:`rlm.log.cluster_metadata.ClusterMetadataReader`), whole when it cannot; either
way as a fresh :func:`~rlm.log.cluster_metadata.read_cluster_metadata` of the same files."""

from __future__ import annotations

import dataclasses
import struct
import uuid
from pathlib import Path

from rlm.log import v2
from rlm.log.checkpoints import uuid_to_topic_id
from rlm.log.cluster_metadata import ClusterMetadata, ClusterMetadataReader, read_cluster_metadata
from rlm.log.model import Record
from tests import cluster_metadata_support as meta
from tests.cluster_metadata_support import (
    TS,
    MetadataLogWriter,
    batch_spans,
    config_record,
    remove_topic_record,
    topic_record,
)

FOO, BAR, BAZ = uuid.UUID(int=0xF0), uuid.UUID(int=0xBA), uuid.UUID(int=0xBB)


def _same_as_fresh(reader: ClusterMetadataReader, *, resumed: bool = True) -> ClusterMetadata:
    read = reader.read()
    assert reader.resumed is resumed
    assert read == read_cluster_metadata(reader.path)
    assert read.unreadable == 0
    return read


def _started(tmp_path: Path) -> tuple[MetadataLogWriter, ClusterMetadataReader]:
    log = MetadataLogWriter(tmp_path)
    image = [topic_record("foo", FOO), config_record("foo", "retention.ms", "604800000")]
    log.append(*image)
    log.snapshot(log.next_offset, image)
    reader = ClusterMetadataReader(log.path)
    _same_as_fresh(reader, resumed=False)
    return log, reader


def test_an_override_appended_after_a_read_is_seen_by_the_next(tmp_path: Path) -> None:
    log, reader = _started(tmp_path)
    with log:
        first = reader.read()
        assert reader.read() is first  # nothing appended: the same read
        log.append(config_record("foo", "retention.ms", "-1"))
        read = _same_as_fresh(reader)
    assert read.committed_configs == {"foo": {"retention.ms": "604800000"}}
    assert read.configs == {"foo": {"retention.ms": "-1"}}


def test_reading_on_after_appends_equals_a_fresh_read(tmp_path: Path) -> None:
    log, reader = _started(tmp_path)
    with log:
        log.append(topic_record("bar", BAR), config_record("bar", "retention.bytes", "1"))
        _same_as_fresh(reader)
        log.append(remove_topic_record(FOO))
        assert _same_as_fresh(reader).removals.keys() == {uuid_to_topic_id(FOO)}
        # A transaction begun in one read and ended in the next.
        log.append(meta.begin_transaction_record("t"), topic_record("baz", BAZ))
        assert uuid_to_topic_id(BAZ) not in _same_as_fresh(reader).topics
        log.roll()
        log.append(config_record("baz", "retention.ms", "-1"), meta.end_transaction_record())
        assert _same_as_fresh(reader).configs["baz"] == {"retention.ms": "-1"}
        log.append(meta.begin_transaction_record(), remove_topic_record(BAR))
        _same_as_fresh(reader)
        log.append(meta.abort_transaction_record())
        assert uuid_to_topic_id(BAR) not in _same_as_fresh(reader).removals
        # A batch the broker is writing: read again once whole, not skipped.
        log.append(config_record("bar", "retention.ms", "-1"))
        segment = log.last_segment()
        data = segment.read_bytes()
        segment.write_bytes(data[:-7])
        assert "retention.ms" not in _same_as_fresh(reader).configs["bar"]
        segment.write_bytes(data)
        assert _same_as_fresh(reader).configs["bar"]["retention.ms"] == "-1"


def test_a_new_snapshot_reads_everything_again(tmp_path: Path) -> None:
    log, reader = _started(tmp_path)
    with log:
        log.append(remove_topic_record(FOO))
        assert not _same_as_fresh(reader).removals[uuid_to_topic_id(FOO)].committed
        log.snapshot(log.next_offset, [])
        assert _same_as_fresh(reader, resumed=False).removals[uuid_to_topic_id(FOO)].committed


def test_a_truncated_segment_reads_everything_again(tmp_path: Path) -> None:
    log, reader = _started(tmp_path)
    with log:
        log.append(config_record("foo", "retention.ms", "-1"))
        assert _same_as_fresh(reader).configs["foo"] == {"retention.ms": "-1"}
        segment = log.last_segment()
        (*_, (last, _size)) = batch_spans(segment)
        with segment.open("r+b") as f:  # a new leader truncates the pending record
            f.truncate(last)
    assert _same_as_fresh(reader, resumed=False).configs["foo"] == {"retention.ms": "604800000"}


def test_a_segment_rewritten_by_a_new_leader_reads_everything_again(tmp_path: Path) -> None:
    log, reader = _started(tmp_path)
    with log:
        log.append(config_record("foo", "retention.ms", "-1"))
        _same_as_fresh(reader)
        # The new leader's record in its place, as long, under its own epoch; then more.
        segment = log.last_segment()
        (*_, (last, size)) = batch_spans(segment)
        data = segment.read_bytes()
        (offset,) = struct.unpack_from(">q", data, last)
        value = config_record("foo", "retention.ms", "-2")
        theirs = v2.encode_v2_batch([Record(offset, TS, None, value)], leader_epoch=2)
        assert len(theirs) == size and theirs != data[last:]
        segment.write_bytes(data[:last] + theirs)
        log.append(config_record("bar", "retention.ms", "1"))
    assert _same_as_fresh(reader, resumed=False).configs["foo"] == {"retention.ms": "-2"}


def test_a_segment_gone_reads_everything_again(tmp_path: Path) -> None:
    log, reader = _started(tmp_path)
    with log:
        log.roll()
        log.append(config_record("foo", "retention.ms", "-1"))
        _same_as_fresh(reader)
        log.last_segment().unlink()
    assert _same_as_fresh(reader, resumed=False).configs["foo"] == {"retention.ms": "604800000"}


def test_a_corrupt_batch_appended_where_the_last_read_stopped_is_counted(tmp_path: Path) -> None:
    log, reader = _started(tmp_path)
    with log:
        log.append(config_record("foo", "retention.ms", "-1"))
        segment = log.last_segment()
        (*_, (last, size)) = batch_spans(segment)
        data = bytearray(segment.read_bytes())
        data[last + size - 1] ^= 0xFF  # a bit flipped in its records: its CRC fails
        segment.write_bytes(bytes(data))
        log.append(config_record("foo", "retention.bytes", "1"))
        read = reader.read()
    fresh = read_cluster_metadata(reader.path)
    assert fresh.unreadable == 1
    assert read == fresh


def test_random_appends_rolls_torn_tails_and_snapshots_read_on_as_a_fresh_read(tmp_path: Path) -> None:
    import random

    ids = [uuid.UUID(int=0x100 + i) for i in range(3)]
    names = ["a", "b", "c"]
    for seed in range(15):
        rng = random.Random(seed)
        log = MetadataLogWriter(tmp_path / str(seed))
        reader = ClusterMetadataReader(log.path)
        trimmed = in_transaction = False
        history = [topic_record("a", ids[0])]
        with log:
            log.append(*history)
            for step in range(40):
                op = rng.random()
                if op < 0.55:
                    values = []
                    for _ in range(rng.randint(1, 3)):
                        kind = rng.random()
                        if kind < 0.3:
                            values.append(topic_record(rng.choice(names), rng.choice(ids)))
                        elif kind < 0.45:
                            values.append(remove_topic_record(rng.choice(ids)))
                        elif kind < 0.8:
                            value = rng.choice(["1", "-1", None, "99"])
                            values.append(config_record(rng.choice(names), "retention.ms", value))
                        else:
                            marker = rng.randrange(3)
                            in_transaction = marker == 0
                            values.append(
                                [
                                    meta.begin_transaction_record(),
                                    meta.end_transaction_record(),
                                    meta.abort_transaction_record(),
                                ][marker]
                            )
                    log.append(*values)
                    history.extend(values)
                elif op < 0.7:
                    log.roll()
                elif op < 0.85:
                    segment = log.last_segment()
                    data = segment.read_bytes()
                    if data:
                        segment.write_bytes(data[: len(data) - rng.randint(1, 20)])
                        torn = reader.read()
                        fresh = read_cluster_metadata(log.path)
                        assert torn == fresh, (seed, step, "torn")
                        segment.write_bytes(data)
                elif op < 0.93:
                    if in_transaction or (log.path / meta.snapshot_name(log.next_offset, 1)).exists():
                        continue  # one snapshot per end offset and epoch, none inside a transaction
                    log.snapshot(log.next_offset, history)  # replayed, the image below its end
                else:
                    segments = sorted(log.path.glob("*.log"))
                    if len(segments) > 1 and read_cluster_metadata(log.path).snapshot_end_offset:
                        bases = [int(s.name[:20]) for s in segments]
                        end = read_cluster_metadata(log.path).snapshot_end_offset or 0
                        if bases[1] <= end:
                            segments[0].unlink()
                            trimmed = True
                read = reader.read()
                fresh = read_cluster_metadata(log.path)
                if trimmed:  # what the deleted segments said is kept by the reader
                    read = dataclasses.replace(read, removals=fresh.removals)
                assert read == fresh, (seed, step)
