"""The upload rate limiter, on a fake clock: waits are computed, never slept."""

from __future__ import annotations

import threading

import pytest

from rlm.errors import ConfigError
from rlm.storage.ratelimit import RateLimiter
from tests.clock import FakeClock


def _limiter(rate: float, burst: float | None = None) -> tuple[RateLimiter, FakeClock[float]]:
    clock = FakeClock(100.0)
    return RateLimiter(rate, burst_bytes=burst, clock=clock, sleep=clock.sleep), clock


def test_a_full_bucket_lets_a_burst_through_at_once() -> None:
    limiter, clock = _limiter(1000)
    limiter.acquire(600)
    limiter.acquire(400)
    assert clock.slept == []


def test_beyond_the_burst_callers_wait_for_the_rate() -> None:
    limiter, clock = _limiter(1000)
    limiter.acquire(1000)
    limiter.acquire(500)
    assert clock.slept == [pytest.approx(0.5)]
    limiter.acquire(250)
    assert clock.slept[-1] == pytest.approx(0.25)


def test_a_request_bigger_than_the_burst_goes_into_debt() -> None:
    limiter, clock = _limiter(1000, burst=100)
    limiter.acquire(3100)  # an 3 KB part with a 100 B bucket: 3 s of debt
    assert clock.slept == [pytest.approx(3.0)]
    limiter.acquire(100)  # the bucket is empty again after paying the debt
    assert clock.slept[-1] == pytest.approx(0.1)


def test_the_bucket_refills_up_to_the_burst_only() -> None:
    limiter, clock = _limiter(1000, burst=2000)
    limiter.acquire(2000)
    clock.now += 60  # a long quiet spell refills 2000, not 60000
    limiter.acquire(2000)
    assert clock.slept == []
    limiter.acquire(1000)
    assert clock.slept == [pytest.approx(1.0)]


def test_the_average_rate_holds_over_many_acquisitions() -> None:
    limiter, clock = _limiter(10_000, burst=10_000)
    start = clock.now
    for _ in range(100):
        limiter.acquire(5_000)
    # 500 kB at 10 kB/s, the first 10 kB free: 49 s.
    assert clock.now - start == pytest.approx(49.0)


def test_threads_share_one_budget() -> None:
    clock = FakeClock(100.0)
    limiter = RateLimiter(1000, burst_bytes=1000, clock=clock, sleep=lambda _: None)
    waits: list[float] = []
    lock = threading.Lock()

    def take() -> None:
        for _ in range(50):
            wait = limiter.reserve(100)
            with lock:
                waits.append(wait)

    threads = [threading.Thread(target=take) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # 20,000 bytes reserved at one instant: the first 1,000 free, then 0.1 s more per 100 bytes.
    assert sorted(waits) == [pytest.approx(max(0.0, (i - 9) / 10)) for i in range(200)]


def test_zero_bytes_never_wait_and_negative_is_refused() -> None:
    limiter, _ = _limiter(10, burst=10)
    limiter.acquire(10)
    assert limiter.reserve(0) == 0.0
    with pytest.raises(ValueError, match="-1"):
        limiter.reserve(-1)


@pytest.mark.parametrize(("rate", "burst"), [(0, None), (-5, None), (10, 0)])
def test_rate_and_burst_must_be_positive(rate: float, burst: float | None) -> None:
    with pytest.raises(ConfigError, match="must be positive"):
        RateLimiter(rate, burst_bytes=burst)
