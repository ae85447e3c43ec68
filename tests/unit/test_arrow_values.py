"""Arrow arrays of Python values made from buffers (rlm/log/arrow.py): the arrays pyarrow's own
conversion makes, and an Arrow stream that never imports pandas."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from rlm.log.arrow import empty_batch, int32s, int64_scalar, strings
from rlm.log.model import NO_TIMESTAMP
from rlm.pipeline.columns import export_timestamps
from rlm.stream.arrow import STREAM_SCHEMA


@given(st.lists(st.text(max_size=12), max_size=40))
def test_strings_are_pyarrows_string_array(values: list[str]) -> None:
    made = strings(values)
    made.validate(full=True)
    assert made.equals(pa.array(values, pa.string()))


@given(st.lists(st.none() | st.integers(-(2**31), 2**31 - 1), max_size=40))
def test_int32s_are_pyarrows_int32_array_nulls_and_all(values: list[int | None]) -> None:
    made = int32s(values)
    made.validate(full=True)
    assert made.equals(pa.array(values, pa.int32()))
    assert made.null_count == values.count(None)


def test_an_int64_scalar_and_an_empty_batch() -> None:
    assert int64_scalar(-(2**63)).equals(pa.scalar(-(2**63), pa.int64()))
    assert int64_scalar(NO_TIMESTAMP).as_py() == -1
    empty = empty_batch(STREAM_SCHEMA)
    assert empty.num_rows == 0 and empty.schema.equals(STREAM_SCHEMA)


def test_a_record_without_a_timestamp_exports_a_null_one() -> None:
    stored = pa.array([5, NO_TIMESTAMP, 7], pa.int64())
    assert export_timestamps(stored).to_pylist() == [
        pa.scalar(5, pa.timestamp("ms", tz="UTC")).as_py(),
        None,
        pa.scalar(7, pa.timestamp("ms", tz="UTC")).as_py(),
    ]
    assert export_timestamps(stored.slice(1)).null_count == 1


#: An Arrow stream's messages made in a fresh interpreter, with every kind of batch the columns
#: made of Python values see (two timestamp types, a leader epoch and none, a record without a
#: timestamp, an empty range): pandas must not be imported (it is installed here, for the tests).
STREAM_WITHOUT_PANDAS = """
import sys
import pyarrow as pa
from rlm.log.legacy import encode_legacy_batch
from rlm.log.model import Record, TimestampType
from rlm.log.v2 import encode_v2_batch, parse_v2_header
from rlm.log.batches import parse_header
from rlm.metastore.model import TopicPartition
from rlm.stream.arrow import END_OF_STREAM, SCHEMA_MESSAGE, MessageWriter, message, record_batch
from rlm.stream.plan import RangePlan
from rlm.stream.chunks import StreamBatch

first = encode_v2_batch([Record(0, 1_700_000_000_000, b"k", b"v", ())], leader_epoch=3)
second = encode_v2_batch(
    [Record(1, 1_700_000_000_001, None, b"w", (("h", b"x"),))],
    timestamp_type=TimestampType.LOG_APPEND_TIME,
    log_append_time=1_800_000_000_000,
    leader_epoch=-1,
)
legacy = encode_legacy_batch([Record(2, -1, None, b"old", ())], magic=0)
batches = [
    StreamBatch(parse_v2_header(first, 0), first, "remote", "obj"),
    StreamBatch(parse_v2_header(second, 0)._replace(position=len(first)), second, "remote", "obj"),
    StreamBatch(parse_header(legacy, 0, len(first) + len(second)), legacy, "local", "file"),
]
plan = RangePlan(TopicPartition("t", 0), 0, 3, 2**62, None, None)
made = record_batch(plan, batches)
stream = SCHEMA_MESSAGE + b"".join(MessageWriter().parts(message(plan, batches))) + END_OF_STREAM
assert message(plan, []) is None
assert pa.ipc.open_stream(stream).read_all().num_rows == made.num_rows
print(made.num_rows, made.column("timestamp").null_count, made.column("leader_epoch").null_count)
print("pandas" in sys.modules)
"""


def test_an_arrow_stream_does_not_import_pandas() -> None:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(STREAM_WITHOUT_PANDAS)],
        capture_output=True,
        text=True,
        check=True,
    )
    rows_and_nulls, imported = done.stdout.splitlines()
    assert rows_and_nulls == "3 1 2"
    assert imported == "False"
