"""The partitions a copier or retention pass works on: the broker's log directories listed each on
its own (:mod:`rlm.log.broker_dirs`), what could not be read reported by name.

A log directory that cannot be read is passed over: the others' partitions are tiered and expired
as ever, the directory is named in a warning (when it goes offline, not every pass) and
``rlm_log_dir_offline{log_dir}`` is 1 until it can be read again. Only when none can be read does
the pass fail. A partition found in two log directories is worked on by neither pass until only
one holds it (:func:`duplicated`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from rlm.errors import LogDirsOfflineError
from rlm.log.broker_dirs import LocalPartitions, list_log_dirs
from rlm.log.logdir import LogDir, PartitionDir
from rlm.metrics import Metrics

log = logging.getLogger("rlm.log_dirs")


def duplicated(dirs: Sequence[PartitionDir]) -> str:
    """Why a partition found in ``dirs`` (two or more log directories) is left alone this pass."""
    where = " and ".join(str(p.path) for p in dirs)
    return (
        f"found in {len(dirs)} log directories ({where}): a move between log directories left "
        "unfinished; which is the broker's log cannot be told, so neither is tiered nor expired "
        "until one is gone"
    )


class LogDirLister:
    """Lists the partitions of the configured log directories for one kind of pass."""

    def __init__(self, log_dirs: Sequence[Path], metrics: Metrics, *, done: str) -> None:
        self.log_dirs = tuple(log_dirs)
        self.metrics = metrics
        self.done = done
        """What the passes do to the partitions ("tiered", "expired"), as the warnings say."""
        self._said: dict[Path, str] = {}
        """The problems of the log directories offline at the last listing, as said."""
        self._duplicates_said: frozenset[tuple[Path, ...]] = frozenset()

    def list(self) -> LocalPartitions:
        """The partitions of the log directories that can be read.

        Raises:
            LogDirsOfflineError: none of them can be read.
        """
        found = list_log_dirs(LogDir(d) for d in self.log_dirs)
        self._report(found)
        if self.log_dirs and len(found.offline) == len(self.log_dirs):
            raise LogDirsOfflineError("; ".join(map(str, found.offline)))
        return found

    def _report(self, found: LocalPartitions) -> None:
        problems = {d.path: d.problem for d in found.offline}
        for path in self.log_dirs:
            self.metrics.log_dir_offline.labels(str(path)).set(1 if path in problems else 0)
            problem = problems.get(path)
            if problem is not None and self._said.get(path) != problem:
                log.warning("%s; its partitions are not %s until it can be read", problem, self.done)
            elif problem is None and path in self._said:
                log.info("log directory %s can be read again", path)
        self._said = problems
        duplicates = frozenset(tuple(p.path for p in dirs) for dirs in found.duplicates.values())
        for tp, dirs in found.duplicates.items():
            if tuple(p.path for p in dirs) not in self._duplicates_said:
                log.warning("%s: %s", tp, duplicated(dirs))
        self._duplicates_said = duplicates
