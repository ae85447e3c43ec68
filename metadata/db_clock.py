"""The clock leases and claims are stamped and judged by: the metadata database server's.

Sidecars on different hosts share one store. Each stamps a lease's expiry and a claim's time, and
judges the others' stamps. Were each host's own clock the judge, a host whose clock ran behind
by a lease's time to live (a minute by default) would never see its own claims as fresh to the
holder, nor the holder's lease as expired: the holder's sidecar would keep the lease while its
broker no longer leads, nothing would be tiered, and the leader's local retention would delete
offsets the remote tier never got. A host ahead by as much would take leases that had time left.

PostgreSQL's clock is the one clock every sidecar's store reaches. :class:`DatabaseClock` learns
this host's offset from it (``clock_timestamp()``, read on a connection the store is using anyway,
at most once every :data:`REFRESH_MS`; half the round trip is the error) and gives the host's
clock corrected by it: the stamps of all sidecars then agree to within their round trips, what
their hosts' clocks say notwithstanding. An offset of more than :data:`WARN_MS` is logged, once
per change, as the host's clock is then wrong for everything else it stamps.

SQLite is a file on one host: its store judges by that host's clock as it is.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from sqlalchemy import Connection, text

log = logging.getLogger("rlm.metadata")

#: How often the offset is read again.
REFRESH_MS = 60_000
#: An offset above which the host's clock is said to be wrong.
WARN_MS = 5_000

_SERVER_NOW_MS = text("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")


def wall_clock_ms() -> int:
    """Milliseconds since the epoch, from the system clock."""
    return time.time_ns() // 1_000_000


class DatabaseClock:
    """Milliseconds since the epoch as the database server's clock has them (see the module's
    description): this host's clock plus the offset last read, or this host's clock until one
    was read."""

    def __init__(self, *, local: Callable[[], int] = wall_clock_ms, refresh_ms: int = REFRESH_MS) -> None:
        self._local = local
        self._refresh_ms = refresh_ms
        self._offset_ms = 0
        self._read_at: int | None = None
        self._warned = False
        self._reading = threading.Lock()

    def __call__(self) -> int:
        return self._local() + self._offset_ms

    @property
    def offset_ms(self) -> int | None:
        """The server's clock minus this host's, as last read; None before the first read."""
        return None if self._read_at is None else self._offset_ms

    def observe(self, conn: Connection) -> None:
        """Read the offset again on ``conn`` (a PostgreSQL connection in use) when it is due; one
        thread at a time, the others going on with the last one."""
        read_at = self._read_at
        if read_at is not None and self._local() - read_at < self._refresh_ms:
            return
        if not self._reading.acquire(blocking=False):
            return
        try:
            before = self._local()
            server = int(conn.execute(_SERVER_NOW_MS).scalar_one())
            after = self._local()
            self._update(server - (before + after) // 2, after)
        finally:
            self._reading.release()

    def _update(self, offset_ms: int, read_at: int) -> None:
        wrong = abs(offset_ms) > WARN_MS
        if wrong and not self._warned:
            way = "behind" if offset_ms > 0 else "ahead of"
            log.warning(
                "this host's clock is %.1f s %s the metadata database's: leases and claims follow the "
                "database's clock; correct the host's (NTP) for everything else it stamps",
                abs(offset_ms) / 1000,
                way,
            )
        elif not wrong and self._warned:
            log.info("this host's clock agrees with the metadata database's again")
        self._warned = wrong
        self._offset_ms = offset_ms
        self._read_at = read_at
