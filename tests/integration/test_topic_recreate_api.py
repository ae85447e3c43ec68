"""REST and gRPC over a topic deleted and created again under the same name, on SQLite +
filesystem and PostgreSQL + S3 (the sidecar of ``test_lookup_topic_recreate``).

Reads of a partition whose ``partition.metadata`` cannot be read fail, naming the file, in every
API, with the status corrupt data gets there. The operator views answer for the topic the broker
holds: the overview counts only its segments, and the segment listing marks the deleted topic's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import grpc
import pytest
from fastapi.testclient import TestClient

from api.auth import TokenAuthenticator
from api.gen.rlm.v1 import rlm_pb2 as pb
from api.gen.rlm.v1 import rlm_pb2_grpc
from api.grpc_server import build_grpc_server
from api.rest.app import create_app
from rlm.bootstrap import Runtime
from rlm.log.logdir import PARTITION_METADATA, LogDir
from rlm.metastore.model import SegmentState
from tests.grpc_support import ServerThread, code_of, free_port
from tests.integration.test_lookup_topic_recreate import (
    BACKENDS,
    TP,
    break_file,
    old_topic_sidecar,
    put_right,
    recreate_topic,
)
from tests.integration.test_stream import stop_grpc
from tests.tiering_support import WRITER_NOW_MS

PARTITION = f"/v1/topics/{TP.topic}/partitions/{TP.partition}"
NDJSON = "application/x-ndjson"
FINISHED = "COPY_SEGMENT_FINISHED"


@pytest.fixture(params=BACKENDS)
def sidecar(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Runtime, Path]]:
    yield from old_topic_sidecar(request, tmp_path)


@dataclass
class Apis:
    rest: TestClient
    grpc: rlm_pb2_grpc.RemoteLogManagerStub


@contextlib.contextmanager
def serving(rt: Runtime) -> Iterator[Apis]:
    """The REST app and a gRPC server over ``rt``, without authentication."""
    settings = replace(rt.settings, auth_enabled=False)
    port = free_port()
    authenticator = TokenAuthenticator.from_settings(settings)
    server = ServerThread(lambda: build_grpc_server(rt, authenticator, port=port))
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        with TestClient(create_app(settings, runtime_=rt)) as client:
            yield Apis(client, rlm_pb2_grpc.RemoteLogManagerStub(channel))
    finally:
        channel.close()
        stop_grpc(server, rt)


def broker_topic_id(log_dir: Path) -> str:
    """The topic id of the broker's ``orders-0``."""
    found = LogDir(log_dir).partition(TP.topic, TP.partition).topic_id()
    assert found is not None
    return found


def listed(apis: Apis) -> tuple[dict[str, Any], pb.ListSegmentsResponse]:
    """The segment listing of ``orders-0`` through REST and gRPC (one page holds it)."""
    answer = apis.rest.get(f"{PARTITION}/segments")
    assert answer.status_code == 200, answer.text
    request = pb.ListSegmentsRequest(topic=TP.topic, partition=TP.partition)
    return answer.json(), apis.grpc.ListSegments(request, timeout=30)


def overview(apis: Apis) -> tuple[dict[str, Any], pb.PartitionOverview]:
    """The overview of ``orders-0`` through REST and gRPC."""
    answer = apis.rest.get("/v1/topics", params={"topic": TP.topic})
    assert answer.status_code == 200, answer.text
    (topic,) = answer.json()["topics"]
    (rest,) = topic["partitions"]
    (message,) = apis.grpc.ListPartitions(pb.ListPartitionsRequest(topic=TP.topic), timeout=30).partitions
    return rest, message


@pytest.mark.parametrize(("how", "what"), [("malformed", "line 2"), ("unreadable", "Is a directory")])
def test_reads_of_a_partition_whose_topic_id_cannot_be_read_fail_naming_the_file(
    sidecar: tuple[Runtime, Path], how: str, what: str
) -> None:
    rt, log_dir = sidecar
    recreate_topic(log_dir)
    metadata = LogDir(log_dir).partition(TP.topic, TP.partition).path / PARTITION_METADATA
    written = metadata.read_bytes()
    rt.lookup.invalidate()
    break_file(metadata, how)
    named = f"{metadata}: the topic id of orders-0 cannot be read ({what}"

    with serving(rt) as apis:
        # Lookups answer KAFKA_STORAGE_ERROR, as for other corrupt data: 503 and UNAVAILABLE.
        for timestamp in ("earliest", "latest", str(WRITER_NOW_MS - 1000)):
            answer = apis.rest.get(f"{PARTITION}/offsets", params={"timestamp": timestamp})
            assert answer.status_code == 503 and named in answer.json()["error"], answer.text
            request = pb.GetOffsetRequest(topic=TP.topic, partition=TP.partition, timestamp=timestamp)
            code, details = code_of(partial(apis.grpc.GetOffset, request, timeout=30))
            assert code is grpc.StatusCode.UNAVAILABLE and named in details
        # Fetches and streams answer as corrupt data: 500 and DATA_LOSS, before any record.
        for offset in (0, 25):
            answer = apis.rest.get(f"{PARTITION}/records", params={"offset": offset})
            assert answer.status_code == 500 and named in answer.json()["error"], answer.text
            fetch = pb.FetchRecordsRequest(topic=TP.topic, partition=TP.partition, offset=offset)
            code, details = code_of(partial(apis.grpc.FetchRecords, fetch, timeout=30))
            assert code is grpc.StatusCode.DATA_LOSS and named in details
        streamed = apis.rest.get(f"{PARTITION}/records", params={"offset": 0}, headers={"Accept": NDJSON})
        assert streamed.status_code == 500 and named in streamed.json()["error"], streamed.text
        stream = pb.ReadRecordsRequest(topic=TP.topic, partition=TP.partition)
        code, details = code_of(lambda: list(apis.grpc.ReadRecords(stream, timeout=30)))
        assert code is grpc.StatusCode.DATA_LOSS and named in details

        put_right(metadata, written)
        answer = apis.rest.get(f"{PARTITION}/offsets", params={"timestamp": "earliest"})
        assert (answer.status_code, answer.json()["offset"]) == (200, 0)
        fetched = apis.grpc.FetchRecords(
            pb.FetchRecordsRequest(topic=TP.topic, partition=TP.partition, offset=0)
        )
        assert fetched.records[0].offset == 0


def test_the_overview_counts_only_the_segments_of_the_topic_the_broker_holds(
    sidecar: tuple[Runtime, Path],
) -> None:
    rt, log_dir = sidecar
    recreate_topic(log_dir)
    new_id = broker_topic_id(log_dir)
    with serving(rt) as apis:
        # The deleted topic's 3 live segments, its offsets (20 to 49) and timestamps are no part
        # of the figures: nothing of the new topic is tiered, its 3 rolled segments are to copy.
        rest, message = overview(apis)
        assert rest["topic_id"] == message.topic_id == new_id
        assert rest["topic_id_error"] is None and message.topic_id_error == ""
        for figures in (
            (rest["tiered_segments"], rest["tiered_bytes"], rest["remote_log_start_offset"]),
            (message.tiered_segments, message.tiered_bytes, message.remote_log_start_offset),
        ):
            assert figures == (0, 0, -1)
        assert (rest["highest_tiered_offset"], rest["max_remote_timestamp"]) == (-1, -1)
        assert (message.highest_tiered_offset, message.max_remote_timestamp) == (-1, -1)
        assert rest["copy_lag_segments"] == message.copy_lag_segments == 3
        assert rest["copy_lag_bytes"] == message.copy_lag_bytes > 0

        assert [o.copied_segments for o in rt.copier.run_once()] == [3]
        rest, message = overview(apis)
        after = (
            rest["tiered_segments"],
            rest["remote_log_start_offset"],
            rest["highest_tiered_offset"],
            rest["max_remote_timestamp"],
            rest["copy_lag_segments"],
        )
        assert after == (3, 0, 29, WRITER_NOW_MS - 1000 + 2, 0)
        figures = (message.tiered_segments, message.highest_tiered_offset, message.copy_lag_segments)
        assert figures == (3, 29, 0)


def test_the_segment_listing_marks_the_deleted_topics_segments(sidecar: tuple[Runtime, Path]) -> None:
    rt, log_dir = sidecar
    deleted_id = broker_topic_id(log_dir)
    recreate_topic(log_dir)
    new_id = broker_topic_id(log_dir)
    assert deleted_id != new_id
    with serving(rt) as apis:
        # Before the copier retires them, all the store holds is the deleted topic's.
        rest, message = listed(apis)
        assert rest["topic_id"] == message.topic_id == new_id
        assert rest["topic_id_error"] is None and message.topic_id_error == ""
        rows = [(r["start_offset"], r["topic_id"], r["deleted_topic"]) for r in rest["segments"]]
        assert rows == [(o, deleted_id, True) for o in (0, 10, 20, 30, 40)]
        assert [(s.start_offset, s.topic_id, s.deleted_topic) for s in message.segments] == rows

        # Retired (being deleted), they are still listed, and still the deleted topic's; the new
        # topic's copies are not.
        assert [o.copied_segments for o in rt.copier.run_once()] == [3]
        rest, message = listed(apis)
        rows = [(r["start_offset"], r["state"], r["deleted_topic"]) for r in rest["segments"]]
        assert sorted(r for r in rows if r[1] == FINISHED) == [(o, FINISHED, False) for o in (0, 10, 20)]
        assert {r[2] for r in rows if r[1] != FINISHED} == {True}
        finished = pb.SEGMENT_STATE_COPY_SEGMENT_FINISHED
        assert sorted((s.start_offset, s.deleted_topic) for s in message.segments if s.state == finished) == [
            (0, False),
            (10, False),
            (20, False),
        ]
        states = {s.state for s in rt.store.list_segments(TP)}
        assert SegmentState.COPY_SEGMENT_FINISHED in states and len(states) > 1


def test_with_an_unreadable_topic_id_the_operator_views_say_why(sidecar: tuple[Runtime, Path]) -> None:
    rt, log_dir = sidecar
    recreate_topic(log_dir)
    metadata = LogDir(log_dir).partition(TP.topic, TP.partition).path / PARTITION_METADATA
    break_file(metadata, "malformed")
    named = f"{metadata}: the topic id of orders-0 cannot be read (line 2"
    with serving(rt) as apis:
        # Nothing tells whose the segments are: the figures are the store's, no segment is
        # marked either way, and both views say what is wrong.
        rest, message = overview(apis)
        assert rest["topic_id"] is None and message.topic_id == ""
        assert named in rest["topic_id_error"] and named in message.topic_id_error
        assert (rest["tiered_segments"], rest["remote_log_start_offset"]) == (3, 20)
        rest_page, page = listed(apis)
        assert rest_page["topic_id"] is None and named in rest_page["topic_id_error"]
        assert named in page.topic_id_error
        assert {r["deleted_topic"] for r in rest_page["segments"]} == {None}
        assert not any(s.HasField("deleted_topic") for s in page.segments)
