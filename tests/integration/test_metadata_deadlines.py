"""Every metadata call has a deadline, whatever the database does.

The real PostgreSQL sits behind a TCP proxy the test controls (:mod:`tests.tcp_proxy`): refusing
connections, or accepting them and never answering (a frozen server: nothing a server-side
``statement_timeout`` or TCP keepalives would end). A store built with deadlines fails such a call
with the retriable ``MetadataUnavailableError`` of the right ``kind`` in about its deadline, tells
its error listener (the ``rlm_metadata_errors_total`` metric), and works again once the database
answers. Elapsed-time bounds are loose: a deadline plus seconds tells a deadline from a hang.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from metadata.engine import Deadlines, create_engine_for_url
from metadata.store import SqlMetadataStore
from metadata.transaction import transaction
from rlm.errors import MetadataUnavailableError
from rlm.metastore import TopicPartition
from tests.metadata_support import backend_url, sqlite_copy
from tests.tcp_proxy import Mode, TcpProxy

TP = TopicPartition("orders", 0)
DEADLINES = Deadlines(pool_timeout_s=0.5, connect_timeout_s=2, statement_timeout_s=0.5)
#: A statement's longest wait: its timeout and the second rlm gives the server past it.
ANSWER_S = 0.5 + 1.0
SLACK_S = 4.0


@pytest.fixture
def proxied(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[SqlMetadataStore, TcpProxy, list[str]]]:
    """A store on the session's database (emptied) through a proxy, with deadlines; and the error
    kinds its listener was told of."""
    target = make_url(backend_url("postgres", request, tmp_path))
    with TcpProxy((target.host or "127.0.0.1", target.port or 5432)) as proxy:
        url = target.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
        kinds: list[str] = []
        store = SqlMetadataStore.open(
            url, pool_size=2, deadlines=DEADLINES, on_error=lambda error: kinds.append(error.kind)
        )
        try:
            yield store, proxy, kinds
        finally:
            proxy.set_mode(Mode.PASS)
            store.close()


def failed_in(store: SqlMetadataStore, bound_s: float) -> MetadataUnavailableError:
    started = time.monotonic()
    with pytest.raises(MetadataUnavailableError) as failed:
        store.get_partition(TP)
    took = time.monotonic() - started
    assert took < bound_s, f"the call took {took:.1f} s"
    assert failed.value.retriable
    return failed.value


@pytest.mark.postgres
def test_a_refusing_database_fails_calls_at_once(
    proxied: tuple[SqlMetadataStore, TcpProxy, list[str]],
) -> None:
    store, proxy, kinds = proxied
    assert store.get_partition(TP) is None
    proxy.set_mode(Mode.REFUSE)
    for _ in range(2):
        error = failed_in(store, SLACK_S)
        assert error.kind in ("connect", "disconnect"), error
    assert "connect" in kinds
    proxy.set_mode(Mode.PASS)
    assert store.get_partition(TP) is None  # the pool opens new connections


@pytest.mark.postgres
def test_a_silent_database_fails_calls_by_their_deadlines(
    proxied: tuple[SqlMetadataStore, TcpProxy, list[str]],
) -> None:
    store, proxy, kinds = proxied
    assert store.get_partition(TP) is None  # a pooled connection, established
    proxy.set_mode(Mode.SILENT)
    pooled = failed_in(store, ANSWER_S + SLACK_S)  # on the pooled connection: no answer
    assert pooled.kind == "timeout" and "did not answer within 1.5 s" in str(pooled)
    opened = failed_in(store, 2 + SLACK_S)  # a new connection: accepted, never set up
    assert opened.kind == "connect" and "timeout" in str(opened)
    assert kinds == ["timeout", "connect"]
    proxy.set_mode(Mode.PASS)
    assert store.get_partition(TP) is None


@pytest.mark.postgres
def test_callers_waiting_for_a_pooled_connection_give_up_at_the_pool_timeout(
    proxied: tuple[SqlMetadataStore, TcpProxy, list[str]],
) -> None:
    store, proxy, kinds = proxied
    assert store.get_partition(TP) is None
    proxy.set_mode(Mode.SILENT)
    holders = [threading.Thread(target=_swallow, args=(store,)) for _ in range(2)]
    for holder in holders:  # both pooled connections wait for an answer that never comes
        holder.start()
    time.sleep(0.1)
    waiting = failed_in(store, DEADLINES.pool_timeout_s + SLACK_S)
    assert waiting.kind == "pool_timeout", waiting
    for holder in holders:
        holder.join(ANSWER_S + 2 + SLACK_S)
        assert not holder.is_alive()
    assert "pool_timeout" in kinds


@pytest.mark.postgres
def test_the_server_cancels_a_statement_running_past_the_timeout(postgres_url: str) -> None:
    engine = create_engine_for_url(postgres_url, deadlines=DEADLINES)
    try:
        started = time.monotonic()
        with (
            pytest.raises(MetadataUnavailableError, match="statement timeout") as cancelled,
            transaction(engine, write=False) as conn,
        ):
            conn.execute(text("SELECT pg_sleep(30)"))
        assert cancelled.value.kind == "timeout"
        assert time.monotonic() - started < 0.5 + SLACK_S
    finally:
        engine.dispose()


def test_sqlite_writers_wait_for_a_lock_no_longer_than_the_statement_timeout(
    tmp_path: Path,
    sqlite_template: Path,
) -> None:
    url = sqlite_copy(sqlite_template, tmp_path)
    holder = create_engine_for_url(url)
    waiter = create_engine_for_url(url, deadlines=DEADLINES)
    try:
        with transaction(holder, write=True):  # holds the write lock
            started = time.monotonic()
            with (
                pytest.raises(MetadataUnavailableError, match="locked") as locked,
                transaction(waiter, write=True),
            ):
                pass
            assert locked.value.kind == "timeout"
            assert time.monotonic() - started < 0.5 + SLACK_S
    finally:
        holder.dispose()
        waiter.dispose()


def _swallow(store: SqlMetadataStore) -> None:
    with contextlib.suppress(MetadataUnavailableError):
        store.get_partition(TP)
