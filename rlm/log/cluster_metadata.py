"""The KRaft cluster metadata log: which topics it says were removed, and the topics' config overrides.

A KRaft broker keeps it in ``<metadata.log.dir>/__cluster_metadata-0/``: segments, and snapshots
``<endOffset:020d>-<epoch:010d>.checkpoint`` (not ``.part``/``.deleted``), each the image of every
committed record below its end offset in v2 batches between SnapshotHeader and Footer batches.

Each metadata record has a null key and a value (``MetadataRecordSerde``)::

    frameVersion  uvarint  1 (0 was the 2.8 preview's, unsupported)
    apiKey        uvarint  2 TopicRecord, 4 ConfigRecord, 9 RemoveTopicRecord,
                           23/24/25 Begin/End/AbortTransaction
    version       uvarint
    body                   the message at that version

    TopicRecord v0 (flexible)   Name: uvarint length+1, UTF-8 | TopicId: 16 bytes | tagged fields
    RemoveTopicRecord           TopicId: 16 bytes | (v0: tagged fields; ignored)
    ConfigRecord v0 (flexible)  ResourceType: int8 (2 TOPIC, 4 BROKER) | ResourceName: compact string
                                | Name: compact string | Value: compact nullable string (null: the
                                override was deleted) | tagged fields
    tagged fields               uvarint count, then per field: uvarint tag, uvarint size, bytes

Nothing here raises for bad bytes: this reader only ever delays deletions, so what it cannot read
is skipped and counted in :attr:`ClusterMetadata.unreadable`.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NamedTuple

from rlm.errors import CorruptDataError, CorruptRecordError, NotFoundError
from rlm.log.batches import decode_batch
from rlm.log.byte_source import FileSource, iter_header_windows, read_batch_bytes
from rlm.log.checkpoints import uuid_to_topic_id
from rlm.log.model import CLUSTER_METADATA_DIR, V2_HEADER_SIZE, BatchHeader, ControlType, Record
from rlm.log.segment import segment_base_offsets
from rlm.log.v2 import parse_control_record
from rlm.log.varint import read_uvarint

FRAME_VERSION = 1
TOPIC_RECORD = 2
CONFIG_RECORD = 4
TOPIC_RESOURCE = 2
REMOVE_TOPIC_RECORD = 9
BEGIN_TRANSACTION_RECORD = 23
END_TRANSACTION_RECORD = 24
ABORT_TRANSACTION_RECORD = 25

_SNAPSHOT = re.compile(r"([0-9]{20})-([0-9]{10})\.checkpoint")
_UUID_SIZE = 16

_Ending = Literal["whole", "tail", "bad"]


@dataclass(frozen=True)
class TopicRemoval:
    """A RemoveTopicRecord of the metadata log."""

    topic_id: str
    """Kafka's ``Uuid.toString()`` of the removed topic."""
    offset: int
    """The record's offset in the metadata log."""
    timestamp_ms: int
    """Its batch's max timestamp."""
    committed: bool
    """Whether it lies below the latest snapshot's end offset (a pending one may be truncated)."""
    name: str | None
    """The topic's name, when its TopicRecord was seen (in the snapshot or the log)."""


@dataclass(frozen=True)
class ClusterMetadata:
    """What a metadata log directory says about topics."""

    path: Path
    snapshot_end_offset: int | None
    """The end offset of the latest complete snapshot read; None when there is none."""
    end_offset: int
    """One past the last record read."""
    removals: Mapping[str, TopicRemoval]
    """The removals found in the log, by topic id."""
    topics: Mapping[str, str]
    """The image after replay: live topic id -> name (as complete as what was read)."""
    unreadable: int
    """Snapshots, batches and records skipped because they could not be parsed; reading of the log
    stops at a bad batch (or one out of place: offsets missing or repeated) anywhere but at the
    tail of its last segment."""
    committed_configs: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """The topic-level config overrides of the latest snapshot's image (committed), by topic name."""
    configs: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """The topic-level config overrides after replaying the log onto that image: the committed
    ones and the pending ones (past the snapshot's end: a new leader may truncate them)."""


class ConfigChange(NamedTuple):
    """A ConfigRecord: ``value`` set for the config ``name`` of a resource, or None to delete it."""

    resource_type: int
    resource_name: str
    name: str
    value: str | None


class MetadataRecord(NamedTuple):
    """The parts of a metadata record's value read here: its frame, the topic id of a TopicRecord
    or a RemoveTopicRecord, the name of a TopicRecord and the change of a ConfigRecord."""

    api_key: int
    version: int
    topic_id: str | None = None
    name: str | None = None
    config: ConfigChange | None = None


def decode_record(value: bytes | None) -> MetadataRecord:
    """Decode a metadata record's value (its frame, and the body of the topic records).

    Raises:
        CorruptRecordError: no value, an unsupported frame version, or a malformed topic record.
    """
    if value is None:
        raise CorruptRecordError("metadata record has no value")
    frame, pos = read_uvarint(value, 0, 5)
    if frame != FRAME_VERSION:
        raise CorruptRecordError(f"unsupported metadata frame version {frame}")
    api_key, pos = read_uvarint(value, pos, 5)
    version, pos = read_uvarint(value, pos, 5)
    if api_key == TOPIC_RECORD:
        length, pos = read_uvarint(value, pos, 5)
        if length == 0:
            raise CorruptRecordError("TopicRecord has a null name")
        end = pos + length - 1
        name = value[pos:end].decode("utf-8", "replace")  # Java replaces malformed bytes too
        topic_id = _topic_id(value, end)
        # Later versions may add fields: the name and id come first in every one.
        if version == 0 and _skip_tagged_fields(value, end + _UUID_SIZE) != len(value):
            raise CorruptRecordError("TopicRecord has bytes after its tagged fields")
        return MetadataRecord(api_key, version, topic_id, name)
    if api_key == REMOVE_TOPIC_RECORD:
        return MetadataRecord(api_key, version, _topic_id(value, pos))
    if api_key == CONFIG_RECORD:
        return MetadataRecord(api_key, version, config=_config_change(value, pos, version))
    return MetadataRecord(api_key, version)


def _config_change(value: bytes, pos: int, version: int) -> ConfigChange:
    if pos >= len(value):
        raise CorruptRecordError("ConfigRecord has no ResourceType")
    resource_type = value[pos] - 256 if value[pos] > 127 else value[pos]  # int8
    resource_name, pos = _compact_string(value, pos + 1, "ResourceName")
    name, pos = _compact_string(value, pos, "Name")
    config_value, pos = _compact_string(value, pos, "Value")
    if resource_name is None or name is None:
        raise CorruptRecordError("ConfigRecord has a null ResourceName or Name")
    # Later versions may add fields after these four.
    if version == 0 and _skip_tagged_fields(value, pos) != len(value):
        raise CorruptRecordError("ConfigRecord has bytes after its tagged fields")
    return ConfigChange(resource_type, resource_name, name, config_value)


def _compact_string(value: bytes, pos: int, field: str) -> tuple[str | None, int]:
    """A compact nullable string at ``pos``: uvarint length + 1 (0: null), then UTF-8 bytes."""
    length, pos = read_uvarint(value, pos, 5)
    if length == 0:
        return None, pos
    end = pos + length - 1
    if end > len(value):
        raise CorruptRecordError(f"ConfigRecord's {field} runs past the end of the record")
    return value[pos:end].decode("utf-8", "replace"), end


def _topic_id(value: bytes, pos: int) -> str:
    raw = value[pos : pos + _UUID_SIZE]
    if len(raw) != _UUID_SIZE:
        raise CorruptRecordError(f"topic id needs {_UUID_SIZE} bytes but {len(raw)} remain")
    return uuid_to_topic_id(uuid.UUID(bytes=raw))


def _skip_tagged_fields(value: bytes, pos: int) -> int:
    count, pos = read_uvarint(value, pos, 5)
    if count > (len(value) - pos) // 2:  # a field takes two bytes at least
        raise CorruptRecordError(f"{count} tagged fields cannot fit {len(value) - pos} bytes")
    for _ in range(count):
        _, pos = read_uvarint(value, pos, 5)
        size, pos = read_uvarint(value, pos, 5)
        pos += size
    if pos > len(value):
        raise CorruptRecordError("tagged fields run past the end of the record")
    return pos


def find_cluster_metadata(log_dirs: Sequence[Path], metadata_log_dir: Path | None = None) -> Path | None:
    """The ``__cluster_metadata-0`` directory: under ``metadata_log_dir`` if given (the broker's
    ``metadata.log.dir``), else the first of ``log_dirs`` holding one; None if there is none."""
    for log_dir in [metadata_log_dir] if metadata_log_dir is not None else log_dirs:
        path = Path(log_dir) / CLUSTER_METADATA_DIR
        if path.is_dir():
            return path
    return None


class _Scanned(NamedTuple):
    """How a scan of a segment ended: ``whole`` (every byte read as valid batches), ``tail`` (at a
    torn or corrupt batch reaching the end of the file) or ``bad`` (anywhere else); the position
    after the last batch passed on, and where that batch starts and its header bytes (empty when
    none was)."""

    ending: _Ending
    position: int
    mark_at: int
    mark: bytes


def _scan(path: Path, visit: Callable[[BatchHeader, list[Record]], None], start: int = 0) -> _Scanned:
    """Decode every batch of ``path`` from byte ``start`` in order and pass it to ``visit`` (which
    may raise :class:`CorruptDataError` to stop); never raises for the file's bytes."""
    size = read = mark_at = start
    mark = b""
    failed: BatchHeader | None = None
    try:
        with FileSource(path) as source:
            size = source.size
            for header, window, window_start in iter_header_windows(source, start):
                failed = header
                data, at = window, header.position - window_start
                if at + header.size > len(window):  # not read with the header
                    data, at = read_batch_bytes(source, header), 0
                visit(header, decode_batch(data, header._replace(position=at)))
                read, failed, mark_at = header.end_position, None, header.position
                mark = bytes(data[at : at + min(header.size, V2_HEADER_SIZE)])
    except (CorruptDataError, OSError):
        ending: _Ending = "tail" if failed is not None and failed.end_position >= size else "bad"
        return _Scanned(ending, read, mark_at, mark)
    return _Scanned("whole" if read == size else "tail", read, mark_at, mark)


class _Replay:
    """Applies metadata records in log order, holding a transaction's until it ends."""

    def __init__(
        self,
        topics: dict[str, str],
        snapshot_end: int | None,
        configs: dict[str, dict[str, str]] | None = None,
    ) -> None:
        self.topics = topics
        self.configs: dict[str, dict[str, str]] = configs if configs is not None else {}
        """Topic name -> its config overrides, as replayed."""
        self.names = dict(topics)
        self.snapshot_end = snapshot_end
        self.removals: dict[str, TopicRemoval] = {}
        self.unreadable = 0
        self._transaction: list[tuple[MetadataRecord, int, int]] | None = None
        self._unmarked: list[str] = []  # removals added since the last transaction marker

    def record(self, value: bytes | None, offset: int, timestamp_ms: int) -> None:
        try:
            record = decode_record(value)
        except CorruptRecordError:
            self.unreadable += 1
            return
        key = record.api_key
        if key in (BEGIN_TRANSACTION_RECORD, END_TRANSACTION_RECORD, ABORT_TRANSACTION_RECORD):
            if key == ABORT_TRANSACTION_RECORD and self._transaction is None:
                # Its Begin was not read (the log starts inside the transaction, its first
                # segments deleted, or the Begin was unreadable): drop what it applied.
                for topic_id in self._unmarked:
                    del self.removals[topic_id]
            held = self._transaction if key == END_TRANSACTION_RECORD else None
            self._transaction = [] if key == BEGIN_TRANSACTION_RECORD else None  # drops an open one
            for held_record, held_offset, held_timestamp in held or []:
                # Committed with its transaction's end, not before.
                self._apply(held_record, held_offset, held_timestamp, committed_at=offset)
            self._unmarked = []
        elif record.topic_id is None and record.config is None:
            return  # a record that says nothing of topics
        elif self._transaction is not None:
            self._transaction.append((record, offset, timestamp_ms))
        else:  # a TopicRecord, a RemoveTopicRecord or a ConfigRecord
            self._apply(record, offset, timestamp_ms)

    def _apply(
        self, record: MetadataRecord, offset: int, timestamp_ms: int, *, committed_at: int | None = None
    ) -> None:
        at = offset if committed_at is None else committed_at
        committed = self.snapshot_end is not None and at < self.snapshot_end
        change = record.config
        if change is not None:
            # Below the snapshot, its image already holds the outcome. Only topics' configs count.
            if not committed and change.resource_type == TOPIC_RESOURCE:
                overrides = self.configs.setdefault(change.resource_name, {})
                if change.value is None:
                    overrides.pop(change.name, None)
                else:
                    overrides[change.name] = change.value
                if not overrides:
                    del self.configs[change.resource_name]
            return
        topic_id = record.topic_id
        assert topic_id is not None
        if record.api_key == TOPIC_RECORD:
            assert record.name is not None
            self.names[topic_id] = record.name
            if not committed:  # below the snapshot, its image already holds the outcome
                self.topics[topic_id] = record.name
            return
        if not committed:
            self.topics.pop(topic_id, None)
            name = self.names.get(topic_id)
            if name is not None:  # as Kafka's ConfigurationsDelta, the topic's configs go with it
                self.configs.pop(name, None)
        if topic_id not in self.removals:
            name = self.names.get(topic_id)
            self.removals[topic_id] = TopicRemoval(topic_id, offset, timestamp_ms, committed, name)
            self._unmarked.append(topic_id)


def _read_snapshot(path: Path) -> _Replay | None:
    """A snapshot replayed (its topics and unreadable records); None when it cannot be read
    completely (a bad batch, no SnapshotHeader first or no SnapshotFooter last)."""
    replay = _Replay({}, None)
    started = ended = False

    def visit(header: BatchHeader, records: list[Record]) -> None:
        nonlocal started, ended
        types = [parse_control_record(record).type for record in records] if header.is_control else []
        if not started and types[:1] != [ControlType.SNAPSHOT_HEADER]:
            raise CorruptRecordError("the first batch is not a SnapshotHeader")
        started = True
        ended = ControlType.SNAPSHOT_FOOTER in types  # and nothing after it
        if not header.is_control:
            for record in records:
                replay.record(record.value, record.offset, header.max_timestamp)

    return replay if _scan(path, visit).ending == "whole" and ended else None


def _snapshots(path: Path) -> list[tuple[int, str]]:
    """The snapshots' end offsets and file names, the latest (by end offset, then epoch) first."""
    matches = (_SNAPSHOT.fullmatch(child.name) for child in path.iterdir())
    return [(int(m[1]), m[0]) for m in sorted((m for m in matches if m), key=lambda m: m[0], reverse=True)]


def latest_snapshot(path: Path) -> str | None:
    """The file name of the metadata log's latest snapshot (readable or not); None if it has none.
    Only a new snapshot can make a removal committed (see :class:`TopicRemoval`)."""
    found = _snapshots(path)
    return found[0][1] if found else None


def read_cluster_metadata(path: Path) -> ClusterMetadata:
    """Read a ``__cluster_metadata-0`` directory: the latest readable snapshot's topics, then every
    log segment in offset order.

    Records below the snapshot's end offset are committed: of them only RemoveTopicRecords count;
    later ones are replayed onto its image (a RemoveTopicRecord there is pending, and so are the
    config overrides found there: :attr:`ClusterMetadata.configs` against ``committed_configs``).
    Control batches and the records of an aborted or unended metadata transaction do not count. A
    torn or corrupt batch at the tail of the last segment ends reading quietly (the broker may be
    writing it).

    Raises:
        NotFoundError: ``path`` is not a directory.
    """
    return ClusterMetadataReader(path).read()


@dataclass
class _Tail:
    """A read of the log so far: its snapshot's image replayed, then the log up to a position."""

    snapshot: str | None
    """The latest snapshot's file name when the read began (readable or not)."""
    snapshot_end: int | None
    committed_configs: dict[str, dict[str, str]]
    replay: _Replay
    unreadable: int
    cursor: int | None = None
    """The offset the next batch must start at (None: no segment read yet)."""
    base: int | None = None
    """The base offset of the segment read last."""
    position: int = 0
    """The bytes of that segment read as whole batches."""
    mark_base: int | None = None
    mark_at: int = 0
    mark: bytes = b""
    """The header bytes of the last batch read (in the segment at ``mark_base``, at byte
    ``mark_at``), to tell it was not replaced since."""


class ClusterMetadataReader:
    """Reads a ``__cluster_metadata-0`` directory again and again, as :func:`read_cluster_metadata`
    does, but going on from where the last read stopped when it can: the controller appends to the
    log all the time (a NoOpRecord every 500 ms), and a config override appended there counts at
    once, not when the next snapshot is written.

    Going on needs the same latest snapshot, a last read with nothing unreadable, and the segment
    it stopped in still holding the batch it read last where it read it (so neither truncated nor
    replaced: a new leader truncating records past the high watermark writes its own, under its
    own leader epoch, in their place). Anything else reads the whole directory again. Segments
    before that one may go (only from the log's start, below a snapshot): what they said is kept.

    A truncation going unnoticed would leave pending records (past the snapshot's end) in the
    replayed state until the next full read, at the next snapshot at the latest. That is safe: a
    pending removal never deletes (:mod:`rlm.tiering.removed_topics` acts on committed ones only),
    and a pending config override only ever lengthens remote retention
    (:mod:`rlm.tiering.topic_retention` takes the longer of the committed and the pending outcome).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.resumed = False
        """Whether the last :meth:`read` went on from the one before (else it read everything)."""
        self._tail: _Tail | None = None
        self._last: ClusterMetadata | None = None

    def read(self) -> ClusterMetadata:
        """The directory as it now is (the same object as last time when nothing was appended).

        Raises:
            NotFoundError: the directory does not exist.
        """
        if not self.path.is_dir():
            raise NotFoundError(f"cluster metadata log {self.path} does not exist")
        tail, last = self._tail, self._last
        self.resumed = tail is not None and last is not None and self._can_go_on(tail, last)
        if not self.resumed or tail is None:
            tail = self._tail = self._read_snapshot()
        before = (tail.base, tail.position)
        unreadable = self._read_log(tail)
        if self.resumed and last is not None and (tail.base, tail.position) == before and not unreadable:
            return last  # (a bad batch where the last read stopped is no news: it counts)
        replay = tail.replay
        self._last = ClusterMetadata(
            self.path,
            tail.snapshot_end,
            max(tail.snapshot_end or 0, tail.cursor or 0),
            dict(replay.removals),
            dict(replay.topics),
            tail.unreadable + unreadable + replay.unreadable,
            tail.committed_configs,
            {topic: dict(overrides) for topic, overrides in replay.configs.items()},
        )
        return self._last

    def _can_go_on(self, tail: _Tail, last: ClusterMetadata) -> bool:
        if last.unreadable or latest_snapshot(self.path) != tail.snapshot:
            return False
        try:
            if tail.base is not None and (self.path / f"{tail.base:020d}.log").stat().st_size < tail.position:
                return False
            if tail.mark_base is None:
                return True  # no batch read from the log
            with FileSource(self.path / f"{tail.mark_base:020d}.log") as source:
                return source.read(tail.mark_at, len(tail.mark)) == tail.mark
        except OSError:  # a segment gone
            return False

    def _read_snapshot(self) -> _Tail:
        unreadable = 0
        found = _snapshots(self.path)
        for end_offset, name in found:
            image = _read_snapshot(self.path / name)
            if image is not None:
                configs = {topic: dict(overrides) for topic, overrides in image.configs.items()}
                replay = _Replay(image.topics, end_offset, image.configs)
                return _Tail(found[0][1], end_offset, configs, replay, unreadable + image.unreadable)
            unreadable += 1
        return _Tail(found[0][1] if found else None, None, {}, _Replay({}, None), unreadable)

    def _read_log(self, tail: _Tail) -> int:
        """Read the log on from ``tail`` (moving it on); the parts found unreadable."""
        replay = tail.replay
        image_end = tail.snapshot_end or 0

        # The log's offsets follow one another with no gap and no overlap (nothing compacts it),
        # and a batch's base offset lies outside its CRC: one out of place is damage, and must not
        # move a record below the snapshot's end.
        def visit(header: BatchHeader, records: list[Record]) -> None:
            if header.base_offset != tail.cursor:
                raise CorruptDataError(f"a batch at offset {header.base_offset} where {tail.cursor} was next")
            tail.cursor = header.next_offset
            if not header.is_control:
                for record in records:
                    replay.record(record.value, record.offset, header.max_timestamp)

        bases = segment_base_offsets(self.path)
        start = bases.index(tail.base) if tail.base in bases else 0
        for i in range(start, len(bases)):
            base = bases[i]
            if base != tail.base:
                if base > image_end if tail.cursor is None else base != tail.cursor:
                    return 1  # offsets missing after the image (or the last segment), or repeated
                tail.cursor, tail.base, tail.position = base, base, 0
            scanned = _scan(self.path / f"{base:020d}.log", visit, tail.position)
            tail.position = scanned.position
            if scanned.mark:
                tail.mark_base, tail.mark_at, tail.mark = base, scanned.mark_at, scanned.mark
            if scanned.ending != "whole":
                # A torn batch at the tail is read again next time: the broker may be writing it.
                return 1 if scanned.ending == "bad" or i < len(bases) - 1 else 0
        return 0
