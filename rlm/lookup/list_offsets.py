"""ListOffsets (v10 shape) over the reader pool: one task per partition, one deadline per request.

Kafka error codes in the answers:

* ``NONE`` (0); ``UNKNOWN_TOPIC_OR_PARTITION`` (3) for a partition with no local log and no
  remote segments; ``REQUEST_TIMED_OUT`` (7) for a partition not answered by the deadline (its task
  is cancelled); ``INVALID_REQUEST`` (42) for a timestamp below -5; ``KAFKA_STORAGE_ERROR`` (56,
  retriable) when the remote store or the metadata store failed or data was corrupt;
  ``THROTTLING_QUOTA_EXCEEDED`` (89, retriable) when the reader pool's queue was full.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum

from rlm.errors import NotFoundError, PoolError, RlmError
from rlm.lookup.pool import BoundedPool, CancelToken, Outcome, RequestTimeout, run_all
from rlm.lookup.service import LookupService, OffsetAnswer
from rlm.lookup.stats import FetchStats
from rlm.metastore.model import TopicPartition


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

    def __init__(self, service: LookupService, pool: BoundedPool, timeout: RequestTimeout) -> None:
        self.service = service
        self.pool = pool
        self.timeout = timeout

    def handle(self, request: ListOffsetsRequest) -> ListOffsetsResponse:
        """Answer every partition of ``request``; never raises for one partition's failure."""
        timeout_s = self.timeout.seconds_for(request.timeout_ms)
        stats: dict[Key, FetchStats] = {}
        tasks: dict[Key, Callable[[CancelToken], OffsetAnswer]] = {}
        early: dict[Key, PartitionResult] = {}
        for topic in request.topics:
            for query in topic.partitions:
                key = (topic.name, query.partition_index)
                if query.timestamp < -5:
                    early[key] = PartitionResult(
                        query.partition_index,
                        ErrorCode.INVALID_REQUEST,
                        error_message=f"timestamp {query.timestamp} is invalid (use ≥ 0 or -1 to -5)",
                    )
                    continue
                stats[key] = FetchStats()
                tp = TopicPartition(*key)
                try:
                    remote = self.service.needs_remote(tp, query.timestamp)
                    if not remote:
                        # Local and metadata-only answers never wait behind remote reads.
                        answer = self.service.find(tp, query.timestamp, stats=stats[key])
                        early[key] = _result(query.partition_index, Outcome(value=answer), stats[key])
                        continue
                except Exception as exc:  # reported per partition, as Kafka does
                    early[key] = _result(query.partition_index, Outcome(error=exc), stats[key])
                    continue
                tasks[key] = self._task(tp, query.timestamp, stats[key])
        outcomes = run_all(self.pool, tasks, timeout_s, labels={k: k for k in tasks}) if tasks else {}
        topics = []
        for topic in request.topics:
            results = []
            for query in topic.partitions:
                key = (topic.name, query.partition_index)
                found = early.get(key)
                results.append(
                    found if found is not None else _result(query.partition_index, outcomes[key], stats[key])
                )
            topics.append(TopicResult(topic.name, tuple(results)))
        return ListOffsetsResponse(tuple(topics))

    def _task(
        self, tp: TopicPartition, timestamp: int, stats: FetchStats
    ) -> Callable[[CancelToken], OffsetAnswer]:
        def run(token: CancelToken) -> OffsetAnswer:
            return self.service.find(tp, timestamp, stats=stats, checkpoint=token.raise_if_cancelled)

        return run

    def find_one(self, tp: TopicPartition, timestamp: int, timeout_ms: int | None = None) -> PartitionResult:
        """One partition, as a single call (REST's GET and gRPC's unary lookup)."""
        request = ListOffsetsRequest(
            (TopicQuery(tp.topic, (PartitionQuery(tp.partition, timestamp),)),), timeout_ms
        )
        return self.handle(request).topics[0].partitions[0]


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
