"""``rlm copy`` and ``rlm retention``: the sidecar's background jobs, once or in a loop; ``rlm copy
skip`` and ``rlm copy skipped``: offsets an operator decides the remote tier will never hold;
``rlm retention delete-topic``: a deleted topic's partitions, deleted from the remote tier by hand;
``rlm retention removed-topics``: the deleted topics retention finds in the broker's metadata log."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from rlm.cli.common import add_settings_options, settings_from_args
from rlm.config import Settings
from rlm.errors import ConfigError, NotFoundError, RlmError
from rlm.loops import BackgroundLoop
from rlm.tiering.copier import CopyOutcome
from rlm.tiering.retention import RetentionOutcome

if TYPE_CHECKING:
    from rlm.log.broker_dirs import OfflineLogDir
    from rlm.log.logdir import PartitionDir
    from rlm.metastore.model import TopicPartition


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``copy`` and ``retention``."""
    copy = sub.add_parser("copy", help="tier rolled segments to the remote store")
    copy.add_argument("--once", action="store_true", help="one pass, then exit (default: loop)")
    copy.add_argument("--quiet", action="store_true", help="no progress bar")
    add_settings_options(copy)
    copy.set_defaults(func=_copy)
    skips = copy.add_subparsers(dest="copy_command", metavar="COPY_COMMAND")
    skip = skips.add_parser(
        "skip",
        help="record offsets the remote tier will never hold, so that copying goes on above them",
        description="Record that the remote tier will never hold offsets FROM..TO of a partition "
        "(e.g. a segment that cannot be copied and cannot be repaired); the copier then copies on "
        "above them. The range is listed by `rlm copy skipped` and in GET /v1/topics.",
    )
    skip.add_argument("topic")
    skip.add_argument("partition", type=int)
    skip.add_argument("--from-offset", type=int, required=True, help="first offset to skip")
    skip.add_argument("--to-offset", type=int, required=True, help="last offset to skip (inclusive)")
    skip.add_argument("--reason", required=True, help="why, for whoever finds the gap later")
    add_settings_options(skip, nested=True)
    skip.set_defaults(func=_skip)
    listed = skips.add_parser("skipped", help="list the skipped offset ranges")
    listed.add_argument("topic", nargs="?", help="only this topic")
    add_settings_options(listed, nested=True)
    listed.set_defaults(func=_skipped)
    retention = sub.add_parser("retention", help="delete remote segments past retention")
    retention.add_argument("--once", action="store_true", help="one pass, then exit (default: loop)")
    add_settings_options(retention)
    retention.set_defaults(func=_retention)
    deletions = retention.add_subparsers(dest="retention_command", metavar="RETENTION_COMMAND")
    delete_topic = deletions.add_parser(
        "delete-topic",
        help="delete a deleted topic's partitions from the remote tier",
        description="Delete every remote segment of a topic deleted from the Kafka cluster, as Kafka "
        "deletes a deleted topic's remote log (DELETE_PARTITION_MARKED -> STARTED -> FINISHED). "
        "Retention does so on its own once the broker's KRaft metadata log holds the topic's "
        "committed removal (rlm retention removed-topics); this deletes one by hand where it cannot "
        "(a ZooKeeper-era cluster, a removal the metadata log no longer holds). The operator names "
        "the deleted topic's id (kafka-topics --describe printed it; GET /v1/topics gives it as each "
        "partition's remote_topic_id): a partition the "
        "remote tier records under another id, that this broker still holds, or whose topic the "
        "broker's metadata log holds live, is refused.",
    )
    delete_topic.add_argument("topic")
    delete_topic.add_argument(
        "--topic-id",
        required=True,
        action="append",
        help="the deleted topic's id (Kafka's base64 form); repeatable, for partitions whose remote "
        "segments name two deleted topics of the name (a store rebuilt before one was retired)",
    )
    delete_topic.add_argument(
        "--partition", type=int, action="append", help="only this partition (repeatable; default: all)"
    )
    delete_topic.add_argument(
        "--dry-run", action="store_true", help="check and count what would be deleted; change nothing"
    )
    delete_topic.add_argument(
        "--idle-ms",
        type=int,
        help="wait for a partition whose copy lease a sidecar held (or gave back) or claimed within "
        "this long (default: ten remote.log.manager.lease.ttl.ms)",
    )
    add_settings_options(delete_topic, nested=True)
    delete_topic.set_defaults(func=_delete_topic)
    removed = deletions.add_parser(
        "removed-topics",
        help="the deleted topics found in the broker's KRaft metadata log, and their remote partitions",
        description="List the RemoveTopicRecords of the broker's KRaft metadata log (metadata.log.dir, "
        "else the first log directory holding __cluster_metadata-0): each deleted topic, whether its "
        "removal is committed (below the latest snapshot: retention deletes its remote partitions) "
        "or waits for the broker's next snapshot, and the state of its partitions in the remote tier.",
    )
    add_settings_options(removed, nested=True)
    removed.set_defaults(func=_removed_topics)


def _broker_settings(args: argparse.Namespace) -> Settings:
    """The settings of a job that works on the broker's partitions: without log.dirs it has none."""
    settings = settings_from_args(args)
    if not settings.log_dirs:
        raise ConfigError(
            f"rlm {args.command} works on the broker's log directories: set log.dirs (RLM_LOG_DIRS)"
        )
    return settings


def _loop(name: str, job: Callable[[], None], interval_s: float) -> int:
    """Run ``job`` every interval until SIGTERM/SIGINT, letting the pass in flight finish."""
    loop = BackgroundLoop(name, job, interval_s)

    def handle(signum: int, frame: FrameType | None) -> None:
        loop.request_stop()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    loop.run()
    return 0


def _exit_code(failed: bool, offline: Sequence[OfflineLogDir], done: str) -> int:
    """1 when a partition failed or a log directory could not be read (each said on stderr)."""
    for log_dir in offline:
        print(f"rlm: error: {log_dir.problem}; its partitions were not {done}", file=sys.stderr)
    return 1 if failed or offline else 0


def _describe_copy(o: CopyOutcome) -> str:
    if o.error is not None:
        return f"{o.topic_partition}: error: {o.error}"
    if o.skipped is not None:
        return f"{o.topic_partition}: skipped ({o.skipped})"
    return (
        f"{o.topic_partition}: copied {o.copied_segments} segments ({o.copied_bytes} bytes), "
        f"cleaned {o.cleaned_segments}, lag {o.lag_segments} segments"
    )


def _copy(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from rlm.bootstrap import build_runtime

    runtime = build_runtime(_broker_settings(args), index_cache_on_demand=True)
    try:
        if args.once:
            found = runtime.copier.partitions()
            total = len(found.partitions) + len(found.duplicates)
            with tqdm(total=total, unit="partition", disable=args.quiet, desc="copy") as bar:

                def advance(outcome: CopyOutcome) -> None:
                    bar.update(1)

                outcomes = runtime.copier.run_once(found, progress=advance)
            for outcome in outcomes:
                print(_describe_copy(outcome), file=sys.stdout if outcome.error is None else sys.stderr)
            return _exit_code(any(o.error is not None for o in outcomes), found.offline, "tiered")

        def copy_pass() -> None:
            for outcome in runtime.copier.run_once():
                if outcome.error is not None or outcome.copied_segments:
                    print(_describe_copy(outcome), file=sys.stderr)

        return _loop("copier", copy_pass, runtime.settings.remote_log_manager_task_interval_ms / 1000)
    finally:
        runtime.close()


def _describe_retention(o: RetentionOutcome) -> str:
    if o.error is not None:
        return f"{o.topic_partition}: error: {o.error}"
    if o.skipped is not None:
        return f"{o.topic_partition}: skipped ({o.skipped})"
    if o.partition_deleted:
        return (
            f"{o.topic_partition}: its topic was deleted: deleted {o.deleted_segments} segments "
            f"({o.deleted_bytes} bytes) and the partition from the remote tier"
        )
    return (
        f"{o.topic_partition}: deleted {o.deleted_segments} segments ({o.deleted_bytes} bytes), "
        f"remote log start offset {o.log_start_offset}"
    )


def _retention(args: argparse.Namespace) -> int:
    from rlm.bootstrap import build_runtime

    runtime = build_runtime(_broker_settings(args), index_cache_on_demand=True)
    try:
        if args.once:
            found = runtime.retention.lister.list()
            outcomes = runtime.retention.run_once(found)
            for outcome in outcomes:
                print(_describe_retention(outcome), file=sys.stdout if outcome.error is None else sys.stderr)
            return _exit_code(any(o.error is not None for o in outcomes), found.offline, "expired")

        def retention_pass() -> None:
            for outcome in runtime.retention.run_once():
                if outcome.error is not None or outcome.deleted_segments or outcome.partition_deleted:
                    print(_describe_retention(outcome), file=sys.stderr)

        return _loop("retention", retention_pass, runtime.settings.remote_log_manager_task_interval_ms / 1000)
    finally:
        runtime.close()


def _delete_topic(args: argparse.Namespace) -> int:
    from rlm.bootstrap import build_runtime
    from rlm.log.checkpoints import topic_id_to_uuid
    from rlm.log.cluster_metadata import find_cluster_metadata, read_cluster_metadata
    from rlm.metastore.model import TopicPartition
    from rlm.storage.layout import validate_topic
    from rlm.tiering.copier import wall_clock_ms
    from rlm.tiering.partition_deletion import delete_partition, deleted_topic_partitions

    settings = settings_from_args(args)
    topic = validate_topic(args.topic)
    topic_ids = []
    for given in args.topic_id:
        try:
            topic_ids.append(topic_id_to_uuid(given))
        except ValueError as exc:
            raise ConfigError(f"--topic-id {given!r} is not a Kafka topic id: {exc}") from exc
    idle_ms = args.idle_ms if args.idle_ms is not None else 10 * settings.remote_log_manager_lease_ttl_ms
    if idle_ms < 0:
        raise ConfigError(f"--idle-ms {idle_ms} is negative")
    # A live topic's id given by mistake is refused where the broker's metadata log says so.
    metadata_log = find_cluster_metadata(list(settings.log_dirs), settings.metadata_log_dir)
    live_topics = read_cluster_metadata(metadata_log).topics if metadata_log is not None else {}
    runtime = build_runtime(settings, index_cache_on_demand=True)
    try:
        runtime.copier.cluster_guard.check()  # another cluster's store: its topics are not ours to delete
        if args.partition:
            partitions = [TopicPartition(topic, p) for p in sorted(set(args.partition))]
        else:
            partitions = deleted_topic_partitions(runtime.store, topic)
        failed = False
        for tp in partitions:
            record = runtime.store.get_partition(tp)
            recorded = None if record is None else record.topic_id
            topic_id = recorded if recorded in topic_ids else topic_ids[0]
            try:
                done = delete_partition(
                    runtime.store,
                    runtime.storage,
                    runtime.leases,
                    tp,
                    topic_id,
                    clock=wall_clock_ms,
                    log_dirs=settings.log_dirs,
                    dry_run=args.dry_run,
                    idle_ms=idle_ms,
                    live_topics=live_topics,
                    removed=topic_ids,
                )
            except RlmError as exc:
                print(f"{tp}: error: {exc}", file=sys.stderr)
                failed = True
                continue
            if done.skipped is not None:
                print(f"{tp}: skipped ({done.skipped})")
                failed = failed or done.run_again
            else:
                verb = "would delete" if args.dry_run else "deleted"
                print(f"{tp}: {verb} {done.deleted_segments} segments ({done.deleted_bytes} bytes)")
        return 1 if failed else 0
    finally:
        runtime.close()


def _removed_topics(args: argparse.Namespace) -> int:
    from rlm.bootstrap import open_store
    from rlm.log.checkpoints import uuid_to_topic_id
    from rlm.log.cluster_metadata import find_cluster_metadata, read_cluster_metadata

    settings = settings_from_args(args)
    path = find_cluster_metadata(list(settings.log_dirs), settings.metadata_log_dir)
    if path is None:
        where = settings.metadata_log_dir or ", ".join(map(str, settings.log_dirs)) or "no log.dirs"
        print(f"no KRaft metadata log (__cluster_metadata-0) in {where}: `rlm retention delete-topic` "
              "deletes a deleted topic's remote log by hand")  # fmt: skip
        return 0
    found = read_cluster_metadata(path)
    snapshot = "none" if found.snapshot_end_offset is None else f"ends at offset {found.snapshot_end_offset}"
    print(f"{path}: latest snapshot {snapshot}, read to offset {found.end_offset}, "
          f"{found.unreadable} parts unreadable")  # fmt: skip
    store = open_store(settings)
    try:
        by_id: dict[str, list[str]] = {}
        for record in store.list_partitions():
            if record.topic_id is not None:
                state = record.deletion_state.value if record.deletion_state is not None else "live"
                by_id.setdefault(uuid_to_topic_id(record.topic_id), []).append(
                    f"{record.topic_partition} {state}"
                )
    finally:
        store.close()
    for removal in sorted(found.removals.values(), key=lambda r: r.offset):
        status = "committed" if removal.committed else "pending (waits for the broker's next snapshot)"
        partitions = ", ".join(by_id.get(removal.topic_id, [])) or "none in the remote tier"
        print(f"{removal.name or '(name not in the log)'} {removal.topic_id}: removed at offset "
              f"{removal.offset}, {status}; partitions: {partitions}")  # fmt: skip
    return 0


def _skip(args: argparse.Namespace) -> int:
    from rlm.bootstrap import open_store
    from rlm.metastore.model import SkipKind, SkippedRange, TopicPartition
    from rlm.storage.layout import validate_topic
    from rlm.tiering.copier import wall_clock_ms

    settings = settings_from_args(args)
    if args.partition < 0:
        raise ConfigError(f"partition {args.partition} is negative")
    tp = TopicPartition(validate_topic(args.topic), args.partition)
    start, end = args.from_offset, args.to_offset
    if start < 0 or end < start:
        raise ConfigError(f"--from-offset {start} --to-offset {end} is not a range of offsets")
    partition = _local_partition(settings.log_dirs, tp)
    _check_whole_segments(partition, tp, start, end)
    hw = partition.high_watermark()
    if hw is None or end >= hw:
        raise ConfigError(
            f"cannot skip offsets {start}..{end} of {tp}: offsets from the high watermark "
            f"({'unknown' if hw is None else hw}) on are not written yet"
        )
    try:
        skipped = SkippedRange(tp, start, end, SkipKind.OPERATOR, args.reason.strip(), wall_clock_ms())
    except ValueError as exc:
        raise ConfigError(f"cannot skip offsets {start}..{end} of {tp}: {exc}") from exc
    store = open_store(settings)
    try:
        stored = store.add_skipped_range(skipped)
    finally:
        store.close()
    print(f"{tp}: offsets {stored.start_offset}..{stored.end_offset} skipped ({stored.reason})")
    return 0


def _check_whole_segments(partition: PartitionDir, tp: TopicPartition, start: int, end: int) -> None:
    """Refuse a range that is not the offsets of whole local segments: the copier tiers a segment
    whole or passes over one a skip covers whole, so a part of one skipped would be tiered all the
    same, while listed as never tiered."""
    bases = [s.base_offset for s in partition.segments()]
    if start in bases and end + 1 in bases:
        return
    # The bases from the segment holding ``start`` through the first past ``end``.
    after = [b for b in bases if b > end][:1]
    near = [b for b in bases if b <= start][-1:] + [b for b in bases if start < b <= end] + after
    shown = ", ".join(str(b) for b in (near if len(near) <= 6 else [*near[:5], near[-1]]))
    raise ConfigError(
        f"cannot skip offsets {start}..{end} of {tp}: a skip covers whole segments, from a segment's "
        f"base offset to the offset before a later one's (the copier tiers or passes over a segment "
        f"whole); segments of {partition.path} start at {shown or 'no offset: it holds none'}"
    )


def _local_partition(log_dirs: tuple[Path, ...], tp: TopicPartition) -> PartitionDir:
    """The partition's directory in the broker's log directories (NotFoundError when none has it)."""
    from rlm.log.logdir import LogDir

    if not log_dirs:
        raise ConfigError("no log directories configured: set log.dirs (RLM_LOG_DIRS or --log-dirs)")
    for log_dir in log_dirs:
        try:
            return LogDir(log_dir).partition(tp.topic, tp.partition)
        except NotFoundError:
            continue
    raise NotFoundError(f"partition {tp} is in none of the log directories {', '.join(map(str, log_dirs))}")


def _skipped(args: argparse.Namespace) -> int:
    from rlm.bootstrap import open_store

    store = open_store(settings_from_args(args))
    try:
        for record in store.list_partitions():
            tp = record.topic_partition
            if args.topic is not None and tp.topic != args.topic:
                continue
            for r in store.list_skipped_ranges(tp):
                when = datetime.fromtimestamp(r.recorded_at_ms / 1000, tz=UTC).isoformat(timespec="seconds")
                print(
                    f"{tp}: offsets {r.start_offset}..{r.end_offset} skipped {when} ({r.kind.value}): "
                    f"{r.reason}"
                )
    finally:
        store.close()
    return 0
