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
from rlm.errors import InvalidArgumentError
from rlm.timestamps import SpecialTimestamp, parse_timestamp


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
    _register_export(jobs)
    _register_rebuild(jobs)


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


# -- export ---------------------------------------------------------------------------------------


def _timestamp_ms(text: str) -> int:
    """Epoch milliseconds, or an ISO-8601 time (UTC unless it names its zone), parsed as every API
    parses a timestamp (:func:`~rlm.timestamps.parse_timestamp`: exact, a fraction of a
    millisecond rounded up); the special values name no time to export from or to."""
    try:
        at = parse_timestamp(text)
    except InvalidArgumentError as exc:
        raise argparse.ArgumentTypeError(exc.reason) from None
    if at < 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is a special value ({SpecialTimestamp(at).name}): give epoch milliseconds "
            "or an ISO-8601 time"
        )
    return at


def _register_export(jobs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    export = jobs.add_parser(
        "export",
        help="write the remote tier's records as Parquet files or an Iceberg table",
        description=(
            "Write one row per record of the remote tier (topic, partition, offset, timestamp, "
            "timestamp_type, key, value, headers, leader_epoch, producer_id): Parquet files "
            "partitioned by topic, partition and date, committed from a staging directory; or "
            "one Iceberg snapshot per run. Executors read the remote tier, never a broker's disks."
        ),
    )
    _add_common_options(export)
    export.add_argument(
        "--output", required=True, help="Parquet: a directory path or URI; Iceberg: namespace.table"
    )
    export.add_argument("--format", choices=["parquet", "iceberg"], default="parquet")
    export.add_argument(
        "--from", dest="from_ms", type=_timestamp_ms, help="from the first record with timestamp ≥ this"
    )
    export.add_argument(
        "--to",
        dest="to_ms",
        type=_timestamp_ms,
        help="up to the first record with timestamp ≥ this, excluded",
    )
    export.add_argument(
        "--isolation", choices=["read_committed", "read_uncommitted"], default="read_committed"
    )
    export.add_argument(
        "--incremental",
        action="store_true",
        help="continue from where the previous run to this output stopped",
    )
    export.set_defaults(func=_export)


def _export(args: argparse.Namespace) -> int:
    import json

    from rlm.pipeline.export.job import ExportFormat, ExportOptions
    from rlm.pipeline.export.report import render_text
    from rlm.pipeline.export.rows import Isolation
    from rlm.pipeline.spark.jobs import run_export
    from rlm.pipeline.spark.session import SparkOptions, parse_conf

    settings = load_settings(args.config)
    spark = SparkOptions(master=args.master, app_name="rlm spark export", conf=parse_conf(args.conf))
    options = ExportOptions(
        output=args.output,
        format=ExportFormat(args.format),
        topics=tuple(args.topic),
        partitions=tuple(args.partition),
        from_ms=args.from_ms,
        to_ms=args.to_ms,
        isolation=Isolation(args.isolation),
        incremental=args.incremental,
    )
    report = run_export(settings, spark, options, progress=False if args.quiet else None)
    sys.stdout.write(json.dumps(report.to_json(), indent=2) + "\n" if args.json else render_text(report))
    return 0


# -- rebuild-metadata -----------------------------------------------------------------------------


def _register_rebuild(jobs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    rebuild = jobs.add_parser(
        "rebuild-metadata",
        help="rebuild the metadata database's segment rows from the remote tier's objects",
        description=(
            "Disaster recovery: write a COPY_SEGMENT_FINISHED row for every complete segment "
            "object set under --remote into the empty, migrated database --metadata, from the "
            "objects' own descriptions (or, for objects copied before those, from reading them). "
            "Sets that repeat a range, incomplete sets and other keys are listed as orphans; "
            "a set missing an object is the only incomplete one. A set whose description cannot "
            "be used is read instead (listed as a problem), and one that cannot be read either "
            "is an orphan never deleted. When the store fails while sets are described, nothing "
            "is written or deleted: run the job again."
        ),
    )
    _add_common_options(rebuild)
    rebuild.add_argument("--remote", help="the remote tier's URL (default: remote.url)")
    rebuild.add_argument("--metadata", help="the empty, migrated database's URL (default: metadata.url)")
    rebuild.add_argument("--delete-orphans", action="store_true", help="delete the orphan segment objects")
    rebuild.set_defaults(func=_rebuild)


def _rebuild(args: argparse.Namespace) -> int:
    import json

    from rlm.pipeline.rebuild.job import RebuildOptions
    from rlm.pipeline.spark.jobs import run_rebuild
    from rlm.pipeline.spark.session import SparkOptions, parse_conf

    settings = load_settings(args.config)
    changes = {"remote_url": args.remote, "metadata_url": args.metadata}
    settings = dataclasses.replace(settings, **{k: v for k, v in changes.items() if v is not None})
    spark = SparkOptions(
        master=args.master, app_name="rlm spark rebuild-metadata", conf=parse_conf(args.conf)
    )
    options = RebuildOptions(topics=tuple(args.topic), delete_orphans=args.delete_orphans)
    report = run_rebuild(settings, spark, options, progress=False if args.quiet else None)
    if args.json:
        sys.stdout.write(json.dumps(report.to_json(), indent=2) + "\n")
    else:
        read = report.segments - report.from_descriptions
        deleted = sum(o.deleted for o in report.orphans)
        kept = len(report.orphans) - deleted
        lines = [
            f"{report.segments} segments of {report.partitions} partitions rebuilt "
            f"({report.from_descriptions} from their descriptions, {read} read), "
            f"{len(report.orphans)} orphans"
            + (f" ({deleted} deleted, {kept} kept)" if report.deleted_orphans else "")
        ]
        lines += [f"problem: {', '.join(p.keys)}: {p.reason}" for p in report.problems]
        lines += [
            f"orphan: {', '.join(o.keys)}: {o.reason}"
            + (" (deleted)" if o.deleted else f" (kept: {o.kept})" if o.kept else "")
            + (f" (retired mark: {o.marked})" if o.marked else "")
            for o in report.orphans
        ]
        sys.stdout.write("\n".join(lines) + "\n")
    return 0
