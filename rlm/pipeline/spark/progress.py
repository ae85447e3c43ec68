"""A progress line per stage, from Spark's status tracker.

While a stage's jobs run, a line on stderr (rewritten in place) says how many of its tasks (one
per segment) are done, running and failed; when they end, the line is finished with the time
taken. Only on a terminal unless asked for.
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from types import TracebackType
from typing import TextIO

from pyspark.sql import SparkSession

#: Seconds between two looks at the status tracker.
POLL_INTERVAL_S = 0.5
#: Seconds the final line waits for the tracker to hear of the last tasks' ends (its listener
#: bus is asynchronous: a job can return before the tracker counts its last task done).
SETTLE_S = 5.0
_ENDED = ("SUCCEEDED", "FAILED")


class StageProgress:
    """Reports the progress of the Spark jobs started inside a ``with`` block.

    The jobs are tagged with a job group of their own, so the tracker tells them from any other
    job of the session.
    """

    def __init__(
        self,
        session: SparkSession,
        label: str,
        total: int,
        *,
        stream: TextIO | None = None,
        enabled: bool | None = None,
        interval_s: float = POLL_INTERVAL_S,
    ) -> None:
        """Report on ``stream`` (stderr) the tasks of ``total`` expected, labelled ``label``.

        ``enabled`` defaults to whether the stream is a terminal.
        """
        self._context = session.sparkContext
        self.label = label
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.interval_s = interval_s
        self.group = f"rlm-{uuid.uuid4().hex[:12]}"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = 0.0

    def counts(self) -> tuple[int, int, int]:
        """Tasks completed, running and failed so far in this block's jobs."""
        tracker = self._context.statusTracker()
        done = running = failed = 0
        for job_id in tracker.getJobIdsForGroup(self.group):
            job = tracker.getJobInfo(job_id)
            for stage_id in job.stageIds if job is not None else ():
                stage = tracker.getStageInfo(stage_id)
                if stage is not None:
                    done += stage.numCompletedTasks
                    running += stage.numActiveTasks
                    failed += stage.numFailedTasks
        return done, running, failed

    def line(self, counts: tuple[int, int, int] | None = None) -> str:
        """The progress line as of now (or of ``counts``)."""
        done, running, failed = self.counts() if counts is None else counts
        text = f"{self.label}: {done}/{self.total} segments, {running} running"
        if failed:
            text += f", {failed} failed"
        return f"{text}, {time.monotonic() - self._started:.0f} s"

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.stream.write("\r" + self.line() + "\033[K")
            self.stream.flush()

    def _settled(self) -> tuple[int, int, int]:
        """The counts once the tracker has heard every job of the block end (it hears of each
        task's end before its job's), or as they are after :data:`SETTLE_S`."""
        deadline = time.monotonic() + SETTLE_S
        while not self._jobs_ended() and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.counts()

    def _jobs_ended(self) -> bool:
        tracker = self._context.statusTracker()
        for job_id in tracker.getJobIdsForGroup(self.group):
            job = tracker.getJobInfo(job_id)
            if job is None or job.status not in _ENDED:
                return False
        return True

    def __enter__(self) -> StageProgress:
        self._started = time.monotonic()
        self._context.setJobGroup(self.group, self.label, interruptOnCancel=False)
        if self.enabled:
            self._thread = threading.Thread(target=self._run, name="rlm-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.enabled:
            self.stream.write("\r" + self.line(self._settled() if exc_type is None else None) + "\033[K\n")
            self.stream.flush()
        self._context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        self._context.setLocalProperty("spark.job.description", None)  # type: ignore[arg-type]
