"""A stream's group of batches holding one that fails its CRC: the error names the object or file
that batch was read from, whichever encoding the stream sends, though the group spans two."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from rlm.errors import CorruptDataError
from rlm.log.model import Record
from rlm.log.v2 import encode_v2_batch, parse_v2_header
from rlm.metastore.model import TopicPartition
from rlm.stream import arrow
from rlm.stream.chunks import StreamBatch
from rlm.stream.ndjson import ndjson_lines
from rlm.stream.plan import RangePlan

PLAN = RangePlan(TopicPartition("t", 0), 0, 4, 2**62, None, None)
ENCODINGS: dict[str, Callable[[RangePlan, Sequence[StreamBatch]], object]] = {
    "ndjson": ndjson_lines,
    "arrow": arrow.record_batch,
}


def batch(offset: int, name: str, position: int, *, corrupt: bool = False) -> StreamBatch:
    data = bytearray(encode_v2_batch([Record(offset, 1_700_000_000_000, b"k", b"value", ())]))
    if corrupt:
        data[-2] ^= 0xFF  # a byte of the value: the CRC no longer matches
    return StreamBatch(
        parse_v2_header(bytes(data), 0)._replace(position=position), bytes(data), "remote", name
    )


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_a_corrupt_batch_of_a_group_spanning_two_objects_is_located_in_its_own(encoding: str) -> None:
    batches = [
        batch(0, "first.log", 0),
        batch(1, "first.log", 100),
        batch(2, "second.log", 0),
        batch(3, "second.log", 100, corrupt=True),
    ]
    with pytest.raises(CorruptDataError) as failed:
        ENCODINGS[encoding](PLAN, batches)
    assert (failed.value.path, failed.value.position) == ("second.log", 100)
