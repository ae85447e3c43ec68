"""Fixtures of the metadata store contract suite: every test runs on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from metadata.store import SqlMetadataStore
from tests.clock import FakeClock
from tests.metadata_support import (
    BACKENDS,
    backend_url,
    create_postgres_database,
    drop_postgres_database,
    open_store,
)


@pytest.fixture
def clock() -> FakeClock[int]:
    """The clock the store reads lease expiry from."""
    return FakeClock()


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty, migrated database: a SQLite file, or the session's PostgreSQL database."""
    return backend_url(request.param, request, tmp_path)


@pytest.fixture(params=BACKENDS)
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database of its own with no schema at all (migrations run on it), dropped after the test."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.db'}"
        return
    url = create_postgres_database()
    try:
        yield url
    finally:
        drop_postgres_database(url)


@pytest.fixture
def store(database_url: str, clock: FakeClock[int]) -> Iterator[SqlMetadataStore]:
    """A store over ``database_url`` that lists segments 3 at a time (to cross page ends)."""
    with open_store(database_url, clock, list_page_size=3) as opened:
        yield opened
