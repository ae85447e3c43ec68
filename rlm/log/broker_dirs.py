"""The broker's log directories together (``log.dirs``): each one listed on its own, so that one
that cannot be read hides nothing of the others, and a partition found in two of them told apart.

Kafka goes on with the log directories it can still use when one fails
(``LogManager.handleLogDirFailure`` marks it offline, and the broker stops only once none is
left), and its local retention goes on deleting segments in the others: what they hold must still
be tiered. A log directory is *offline* here when it does not exist, cannot be listed (an I/O
error of a failing disk) or its ``meta.properties`` cannot be read (which cluster it belongs to
cannot be told: :mod:`rlm.tiering.cluster_guard`). Whether it holds a partition is then unknown:
nothing may be decided from a partition's absence.

A partition in two log directories is what a move between them leaves when the broker stops
midway: ``LogManager.replaceCurrentWithFutureLog`` renames the future directory to
``topic-partition`` before it renames the source to ``...-delete`` (and Kafka then refuses to start:
"Duplicate log directories found"). Which one is the broker's log cannot be told, so neither is
listed as the partition's: both are reported, in ``log.dirs`` order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rlm.errors import CorruptCheckpointError, NotFoundError
from rlm.log.checkpoints import META_PROPERTIES, read_meta_properties
from rlm.log.logdir import LogDir, PartitionDir
from rlm.log.model import TopicPartition


@dataclass(frozen=True)
class OfflineLogDir:
    """A log directory that could not be read, and why."""

    path: Path
    problem: str
    """What went wrong, in words that name the directory."""

    def __str__(self) -> str:
        return self.problem


@dataclass(frozen=True)
class LocalPartitions:
    """What one listing of the broker's log directories found."""

    partitions: tuple[PartitionDir, ...] = ()
    """The partitions found in exactly one log directory, sorted by topic-partition."""
    duplicates: Mapping[TopicPartition, tuple[PartitionDir, ...]] = field(default_factory=dict)
    """The partitions found in more than one log directory: their directories in the order listed."""
    offline: tuple[OfflineLogDir, ...] = ()
    """The log directories that could not be read, in ``log.dirs`` order."""


def offline_problem(log_dir: LogDir) -> str | None:
    """Why ``log_dir`` cannot be used (it does not exist, or it or its ``meta.properties`` cannot
    be read); None when it can. A directory without ``meta.properties`` (not formatted yet) can."""
    path = log_dir.path / META_PROPERTIES
    try:
        if not log_dir.path.is_dir():
            return f"log directory {log_dir.path} does not exist"
        read_meta_properties(path)
    except FileNotFoundError:
        pass
    except (OSError, CorruptCheckpointError) as exc:
        return f"log directory {log_dir.path} is offline: cannot read {path}: {exc}"
    return None


def list_log_dirs(log_dirs: Iterable[LogDir]) -> LocalPartitions:
    """List every log directory's partitions, each directory on its own; never raises for one
    directory's failure (it is reported in :attr:`LocalPartitions.offline`)."""
    found: list[PartitionDir] = []
    offline: list[OfflineLogDir] = []
    for log_dir in log_dirs:
        problem = offline_problem(log_dir)
        if problem is None:
            try:
                found.extend(log_dir.partitions())
                continue
            except NotFoundError as exc:  # removed since it was looked at
                problem = str(exc)
            except OSError as exc:
                problem = f"log directory {log_dir.path} is offline: cannot list it: {exc}"
        offline.append(OfflineLogDir(log_dir.path, problem))
    return group_partitions(found, offline)


def group_partitions(
    partitions: Iterable[PartitionDir], offline: Iterable[OfflineLogDir] = ()
) -> LocalPartitions:
    """Sort ``partitions`` by topic-partition, those found more than once set apart."""
    by_tp: dict[TopicPartition, list[PartitionDir]] = {}
    for partition in partitions:
        dirs = by_tp.setdefault(partition.tp, [])
        if all(p.path != partition.path for p in dirs):  # not one directory listed twice
            dirs.append(partition)
    single = tuple(dirs[0] for _, dirs in sorted(by_tp.items()) if len(dirs) == 1)
    duplicates = {tp: tuple(dirs) for tp, dirs in sorted(by_tp.items()) if len(dirs) > 1}
    return LocalPartitions(single, duplicates, tuple(offline))
