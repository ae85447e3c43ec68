"""The records an export reads when the tier is not what the metadata says, without Spark.

An export advances its ledger past every offset it planned to read: a segment read short must
fail the run, never yield fewer rows in silence, or the records it did not read are lost to every
later incremental run.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from rlm.errors import CorruptRecordError
from rlm.log.model import Record
from rlm.log.v2 import encode_v2_batch
from rlm.pipeline.columns import records_task
from rlm.remote_tier.read_plan import summarize
from rlm.storage.filesystem import FilesystemStorage
from tests.metadata_support import segment


def _batches(first: int, count: int, per_batch: int) -> list[bytes]:
    return [
        encode_v2_batch([Record(o, 1_000 + o, b"k%d" % o, b"v%d" % o) for o in range(b, b + per_batch)])
        for b in range(first, first + count * per_batch, per_batch)
    ]


def test_a_log_object_shorter_than_its_row_fails_the_read(tmp_path: Path) -> None:
    storage = FilesystemStorage(tmp_path)
    batches = _batches(0, 4, 5)
    whole = b"".join(batches)
    row = segment(0, 19, size_bytes=len(whole))
    storage.put_object(row.layout.log_key, whole)
    [summary] = summarize([row])
    assert sum(b.num_rows for b in records_task(storage, summary)) == 20
    # The object loses its last batch (cut at a batch boundary): the row still says 20 records.
    storage.put_object(row.layout.log_key, b"".join(batches[:-1]))
    with pytest.raises(CorruptRecordError, match="ends at byte") as caught:
        sum(b.num_rows for b in records_task(storage, summary))
    assert caught.value.path == row.layout.log_key
    assert caught.value.position == len(whole) - len(batches[-1])


def test_a_read_range_narrowed_inside_the_object_is_not_short(tmp_path: Path) -> None:
    storage = FilesystemStorage(tmp_path)
    whole = b"".join(_batches(0, 4, 5))
    row = segment(0, 19, size_bytes=len(whole))
    storage.put_object(row.layout.log_key, whole)
    summary = dataclasses.replace(summarize([row])[0], read_from=3, read_to=8)
    offsets = [o for b in records_task(storage, summary) for o in b.column("offset").to_pylist()]
    assert offsets == list(range(3, 9))
