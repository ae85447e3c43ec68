"""Recovery from any byte source, and one batch at a time, rebuilds what recovery of the file does."""

from __future__ import annotations

from pathlib import Path

from rlm.log.byte_source import BytesSource, iter_headers, read_batch_bytes
from rlm.log.logdir import LogDir
from rlm.log.produce import ProduceSummary
from rlm.log.recovery import IndexRebuilder, RebuiltIndexes, rebuild_indexes
from rlm.log.segment import initial_tracker, rebuild_segment_indexes


def _same(a: RebuiltIndexes, b: RebuiltIndexes) -> None:
    assert a.offset_index.to_bytes() == b.offset_index.to_bytes()
    assert a.time_index.to_bytes() == b.time_index.to_bytes()
    assert a.txn_index.to_bytes() == b.txn_index.to_bytes()
    assert (a.valid_bytes, a.next_offset, a.epochs, a.max_timestamp, a.offset_of_max_timestamp) == (
        b.valid_bytes,
        b.next_offset,
        b.epochs,
        b.max_timestamp,
        b.offset_of_max_timestamp,
    )


def test_bytes_and_batches_rebuild_what_the_file_rebuilds(sample_logdir: tuple[Path, ProduceSummary]) -> None:
    """Every segment of the sample (every codec, legacy batches, transactions and aborts)."""
    aborted = 0
    for partition in LogDir(sample_logdir[0]).partitions():
        for segment in partition.segments():
            from_file = rebuild_segment_indexes(segment, tracker=initial_tracker(segment))
            data = segment.log_path.read_bytes()
            source = BytesSource(data, "mem")
            from_bytes = rebuild_indexes(source, segment.base_offset, tracker=initial_tracker(segment))
            rebuilder = IndexRebuilder(segment.base_offset, tracker=initial_tracker(segment))
            for header in iter_headers(source):
                rebuilder.add(header, read_batch_bytes(source, header), "mem")
            _same(from_bytes, from_file)
            _same(rebuilder.finish(), from_file)
            assert from_file.valid_bytes == len(data) and from_file.error is None
            aborted += len(from_file.txn_index)
    assert aborted > 0


def test_corruption_in_bytes_is_reported_where_it_is(sample_logdir: tuple[Path, ProduceSummary]) -> None:
    segment = next(iter(LogDir(sample_logdir[0]).partitions())).segments()[0]
    data = bytearray(segment.log_path.read_bytes())
    headers = list(iter_headers(BytesSource(bytes(data))))
    bad = headers[3]
    data[bad.end_position - 1] ^= 0x01
    rebuilt = rebuild_indexes(BytesSource(bytes(data), "remote.log"), segment.base_offset)
    assert rebuilt.valid_bytes == bad.position
    assert rebuilt.error is not None and rebuilt.error.position == bad.position
    assert "remote.log" in str(rebuilt.error) and "CRC" in str(rebuilt.error)
