"""A range stream reaching a batch that fails its CRC.

The records before the damaged batch are sent, then the stream ends with an error naming where
the damage is: as a Kafka consumer is given every record before a corrupt batch, and fails there.
A stream that sent nothing of the group the damaged batch was decoded in would leave the records
before it out of reach: a stream resumed after the last record sent fails at once again.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlm.log.logdir import LogDir
from rlm.log.model import BatchHeader
from rlm.log.segment import Segment
from rlm.metastore.model import TopicPartition
from tests.integration.test_reads_under_local_retention import _upload, deleted_by_the_broker, written
from tests.integration.test_stream import NDJSON, URL, rest_client
from tests.lookup_support import TOPIC, Backend, runtime

DAMAGED = 20


def damaged(data: bytearray, header: BatchHeader) -> None:
    """A byte of the value of the batch ``header`` of ``data`` flipped: its CRC no longer matches."""
    data[header.position + header.size - 2] ^= 0xFF


def damaged_batch(segment: Segment) -> BatchHeader:
    return next(h for h in segment.headers() if h.base_offset == DAMAGED)


@pytest.mark.parametrize("tier", ["local", "remote"])
def test_an_ndjson_stream_sends_every_record_before_a_damaged_batch_then_the_error(
    tmp_path: Path, sqlite_template: Path, tier: str
) -> None:
    log_dir = tmp_path / "logs"
    written(log_dir, 40, rolls=(30,))
    partition = LogDir(log_dir).partition(TOPIC, 0)
    segment = partition.segments()[0]
    header = damaged_batch(segment)
    rt = runtime(Backend("sqlite-fs", sqlite_template=sqlite_template), tmp_path, log_dir, auth_enabled=False)
    try:
        if tier == "local":
            data = bytearray(segment.log_path.read_bytes())
            damaged(data, header)
            segment.log_path.write_bytes(data)
            where = str(segment.log_path)
        else:  # copied whole, then damaged in the store; the broker's copy deleted
            _upload(rt, partition, list(range(30)))
            copy = rt.store.segment_for_offset(TopicPartition(TOPIC, 0), 0)
            assert copy is not None
            where = copy.layout.log_key
            data = bytearray(rt.storage.read_range(where, 0, copy.size_bytes))
            damaged(data, header)
            rt.storage.put_object(where, bytes(data))
            deleted_by_the_broker(segment)
        with rest_client(rt) as client:
            answer = client.get(URL, params={"offset": 0, "end_offset": 30}, headers={"Accept": NDJSON})
    finally:
        rt.close()
    lines = [json.loads(line) for line in answer.text.splitlines()]
    assert "error" in lines[-1] and where in lines[-1]["error"], lines[-1]
    assert [line["offset"] for line in lines[:-1]] == list(range(DAMAGED))
