"""``rlm serve``: the sidecar (copier, retention, REST and gRPC) in one process."""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from rlm.cli.common import add_settings_options, settings_from_args
from rlm.cli.heap import CHECK_EVERY_READ_BYTES, GiveBackWhenGrown, give_back_freed_heap, keep_freed_blocks
from rlm.config import Settings
from rlm.errors import BrokerIdUnknownError

if TYPE_CHECKING:
    from rlm.bootstrap import Runtime

log = logging.getLogger("rlm.serve")
#: How often ``--wait-for-broker-id`` looks for the broker's meta.properties.
BROKER_ID_POLL_S = 1.0
#: Threads of the event loop's own pool (libuv's, under uvloop), which only resolves host names
#: (``UV_THREADPOOL_SIZE``; libuv's default is 4).
LOOP_THREADS = 2
NATIVE_THREAD_SETTINGS = {
    "UV_THREADPOOL_SIZE": str(LOOP_THREADS),
    # Arrow's jemalloc returns freed pages on its allocation path instead of from a thread of its own.
    "JE_ARROW_MALLOC_CONF": "background_thread:false",
}
"""The threads native libraries start of their own accord, bounded through their environment
variables (unless already set) before they load: every thread of ``serve`` is counted."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``serve``."""
    serve = sub.add_parser("serve", help="run the sidecar: copier, retention, REST and gRPC")
    add_settings_options(serve)
    serve.add_argument("--http-port", type=int, help="REST port (RLM_HTTP_PORT)")
    serve.add_argument("--grpc-port", type=int, help="gRPC port (RLM_GRPC_PORT)")
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    serve.add_argument(
        "--wait-for-broker-id",
        type=_seconds,
        default=0.0,
        metavar="SECONDS",
        help="with broker.id unset, wait up to this long for the broker to write meta.properties to "
        "its log directories (a sidecar may start before the broker formats them; default: no wait)",
    )
    serve.set_defaults(func=_serve)


def _seconds(text: str) -> float:
    """An argparse ``type``: a finite number of seconds ≥ 0 (a negative one is no wait, NaN or
    infinity one that never ends: both refused, not taken so)."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(seconds) and seconds >= 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of seconds ≥ 0")
    return seconds


def _serve(args: argparse.Namespace) -> int:
    for name, value in NATIVE_THREAD_SETTINGS.items():
        os.environ.setdefault(name, value)
    keep_freed_blocks()
    from api.server import serve
    from rlm.logging_config import configure_logging

    configure_logging(args.log_level)
    settings = _settings_once_known(args)
    changes = {}
    if args.http_port is not None:
        changes["http_port"] = args.http_port
    if args.grpc_port is not None:
        changes["grpc_port"] = args.grpc_port
    if changes:
        settings = settings.replace(**changes)
    return _run(serve(settings, ready=_give_back_freed_heap))


def _give_back_freed_heap(runtime: Runtime) -> None:
    """What a burst of streams freed is handed back to the kernel once the streams are idle, and
    while they run once the process has grown by :data:`rlm.cli.heap.GROWN_BYTES`."""
    runtime.streams.when_idle(give_back_freed_heap)
    streams = runtime.streams
    streams.when_read(CHECK_EVERY_READ_BYTES, GiveBackWhenGrown(run=streams.submit))


def _settings_once_known(args: argparse.Namespace) -> Settings:
    """The settings, waiting up to ``--wait-for-broker-id`` for the broker id to be known."""
    deadline = time.monotonic() + args.wait_for_broker_id
    while True:
        try:
            return settings_from_args(args)
        except BrokerIdUnknownError as exc:
            if time.monotonic() >= deadline:
                raise
            log.info("waiting for the broker id: %s", exc)
            time.sleep(BROKER_ID_POLL_S)


def _run(main: Coroutine[Any, Any, int]) -> int:
    """Run on uvloop when it is installed (uvicorn[standard] brings it; uvicorn picks it too):
    it costs the HTTP server a good part less CPU per request than asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)
