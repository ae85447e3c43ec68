"""``rlm spark ...``: batch jobs over the remote tier on Apache Spark (``local[*]`` by default).

The jobs live in :mod:`rlm.pipeline`, imported only when a job runs: ``rlm --help`` and the other
commands never load Spark.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from rlm.config import load_settings


def _milliseconds(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def _add_common_options(parser: argparse.ArgumentParser) -> None:
    """The options every job takes."""
    parser.add_argument("--config", type=Path, help="YAML settings file (also RLM_CONFIG)")
    parser.add_argument(
        "--master",
        help="Spark master URL (default: spark-submit's, else local[*]): local[N], spark://, yarn, k8s://",
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting, e.g. spark.executor.memory=4g (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--topic", action="append", default=[], help="only this topic (repeatable)")
    parser.add_argument(
        "--partition", action="append", type=int, default=[], help="only this partition number (repeatable)"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress line")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``spark`` and its jobs."""
    spark = sub.add_parser("spark", help="batch jobs over the remote tier on Apache Spark")
    jobs = spark.add_subparsers(dest="job", required=True, metavar="JOB")
    verify = jobs.add_parser(
        "verify",
        help="scrub the remote tier: objects, sizes, gaps, orphans; with --deep CRCs, offsets, indexes",
        description=(
            "Check every finished remote segment (objects present, sizes as recorded; with --deep "
            "every batch's CRC and offsets, the max timestamp, leader epochs and each index file "
            "against the one rebuilt from the log), the offsets across segments and the remote log "
            "start offset, objects no row references and rows stuck in STARTED states. Exit 1 when "
            "any problem is found."
        ),
    )
    _add_common_options(verify)
    verify.add_argument("--deep", action="store_true", help="read every byte (default: HEADs and metadata)")
    verify.add_argument(
        "--cleanup-horizon-ms",
        type=_milliseconds,
        help="report rows in a STARTED state older than this (default: 3600000, one hour)",
    )
    verify.set_defaults(func=_verify)
    _register_compact(jobs)


def _verify(args: argparse.Namespace) -> int:
    from rlm.pipeline.spark.jobs import run_verify
    from rlm.pipeline.spark.session import SparkOptions, parse_conf
    from rlm.pipeline.verify.job import VerifyOptions
    from rlm.pipeline.verify.report import render_json, render_text

    settings = load_settings(args.config)
    spark = SparkOptions(master=args.master, app_name="rlm spark verify", conf=parse_conf(args.conf))
    options = VerifyOptions(deep=args.deep, topics=tuple(args.topic), partitions=tuple(args.partition))
    if args.cleanup_horizon_ms is not None:
        options = dataclasses.replace(options, cleanup_horizon_ms=args.cleanup_horizon_ms)
    report = run_verify(settings, spark, options, progress=False if args.quiet else None)
    sys.stdout.write(render_json(report) if args.json else render_text(report))
    return 0 if report.healthy else 1


# -- rlm spark compact ----------------------------------------------------------------------------


def _register_compact(jobs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    compact = jobs.add_parser(
        "compact",
        help="compact the remote tier of compacted topics (KIP-280 strategies); offsets kept",
        description=(
            "Compact the finished remote segments of every partition of the topics whose "
            "cleanup.policy has compact (or of --topic, which must have it): keep each key's winner "
            "by compaction.strategy (offset, timestamp or header), drop records without a key and "
            "of aborted transactions, tombstones and transaction markers past their delete horizon; "
            "rewrite the changed segments (merged up to segment.bytes) and swap them in. Exit 1 when "
            "a partition failed (the others are compacted)."
        ),
    )
    _add_common_options(compact)
    compact.add_argument(
        "--dry-run", action="store_true", help="read and decide, print what would be removed, write nothing"
    )
    compact.set_defaults(func=_compact)


def _compact(args: argparse.Namespace) -> int:
    from rlm.pipeline.compact.job import CompactOptions
    from rlm.pipeline.compact.report import render_json, render_text
    from rlm.pipeline.spark.jobs import run_compact
    from rlm.pipeline.spark.session import SparkOptions, parse_conf

    settings = load_settings(args.config)
    spark = SparkOptions(master=args.master, app_name="rlm spark compact", conf=parse_conf(args.conf))
    options = CompactOptions(topics=tuple(args.topic), partitions=tuple(args.partition), dry_run=args.dry_run)
    report = run_compact(settings, spark, options, progress=False if args.quiet else None)
    sys.stdout.write(render_json(report) if args.json else render_text(report))
    return 1 if report.failed else 0
