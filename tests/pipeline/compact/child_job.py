"""``rlm spark compact`` in a child process, held at a chosen point.

    python -m tests.pipeline.compact.child_job POINT MARKER rlm-spark-compact-arguments...

At POINT the process that gets there (the driver, or the executor's Python worker running the
task) writes its pid to the file MARKER and waits; the test then kills the job's process group
(SIGKILL). The engine is the product's, wrapped here: nothing in rlm knows of these points.

* ``read``: an executor has read the first input segment of the job's first stage;
* ``decide``: the winners are decided (stages 1 and 2 done), no output is recorded yet;
* ``write``: an executor has written the first output segment (the others are not written);
* ``swap``: inside the first partition's swap transaction, its rows changed, not committed;
* ``swapped-one``: the first partition's swap is committed, the second's not begun;
* ``together``: not killed: once its leases are taken, the job waits for the twin job whose
  MARKER is given as ``--twin PATH`` (the first argument after MARKER) to take its leases, then
  runs to its end (two jobs at once on one topic).

A job held in a task (``read``, ``write``) runs on a Spark of its own (``local[1]``), whose JVM
the kill takes down with the task; the others are held in the driver between or after their
Spark work and join the test session's JVM (:mod:`tests.pipeline.shared_jvm`), as
:data:`OWN_JVM` says.

The job's clock is :data:`~tests.pipeline.compact.test_reference_job.NOW`, as the reference
compaction's, so that their outputs compare byte for byte.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

import metadata.compaction
from rlm.cli import main
from rlm.metastore.model import RemoteSegment, TopicPartition
from rlm.pipeline import transactions
from rlm.pipeline.compact import facts, job
from rlm.pipeline.compact.engine import PartitionDecision
from rlm.pipeline.compact.facts import FactOptions
from rlm.pipeline.spark import compact
from rlm.pipeline.stage import Collect, Stage
from rlm.pipeline.storage import StorageSpec
from rlm.remote_tier.read_plan import PartitionPlan, SegmentSummary
from rlm.storage.protocol import RemoteStorage
from tests.pipeline import shared_jvm
from tests.pipeline.compact.test_reference_job import NOW
from tests.pipeline.spark_conf import conf_arguments, small_job_conf

POINTS = ("read", "decide", "write", "swap", "swapped-one", "together")
#: The points held inside a task: their jobs start a JVM of their own.
OWN_JVM = ("read", "write")
#: How long a held process waits for its kill before giving up (the test run is gone): the jobs of
#: a test module start together, and each is killed when its test comes.
HOLD_S = 1800.0
#: Where the held process says it got to (set by :func:`run`, in the driver).
MARKER = [Path()]


def say_reached(marker: Path) -> None:
    """Write this process's pid into ``marker`` (atomically: the test reads a whole file)."""
    partial = marker.with_name(marker.name + ".part")
    partial.write_text(str(os.getpid()))
    partial.rename(marker)


def reached(marker: Path) -> None:
    """Say the point is reached and wait for the kill."""
    say_reached(marker)
    time.sleep(HOLD_S)
    os._exit(3)


class _ReadThenHold:
    """The first stage's task: reads its segment, then holds."""

    def __init__(self, task: Callable[[RemoteStorage, SegmentSummary], Iterator[pa.RecordBatch]]) -> None:
        self.task = task
        self.marker = MARKER[0]

    def __call__(self, storage: RemoteStorage, summary: SegmentSummary) -> Iterator[pa.RecordBatch]:
        yield from self.task(storage, summary)
        reached(self.marker)


class _WriteThenHold(compact._WriteOutputs):
    """The third stage's task: writes its output segment, then holds."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.marker = MARKER[0]

    def __call__(self, table: pa.Table) -> pa.Table:
        written = super().__call__(table)
        reached(self.marker)
        return written


class _DecideThenHold(compact.SparkEngine):
    def decide(
        self, plans: Sequence[PartitionPlan], options: FactOptions
    ) -> dict[TopicPartition, PartitionDecision]:
        decided = super().decide(plans, options)
        reached(MARKER[0])
        return decided


def _hold_in_swap(after_first: bool) -> None:
    real = metadata.compaction.swap
    calls = [0]

    def swap(conn: Any, lease: Any, new: Sequence[RemoteSegment], *args: Any) -> bool:
        calls[0] += 1
        if after_first and calls[0] == 2:
            reached(MARKER[0])
        done = real(conn, lease, new, *args)
        if not after_first:
            reached(MARKER[0])  # the transaction is still open
        return done

    metadata.compaction.swap = swap  # type: ignore[assignment]


def _meet(twin: Path) -> None:
    def attach_aborted(
        plans: Sequence[PartitionPlan], storage: StorageSpec, collect: Collect
    ) -> list[PartitionPlan]:
        say_reached(MARKER[0])
        deadline = time.monotonic() + HOLD_S
        while not twin.exists():
            if time.monotonic() > deadline:
                raise SystemExit(f"the twin job never took its leases ({twin} is missing)")
            time.sleep(0.1)
        return transactions.attach_aborted(plans, storage, collect)

    job.attach_aborted = attach_aborted  # type: ignore[attr-defined]


def run(point: str, marker: Path, argv: list[str]) -> int:
    MARKER[0] = marker
    job._clock = lambda: NOW
    if point == "read":

        def held_facts_stage(storage: StorageSpec, options: FactOptions) -> Stage:
            stage = facts.facts_stage(storage, options)
            return Stage(stage.name, stage.schema, _ReadThenHold(stage.task), stage.storage)

        compact.facts_stage = held_facts_stage  # type: ignore[attr-defined]
    elif point == "decide":
        compact.SparkEngine = _DecideThenHold  # type: ignore[misc]
    elif point == "write":
        compact._WriteOutputs = _WriteThenHold  # type: ignore[misc,assignment]
    elif point in ("swap", "swapped-one"):
        _hold_in_swap(after_first=point == "swapped-one")
    elif point == "together":
        if len(argv) < 2 or argv[0] != "--twin":
            raise SystemExit("together: expected --twin MARKER first")
        _meet(Path(argv[1]))
        argv = argv[2:]
    else:
        raise SystemExit(f"unknown point {point!r}, expected one of {', '.join(POINTS)}")
    if point in OWN_JVM:
        small = conf_arguments(small_job_conf(shuffle_partitions=1))
        return main(["spark", "compact", "--master", "local[1]", *small, "--quiet", *argv])
    shared_jvm.join()
    return main(["spark", "compact", "--quiet", *argv])


if __name__ == "__main__":
    # Through the module's importable name, so that executors unpickle the wrapped tasks by name.
    from tests.pipeline.compact import child_job  # noqa: PLW0406

    sys.exit(child_job.run(sys.argv[1], Path(sys.argv[2]), sys.argv[3:]))
