"""Fixtures of the metadata store integration tests: SQLite files and the PostgreSQL server."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.metadata_support import (
    BACKENDS,
    backend_url,
    postgres_url,  # noqa: F401  (fixture)
    sqlite_template,  # noqa: F401  (fixture)
)


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty, migrated database: a SQLite file, or the session's PostgreSQL database."""
    return backend_url(request.param, request, tmp_path)
