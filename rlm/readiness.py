"""Readiness: do the metadata store and the remote storage answer? Told within a deadline, always.

Each dependency is probed on a thread of its own, never on a pool that requests share (requests
stuck on a dependency that hangs can exhaust those), and at most one probe per dependency runs at
a time: while one still waits for its answer, the next caller waits on that same probe instead of
starting another, so probes never pile up on a dependency that hangs. A caller waits at most
``timeout_s`` for all of them; a dependency that has not answered by then is reported unreachable.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from rlm.errors import RlmError

Check = Callable[[], object]
"""Asks one dependency something cheap; raises when it cannot answer (what it returns is ignored)."""


@dataclass(frozen=True)
class Outcome:
    """How one probe of one dependency ended."""

    name: str
    error: BaseException | None = None
    answered: bool = True
    """False: no answer within the deadline (the probe goes on in the background)."""


class ReadinessProbe:
    """Probes named dependencies, each on its own thread, within ``timeout_s``.

    Args:
        checks: dependency name (used in the problems, e.g. "metadata store") → its check.
        timeout_s: how long a caller waits for all the answers.
        on_outcome: told of each dependency's outcome (e.g. to note that the store is down).
    """

    def __init__(
        self,
        checks: Mapping[str, Check],
        timeout_s: float,
        *,
        on_outcome: Callable[[Outcome], None] | None = None,
    ) -> None:
        self.checks = dict(checks)
        self.timeout_s = timeout_s
        self._on_outcome = on_outcome
        self._lock = threading.Lock()
        self._running: dict[str, concurrent.futures.Future[None]] = {}

    def problems(self) -> list[str]:
        """Why rlm cannot serve, empty when it can; returns within ``timeout_s`` (and a little)."""
        probes = self._start()
        concurrent.futures.wait(probes.values(), timeout=self.timeout_s)
        return self._report(probes)

    async def problems_async(self) -> list[str]:
        """:meth:`problems` for an event loop: waits without holding a thread."""
        probes = self._start()
        await asyncio.wait([asyncio.wrap_future(p) for p in probes.values()], timeout=self.timeout_s)
        return self._report(probes)

    def _start(self) -> dict[str, concurrent.futures.Future[None]]:
        with self._lock:
            for name, check in self.checks.items():
                running = self._running.get(name)
                if running is None or running.done():
                    self._running[name] = self._spawn(name, check)
            return dict(self._running)

    @staticmethod
    def _spawn(name: str, check: Check) -> concurrent.futures.Future[None]:
        future: concurrent.futures.Future[None] = concurrent.futures.Future()

        def run() -> None:
            try:
                check()
            except BaseException as exc:  # reported as a problem by whoever waits
                future.set_exception(exc)
            else:
                future.set_result(None)

        threading.Thread(target=run, name=f"rlm-readiness-{name.replace(' ', '-')}", daemon=True).start()
        return future

    def _report(self, probes: Mapping[str, concurrent.futures.Future[None]]) -> list[str]:
        problems = []
        for name, probe in probes.items():
            if not probe.done():
                outcome = Outcome(name, answered=False)
                problems.append(f"{name} unreachable: no answer within {self.timeout_s * 1000:.0f} ms")
            else:
                error = probe.exception()
                outcome = Outcome(name, error)
                if error is not None:
                    retriable = isinstance(error, RlmError) and error.retriable
                    what = f"{name} unreachable" if retriable else name
                    problems.append(f"{what}: {error}")
            if self._on_outcome is not None:
                self._on_outcome(outcome)
        return problems
