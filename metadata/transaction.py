"""Units of work over the metadata database, and translation of database errors.

Every store call runs in one transaction from :func:`transaction`: it commits when the block
finishes and rolls back when anything is raised. Errors from SQLAlchemy and the drivers never
leave this package: they become :mod:`rlm.errors` classes, chained with ``from``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Engine
from sqlalchemy import exc as sa_exc

from metadata.engine import WRITE_OPTION
from metadata.pg_connection import AnswerTimeout
from rlm.errors import MetadataError, MetadataUnavailableError, SchemaMismatchError

#: Told of every call that failed for want of an answer (to count them by kind).
ErrorListener = Callable[[MetadataUnavailableError], None]

#: SQLSTATEs of a statement the server gave up on: query_canceled (statement_timeout) and
#: lock_not_available (lock_timeout, NOWAIT).
_TIMED_OUT_STATES = frozenset({"57014", "55P03"})
#: SQLSTATEs of a statement naming a table or a column the database lacks: undefined_table,
#: undefined_column. One that exists already (duplicate_table, duplicate_column) says the schema
#: is there, and is no missing schema.
_MISSING_STATES = frozenset({"42P01", "42703"})


def translate_error(exc: sa_exc.SQLAlchemyError, *, connecting: bool = False) -> MetadataError:
    """The :mod:`rlm.errors` class that says what ``exc`` means to a caller.

    Lost connections, timeouts, lock waits, deadlocks and serialization failures are retriable
    (:class:`MetadataUnavailableError`, whose ``kind`` says which); a missing table means the
    schema was never installed. ``connecting``: ``exc`` came from getting a connection.
    """
    if isinstance(exc, sa_exc.TimeoutError):
        return MetadataUnavailableError(
            f"metadata database unavailable: no pooled connection came free in time ({exc})",
            kind="pool_timeout",
        )
    if isinstance(exc, sa_exc.DBAPIError) and (connecting or exc.connection_invalidated):
        if connecting:
            return MetadataUnavailableError(
                f"cannot connect to the metadata database: {exc.orig}", kind="connect"
            )
        if isinstance(exc.orig, AnswerTimeout):
            return MetadataUnavailableError(str(exc.orig), kind="timeout")
        return MetadataUnavailableError(
            f"lost the connection to the metadata database: {exc.orig}", kind="disconnect"
        )
    if isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError):
        # PostgreSQL: connection refused/lost, deadlock, serialization failure, statement
        # timeout. SQLite: database is locked or busy.
        return MetadataUnavailableError(f"metadata database unavailable: {exc.orig}", kind=_kind(exc))
    if isinstance(exc, sa_exc.DisconnectionError):
        return MetadataUnavailableError(f"metadata database unavailable: {exc}", kind="disconnect")
    if (
        isinstance(exc, sa_exc.ProgrammingError)
        and getattr(exc.orig, "sqlstate", None) in _MISSING_STATES
        and "rlm_" in str(exc.orig)
    ):
        return SchemaMismatchError(f"metadata database has no rlm schema ({exc.orig}): run `rlm db upgrade`")
    return MetadataError(f"metadata database error: {exc}")


def _kind(exc: sa_exc.DBAPIError) -> str:
    state = getattr(exc.orig, "sqlstate", None)
    if isinstance(exc.orig, AnswerTimeout) or state in _TIMED_OUT_STATES:
        return "timeout"
    if "database is locked" in str(exc.orig):  # SQLite's busy timeout ran out
        return "timeout"
    return "unavailable"


@contextmanager
def transaction(
    engine: Engine, *, write: bool, snapshot: bool = True, on_error: ErrorListener | None = None
) -> Iterator[Connection]:
    """One unit of work: commits if the block completes, rolls back otherwise.

    Args:
        engine: Engine from :func:`metadata.engine.create_engine_for_url`.
        write: The block writes. On SQLite the transaction then takes the write lock up front;
            on PostgreSQL it runs at READ COMMITTED, whatever the database's default.
        snapshot: A reading block runs several statements that must see one snapshot: on
            PostgreSQL it then runs at REPEATABLE READ. A read of one statement passes ``False``
            and runs in autocommit mode, saving the BEGIN and COMMIT round trips.
        on_error: Told of a :class:`MetadataUnavailableError` before it is raised.

    Raises:
        MetadataUnavailableError: The database could not be reached or aborted the transaction.
        MetadataError: Any other database failure.
    """
    try:
        connection = engine.connect()  # a pooled connection, or a new one
    except sa_exc.SQLAlchemyError as exc:
        raise _told(translate_error(exc, connecting=True), on_error) from exc
    try:
        with connection:
            postgresql = connection.dialect.name == "postgresql"
            if write:
                connection.execution_options(**{WRITE_OPTION: True})
                if postgresql:
                    # Whatever the database's default_transaction_isolation: a write locks its
                    # partition's row, then reads the state it changes, and only at READ COMMITTED
                    # do those reads see what the writer it waited for committed. At REPEATABLE
                    # READ they would see the database as it was before the wait.
                    connection.execution_options(isolation_level="READ COMMITTED")
            elif postgresql:
                level = "REPEATABLE READ" if snapshot else "AUTOCOMMIT"
                connection.execution_options(isolation_level=level)
            with connection.begin():
                yield connection
    except sa_exc.SQLAlchemyError as exc:
        raise _told(translate_error(exc), on_error) from exc


def _told(error: MetadataError, on_error: ErrorListener | None) -> MetadataError:
    if on_error is not None and isinstance(error, MetadataUnavailableError):
        on_error(error)
    return error
