"""Alembic environment for rlm's metadata schema.

The database URL comes from, in order: the ``url`` attribute set by ``metadata.schema``
(``rlm db upgrade``), ``alembic -x url=...``, ``RLM_METADATA_URL``, or the embedded default.
"""

from __future__ import annotations

import os

from sqlalchemy import Connection

from alembic import context
from metadata.engine import DEFAULT_URL, WRITE_OPTION, create_engine_for_url
from metadata.models import Base
from metadata.schema import lock_migrations
from rlm.errors import MetadataError

config = context.config


def database_url() -> str:
    """The URL of the database to migrate."""
    given = config.attributes.get("url")
    if given:
        return str(given)
    return str(
        context.get_x_argument(as_dictionary=True).get("url")
        or os.environ.get("RLM_METADATA_URL")
        or DEFAULT_URL
    )


def run_migrations_offline() -> None:
    """Print the migration SQL for the URL's dialect instead of running it."""
    context.configure(
        url=database_url(),
        target_metadata=Base.metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def _run(connection: Connection) -> None:
    sqlite = connection.dialect.name == "sqlite"
    if sqlite:
        # Batch mode copies a table and drops the original. With foreign keys enforced, that DROP
        # deletes the rows first: it fails on a parent still referenced, and cascades to the
        # children of rlm_segment (its epochs and pending uploads), which would silently go.
        # The pragma is a no-op inside a transaction, so it is set before the migration's begins;
        # the check below refuses to commit a migration that broke a reference.
        connection.connection.driver_connection.execute("PRAGMA foreign_keys=OFF")  # type: ignore[union-attr]
    connection.execution_options(**{WRITE_OPTION: True})
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        # SQLite cannot ALTER most things in place: batch mode copies the table instead.
        render_as_batch=sqlite,
        compare_type=True,
        # One transaction for the whole upgrade, on SQLite too (whose DDL is transactional; Alembic
        # assumes otherwise for the sqlite3 module's implicit commits, which rlm turns off). With a
        # transaction per migration, a second upgrade at once ran a migration between two of the
        # first's, and the first then ran it again on the revision it had read at its start.
        transactional_ddl=True,
    )
    with context.begin_transaction():
        # Before Alembic reads the revision: a second upgrade at once waits, then finds it done.
        lock_migrations(connection)
        context.run_migrations()
        if sqlite:
            broken = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
            if broken:
                raise MetadataError(f"the migration left rows whose references are broken: {broken[:10]}")


def run_migrations_online() -> None:
    """Run the migrations against the database."""
    engine = create_engine_for_url(database_url(), pooled=False)
    try:
        with engine.connect() as connection:
            _run(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
