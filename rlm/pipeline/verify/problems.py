"""What ``rlm spark verify`` finds wrong: problem kinds and the problem record."""

from __future__ import annotations

import enum
from typing import Any, NamedTuple

import pyarrow as pa


class ProblemKind(enum.Enum):
    """The kinds of problem, by what is wrong."""

    MISSING_OBJECT = "missing-object"
    """A finished segment's ``.log`` or index object is not in the store."""
    SIZE_MISMATCH = "size-mismatch"
    """An object's size is not the one the row records (a truncated or replaced object)."""
    UNREADABLE = "unreadable"
    """The store refused or failed a read even after retries; the segment could not be checked."""
    CORRUPT_BATCH = "corrupt-batch"
    """A batch fails its CRC, a size field or header is malformed, or the object ends mid-batch."""
    OFFSET_ORDER = "offset-order"
    """Offsets do not increase from one batch to the next."""
    OFFSET_RANGE = "offset-range"
    """The batches' first or last offset is not the row's start or end offset (for a compaction's
    output: lies outside the row's offsets)."""
    MAX_TIMESTAMP = "max-timestamp"
    """The largest batch timestamp is not the row's max timestamp."""
    INDEX_MISMATCH = "index-mismatch"
    """A file of the index object differs from the one rebuilt from the ``.log``."""
    LEADER_EPOCH = "leader-epoch"
    """A batch's leader epoch is not the one the row says wrote its offsets, or a segment starts
    in an older leader epoch than the offsets before it."""
    GAP = "gap"
    """Offsets between consecutive finished segments that no finished segment holds."""
    OVERLAP = "overlap"
    """Finished segments overlap in a way no takeover copy explains."""
    LOG_START = "log-start"
    """The remote log start offset disagrees with the finished segments."""
    ORPHAN_OBJECT = "orphan-object"
    """An object under the store's prefix that no live row references."""
    STALE_ROW = "stale-row"
    """A row left in ``COPY_SEGMENT_STARTED`` or ``DELETE_SEGMENT_STARTED`` past the cleanup horizon."""


class Problem(NamedTuple):
    """One thing found wrong, named so that an operator can find it."""

    kind: ProblemKind
    topic: str | None
    """The partition's topic; ``None`` for an object whose key names no partition."""
    partition: int | None
    message: str
    """What is wrong, in words."""
    segment_id: str | None = None
    object_key: str | None = None
    position: int | None = None
    """Byte position in ``object_key``."""
    offset: int | None = None

    @property
    def partition_name(self) -> str:
        """``orders-0``, or ``-`` when the problem belongs to no partition."""
        return "-" if self.topic is None or self.partition is None else f"{self.topic}-{self.partition}"

    def to_json(self) -> dict[str, Any]:
        """The problem as a JSON object (the kind by its value)."""
        return {**self._asdict(), "kind": self.kind.value}

    def __str__(self) -> str:
        where = [self.partition_name]
        if self.segment_id is not None:
            where.append(f"segment {self.segment_id}")
        if self.object_key is not None:
            where.append(self.object_key if self.position is None else f"{self.object_key}@{self.position}")
        if self.offset is not None:
            where.append(f"offset {self.offset}")
        return f"{self.kind.value}: {' '.join(where)}: {self.message}"


PROBLEM_TYPE = pa.struct(
    [
        pa.field("kind", pa.string()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("message", pa.string()),
        pa.field("segment_id", pa.string()),
        pa.field("object_key", pa.string()),
        pa.field("position", pa.int64()),
        pa.field("offset", pa.int64()),
    ]
)


def problem_row(problem: Problem) -> dict[str, Any]:
    """``problem`` as a value of :data:`PROBLEM_TYPE`."""
    return problem.to_json()


def problem_from_row(row: dict[str, Any]) -> Problem:
    """The problem a value of :data:`PROBLEM_TYPE` holds."""
    return Problem(**{**row, "kind": ProblemKind(row["kind"])})
