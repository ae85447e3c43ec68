"""Whether the metadata store answers lately: lets lookups skip a store that just failed.

Every call to a store that does not answer costs the caller its whole deadline (connect or
statement timeout). After one failure the store counts as *down* for ``retry_s``: callers that
can answer without it do, the others fail at once with the error that was seen. When ``retry_s``
has passed, one caller at a time is let through to try again (the others still see the store as
down meanwhile), so an outage never has every request waiting on the store; the first success
makes it *up* again. Nothing here does I/O.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from rlm.errors import MetadataUnavailableError

T = TypeVar("T")


class StoreAvailability:
    """The store's recent health, shared by every thread of a process.

    Args:
        retry_s: after a failure, how long before a caller may try the store again.
        clock: monotonic seconds.
    """

    def __init__(self, retry_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.retry_s = retry_s
        self._clock = clock
        self._lock = threading.Lock()
        self._last_error: MetadataUnavailableError | None = None
        self._retry_at = 0.0

    def call(self, ask: Callable[[], T]) -> T:
        """``ask()`` (a call of the store) when the store may be asked, noting how it went.

        Raises:
            MetadataUnavailableError: the store is down (at once, without asking it), or
                ``ask`` found it so.
        """
        if not self.may_call():
            raise self.unavailable()
        try:
            value = ask()
        except MetadataUnavailableError as exc:
            self.failed(exc)
            raise
        self.succeeded()
        return value

    def may_call(self) -> bool:
        """Whether the caller should ask the store now: it is up, or it is this caller's turn to
        try again (then the others see it down until this caller reports how it went)."""
        if self._last_error is None:  # read without the lock: the common case costs nothing
            return True
        with self._lock:
            if self._last_error is None:
                return True
            now = self._clock()
            if now < self._retry_at:
                return False
            self._retry_at = now + self.retry_s
            return True

    def refusing(self) -> bool:
        """Whether the store is down and no caller may try it yet (takes no caller's turn)."""
        if self._last_error is None:
            return False
        with self._lock:
            return self._last_error is not None and self._clock() < self._retry_at

    def succeeded(self) -> None:
        """The store answered: it is up."""
        if self._last_error is not None:
            with self._lock:
                self._last_error = None

    def failed(self, error: MetadataUnavailableError) -> None:
        """The store did not answer: it is down for ``retry_s``."""
        with self._lock:
            self._last_error = error
            self._retry_at = self._clock() + self.retry_s

    def unavailable(self) -> MetadataUnavailableError:
        """The error to answer with while the store is down (raise it)."""
        error = self._last_error
        reason = str(error) if error is not None else "it did not answer"
        return MetadataUnavailableError(
            f"metadata store unreachable: {reason} (asked again at most every {self.retry_s:g} s)",
            kind=error.kind if error is not None else "unavailable",
        )

    @property
    def down(self) -> bool:
        """Whether the last call failed."""
        return self._last_error is not None
