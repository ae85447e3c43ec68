"""A gRPC ``ReadRecords`` stream reaches a client with gRPC's default limits, whatever its batches
decode to: each message holds at most about ``MESSAGE_BYTES`` of records (text compresses several
times, so a group of stored batches decodes to many times its size), where a client takes at most
4 MiB a message unless told otherwise."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from api.auth import TokenAuthenticator
from api.gen.rlm.v1 import rlm_pb2 as pb
from api.gen.rlm.v1 import rlm_pb2_grpc
from api.grpc_server import build_grpc_server
from api.grpc_stream import MESSAGE_BYTES
from rlm.bootstrap import Runtime
from rlm.log.model import Codec
from rlm.log.produce import ProduceSpec, produce
from tests.grpc_support import ServerThread, free_port
from tests.lookup_support import Backend, runtime

RECORDS = 10_000
#: gRPC's default limit on a message a client receives.
DEFAULT_RECEIVE_BYTES = 4 << 20


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path
) -> Iterator[tuple[Runtime, rlm_pb2_grpc.RemoteLogManagerStub, str]]:
    root = tmp_path_factory.mktemp("grpc-messages")
    spec = ProduceSpec(
        topics=1,
        partitions=1,
        records=RECORDS,
        value_bytes=1_000,
        segment_bytes=64 << 20,
        transaction_ratio=0.0,
        codecs=(Codec.GZIP,),  # text-like values: each stored batch decodes to several times its size
    )
    produce(root / "logs", spec)
    rt = runtime(
        Backend("sqlite-fs", sqlite_template=sqlite_template), root, root / "logs", auth_enabled=False
    )
    port = free_port()
    server = ServerThread(
        lambda: build_grpc_server(rt, TokenAuthenticator.from_settings(rt.settings), port=port)
    )
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")  # gRPC's default limits
    try:
        topic = rt.lookup.log_dirs[0].partitions()[0].topic
        yield rt, rlm_pb2_grpc.RemoteLogManagerStub(channel), topic
    finally:
        channel.close()
        asyncio.run_coroutine_threadsafe(rt.streams.remote.close(), server.loop).result(10)
        server.stop()
        rt.close()


def test_decoded_records_are_sent_in_messages_a_default_client_takes(
    served: tuple[Runtime, rlm_pb2_grpc.RemoteLogManagerStub, str],
) -> None:
    rt, stub, topic = served
    stored = sum(s.size() for s in rt.lookup.log_dirs[0].partition(topic, 0).segments())
    assert stored < RECORDS * 1_000 / 2, "the batches must decode to more than they store"
    messages = list(stub.ReadRecords(pb.ReadRecordsRequest(topic=topic, partition=0, offset=0), timeout=120))
    assert [r.offset for m in messages for r in m.records] == list(range(RECORDS))
    assert max(m.ByteSize() for m in messages) <= MESSAGE_BYTES + 64 * 1024 < DEFAULT_RECEIVE_BYTES
    assert all(m.start_offset == 0 and m.end_offset == RECORDS for m in messages)


def test_raw_batches_are_sent_in_messages_a_default_client_takes(
    served: tuple[Runtime, rlm_pb2_grpc.RemoteLogManagerStub, str],
) -> None:
    rt, stub, topic = served
    request = pb.ReadRecordsRequest(topic=topic, partition=0, offset=0, raw=True)
    messages = list(stub.ReadRecords(request, timeout=120))
    assert max(m.ByteSize() for m in messages) <= MESSAGE_BYTES + 1024
    (segment,) = rt.lookup.log_dirs[0].partition(topic, 0).segments()
    assert b"".join(m.raw_batches for m in messages) == segment.log_path.read_bytes()
