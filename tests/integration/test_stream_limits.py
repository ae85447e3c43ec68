"""Range streams under load, over real HTTP (uvicorn): the stream bound and clients that go away.

The remote store holds its reads at a gate, so that streams stay open as long as a test
wants; it counts the reads, so that a test can tell that none starts after a client left.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import httpx
import pytest
import uvicorn

from api.auth import TokenAuthenticator
from api.rest.app import create_app
from api.streaming import open_stream
from rlm.bootstrap import Runtime
from rlm.errors import RequestTimedOutError
from rlm.log.logdir import LogDir
from rlm.storage.protocol import RemoteStorage
from rlm.stream.plan import RangeQuery
from tests.grpc_support import GatedStorage, free_port, wait_until
from tests.integration.test_fetch import PLAN
from tests.lookup_support import TOPIC, Backend, Tiered, runtime, tier_partition, write_partition

NDJSON = "application/x-ndjson"
URL = f"/v1/topics/{TOPIC}/partitions/0/records"
G = TypeVar("G", bound=GatedStorage)


class CountingGate(GatedStorage):
    """A gated store that counts the reads it was asked for (ranged reads and pieces of streamed
    ones)."""

    def __init__(self, inner: RemoteStorage) -> None:
        super().__init__(inner)
        self.reads = 0

    def at_gate(self) -> None:
        self.reads += 1
        super().at_gate()


class Served:
    """uvicorn serving the REST app on a thread of its own, as ``rlm serve`` runs it (with the
    tokens of the runtime's settings unless given an authenticator)."""

    def __init__(self, rt: Runtime, authenticator: TokenAuthenticator | None = None) -> None:
        if authenticator is None:
            authenticator = TokenAuthenticator.from_settings(rt.settings)
        app = create_app(rt.settings, runtime_=rt, authenticator=authenticator)
        self.port = free_port()
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_config=None, access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="uvicorn-test", daemon=True)
        self.thread.start()
        wait_until(lambda: self.server.started)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def gated_partition(
    request: pytest.FixtureRequest, root: Path, gate: Callable[[RemoteStorage], G], **changes: object
) -> tuple[Tiered, G]:
    """The partition of ``test_fetch`` tiered under ``root`` (SQLite and the filesystem store, small
    stream chunks), its remote store behind ``gate``."""
    log_dir = root / "logs"
    truth = write_partition(log_dir, PLAN)
    gates: list[G] = []

    def wrap(storage: RemoteStorage) -> RemoteStorage:
        gates.append(gate(storage))
        return gates[0]

    backend = Backend("sqlite-fs", sqlite_template=request.getfixturevalue("sqlite_template"))
    rt = runtime(backend, root, log_dir, wrap=wrap, remote_fetch_stream_buffer_bytes=4096, **changes)
    return tier_partition(rt, LogDir(log_dir).partition(TOPIC, 0), truth, PLAN), gates[0]


@pytest.fixture(scope="module")
def gate_and_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Tiered, CountingGate, Served]]:
    root = tmp_path_factory.mktemp("stream-limits")
    tiered, gate = gated_partition(request, root, CountingGate, auth_enabled=False)
    rt = tiered.runtime
    served = Served(rt)
    try:
        yield tiered, gate, served
    finally:
        served.stop()
        rt.close()


def metric(rt: Runtime, name: str, **labels: str) -> float:
    value = rt.metrics.registry.get_sample_value(name, labels or None)
    return 0.0 if value is None else value


def test_the_stream_past_the_bound_is_refused_with_retry_after(
    gate_and_server: tuple[Tiered, CountingGate, Served],
) -> None:
    tiered, gate, served = gate_and_server
    rt = tiered.runtime
    bound = rt.settings.remote_fetch_max_streams
    assert bound == 64  # the default
    params = {"offset": str(tiered.truth.log_start_offset)}

    async def scenario() -> None:
        limits = httpx.Limits(max_connections=bound + 8)
        async with httpx.AsyncClient(base_url=served.url, limits=limits, timeout=30) as client:
            with gate.closed():
                opened = [
                    await client.send(
                        client.build_request("GET", URL, params=params, headers={"Accept": NDJSON}),
                        stream=True,
                    )
                    for _ in range(bound)
                ]
                assert [r.status_code for r in opened] == [200] * bound
                refused = await client.get(URL, params=params, headers={"Accept": NDJSON})
                assert refused.status_code == 429
                assert refused.headers["retry-after"] == "1"
                assert "remote.fetch.max.streams" in refused.json()["error"]
                await opened.pop().aclose()  # one client goes away: its place is free again
                await asyncio.to_thread(wait_until, lambda: rt.streams.active == bound - 1)
                opened.append(
                    await client.send(
                        client.build_request("GET", URL, params=params, headers={"Accept": NDJSON}),
                        stream=True,
                    )
                )
                assert opened[-1].status_code == 200
            bodies = [await r.aread() for r in opened]  # the gate is open: every stream ends
            assert all(b.count(b"\n") > 10 and b"error" not in b for b in bodies)
            for r in opened:
                await r.aclose()

    asyncio.run(scenario())
    wait_until(lambda: rt.streams.active == 0)
    assert metric(rt, "rlm_streams_refused_total") >= 1
    assert metric(rt, "rlm_streams_total", outcome="cancelled") >= 1


def test_a_client_that_goes_away_leaves_no_read_running(
    gate_and_server: tuple[Tiered, CountingGate, Served],
) -> None:
    tiered, gate, served = gate_and_server
    rt = tiered.runtime
    cancelled = metric(rt, "rlm_streams_total", outcome="cancelled")
    with httpx.Client(base_url=served.url, timeout=30) as client, gate.closed() as arrivals:
        with client.stream("GET", URL, params={"offset": "0"}, headers={"Accept": NDJSON}) as answer:
            assert answer.status_code == 200
            assert arrivals.acquire(timeout=10)  # a read is waiting at the gate
            assert metric(rt, "rlm_stream_reads_in_flight") >= 1
        # the client has gone: the stream ends and its read is no longer awaited
        wait_until(lambda: metric(rt, "rlm_streams_total", outcome="cancelled") == cancelled + 1)
        wait_until(lambda: metric(rt, "rlm_stream_reads_in_flight") == 0)
        assert rt.streams.active == 0
        reads = gate.reads
    time.sleep(0.3)  # the gate is open again: a stream still running would read on
    assert gate.reads == reads


def test_a_stream_planned_past_its_deadline_stops_reading_the_remote_tier(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Planning searched the remote tier for the stream's timestamps and was cut off by the
    request's deadline: it stops at its next remote read, holding the fetch thread no longer."""
    tiered, gate = gated_partition(request, tmp_path, CountingGate)
    rt = tiered.runtime
    query = RangeQuery(tiered.tp, from_timestamp=3900, to_timestamp=3990)
    try:
        with gate.closed() as arrivals:

            async def main() -> None:
                with pytest.raises(RequestTimedOutError):
                    await open_stream(rt, query, timeout_ms=300)

            asyncio.run(main())
            assert arrivals.acquire(timeout=10)  # planning waits at the gate, for a remote read
            reads = gate.reads
        wait_until(lambda: rt.fetch_pool.running == 0)
        assert gate.reads == reads, f"planning read on after its deadline: {gate.reads - reads} reads"
        assert rt.streams.active == 0
    finally:
        rt.close()
