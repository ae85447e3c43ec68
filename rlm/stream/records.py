"""Decoded records of a stream's batches, within its range."""

from __future__ import annotations

from rlm.errors import CorruptDataError
from rlm.log.batches import decode_batch
from rlm.log.model import Record
from rlm.stream.plan import RangePlan
from rlm.stream.reader import StreamBatch


def records_in_range(plan: RangePlan, batch: StreamBatch) -> list[Record]:
    """The records of ``batch`` at or after the plan's start and below its end.

    Raises:
        CorruptDataError: the batch fails its CRC or cannot be decoded (names its object or file).
    """
    try:
        records = decode_batch(batch.data, batch.header._replace(position=0))
    except CorruptDataError as exc:
        raise exc.at(batch.name, batch.header.position) from exc
    return [r for r in records if plan.start <= r.offset < plan.end]
