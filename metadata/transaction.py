"""Units of work over the metadata database, and translation of database errors.

Every store call runs in one transaction from :func:`transaction`: it commits when the block
finishes and rolls back when anything is raised. Errors from SQLAlchemy and the drivers never
leave this package: they become :mod:`rlm.errors` classes, chained with ``from``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Engine
from sqlalchemy import exc as sa_exc

from metadata.engine import WRITE_OPTION
from rlm.errors import MetadataError, MetadataUnavailableError, SchemaMismatchError


def translate_error(exc: sa_exc.SQLAlchemyError) -> MetadataError:
    """The :mod:`rlm.errors` class that says what ``exc`` means to a caller.

    Lost connections, timeouts, lock waits, deadlocks and serialization failures are retriable;
    a missing table means the schema was never installed.
    """
    if isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated:
        return MetadataUnavailableError(f"lost the connection to the metadata database: {exc.orig}")
    if isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError):
        # PostgreSQL: connection refused/lost, deadlock, serialization failure, statement
        # timeout. SQLite: database is locked or busy.
        return MetadataUnavailableError(f"metadata database unavailable: {exc.orig}")
    if isinstance(exc, sa_exc.TimeoutError | sa_exc.DisconnectionError):
        return MetadataUnavailableError(f"metadata database unavailable: {exc}")
    if isinstance(exc, sa_exc.ProgrammingError) and "rlm_" in str(exc.orig):
        return SchemaMismatchError(f"metadata database has no rlm schema ({exc.orig}): run `rlm db upgrade`")
    return MetadataError(f"metadata database error: {exc}")


@contextmanager
def transaction(engine: Engine, *, write: bool, snapshot: bool = True) -> Iterator[Connection]:
    """One unit of work: commits if the block completes, rolls back otherwise.

    Args:
        engine: Engine from :func:`metadata.engine.create_engine_for_url`.
        write: The block writes. On SQLite the transaction then takes the write lock up front.
        snapshot: A reading block runs several statements that must see one snapshot: on
            PostgreSQL it then runs at REPEATABLE READ. A read of one statement passes ``False``
            and runs in autocommit mode, saving the BEGIN and COMMIT round trips.

    Raises:
        MetadataUnavailableError: The database could not be reached or aborted the transaction.
        MetadataError: Any other database failure.
    """
    try:
        with engine.connect() as connection:
            if write:
                connection.execution_options(**{WRITE_OPTION: True})
            elif connection.dialect.name == "postgresql":
                level = "REPEATABLE READ" if snapshot else "AUTOCOMMIT"
                connection.execution_options(isolation_level=level)
            with connection.begin():
                yield connection
    except sa_exc.SQLAlchemyError as exc:
        raise translate_error(exc) from exc
