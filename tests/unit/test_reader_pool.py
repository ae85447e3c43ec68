"""The bounded reader pools of KIP-1075: parallelism, rejection, deadlines, resizing, metrics, close.

Synchronisation is by events and barriers only. Waits that carry a timeout (``WAIT``) are failure
bounds, never the thing a test relies on; the idle-percent tests drive a fake clock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from rlm.errors import (
    ConfigError,
    PoolClosedError,
    PoolFullError,
    RequestTimedOutError,
    TaskCancelledError,
)
from rlm.lookup.pool import BoundedPool, CancelToken, Outcome, RequestTimeout, run_all
from rlm.metrics import Metrics
from tests.clock import FakeClock

WAIT = 10.0
"""Upper bound for an event that must happen; reached only when the behaviour is broken."""


def sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def blocked_on(gate: threading.Event, started: threading.Event | None = None) -> Callable[[CancelToken], str]:
    def task(token: CancelToken) -> str:
        if started is not None:
            started.set()
        assert gate.wait(WAIT)
        return "released"

    return task


def until_cancelled(started: threading.Event) -> Callable[[CancelToken], str]:
    def task(token: CancelToken) -> str:
        started.set()
        assert token.wait(WAIT)
        token.raise_if_cancelled()
        return "not reached"

    return task


def test_runs_up_to_threads_tasks_at_once(metrics: Metrics, gate: threading.Event) -> None:
    barrier = threading.Barrier(3)
    met = threading.Semaphore(0)

    def meet(token: CancelToken) -> int:
        index = barrier.wait(WAIT)  # breaks (and fails the task) unless 3 run at once
        met.release()
        assert gate.wait(WAIT)
        return index

    fourth_started = threading.Event()
    with BoundedPool("offset-reader", 3, 10, metrics) as pool:
        tasks = [pool.submit(meet) for _ in range(3)]
        for _ in range(3):
            assert met.acquire(timeout=WAIT)
        extra = pool.submit(blocked_on(gate, fourth_started))
        assert (pool.running, pool.pending) == (3, 1)
        assert not fourth_started.is_set()
        assert not extra.done()
        gate.set()
        assert sorted(t.result(WAIT) for t in tasks) == [0, 1, 2]
        assert extra.result(WAIT) == "released"
        assert fourth_started.is_set()


def test_full_queue_rejects_at_once_with_a_retriable_error(metrics: Metrics, gate: threading.Event) -> None:
    started = threading.Event()
    with BoundedPool("offset-reader", 1, 2, metrics) as pool:
        running = pool.submit(blocked_on(gate, started))
        assert started.wait(WAIT)
        queued = [pool.submit(blocked_on(gate)) for _ in range(2)]
        with pytest.raises(PoolFullError) as caught:
            pool.submit(blocked_on(gate))
        assert caught.value.retriable
        assert sample(metrics, "rlm_pool_tasks_rejected_total", pool="offset-reader") == 1
        assert pool.pending == 2
        gate.set()
        assert [t.result(WAIT) for t in [running, *queued]] == ["released"] * 3
        assert pool.submit(lambda token: "room again").result(WAIT) == "room again"


def test_run_all_times_out_unfinished_partitions_and_cancels_them(
    metrics: Metrics, gate: threading.Event
) -> None:
    neighbour_started = threading.Event()
    slow_tokens: list[CancelToken] = []
    queued_ran = threading.Event()

    def slow(token: CancelToken) -> str:
        slow_tokens.append(token)
        assert gate.wait(WAIT)
        return "late"

    def queued(token: CancelToken) -> str:
        queued_ran.set()
        return "never"

    def failing(token: CancelToken) -> str:
        raise ValueError("corrupt index")

    pool = BoundedPool("offset-reader", 2, 10, metrics)
    try:
        # One thread is taken by another request, so this request's tasks run one after another on
        # the other thread: "fast" and "failing" finish, "slow" blocks, "queued" waits behind it.
        neighbour = pool.submit(blocked_on(gate, neighbour_started))
        assert neighbour_started.wait(WAIT)
        tasks: dict[int, Callable[[CancelToken], str]] = {
            0: lambda token: "fast",
            1: failing,
            2: slow,
            3: queued,
        }
        outcomes = run_all(pool, tasks, 0.5, labels={p: ("orders", p) for p in tasks})

        assert list(outcomes) == [0, 1, 2, 3]
        assert outcomes[0] == Outcome(value="fast")
        assert isinstance(outcomes[1].error, ValueError)
        assert outcomes[2] == Outcome(timed_out=True)
        assert outcomes[3] == Outcome(timed_out=True)
        with pytest.raises(RequestTimedOutError) as caught:
            outcomes[2].unwrap()
        assert caught.value.error_code == 7
        assert [t.cancelled for t in slow_tokens] == [True]
        assert pool.pending == 0

        expired = "rlm_remote_list_offsets_expirations_total"
        assert sample(metrics, expired, topic="orders", partition="0") is None
        assert sample(metrics, expired, topic="orders", partition="1") is None
        assert sample(metrics, expired, topic="orders", partition="2") == 1
        assert sample(metrics, expired, topic="orders", partition="3") == 1
        gate.set()
        assert neighbour.result(WAIT) == "released"
    finally:
        gate.set()
        pool.close()
    assert not queued_ran.is_set()


def test_run_all_reports_rejected_partitions_per_key(metrics: Metrics, gate: threading.Event) -> None:
    started = threading.Event()
    with BoundedPool("offset-reader", 1, 1, metrics) as pool:
        pool.submit(blocked_on(gate, started))
        assert started.wait(WAIT)
        # The one thread is busy: "a" takes the one queue slot, "b" finds the queue full.
        outcomes = run_all(
            pool,
            {"a": lambda token: 1, "b": lambda token: 2},
            0.05,
            labels={"a": ("orders", 0), "b": ("orders", 1)},
        )
        assert outcomes["a"] == Outcome(timed_out=True)
        assert isinstance(outcomes["b"].error, PoolFullError)
        assert outcomes["b"].error.retriable
        with pytest.raises(PoolFullError):
            outcomes["b"].unwrap()
        assert pool.pending == 0  # "a" was taken out of the queue when it expired
        gate.set()
    expired = "rlm_remote_list_offsets_expirations_total"
    assert sample(metrics, expired, topic="orders", partition="0") == 1
    assert sample(metrics, expired, topic="orders", partition="1") is None
    assert sample(metrics, "rlm_pool_tasks_rejected_total", pool="offset-reader") == 1


def test_resize_grows_and_shrinks_without_a_restart(metrics: Metrics, gate: threading.Event) -> None:
    barrier = threading.Barrier(4)
    arrived = threading.Semaphore(0)
    met = threading.Semaphore(0)

    def meet(token: CancelToken) -> str:
        arrived.release()
        barrier.wait(WAIT)  # passes only once 4 run at once
        met.release()
        assert gate.wait(WAIT)
        return "old"

    lock = threading.Lock()
    concurrent = [0, 0]  # now, most seen
    later_started = threading.Event()
    later_gate = threading.Event()

    def later(token: CancelToken) -> str:
        with lock:
            concurrent[0] += 1
            concurrent[1] = max(concurrent)
        later_started.set()
        assert later_gate.wait(WAIT)
        with lock:
            concurrent[0] -= 1
        return "new"

    with BoundedPool("offset-reader", 2, 10, metrics) as pool:
        old = [pool.submit(meet) for _ in range(4)]
        for _ in range(2):
            assert arrived.acquire(timeout=WAIT)
        assert (pool.running, pool.pending) == (2, 2)

        pool.resize(4)  # grow: the two queued tasks start at once
        for _ in range(4):
            assert met.acquire(timeout=WAIT)
        assert (pool.threads, pool.live_threads, pool.running, pool.pending) == (4, 4, 4, 0)

        pool.resize(1)  # shrink: the running tasks are not interrupted...
        new = [pool.submit(later) for _ in range(3)]
        assert (pool.threads, pool.live_threads, pool.running, pool.pending) == (1, 4, 4, 3)
        gate.set()
        assert [t.result(WAIT) for t in old] == ["old"] * 4
        # ...and once they are done only one thread is left to start the queued ones.
        assert later_started.wait(WAIT)
        assert (pool.live_threads, pool.running, pool.pending) == (1, 1, 2)
        later_gate.set()
        assert [t.result(WAIT) for t in new] == ["new"] * 3
        assert concurrent[1] == 1

        pool.resize(3)
        assert pool.live_threads == 3
        with pytest.raises(ConfigError):
            pool.resize(0)


def test_shrinking_an_idle_pool_leaves_only_the_new_count(metrics: Metrics, gate: threading.Event) -> None:
    started = threading.Event()
    with BoundedPool("offset-reader", 3, 10, metrics) as pool:
        pool.resize(1)
        first = pool.submit(blocked_on(gate, started))
        second = pool.submit(blocked_on(gate))
        assert started.wait(WAIT)
        # The thread that took a task saw at most one live thread: the idle surplus had exited.
        assert (pool.live_threads, pool.running, pool.pending) == (1, 1, 1)
        gate.set()
        assert [first.result(WAIT), second.result(WAIT)] == ["released"] * 2


def test_a_new_default_timeout_applies_to_the_next_request(metrics: Metrics, gate: threading.Event) -> None:
    timeouts = RequestTimeout(default_ms=50)
    labels = {"p0": ("orders", 0)}

    def takes_a_fifth_of_a_second(token: CancelToken) -> str:
        if token.wait(0.2):  # simulated remote read time, cut short when cancelled
            token.raise_if_cancelled()
        return "offset 42"

    with BoundedPool("offset-reader", 1, 10, metrics) as pool:
        first = run_all(pool, {"p0": takes_a_fifth_of_a_second}, timeouts.seconds_for(None), labels=labels)
        assert first["p0"].timed_out

        timeouts.default_ms = 60_000
        second = run_all(pool, {"p0": takes_a_fifth_of_a_second}, timeouts.seconds_for(-1), labels=labels)
        assert second["p0"] == Outcome(value="offset 42")

    assert timeouts.seconds_for(250) == 0.25  # a request's own timeout_ms wins
    assert timeouts.seconds_for(None) == 60.0
    with pytest.raises(ConfigError):
        timeouts.default_ms = 0
    assert timeouts.default_ms == 60_000


def test_a_saturated_fetch_pool_does_not_starve_offset_lookups(
    metrics: Metrics, gate: threading.Event
) -> None:
    with (
        BoundedPool("remote-fetch", 2, 2, metrics) as fetch,
        BoundedPool("offset-reader", 2, 2, metrics) as offsets,
    ):
        started = [threading.Event() for _ in range(2)]
        for event in started:
            fetch.submit(blocked_on(gate, event))
        for event in started:
            assert event.wait(WAIT)
        fetch.submit(blocked_on(gate))
        fetch.submit(blocked_on(gate))
        with pytest.raises(PoolFullError):
            fetch.submit(blocked_on(gate))

        outcomes = run_all(
            offsets,
            {0: lambda token: 100, 1: lambda token: 200},
            30.0,
            labels={0: ("orders", 0), 1: ("orders", 1)},
        )
        assert outcomes == {0: Outcome(value=100), 1: Outcome(value=200)}
        assert sample(metrics, "rlm_pool_tasks_rejected_total", pool="remote-fetch") == 1
        assert sample(metrics, "rlm_pool_tasks_rejected_total", pool="offset-reader") is None
        gate.set()


def test_queue_size_gauge_follows_the_queue(metrics: Metrics, gate: threading.Event) -> None:
    started = threading.Event()
    with BoundedPool("offset-reader", 1, 10, metrics) as pool:
        assert sample(metrics, "rlm_pool_task_queue_size", pool="offset-reader") == 0
        running = pool.submit(blocked_on(gate, started))
        assert started.wait(WAIT)
        queued = [pool.submit(blocked_on(gate)) for _ in range(3)]
        assert sample(metrics, "rlm_pool_task_queue_size", pool="offset-reader") == 3
        assert queued[1].cancel()
        assert sample(metrics, "rlm_pool_task_queue_size", pool="offset-reader") == 2
        gate.set()
        for task in [running, queued[0], queued[2]]:
            assert task.result(WAIT) == "released"
        assert sample(metrics, "rlm_pool_task_queue_size", pool="offset-reader") == 0
        assert sample(metrics, "rlm_pool_task_seconds_count", pool="offset-reader") == 3


def test_idle_percent_over_a_sliding_window(metrics: Metrics, gate: threading.Event) -> None:
    clock = FakeClock(1000.0)
    started = threading.Semaphore(0)

    def busy(token: CancelToken) -> str:
        started.release()
        assert gate.wait(WAIT)
        return "done"

    def idle() -> float | None:
        return sample(metrics, "rlm_pool_avg_idle_percent", pool="offset-reader")

    with BoundedPool("offset-reader", 2, 10, metrics, clock=clock) as pool:
        assert idle() == 100.0
        clock.now += 40
        assert idle() == 100.0  # nothing ran

        tasks = [pool.submit(busy) for _ in range(2)]
        for _ in range(2):
            assert started.acquire(timeout=WAIT)
        clock.now += 15
        assert idle() is not None
        assert 0.0 < (idle() or 0.0) < 100.0  # the window still holds idle time from before
        clock.now += 60
        assert idle() == 0.0  # both threads busy for the whole window

        pool.resize(4)  # two more threads, idle: half the thread-time from now on is idle
        clock.now += 60
        assert idle() == pytest.approx(50.0)

        gate.set()
        assert [t.result(WAIT) for t in tasks] == ["done"] * 2
        clock.now += 60
        assert idle() == 100.0


def test_cancelling_a_queued_task_means_it_never_runs(metrics: Metrics, gate: threading.Event) -> None:
    started = threading.Event()
    ran = threading.Event()

    def mark(token: CancelToken) -> None:
        ran.set()

    with BoundedPool("offset-reader", 1, 10, metrics) as pool:
        running = pool.submit(blocked_on(gate, started))
        assert started.wait(WAIT)
        queued = pool.submit(mark)
        with pytest.raises(RequestTimedOutError):
            queued.result(0)
        assert queued.cancel()
        assert queued.done()
        assert queued.token.cancelled
        with pytest.raises(TaskCancelledError):
            queued.result(0)
        assert running.cancel()  # a running task is told, not interrupted
        assert running.token.cancelled
        gate.set()
        assert running.result(WAIT) == "released"
        assert not running.cancel()  # already finished: its result stands
        assert pool.submit(lambda token: "after").result(WAIT) == "after"
    assert not ran.is_set()


def test_task_errors_reach_the_caller(metrics: Metrics) -> None:
    def fail(token: CancelToken) -> int:
        raise TaskCancelledError("stopped between ranged GETs")

    with BoundedPool("offset-reader", 1, 10, metrics) as pool:
        with pytest.raises(TaskCancelledError, match="ranged GETs"):
            pool.submit(fail).result(WAIT)
        assert pool.submit(lambda token: None).result(WAIT) is None


def test_close_cancels_pending_tasks_and_joins_threads(metrics: Metrics) -> None:
    started = threading.Event()
    queued_ran = threading.Event()

    def queued_task(token: CancelToken) -> None:
        queued_ran.set()

    pool = BoundedPool("offset-reader", 1, 10, metrics)
    running = pool.submit(until_cancelled(started))
    assert started.wait(WAIT)
    queued = [pool.submit(queued_task) for _ in range(3)]

    pool.close()
    assert pool.live_threads == 0
    assert pool.pending == 0
    with pytest.raises(TaskCancelledError):
        running.result(0)  # it saw its token and stopped
    for task in queued:
        with pytest.raises(TaskCancelledError):
            task.result(0)
    assert not queued_ran.is_set()
    assert sample(metrics, "rlm_pool_task_queue_size", pool="offset-reader") is None
    assert sample(metrics, "rlm_pool_avg_idle_percent", pool="offset-reader") is None

    pool.close()  # idempotent
    pool.close(wait=False)
    with pytest.raises(PoolClosedError):
        pool.submit(queued_task)
    with pytest.raises(PoolClosedError):
        pool.resize(2)
    outcome = run_all(pool, {0: queued_task}, 1.0, labels={})[0]
    assert isinstance(outcome.error, PoolClosedError)


@pytest.mark.parametrize(("threads", "max_pending"), [(0, 1), (1, 0), (-1, 5)])
def test_sizes_must_be_positive(metrics: Metrics, threads: int, max_pending: int) -> None:
    with pytest.raises(ConfigError):
        BoundedPool("offset-reader", threads, max_pending, metrics)


def test_a_smaller_queue_bound_applies_to_the_next_submit(metrics: Metrics, gate: threading.Event) -> None:
    started = threading.Event()
    with BoundedPool("offset-reader", 1, 5, metrics) as pool:
        pool.submit(blocked_on(gate, started))
        assert started.wait(WAIT)
        pool.submit(blocked_on(gate))
        pool.submit(blocked_on(gate))
        pool.set_max_pending(2)
        assert pool.max_pending == 2
        with pytest.raises(PoolFullError):
            pool.submit(blocked_on(gate))
        pool.set_max_pending(3)
        pool.submit(blocked_on(gate))
        assert pool.pending == 3
        gate.set()
