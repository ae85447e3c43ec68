"""Migrations and the schema check, on SQLite and PostgreSQL, and the ``rlm db`` commands."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from alembic import command
from metadata.engine import create_engine_for_url
from metadata.schema import (
    SCRIPT_LOCATION,
    alembic_config,
    check_schema,
    current_revision,
    downgrade,
    head_revision,
    upgrade,
)
from metadata.store import SqlMetadataStore
from rlm.cli import db as db_cli
from rlm.cli import main
from rlm.errors import MetadataUnavailableError, SchemaMismatchError
from tests.metadata_support import (
    TP,
    segment,
)

HEAD = head_revision()
NEXT_REVISION = f'''"""A later revision, known to a newer rlm only."""

revision = "9999"
down_revision = "{HEAD}"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
'''


def test_models_and_migrations_do_not_drift(database_url: str) -> None:
    # `alembic check`: autogenerate against the migrated database finds nothing to do.
    command.check(alembic_config(database_url))


def test_migrations_go_down_and_up_again(empty_url: str) -> None:
    upgrade(empty_url)
    downgrade(empty_url, "base")
    upgrade(empty_url)
    command.check(alembic_config(empty_url))


def test_an_unmigrated_database_is_refused_with_the_command_to_run(empty_url: str) -> None:
    if empty_url.startswith("sqlite:///"):
        Path(empty_url.removeprefix("sqlite:///")).touch()  # an SQLite database without tables
    with pytest.raises(SchemaMismatchError, match=r"has no rlm schema.*run `rlm db upgrade`"):
        SqlMetadataStore.open(empty_url)
    upgrade(empty_url)
    with SqlMetadataStore.open(empty_url) as store:
        store.add_segment(segment(0, 9))


def test_an_older_schema_is_refused_until_upgraded(empty_url: str, tmp_path: Path) -> None:
    upgrade(empty_url)
    newer = tmp_path / "newer-alembic"
    shutil.copytree(SCRIPT_LOCATION, newer)
    (newer / "versions" / "9999_later.py").write_text(NEXT_REVISION)
    engine = create_engine_for_url(empty_url, pooled=False)
    try:
        with pytest.raises(
            SchemaMismatchError,
            match=rf"at revision {HEAD}, rlm needs 9999: run `rlm db upgrade`",
        ):
            check_schema(engine, newer)
        command.upgrade(alembic_config(empty_url, newer), "head")
        check_schema(engine, newer)
    finally:
        engine.dispose()


def test_an_upgrade_that_fails_part_way_leaves_the_schema_where_it_was(
    empty_url: str, tmp_path: Path
) -> None:
    # One transaction for the whole upgrade, on SQLite as on PostgreSQL: a failed upgrade is not
    # left half done, and a second upgrade at once cannot run migrations between this one's.
    upgrade(empty_url, "0005")
    failing = tmp_path / "failing-alembic"
    shutil.copytree(SCRIPT_LOCATION, failing)
    (failing / "versions" / "9999_later.py").write_text(
        NEXT_REVISION.replace(
            "def upgrade() -> None:\n    pass", "def upgrade() -> None:\n    raise RuntimeError('broken')"
        )
    )
    with pytest.raises(RuntimeError, match="broken"):
        command.upgrade(alembic_config(empty_url, failing), "head")
    engine = create_engine_for_url(empty_url, pooled=False)
    try:
        assert current_revision(engine) == "0005"
        assert "rlm_cluster" not in inspect(engine).get_table_names()  # made by 0011, rolled back
    finally:
        engine.dispose()
    upgrade(empty_url)
    command.check(alembic_config(empty_url))


def test_a_newer_schema_is_refused(empty_url: str) -> None:
    upgrade(empty_url)
    engine = create_engine_for_url(empty_url, pooled=False)
    try:
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = '9f3e2a1b7c6d'"))
        with pytest.raises(
            SchemaMismatchError, match=r"at revision 9f3e2a1b7c6d, newer than this rlm.*upgrade rlm"
        ):
            check_schema(engine)
    finally:
        engine.dispose()


def test_rlm_db_upgrade_refuses_a_newer_schema_saying_to_upgrade_rlm(
    empty_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    upgrade(empty_url)
    engine = create_engine_for_url(empty_url, pooled=False)
    try:
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = '9f3e2a1b7c6d'"))
    finally:
        engine.dispose()
    assert main(["db", "upgrade", "--url", empty_url]) == 1
    assert "at revision 9f3e2a1b7c6d, newer than this rlm" in capsys.readouterr().err
    with pytest.raises(SchemaMismatchError, match=r"newer than this rlm.*upgrade rlm"):
        upgrade(empty_url, "0005")


def test_the_postgresql_migrations_sql_can_be_printed_without_a_database(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # `alembic upgrade head --sql`: the script a DBA reviews and runs, the backfills included.
    command.upgrade(alembic_config("postgresql+psycopg://rlm@db.invalid/rlm"), "head", sql=True)
    printed = capsys.readouterr().out
    assert "UPDATE rlm_partition SET topic_id" in printed  # 0006's backfill
    assert "INSERT INTO rlm_retired_topic_id" in printed  # 0008's


def test_an_unreachable_database_is_a_retriable_error() -> None:
    with pytest.raises(MetadataUnavailableError) as raised:
        SqlMetadataStore.open("postgresql+psycopg://postgres@127.0.0.1:9/rlm")
    assert raised.value.retriable


def _run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="rlm")
    db_cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


def test_rlm_db_upgrade_and_current(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'cli' / 'metadata.db'}"
    assert _run("db", "current", "--url", url) == 1
    assert "run `rlm db upgrade`" in capsys.readouterr().err
    assert _run("db", "upgrade", "--url", url) == 0
    assert f"is at revision {HEAD}" in capsys.readouterr().out
    monkeypatch.setenv("RLM_METADATA_URL", url)
    assert _run("db", "current") == 0
    assert "up to date" in capsys.readouterr().out
    with SqlMetadataStore.open(url) as store:
        assert store.get_partition(TP) is None


def test_an_unknown_revision_is_refused_naming_the_known_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = tmp_path / "meta.db"
    code = main(["db", "upgrade", "--url", f"sqlite:///{database}", "--revision", "bogus"])
    _, err = capsys.readouterr()
    assert code == 1
    assert err == f"rlm: error: unknown revision 'bogus' (known: 0001…{HEAD}, head)\n"
    assert not database.exists()


def test_commands_that_read_refuse_a_sqlite_file_that_does_not_exist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = tmp_path / "new" / "new.db"
    url = f"sqlite:///{database}"
    missing = f"no metadata database at {database}: run `rlm db upgrade`"
    assert main(["db", "current", "--url", url]) == 1
    assert missing in capsys.readouterr().err
    assert main(["lookup", "orders", "0", "--timestamp", "0", "--metadata-url", url]) == 1
    assert missing in capsys.readouterr().err
    assert not database.parent.exists()
    assert main(["db", "upgrade", "--url", url]) == 0  # creates the file, and its directory
    assert main(["db", "current", "--url", url]) == 0
    assert "up to date" in capsys.readouterr().out
