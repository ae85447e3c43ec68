"""The composition root of the API: ``rlm serve`` (and the client of ``rlm lookup --grpc``).

``rlm serve``: one process running the copier loop, the retention loop (whose passes also clean
up unfinished copies), the REST server and the gRPC server, sharing one runtime.

Without log directories it is a query tier (standalone): lookups and fetches answer from the remote
tier alone and neither the copier nor retention runs; the brokers' sidecars tier and expire.

SIGTERM or SIGINT stops it gracefully: the servers stop taking requests and finish the ones in
flight, the loops finish the pass they are in (at most ``LOOP_STOP_TIMEOUT_S``; anything cut short
is left in a state the next start's cleanup handles), leases are released, connections closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Generator
from typing import Any

import uvicorn

from api.auth import TokenAuthenticator
from api.http_protocol import ChunkedHttpProtocol
from api.rest.app import create_app
from rlm.bootstrap import Runtime, build_runtime
from rlm.collector import set_aside
from rlm.config import Settings
from rlm.loops import BackgroundLoop

log = logging.getLogger("rlm.serve")
#: How long a stop waits for the copier and retention passes in flight.
LOOP_STOP_TIMEOUT_S = 60.0


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own signal handling: ``serve`` owns the process's signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def lookup_over_grpc(
    address: str, token: str, topic: str, partition: int, timestamp: str, timeout_s: float
) -> dict[str, Any]:
    """``rlm lookup --grpc``: ask the rlm at ``address`` (:func:`api.grpc_client.get_offset`)."""
    from api.grpc_client import get_offset

    return get_offset(address, token, topic, partition, timestamp, timeout_s)


async def serve(settings: Settings, *, ready: Callable[[Runtime], None] | None = None) -> int:
    """Run everything until SIGTERM/SIGINT; returns the exit code."""
    authenticator = TokenAuthenticator.from_settings(settings)
    runtime = build_runtime(settings)
    try:
        return await _serve(settings, runtime, authenticator, ready)
    finally:
        runtime.close()
        log.info("stopped")


async def _serve(
    settings: Settings,
    runtime: Runtime,
    authenticator: TokenAuthenticator,
    ready: Callable[[Runtime], None] | None,
) -> int:
    from api.grpc_server import build_grpc_server

    interval = settings.remote_log_manager_task_interval_ms / 1000

    def count_error(loop: str) -> Callable[[], None]:
        return lambda: runtime.metrics.loop_errors.labels(loop).inc()

    loops: list[BackgroundLoop] = []
    if settings.log_dirs:
        loops = [
            BackgroundLoop("copier", runtime.copier.run_once, interval, count_error("copier")),
            BackgroundLoop("retention", runtime.retention.run_once, interval, count_error("retention")),
        ]
    else:
        log.info("no log.dirs: a query tier over the remote tier; the copier and retention are off")
    tls = None
    if settings.tls_cert_file is not None and settings.tls_key_file is not None:
        tls = (settings.tls_cert_file.read_bytes(), settings.tls_key_file.read_bytes())
    grpc_server = build_grpc_server(
        runtime, authenticator, host=settings.grpc_host, port=settings.grpc_port, tls=tls
    )
    app = create_app(settings, runtime_=runtime, authenticator=authenticator)
    http = _Uvicorn(
        uvicorn.Config(
            app,
            http=ChunkedHttpProtocol,
            ws="none",  # no route is a WebSocket: not importing a WebSocket server saves 4 MiB
            host=settings.http_host,
            port=settings.http_port,
            log_config=None,
            access_log=False,
            ssl_certfile=str(settings.tls_cert_file) if settings.tls_cert_file else None,
            ssl_keyfile=str(settings.tls_key_file) if settings.tls_key_file else None,
        )
    )
    frozen = set_aside()  # what start-up made stays: later full collections skip it
    log.debug("objects set aside from the collector: %d", frozen)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    await grpc_server.start()
    http_task = asyncio.create_task(http.serve(), name="rest")
    for background in loops:
        background.start()
    log.info(
        "serving",
        extra={
            "http_port": settings.http_port,
            "grpc_port": settings.grpc_port,
            "log_dirs": ",".join(str(d) for d in settings.log_dirs),
        },
    )
    if ready is not None:
        ready(runtime)
    stop_wait = asyncio.create_task(stopping.wait())
    await asyncio.wait({http_task, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
    log.info("stopping")
    runtime.copier.stopping.set()  # the segment in flight finishes, no other starts
    http.should_exit = True
    await grpc_server.stop(grace=10)
    with contextlib.suppress(Exception):
        await http_task
    stop_wait.cancel()
    clean = all(await asyncio.gather(*(asyncio.to_thread(b.stop, LOOP_STOP_TIMEOUT_S) for b in loops)))
    if not clean:
        log.warning("a background pass did not finish in time; its work is left for cleanup")
    failed = not http_task.cancelled() and http_task.exception() is not None
    return 1 if failed else 0
