"""``rlm log ...``: tools for Kafka log directories (dump, verify, reindex, find-offset, produce)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rlm.arguments import INT32_MAX
from rlm.cli.common import integer
from rlm.errors import NotFoundError
from rlm.log.model import Codec, TimestampAndOffset

#: Kafka's smallest ``segment.bytes`` (``LegacyRecord.RECORD_OVERHEAD_V0``).
MIN_SEGMENT_BYTES = 14
#: Times ``find-offset`` lists the directory again when a segment it listed is gone, as lookups
#: do (:data:`rlm.lookup.service.MAX_LISTINGS`).
MAX_LISTINGS = 3


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``log`` command group."""
    parser = sub.add_parser("log", help="inspect, verify and generate Kafka log directories")
    cmds = parser.add_subparsers(dest="log_command", required=True, metavar="LOG_COMMAND")

    dump = cmds.add_parser("dump", help="print batches (and records) of a segment, index or partition")
    dump.add_argument("path", type=Path, help=".log/.index/.timeindex/.txnindex/.snapshot or partition dir")
    dump.add_argument("--records", action="store_true", help="print every record too")
    dump.add_argument("--json", action="store_true", help="one JSON object per line")
    dump.set_defaults(func=_dump)

    verify = cmds.add_parser("verify", help="check CRCs, offsets and indexes; exit 1 on any problem")
    verify.add_argument("path", type=Path, help="a .log file, a partition directory or a log directory")
    verify.add_argument("--shallow", action="store_true", help="check CRCs without decoding records")
    verify.set_defaults(func=_verify)

    reindex = cmds.add_parser(
        "reindex",
        help="rebuild missing or corrupt indexes of a partition (the broker must be stopped)",
        description="Rebuild the missing or wrong indexes of a partition as Kafka's recovery would. "
        "Stop the broker first: it keeps its indexes open and writes them itself, and a broker "
        "holding the log directory's .lock is refused. The new files get the owner and mode of "
        "those they replace (or of the segment's .log).",
    )
    reindex.add_argument("partition_dir", type=Path)
    reindex.add_argument("--force", action="store_true", help="rebuild every segment's indexes")
    reindex.add_argument(
        "--skip-lock-check",
        action="store_true",
        help="write even though a process holds the log directory's .lock (only when no broker "
        "runs on it, e.g. a lock the filesystem reports wrongly)",
    )
    reindex.add_argument(
        "--index-interval-bytes",
        type=integer("--index-interval-bytes", 0, INT32_MAX),
        default=4096,
        help="the topic's index.interval.bytes (at least 0, as in Kafka; default 4096)",
    )
    reindex.set_defaults(func=_reindex)

    find = cmds.add_parser("find-offset", help="offset of the first record with timestamp >= T")
    find.add_argument("partition_dir", type=Path)
    find.add_argument(
        "--timestamp",
        required=True,
        help="epoch ms, ISO-8601, or latest|earliest|max-timestamp|earliest-local|latest-tiered "
        "(-1..-5; latest-tiered: -1, a local log knows nothing tiered)",
    )
    find.add_argument("--json", action="store_true")
    find.set_defaults(func=_find_offset)

    produce = cmds.add_parser("produce", help="generate a realistic Kafka log directory")
    produce.add_argument("out_dir", type=Path)
    produce.add_argument("--topics", type=integer("--topics", 1, INT32_MAX), default=2)
    produce.add_argument("--partitions", type=integer("--partitions", 1, INT32_MAX), default=2)
    produce.add_argument(
        "--records", type=integer("--records", 0, INT32_MAX), default=10_000, help="records per partition"
    )
    produce.add_argument(
        "--segment-bytes",
        type=integer("--segment-bytes", MIN_SEGMENT_BYTES, INT32_MAX),
        default=512 * 1024,
        help=f"segment.bytes (at least {MIN_SEGMENT_BYTES}, as in Kafka)",
    )
    produce.add_argument("--value-bytes", type=integer("--value-bytes", 0, INT32_MAX), default=120)
    produce.add_argument("--max-batch-records", type=integer("--max-batch-records", 1, INT32_MAX), default=64)
    produce.add_argument(
        "--codecs", default="none,gzip,snappy,lz4,zstd", help="comma-separated codecs to mix"
    )
    produce.add_argument(
        "--legacy-batches",
        type=integer("--legacy-batches", 0, INT32_MAX),
        default=0,
        help="v1 batches first (topic 0)",
    )
    produce.add_argument("--seed", type=int, default=0)
    produce.add_argument("--quiet", action="store_true", help="no progress bar")
    produce.set_defaults(func=_produce)


def _dump(args: argparse.Namespace) -> int:
    from rlm.cli.dump import dump_path

    if not args.path.exists():
        raise NotFoundError(f"{args.path} does not exist")
    unread = dump_path(args.path, print, records=args.records, as_json=args.json)
    for problem in unread:
        print(problem, file=sys.stderr)
    return 1 if unread else 0


def _verify(args: argparse.Namespace) -> int:
    from rlm.log.verify import verify_path

    if not args.path.exists():
        raise NotFoundError(f"{args.path} does not exist")
    problems = verify_path(args.path, deep=not args.shallow)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"{len(problems)} problem(s) found in {args.path}", file=sys.stderr)
        return 1
    print(f"{args.path}: OK")
    return 0


def _reindex(args: argparse.Namespace) -> int:
    from rlm.log.broker_lock import ensure_broker_stopped
    from rlm.log.logdir import open_partition
    from rlm.log.reindex import reindex_partition

    partition = open_partition(args.partition_dir)
    if not args.skip_lock_check:
        ensure_broker_stopped(partition.path.resolve().parent)
    results = reindex_partition(
        partition,
        force=args.force,
        index_interval_bytes=args.index_interval_bytes,
    )
    failed = False
    for result in results:
        name = result.segment.log_path.name
        if result.corruption is not None:
            failed = True
            print(f"{result.corruption}: the segment's indexes are left as they are", file=sys.stderr)
            continue
        print(f"{name}: {'rebuilt' if result.rebuilt else 'kept'} ({result.reason})")
    return 1 if failed else 0


def _find_offset(args: argparse.Namespace) -> int:
    from rlm.timestamps import parse_timestamp

    timestamp = parse_timestamp(args.timestamp)
    for listing in range(1, MAX_LISTINGS + 1):
        try:
            found = _offset_for(args.partition_dir, timestamp)
            break
        except FileNotFoundError:
            # A segment listed is gone: the broker's retention deleted it (or its cleaner swapped
            # it) under the search. Listed again, as lookups do; a directory gone is NotFoundError.
            if listing == MAX_LISTINGS:
                raise
    answer = found or TimestampAndOffset(-1, -1, -1)
    if args.json:
        print(
            json.dumps(
                {
                    "offset": answer.offset,
                    "timestamp": answer.timestamp,
                    "leader_epoch": answer.leader_epoch,
                }
            )
        )
    else:
        print(f"offset: {answer.offset} timestamp: {answer.timestamp} leader_epoch: {answer.leader_epoch}")
    return 0


def _offset_for(partition_dir: str, timestamp: int) -> TimestampAndOffset | None:
    """The answer of ``rlm log find-offset`` from one listing of the partition's directory.

    Raises:
        FileNotFoundError: a listed segment is gone.
    """
    from rlm.log.checkpoints import epoch_for_offset
    from rlm.log.logdir import open_partition
    from rlm.timestamps import SpecialTimestamp

    partition = open_partition(partition_dir)
    found: TimestampAndOffset | None
    # The leader epochs as lookups answer for a partition the remote tier holds nothing of: the
    # latest epoch for LATEST, the epoch of the offset for the earliest ones.
    epochs = partition.leader_epochs()
    hw = partition.high_watermark()
    latest = partition.log_end_offset() if hw is None else hw
    if timestamp == SpecialTimestamp.LATEST:
        found = TimestampAndOffset(-1, latest, epochs[-1].epoch if epochs else -1)
    elif timestamp in (SpecialTimestamp.EARLIEST, SpecialTimestamp.EARLIEST_LOCAL):
        start = partition.log_start_offset()
        found = TimestampAndOffset(-1, start, epoch_for_offset(epochs, start))
    elif timestamp == SpecialTimestamp.MAX_TIMESTAMP:
        found = partition.max_timestamp_offset()
    elif timestamp == SpecialTimestamp.LATEST_TIERED:
        found = None  # a broker's local log knows nothing tiered
    else:
        found = partition.find_offset_by_timestamp(timestamp)
    if timestamp >= 0 or timestamp == SpecialTimestamp.MAX_TIMESTAMP:
        # As Kafka's ListOffsets: an answer from the last fetchable offset (LATEST's) on is none.
        found = found if found is not None and found.offset < latest else None
    return found


def _produce(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from rlm.errors import ConfigError
    from rlm.log.produce import ProduceSpec, produce

    try:
        codecs = tuple(Codec[name.strip().upper()] for name in args.codecs.split(",") if name.strip())
    except KeyError as exc:
        raise ConfigError(f"unknown codec {exc.args[0]!r}: use none, gzip, snappy, lz4 or zstd") from exc
    if args.out_dir.exists() and any(args.out_dir.iterdir()):
        raise ConfigError(f"{args.out_dir} is not empty; produce writes a new log directory")
    spec = ProduceSpec(
        topics=args.topics,
        partitions=args.partitions,
        records=args.records,
        segment_bytes=args.segment_bytes,
        value_bytes=args.value_bytes,
        max_batch_records=args.max_batch_records,
        codecs=codecs or (Codec.NONE,),
        legacy_batches=args.legacy_batches,
        seed=args.seed,
    )
    total = spec.topics * spec.partitions * spec.records
    with tqdm(total=total, unit="rec", unit_scale=True, disable=args.quiet, desc="produce") as bar:

        def advance(records: int) -> None:
            bar.update(records)

        summary = produce(args.out_dir, spec, progress=advance)
    print(
        f"wrote {summary.records} records in {summary.batches} batches, {summary.segments} segments, "
        f"{summary.bytes} bytes, {summary.partitions} partitions to {args.out_dir} "
        f"({summary.transactions_committed} transactions committed, {summary.transactions_aborted} aborted)"
    )
    return 0
