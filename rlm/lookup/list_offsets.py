"""ListOffsets (v10 shape) over the reader pool: one task per partition, one deadline per request.

Kafka error codes in the answers:

* ``NONE`` (0); ``UNKNOWN_TOPIC_OR_PARTITION`` (3) for a partition with no local log and no
  remote segments; ``REQUEST_TIMED_OUT`` (7) for a partition not answered by the deadline (its task
  is cancelled); ``INVALID_REQUEST`` (42) for a timestamp below -5; ``KAFKA_STORAGE_ERROR`` (56,
  retriable) when the remote store or the metadata store failed or data was corrupt;
  ``THROTTLING_QUOTA_EXCEEDED`` (89, retriable) when the reader pool's queue was full.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum

from rlm.errors import NotFoundError, PoolError, RlmError
from rlm.lookup.pool import BoundedPool, CancelToken, Outcome, RequestTimeout, run_all
from rlm.lookup.service import IsolationLevel, LookupService, OffsetAnswer
from rlm.lookup.stats import FetchStats
from rlm.metastore.model import TopicPartition
from rlm.metrics import Metrics


class ErrorCode(IntEnum):
    """The Kafka protocol error codes ListOffsets answers with."""

    NONE = 0
    UNKNOWN_TOPIC_OR_PARTITION = 3
    REQUEST_TIMED_OUT = 7
    INVALID_REQUEST = 42
    KAFKA_STORAGE_ERROR = 56
    THROTTLING_QUOTA_EXCEEDED = 89
    UNKNOWN_SERVER_ERROR = -1


@dataclass(frozen=True)
class PartitionQuery:
    partition_index: int
    timestamp: int


@dataclass(frozen=True)
class TopicQuery:
    name: str
    partitions: tuple[PartitionQuery, ...]


@dataclass(frozen=True)
class ListOffsetsRequest:
    """Kafka's ListOffsetsRequest v10, as far as rlm needs it."""

    topics: tuple[TopicQuery, ...]
    timeout_ms: int | None = None
    """Wait at most this long; None means ``remote.list.offsets.request.timeout.ms``."""
    isolation_level: int = 0
    """0 READ_UNCOMMITTED (up to the high watermark), 1 READ_COMMITTED (up to the last stable offset)."""


@dataclass(frozen=True)
class PartitionResult:
    partition_index: int
    error_code: ErrorCode
    timestamp: int = -1
    offset: int = -1
    leader_epoch: int = -1
    tier: str | None = None
    error_message: str | None = None
    remote_gets: int = 0
    remote_bytes: int = 0


@dataclass(frozen=True)
class TopicResult:
    name: str
    partitions: tuple[PartitionResult, ...]


@dataclass(frozen=True)
class ListOffsetsResponse:
    topics: tuple[TopicResult, ...]


Key = tuple[str, int]


class ListOffsets:
    """Answers ListOffsets requests with the lookup service, on the offset-reader pool."""

    def __init__(
        self,
        service: LookupService,
        pool: BoundedPool,
        timeout: RequestTimeout,
        metrics: Metrics | None = None,
    ) -> None:
        self.service = service
        self.pool = pool
        self.timeout = timeout
        self.metrics = metrics
        """Where each partition's answer time is observed (``rlm_lookup_seconds``); None: nowhere."""

    def handle(self, request: ListOffsetsRequest) -> ListOffsetsResponse:
        """Answer every partition of ``request``; never raises for one partition's failure.

        A partition asked for twice in one request answers INVALID_REQUEST both times, as Kafka does.
        """
        started = time.perf_counter()
        timeout_s = self.timeout.seconds_for(request.timeout_ms)
        isolation = IsolationLevel(request.isolation_level)
        counts = Counter((t.name, q.partition_index) for t in request.topics for q in t.partitions)
        early: dict[Key, PartitionResult] = {}
        stats: dict[Key, FetchStats] = {}
        tasks: dict[Key, Callable[[CancelToken], OffsetAnswer]] = {}
        done_at: dict[Key, float] = {}
        for topic in request.topics:
            for query in topic.partitions:
                key = (topic.name, query.partition_index)
                if counts[key] > 1:
                    early[key] = PartitionResult(
                        query.partition_index,
                        ErrorCode.INVALID_REQUEST,
                        error_message=f"partition {topic.name}-{query.partition_index} is asked for twice",
                    )
                elif query.timestamp < -5:
                    early[key] = PartitionResult(
                        query.partition_index,
                        ErrorCode.INVALID_REQUEST,
                        error_message=f"timestamp {query.timestamp} is invalid (use ≥ 0 or -1 to -5)",
                    )
                else:
                    stats[key] = FetchStats()
                    task = self._plan(TopicPartition(*key), query.timestamp, stats[key], isolation)
                    if isinstance(task, PartitionResult):
                        early[key] = task
                        done_at[key] = time.perf_counter()
                    else:
                        tasks[key] = _timed(task, key, done_at)
        outcomes = run_all(self.pool, tasks, timeout_s, labels={k: k for k in tasks}) if tasks else {}
        response = ListOffsetsResponse(
            tuple(
                TopicResult(
                    topic.name,
                    tuple(
                        early.get((topic.name, q.partition_index))
                        or _result(
                            q.partition_index,
                            outcomes[(topic.name, q.partition_index)],
                            stats[(topic.name, q.partition_index)],
                        )
                        for q in topic.partitions
                    ),
                )
                for topic in request.topics
            )
        )
        if self.metrics is not None:
            self._observe(response, started, done_at)
        return response

    def _observe(self, response: ListOffsetsResponse, started: float, done_at: dict[Key, float]) -> None:
        """Each partition's time from the request's start to its answer (the deadline, for one
        that timed out), by the tier that answered."""
        assert self.metrics is not None
        ended = time.perf_counter()
        for topic in response.topics:
            for result in topic.partitions:
                at = done_at.get((topic.name, result.partition_index), ended)
                self.metrics.lookup_seconds.labels(result.tier or "none").observe(at - started)

    def _plan(
        self, tp: TopicPartition, timestamp: int, stats: FetchStats, isolation: IsolationLevel
    ) -> PartitionResult | Callable[[CancelToken], OffsetAnswer]:
        """Answer at once what needs no remote read; otherwise the task for the reader pool."""
        try:
            # Local and metadata-only answers never wait behind remote reads.
            answer = self.service.find_local(tp, timestamp, stats=stats, isolation=isolation)
        except Exception as exc:  # reported per partition, as Kafka does
            return _result(tp.partition, Outcome(error=exc), stats)
        if answer is not None:
            return _result(tp.partition, Outcome(value=answer), stats)
        return self._task(tp, timestamp, stats, isolation)

    def _task(
        self, tp: TopicPartition, timestamp: int, stats: FetchStats, isolation: IsolationLevel
    ) -> Callable[[CancelToken], OffsetAnswer]:
        def run(token: CancelToken) -> OffsetAnswer:
            return self.service.find(
                tp, timestamp, stats=stats, checkpoint=token.raise_if_cancelled, isolation=isolation
            )

        return run

    def answer_now(self, tp: TopicPartition, timestamp: int) -> PartitionResult | None:
        """One partition's answer if it needs no metadata query and no remote read (an event loop
        may call this itself); None when :meth:`find_one` must be called, off the loop."""
        started = time.perf_counter()
        answer = self.service.answer_now(tp, timestamp)
        if answer is None:
            return None
        if self.metrics is not None:
            self.metrics.lookup_seconds.labels(answer.tier or "none").observe(time.perf_counter() - started)
        return PartitionResult(
            tp.partition, ErrorCode.NONE, answer.timestamp, answer.offset, answer.leader_epoch, answer.tier
        )

    def find_one(self, tp: TopicPartition, timestamp: int, timeout_ms: int | None = None) -> PartitionResult:
        """One partition, as a single call (REST's GET and gRPC's unary lookup)."""
        request = ListOffsetsRequest(
            (TopicQuery(tp.topic, (PartitionQuery(tp.partition, timestamp),)),), timeout_ms
        )
        return self.handle(request).topics[0].partitions[0]


def _timed(
    task: Callable[[CancelToken], OffsetAnswer], key: Key, done_at: dict[Key, float]
) -> Callable[[CancelToken], OffsetAnswer]:
    """``task``, noting in ``done_at[key]`` when it ended."""

    def run(token: CancelToken) -> OffsetAnswer:
        try:
            return task(token)
        finally:
            done_at[key] = time.perf_counter()

    return run


def _result(partition: int, outcome: Outcome[OffsetAnswer], stats: FetchStats) -> PartitionResult:
    if outcome.timed_out:
        return PartitionResult(
            partition,
            ErrorCode.REQUEST_TIMED_OUT,
            error_message="no answer before the request timeout",
            remote_gets=stats.gets,
            remote_bytes=stats.bytes,
        )
    if outcome.error is not None:
        code = _error_code(outcome.error)
        return PartitionResult(
            partition,
            code,
            error_message=str(outcome.error),
            remote_gets=stats.gets,
            remote_bytes=stats.bytes,
        )
    answer = outcome.value
    assert answer is not None
    return PartitionResult(
        partition,
        ErrorCode.NONE,
        answer.timestamp,
        answer.offset,
        answer.leader_epoch,
        answer.tier,
        remote_gets=stats.gets,
        remote_bytes=stats.bytes,
    )


def _error_code(error: BaseException) -> ErrorCode:
    if isinstance(error, NotFoundError):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if isinstance(error, PoolError):
        return ErrorCode.THROTTLING_QUOTA_EXCEEDED
    if isinstance(error, ValueError):
        return ErrorCode.INVALID_REQUEST
    if isinstance(error, RlmError | OSError):
        return ErrorCode.KAFKA_STORAGE_ERROR
    return ErrorCode.UNKNOWN_SERVER_ERROR


__all__: Sequence[str] = (
    "ErrorCode",
    "ListOffsets",
    "ListOffsetsRequest",
    "ListOffsetsResponse",
    "PartitionQuery",
    "PartitionResult",
    "RequestTimeout",
    "TopicQuery",
    "TopicResult",
)
