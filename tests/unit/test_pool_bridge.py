"""The asynchronous bridge from requests to the bounded pools (:func:`gather_on`, :func:`run_on`):
requests await their tasks holding no thread, within their deadline, and a request that goes away
cancels its tasks.

Synchronisation is by events only; ``WAIT`` bounds an event that must happen.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from rlm.errors import PoolFullError, RequestTimedOutError, TaskCancelledError
from rlm.lookup.pool import BoundedPool, CancelToken, gather_blocking, gather_on, run_blocking, run_on
from rlm.metrics import Metrics

WAIT = 10.0


def test_many_requests_wait_without_a_thread_each(metrics: Metrics, gate: threading.Event) -> None:
    """Fifty requests await tasks stuck behind a gate: the process's threads do not grow with them."""
    with BoundedPool("offset-reader", 2, 100, metrics) as pool:

        def blocked(token: CancelToken) -> int:
            assert gate.wait(WAIT)
            return 1

        async def main() -> tuple[int, int, list[int]]:
            before = threading.active_count()
            requests = [
                asyncio.create_task(gather_on([(pool, {i: blocked})], WAIT, labels={})) for i in range(50)
            ]
            await asyncio.sleep(0)  # every request has submitted its task and awaits it
            while pool.pending != 48:
                await asyncio.sleep(0.001)
            during = threading.active_count()
            gate.set()
            outcomes = await asyncio.gather(*requests)
            return before, during, [o[i].unwrap() for i, o in enumerate(outcomes)]

        before, during, values = asyncio.run(main())
    assert during == before
    assert values == [1] * 50


def test_a_cancelled_request_cancels_its_tasks_and_counts_no_expiration(
    metrics: Metrics, gate: threading.Event
) -> None:
    """The client went away: the running task's token is set, the queued one never runs, and
    neither answered REQUEST_TIMED_OUT."""
    started, ran = threading.Event(), threading.Event()
    seen: list[bool] = []
    with BoundedPool("offset-reader", 1, 10, metrics) as pool:

        def running(token: CancelToken) -> None:
            started.set()
            assert gate.wait(WAIT)
            seen.append(token.cancelled)

        def queued(token: CancelToken) -> None:
            ran.set()

        async def main() -> None:
            labels = {0: ("orders", 0), 1: ("orders", 0)}
            request = asyncio.create_task(gather_on([(pool, {0: running, 1: queued})], WAIT, labels=labels))
            while not started.is_set():
                await asyncio.sleep(0.001)
            request.cancel()
            with pytest.raises(asyncio.CancelledError):
                await request

        asyncio.run(main())
        assert pool.pending == 0
        gate.set()
    assert seen == [True]
    assert not ran.is_set()
    assert expirations(metrics) is None


def test_run_on_times_out_and_cancels_the_task(metrics: Metrics, gate: threading.Event) -> None:
    cancelled = threading.Event()
    with BoundedPool("remote-fetch", 1, 10, metrics) as pool:

        def slow(token: CancelToken) -> None:
            if token.wait(WAIT):
                cancelled.set()

        with pytest.raises(RequestTimedOutError, match="reading orders-0 did not finish in time"):
            asyncio.run(run_on(pool, slow, 0.05, label=("orders", 0), what="reading orders-0"))
        assert cancelled.wait(WAIT)
    # A fetch cut off is not a ListOffsets expiration.
    assert expirations(metrics) is None


def expirations(metrics: Metrics) -> float | None:
    """``rlm_remote_list_offsets_expirations_total`` of orders-0."""
    return metrics.registry.get_sample_value(
        "rlm_remote_list_offsets_expirations_total", {"topic": "orders", "partition": "0"}
    )


def test_run_on_returns_the_value_or_raises_the_error(metrics: Metrics) -> None:
    def fails(token: CancelToken) -> int:
        raise TaskCancelledError("stopped at its check")

    with BoundedPool("remote-fetch", 1, 10, metrics) as pool:
        assert asyncio.run(run_on(pool, lambda token: 7, WAIT)) == 7
        with pytest.raises(TaskCancelledError, match="stopped at its check"):
            asyncio.run(run_on(pool, fails, WAIT))


def test_a_full_pool_refuses_at_once(metrics: Metrics, gate: threading.Event) -> None:
    started = threading.Event()

    def first(token: CancelToken) -> None:
        started.set()
        assert gate.wait(WAIT)

    with BoundedPool("offset-reader", 1, 1, metrics) as pool:
        pool.submit(first)
        assert started.wait(WAIT)
        pool.submit(lambda token: gate.wait(WAIT))  # queued: the queue is full
        outcome = gather_blocking([(pool, {"p": lambda token: 1})], WAIT, labels={})["p"]
        assert isinstance(outcome.error, PoolFullError)
        gate.set()


def test_closing_the_pool_wakes_whoever_awaits_a_queued_task(metrics: Metrics, gate: threading.Event) -> None:
    pool = BoundedPool("offset-reader", 1, 10, metrics)
    started = threading.Event()

    def first(token: CancelToken) -> None:
        started.set()
        assert gate.wait(WAIT)

    async def main() -> dict[str, object]:
        request = asyncio.create_task(
            gather_on([(pool, {"running": first, "queued": lambda token: 1})], WAIT, labels={})
        )
        while not started.is_set():
            await asyncio.sleep(0.001)
        pool.close(wait=False)
        gate.set()
        outcomes = await request
        return {key: outcome.error for key, outcome in outcomes.items()}

    errors = asyncio.run(asyncio.wait_for(main(), WAIT))
    pool.close()
    assert isinstance(errors["queued"], TaskCancelledError)


def test_run_blocking_refuses_a_coroutine_that_awaits_a_loop(metrics: Metrics) -> None:
    async def sleeps() -> None:
        await asyncio.sleep(0)

    with pytest.raises(RuntimeError, match="awaited an event loop"):
        run_blocking(sleeps())

    async def blocks(pool: BoundedPool) -> int:
        return gather_blocking([(pool, {0: lambda token: 5})], WAIT, labels={})[0].unwrap()

    with BoundedPool("offset-reader", 1, 10, metrics) as pool:
        assert run_blocking(blocks(pool)) == 5
