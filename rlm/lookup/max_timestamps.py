"""The largest record timestamp at or after an offset, in each tier: what ListOffsets
``MAX_TIMESTAMP`` (-3) looks for when the record holding a tier's largest timestamp lies below the
log start offset (:meth:`rlm.lookup.service.LookupService.search`).

Whole segments give their largest timestamp without a read (the time index's last entry, the
remote row's max timestamp); only a segment holding the offset past its start is read, from the
indexed position of the offset, and only when it could hold a larger timestamp.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from rlm.log.batches import decode_batch
from rlm.log.byte_source import iter_headers
from rlm.log.logdir import PartitionDir
from rlm.log.model import BatchHeader, Record
from rlm.metastore.model import RemoteSegment

#: The whole batches of a remote segment from the indexed position of an offset: (header, bytes).
RemoteBatches = Callable[[RemoteSegment, int], Iterator[tuple[BatchHeader, bytes]]]


def remote_max_timestamp(
    segments: Iterable[RemoteSegment],
    earliest: int,
    batches: RemoteBatches,
    answer_end: Callable[[RemoteSegment], int] = lambda segment: segment.end_offset,
) -> int:
    """The largest timestamp of the records of ``segments`` (the partition's finished ones) at or
    after ``earliest`` (-1 when none), each up to the last offset it answers (``answer_end``: a
    diverged copy kept past its cut ends before its end, :mod:`rlm.lookup.answer_end`)."""
    best = -1
    partial = []
    for segment in segments:
        last = answer_end(segment)
        if last < max(earliest, segment.start_offset):
            continue
        if segment.start_offset >= earliest and last >= segment.end_offset:
            best = max(best, segment.max_timestamp_ms)
        else:
            partial.append((segment, last))
    for segment, last in partial:
        if segment.max_timestamp_ms <= best:
            continue
        first = max(earliest, segment.start_offset)
        for header, data in batches(segment, first):
            if header.base_offset > last:
                break
            found = batch_max_timestamp(header, first, last)
            if found is None:
                found = records_max_timestamp(decode_batch(data, header._replace(position=0)), first, last)
            best = max(best, found)
    return best


def local_max_timestamp(local: PartitionDir, earliest: int) -> int:
    """The largest timestamp of the local records at or after ``earliest`` (-1 when none).

    Whole segments give their time index's last entry; only a segment holding ``earliest`` past
    its base offset is scanned, from the indexed position of ``earliest``.
    """
    segments = local.segments()
    best = -1
    straddling = None
    for i, segment in enumerate(segments):
        if i + 1 < len(segments) and segments[i + 1].base_offset <= earliest:
            continue  # wholly below the log start offset
        if segment.base_offset >= earliest:
            active = i + 1 == len(segments)  # its time index lags the broker's appends
            best = max(best, segment.max_timestamp_and_offset(scan_tail=active).timestamp)
        else:
            straddling = segment
    if straddling is not None and straddling.max_timestamp_and_offset(scan_tail=True).timestamp > best:
        position = straddling.offset_index().lookup(earliest).position
        with straddling.open() as source:
            for header in iter_headers(source, position):
                found = batch_max_timestamp(header, earliest)
                if found is None:
                    found = records_max_timestamp(straddling.read_records(header, source), earliest)
                best = max(best, found)
    return best


def batch_max_timestamp(header: BatchHeader, earliest: int, last: int = 2**63 - 1) -> int | None:
    """The largest timestamp of a batch's records from ``earliest`` to ``last`` (-1 when none),
    from its header; None when the batch reaches past either and its records must be decoded."""
    if header.last_offset < earliest:
        return -1
    if 0 <= earliest <= header.base_offset and header.last_offset <= last:
        return header.max_timestamp
    return None


def records_max_timestamp(records: list[Record], earliest: int, last: int = 2**63 - 1) -> int:
    return max((r.timestamp for r in records if earliest <= r.offset <= last), default=-1)
