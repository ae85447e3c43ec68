"""Executors' own Parquet writing, without Spark: a segment's rows split into date directories."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from rlm.pipeline.columns import RECORD_SCHEMA
from rlm.pipeline.export.parquet import (
    INDEXED_COLUMNS,
    NULL_PARTITION,
    PAYLOAD_COLUMN,
    files_task,
    writes_directly,
)
from rlm.pipeline.export.rows import EXPORT_SCHEMA, Isolation, export_rows
from rlm.remote_tier.read_plan import SegmentSummary, summarize
from rlm.storage.protocol import RemoteStorage
from tests.metadata_support import TP, segment

DAY = 86_400_000
# Two days and a record without a timestamp, interleaved as batches of one segment can be.
STAMPS = [0, DAY, None, 10, DAY + 5]


def _rows(_storage: RemoteStorage, summary: SegmentSummary) -> Iterator[pa.RecordBatch]:
    n = len(STAMPS)
    stamps = pa.array(STAMPS, pa.timestamp("ms", tz="UTC"))
    columns = {
        "topic": pa.array([summary.topic_partition.topic] * n),
        "partition": pa.array([summary.topic_partition.partition] * n, pa.int32()),
        "offset": pa.array(range(n), pa.int64()),
        "timestamp": stamps,
        "timestamp_type": pa.array(["CreateTime"] * n),
        "key": pa.array([None, b"k", b"", b"k2", None], pa.binary()),
        "value": pa.array([b"v%d" % i for i in range(n)], pa.binary()),
        "headers": pa.array([[]] * n, EXPORT_SCHEMA.field("headers").type),
        "leader_epoch": pa.array([0] * n, pa.int32()),
        "producer_id": pa.array([None] * n, pa.int64()),
        "date": stamps.cast(pa.date32()),
    }
    yield pa.RecordBatch.from_arrays([columns[f] for f in EXPORT_SCHEMA.names], schema=EXPORT_SCHEMA)
    yield pa.RecordBatch.from_arrays(
        [columns[f].slice(0, 1) for f in EXPORT_SCHEMA.names], schema=EXPORT_SCHEMA
    )  # the same day again: appended to the file already open


def test_rows_are_written_per_date_directory_and_read_back(tmp_path: Path) -> None:
    summary = summarize([segment(0, 4)])[0]
    directory = (tmp_path / "run-1").as_uri()
    [files] = list(files_task(_rows, directory, None, summary))  # type: ignore[arg-type]

    written = dict(zip(files.column("path").to_pylist(), files.column("rows").to_pylist(), strict=True))
    name = f"part-run-1-{summary.segment_id}.parquet"
    prefix = f"topic={TP.topic}/partition={TP.partition}"
    assert written == {
        f"{prefix}/date=1970-01-01/{name}": 3,
        f"{prefix}/date=1970-01-02/{name}": 2,
        f"{prefix}/date={NULL_PARTITION}/{name}": 1,
    }
    table = ds.dataset(tmp_path / "run-1", format="parquet", partitioning="hive").to_table()
    offsets = pc.sort_indices(table.column("offset"))
    assert table.column("offset").take(offsets).to_pylist() == [0, 0, 1, 2, 3, 4]
    by_offset = {r["offset"]: r for r in table.to_pylist()}
    assert by_offset[2]["timestamp"] is None and by_offset[2]["date"] is None  # read as null
    assert by_offset[4]["key"] is None and by_offset[3]["key"] == b"k2"
    assert str(by_offset[1]["date"]) == "1970-01-02"


def test_values_are_written_without_dictionary_or_statistics_and_the_rest_with_both(tmp_path: Path) -> None:
    summary = summarize([segment(0, 4)])[0]
    [files] = list(files_task(_rows, (tmp_path / "run-1").as_uri(), None, summary))  # type: ignore[arg-type]
    path = tmp_path / "run-1" / files.column("path")[0].as_py()
    row_group = pq.ParquetFile(path).metadata.row_group(0)
    columns = {row_group.column(i).path_in_schema: row_group.column(i) for i in range(row_group.num_columns)}
    assert set(columns) == {*INDEXED_COLUMNS, PAYLOAD_COLUMN}
    assert "headers.list.element.key" in columns  # the leaves' names as Parquet writes them
    value = columns[PAYLOAD_COLUMN]
    assert not value.is_stats_set and not value.has_dictionary_page
    offset = columns["offset"].statistics
    assert columns["offset"].is_stats_set and offset is not None
    assert offset.has_min_max and offset.min == 0
    assert columns["timestamp_type"].has_dictionary_page


def test_only_local_outputs_are_written_directly() -> None:
    assert writes_directly("/data/out") and writes_directly("file:///data/out")
    assert not writes_directly("s3a://bucket/out") and not writes_directly("hdfs://nn/out")


def test_a_timestamp_past_the_last_date_goes_to_the_null_date_not_a_failed_run(tmp_path: Path) -> None:
    """Kafka takes any CreateTime a producer sets (one in microseconds by mistake lies in year
    55,000): no date names its day, so its row goes where rows without a day go, its timestamp
    kept, and the run does not fail on it (every later run would, holding back every record)."""
    far = 1_700_000_000_000_000
    record = {
        "topic": TP.topic,
        "partition": TP.partition,
        "timestamp_type": "CreateTime",
        "key": b"k",
        "value": b"v",
        "headers": [],
        "leader_epoch": 0,
        "producer_id": None,
        "is_control": False,
        "is_transactional": False,
        "aborted": False,
    }
    records = pa.RecordBatch.from_pylist(
        [{**record, "offset": 0, "timestamp": far}, {**record, "offset": 1, "timestamp": DAY}],
        schema=RECORD_SCHEMA,
    )
    rows = export_rows(records, Isolation.READ_COMMITTED)
    assert rows.column("date").to_pylist() == [None, date(1970, 1, 2)]

    summary = summarize([segment(0, 1)])[0]
    directory = (tmp_path / "run-1").as_uri()
    [files] = list(files_task(lambda _s, _x: iter([rows]), directory, None, summary))  # type: ignore[arg-type]
    prefix = f"topic={TP.topic}/partition={TP.partition}"
    name = f"part-run-1-{summary.segment_id}.parquet"
    assert sorted(str(path) for path in files.column("path").to_pylist()) == [
        f"{prefix}/date=1970-01-02/{name}",
        f"{prefix}/date={NULL_PARTITION}/{name}",
    ]
    table = pq.read_table(tmp_path / "run-1" / prefix / f"date={NULL_PARTITION}" / name)
    assert table.column("timestamp").cast(pa.int64()).to_pylist() == [far]
