"""KRaft cluster metadata log directories for tests, written as a controller leaves them.

The record values are encoded here by hand from Kafka's message schemas (``TopicRecord.json``,
``RemoveTopicRecord.json``, ``ConfigRecord.json``, ``BeginTransactionRecord.json``...), never with
the reader under test.
:class:`MetadataLogWriter` appends them in v2 batches through rlm's broker-like
:class:`~rlm.log.writer.PartitionAppender` (segments with their indexes) and writes snapshot files
with their SnapshotHeader and SnapshotFooter control batches::

    with MetadataLogWriter(tmp_path) as log:         # tmp_path/__cluster_metadata-0/
        log.append(topic_record("orders", ORDERS))   # offset 0
        log.append(remove_topic_record(ORDERS))      # offset 1
        log.snapshot(2, [])                          # 00000000000000000002-0000000001.checkpoint
"""

from __future__ import annotations

import json
import struct
import uuid
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from rlm.log import v2
from rlm.log.files import segment_file_name
from rlm.log.model import ControlType, Record
from rlm.log.varint import write_uvarint
from rlm.log.writer import AppendResult, PartitionAppender, ProducerRecord
from tests.clock import EPOCH_MS, FakeClock

CLUSTER_METADATA_DIR = "__cluster_metadata-0"
TS = EPOCH_MS
"""The timestamp of every record written, unless told otherwise."""

_CONTROL_KEY = struct.Struct(">hh")  # ControlRecordType key: version, type


def metadata_record(api_key: int, version: int, body: bytes, *, frame_version: int = 1) -> bytes:
    """A metadata record's value: frame version, apiKey and version (unsigned varints), body."""
    out = bytearray()
    for number in (frame_version, api_key, version):
        write_uvarint(number, out)
    return bytes(out + body)


def _compact_string(text: str) -> bytes:
    encoded = text.encode()
    out = bytearray()
    write_uvarint(len(encoded) + 1, out)
    return bytes(out + encoded)


def topic_record(name: str, topic_id: uuid.UUID) -> bytes:
    """TopicRecord v0: Name (compact string), TopicId (16 bytes), no tagged fields."""
    return metadata_record(2, 0, _compact_string(name) + topic_id.bytes + b"\x00")


def remove_topic_record(topic_id: uuid.UUID) -> bytes:
    """RemoveTopicRecord v0: TopicId (16 bytes), no tagged fields."""
    return metadata_record(9, 0, topic_id.bytes + b"\x00")


def config_record(resource_name: str, name: str, value: str | None, *, resource_type: int = 2) -> bytes:
    """ConfigRecord v0 (apiKey 4, flexible): ResourceType int8 (2 TOPIC, 4 BROKER), ResourceName
    and Name (compact strings), Value (compact nullable string: null deletes), no tagged fields."""
    raw_value = b"\x00" if value is None else _compact_string(value)
    body = struct.pack(">b", resource_type) + _compact_string(resource_name) + _compact_string(name)
    return metadata_record(4, 0, body + raw_value + b"\x00")


def _tagged_name(text: str | None) -> bytes:
    """The tagged-field section of a record whose only field is an optional string, tag 0."""
    if text is None:
        return b"\x00"
    field = _compact_string(text)
    out = bytearray(b"\x01\x00")  # one field, tag 0
    write_uvarint(len(field), out)
    return bytes(out + field)


def begin_transaction_record(name: str | None = None) -> bytes:
    """BeginTransactionRecord v0 (apiKey 23); Name is tagged field 0."""
    return metadata_record(23, 0, _tagged_name(name))


def end_transaction_record() -> bytes:
    """EndTransactionRecord v0 (apiKey 24): no fields."""
    return metadata_record(24, 0, b"\x00")


def abort_transaction_record(reason: str | None = None) -> bytes:
    """AbortTransactionRecord v0 (apiKey 25); Reason is tagged field 0."""
    return metadata_record(25, 0, _tagged_name(reason))


def control_batch(
    base_offset: int, control_type: ControlType, value: bytes, *, epoch: int, timestamp: int = TS
) -> bytes:
    """A control batch of one record, as KRaft writes them (no producer, not transactional)."""
    key = _CONTROL_KEY.pack(0, control_type)
    return v2.encode_v2_batch(
        [Record(base_offset, timestamp, key, value)], leader_epoch=epoch, is_control=True
    )


def leader_change_batch(base_offset: int, *, leader_id: int, epoch: int, timestamp: int = TS) -> bytes:
    """The LeaderChangeMessage batch a new KRaft leader writes first (v0, flexible: Version int16,
    LeaderId int32, then Voters and GrantingVoters as compact arrays naming the leader alone)."""
    voters = b"\x02" + struct.pack(">i", leader_id) + b"\x00"  # one Voter, no tagged fields
    value = struct.pack(">hi", 0, leader_id) + voters + voters + b"\x00"
    return control_batch(base_offset, ControlType.LEADER_CHANGE, value, epoch=epoch, timestamp=timestamp)


def snapshot_bytes(
    values: Sequence[bytes], *, epoch: int, timestamp: int = TS, records_per_batch: int = 2
) -> bytes:
    """A snapshot file: a SnapshotHeader batch, ``values`` in batches of ``records_per_batch``,
    and a SnapshotFooter batch; offsets count from 0 within the snapshot (RecordsSnapshotWriter)."""
    # SnapshotHeaderRecord v0: Version int16, LastContainedLogTimestamp int64, tagged fields.
    batches = [
        control_batch(0, ControlType.SNAPSHOT_HEADER, struct.pack(">hqb", 0, timestamp, 0), epoch=epoch)
    ]
    offset = 1
    for start in range(0, len(values), records_per_batch):
        chunk = values[start : start + records_per_batch]
        records = [Record(offset + i, timestamp, None, value) for i, value in enumerate(chunk)]
        batches.append(v2.encode_v2_batch(records, leader_epoch=epoch))
        offset += len(chunk)
    # SnapshotFooterRecord v0: Version int16, tagged fields.
    batches.append(control_batch(offset, ControlType.SNAPSHOT_FOOTER, struct.pack(">hb", 0, 0), epoch=epoch))
    return b"".join(batches)


def snapshot_name(end_offset: int, epoch: int) -> str:
    """``<endOffset:020d>-<epoch:010d>.checkpoint``, as KRaft names a snapshot."""
    return f"{end_offset:020d}-{epoch:010d}.checkpoint"


def write_segment(directory: Path, batches: Sequence[bytes]) -> Path:
    """Write ``batches`` as a segment's ``.log`` named after the first batch's base offset (a
    segment the appender cannot write: control batches other than transaction markers)."""
    directory.mkdir(parents=True, exist_ok=True)
    base = struct.unpack_from(">q", batches[0])[0]
    path = directory / segment_file_name(base, ".log")
    path.write_bytes(b"".join(batches))
    return path


def batch_spans(path: Path) -> list[tuple[int, int]]:
    """``(position, size)`` of every whole batch of a ``.log`` or snapshot file, from the size
    fields alone (for tests that damage one batch)."""
    data = path.read_bytes()
    spans = []
    pos = 0
    while len(data) - pos >= 12:
        size = 12 + struct.unpack_from(">i", data, pos + 8)[0]
        if pos + size > len(data):
            break
        spans.append((pos, size))
        pos += size
    return spans


class MetadataLogWriter:
    """Writes ``<log_dir>/__cluster_metadata-0/``: metadata records appended as a KRaft leader
    does (one batch per :meth:`append`, leader epoch ``leader_epoch``), snapshots at chosen end
    offsets, and a ``quorum-state`` file."""

    def __init__(self, log_dir: Path, *, leader_epoch: int = 1, start_offset: int = 0, leader_id: int = 1):
        self.path = Path(log_dir) / CLUSTER_METADATA_DIR
        self.leader_epoch = leader_epoch
        self.clock = FakeClock()
        self._appender = PartitionAppender(
            self.path, clock=self.clock, leader_epoch=leader_epoch, start_offset=start_offset
        )
        quorum_state = {
            "clusterId": "",
            "leaderId": leader_id,
            "leaderEpoch": leader_epoch,
            "votedId": -1,
            "appliedOffset": 0,
            "currentVoters": [{"voterId": leader_id}],
            "data_version": 0,
        }
        (self.path / "quorum-state").write_text(json.dumps(quorum_state))

    @property
    def next_offset(self) -> int:
        """The offset the next record appended gets."""
        return self._appender.next_offset

    def append(self, *values: bytes, timestamp: int = TS) -> AppendResult:
        """Append one batch holding ``values`` (null keys); returns where it went."""
        return self._appender.append([ProducerRecord(timestamp, None, value) for value in values])

    def roll(self) -> None:
        """Start a new segment at the next offset."""
        self._appender.roll()

    def snapshot(
        self,
        end_offset: int,
        values: Sequence[bytes],
        *,
        epoch: int | None = None,
        suffix: str = ".checkpoint",
        records_per_batch: int = 2,
    ) -> Path:
        """Write a snapshot of the image ``values`` holding every record below ``end_offset``,
        named ``<end_offset>-<epoch><suffix>`` (``.checkpoint.part``: one being written)."""
        epoch = self.leader_epoch if epoch is None else epoch
        name = snapshot_name(end_offset, epoch).removesuffix(".checkpoint") + suffix
        path = self.path / name
        path.write_bytes(snapshot_bytes(values, epoch=epoch, records_per_batch=records_per_batch))
        return path

    def last_segment(self) -> Path:
        """The ``.log`` file of the active segment."""
        return sorted(self.path.glob("*.log"))[-1]

    def close(self) -> None:
        """Finish the segment files; idempotent."""
        self._appender.close()

    def __enter__(self) -> MetadataLogWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
