"""Range streams over an S3 store that fails: through a fault proxy in front of moto's server.

A GET answered 500, or cut short by a closed connection, is retried for its chunk and the stream
is whole. A store that keeps failing ends the stream with an error trailer (an NDJSON error line,
a gRPC status): never a stream that looks whole but is short.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry

from api.auth import TokenAuthenticator
from api.gen.rlm.v1 import rlm_pb2 as pb
from api.gen.rlm.v1 import rlm_pb2_grpc
from api.grpc_server import build_grpc_server
from api.rest.app import create_app
from rlm.bootstrap import build_runtime
from rlm.log.logdir import LogDir
from rlm.storage.async_s3 import AsyncS3Reader
from tests.grpc_support import ServerThread, free_port
from tests.integration.test_fetch import PLAN
from tests.integration.test_stream import NDJSON, URL, expected, from_ndjson, stop_grpc
from tests.lookup_support import TOPIC, Backend, Tiered, tier_partition, write_partition
from tests.s3_proxy import ProxyFault, S3Proxy
from tests.s3_support import MotoS3


@dataclass
class Faulty:
    tiered: Tiered
    proxy: S3Proxy
    client: TestClient


@pytest.fixture(scope="module")
def faulty(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Faulty]:
    root = tmp_path_factory.mktemp("stream-faults")
    log_dir = root / "logs"
    truth = write_partition(log_dir, PLAN)
    backend = Backend("sqlite-fs", sqlite_template=request.getfixturevalue("sqlite_template"))
    s3: MotoS3 = request.getfixturevalue("moto_s3")
    settings = backend.settings(root, log_dir, auth_enabled=False, remote_fetch_stream_buffer_bytes=2048)
    with S3Proxy(s3.endpoint_url) as proxy:
        storage = s3.storage(s3.new_bucket(), "tier", endpoint_url=proxy.endpoint_url)
        rt = build_runtime(settings, registry=CollectorRegistry(), storage=storage)
        try:
            tiered = tier_partition(rt, LogDir(log_dir).partition(TOPIC, 0), truth, PLAN)
            app = create_app(settings, runtime_=rt, authenticator=TokenAuthenticator.from_settings(settings))
            with TestClient(app) as client:
                yield Faulty(tiered, proxy, client)
        finally:
            rt.close()


def test_failed_and_cut_gets_are_retried_for_their_chunk(faulty: Faulty) -> None:
    truth = faulty.tiered.truth
    start = truth.log_start_offset
    faulty.proxy.inject(ProxyFault.SERVER_ERROR, "GetObject", every=3)
    faulty.proxy.inject(ProxyFault.CUT_BODY, "GetObject", every=2)
    before = len(faulty.proxy.exchanges_of("GetObject"))
    try:
        answer = faulty.client.get(URL, params={"offset": start}, headers={"Accept": NDJSON})
    finally:
        faulty.proxy.clear()
    assert answer.status_code == 200, faulty.tiered.notes
    assert from_ndjson(answer.content) == expected(truth, start, None, False)
    gets = faulty.proxy.exchanges_of("GetObject")[before:]
    assert any(e.status == 500 for e in gets), "no GET failed: the test tested nothing"
    assert faulty.tiered.runtime.metrics.registry.get_sample_value("rlm_stream_read_bytes_total")


def test_a_store_that_keeps_failing_ends_the_stream_with_an_error(faulty: Faulty) -> None:
    truth = faulty.tiered.truth
    start = truth.log_start_offset
    faulty.tiered.runtime.index_cache.resize(1)  # indexes are read again: through the proxy
    faulty.proxy.inject(ProxyFault.SERVER_ERROR, "GetObject", every=1)
    registry = faulty.tiered.runtime.metrics.registry

    def streams(outcome: str) -> float:
        return registry.get_sample_value("rlm_streams_total", {"outcome": outcome}) or 0.0

    before = {outcome: streams(outcome) for outcome in ("completed", "failed")}
    try:
        answer = faulty.client.get(URL, params={"offset": start}, headers={"Accept": NDJSON})
        # The NDJSON body ends with its error line as a whole body ends: counted as failed all the same.
        assert streams("failed") == before["failed"] + 1
        assert streams("completed") == before["completed"]
        port = free_port()
        rt = faulty.tiered.runtime
        server = ServerThread(
            lambda: build_grpc_server(rt, TokenAuthenticator.from_settings(rt.settings), port=port)
        )
        try:
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = rlm_pb2_grpc.RemoteLogManagerStub(channel)
                with pytest.raises(grpc.RpcError) as failed:
                    list(
                        stub.ReadRecords(
                            pb.ReadRecordsRequest(topic=TOPIC, partition=0, offset=start), timeout=60
                        )
                    )
        finally:
            stop_grpc(server, rt)
    finally:
        faulty.proxy.clear()
    assert answer.status_code == 200  # the status was sent before the store failed
    lines = answer.content.decode().splitlines()
    assert '"error"' in lines[-1] and '"status": 503' in lines[-1] and "GetObject" in lines[-1]
    assert (
        from_ndjson("\n".join(lines[:-1]).encode()) == expected(truth, start, None, False)[: len(lines) - 1]
    )
    error: grpc.Call = failed.value  # type: ignore[assignment]
    assert error.code() is grpc.StatusCode.UNAVAILABLE and "GetObject" in (error.details() or "")


def test_the_s3_reader_has_a_connection_for_each_get_the_streams_may_hold(faulty: Faulty) -> None:
    rt = faulty.tiered.runtime
    remote = rt.streams.remote
    assert isinstance(remote, AsyncS3Reader)  # an S3 store is read with aiobotocore
    # Each stream holds its segment's GET and, at a segment's end, the next one's.
    assert remote.connections == 2 * rt.settings.remote_fetch_max_streams > remote.config.max_pool_connections


def test_an_ndjson_stream_ended_by_the_store_is_logged_as_a_grpc_one_is(
    faulty: Faulty, caplog: pytest.LogCaptureFixture
) -> None:
    # The error line reaches the client, but the operator is told too: as gRPC's ReadRecords logs
    # the UNAVAILABLE it ends with, and as REST logs an error answer of 5xx, naming the request.
    truth = faulty.tiered.truth
    faulty.tiered.runtime.index_cache.resize(1)  # indexes are read again: through the proxy
    faulty.proxy.inject(ProxyFault.SERVER_ERROR, "GetObject", every=1)
    caplog.set_level(logging.WARNING)
    try:
        answer = faulty.client.get(URL, params={"offset": truth.log_start_offset}, headers={"Accept": NDJSON})
    finally:
        faulty.proxy.clear()
    assert answer.status_code == 200 and '"status": 503' in answer.content.decode().splitlines()[-1]
    reported = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any(f"GET {URL}" in m and "GetObject" in m for m in reported), reported
