"""Schema versions: apply the Alembic migrations, and refuse a database on another revision.

The migrations live in ``alembic/`` at the top of the source tree (``[tool.alembic]`` in
``pyproject.toml`` points the ``alembic`` command there too); an installed wheel carries them in
``<prefix>/share/rlm/alembic``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.script.revision import RevisionError
from alembic.util import CommandError
from sqlalchemy import Connection, Engine, func, select, text
from sqlalchemy import exc as sa_exc
from sqlalchemy import table as table_

from alembic import command
from metadata.engine import create_engine_for_url, parse_url
from metadata.transaction import translate_error
from rlm.errors import ConfigError, MetadataError, MetadataUnavailableError, SchemaMismatchError


def _script_location() -> Path:
    source_tree = Path(__file__).resolve().parent.parent / "alembic"
    if (source_tree / "env.py").is_file():
        return source_tree
    return Path(sys.prefix) / "share" / "rlm" / "alembic"  # installed from a wheel


#: The Alembic script directory.
SCRIPT_LOCATION = _script_location()
#: The PostgreSQL advisory lock that migrations of one database hold while they run (the bytes of
#: ``rlm_schm``): two ``rlm db upgrade`` at once (the chart's hook Job, a sidecar) queue on it.
MIGRATION_LOCK_KEY = int.from_bytes(b"rlm_schm", "big")
#: How long a migration's statement waits for a table lock on PostgreSQL. An ``ALTER TABLE`` waits
#: for every transaction that read the table, and PostgreSQL queues every later statement on the
#: table behind it: the sidecars would stall for as long as the longest reader. Past this wait the
#: upgrade rolls back (giving its locks up) and :func:`upgrade` starts it again.
LOCK_TIMEOUT_MS = 1000
#: How long :func:`upgrade` keeps starting again an upgrade that could not get its table locks.
LOCK_RETRY_S = 600.0
#: PostgreSQL's SQLSTATE for a lock wait past ``lock_timeout`` (``lock_not_available``).
LOCK_NOT_AVAILABLE = "55P03"


def lock_migrations(connection: Connection) -> None:
    """Wait until no other migration of the database runs, and keep it so until ``connection``'s
    transaction ends; Alembic reads the database's revision after this, and finds what the other
    migration did. On PostgreSQL an advisory lock (waited for as long as it takes), after which
    each table lock is waited for at most :data:`LOCK_TIMEOUT_MS`; SQLite's write transaction
    (``BEGIN IMMEDIATE``) already serializes migrations."""
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
        connection.execute(text(f"SET LOCAL lock_timeout = {int(LOCK_TIMEOUT_MS)}"))


def refuse_losing_rows(connection: Connection, table: str, revision: str) -> None:
    """Refuse (in a migration's ``downgrade``) to go below ``revision`` while ``table``, which it
    drops, holds rows that no upgrade could rebuild.

    Raises:
        MetadataError: ``table`` holds rows.
    """
    held = connection.execute(select(func.count()).select_from(table_(table))).scalar_one()
    if held:
        raise MetadataError(
            f"refusing to downgrade below revision {revision}: {table} holds {held} row(s) that no "
            "upgrade could recover"
        )


def alembic_config(url: str, script_location: Path = SCRIPT_LOCATION) -> Config:
    """An Alembic configuration for the database at ``url`` (read by ``alembic/env.py``)."""
    config = Config()
    config.set_main_option("script_location", str(script_location))
    config.attributes["url"] = url
    return config


def head_revision(script_location: Path = SCRIPT_LOCATION) -> str:
    """The schema revision this rlm needs: the newest migration."""
    head = ScriptDirectory.from_config(alembic_config("", script_location)).get_current_head()
    if head is None:
        raise SchemaMismatchError(f"no migrations found in {script_location}")
    return head


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at, ``None`` when no rlm schema was ever installed.

    Raises:
        MetadataUnavailableError: The database cannot be reached.
    """
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    except sa_exc.SQLAlchemyError as exc:
        raise translate_error(exc) from exc


def check_schema(engine: Engine, script_location: Path = SCRIPT_LOCATION) -> None:
    """Refuse to run against a database whose schema is not this rlm's revision.

    Args:
        engine: The metadata database.
        script_location: The migrations this rlm ships (another set only in tests).

    Raises:
        SchemaMismatchError: Un-migrated or older (run ``rlm db upgrade``), or newer than this rlm
            (upgrade rlm). The message gives both revisions.
        MetadataUnavailableError: The database cannot be reached.
    """
    head = head_revision(script_location)
    current = current_revision(engine)
    if current == head:
        return
    where = engine.url.render_as_string(hide_password=True)
    if current is None:
        raise SchemaMismatchError(
            f"metadata database {where} has no rlm schema, rlm needs revision {head}: run `rlm db upgrade`"
        )
    if _known(current, script_location):
        raise SchemaMismatchError(
            f"metadata database {where} schema is at revision {current}, rlm needs {head}: "
            "run `rlm db upgrade`"
        )
    raise _newer(where, current, head)


def _known(revision: str, script_location: Path = SCRIPT_LOCATION) -> bool:
    """Whether ``revision`` is one of the migrations at ``script_location``."""
    script = ScriptDirectory.from_config(alembic_config("", script_location))
    try:
        return script.get_revision(revision) is not None
    except (CommandError, RevisionError):
        return False


def _newer(where: str, current: str, head: str) -> SchemaMismatchError:
    """The error for a database at revision ``current``, which no migration of this rlm is."""
    return SchemaMismatchError(
        f"metadata database {where} schema is at revision {current}, newer than this rlm "
        f"(which knows up to {head}): upgrade rlm, or point RLM_METADATA_URL at another database"
    )


def upgrade(url: str, revision: str = "head") -> None:
    """Apply the migrations to the database at ``url`` up to ``revision``.

    Raises:
        ConfigError: The URL is not usable, or ``revision`` is not one of the migrations.
        MetadataUnavailableError: The database cannot be reached.
    """
    parse_url(url)
    config = alembic_config(url)
    _check_revision(config, revision)
    deadline = time.monotonic() + LOCK_RETRY_S
    while True:
        try:
            command.upgrade(config, revision)
            return
        except sa_exc.OperationalError as exc:
            if getattr(exc.orig, "sqlstate", None) != LOCK_NOT_AVAILABLE:
                raise translate_error(exc) from exc
            if time.monotonic() >= deadline:
                raise MetadataUnavailableError(
                    f"the upgrade could not lock the tables it changes for {LOCK_RETRY_S:g} s: "
                    f"a long transaction holds them ({exc.orig})",
                    kind="timeout",
                ) from exc
            time.sleep(LOCK_TIMEOUT_MS / 1000)
        except sa_exc.SQLAlchemyError as exc:
            raise translate_error(exc) from exc
        except CommandError as exc:
            _refuse_newer(url)
            raise ConfigError(f"cannot upgrade to revision {revision!r}: {exc}") from exc


def _refuse_newer(url: str) -> None:
    """Raise :class:`SchemaMismatchError` when the database at ``url`` is at a revision newer than
    this rlm's migrations (what Alembic reports only as a revision it cannot locate)."""
    engine = create_engine_for_url(url, pooled=False)
    try:
        current = current_revision(engine)
        where = engine.url.render_as_string(hide_password=True)
    finally:
        engine.dispose()
    if current is not None and not _known(current):
        raise _newer(where, current, head_revision())


def _check_revision(config: Config, revision: str) -> None:
    """Refuse a revision no migration is (before the database is touched: an SQLite file would be
    created). A relative one (``+1``, ``0003+1``) is resolved by Alembic against the database."""
    if "+" in revision:
        return
    script = ScriptDirectory.from_config(config)
    try:
        script.get_revisions(revision)
    except (CommandError, RevisionError):
        known = [migration.revision for migration in script.walk_revisions()]
        raise ConfigError(f"unknown revision {revision!r} (known: {known[-1]}…{known[0]}, head)") from None


def downgrade(url: str, revision: str) -> None:
    """Revert the migrations of the database at ``url`` down to ``revision`` (``base``: all)."""
    parse_url(url)
    try:
        command.downgrade(alembic_config(url), revision)
    except sa_exc.SQLAlchemyError as exc:
        raise translate_error(exc) from exc
