"""A write waiting for a partition's lock reads what the writer before it committed, whatever
isolation level the PostgreSQL database gives transactions by default.

Every write locks its partition's row first and then reads the state it changes. That holds at
READ COMMITTED, where each statement reads what was committed when it started. A database whose
``default_transaction_isolation`` is REPEATABLE READ (a DBA's choice, for the other applications
it serves) reads, for the whole transaction, what was committed when its first statement started:
before it waited for the lock. A write that changed only rows other than the partition's (a copy
starting, a state change that is not a finish) would then go unseen by the writer that queued
behind it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import event
from sqlalchemy.engine import make_url

from metadata.schema import upgrade
from rlm.errors import InvalidSkipRangeError
from rlm.metastore.model import SkipKind, SkippedRange
from tests.clock import FakeClock
from tests.metadata_support import (
    TP,
    add_finished,
    create_postgres_database,
    drop_postgres_database,
    open_store,
    segment,
)

WAIT_S = 10.0


@pytest.fixture(params=["read committed", "repeatable read"])
def isolated_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A migrated PostgreSQL database whose transactions run at the level given by default."""
    url = create_postgres_database()
    try:
        name = make_url(url).database
        dsn = make_url(url).set(drivername="postgresql").render_as_string(False)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"ALTER DATABASE \"{name}\" SET default_transaction_isolation TO '{request.param}'")
        upgrade(url)
        yield url
    finally:
        drop_postgres_database(url)


def _lock_waiters(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchone()
    return 0 if row is None else int(row[0])


@pytest.mark.postgres
def test_a_skip_waiting_for_the_lock_sees_the_copy_started_before_it(isolated_url: str) -> None:
    dsn = make_url(isolated_url).set(drivername="postgresql").render_as_string(False)
    with open_store(isolated_url, FakeClock()) as copier, open_store(isolated_url, FakeClock()) as operator:
        add_finished(copier, segment(0, 99))  # the partition knows its topic id already
        holding = threading.Event()

        def hold_the_lock(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
            # The copy's row is written, its transaction not committed: the operator's skip
            # starts now, and queues behind the partition's lock.
            if statement.startswith("INSERT INTO rlm_segment "):
                holding.set()
                deadline = time.monotonic() + WAIT_S
                while _lock_waiters(dsn) == 0 and time.monotonic() < deadline:
                    time.sleep(0.02)

        event.listen(copier.engine, "after_cursor_execute", hold_the_lock)
        started = segment(100, 199)
        copy = threading.Thread(target=copier.add_segment, args=(started,))
        copy.start()
        try:
            assert holding.wait(WAIT_S)
            skip = SkippedRange(TP, 150, 249, SkipKind.OPERATOR, "an operator's skip", 1)
            with pytest.raises(InvalidSkipRangeError, match="under way"):
                operator.add_skipped_range(skip)
        finally:
            copy.join()
        assert operator.list_skipped_ranges(TP) == []
