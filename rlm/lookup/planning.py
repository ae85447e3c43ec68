"""Planning a ListOffsets request within its deadline: what each partition needs, and the answers
that need neither the metadata store nor the remote tier, given at once.

1. The partitions' remote-tier views the lookup service does not hold are read in one batch (one
   query for many partitions) on the metadata pool, never on the reader pool (local answers never
   wait behind remote reads, KIP-1075) nor on the request's thread (a request waits for the store
   no longer than its deadline). While it runs, the partitions whose views are held are answered.
2. Then the others: a partition whose answer its view and the broker's files give is answered on
   the request's thread (:meth:`~rlm.lookup.service.LookupService.answer_from_view`); the others
   become a task, for the reader pool when the answer may need a remote read, else for the
   metadata pool.
3. When the store could not be asked (down, or the metadata pool full), a partition whose answer
   stays exact without it uses a fallback view (:mod:`rlm.lookup.views`); the others get the error.

Partitions not reached by the deadline are left out of the plan (their request answers them
REQUEST_TIMED_OUT). The clock is read every ``CLOCK_EVERY`` partitions.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from rlm.errors import MetadataUnavailableError, PoolError, RlmError
from rlm.log.logdir import PartitionDir
from rlm.lookup.pool import BoundedPool, CancelToken, Outcome, Task
from rlm.lookup.service import IsolationLevel, LookupService, OffsetAnswer
from rlm.lookup.stats import FetchStats
from rlm.lookup.views import RemoteTierView
from rlm.metastore.model import TopicPartition

Key = tuple[str, int]
Tasks = dict[Key, Callable[[CancelToken], OffsetAnswer]]
ViewsRead = Task[dict[TopicPartition, RemoteTierView]]
#: Partitions planned between two looks at the clock.
CLOCK_EVERY = 64


@dataclass
class Plan:
    """What planning answered, and the tasks of the partitions it could not answer."""

    answered: dict[Key, Outcome[OffsetAnswer]] = field(default_factory=dict)
    metadata_tasks: Tasks = field(default_factory=dict)
    remote_tasks: Tasks = field(default_factory=dict)


class Planner:
    """Plans requests with ``service``, reading views on ``metadata_pool``."""

    def __init__(
        self, service: LookupService, metadata_pool: BoundedPool, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.service = service
        self.metadata_pool = metadata_pool
        self.clock = clock

    def plan(
        self,
        wanted: Mapping[Key, int],
        isolation: IsolationLevel,
        deadline: float,
        stats: Mapping[Key, FetchStats],
    ) -> Plan:
        """Plan the partitions of ``wanted`` (each with its timestamp) by ``deadline``."""
        plan = Plan()
        held: dict[Key, tuple[PartitionDir | None, RemoteTierView]] = {}
        missing: dict[Key, PartitionDir | None] = {}
        for i, key in enumerate(wanted):
            if i % CLOCK_EVERY == 0 and self.clock() >= deadline:
                return plan
            tp = TopicPartition(*key)
            try:
                local = self.service.pinned_partition(tp)
            except Exception as exc:  # reported per partition, as Kafka does
                plan.answered[key] = Outcome(error=exc)
                continue
            view = self.service.views.cached(tp, local)
            if view is None:
                missing[key] = local
            else:
                held[key] = (local, view)
        read = self._start_read(missing) if missing else None
        step = _Step(self, plan, wanted, isolation, stats)
        if not step.answer_all(held.items(), deadline) or read is None:
            return plan
        views = self._views_read(read, deadline)
        if views is None:
            return plan  # the deadline passed first
        if isinstance(views, BaseException):
            fallbacks = ((key, (local, self._fallback(key, local, views))) for key, local in missing.items())
            step.answer_all(fallbacks, deadline, views)
        else:
            read_views = ((key, (local, views[TopicPartition(*key)])) for key, local in missing.items())
            step.answer_all(read_views, deadline)
        return plan

    def _start_read(self, missing: Mapping[Key, PartitionDir | None]) -> ViewsRead | BaseException:
        """The batched read of ``missing``'s views, started; or why it could not be."""
        availability = self.service.availability
        if availability.refusing():
            return availability.unavailable()  # it just failed: do not wait for it again
        views = self.service.views
        partitions = {TopicPartition(*key): local for key, local in missing.items()}
        try:
            return self.metadata_pool.submit(lambda token: views.read(partitions))
        except RlmError as exc:
            return exc

    def _views_read(
        self, read: ViewsRead | BaseException, deadline: float
    ) -> dict[TopicPartition, RemoteTierView] | BaseException | None:
        """The views read; the error that kept them from being read; None at the deadline."""
        if isinstance(read, BaseException):
            return read
        if not read.wait(max(0.0, deadline - self.clock())):
            read.cancel()
            return None
        try:
            return read.result(0)
        except Exception as exc:
            return exc

    def _fallback(self, key: Key, local: PartitionDir | None, error: BaseException) -> RemoteTierView | None:
        # A fallback view answers as exactly whatever kept the store from being asked.
        if not isinstance(error, MetadataUnavailableError | PoolError):
            return None
        return self.service.views.fallback(TopicPartition(*key), local)


@dataclass
class _Step:
    """Answers partitions from their views into a plan (or makes their tasks)."""

    planner: Planner
    plan: Plan
    wanted: Mapping[Key, int]
    isolation: IsolationLevel
    stats: Mapping[Key, FetchStats]

    def answer_all(
        self,
        partitions: Iterable[tuple[Key, tuple[PartitionDir | None, RemoteTierView | None]]],
        deadline: float,
        store_error: BaseException | None = None,
    ) -> bool:
        """Answer each ``(key, (local, view))``; ``store_error``: the views are fallbacks (or
        None where there is none) because the store could not be asked. False at the deadline."""
        for i, (key, (local, view)) in enumerate(partitions):
            if i % CLOCK_EVERY == 0 and self.planner.clock() >= deadline:
                return False
            self._answer(key, local, view, store_error)
        return True

    def _answer(
        self,
        key: Key,
        local: PartitionDir | None,
        view: RemoteTierView | None,
        store_error: BaseException | None,
    ) -> None:
        service, plan = self.planner.service, self.plan
        if view is None:
            plan.answered[key] = Outcome(error=store_error or RlmError(f"no remote-tier view of {key}"))
            return
        tp, timestamp, stats = TopicPartition(*key), self.wanted[key], self.stats[key]
        try:
            answer = service.answer_from_view(
                tp, local, timestamp, view, stats=stats, isolation=self.isolation
            )
        except Exception as exc:  # reported per partition, as Kafka does
            plan.answered[key] = Outcome(error=exc)
            return
        if answer is not None:
            plan.answered[key] = Outcome(value=answer)
        elif store_error is not None:
            # Only the store can tell whether the remote tier holds an earlier match.
            plan.answered[key] = Outcome(error=store_error)
        else:
            tasks = plan.remote_tasks if service.reads_remote(timestamp, view) else plan.metadata_tasks
            tasks[key] = self._task(tp, timestamp, stats)

    def _task(
        self, tp: TopicPartition, timestamp: int, stats: FetchStats
    ) -> Callable[[CancelToken], OffsetAnswer]:
        service, isolation = self.planner.service, self.isolation

        def run(token: CancelToken) -> OffsetAnswer:
            return service.find(
                tp, timestamp, stats=stats, checkpoint=token.raise_if_cancelled, isolation=isolation
            )

        return run
