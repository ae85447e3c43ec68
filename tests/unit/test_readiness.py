"""ReadinessProbe: answers within its deadline whatever a dependency does, and never piles probes up.

A dependency that hangs is a check waiting on an event the test sets at its end; the bounds on
how long a call took are loose (the deadline plus seconds): they tell a deadline that holds from
one that does not, they measure nothing.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

from rlm.errors import MetadataUnavailableError, SchemaMismatchError
from rlm.readiness import Outcome, ReadinessProbe

DEADLINE_S = 0.2
#: Far more than the deadline, far less than a hang.
LOOSE_S = 5.0


@pytest.fixture
def released() -> Iterator[threading.Event]:
    """Set at the end of the test: hanging checks then return."""
    event = threading.Event()
    yield event
    event.set()


def test_answering_dependencies_are_ready() -> None:
    probe = ReadinessProbe({"metadata store": lambda: None, "remote storage": lambda: None}, DEADLINE_S)
    assert probe.problems() == []
    assert asyncio.run(probe.problems_async()) == []


def test_a_hanging_dependency_is_reported_unreachable_within_the_deadline(released: threading.Event) -> None:
    outcomes: list[Outcome] = []
    probe = ReadinessProbe(
        {"metadata store": released.wait, "remote storage": lambda: None},
        DEADLINE_S,
        on_outcome=outcomes.append,
    )
    started = time.monotonic()
    problems = probe.problems()
    assert time.monotonic() - started < LOOSE_S
    assert problems == ["metadata store unreachable: no answer within 200 ms"]
    assert Outcome("metadata store", answered=False) in outcomes
    assert Outcome("remote storage") in outcomes


def test_probes_of_a_hanging_dependency_do_not_pile_up(released: threading.Event) -> None:
    started_checks: list[threading.Thread] = []

    def hang() -> None:
        started_checks.append(threading.current_thread())
        released.wait()

    probe = ReadinessProbe({"metadata store": hang}, DEADLINE_S)
    for _ in range(5):
        assert probe.problems() == ["metadata store unreachable: no answer within 200 ms"]
    assert len(started_checks) == 1, "every probe started another check of the hanging store"
    released.set()
    started_checks[0].join(LOOSE_S)  # its outcome is set when its thread ends (not on a timer)
    assert not started_checks[0].is_alive()
    assert probe.problems() == []  # the hung check ended: the next probe asks again
    assert len(started_checks) == 2


def test_the_async_probe_holds_no_thread_of_the_loop_while_waiting(released: threading.Event) -> None:
    probe = ReadinessProbe({"metadata store": released.wait}, DEADLINE_S)

    async def many() -> list[list[str]]:
        # More concurrent probes than the loop's default executor has threads.
        return await asyncio.gather(*(probe.problems_async() for _ in range(64)))

    started = time.monotonic()
    answers = asyncio.run(many())
    assert time.monotonic() - started < LOOSE_S
    assert all(a == ["metadata store unreachable: no answer within 200 ms"] for a in answers)


def test_a_failing_dependency_says_why() -> None:
    def refused() -> None:
        raise MetadataUnavailableError("connection refused", kind="connect")

    def old_schema() -> None:
        raise SchemaMismatchError("schema is at revision 0000: run `rlm db upgrade`")

    probe = ReadinessProbe({"metadata store": refused, "schema": old_schema}, DEADLINE_S)
    assert probe.problems() == [
        "metadata store unreachable: connection refused",
        "schema: schema is at revision 0000: run `rlm db upgrade`",
    ]
