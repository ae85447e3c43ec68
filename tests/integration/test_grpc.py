"""The gRPC API end to end: the real server on a loopback port over a tiered partition (SQLite +
the filesystem store), called through real channels with bearer tokens.

The partition is tiered and then half of its tiered segments are deleted locally, so lookups and
fetches are answered from both tiers. Answers must equal what the services answer for the same
inputs (and, for fetches, the records as appended).
"""

from __future__ import annotations

import asyncio
import datetime
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2
from prometheus_client import CollectorRegistry

from api.auth import TokenAuthenticator
from api.gen.rlm.v1 import rlm_pb2 as pb
from api.gen.rlm.v1 import rlm_pb2_grpc
from api.grpc_server import SERVICE_NAME, build_grpc_server
from rlm.bootstrap import Runtime, build_runtime, open_remote_storage
from rlm.errors import ConfigError
from rlm.log.checkpoints import uuid_to_topic_id
from rlm.log.logdir import LogDir
from rlm.log.model import Codec
from rlm.lookup.list_offsets import ListOffsetsRequest, PartitionQuery, TopicQuery
from rlm.metastore.model import TopicPartition
from tests.grpc_support import (
    GatedStorage,
    ServerThread,
    code_of,
    free_port,
    health_check,
    health_watch,
    reflection_info,
    self_signed,
    wait_until,
)
from tests.lookup_support import (
    TOPIC,
    Backend,
    BatchKind,
    BatchPlan,
    PartitionPlan,
    Truth,
    tier_partition,
    write_partition,
)

READ_TOKEN = "read-token-5f1c0b"
ADMIN_TOKEN = "admin-token-9d2e47"
READ = (("authorization", f"Bearer {READ_TOKEN}"),)
ADMIN = (("authorization", f"Bearer {ADMIN_TOKEN}"),)
TP = TopicPartition(TOPIC, 0)
KINDS: tuple[BatchKind, ...] = ("plain", "plain", "commit", "plain", "abort")
PLAN = PartitionPlan(
    batches=tuple(
        BatchPlan(
            timestamps=(i * 100, i * 100 + 700, i * 100 + 30),  # CreateTime out of order
            codec=tuple(Codec)[i % len(Codec)],
            kind=KINDS[i % len(KINDS)],
            new_epoch=i % 17 == 16,
            value_bytes=60,
        )
        for i in range(60)
    ),
    segment_bytes=2048,
    tiering="remote",
    local_deleted=0.5,
)


@dataclass
class Served:
    runtime: Runtime
    truth: Truth
    storage: GatedStorage
    port: int
    channel: grpc.Channel
    stub: rlm_pb2_grpc.RemoteLogManagerStub


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("grpc")
    log_dir = root / "logs"
    truth = write_partition(log_dir, PLAN)
    settings = Backend("sqlite-fs", sqlite_template=sqlite_template).settings(
        root,
        log_dir,
        auth_tokens=f"read:{READ_TOKEN},admin:{ADMIN_TOKEN}",
        remote_log_reader_threads=1,
        remote_log_reader_max_pending_tasks=1,
    )
    storage = GatedStorage(open_remote_storage(settings))
    runtime = build_runtime(settings, registry=CollectorRegistry(), storage=storage)
    tier_partition(runtime, LogDir(log_dir).partition(TOPIC, 0), truth, PLAN)
    assert 0 < truth.local_start_offset <= truth.highest_copied, "the partition must span both tiers"
    port = free_port()
    authenticator = TokenAuthenticator.from_settings(settings)
    server = ServerThread(
        lambda: build_grpc_server(runtime, authenticator, port=port, readiness_refresh_s=0.0)
    )
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield Served(
            runtime,
            truth,
            storage,
            port,
            channel,
            rlm_pb2_grpc.RemoteLogManagerStub(channel),
        )
    finally:
        channel.close()
        server.stop()
        runtime.close()


def tier_of(name: str | None) -> pb.Tier.ValueType:
    return {None: pb.TIER_UNSPECIFIED, "local": pb.TIER_LOCAL, "remote": pb.TIER_REMOTE}[name]


def remote_timestamp(truth: Truth) -> int:
    """A timestamp whose answer lies in the remote tier only."""
    first = truth.records[0].record
    assert first.offset < truth.local_start_offset
    return first.timestamp


# -- lookups ------------------------------------------------------------------------------------


def test_get_offset_answers_what_the_service_answers_from_both_tiers(served: Served) -> None:
    stamps = sorted({r.record.timestamp for r in served.truth.records})
    chosen = (0, *stamps[:: max(1, len(stamps) // 25)], stamps[-1], stamps[-1] + 1)
    targets = [(str(t), t) for t in chosen]
    targets += [(str(t), t) for t in (-1, -2, -3, -4, -5)]
    targets += [("latest", -1), ("earliest", -2), ("max-timestamp", -3), ("latest-tiered", -5)]
    iso = datetime.datetime.fromtimestamp(stamps[3] / 1000, datetime.UTC).isoformat()
    targets.append((iso, stamps[3]))
    tiers = set()
    for text, timestamp in targets:
        got = served.stub.GetOffset(
            pb.GetOffsetRequest(topic=TOPIC, partition=0, timestamp=text), metadata=READ, timeout=30
        )
        want = served.runtime.list_offsets.find_one(TP, timestamp)
        assert (got.topic, got.partition) == (TOPIC, 0)
        assert (got.offset, got.timestamp, got.leader_epoch) == (
            want.offset,
            want.timestamp,
            want.leader_epoch,
        )
        assert got.tier == tier_of(want.tier), text
        tiers.add(want.tier)
    assert {"local", "remote"} <= tiers


def test_list_offsets_answers_the_kafka_v10_shape_with_error_codes(served: Served) -> None:
    asked = {
        TOPIC: [(0, remote_timestamp(served.truth)), (3, -1), (4, -9)],
        "absent-topic": [(0, -2)],
    }
    request = pb.ListOffsetsRequest(
        isolation_level=1,
        timeout_ms=20_000,
        topics=[
            pb.ListOffsetsTopic(
                name=name,
                partitions=[pb.ListOffsetsPartition(partition_index=p, timestamp=t) for p, t in parts],
            )
            for name, parts in asked.items()
        ],
    )
    got = served.stub.ListOffsets(request, metadata=READ, timeout=30)
    want = served.runtime.list_offsets.handle(
        ListOffsetsRequest(
            tuple(TopicQuery(n, tuple(PartitionQuery(p, t) for p, t in parts)) for n, parts in asked.items()),
            20_000,
            1,
        )
    )
    assert [t.name for t in got.topics] == [TOPIC, "absent-topic"]
    for got_topic, want_topic in zip(got.topics, want.topics, strict=True):
        for g, w in zip(got_topic.partitions, want_topic.partitions, strict=True):
            assert (g.partition_index, g.error_code, g.timestamp, g.offset, g.leader_epoch) == (
                w.partition_index,
                int(w.error_code),
                w.timestamp,
                w.offset,
                w.leader_epoch,
            )
            assert g.HasField("error_message") == (w.error_message is not None)
    codes = [p.error_code for t in got.topics for p in t.partitions]
    assert codes == [0, 3, 42, 3]  # NONE, UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST
    assert (
        got.topics[0].partitions[0].offset
        == served.truth.for_timestamp(remote_timestamp(served.truth)).offset
    )


# -- records ------------------------------------------------------------------------------------


def test_fetch_records_returns_decoded_records_and_raw_batches(served: Served) -> None:
    truth = served.truth
    for offset, tier in (
        (truth.log_start_offset + 1, pb.TIER_REMOTE),
        (truth.local_start_offset, pb.TIER_LOCAL),
    ):
        got = served.stub.FetchRecords(
            pb.FetchRecordsRequest(topic=TOPIC, partition=0, offset=offset, max_bytes=700),
            metadata=READ,
            timeout=30,
        )
        want = served.runtime.fetcher.fetch(TP, offset, 700)
        assert got.tier == tier == tier_of(want.tier)
        assert got.raw_batches == want.raw
        assert (got.high_watermark, got.next_offset) == (want.high_watermark, want.next_offset)
        decoded = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in want.records]
        assert [
            (
                r.offset,
                r.timestamp,
                r.key if r.HasField("key") else None,
                r.value if r.HasField("value") else None,
                tuple((h.key, h.value if h.HasField("value") else None) for h in r.headers),
            )
            for r in got.records
        ] == decoded
        assert all(r.timestamp_type == pb.TIMESTAMP_TYPE_CREATE_TIME for r in got.records)


def test_fetching_from_the_log_start_to_the_high_watermark_reads_every_record(served: Served) -> None:
    truth = served.truth
    offset, seen = truth.log_start_offset, []
    while offset < truth.high_watermark:
        page = served.stub.FetchRecords(
            pb.FetchRecordsRequest(topic=TOPIC, partition=0, offset=offset, max_bytes=1024),
            metadata=READ,
            timeout=30,
        )
        seen += [
            (r.offset, r.key if r.HasField("key") else None, r.value if r.HasField("value") else None)
            for r in page.records
        ]
        offset = page.next_offset
    assert seen == [(r.offset, r.key, r.value) for r in truth.data_records(truth.log_start_offset)]


# -- operator views -----------------------------------------------------------------------------


def test_list_segments_pages_through_the_remote_segments_in_offset_order(served: Served) -> None:
    ids, token = [], ""
    while True:
        page = served.stub.ListSegments(
            pb.ListSegmentsRequest(topic=TOPIC, partition=0, page_size=2, page_token=token), metadata=READ
        )
        assert len(page.segments) <= 2
        ids += [s.segment_id for s in page.segments]
        token = page.next_page_token
        if not token:
            break
    stored = list(served.runtime.store.list_segments(TP))
    assert ids == [str(s.segment_id) for s in stored] and len(ids) > 2
    first = served.stub.ListSegments(
        pb.ListSegmentsRequest(topic=TOPIC, partition=0), metadata=READ
    ).segments[0]
    s = stored[0]
    assert (first.start_offset, first.end_offset, first.max_timestamp, first.size_bytes, first.broker_id) == (
        s.start_offset,
        s.end_offset,
        s.max_timestamp_ms,
        s.size_bytes,
        s.broker_id,
    )
    assert first.state == pb.SEGMENT_STATE_COPY_SEGMENT_FINISHED
    assert [(e.epoch, e.start_offset) for e in first.leader_epochs] == [tuple(e) for e in s.leader_epochs]
    assert s.topic_id is not None and first.topic_id == uuid_to_topic_id(s.topic_id)


def test_list_partitions_answers_the_overview(served: Served) -> None:
    got = served.stub.ListPartitions(pb.ListPartitionsRequest(), metadata=READ).partitions
    want = served.runtime.overview.partitions()
    assert [
        (p.topic, p.partition, p.tiered_segments, p.highest_tiered_offset, p.high_watermark) for p in got
    ] == [(w.topic, w.partition, w.tiered_segments, w.highest_tiered_offset, w.high_watermark) for w in want]
    assert got[0].tiered_bytes > 0
    assert served.stub.ListPartitions(pb.ListPartitionsRequest(topic="other"), metadata=READ).partitions == []


def test_settings_are_read_with_a_read_token_and_changed_with_an_admin_token(served: Served) -> None:
    before = served.stub.GetConfig(pb.GetConfigRequest(), metadata=READ)
    assert before.remote_log_offset_reader_threads == served.runtime.offset_pool.threads
    try:
        after = served.stub.UpdateConfig(
            pb.UpdateConfigRequest(
                remote_log_offset_reader_threads=3, remote_list_offsets_request_timeout_ms=9000
            ),
            metadata=ADMIN,
        )
        assert (after.remote_log_offset_reader_threads, after.remote_list_offsets_request_timeout_ms) == (
            3,
            9000,
        )
        assert (
            after.remote_log_manager_copy_max_bytes_per_second
            == before.remote_log_manager_copy_max_bytes_per_second
        )
        assert served.runtime.offset_pool.threads == 3
        assert served.runtime.request_timeout.default_ms == 9000
        code, details = code_of(
            lambda: served.stub.UpdateConfig(
                pb.UpdateConfigRequest(
                    remote_log_offset_reader_threads=5, remote_log_manager_copy_max_bytes_per_second=0
                ),
                metadata=ADMIN,
            )
        )
        assert code is grpc.StatusCode.INVALID_ARGUMENT and "copy.max.bytes.per.second" in details
        assert served.runtime.offset_pool.threads == 3  # all or nothing
    finally:
        served.runtime.dynamic_config.update(
            reader_threads=before.remote_log_offset_reader_threads,
            request_timeout_ms=before.remote_list_offsets_request_timeout_ms,
        )


# -- errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "code", "words"),
    [
        pytest.param(
            lambda s: s.GetOffset(
                pb.GetOffsetRequest(topic=TOPIC, partition=9, timestamp="0"), metadata=READ
            ),
            grpc.StatusCode.NOT_FOUND,
            "orders-9",
            id="unknown-partition",
        ),
        pytest.param(
            lambda s: s.GetOffset(
                pb.GetOffsetRequest(topic=TOPIC, partition=0, timestamp="yesterday"), metadata=READ
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "yesterday",
            id="bad-timestamp",
        ),
        pytest.param(
            lambda s: s.GetOffset(
                pb.GetOffsetRequest(topic="a/b", partition=0, timestamp="0"), metadata=READ
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "invalid topic name",
            id="bad-topic",
        ),
        pytest.param(
            lambda s: s.GetOffset(
                pb.GetOffsetRequest(topic=TOPIC, partition=-1, timestamp="0"), metadata=READ
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "partition",
            id="negative-partition",
        ),
        pytest.param(
            lambda s: s.FetchRecords(
                pb.FetchRecordsRequest(topic=TOPIC, partition=0, offset=10**9), metadata=READ
            ),
            grpc.StatusCode.OUT_OF_RANGE,
            "outside",
            id="offset-past-the-end",
        ),
        pytest.param(
            lambda s: s.FetchRecords(
                pb.FetchRecordsRequest(topic=TOPIC, partition=0, offset=0, max_bytes=0), metadata=READ
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "max_bytes",
            id="no-bytes",
        ),
        pytest.param(
            lambda s: s.ListSegments(
                pb.ListSegmentsRequest(topic=TOPIC, partition=0, page_token="garbage"), metadata=READ
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "page token",
            id="bad-page-token",
        ),
        pytest.param(
            lambda s: s.ListOffsets(pb.ListOffsetsRequest(isolation_level=2), metadata=READ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "isolation_level",
            id="bad-isolation-level",
        ),
    ],
)
def test_errors_answer_a_status_and_say_what_was_wrong(
    served: Served,
    call: Callable[[rlm_pb2_grpc.RemoteLogManagerStub], Any],
    code: grpc.StatusCode,
    words: str,
) -> None:
    got, details = code_of(lambda: call(served.stub))
    assert got is code
    assert words in details


# -- auth ---------------------------------------------------------------------------------------


def test_calls_without_a_valid_token_are_refused_and_tokens_are_never_logged(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG")
    get = pb.GetConfigRequest()
    for metadata in [(), (("authorization", "Bearer not-a-token"),), (("authorization", READ_TOKEN),)]:
        code, details = code_of(lambda m=metadata: served.stub.GetConfig(get, metadata=m))  # type: ignore[misc]
        assert code is grpc.StatusCode.UNAUTHENTICATED and "bearer token" in details
    code, details = code_of(lambda: served.stub.UpdateConfig(pb.UpdateConfigRequest(), metadata=READ))
    assert code is grpc.StatusCode.PERMISSION_DENIED and "admin" in details
    assert (
        served.stub.UpdateConfig(pb.UpdateConfigRequest(), metadata=ADMIN).remote_log_offset_reader_threads
        > 0
    )
    assert (
        served.stub.GetConfig(get, metadata=ADMIN).remote_log_offset_reader_threads > 0
    )  # admin implies read
    code_of(lambda: served.stub.GetOffset(pb.GetOffsetRequest(topic=TOPIC, partition=7), metadata=READ))
    assert (
        READ_TOKEN not in caplog.text and ADMIN_TOKEN not in caplog.text and "not-a-token" not in caplog.text
    )


# -- health and reflection ----------------------------------------------------------------------


def test_health_needs_no_token_and_follows_readiness(served: Served) -> None:
    def status(service: str) -> int:
        return health_check(served.channel)(health_pb2.HealthCheckRequest(service=service), timeout=10).status

    assert status("") == status(SERVICE_NAME) == health_pb2.HealthCheckResponse.SERVING
    assert SERVICE_NAME == "rlm.v1.RemoteLogManager"
    code, _ = code_of(lambda: status("no.such.Service"))
    assert code is grpc.StatusCode.NOT_FOUND
    served.storage.unavailable = True
    try:
        assert status("") == status(SERVICE_NAME) == health_pb2.HealthCheckResponse.NOT_SERVING
    finally:
        served.storage.unavailable = False
    assert status(SERVICE_NAME) == health_pb2.HealthCheckResponse.SERVING


def test_health_watchers_are_told_when_readiness_changes(served: Served) -> None:
    serving = health_pb2.HealthCheckResponse
    watch = health_watch(served.channel)(health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=30)
    try:
        assert next(watch).status == serving.SERVING
        served.storage.unavailable = True
        assert next(watch).status == serving.NOT_SERVING
        served.storage.unavailable = False
        assert next(watch).status == serving.SERVING
    finally:
        served.storage.unavailable = False
        watch.cancel()


def test_reflection_lists_the_service_and_describes_its_file(served: Served) -> None:
    info = reflection_info(served.channel)
    requests = [
        reflection_pb2.ServerReflectionRequest(list_services=""),
        reflection_pb2.ServerReflectionRequest(file_containing_symbol=SERVICE_NAME),
    ]
    listed, described = list(info(iter(requests), metadata=READ, timeout=10))
    names = {s.name for s in listed.list_services_response.service}
    assert {SERVICE_NAME, "grpc.health.v1.Health"} <= names
    [raw] = described.file_descriptor_response.file_descriptor_proto
    file = descriptor_pb2.FileDescriptorProto.FromString(raw)
    assert file.package == "rlm.v1"
    assert [m.name for m in file.service[0].method] == [
        "GetOffset",
        "ListOffsets",
        "FetchRecords",
        "ReadRecords",
        "ListSegments",
        "ListPartitions",
        "GetConfig",
        "UpdateConfig",
    ]
    code, _ = code_of(lambda: list(info(iter(requests[:1]), timeout=10)))
    assert code is grpc.StatusCode.UNAUTHENTICATED


# -- deadlines and bounded pools ----------------------------------------------------------------


def _expirations(runtime: Runtime) -> float:
    value = runtime.metrics.registry.get_sample_value(
        "rlm_remote_list_offsets_expirations_total", {"topic": TOPIC, "partition": "0"}
    )
    return value or 0.0


def test_the_call_deadline_is_the_lookup_timeout(served: Served) -> None:
    remote = remote_timestamp(served.truth)
    before = _expirations(served.runtime)
    with served.storage.closed():
        # The server gave up too (the default timeout is 30 s): the partition's lookup expired.
        _get_offset_expires(served, remote)
        assert _expirations(served.runtime) == before + 1
        # ListOffsets answers in time, the blocked partition with REQUEST_TIMED_OUT.
        answer = served.stub.ListOffsets(
            pb.ListOffsetsRequest(
                topics=[
                    pb.ListOffsetsTopic(
                        name=TOPIC, partitions=[pb.ListOffsetsPartition(partition_index=0, timestamp=remote)]
                    ),
                    pb.ListOffsetsTopic(
                        name="absent", partitions=[pb.ListOffsetsPartition(partition_index=0, timestamp=-1)]
                    ),
                ]
            ),
            metadata=READ,
            timeout=2,
        )
        assert [t.partitions[0].error_code for t in answer.topics] == [7, 3]
        code, _ = code_of(
            lambda: served.stub.FetchRecords(
                pb.FetchRecordsRequest(topic=TOPIC, partition=0, offset=served.truth.log_start_offset),
                metadata=READ,
                timeout=0.5,
            )
        )
        assert code is grpc.StatusCode.DEADLINE_EXCEEDED


def test_time_spent_planning_a_get_offset_is_not_taken_from_its_deadline_twice(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A 2 s deadline leaves the lookup 1.8 s (0.2 s to answer), however long planning took: the
    # planning's 0.6 s were taken off once by the deadline passing, and again from its start.
    service = served.runtime.list_offsets.service
    plan = service.plan

    def slow_plan(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.6)
        return plan(*args, **kwargs)

    monkeypatch.setattr(service, "plan", slow_plan)
    remote = remote_timestamp(served.truth)
    before = _expirations(served.runtime)
    with served.storage.closed():
        called = time.monotonic()
        call = served.stub.GetOffset.future(
            pb.GetOffsetRequest(topic=TOPIC, partition=0, timestamp=str(remote)), metadata=READ, timeout=2
        )
        wait_until(lambda: _expirations(served.runtime) > before)
        gave_up_after = time.monotonic() - called
        assert code_of(call.result)[0] is grpc.StatusCode.DEADLINE_EXCEEDED
    assert 1.7 <= gave_up_after < 2.5


def test_a_partition_whose_metadata_read_ran_out_of_time_counts_as_an_expiration(served: Served) -> None:
    # Every partition that answers REQUEST_TIMED_OUT is counted, not only those whose search ran
    # out of time: a metadata store too slow to answer fires the alert too.
    pool = served.runtime.metadata_pool
    release = threading.Event()
    for _ in range(pool.threads):  # the store's reads wait behind these
        pool.submit(lambda token: release.wait(30))
    remote = remote_timestamp(served.truth)
    try:
        wait_until(lambda: pool.running == pool.threads)
        served.runtime.list_offsets.service.views.invalidate(TP)
        before = _expirations(served.runtime)
        answer = served.stub.ListOffsets(
            pb.ListOffsetsRequest(
                topics=[
                    pb.ListOffsetsTopic(
                        name=TOPIC, partitions=[pb.ListOffsetsPartition(partition_index=0, timestamp=remote)]
                    )
                ],
                timeout_ms=200,
            ),
            metadata=READ,
            timeout=10,
        )
        assert answer.topics[0].partitions[0].error_code == 7
        assert _expirations(served.runtime) == before + 1
        _get_offset_expires(served, remote)
        assert _expirations(served.runtime) == before + 2
    finally:
        release.set()


def _get_offset_expires(served: Served, timestamp: int) -> None:
    """A GetOffset of ``timestamp`` with a 0.5 s deadline ends DEADLINE_EXCEEDED, and the server's
    lookup is counted as expired (after the call ended: the server's own deadline is earlier)."""
    before = _expirations(served.runtime)
    code, _ = code_of(
        lambda: served.stub.GetOffset(
            pb.GetOffsetRequest(topic=TOPIC, partition=0, timestamp=str(timestamp)),
            metadata=READ,
            timeout=0.5,
        )
    )
    assert code is grpc.StatusCode.DEADLINE_EXCEEDED
    wait_until(lambda: _expirations(served.runtime) > before)


def test_a_full_fetch_pool_answers_resource_exhausted(served: Served) -> None:
    request = pb.FetchRecordsRequest(topic=TOPIC, partition=0, offset=served.truth.log_start_offset)
    pool = served.runtime.fetch_pool
    assert (pool.threads, pool.max_pending) == (1, 1)
    wait_until(lambda: pool.running == pool.pending == 0)  # earlier tests' cancelled reads are gone
    with served.storage.closed() as held:
        running = served.stub.FetchRecords.future(request, metadata=READ, timeout=30)
        assert held.acquire(timeout=10)
        queued = served.stub.FetchRecords.future(request, metadata=READ, timeout=30)
        wait_until(lambda: pool.pending == 1)
        code, details = code_of(lambda: served.stub.FetchRecords(request, metadata=READ, timeout=30))
        assert code is grpc.StatusCode.RESOURCE_EXHAUSTED and "retry later" in details
    assert running.result().records == queued.result().records != []


def _streams_ended(runtime: Runtime, outcome: str) -> float:
    return runtime.metrics.registry.get_sample_value("rlm_streams_total", {"outcome": outcome}) or 0.0


def test_a_stream_cancelled_while_it_is_planned_counts_as_cancelled_not_failed(served: Served) -> None:
    runtime = served.runtime
    pool = runtime.fetch_pool
    wait_until(lambda: pool.running == pool.pending == 0)  # earlier tests' cancelled reads are gone
    cancelled, failed = _streams_ended(runtime, "cancelled"), _streams_ended(runtime, "failed")
    # A timestamp the remote tier answers: planning searches it, and waits at the closed gate.
    remote = str(remote_timestamp(served.truth))
    request = pb.ReadRecordsRequest(topic=TOPIC, partition=0, from_timestamp=remote)
    with served.storage.closed() as held:
        call = served.stub.ReadRecords(request, metadata=READ, timeout=30)
        assert held.acquire(timeout=10)
        assert runtime.streams.active == 1
        call.cancel()
        wait_until(lambda: runtime.streams.active == 0)
    assert _streams_ended(runtime, "cancelled") == cancelled + 1
    assert _streams_ended(runtime, "failed") == failed
    # A stream that cannot be planned still counts as failed.
    past_the_end = pb.ReadRecordsRequest(topic=TOPIC, partition=0, offset=served.truth.high_watermark + 10)
    code, _ = code_of(lambda: list(served.stub.ReadRecords(past_the_end, metadata=READ, timeout=30)))
    assert code is grpc.StatusCode.OUT_OF_RANGE
    assert _streams_ended(runtime, "failed") == failed + 1
    assert _streams_ended(runtime, "cancelled") == cancelled + 1


# -- TLS ----------------------------------------------------------------------------------------


def test_tls_server_answers_over_a_secure_channel(served: Served) -> None:
    cert, key = self_signed()
    port = free_port()
    authenticator = TokenAuthenticator.from_settings(
        served.runtime.settings.replace(auth_tokens=f"read:{READ_TOKEN}")
    )
    server = ServerThread(
        lambda: build_grpc_server(served.runtime, authenticator, port=port, tls=(cert, key))
    )
    try:
        with grpc.secure_channel(
            f"127.0.0.1:{port}", grpc.ssl_channel_credentials(root_certificates=cert)
        ) as channel:
            stub = rlm_pb2_grpc.RemoteLogManagerStub(channel)
            got = stub.GetOffset(
                pb.GetOffsetRequest(topic=TOPIC, partition=0, timestamp="earliest"), metadata=READ, timeout=10
            )
            assert got.offset == served.truth.log_start_offset
            code, _ = code_of(lambda: stub.GetConfig(pb.GetConfigRequest(), timeout=10))
            assert code is grpc.StatusCode.UNAUTHENTICATED
            health = health_check(channel)(health_pb2.HealthCheckRequest(), timeout=10)
            assert health.status == health_pb2.HealthCheckResponse.SERVING
        with grpc.insecure_channel(f"127.0.0.1:{port}") as plain:
            code, _ = code_of(
                lambda: rlm_pb2_grpc.RemoteLogManagerStub(plain).GetConfig(
                    pb.GetConfigRequest(), metadata=READ, timeout=5
                )
            )
            assert code is grpc.StatusCode.UNAVAILABLE
    finally:
        server.stop()


@pytest.fixture
def main_thread_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop set as the main thread's current one: ``grpc.aio.server()`` asks for it, and a
    test that ran ``asyncio.run`` before leaves none."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        yield loop
    finally:
        asyncio.set_event_loop(None)
        loop.close()


@pytest.mark.usefixtures("main_thread_loop")
def test_unusable_tls_material_or_a_busy_port_is_a_config_error(served: Served) -> None:
    authenticator = TokenAuthenticator.from_settings(served.runtime.settings)
    cert, _ = self_signed()
    _, other_key = self_signed()
    with pytest.raises(ConfigError, match=r"tls\.cert\.file and tls\.key\.file"):
        build_grpc_server(served.runtime, authenticator, port=free_port(), tls=(cert, other_key))
    with pytest.raises(ConfigError, match=f"cannot listen on 127.0.0.1:{served.port}"):
        build_grpc_server(served.runtime, authenticator, port=served.port)
