"""Retries with exponential backoff and full jitter, with the sleeps recorded instead of slept."""

from __future__ import annotations

import pytest

from rlm.errors import ConfigError, NotFoundError, StorageError, StorageUnavailableError
from rlm.storage.retry import RetryPolicy, call_with_retry


class Flaky:
    """Fails with ``errors`` in turn, then returns ``"done"``."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "done"


def test_delays_grow_exponentially_up_to_the_cap() -> None:
    policy = RetryPolicy(max_attempts=10, base_delay_s=0.1, max_delay_s=1.0)
    assert [policy.delay(n, 1.0) for n in range(1, 7)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    assert policy.delay(3, 0.5) == pytest.approx(0.2)
    assert policy.delay(3, 0.0) == 0.0
    assert policy.delay(10_000, 1.0) == 1.0


def test_retriable_errors_are_retried_with_jittered_waits() -> None:
    call = Flaky(StorageUnavailableError("503 SlowDown"), StorageUnavailableError("500 InternalError"))
    slept: list[float] = []
    draws = iter([0.5, 0.25])
    policy = RetryPolicy(max_attempts=5, base_delay_s=1.0, max_delay_s=30.0)
    result = call_with_retry(call, policy, what="test", sleep=slept.append, draw=lambda: next(draws))
    assert result == "done"
    assert call.calls == 3
    assert slept == [0.5, 0.5]  # 0.5 * 1 s, then 0.25 * 2 s


def test_non_retriable_errors_are_raised_at_once() -> None:
    for error in (NotFoundError("no such key"), StorageError("403 AccessDenied", retriable=False)):
        call = Flaky(error)
        slept: list[float] = []
        with pytest.raises(type(error)):
            call_with_retry(call, RetryPolicy(), what="test", sleep=slept.append)
        assert (call.calls, slept) == (1, [])


def test_other_exceptions_are_not_retried() -> None:
    call = Flaky(ValueError("a bug"))
    with pytest.raises(ValueError, match="a bug"):
        call_with_retry(call, RetryPolicy(), what="test", sleep=lambda _: None)
    assert call.calls == 1


def test_giving_up_raises_the_last_error_with_the_attempt_count() -> None:
    call = Flaky(*(StorageUnavailableError(f"attempt {i}") for i in range(1, 10)))
    slept: list[float] = []
    with pytest.raises(StorageUnavailableError, match="attempt 4") as raised:
        call_with_retry(call, RetryPolicy(max_attempts=4), what="test", sleep=slept.append, draw=lambda: 1.0)
    assert raised.value.retriable is True
    assert "gave up after 4 attempts" in raised.value.__notes__
    assert call.calls == 4
    assert slept == pytest.approx([0.1, 0.2, 0.4])


@pytest.mark.parametrize(
    "kwargs",
    [{"max_attempts": 0}, {"base_delay_s": -1.0}, {"base_delay_s": 2.0, "max_delay_s": 1.0}],
)
def test_bad_policies_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]
