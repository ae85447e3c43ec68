"""ListOffsets (v10 shape) over the reader pool: one deadline per request, covering all of it.

A request is answered in three steps, all within its deadline (its ``timeout_ms``, else
``remote.list.offsets.request.timeout.ms``, counted from when the request arrived); the first two
are :mod:`rlm.lookup.planning`'s:

1. Planning: the partitions' remote-tier views the lookup service does not hold are read from the
   metadata store in one batch (one query for many partitions) on the metadata pool (not the
   reader pool: local answers never wait behind remote reads), awaited until the deadline; if
   the store cannot be asked, partitions whose answer is exact without it use a fallback view
   (:mod:`rlm.lookup.views`). Each partition is planned once
   (:meth:`~rlm.lookup.service.LookupService.plan`): answered on the request's thread when the
   answer needs no store query and no remote read.
2. The other partitions' searches become one task each: on the reader pool when the answer may
   need a remote read (KIP-1075), else on the metadata pool, so that answers from metadata never
   wait behind remote reads either. The request awaits them (:func:`~rlm.lookup.pool.gather_on`)
   without holding a thread.
3. Partitions not answered by the deadline answer REQUEST_TIMED_OUT; their tasks are cancelled.

One partition's lookup (REST's GET, gRPC's GetOffset) is not packed into a request: it is planned
on the caller's thread (:meth:`ListOffsets.plan_one`), its view read on the metadata pool only when
the service holds none, and its search run as above.

A request names at most ``list.offsets.max.partitions`` partitions (a topic without any counts as
one); a bigger one is refused whole (``InvalidArgumentError``).

Kafka error codes in the answers:

* ``NONE`` (0); ``UNKNOWN_TOPIC_OR_PARTITION`` (3) for a partition with no local log and no
  remote segments; ``REQUEST_TIMED_OUT`` (7) for a partition not answered by the deadline;
  ``INVALID_TOPIC_EXCEPTION`` (17) for a topic name that breaks Kafka's rule (checked here, once,
  for every API); ``INVALID_REQUEST`` (42) for a timestamp below -5 or a partition asked twice;
  ``KAFKA_STORAGE_ERROR`` (56, retriable) when the remote store or the metadata store failed or
  data was corrupt; ``THROTTLING_QUOTA_EXCEEDED`` (89, retriable) when the reader pool's queue
  was full.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, TypeVar

from rlm.errors import (
    InvalidArgumentError,
    InvalidTopicNameError,
    NotFoundError,
    PoolError,
    RlmError,
)
from rlm.lookup.planning import CLOCK_EVERY, Key, Planner, search_task
from rlm.lookup.plans import Answered, IsolationLevel, LookupPlan, OffsetAnswer, Search, ViewNeeded
from rlm.lookup.pool import (
    BoundedPool,
    CancelToken,
    Outcome,
    RequestTimeout,
    Task,
    gather_blocking,
    gather_on,
    run_blocking,
    wait_blocking,
    wait_tasks,
)
from rlm.lookup.service import LookupService
from rlm.lookup.stats import FetchStats
from rlm.metastore.model import TopicPartition
from rlm.metrics import Metrics
from rlm.storage.layout import validate_topic

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)

DEFAULT_MAX_PARTITIONS = 10_000
"""``list.offsets.max.partitions``: partitions one request may name, in all."""


class ErrorCode(IntEnum):
    """The Kafka protocol error codes ListOffsets answers with."""

    NONE = 0
    UNKNOWN_TOPIC_OR_PARTITION = 3
    REQUEST_TIMED_OUT = 7
    INVALID_TOPIC_EXCEPTION = 17
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


class ListOffsets:
    """Answers ListOffsets requests with the lookup service, on the offset-reader pool.

    Args:
        service: the lookups.
        pool: the offset-reader pool (KIP-1075).
        timeout: the default request timeout.
        metadata_pool: where views are read from the metadata store.
        max_partitions: ``list.offsets.max.partitions``.
        metrics: where each partition's answer time is observed (``rlm_lookup_seconds``, by the
            tier that answered); None: nowhere.
        clock: monotonic seconds, the clock of deadlines.
    """

    def __init__(
        self,
        service: LookupService,
        pool: BoundedPool,
        timeout: RequestTimeout,
        *,
        metadata_pool: BoundedPool,
        max_partitions: int = DEFAULT_MAX_PARTITIONS,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.service = service
        self.pool = pool
        self.metadata_pool = metadata_pool
        self.planner = Planner(service, metadata_pool, clock)
        self.timeout = timeout
        self.max_partitions = max_partitions
        self.metrics = metrics
        self._clock = clock

    def deadline(self, timeout_ms: int | None, *, arrived: float | None = None) -> float:
        """The deadline of a request with ``timeout_ms`` that arrived at ``arrived`` (now when
        None), a ``time.monotonic`` time: transports take it when the request arrives, so that
        reading it and waiting for a thread count too."""
        return (self._clock() if arrived is None else arrived) + self.timeout.seconds_for(timeout_ms)

    def check_size(self, request: ListOffsetsRequest) -> None:
        """Refuse a request naming more than ``max_partitions`` partitions.

        Raises:
            InvalidArgumentError: it does; the message gives both numbers and the setting.
        """
        named = sum(max(1, len(t.partitions)) for t in request.topics)
        if named > self.max_partitions:
            raise InvalidArgumentError(
                "topics",
                f"the request names {named} partitions; at most {self.max_partitions} are allowed "
                "(list.offsets.max.partitions)",
            )

    async def handle_async(
        self, request: ListOffsetsRequest, *, deadline: float | None = None
    ) -> ListOffsetsResponse:
        """Answer every partition of ``request`` by ``deadline`` (:meth:`deadline`; by default
        from now), awaiting the pools without holding a thread (:meth:`_handle`)."""
        return await self._handle(request, deadline, _AWAIT)

    def handle(self, request: ListOffsetsRequest, *, deadline: float | None = None) -> ListOffsetsResponse:
        """:meth:`handle_async` for callers without an event loop (tools, tests): the same steps,
        waiting on the caller's thread."""
        return run_blocking(self._handle(request, deadline, _BLOCK))

    async def _handle(
        self, request: ListOffsetsRequest, deadline: float | None, waits: _Waits
    ) -> ListOffsetsResponse:
        """Answer every partition of ``request`` by ``deadline``, waiting as ``waits`` says; never
        raises for one partition's failure. Planning a request of many partitions is work for a
        thread, not the event loop.

        A partition asked for twice in one request answers INVALID_REQUEST both times, as Kafka does.

        Raises:
            InvalidArgumentError: the request names too many partitions (:meth:`check_size`).
        """
        self.check_size(request)
        started = time.perf_counter()
        if deadline is None:
            deadline = self.deadline(request.timeout_ms)
        results, wanted = _checked(request)
        stats = {key: FetchStats() for key in wanted}
        isolation = IsolationLevel(request.isolation_level)
        big = len(wanted) > CLOCK_EVERY and waits is _AWAIT
        if big:
            planning = await asyncio.to_thread(self.planner.start, wanted, isolation, deadline, stats)
        else:
            planning = self.planner.start(wanted, isolation, deadline, stats)
        if isinstance(planning.read, Task):
            try:
                await waits.wait([planning.read], deadline - self._clock())
            except BaseException:
                # The request went away (its client, or the server stopping): nobody will finish
                # the planning, so the read is cancelled here, not left queued to run for nobody.
                planning.read.cancel()
                raise
        plan = await asyncio.to_thread(planning.finish, deadline) if big else planning.finish(deadline)
        outcomes = plan.answered
        done_at = dict.fromkeys(outcomes, time.perf_counter())
        plan.metadata_tasks = {k: _timed(f, k, done_at) for k, f in plan.metadata_tasks.items()}
        plan.remote_tasks = {k: _timed(f, k, done_at) for k, f in plan.remote_tasks.items()}
        tasks = [*plan.metadata_tasks, *plan.remote_tasks]
        remaining = deadline - self._clock()
        if tasks and remaining <= 0:
            outcomes.update((key, Outcome(timed_out=True)) for key in tasks)
        elif tasks:
            work = [(self.metadata_pool, plan.metadata_tasks), (self.pool, plan.remote_tasks)]
            outcomes.update(await waits.gather(work, remaining, labels={k: k for k in tasks}))
        for key, outcome in outcomes.items():
            results[key] = _result(key[1], outcome, stats[key])
        response = ListOffsetsResponse(
            tuple(
                TopicResult(
                    topic.name,
                    tuple(
                        results.get((topic.name, q.partition_index)) or _timed_out(q.partition_index)
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
        """Each partition's time from the request's start to its answer (the end, for one that
        timed out), by the tier that answered; and each that answered REQUEST_TIMED_OUT, whatever
        ran out of time (its search, or the read of its view from the store)."""
        assert self.metrics is not None
        ended = time.perf_counter()
        for topic in response.topics:
            for result in topic.partitions:
                at = done_at.get((topic.name, result.partition_index), ended)
                self.metrics.lookup_seconds.labels(result.tier or "none").observe(at - started)
                _count_expired(self.metrics, topic.name, result)

    def plan_one(
        self,
        tp: TopicPartition,
        timestamp: int,
        isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    ) -> OneLookup:
        """One partition's lookup (REST's GET, gRPC's GetOffset), planned once on the caller's
        thread (an event loop's): :attr:`OneLookup.answered` when the plan has the answer, else
        :meth:`OneLookup.finish` reads its view on the metadata pool if need be and runs its
        search on the pool the plan names, awaited until a deadline without holding a thread."""
        return OneLookup(self, tp, timestamp, isolation)

    def find_one(
        self,
        tp: TopicPartition,
        timestamp: int,
        timeout_ms: int | None = None,
        *,
        deadline: float | None = None,
    ) -> PartitionResult:
        """One partition's lookup (:meth:`plan_one`) for callers without an event loop (tools,
        tests), waiting on the caller's thread; ``deadline`` defaults to ``timeout_ms`` (else
        ``remote.list.offsets.request.timeout.ms``) from now."""
        planned = OneLookup(self, tp, timestamp, IsolationLevel.READ_UNCOMMITTED)
        if planned.answered is not None:
            return planned.answered
        return planned.finish_blocking(self.deadline(timeout_ms) if deadline is None else deadline)


class OneLookup:
    """One partition's lookup, planned when made (:meth:`ListOffsets.plan_one`)."""

    def __init__(
        self,
        owner: ListOffsets,
        tp: TopicPartition,
        timestamp: int,
        isolation: IsolationLevel,
    ) -> None:
        self.owner = owner
        self.tp = tp
        self.timestamp = timestamp
        self.isolation = isolation
        self.deadline = 0.0
        self.stats = FetchStats()
        self.started = time.perf_counter()
        self.outcome: Outcome[OffsetAnswer] | None = None
        self.planned: LookupPlan | None = None
        self.answered: PartitionResult | None = None
        """The result when planning found the answer (or the error) on the caller's thread."""
        try:
            if timestamp < -5:
                raise ValueError(f"timestamp {timestamp} is invalid (use ≥ 0 or -1 to -5)")
            validate_topic(tp.topic)
            self.planned = owner.service.plan(tp, timestamp, isolation)
        except Exception as exc:  # answered with its error code
            self.outcome = Outcome(error=exc)
        else:
            if isinstance(self.planned, Answered):
                self.outcome = Outcome(value=self.planned.answer)
        if self.outcome is not None:
            self.answered = self.result()

    async def finish(self, deadline: float) -> PartitionResult:
        """The result: the view read if the plan needs it, then the search run on its pool, both
        awaited until ``deadline`` (a ``time.monotonic`` time)."""
        if self.answered is not None:
            return self.answered
        self.deadline = deadline
        return await self._finish(_AWAIT)

    def finish_blocking(self, deadline: float) -> PartitionResult:
        """:meth:`finish` on the caller's thread, for callers without an event loop."""
        if self.answered is not None:
            return self.answered
        self.deadline = deadline
        return run_blocking(self._finish(_BLOCK))

    async def _finish(self, waits: _Waits) -> PartitionResult:
        """Read the view if the plan needs it, then run the search on its pool; the result."""
        await self._search(waits)
        return self.result()

    async def _search(self, waits: _Waits) -> None:
        owner, planned = self.owner, self.planned
        if isinstance(planned, ViewNeeded):
            planned = await self._plan_with_view(planned, waits)
            if planned is None:
                return
        if isinstance(planned, Answered):
            self.outcome = Outcome(value=planned.answer)
            return
        assert isinstance(planned, Search)
        pool = owner.pool if planned.reads_remote else owner.metadata_pool
        task = search_task(owner.service, planned, self.stats)
        label = (self.tp.topic, self.tp.partition)
        outcomes = await waits.gather([(pool, {0: task})], self._remaining(), labels={0: label})
        self.outcome = outcomes[0]

    async def _plan_with_view(self, needed: ViewNeeded, waits: _Waits) -> LookupPlan | None:
        """The plan made with the view read from the store (or, when the store could not be asked,
        its fallback); None when there is none and :attr:`outcome` says why."""
        service, tp, local = self.owner.service, self.tp, needed.local
        read = (
            await waits.gather(
                [(self.owner.metadata_pool, {0: lambda token: service.views.get(tp, local)})],
                self._remaining(),
                labels={},
            )
        )[0]
        view, error = read.value, read.error
        if read.timed_out:
            self.outcome = Outcome(timed_out=True)
            return None
        if error is not None:
            view = self.owner.planner.fallback((tp.topic, tp.partition), local, error)
            if view is None:
                self.outcome = Outcome(error=error)
                return None
        try:
            planned = service.plan(tp, self.timestamp, self.isolation, local=local, view=view)
        except Exception as exc:
            self.outcome = Outcome(error=exc)
            return None
        if error is not None and not isinstance(planned, Answered):
            # Only the store can tell whether the remote tier holds an earlier match.
            self.outcome = Outcome(error=error)
            return None
        return planned

    def _remaining(self) -> float:
        return self.deadline - self.owner._clock()

    def result(self) -> PartitionResult:
        assert self.outcome is not None
        result = _result(self.tp.partition, self.outcome, self.stats)
        if self.owner.metrics is not None:
            elapsed = time.perf_counter() - self.started
            self.owner.metrics.lookup_seconds.labels(result.tier or "none").observe(elapsed)
            _count_expired(self.owner.metrics, self.tp.topic, result)
        return result


def _count_expired(metrics: Metrics, topic: str, result: PartitionResult) -> None:
    """Count ``result`` in ``rlm_remote_list_offsets_expirations_total`` if it is REQUEST_TIMED_OUT."""
    if result.error_code is ErrorCode.REQUEST_TIMED_OUT:
        metrics.list_offsets_expirations.labels(topic=topic, partition=str(result.partition_index)).inc()


class _Waits:
    """How a request waits for its pool tasks: awaiting them on an event loop (the transports), or
    blocking its thread (callers without a loop, through :func:`~rlm.lookup.pool.run_blocking`)."""

    def __init__(self, blocking: bool) -> None:
        self.blocking = blocking

    async def wait(self, tasks: Sequence[Task[Any]], timeout_s: float) -> None:
        if self.blocking:
            wait_blocking(tasks, timeout_s)
        else:
            await wait_tasks(tasks, timeout_s)

    async def gather(
        self,
        work: Sequence[tuple[BoundedPool, Mapping[K, Callable[[CancelToken], T]]]],
        timeout_s: float,
        *,
        labels: Mapping[K, tuple[str, int]],
    ) -> dict[K, Outcome[T]]:
        # Expirations are counted by the answers that say REQUEST_TIMED_OUT (_count_expired).
        if self.blocking:
            return gather_blocking(work, timeout_s, labels=labels, count_expired=False)
        return await gather_on(work, timeout_s, labels=labels, count_expired=False)


_AWAIT = _Waits(blocking=False)
_BLOCK = _Waits(blocking=True)


def _checked(request: ListOffsetsRequest) -> tuple[dict[Key, PartitionResult], dict[Key, int]]:
    """The answers of the partitions the request itself gets wrong, and the timestamp of each of
    the others. Topic names are checked here, once, whichever API the request came from."""
    counts = Counter((t.name, q.partition_index) for t in request.topics for q in t.partitions)
    results: dict[Key, PartitionResult] = {}
    wanted: dict[Key, int] = {}
    for topic in request.topics:
        try:
            validate_topic(topic.name)
            bad_topic = None
        except InvalidTopicNameError as exc:
            bad_topic = exc
        for query in topic.partitions:
            key = (topic.name, query.partition_index)
            if bad_topic is not None:
                results[key] = PartitionResult(
                    query.partition_index, ErrorCode.INVALID_TOPIC_EXCEPTION, error_message=str(bad_topic)
                )
            elif counts[key] > 1:
                results[key] = PartitionResult(
                    query.partition_index,
                    ErrorCode.INVALID_REQUEST,
                    error_message=f"partition {topic.name}-{query.partition_index} is asked for twice",
                )
            elif query.timestamp < -5:
                results[key] = PartitionResult(
                    query.partition_index,
                    ErrorCode.INVALID_REQUEST,
                    error_message=f"timestamp {query.timestamp} is invalid (use ≥ 0 or -1 to -5)",
                )
            else:
                wanted[key] = query.timestamp
    return results, wanted


def _timed_out(partition: int) -> PartitionResult:
    return PartitionResult(
        partition, ErrorCode.REQUEST_TIMED_OUT, error_message="no answer before the request timeout"
    )


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
    if isinstance(error, InvalidTopicNameError):
        return ErrorCode.INVALID_TOPIC_EXCEPTION
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
