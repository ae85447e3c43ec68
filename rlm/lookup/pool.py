"""Bounded, resizable task pools with per-request deadlines (KIP-1075).

Remote lookups never run on request-serving threads. Each partition of a ListOffsets request becomes
one task on the "offset-reader" pool (``remote.log.offset.reader.threads`` threads, a queue of at most
``remote.log.offset.read.max.pending.tasks``); remote fetches run on their own "remote-fetch" pool so
the two never starve each other. A full queue rejects at once with the retriable ``PoolFullError``.

The bridge from a request to the pools is asynchronous (:func:`gather_on`, :func:`run_on`): the
request's coroutine awaits its tasks until its deadline, the request's own ``timeout_ms``, else
``remote.list.offsets.request.timeout.ms`` held by ``RequestTimeout``, which can change at run time
like the pool's thread count (``BoundedPool.resize``); no thread waits for them. A task wakes the
event loop when it ends. Partitions not done by the deadline are cancelled and answer
REQUEST_TIMED_OUT; the others answer normally. A request whose coroutine is cancelled (its client
went away) cancels its tasks. Callers without an event loop (tools, tests) wait on their own
thread (:func:`gather_blocking`), with the same submission, deadline and cancellation.

Cancellation is cooperative: a queued task that is cancelled never runs; a running task is told
through its ``CancelToken`` and stops at its next check (long remote reads check between ranged GETs).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Coroutine, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from rlm.errors import (
    ConfigError,
    PoolClosedError,
    PoolFullError,
    RequestTimedOutError,
    RlmError,
    TaskCancelledError,
)
from rlm.metrics import Metrics

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)

Clock = Callable[[], float]


class CancelToken:
    """Tells a running task that its answer is no longer wanted (deadline passed or pool closed)."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = threading.Event()

    @property
    def cancelled(self) -> bool:
        """Whether the task was cancelled."""
        return self._event.is_set()

    def cancel(self) -> None:
        """Mark the token cancelled (idempotent)."""
        self._event.set()

    def raise_if_cancelled(self) -> None:
        """Raise ``TaskCancelledError`` when the token was cancelled; check it between remote reads."""
        if self._event.is_set():
            raise TaskCancelledError("the task was cancelled")

    def wait(self, timeout: float | None = None) -> bool:
        """Block up to ``timeout`` seconds or until cancelled; True when cancelled (for back-off waits)."""
        return self._event.wait(timeout)


@dataclass(frozen=True)
class Outcome(Generic[T]):
    """How one task of a request ended: a value, an error, or timed out (REQUEST_TIMED_OUT)."""

    value: T | None = None
    """The task's return value (``None`` is a valid value, e.g. "no offset found")."""
    error: BaseException | None = None
    """What the task raised, or why it was not run (``PoolFullError``, ``PoolClosedError``)."""
    timed_out: bool = False
    """The request's deadline passed before the task finished; the task was cancelled."""

    def unwrap(self) -> T:
        """The value; raises the error, or ``RequestTimedOutError`` when the task timed out."""
        if self.timed_out:
            raise RequestTimedOutError("the request's deadline passed before this partition was read")
        if self.error is not None:
            raise self.error
        return cast(T, self.value)


class _State(enum.Enum):
    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"
    CANCELLED = "cancelled"


class Task(Generic[T]):
    """One submitted unit of work. Created by ``BoundedPool.submit``."""

    def __init__(
        self, pool: BoundedPool, fn: Callable[[CancelToken], T], label: tuple[str, int] | None, at: float
    ) -> None:
        self.label = label
        """The topic-partition the task reads, if any (for the expirations metric)."""
        self.token = CancelToken()
        self._pool = pool
        self._fn = fn
        self._submitted_at = at
        self._state = _State.QUEUED  # guarded by the pool's lock
        self._done = threading.Event()
        self._value: T | None = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[], None]] = []  # guarded by the pool's lock

    def done(self) -> bool:
        """Whether the task finished, failed or was cancelled while queued."""
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the task is done or ``timeout`` seconds passed; True when done."""
        return self._done.wait(timeout)

    def add_done_callback(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` once the task is done (at once when it is): on the pool's thread that
        ran or dropped it, which must not be blocked (e.g. ``loop.call_soon_threadsafe``)."""
        with self._pool._lock:
            if not self._done.is_set():
                self._callbacks.append(fn)
                return
        fn()

    def _settle(self) -> list[Callable[[], None]]:
        # Caller holds the pool's lock; it calls the callbacks returned once it released it.
        self._done.set()
        callbacks, self._callbacks = self._callbacks, []
        return callbacks

    def cancel(self) -> bool:
        """Cancel the task. A queued task is dropped and never runs; a running one sees its token set.

        Returns:
            False when the task had already finished (its result stands), True otherwise.
        """
        return self._pool._cancel(self)

    def result(self, timeout: float | None = None) -> T:
        """Wait up to ``timeout`` seconds (forever when None) and return the value or raise its error.

        Raises:
            RequestTimedOutError: the task is not done after ``timeout`` seconds (it keeps going).
            TaskCancelledError: the task was cancelled while queued, or stopped at its token's check.
        """
        if not self._done.wait(timeout):
            raise RequestTimedOutError(f"task not done after {timeout} s")
        return self._outcome().unwrap()

    def _outcome(self) -> Outcome[T]:
        return Outcome(value=self._value, error=self._error)

    def _run(self) -> None:
        try:
            self._value = self._fn(self.token)
        except BaseException as exc:  # reported to whoever waits on the task; the worker thread lives on
            self._error = exc


class _IdleMeter:
    """Idle share of a pool's thread-time over a sliding window, like Kafka's sampled rates.

    Time is cut into ``slots`` fixed slots of ``window_s / slots`` seconds, each holding the busy and
    the live thread-seconds accrued in it; the value sums the slots of the last window. Thread and
    busy counts are piecewise constant between updates, so accrual is exact, and counting *live*
    threads keeps it right across resizes. Memory is fixed: ``slots`` entries.
    """

    def __init__(self, now: float, window_s: float = 30.0, slots: int = 6) -> None:
        self._width = window_s / slots
        self._slots = slots
        self._busy = [0.0] * slots
        self._capacity = [0.0] * slots
        self._epoch = [-1] * slots  # which slot number (time // width) each entry holds
        self._last = now
        self._threads = 0
        self._running = 0

    def update(self, now: float, *, threads: int, running: int) -> None:
        """Accrue up to ``now`` at the old counts, then switch to the new ones."""
        self._accrue(now)
        self._threads = threads
        self._running = running

    def percent(self, now: float) -> float:
        """Idle percent over the last window; the instantaneous share when no thread-time passed yet."""
        self._accrue(now)
        current = int(now // self._width)
        live = [i for i in range(self._slots) if current - self._slots < self._epoch[i] <= current]
        capacity = sum(self._capacity[i] for i in live)
        if capacity <= 0.0:
            if self._threads == 0:
                return 100.0
            return 100.0 * (self._threads - self._running) / self._threads
        busy = sum(self._busy[i] for i in live)
        return min(100.0, max(0.0, 100.0 * (1.0 - busy / capacity)))

    def _accrue(self, now: float) -> None:
        start = self._last
        if now <= start:
            return
        last_slot = int(now // self._width)
        for n in range(max(int(start // self._width), last_slot - self._slots + 1), last_slot + 1):
            seconds = min(now, (n + 1) * self._width) - max(start, n * self._width)
            if seconds <= 0.0:
                continue
            i = n % self._slots
            if self._epoch[i] != n:
                self._epoch[i], self._busy[i], self._capacity[i] = n, 0.0, 0.0
            self._busy[i] += self._running * seconds
            self._capacity[i] += self._threads * seconds
        self._last = now


class BoundedPool:
    """A fixed-purpose pool of at most ``threads`` workers and a queue of at most ``max_pending`` tasks.

    Build one per purpose ("offset-reader", "remote-fetch") in the composition root, e.g.
    ``BoundedPool("offset-reader", s.remote_log_offset_reader_threads,
    s.remote_log_offset_read_max_pending_tasks, metrics)``, and ``close`` it on shutdown. One live pool
    per name per ``Metrics``: the pool's gauges are labelled by its name.

    Args:
        name: the pool's name, used as the ``pool`` metric label and in thread names.
        threads: worker threads (>= 1); change it later with ``resize``.
        max_pending: tasks that may wait in the queue (>= 1); one more is rejected at once.
        metrics: where the queue size, idle percent, rejections and task latency are reported.
        clock: monotonic seconds, for the idle percent and the task latency only.
    """

    def __init__(
        self, name: str, threads: int, max_pending: int, metrics: Metrics, *, clock: Clock = time.monotonic
    ) -> None:
        _check_positive("threads", threads)
        _check_positive("max_pending", max_pending)
        self.name = name
        self._metrics = metrics
        self._clock = clock
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)
        self._queue: deque[Task[Any]] = deque()  # bounded by _max_pending
        self._active: set[Task[Any]] = set()  # running tasks, bounded by the live threads
        self._workers: set[threading.Thread] = set()  # live threads, surplus ones included
        self._threads = threads
        self._max_pending = max_pending
        self._started = 0
        self._closed = False
        self._idle = _IdleMeter(clock())
        metrics.pool_task_queue_size.labels(pool=name).set_function(lambda: len(self._queue))
        metrics.pool_avg_idle_percent.labels(pool=name).set_function(self.idle_percent)
        with self._lock:
            self._start_workers()

    @property
    def threads(self) -> int:
        """The configured thread count."""
        return self._threads

    @property
    def live_threads(self) -> int:
        """Worker threads alive, including ones finishing a last task after a shrink."""
        return len(self._workers)

    @property
    def max_pending(self) -> int:
        """The most tasks the queue holds."""
        return self._max_pending

    @property
    def pending(self) -> int:
        """Tasks waiting in the queue."""
        return len(self._queue)

    @property
    def running(self) -> int:
        """Tasks running now."""
        return len(self._active)

    def idle_percent(self) -> float:
        """Share of live thread-time spent idle over the last 30 s, in percent."""
        with self._lock:
            return self._idle.percent(self._clock())

    def submit(self, fn: Callable[[CancelToken], T], *, label: tuple[str, int] | None = None) -> Task[T]:
        """Queue ``fn(token)``; it runs on a pool thread as soon as one is free.

        Args:
            fn: the work; long work should check ``token`` between steps and stop when cancelled.
            label: the topic-partition ``fn`` reads, reported when its request expires.

        Raises:
            PoolFullError: ``max_pending`` tasks are already queued (retriable; raised without waiting).
            PoolClosedError: the pool was closed.
        """
        with self._lock:
            if self._closed:
                raise PoolClosedError(f"{self.name} pool is closed")
            if len(self._queue) < self._max_pending:
                task = Task(self, fn, label, self._clock())
                self._queue.append(task)
                self._wakeup.notify()
                return task
        self._metrics.pool_tasks_rejected.labels(pool=self.name).inc()
        raise PoolFullError(f"{self.name} pool already has {self._max_pending} pending tasks; retry later")

    def resize(self, threads: int) -> None:
        """Change the thread count at run time.

        Growing starts threads at once. Shrinking lets surplus threads exit when idle, or after
        their current task: a running task is never interrupted, and no task starts on a thread
        beyond the new count.
        """
        _check_positive("threads", threads)
        with self._lock:
            if self._closed:
                raise PoolClosedError(f"{self.name} pool is closed")
            self._threads = threads
            self._start_workers()
            self._wakeup.notify_all()

    def set_max_pending(self, max_pending: int) -> None:
        """Change the queue bound; tasks already queued beyond a smaller bound stay queued."""
        _check_positive("max_pending", max_pending)
        with self._lock:
            self._max_pending = max_pending

    def close(self, *, wait: bool = True) -> None:
        """Stop the pool (idempotent): queued tasks are cancelled, running tasks' tokens are set.

        Args:
            wait: join the worker threads, i.e. wait for running tasks to return.
        """
        with self._lock:
            first = not self._closed
            self._closed = True
            dropped = list(self._queue)
            self._queue.clear()
            callbacks = [callback for task in dropped for callback in self._drop(task)]
            for task in self._active:
                task.token.cancel()
            self._wakeup.notify_all()
            workers = list(self._workers)
        for callback in callbacks:
            callback()
        if first:
            self._metrics.pool_task_queue_size.remove(self.name)
            self._metrics.pool_avg_idle_percent.remove(self.name)
        if wait:
            me = threading.current_thread()
            for worker in workers:
                if worker is not me:
                    worker.join()

    def __enter__(self) -> BoundedPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _start_workers(self) -> None:
        # Caller holds the lock. Surplus threads still finishing a task count as live, so a shrink
        # followed by a grow does not overshoot the thread count.
        for _ in range(self._threads - len(self._workers)):
            self._started += 1
            worker = threading.Thread(target=self._work, name=f"rlm-{self.name}-{self._started}", daemon=True)
            self._workers.add(worker)
            worker.start()
        self._update_idle()

    def _update_idle(self) -> None:
        self._idle.update(self._clock(), threads=len(self._workers), running=len(self._active))

    def _work(self) -> None:
        me = threading.current_thread()
        while True:
            with self._lock:
                while not self._queue and not self._closed and len(self._workers) <= self._threads:
                    self._wakeup.wait()
                if self._closed or len(self._workers) > self._threads:
                    self._workers.discard(me)
                    self._update_idle()
                    if self._queue:
                        self._wakeup.notify()  # the wake-up of a submit may have been meant for another
                    return
                task = self._queue.popleft()
                task._state = _State.RUNNING
                self._active.add(task)
                self._update_idle()
            task._run()
            # Observed before the task is marked done, so whoever sees it done also sees it counted.
            self._metrics.pool_task_seconds.labels(pool=self.name).observe(self._clock() - task._submitted_at)
            with self._lock:
                self._active.discard(task)
                task._state = _State.FINISHED
                self._update_idle()
                callbacks = task._settle()
            for callback in callbacks:
                callback()

    def _cancel(self, task: Task[Any]) -> bool:
        callbacks: list[Callable[[], None]] = []
        with self._lock:
            if task._state is _State.QUEUED:
                self._queue.remove(task)
                callbacks = self._drop(task)
            elif task._state is _State.RUNNING:
                task.token.cancel()
            else:
                return False
        for callback in callbacks:
            callback()
        return True

    def _drop(self, task: Task[Any]) -> list[Callable[[], None]]:
        # Caller holds the lock and has taken ``task`` out of the queue; it calls the callbacks
        # returned once it released the lock.
        task._state = _State.CANCELLED
        task._error = TaskCancelledError(f"task cancelled before it ran on the {self.name} pool")
        task.token.cancel()
        return task._settle()


class RequestTimeout:
    """``remote.list.offsets.request.timeout.ms``: the wait for requests that bring no ``timeout_ms``.

    Changeable at run time from any thread; the next request uses the new value.
    """

    def __init__(self, default_ms: int = 30_000) -> None:
        _check_positive("remote.list.offsets.request.timeout.ms", default_ms)
        self._default_ms = default_ms
        self._lock = threading.Lock()

    @property
    def default_ms(self) -> int:
        """The current default, in milliseconds."""
        with self._lock:
            return self._default_ms

    @default_ms.setter
    def default_ms(self, value: int) -> None:
        _check_positive("remote.list.offsets.request.timeout.ms", value)
        with self._lock:
            self._default_ms = value

    def seconds_for(self, timeout_ms: int | None) -> float:
        """The wait for a request: its own ``timeout_ms`` when given (>= 0), else the default.

        Kafka's ListOffsets v10 sends ``timeout_ms``; older requests carry none (or -1).
        """
        if timeout_ms is None or timeout_ms < 0:
            timeout_ms = self.default_ms
        return timeout_ms / 1000.0


async def wait_tasks(tasks: Collection[Task[Any]], timeout_s: float) -> None:
    """Await until every task is done or ``timeout_s`` seconds passed, holding no thread: each task
    wakes the event loop when it ends. Cancelling the awaiting coroutine leaves the tasks running
    (their owner cancels them)."""
    loop = asyncio.get_running_loop()
    pending = [task for task in tasks if not task.done()]
    if not pending or timeout_s <= 0:
        return
    futures = []
    for task in pending:
        future: asyncio.Future[None] = loop.create_future()
        task.add_done_callback(_waker(loop, future))
        futures.append(future)
    try:
        await asyncio.wait(futures, timeout=timeout_s)
    finally:
        for future in futures:
            future.cancel()


def _waker(loop: asyncio.AbstractEventLoop, future: asyncio.Future[None]) -> Callable[[], None]:
    def settle() -> None:
        if not future.done():  # the waiter may have given up
            future.set_result(None)

    def wake() -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(settle)

    return wake


async def gather_on(
    work: Sequence[tuple[BoundedPool, Mapping[K, Callable[[CancelToken], T]]]],
    timeout_s: float,
    *,
    labels: Mapping[K, tuple[str, int]],
    count_expired: bool = True,
) -> dict[K, Outcome[T]]:
    """Run each task on its pool, in parallel, and await them at most ``timeout_s`` seconds.

    Args:
        work: each pool with the tasks it runs, one per key (per partition of a request); each
            key in one pool only.
        timeout_s: the request's deadline, from now.
        labels: the topic-partition of each key; keys without one are not counted as expired.
        count_expired: count each labelled task cut off by the deadline as an expiration of its
            topic-partition (``rlm_remote_list_offsets_expirations_total``); a request that goes
            away (cancelled) counts none.

    Returns:
        One outcome per key, in the order of ``work``: the value, the error the task raised (or the
        ``PoolFullError``/``PoolClosedError`` that kept it from being queued), or ``timed_out``
        when it was not done by the deadline; such a task is cancelled.

    Raises:
        asyncio.CancelledError: the awaiting coroutine was cancelled; its tasks are cancelled too.
    """
    outcomes, submitted = _submit_all(work, labels)
    try:
        await wait_tasks([task for _, task in submitted.values()], timeout_s)
    except BaseException:  # the request went away: its tasks are not wanted, and none expired
        _collect(outcomes, submitted, count_expired=False)
        raise
    _collect(outcomes, submitted, count_expired)
    return {key: outcomes[key] for _, tasks in work for key in tasks}


def gather_blocking(
    work: Sequence[tuple[BoundedPool, Mapping[K, Callable[[CancelToken], T]]]],
    timeout_s: float,
    *,
    labels: Mapping[K, tuple[str, int]],
    count_expired: bool = True,
) -> dict[K, Outcome[T]]:
    """:func:`gather_on` for callers without an event loop (tools, tests): the caller's thread
    waits. The transports await :func:`gather_on` instead."""
    outcomes, submitted = _submit_all(work, labels)
    wait_blocking([task for _, task in submitted.values()], timeout_s)
    _collect(outcomes, submitted, count_expired)
    return {key: outcomes[key] for _, tasks in work for key in tasks}


def wait_blocking(tasks: Collection[Task[Any]], timeout_s: float) -> None:
    """:func:`wait_tasks` on the caller's thread."""
    deadline = time.monotonic() + timeout_s
    for task in tasks:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not task.wait(remaining):
            return


_Submitted = dict[K, tuple[BoundedPool, Task[T]]]


def _submit_all(
    work: Sequence[tuple[BoundedPool, Mapping[K, Callable[[CancelToken], T]]]],
    labels: Mapping[K, tuple[str, int]],
) -> tuple[dict[K, Outcome[T]], _Submitted[K, T]]:
    """Queue every task on its pool; the outcomes of those that could not be queued."""
    outcomes: dict[K, Outcome[T]] = {}
    submitted: _Submitted[K, T] = {}
    for pool, tasks in work:
        for key, fn in tasks.items():
            try:
                submitted[key] = (pool, pool.submit(fn, label=labels.get(key)))
            except RlmError as exc:
                outcomes[key] = Outcome(error=exc)
    return outcomes, submitted


def _collect(outcomes: dict[K, Outcome[T]], submitted: _Submitted[K, T], count_expired: bool) -> None:
    """Note each submitted task's outcome; cancel those not done (the deadline passed)."""
    for key, (pool, task) in submitted.items():
        if task.done() or not task.cancel():
            outcomes[key] = task._outcome()
            continue
        outcomes[key] = Outcome(timed_out=True)
        if count_expired and task.label is not None:
            topic, partition = task.label
            pool._metrics.list_offsets_expirations.labels(topic=topic, partition=str(partition)).inc()


async def run_on(
    pool: BoundedPool,
    fn: Callable[[CancelToken], T],
    timeout_s: float,
    *,
    label: tuple[str, int] | None = None,
    what: str = "the task",
) -> T:
    """Run ``fn`` on ``pool`` and await its value at most ``timeout_s`` seconds (then it is
    cancelled), holding no thread.

    Raises:
        PoolFullError: the pool's queue is full.
        RequestTimedOutError: ``fn`` did not finish in time; the message starts with ``what``.
        Whatever ``fn`` raised.
    """
    labels = {0: label} if label is not None else {}
    outcome = (await gather_on([(pool, {0: fn})], timeout_s, labels=labels, count_expired=False))[0]
    if outcome.timed_out:
        raise RequestTimedOutError(f"{what} did not finish in time ({timeout_s * 1000:.0f} ms)")
    return outcome.unwrap()


def run_blocking(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run to its end a coroutine that waits only by blocking (its waits are
    :func:`gather_blocking` and :func:`wait_blocking`), without an event loop: for callers that
    have none, sharing the request path's code.

    Raises:
        RuntimeError: the coroutine suspended (it awaited something an event loop must resume).
    """
    try:
        coroutine.send(None)
    except StopIteration as finished:
        return cast(T, finished.value)
    coroutine.close()
    raise RuntimeError("run_blocking: the coroutine awaited an event loop; await it on one instead")


def run_all(
    pool: BoundedPool,
    tasks: Mapping[K, Callable[[CancelToken], T]],
    timeout_s: float,
    *,
    labels: Mapping[K, tuple[str, int]],
) -> dict[K, Outcome[T]]:
    """:func:`gather_blocking` for one pool."""
    return gather_blocking([(pool, tasks)], timeout_s, labels=labels)


def _check_positive(name: str, value: int) -> None:
    if value <= 0:
        raise ConfigError(f"{name} must be > 0, not {value}")
