"""``rlm db ...``: the metadata database schema (``upgrade``, ``current``).

The database is ``--url``, else the ``metadata.url`` setting (``RLM_METADATA_URL``, the file
``RLM_METADATA_URL_FILE`` names, or the settings file ``RLM_CONFIG`` names), else the embedded
SQLite default ``rlm serve`` uses too. The database is reached through the composition root
(:mod:`rlm.bootstrap`), which alone under ``rlm/`` imports ``metadata``.
"""

from __future__ import annotations

import argparse
import sys

from rlm.errors import SchemaMismatchError

URL_ENV = "RLM_METADATA_URL"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``db`` command group."""
    parser = sub.add_parser("db", help="create and migrate the metadata database")
    commands = parser.add_subparsers(dest="db_command", required=True, metavar="DB_COMMAND")

    upgrade = commands.add_parser(
        "upgrade", help="apply the schema migrations (creates the schema on an empty database)"
    )
    _add_url(upgrade)
    upgrade.add_argument(
        "--revision", default="head", help="migrate up to this revision (default: the newest)"
    )
    upgrade.set_defaults(func=_upgrade)

    current = commands.add_parser(
        "current", help="print the database's schema revision and the one this rlm needs"
    )
    _add_url(current)
    current.set_defaults(func=_current)


def _add_url(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        help=f"database URL, e.g. postgresql+psycopg://rlm@db:5432/rlm or sqlite:///rlm.db "
        f"(default: the metadata.url setting: ${URL_ENV}, ${URL_ENV}_FILE or $RLM_CONFIG's file; "
        "else the embedded SQLite file)",
    )


def _url(args: argparse.Namespace) -> str:
    from rlm.config import load_settings

    given: str | None = args.url
    return given or load_settings().metadata_url


def _upgrade(args: argparse.Namespace) -> int:
    from rlm.bootstrap import upgrade_metadata

    print(upgrade_metadata(_url(args), args.revision))
    return 0


def _current(args: argparse.Namespace) -> int:
    from rlm.bootstrap import check_metadata

    try:
        print(check_metadata(_url(args)))
    except SchemaMismatchError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0
