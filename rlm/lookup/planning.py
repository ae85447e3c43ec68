"""Planning a ListOffsets request within its deadline: what each partition needs, and the answers
that need neither the metadata store nor the remote tier, given at once.

1. The partitions' remote-tier views the lookup service does not hold are read in one batch (one
   query for many partitions) on the metadata pool, never on the reader pool (local answers never
   wait behind remote reads, KIP-1075) nor on the request's thread (a request waits for the store
   no longer than its deadline, awaiting it without holding a thread). While it runs, the
   partitions whose views are held are planned (:meth:`Planner.start`); the others once it is
   done (:meth:`Planning.finish`).
2. Then the others: each partition is planned once with its view
   (:meth:`~rlm.lookup.service.LookupService.plan`): answered on the request's thread when its
   view and the broker's files give the answer; else its search becomes a task, for the reader
   pool when it may read the remote tier, else for the metadata pool.
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
from rlm.lookup.plans import Answered, IsolationLevel, OffsetAnswer, Search
from rlm.lookup.pool import BoundedPool, CancelToken, Outcome, Task
from rlm.lookup.service import LookupService
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

    def start(
        self,
        wanted: Mapping[Key, int],
        isolation: IsolationLevel,
        deadline: float,
        stats: Mapping[Key, FetchStats],
    ) -> Planning:
        """Plan the partitions of ``wanted`` (each with its timestamp) whose views are held, and
        start reading the others' (:attr:`Planning.read`; await it, then :meth:`Planning.finish`)."""
        planning = Planning(_Step(self, Plan(), wanted, isolation, stats))
        held: dict[Key, tuple[PartitionDir | None, RemoteTierView]] = {}
        for i, key in enumerate(wanted):
            if i % CLOCK_EVERY == 0 and self.clock() >= deadline:
                return planning
            tp = TopicPartition(*key)
            try:
                local = self.service.pinned_partition(tp)
            except Exception as exc:  # reported per partition, as Kafka does
                planning.plan.answered[key] = Outcome(error=exc)
                continue
            view = self.service.views.cached(tp, local)
            if view is None:
                planning.missing[key] = local
            else:
                held[key] = (local, view)
        if planning.missing:
            planning.read = self._start_read(planning.missing)
        if not planning.step.answer_all(held.items(), deadline):
            planning.finished = True
        return planning

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

    def fallback(self, key: Key, local: PartitionDir | None, error: BaseException) -> RemoteTierView | None:
        """The view to plan with when ``error`` kept the store from being asked, if any."""
        # A fallback view answers as exactly whatever kept the store from being asked.
        if not isinstance(error, MetadataUnavailableError | PoolError):
            return None
        return self.service.views.fallback(TopicPartition(*key), local)


@dataclass
class Planning:
    """One request's planning, between :meth:`Planner.start` and :meth:`finish`."""

    step: _Step
    missing: dict[Key, PartitionDir | None] = field(default_factory=dict)
    """The partitions whose views are being read."""
    read: ViewsRead | BaseException | None = None
    """The read of their views (await it with :func:`~rlm.lookup.pool.wait_tasks`), or why it
    could not be started; None when every view was held."""
    finished: bool = False

    @property
    def plan(self) -> Plan:
        return self.step.plan

    def finish(self, deadline: float) -> Plan:
        """Plan the partitions whose views were read (the read is done, or the deadline passed:
        they are left out of the plan and the read is cancelled)."""
        read, self.read = self.read, None
        if self.finished or read is None:
            if isinstance(read, Task):
                read.cancel()  # the deadline passed while the held views were planned
            return self.plan
        self.finished = True
        planner = self.step.planner
        if isinstance(read, BaseException):
            views: dict[TopicPartition, RemoteTierView] | BaseException = read
        elif not read.done():
            read.cancel()
            return self.plan  # the deadline passed first
        else:
            try:
                views = read.result(0)
            except Exception as exc:
                views = exc
        if isinstance(views, BaseException):
            error = views
            fallbacks = (
                (key, (local, planner.fallback(key, local, error))) for key, local in self.missing.items()
            )
            self.step.answer_all(fallbacks, deadline, error)
        else:
            read_views = ((key, (local, views[TopicPartition(*key)])) for key, local in self.missing.items())
            self.step.answer_all(read_views, deadline)
        return self.plan


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
            planned = service.plan(tp, timestamp, self.isolation, local=local, view=view)
        except Exception as exc:  # reported per partition, as Kafka does
            plan.answered[key] = Outcome(error=exc)
            return
        if isinstance(planned, Answered):
            plan.answered[key] = Outcome(value=planned.answer)
        elif store_error is not None or not isinstance(planned, Search):
            # Only the store can tell whether the remote tier holds an earlier match.
            plan.answered[key] = Outcome(error=store_error or RlmError(f"no remote-tier view of {key}"))
        else:
            tasks = plan.remote_tasks if planned.reads_remote else plan.metadata_tasks
            tasks[key] = search_task(service, planned, stats)


def search_task(
    service: LookupService, search: Search, stats: FetchStats
) -> Callable[[CancelToken], OffsetAnswer]:
    """The pool task running ``search``; it stops when its token is cancelled."""

    def run(token: CancelToken) -> OffsetAnswer:
        return service.search(search, stats=stats, checkpoint=token.raise_if_cancelled)

    return run
