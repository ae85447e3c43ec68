"""The problems found in one segment, bounded: a segment corrupt throughout reports a few of each kind."""

from __future__ import annotations

from collections import Counter

from rlm.pipeline.verify.problems import Problem, ProblemKind
from rlm.remote_tier.read_plan import SegmentSummary

#: Problems of one kind kept per segment; the rest are counted in one more problem.
MAX_PER_KIND = 10


class Findings:
    """Collects one segment's problems, each naming the segment's partition and id."""

    def __init__(self, summary: SegmentSummary) -> None:
        self.summary = summary
        self._problems: list[Problem] = []
        self._counts: Counter[ProblemKind] = Counter()

    def add(
        self,
        kind: ProblemKind,
        message: str,
        *,
        key: str | None = None,
        position: int | None = None,
        offset: int | None = None,
    ) -> None:
        """Record one problem of this segment."""
        self._counts[kind] += 1
        if self._counts[kind] > MAX_PER_KIND:
            return
        tp = self.summary.topic_partition
        self._problems.append(
            Problem(kind, tp.topic, tp.partition, message, self.summary.segment_id, key, position, offset)
        )

    def count(self, kind: ProblemKind) -> int:
        """How many problems of ``kind`` were found, kept or not."""
        return self._counts[kind]

    def problems(self) -> list[Problem]:
        """The problems kept, then one per kind that had more, saying how many more."""
        tp = self.summary.topic_partition
        extra = [
            Problem(
                kind,
                tp.topic,
                tp.partition,
                f"{count - MAX_PER_KIND} more problems of this kind in this segment",
                self.summary.segment_id,
            )
            for kind, count in self._counts.items()
            if count > MAX_PER_KIND
        ]
        return [*self._problems, *extra]
