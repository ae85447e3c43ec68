"""The one fake clock of the tests: time moves only when the test says so."""

from __future__ import annotations

from typing import Generic, TypeVar, overload

N = TypeVar("N", int, float)

#: Where a clock of epoch milliseconds starts by default (late 2023).
EPOCH_MS = 1_700_000_000_000


class FakeClock(Generic[N]):
    """A clock for code that takes one (``clock=``): monotonic seconds (``FakeClock(100.0)``) or
    epoch milliseconds (``FakeClock()``, from :data:`EPOCH_MS`), as that code reads time.

    ``now`` may be set or moved by hand; :meth:`sleep` moves it as a ``sleep=`` callable would
    wait, noting each wait in ``slept``.
    """

    @overload
    def __init__(self: FakeClock[int]) -> None: ...

    @overload
    def __init__(self, now: N) -> None: ...

    def __init__(self, now: N | int = EPOCH_MS) -> None:
        self.now: N = now  # int only where N is int (the overloads)
        self.slept: list[N] = []

    def __call__(self) -> N:
        return self.now

    def advance(self, by: N) -> None:
        """Move the clock forward by ``by``."""
        self.now += by

    def sleep(self, seconds: N) -> None:
        """Wait ``seconds``: note it and move the clock on."""
        self.slept.append(seconds)
        self.advance(seconds)
