"""Two ``rlm db upgrade`` at once (the chart's hook Job and a sidecar starting) both succeed: the
second waits for the first and finds the schema up to date; on SQLite and PostgreSQL."""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
import time
from multiprocessing.synchronize import Barrier
from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy import exc as sa_exc

from alembic import command
from metadata.engine import Deadlines, create_engine_for_url
from metadata.schema import alembic_config, current_revision, head_revision, upgrade
from metadata.transaction import transaction
from rlm.errors import MetadataError, SchemaMismatchError
from tests.metadata_support import create_postgres_database, drop_postgres_database

UPGRADERS = 2


def _upgrade(url: str, barrier: Barrier, outcomes: multiprocessing.Queue[str]) -> None:
    barrier.wait(timeout=60)
    try:
        upgrade(url)
    except Exception as exc:  # reported to the test, which prints it
        outcomes.put(f"{type(exc).__name__}: {exc}")
    else:
        outcomes.put("ok")


@pytest.mark.parametrize("start", [None, "0005"], ids=["empty", "at-0005"])
def test_concurrent_upgrades_queue_and_both_succeed(empty_url: str, start: str | None) -> None:
    if start is not None:
        upgrade(empty_url, start)
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(UPGRADERS)
    outcomes: multiprocessing.Queue[str] = context.Queue()
    processes = [
        context.Process(target=_upgrade, args=(empty_url, barrier, outcomes)) for _ in range(UPGRADERS)
    ]
    for process in processes:
        process.start()
    said = [outcomes.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=60)

    assert said == ["ok"] * UPGRADERS
    assert [process.exitcode for process in processes] == [0] * UPGRADERS
    engine = create_engine_for_url(empty_url, pooled=False)
    try:
        assert current_revision(engine) == head_revision()
    finally:
        engine.dispose()
    command.check(alembic_config(empty_url))


def test_a_connection_to_a_new_sqlite_file_waits_for_a_writer_to_set_wal_mode(tmp_path: Path) -> None:
    # The first connections to a new file each switch it to WAL mode. A switch while another
    # connection writes was answered "database is locked" at once, without the busy wait: two
    # upgrades starting together on a new file then had one fail.
    path = tmp_path / "new.db"
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    writer.execute("CREATE TABLE t (x)")
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO t VALUES (1)")
    commit = threading.Timer(0.3, writer.execute, ("COMMIT",))
    commit.start()
    engine = create_engine_for_url(
        f"sqlite:///{path}", pooled=False, deadlines=Deadlines(statement_timeout_s=20)
    )
    try:
        with engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert connection.exec_driver_sql("SELECT x FROM t").scalars().all() == [1]
    finally:
        engine.dispose()
        commit.join()
        writer.close()


def test_a_connection_that_cannot_set_wal_mode_in_time_says_the_database_is_locked(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("CREATE TABLE t (x)")
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO t VALUES (1)")
    engine = create_engine_for_url(
        f"sqlite:///{path}", pooled=False, deadlines=Deadlines(statement_timeout_s=0.2)
    )
    try:
        with pytest.raises(sa_exc.OperationalError, match="database is locked"):
            engine.connect()
    finally:
        engine.dispose()
        writer.close()


def failure(engine: Engine, statement: str) -> MetadataError:
    """What running ``statement`` in a store transaction raises."""
    try:
        with transaction(engine, write=True) as conn:
            conn.execute(text(statement))
    except MetadataError as exc:
        return exc
    raise AssertionError(f"{statement!r} succeeded")


@pytest.mark.postgres
def test_a_table_or_column_that_exists_already_is_not_said_to_be_a_missing_schema(postgres_url: str) -> None:
    # What the loser of two concurrent migrations once heard: "has no rlm schema".
    engine = create_engine_for_url(postgres_url, pooled=False)
    try:
        for statement in (
            "CREATE TABLE rlm_partition (id integer)",
            "ALTER TABLE rlm_partition ADD COLUMN topic_id uuid",
        ):
            error = failure(engine, statement)
            assert "already exists" in str(error) and not isinstance(error, SchemaMismatchError)
        missing = failure(engine, "SELECT * FROM rlm_no_such_table")  # a missing one still is
        assert isinstance(missing, SchemaMismatchError) and "no rlm schema" in str(missing)
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_an_upgrade_waiting_behind_a_long_transaction_does_not_stall_the_sidecars() -> None:
    # ALTER TABLE waits for every transaction that read the table; while it waits, PostgreSQL
    # queues every later statement on the table behind it. An upgrade must give its locks up
    # after a short wait and try again rather than stall the sidecars for as long as the reader.
    url = create_postgres_database()
    reader = create_engine_for_url(url, pooled=False)
    sidecar = create_engine_for_url(url, pooled=False, deadlines=Deadlines(statement_timeout_s=3.0))
    try:
        upgrade(url, "0005")  # 0006 alters rlm_partition
        outcome: list[str] = []
        with reader.connect() as long_reader:
            long_reader.execute(text("SELECT count(*) FROM rlm_partition"))  # holds its lock till the end

            def run() -> None:
                try:
                    upgrade(url)
                except Exception as exc:
                    outcome.append(f"{type(exc).__name__}: {exc}")
                else:
                    outcome.append("ok")

            upgrader = threading.Thread(target=run)
            upgrader.start()
            time.sleep(1.5)  # the upgrade is waiting for rlm_partition by now
            with sidecar.connect() as conn:
                assert conn.execute(text("SELECT count(*) FROM rlm_partition")).scalar_one() == 0
            long_reader.rollback()
        upgrader.join(timeout=60)
        assert outcome == ["ok"]
        assert current_revision(reader) == head_revision()
    finally:
        reader.dispose()
        sidecar.dispose()
        drop_postgres_database(url)
