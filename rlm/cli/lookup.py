"""``rlm lookup``: which offset was at time T? In-process, or against a running rlm over gRPC."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rlm.arguments import INT32_MAX
from rlm.cli.common import add_settings_options, integer, settings_from_args
from rlm.errors import NotFoundError, RlmError


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``lookup``."""
    lookup = sub.add_parser("lookup", help="offset of the first record at or after a timestamp, both tiers")
    lookup.add_argument("topic")
    lookup.add_argument("partition", type=integer("partition", 0, INT32_MAX))
    lookup.add_argument(
        "--timestamp", required=True, help="epoch ms, ISO-8601, or latest|earliest|max-timestamp|..."
    )
    lookup.add_argument(
        "--timeout-ms", type=integer("--timeout-ms", 1, 3_600_000), help="wait at most this long"
    )
    lookup.add_argument("--grpc", metavar="HOST:PORT", help="ask a running rlm over gRPC instead")
    lookup.add_argument("--token", help="bearer token for --grpc (or RLM_TOKEN)")
    add_settings_options(lookup)
    lookup.set_defaults(func=_lookup)


def _lookup(args: argparse.Namespace) -> int:
    answer = _over_grpc(args) if args.grpc else _in_process(args)
    print(json.dumps(answer))
    return 0


def _in_process(args: argparse.Namespace) -> dict[str, Any]:
    from rlm.bootstrap import build_runtime
    from rlm.lookup.list_offsets import ErrorCode
    from rlm.metastore.model import TopicPartition
    from rlm.timestamps import parse_timestamp

    runtime = build_runtime(settings_from_args(args), index_cache_on_demand=True)
    try:
        result = runtime.list_offsets.find_one(
            TopicPartition(args.topic, args.partition), parse_timestamp(args.timestamp), args.timeout_ms
        )
    finally:
        runtime.close()
    if result.error_code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        raise NotFoundError(result.error_message or f"unknown partition {args.topic}-{args.partition}")
    if result.error_code is not ErrorCode.NONE:
        raise RlmError(f"{result.error_code.name}: {result.error_message}")
    return {
        "topic": args.topic,
        "partition": args.partition,
        "offset": result.offset,
        "timestamp": result.timestamp,
        "leader_epoch": result.leader_epoch,
        "tier": result.tier,
    }


def _over_grpc(args: argparse.Namespace) -> dict[str, Any]:
    import os

    from api.server import lookup_over_grpc

    token = args.token or os.environ.get("RLM_TOKEN", "")
    timeout_s = (args.timeout_ms or 30_000) / 1000
    return lookup_over_grpc(args.grpc, token, args.topic, args.partition, args.timestamp, timeout_s)
