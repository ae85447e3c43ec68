"""Offset indexes as brokers wrote them, used as they are: a follower's (one entry per fetched
chunk of batches, keyed by the chunk's last offset, at the chunk's start) and a pre-2.0 broker's
(keyed by the first offset of each append); lookups over them answer as a scan of the log does.
An entry Kafka cannot have written has the segment's indexes rebuilt from the log."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from rlm.log.batches import decode_batch
from rlm.log.index import OffsetIndex, TimeIndex
from rlm.log.legacy import encode_legacy_batch
from rlm.log.model import BatchHeader, Codec, Record, TimestampAndOffset
from rlm.log.segment import Segment, rebuild_segment_indexes
from rlm.log.v2 import encode_v2_batch
from rlm.log.verify import verify_segment

BASE = 100
TS = 1_700_000_000_000
INTERVAL = 500
#: Batches per append of the follower: the chunks it fetched (the last holds several batches).
CHUNKS = (2, 1, 3, 1, 4, 2, 3)


def _batches() -> list[bytes]:
    """v1 gzip wrappers, then v2 batches, three records each, timestamps out of order."""
    out: list[bytes] = []
    offset = BASE
    for i in range(sum(CHUNKS)):
        records = [
            Record(offset + j, TS + (offset * 7919 + j * 104729) % 5000, b"k", b"v" * 150) for j in range(3)
        ]
        if i < 6:
            out.append(encode_legacy_batch(records, magic=1, codec=Codec.GZIP))
        else:
            out.append(encode_v2_batch(records, leader_epoch=2))
        offset += 3
    return out


def _segment(directory: Path) -> Segment:
    directory.mkdir(parents=True)
    segment = Segment(directory, BASE)
    segment.log_path.write_bytes(b"".join(_batches()))
    return segment


def _appends(segment: Segment, sizes: tuple[int, ...]) -> list[list[BatchHeader]]:
    headers = list(segment.headers())
    chunks, at = [], 0
    for size in sizes:
        chunks.append(headers[at : at + size])
        at += size
    assert at == len(headers)
    return chunks


def _first_offset(segment: Segment, header: BatchHeader) -> int:
    with segment.open() as source:
        data = source.read(header.position, header.size)
    return decode_batch(data, header._replace(position=0))[0].offset


def _write_as_appended(
    segment: Segment, appends: list[list[BatchHeader]], key: Callable[[list[BatchHeader]], int]
) -> None:
    """The indexes ``LogSegment.append`` writes for these appends, the offset index entry keyed by
    ``key(append)`` at the append's start; the time index closed as at a roll."""
    offsets, times = OffsetIndex(BASE), TimeIndex(BASE)
    since, max_ts, max_ts_offset = 0, -1, BASE
    for batches in appends:
        largest = max(batches, key=lambda h: h.max_timestamp)
        if largest.max_timestamp > max_ts:
            max_ts, max_ts_offset = largest.max_timestamp, largest.last_offset
        if since > INTERVAL:
            offsets.append(key(batches), batches[0].position)
            times.maybe_append(max_ts, max_ts_offset)
            since = 0
        since += sum(h.size for h in batches)
    times.maybe_append(max_ts, max_ts_offset, skip_full_check=True)
    offsets.write(segment.index_path)
    times.write(segment.time_index_path)


def _follower(directory: Path) -> Segment:
    segment = _segment(directory)
    _write_as_appended(segment, _appends(segment, CHUNKS), lambda chunk: chunk[-1].last_offset)
    return segment


def _pre_2_0(directory: Path) -> Segment:
    segment = _segment(directory)
    appends = _appends(segment, (1,) * sum(CHUNKS))
    _write_as_appended(segment, appends, lambda batch: _first_offset(segment, batch[0]))
    return segment


KINDS = {"follower": _follower, "pre-2.0": _pre_2_0}


def _batch_at(segment: Segment, position: int) -> BatchHeader:
    return next(h for h in segment.headers() if h.position == position)


@pytest.mark.parametrize("kind", list(KINDS))
def test_an_index_as_the_broker_wrote_it_is_used_as_it_is(tmp_path: Path, kind: str) -> None:
    segment = KINDS[kind](tmp_path / "t-0")
    on_disk = OffsetIndex.load(segment.index_path)
    last = on_disk.last_entry
    assert len(on_disk) >= 3
    # The entry names another offset than the last of the batch at its position.
    assert last.offset != _batch_at(segment, last.position).last_offset
    assert list(segment.offset_index().entries()) == list(on_disk.entries())
    assert list(segment.time_index().entries()) == list(TimeIndex.load(segment.time_index_path).entries())
    assert list(verify_segment(segment)) == []


@pytest.mark.parametrize("kind", list(KINDS))
def test_lookups_over_the_brokers_index_answer_as_a_scan_of_the_log(tmp_path: Path, kind: str) -> None:
    segment = KINDS[kind](tmp_path / "t-0")
    headers = list(segment.headers())
    records = [r for h in headers for r in segment.read_records(h)]
    end = headers[-1].last_offset
    assert segment.last_offset() == end
    assert segment.max_timestamp_and_offset(scan_tail=True).timestamp == max(r.timestamp for r in records)
    for offset in range(BASE - 1, end + 3):
        expected = next((h for h in headers if h.last_offset >= offset), None)
        assert segment.position_for_offset(offset) == expected, offset
        # Fetches and streams scan forward from the looked-up position too: it is never past the batch.
        if expected is not None:
            assert segment.offset_index().lookup(offset).position <= expected.position
    for timestamp in range(TS - 1, TS + 5001, 97):
        for start in (BASE, BASE + 10, end - 4):
            want = next((r for r in records if r.offset >= start and r.timestamp >= timestamp), None)
            answer = segment.find_offset_by_timestamp(timestamp, start)
            assert answer == (
                None
                if want is None
                else TimestampAndOffset(want.timestamp, want.offset, -1 if want.offset < BASE + 18 else 2)
            )
    assert list(segment.offset_index().entries()) == list(OffsetIndex.load(segment.index_path).entries())


def _set_last_entry(segment: Segment, offset: int | None = None, position: int | None = None) -> None:
    raw = bytearray(segment.index_path.read_bytes())
    relative, at = struct.unpack_from(">ii", raw, len(raw) - 8)
    if offset is not None:
        relative = offset - BASE
    struct.pack_into(">ii", raw, len(raw) - 8, relative, at if position is None else position)
    segment.index_path.write_bytes(bytes(raw))


def _inside_a_batch(segment: Segment) -> None:
    _set_last_entry(segment, position=OffsetIndex.load(segment.index_path).last_entry.position + 7)


def _below_the_batch(segment: Segment) -> None:
    last = OffsetIndex.load(segment.index_path).last_entry
    _set_last_entry(segment, offset=_batch_at(segment, last.position).base_offset - 1)


def _past_the_end(segment: Segment) -> None:
    _set_last_entry(segment, offset=list(segment.headers())[-1].last_offset + 1)


#: What is done to the last entry of which index, and what verify says of it.
DAMAGES: dict[str, tuple[str, Callable[[Segment], None], str]] = {
    "inside a batch": ("follower", _inside_a_batch, "does not point at a batch"),
    # Below the first offset of a pre-2.0 index's batch (a follower's previous entry is right below).
    "below the batch there": ("pre-2.0", _below_the_batch, "is below the batch there"),
    "past the segment's end": ("follower", _past_the_end, "past the batches it can cover"),
    "past the end of a pre-2.0 index": ("pre-2.0", _past_the_end, "past the batches it can cover"),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_last_entry_kafka_cannot_have_written_has_the_indexes_rebuilt(tmp_path: Path, damage: str) -> None:
    kind, damage_it, problem = DAMAGES[damage]
    segment = KINDS[kind](tmp_path / "t-0")
    damage_it(segment)
    assert segment.index_path.stat().st_size == 8 * len(OffsetIndex.load(segment.index_path))
    rebuilt = rebuild_segment_indexes(segment)
    assert list(segment.offset_index().entries()) == list(rebuilt.offset_index.entries())
    assert list(segment.offset_index().entries()) != list(OffsetIndex.load(segment.index_path).entries())
    assert any(problem in p.message for p in verify_segment(segment)), list(verify_segment(segment))
    assert segment.last_offset() == list(segment.headers())[-1].last_offset


def test_verify_bounds_an_entry_by_the_next_entrys_batch(tmp_path: Path) -> None:
    """A chunk ends before the next indexed chunk starts: an entry keyed at or past the first
    offset of the batch the next entry points at is not Kafka's."""
    segment = _follower(tmp_path / "t-0")
    index = OffsetIndex.load(segment.index_path)
    entries = list(index.entries())
    following = _batch_at(segment, entries[1].position)
    moved = OffsetIndex(BASE)
    moved.append(
        following.base_offset if following.base_offset >= 0 else _first_offset(segment, following),
        entries[0].position,
    )
    for entry in entries[1:]:
        moved.append(entry.offset, entry.position)
    moved.write(segment.index_path)
    (problem,) = verify_segment(segment)
    assert "entry 0" in problem.message and "past the batches it can cover" in problem.message
