"""Two ``rlm db upgrade`` at once (the chart's hook Job and a sidecar starting) both succeed: the
second waits for the first and finds the schema up to date; on SQLite and PostgreSQL."""

from __future__ import annotations

import multiprocessing
from multiprocessing.synchronize import Barrier

import pytest
from sqlalchemy import Engine, text

from alembic import command
from metadata.engine import create_engine_for_url
from metadata.schema import alembic_config, current_revision, head_revision, upgrade
from metadata.transaction import transaction
from rlm.errors import MetadataError, SchemaMismatchError

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
