"""A token bucket that caps upload bandwidth in bytes per second, shared by threads."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from rlm.errors import ConfigError


class RateLimiter:
    """Lets at most ``rate_bytes_per_s`` through on average, with bursts of ``burst_bytes``.

    :meth:`acquire` takes tokens and sleeps while the bucket is in debt. A request larger than
    the burst is allowed (an upload part is often bigger than a second's worth): it drives the
    bucket into debt, and the callers that follow wait until the debt is paid. Waiting happens
    outside the lock, so threads queue in the order they reserved.
    """

    def __init__(
        self,
        rate_bytes_per_s: float,
        *,
        burst_bytes: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """Create a full bucket.

        Args:
            rate_bytes_per_s: Average rate allowed; must be positive.
            burst_bytes: Bucket size: bytes that may pass at once after a quiet spell. Defaults
                to one second's worth.
            clock: Monotonic seconds.
            sleep: Waits a number of seconds.

        Raises:
            ConfigError: The rate or burst is not positive.
        """
        if rate_bytes_per_s <= 0:
            raise ConfigError(f"upload rate limit must be positive, not {rate_bytes_per_s} bytes/s")
        burst = rate_bytes_per_s if burst_bytes is None else burst_bytes
        if burst <= 0:
            raise ConfigError(f"upload burst must be positive, not {burst} bytes")
        self.rate = rate_bytes_per_s
        """The rate as given: a whole number of bytes per second stays exact (the float below
        is not, past 2**53), for reading the setting back."""
        self.rate_bytes_per_s = float(rate_bytes_per_s)
        self.burst_bytes = float(burst)
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens = self.burst_bytes
        self._updated = clock()

    def reserve(self, amount: int) -> float:
        """Take ``amount`` tokens now; returns how many seconds the caller must wait before using them."""
        if amount < 0:
            raise ValueError(f"cannot reserve {amount} bytes")
        with self._lock:
            now = self._clock()
            elapsed = max(0.0, now - self._updated)
            self._tokens = min(self.burst_bytes, self._tokens + elapsed * self.rate_bytes_per_s)
            self._updated = now
            self._tokens -= amount
            return 0.0 if self._tokens >= 0 else -self._tokens / self.rate_bytes_per_s

    def acquire(self, amount: int) -> None:
        """Wait until ``amount`` bytes may be sent."""
        wait = self.reserve(amount)
        if wait > 0:
            self._sleep(wait)
