"""Health watchers, which need no token, cannot take the places of the calls that do.

A ``Watch`` of the standard health service lasts as long as its client keeps it open, and each
holds one of the server's ``max_concurrent_rpcs`` places: without a bound, a client without a
token could hold them all and every authenticated call would be turned away.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from api.auth import TokenAuthenticator
from api.gen.rlm.v1 import rlm_pb2 as pb
from api.gen.rlm.v1 import rlm_pb2_grpc
from api.grpc_server import build_grpc_server
from rlm.log.model import Codec
from rlm.log.produce import ProduceSpec, produce
from tests.grpc_support import ServerThread, free_port, health_watch
from tests.lookup_support import Backend, runtime

TOKEN = "health-watchers-read-token"
MAX_CONCURRENT_RPCS = 8


@pytest.fixture(scope="module")
def channel(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[grpc.Channel]:
    root = tmp_path_factory.mktemp("health-watchers")
    produce(root / "logs", ProduceSpec(topics=1, partitions=1, records=10, codecs=(Codec.NONE,)))
    rt = runtime(
        Backend("sqlite-fs", sqlite_template=sqlite_template),
        root,
        root / "logs",
        auth_tokens=f"read:{TOKEN}",
    )
    port = free_port()
    server = ServerThread(
        lambda: build_grpc_server(
            rt,
            TokenAuthenticator.from_settings(rt.settings),
            port=port,
            max_concurrent_rpcs=MAX_CONCURRENT_RPCS,
            readiness_refresh_s=0.0,
        )
    )
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as opened:
            yield opened
    finally:
        server.stop()
        rt.close()


def test_watchers_without_a_token_leave_room_for_the_calls_with_one(channel: grpc.Channel) -> None:
    watch = health_watch(channel)
    watches = [watch(health_pb2.HealthCheckRequest(), timeout=30) for _ in range(MAX_CONCURRENT_RPCS)]
    try:
        answered, refused = 0, 0
        for call in watches:
            try:
                assert next(call).status == health_pb2.HealthCheckResponse.SERVING
                answered += 1
            except grpc.RpcError as exc:
                assert exc.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, exc
                refused += 1
        stub = rlm_pb2_grpc.RemoteLogManagerStub(channel)
        try:
            stub.GetConfig(
                pb.GetConfigRequest(), metadata=(("authorization", f"Bearer {TOKEN}"),), timeout=10
            )
        except grpc.RpcError as exc:
            pytest.fail(f"an authenticated call was turned away: {exc.code()}: {exc.details()}")
        assert answered >= 1 and refused >= 1  # some watchers are served, the others turned away
    finally:
        for call in watches:
            call.cancel()
