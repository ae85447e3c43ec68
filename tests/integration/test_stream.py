"""Range streams over REST, against a brute-force read of the same range.

The partition of ``test_fetch``: every codec, transactions ending in commit and abort, leader
changes, a high watermark below the log end; tiered, with the older half deleted locally, so that
ranges start remote and end local. Raw streams are parsed with kafka-python as a consumer would;
NDJSON and Arrow streams must hold exactly the appended data records of the range (no control
record, no aborted record under read_committed, nothing at or past the last fetchable offset).
Raw streams over legacy compressed wrappers, in both tiers, end at the wrapper holding the end.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa
import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record import MemoryRecords

from api.auth import TokenAuthenticator
from api.gen.rlm.v1 import rlm_pb2 as pb
from api.gen.rlm.v1 import rlm_pb2_grpc
from api.grpc_server import build_grpc_server
from api.rest.app import create_app
from rlm.bootstrap import Runtime
from rlm.log.dirwriter import LogDirWriter
from rlm.log.logdir import LogDir
from rlm.log.model import Codec, Record
from rlm.log.writer import ProducerRecord, TopicConfig
from tests.grpc_support import ServerThread, code_of, free_port
from tests.integration.test_fetch import BACKEND_PARAMS, tiered_partition
from tests.lookup_support import (
    TOPIC,
    Backend,
    BatchPlan,
    PartitionPlan,
    Tiered,
    Truth,
    parse_with_kafka_python,
    runtime,
    tier_partition,
    write_partition,
)

NDJSON = "application/x-ndjson"
OCTET = "application/octet-stream"
ARROW = "application/vnd.apache.arrow.stream"
URL = f"/v1/topics/{TOPIC}/partitions/0/records"


@pytest.fixture(scope="module", params=BACKEND_PARAMS)
def tiered(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tiered]:
    root = tmp_path_factory.mktemp("stream")
    yield from tiered_partition(request, root, auth_enabled=False, remote_fetch_stream_buffer_bytes=4096)


@contextlib.contextmanager
def rest_client(rt: Runtime) -> Iterator[TestClient]:
    """A client of the REST app over ``rt``, while open."""
    app = create_app(rt.settings, runtime_=rt, authenticator=TokenAuthenticator.from_settings(rt.settings))
    with TestClient(app) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def client(tiered: Tiered) -> Iterator[TestClient]:
    with rest_client(tiered.runtime) as test_client:
        yield test_client


def aborted_offsets(truth: Truth) -> set[int]:
    """Offsets of the records of aborted transactions (the ABORT marker's key says 0)."""
    markers = {r.record.offset: r.record for r in truth.records if r.control}
    out: set[int] = set()
    for first, marker in truth.transactions:
        key = markers[marker].key
        assert key is not None
        if int.from_bytes(key[2:4], "big") == 0:
            out.update(range(first, marker))
    return out


def expected(truth: Truth, start: int, end: int | None, committed: bool) -> list[Record]:
    """The brute-force answer: data records in ``[start, end)`` below the last fetchable offset."""
    limit = truth.last_fetchable(committed)
    stop = limit if end is None else min(end, limit)
    aborted = aborted_offsets(truth) if committed else set()
    return [
        r.record
        for r in truth.records
        if not r.control
        and max(start, truth.log_start_offset) <= r.record.offset < stop
        and r.record.offset not in aborted
    ]


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def from_ndjson(body: bytes) -> list[Record]:
    out = []
    for line in body.decode().splitlines():
        item: dict[str, Any] = json.loads(line)
        assert "error" not in item, item
        headers = tuple((k, None if v is None else base64.b64decode(v)) for k, v in item["headers"])
        key = None if item["key"] is None else base64.b64decode(item["key"])
        value = None if item["value"] is None else base64.b64decode(item["value"])
        out.append(Record(item["offset"], item["timestamp"], key, value, headers))
    return out


def from_arrow(body: bytes) -> list[Record]:
    table = pa.ipc.open_stream(body).read_all()
    assert table.schema.names == [
        "offset",
        "timestamp",
        "timestamp_type",
        "key",
        "value",
        "headers",
        "leader_epoch",
    ]
    out = []
    for row in table.to_pylist():
        headers = tuple((h["key"], h["value"]) for h in row["headers"])
        ts = row["timestamp"]
        millis = -1 if ts is None else int(ts.timestamp() * 1000)
        out.append(Record(row["offset"], millis, row["key"], row["value"], headers))
    return out


def from_raw(body: bytes, start: int, end: int) -> list[Record]:
    """Records in ``[start, end)`` of whole batches, as kafka-python reads them; every batch
    overlaps the range and none is a control batch."""
    out = []
    for batch in parse_with_kafka_python(body):
        assert not batch.control
        assert batch.last_offset >= start and batch.base_offset < end
        out += [r for r in batch.records if start <= r.offset < end]
    return out


def read(client: TestClient, media: str, **params: Any) -> tuple[bytes, dict[str, str]]:
    answer = client.get(URL, params=params, headers={"Accept": media})
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith(media)
    return answer.content, dict(answer.headers)


def decoded(client: TestClient, media: str, **params: Any) -> list[Record]:
    body, headers = read(client, media, **params)
    return records_of(media, body, headers)


def records_of(media: str, body: bytes, headers: dict[str, str]) -> list[Record]:
    """The records of a whole streamed body of ``media``."""
    if media == NDJSON:
        return from_ndjson(body)
    if media == ARROW:
        return from_arrow(body)
    return from_raw(body, int(headers["x-rlm-start-offset"]), int(headers["x-rlm-end-offset"]))


@pytest.mark.parametrize("media", [NDJSON, OCTET, ARROW])
@pytest.mark.parametrize("committed", [False, True])
def test_offset_ranges_equal_the_brute_force_read(
    client: TestClient, tiered: Tiered, media: str, committed: bool
) -> None:
    truth = tiered.truth
    isolation = "read_committed" if committed else "read_uncommitted"
    local = truth.local_start_offset
    hw = truth.high_watermark
    ranges = [
        (truth.log_start_offset, None),  # everything: remote, then local
        (local - 7, local + 9),  # across the tier boundary, starting and ending between records
        (3, 4),  # one record
        (local, local),  # empty
        (hw - 5, hw + 50),  # past the high watermark
        (hw + 3, None),  # starting past it
    ]
    assert 0 < local < hw, tiered.notes
    for start, end in ranges:
        params: dict[str, Any] = {"offset": start, "isolation_level": isolation}
        if end is not None:
            params["end_offset"] = end
        assert decoded(client, media, **params) == expected(truth, start, end, committed), (start, end)


@pytest.mark.parametrize("media", [NDJSON, OCTET, ARROW])
def test_time_ranges_start_and_end_at_the_lookup_answers(
    client: TestClient, tiered: Tiered, media: str
) -> None:
    truth = tiered.truth
    ordered = sorted({r.record.timestamp for r in truth.records if not r.control})
    for low, high in [
        (ordered[2], ordered[-5]),
        (ordered[10] + 1, ordered[len(ordered) // 2]),
        (ordered[-1] + 1, None),
    ]:
        start = truth.for_timestamp(low).offset
        start = truth.high_watermark if start < 0 else start
        params: dict[str, Any] = {"from_timestamp": str(low), "isolation_level": "read_uncommitted"}
        end = None
        if high is not None:
            params["to_timestamp"] = str(high)
            found = truth.for_timestamp(high).offset
            end = truth.high_watermark if found < 0 else found
        assert decoded(client, media, **params) == expected(truth, start, end, False), (low, high)


@settings(max_examples=40)
@given(
    media=st.sampled_from([NDJSON, OCTET, ARROW]),
    low=st.integers(0, 10_000),
    high=st.none() | st.integers(0, 10_000),
    shifts=st.tuples(st.integers(-1, 1), st.integers(-1, 1)),
)
def test_any_time_range_starts_and_ends_at_the_lookup_answers(
    client: TestClient,
    tiered: Tiered,
    media: str,
    low: int,
    high: int | None,
    shifts: tuple[int, int],
) -> None:
    """Time ranges between timestamps drawn from the records' (and one millisecond either side):
    the stream starts at the offset-for-timestamp answer of the first and ends at the second's."""
    truth = tiered.truth
    stamps = sorted({r.record.timestamp for r in truth.records if not r.control})
    since = max(0, stamps[low % len(stamps)] + shifts[0])
    params: dict[str, Any] = {"from_timestamp": str(since), "isolation_level": "read_uncommitted"}
    start = truth.for_timestamp(since).offset
    start = truth.high_watermark if start < 0 else start
    end = None
    if high is not None:
        until = max(0, stamps[high % len(stamps)] + shifts[1])
        params["to_timestamp"] = str(until)
        found = truth.for_timestamp(until).offset
        end = truth.high_watermark if found < 0 else found
    assert decoded(client, media, **params) == expected(truth, start, end, False)


def test_bad_arguments_are_refused_in_words(client: TestClient) -> None:
    both = client.get(URL, params={"offset": 1, "from_timestamp": "earliest"}, headers={"Accept": NDJSON})
    assert both.status_code == 400 and "not both" in both.text
    bad = client.get(URL, params={"from_timestamp": "yesterday"}, headers={"Accept": NDJSON})
    assert bad.status_code == 400 and "from_timestamp" in bad.text
    unknown = client.get(
        "/v1/topics/nope/partitions/0/records", params={"offset": 0}, headers={"Accept": NDJSON}
    )
    assert unknown.status_code == 404
    json_range = client.get(
        URL, params={"offset": 0, "end_offset": 5}, headers={"Accept": "application/json"}
    )
    assert json_range.status_code == 406 and "Accept" in json_range.text


def test_the_bounded_json_answer_stays(client: TestClient, tiered: Tiered) -> None:
    answer = client.get(URL, params={"offset": 0})
    assert answer.status_code == 200
    assert answer.json()["records"][0]["offset"] == max(0, tiered.truth.log_start_offset)


# -- gRPC ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stub(tiered: Tiered) -> Iterator[rlm_pb2_grpc.RemoteLogManagerStub]:
    port = free_port()
    runtime_ = tiered.runtime
    authenticator = TokenAuthenticator.from_settings(runtime_.settings)
    server = ServerThread(lambda: build_grpc_server(runtime_, authenticator, port=port))
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield rlm_pb2_grpc.RemoteLogManagerStub(channel)
    finally:
        channel.close()
        stop_grpc(server, runtime_)


def stop_grpc(server: ServerThread, rt: Runtime) -> None:
    """Stop the server thread, closing first the streams' S3 client of its loop."""
    asyncio.run_coroutine_threadsafe(rt.streams.remote.close(), server.loop).result(10)
    server.stop()


def grpc_records(stub: rlm_pb2_grpc.RemoteLogManagerStub, raw: bool, **fields: Any) -> list[Record]:
    request = pb.ReadRecordsRequest(topic=TOPIC, partition=0, raw=raw, **fields)
    return message_records(stub.ReadRecords(request, timeout=30), raw)


def message_records(messages: Iterable[pb.ReadRecordsResponse], raw: bool) -> list[Record]:
    """The records of a ``ReadRecords`` stream's messages."""
    out: list[Record] = []
    for message in messages:
        if raw:
            out += from_raw(message.raw_batches, message.start_offset, message.end_offset)
            continue
        for r in message.records:
            headers = tuple((h.key, h.value if h.HasField("value") else None) for h in r.headers)
            key = r.key if r.HasField("key") else None
            value = r.value if r.HasField("value") else None
            out.append(Record(r.offset, r.timestamp, key, value, headers))
    return out


@pytest.mark.parametrize("raw", [False, True])
@pytest.mark.parametrize("committed", [False, True])
def test_grpc_streams_equal_the_brute_force_read(
    stub: rlm_pb2_grpc.RemoteLogManagerStub, tiered: Tiered, raw: bool, committed: bool
) -> None:
    truth = tiered.truth
    local, hw = truth.local_start_offset, truth.high_watermark
    for start, end in [
        (truth.log_start_offset, None),
        (local - 7, local + 9),
        (local, local),
        (hw - 5, hw + 50),
    ]:
        fields: dict[str, Any] = {"offset": start, "isolation_level": int(committed)}
        if end is not None:
            fields["end_offset"] = end
        assert grpc_records(stub, raw, **fields) == expected(truth, start, end, committed), (start, end)
    low = sorted(r.record.timestamp for r in truth.records if not r.control)[5]
    start = truth.for_timestamp(low).offset
    assert grpc_records(stub, False, from_timestamp=str(low)) == expected(truth, start, None, False)


@settings(max_examples=80)
@given(
    reader=st.sampled_from([NDJSON, OCTET, ARROW, "grpc", "grpc raw"]),
    committed=st.booleans(),
    start=st.integers(0, 10_000),
    length=st.none() | st.integers(0, 10_000),
)
def test_any_offset_range_equals_the_brute_force_read(
    client: TestClient,
    stub: rlm_pb2_grpc.RemoteLogManagerStub,
    tiered: Tiered,
    reader: str,
    committed: bool,
    start: int,
    length: int | None,
) -> None:
    """Ranges drawn anywhere from the log start offset to past the high watermark (starting and
    ending inside batches, in either tier or across their boundary, inside transactions, empty),
    read over REST in each medium and over gRPC."""
    truth = tiered.truth
    span = truth.high_watermark + 12 - truth.log_start_offset
    first = truth.log_start_offset + start % span
    end = None if length is None else first + length % (span + 1 - (first - truth.log_start_offset))
    fields: dict[str, Any] = {"offset": first}
    if end is not None:
        fields["end_offset"] = end
    if reader.startswith("grpc"):
        got = grpc_records(stub, reader.endswith("raw"), isolation_level=int(committed), **fields)
    else:
        isolation = "read_committed" if committed else "read_uncommitted"
        got = decoded(client, reader, isolation_level=isolation, **fields)
    assert got == expected(truth, first, end, committed)


def test_grpc_errors_are_statuses(stub: rlm_pb2_grpc.RemoteLogManagerStub) -> None:
    code, message = code_of(lambda: list(stub.ReadRecords(pb.ReadRecordsRequest(topic="nope", partition=0))))
    assert code is grpc.StatusCode.NOT_FOUND and "nope" in message
    request = pb.ReadRecordsRequest(topic=TOPIC, partition=0, offset=1, from_timestamp="earliest")
    code, message = code_of(lambda: list(stub.ReadRecords(request)))
    assert code is grpc.StatusCode.INVALID_ARGUMENT and "not both" in message


def test_ndjson_lines_are_the_json_answers_record_objects(client: TestClient, tiered: Tiered) -> None:
    start = tiered.truth.local_start_offset
    bounded = client.get(URL, params={"offset": start, "max_bytes": 1}).json()
    records = bounded["records"]
    end = records[-1]["offset"] + 1
    body, _ = read(client, NDJSON, offset=start, end_offset=end)
    assert [json.loads(line) for line in body.decode().splitlines()] == records


#: Twelve legacy (v1) gzip wrappers of three records each, then v2 batches; in several segments,
#: the older half deleted locally: ranges of wrappers are read from both tiers.
LEGACY_PLAN = PartitionPlan(
    batches=tuple(
        BatchPlan(timestamps=(i * 10, i * 10 + 1, i * 10 + 2), codec=Codec.GZIP, kind="legacy")
        for i in range(12)
    )
    + tuple(BatchPlan(timestamps=(200 + i,)) for i in range(4)),
    segment_bytes=600,
    tiering="remote",
    local_deleted=0.5,
)


def _batch_offsets(raw: bytes) -> list[tuple[int, int]]:
    """First and last offset of each batch, as kafka-python reads them (legacy wrappers too)."""
    memory = MemoryRecords(raw)
    out = []
    while memory.has_next():
        offsets = [r.offset for r in memory.next_batch()]
        out.append((offsets[0], offsets[-1]))
    return out


def test_raw_streams_end_at_the_legacy_wrapper_holding_the_end_offset(
    tmp_path: Path, sqlite_template: Path
) -> None:
    """A compressed v1 wrapper names only its last offset (its base offset reads -1): the stream
    must still stop at the first wrapper lying wholly past the end, in both tiers."""
    log_dir = tmp_path / "logs"
    truth = write_partition(log_dir, LEGACY_PLAN)
    backend = Backend("sqlite-fs", sqlite_template=sqlite_template)
    rt = runtime(backend, tmp_path, log_dir, auth_enabled=False)
    try:
        tiered = tier_partition(rt, LogDir(log_dir).partition(TOPIC, 0), truth, LEGACY_PLAN)
        local = tiered.truth.local_start_offset
        assert 3 < local < 36, tiered.notes
        app = create_app(
            rt.settings, runtime_=rt, authenticator=TokenAuthenticator.from_settings(rt.settings)
        )
        with TestClient(app) as client:
            for start, end in [(0, 3), (0, 4), (4, 5), (3, 9), (local - 3, local), (30, 36), (34, 40)]:
                body, _ = read(client, OCTET, offset=start, end_offset=end)
                sent = _batch_offsets(body)
                wrappers = [
                    (first, first + 2) for first in range(0, 36, 3) if first + 2 >= start and first < end
                ]
                v2 = [(o, o) for o in range(36, 40) if start <= o < end]
                assert sent == wrappers + v2, (start, end)
    finally:
        rt.close()


def test_a_header_key_that_is_not_utf8_reads_as_kafkas_client_shows_it(
    tmp_path: Path, sqlite_template: Path
) -> None:
    """Clients may send header keys of any bytes and the broker keeps them: every answer gives
    such a key as Kafka's client decodes it (U+FFFD for what is not UTF-8), from both tiers."""
    log_dir = tmp_path / "logs"
    writer = LogDirWriter(
        log_dir, clock=lambda: 1_700_000_000_000, default_config=TopicConfig(segment_bytes=1 << 30)
    )
    appender = writer.partition(TOPIC, 0, leader_epoch=0)
    odd = ("\udcff\udcfebin", b"h")  # the key's bytes b"\xff\xfebin" (surrogate escapes keep them)
    for timestamp in (1_000, 2_000):
        appender.append([ProducerRecord(timestamp, b"k", b"v", headers=(odd, ("ok", None)))])
        appender.roll()
    appender.append([ProducerRecord(3_000, b"k", b"v")])
    writer.close({})
    rt = runtime(Backend("sqlite-fs", sqlite_template=sqlite_template), tmp_path, log_dir, auth_enabled=False)
    try:
        assert [o.error for o in rt.copier.run_once()] == [None]
        first = LogDir(log_dir).partition(TOPIC, 0).segments()[0]
        for path in (first.log_path, first.index_path, first.time_index_path):
            path.unlink()  # the broker's local retention: offset 0 is read from the remote tier
        app = create_app(
            rt.settings, runtime_=rt, authenticator=TokenAuthenticator.from_settings(rt.settings)
        )
        shown = (("\ufffd\ufffdbin", b"h"), ("ok", None))
        with TestClient(app) as client:
            for media in (NDJSON, ARROW):
                assert [r.headers for r in decoded(client, media, offset=0, end_offset=3)] == [
                    shown,
                    shown,
                    (),
                ]
            bounded = client.get(URL, params={"offset": 0}).json()["records"]
            assert [r["headers"][0][0] for r in bounded[:1]] == ["\ufffd\ufffdbin"]
            raw, _ = read(client, OCTET, offset=0, end_offset=2)  # the stored bytes, as they are
            assert raw.count(b"\xff\xfebin") == 2
    finally:
        rt.close()
