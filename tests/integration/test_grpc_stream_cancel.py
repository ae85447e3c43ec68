"""A gRPC ``ReadRecords`` stream the client cancels while the server waits to send: the call ends
as cancelled, with no error logged (log-based alerts would fire on every client going away), and
the stream's slot and reads are given back."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from api.auth import TokenAuthenticator
from api.gen.rlm.v1 import rlm_pb2 as pb
from api.gen.rlm.v1 import rlm_pb2_grpc
from api.grpc_server import build_grpc_server
from rlm.bootstrap import Runtime
from rlm.log.model import Codec
from rlm.log.produce import ProduceSpec, produce
from tests.grpc_support import ServerThread, free_port, wait_until
from tests.lookup_support import Backend, runtime

#: Enough bytes that the server still has messages to send when the client stops taking them
#: (gRPC's flow-control windows and the stream's buffer hold a few MiB).
RECORDS = 40_000
VALUE_BYTES = 1_000


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path
) -> Iterator[tuple[Runtime, rlm_pb2_grpc.RemoteLogManagerStub]]:
    root = tmp_path_factory.mktemp("grpc-cancel")
    spec = ProduceSpec(
        topics=1,
        partitions=1,
        records=RECORDS,
        value_bytes=VALUE_BYTES,
        segment_bytes=8 << 20,
        transaction_ratio=0.0,
        codecs=(Codec.NONE,),
    )
    produce(root / "logs", spec)
    rt = runtime(
        Backend("sqlite-fs", sqlite_template=sqlite_template), root, root / "logs", auth_enabled=False
    )
    port = free_port()
    authenticator = TokenAuthenticator.from_settings(rt.settings)
    server = ServerThread(lambda: build_grpc_server(rt, authenticator, port=port))
    channel = grpc.insecure_channel(
        f"127.0.0.1:{port}", options=[("grpc.max_receive_message_length", 64 << 20)]
    )
    try:
        yield rt, rlm_pb2_grpc.RemoteLogManagerStub(channel)
    finally:
        channel.close()
        asyncio.run_coroutine_threadsafe(rt.streams.remote.close(), server.loop).result(10)
        server.stop()
        rt.close()


@pytest.mark.parametrize("raw", [False, True], ids=["records", "raw"])
def test_a_stream_cancelled_while_the_server_waits_to_send_logs_no_error(
    served: tuple[Runtime, rlm_pb2_grpc.RemoteLogManagerStub], raw: bool, caplog: pytest.LogCaptureFixture
) -> None:
    rt, stub = served
    registry = rt.metrics.registry
    topic = rt.lookup.log_dirs[0].partitions()[0].topic

    def cancelled() -> float:
        return registry.get_sample_value("rlm_streams_total", {"outcome": "cancelled"}) or 0.0

    before = cancelled()
    with caplog.at_level(logging.WARNING):
        call = stub.ReadRecords(pb.ReadRecordsRequest(topic=topic, partition=0, offset=0, raw=raw))
        next(iter(call))
        time.sleep(1.0)  # the server sends until flow control holds it
        call.cancel()
        wait_until(lambda: registry.get_sample_value("rlm_streams_active") == 0)
        wait_until(lambda: cancelled() == before + 1)
        time.sleep(0.3)  # anything the server logs as the call ends

    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []
    assert registry.get_sample_value("rlm_stream_reads_in_flight") == 0
