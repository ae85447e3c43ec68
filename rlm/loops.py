"""A background job run every interval on its own thread until stopped, never cut mid-pass."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from rlm.errors import RlmError

log = logging.getLogger(__name__)


class BackgroundLoop:
    """Runs ``job`` every ``interval_s`` until :meth:`stop`; a failed pass is logged and retried."""

    def __init__(
        self,
        name: str,
        job: Callable[[], Any],
        interval_s: float,
        on_error: Callable[[], None] = lambda: None,
    ) -> None:
        self.name = name
        self._job = job
        self._interval_s = interval_s
        self._on_error = on_error
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self.run, name=f"rlm-{name}", daemon=True)

    def start(self) -> None:
        """Run on a thread of its own."""
        self._thread.start()

    def request_stop(self) -> None:
        """Ask the loop to stop after its current pass."""
        self._stop.set()

    def stop(self, timeout_s: float) -> bool:
        """Stop after the current pass; True when the loop ended within ``timeout_s``."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def run(self) -> None:
        """The loop itself (on the caller's thread when not started with :meth:`start`)."""
        while not self._stop.is_set():
            try:
                self._job()
            except RlmError as exc:  # says what is wrong: no traceback every pass
                self._on_error()
                log.error("%s pass failed: %s; retrying in %.0f s", self.name, exc, self._interval_s)
            except Exception:
                self._on_error()
                log.exception("%s pass failed; retrying in %.0f s", self.name, self._interval_s)
            # An interval past what a thread can wait (Long.MAX_VALUE ms) waits that long instead.
            self._stop.wait(min(self._interval_s, threading.TIMEOUT_MAX))
