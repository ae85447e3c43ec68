"""StoreAvailability: after a failure the store is skipped for a while, then tried by one caller."""

from __future__ import annotations

import pytest

from rlm.errors import MetadataUnavailableError
from rlm.metastore.availability import StoreAvailability
from tests.clock import FakeClock


def refused() -> MetadataUnavailableError:
    return MetadataUnavailableError("connection refused", kind="connect")


def test_an_answering_store_is_always_asked() -> None:
    availability = StoreAvailability(1.0, clock=FakeClock(100.0))
    assert availability.call(lambda: 7) == 7
    assert availability.may_call() and not availability.down and not availability.refusing()


def test_after_a_failure_callers_fail_at_once_without_asking_until_the_retry_time() -> None:
    clock = FakeClock(100.0)
    availability = StoreAvailability(2.0, clock=clock)
    asked = []

    def ask() -> int:
        asked.append(1)
        raise refused()

    with pytest.raises(MetadataUnavailableError, match="connection refused"):
        availability.call(ask)
    assert availability.down and availability.refusing()
    clock.now += 1.9
    with pytest.raises(
        MetadataUnavailableError, match=r"metadata store unreachable: connection refused"
    ) as fast:
        availability.call(ask)
    assert fast.value.kind == "connect"
    assert len(asked) == 1, "a caller waited for a store that had just failed"


def test_at_the_retry_time_one_caller_tries_and_the_others_still_see_it_down() -> None:
    clock = FakeClock(100.0)
    availability = StoreAvailability(1.0, clock=clock)
    availability.failed(refused())
    clock.now += 1.0
    assert not availability.refusing()
    assert availability.may_call()  # this caller's turn
    assert not availability.may_call() and availability.refusing()  # the others wait
    availability.succeeded()
    assert availability.may_call() and not availability.down


def test_a_failed_retry_keeps_it_down_for_another_period() -> None:
    clock = FakeClock(100.0)
    availability = StoreAvailability(1.0, clock=clock)
    availability.failed(refused())
    clock.now += 1.0
    with pytest.raises(MetadataUnavailableError):
        availability.call(lambda: (_ for _ in ()).throw(refused()))
    clock.now += 0.5
    assert availability.refusing()
    clock.now += 0.5
    assert availability.call(lambda: "back") == "back"
    assert not availability.down
