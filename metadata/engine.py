"""Build a SQLAlchemy engine for the metadata store from a URL.

* PostgreSQL (production): ``postgresql+psycopg://user@host:5432/db``; a bare ``postgresql://``
  URL gets the psycopg 3 driver.
* SQLite (embedded default): ``sqlite:///path/to/file.db``. The migrations (``rlm db upgrade``)
  create the file and its parent directory; the store and the schema check refuse a file that
  does not exist rather than leave an empty one behind. The database runs in WAL mode (readers
  never block the writer) with a busy timeout, every commit is synced to the disk
  (``synchronous=FULL``: a commit survives a power loss), and write transactions start with
  ``BEGIN IMMEDIATE`` so that two writers queue up instead of failing when one upgrades its read
  lock.

Every call can be given a deadline (:class:`Deadlines`): waiting for a pooled connection
(``pool_timeout``), opening one (libpq's ``connect_timeout``), and each statement — PostgreSQL
cancels a statement that runs longer (``statement_timeout``, which also bounds lock waits), and
rlm gives up on a server that does not answer at all a second later
(:mod:`metadata.pg_connection`); on SQLite, a writer waits that long for another's lock. TCP
keepalives find a connection whose peer vanished while it sat in the pool.
"""

from __future__ import annotations

import math
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import NullPool

from metadata.pg_connection import AnsweringConnection
from rlm.errors import ConfigError, SchemaMismatchError

#: Where the embedded store lives when ``RLM_METADATA_URL`` is not set.
DEFAULT_URL = "sqlite:///build/rlm-metadata.db"
#: Execution option that marks a connection's next transaction as a writing one.
WRITE_OPTION = "rlm_write"
#: How much longer than ``statement_timeout`` rlm waits for a server's answer before it closes the
#: connection: a server that is only slow says it cancelled the statement first.
ANSWER_MARGIN_S = 1.0
#: TCP keepalives (libpq's): a pooled connection whose peer vanished fails within about a minute.
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3}


@dataclass(frozen=True)
class Deadlines:
    """How long one metadata call may wait, at each step; None waits as long as it takes."""

    pool_timeout_s: float = 30.0
    """Waiting for a free pooled connection."""
    connect_timeout_s: float | None = None
    """Opening a connection (PostgreSQL counts whole seconds, at least 2, as libpq does)."""
    statement_timeout_s: float | None = None
    """One statement (PostgreSQL), a writer's wait for the lock (SQLite; 30 s when None)."""


def parse_url(url: str) -> URL:
    """Parse and normalise a metadata URL.

    Raises:
        ConfigError: The URL is malformed, names an unsupported database, or an in-memory SQLite.
    """
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ConfigError(f"malformed metadata URL {url!r}: {exc}") from exc
    backend = parsed.get_backend_name()
    if backend == "postgresql":
        if parsed.drivername == "postgresql":
            parsed = parsed.set(drivername="postgresql+psycopg")
        return parsed
    if backend == "sqlite":
        if not parsed.database or parsed.database == ":memory:":
            raise ConfigError(f"metadata URL {url!r}: SQLite needs a file path, e.g. sqlite:///build/rlm.db")
        return parsed
    raise ConfigError(f"metadata URL {url!r}: only postgresql and sqlite are supported")


def display_url(url: str) -> str:
    """``url`` with its password masked, for messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


def create_engine_for_url(
    url: str,
    *,
    pool_size: int = 5,
    deadlines: Deadlines | None = None,
    pooled: bool = True,
    create: bool = True,
) -> Engine:
    """Create an engine for ``url`` with rlm's connection settings.

    Args:
        url: A PostgreSQL or SQLite URL (see the module docstring).
        pool_size: Most connections the engine holds open; never more are opened.
        deadlines: How long a call may wait for a pooled connection, a new one, a statement.
        pooled: ``False`` opens a connection per use (for one-shot commands and migrations).
        create: An SQLite file that does not exist is created (with its directory) at the first
            connection; when False it is refused, as a database that was never migrated (what
            only reads it, or needs its schema, must not leave an empty file behind).

    Raises:
        ConfigError: The URL is not usable (see :func:`parse_url`).
        SchemaMismatchError: The SQLite file does not exist (without ``create``).
    """
    parsed = parse_url(url)
    deadlines = deadlines if deadlines is not None else Deadlines()
    pool_args: dict[str, Any] = (
        {"pool_size": pool_size, "max_overflow": 0, "pool_timeout": deadlines.pool_timeout_s}
        if pooled
        else {"poolclass": NullPool}
    )
    if parsed.get_backend_name() == "postgresql":
        return _postgres_engine(parsed, deadlines, pool_args)

    assert parsed.database is not None  # parse_url guarantees a file path
    if create:
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    elif not Path(parsed.database).exists():
        raise SchemaMismatchError(f"no metadata database at {parsed.database}: run `rlm db upgrade`")
    busy_timeout_s = deadlines.statement_timeout_s if deadlines.statement_timeout_s is not None else 30.0
    engine = create_engine(
        parsed,
        connect_args={"timeout": busy_timeout_s, "check_same_thread": False},
        **pool_args,
    )
    busy_ms = int(busy_timeout_s * 1000)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event, not the sqlite3 module, decide how transactions start.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            _enter_wal(cursor, busy_timeout_s)
            # FULL: each commit reaches the disk before the call returns. NORMAL (in WAL mode)
            # syncs only at checkpoints, so a power loss can roll back commits the caller acted
            # on, e.g. DELETE_SEGMENT_STARTED, whose objects the caller then deleted.
            cursor.execute("PRAGMA synchronous=FULL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute(f"PRAGMA busy_timeout={busy_ms}")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        writing = connection.get_execution_options().get(WRITE_OPTION, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if writing else "BEGIN")

    return engine


def _enter_wal(cursor: Any, timeout_s: float) -> None:
    """Put the database in WAL mode, waiting up to ``timeout_s`` for other connections.

    Only the first connection to a new file changes the mode (it is kept in the file). Two doing so
    at once can each hold a read lock the other's change needs: SQLite then answers "database is
    locked" at once, without the busy timeout's wait, so the wait is done here.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


def _postgres_engine(parsed: URL, deadlines: Deadlines, pool_args: dict[str, Any]) -> Engine:
    # No pre-ping: it would cost a round trip per transaction. A connection lost to a server
    # restart fails one call with a retriable error, and the pool then reconnects.
    # psycopg prepares a statement after its fifth run; generic plans then skip planning,
    # which costs more than running these small indexed lookups (and PostgreSQL's own
    # choice between custom and generic plans flips as the tables grow). JIT compilation
    # only slows down statements this short.
    options = "-c plan_cache_mode=force_generic_plan -c jit=off"
    connect_args: dict[str, Any] = dict(KEEPALIVES)
    answer_timeout_s = None
    if deadlines.statement_timeout_s is not None:
        options += f" -c statement_timeout={math.ceil(deadlines.statement_timeout_s * 1000)}"
        answer_timeout_s = deadlines.statement_timeout_s + ANSWER_MARGIN_S
    if deadlines.connect_timeout_s is not None:
        connect_args["connect_timeout"] = max(2, math.ceil(deadlines.connect_timeout_s))
    connect_args["options"] = options
    engine = create_engine(parsed, connect_args=connect_args, **pool_args)

    @event.listens_for(engine, "do_connect")
    def _connect(_dialect: Any, _record: Any, cargs: Any, cparams: Any) -> AnsweringConnection:
        connection = AnsweringConnection.connect(*cargs, **cparams)
        connection.answer_timeout_s = answer_timeout_s
        return connection

    return engine
