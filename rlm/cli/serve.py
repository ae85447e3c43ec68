"""``rlm serve``: the sidecar (copier, retention, REST and gRPC) in one process."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Coroutine
from typing import Any

from rlm.cli.common import add_settings_options, settings_from_args


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``serve``."""
    serve = sub.add_parser("serve", help="run the sidecar: copier, retention, REST and gRPC")
    add_settings_options(serve)
    serve.add_argument("--http-port", type=int, help="REST port (RLM_HTTP_PORT)")
    serve.add_argument("--grpc-port", type=int, help="gRPC port (RLM_GRPC_PORT)")
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    serve.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    from api.server import serve
    from rlm.logs import configure_logging

    configure_logging(args.log_level)
    settings = settings_from_args(args)
    changes = {}
    if args.http_port is not None:
        changes["http_port"] = args.http_port
    if args.grpc_port is not None:
        changes["grpc_port"] = args.grpc_port
    if changes:
        settings = settings.replace(**changes)
    return _run(serve(settings))


def _run(main: Coroutine[Any, Any, int]) -> int:
    """Run on uvloop when it is installed (uvicorn[standard] brings it; uvicorn picks it too):
    it costs the HTTP server a good part less CPU per request than asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)
