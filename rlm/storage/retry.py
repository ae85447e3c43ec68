"""Retries with exponential backoff and full jitter, for idempotent storage calls."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from rlm.errors import ConfigError, RlmError

_log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry a call that failed with a retriable error.

    The wait before attempt ``n + 1`` is uniform in ``[0, min(max_delay_s, base_delay_s * 2**(n-1))]``
    ("full jitter"): clients throttled together spread out instead of retrying in step.
    """

    max_attempts: int = 8
    """Attempts in all, the first included."""
    base_delay_s: float = 0.1
    """Upper bound of the first wait."""
    max_delay_s: float = 10.0
    """Upper bound of any wait."""

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigError(f"max_attempts must be at least 1, not {self.max_attempts}")
        if self.base_delay_s < 0 or self.max_delay_s < self.base_delay_s:
            raise ConfigError(f"bad retry delays: base {self.base_delay_s} s, max {self.max_delay_s} s")

    def delay(self, attempt: int, draw: float) -> float:
        """The wait after failed attempt ``attempt`` (1-based), with ``draw`` uniform in ``[0, 1)``."""
        ceiling = min(self.max_delay_s, self.base_delay_s * (1 << min(attempt - 1, 62)))
        return ceiling * draw


def call_with_retry(
    call: Callable[[], T],
    policy: RetryPolicy,
    *,
    what: str,
    sleep: Callable[[float], None] = time.sleep,
    draw: Callable[[], float] = random.random,
) -> T:
    """Run ``call`` until it returns, raises a non-retriable error, or the attempts are spent.

    ``call`` signals failures with :class:`~rlm.errors.RlmError`; only errors whose
    ``retriable`` is true are retried. Any other exception propagates at once.

    Args:
        call: An idempotent operation.
        policy: Attempts and backoff.
        what: Names the operation in log lines (an operation and an object key; never credentials).
        sleep: Waits a number of seconds.
        draw: Uniform random numbers in ``[0, 1)`` for the jitter.

    Raises:
        RlmError: The last error; when retriable, a note says how many attempts were made.
    """
    attempt = 1
    while True:
        try:
            return call()
        except RlmError as exc:
            if not exc.retriable:
                raise
            if attempt >= policy.max_attempts:
                exc.add_note(f"gave up after {attempt} attempts")
                raise
            wait = policy.delay(attempt, draw())
            _log.info(
                "%s failed (attempt %d of %d), retrying in %.3f s: %s",
                what,
                attempt,
                policy.max_attempts,
                wait,
                exc,
            )
            sleep(wait)
            attempt += 1
