"""Fixtures of the integration tests: databases of either kind, backend pairs and the copier and
retention harness (:mod:`tests.tiering_support`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.clock import FakeClock
from tests.metadata_support import BACKENDS, backend_url
from tests.tiering_support import BACKEND_PAIRS, Backend, Tiering, make_backend


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty, migrated database: a SQLite file, or the session's PostgreSQL database."""
    return backend_url(request.param, request, tmp_path)


@pytest.fixture(params=BACKEND_PAIRS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """Each backend pair in turn, empty."""
    return make_backend(request.param, request, tmp_path)


@pytest.fixture
def tiering_factory() -> Iterator[Callable[..., Tiering]]:
    """Opens :class:`~tests.tiering_support.Tiering` harnesses and closes them after the test."""
    opened: list[Tiering] = []

    def factory(
        backend: Backend, log_dir: Path, clock: FakeClock[int] | None = None, **changes: object
    ) -> Tiering:
        harness = Tiering.open(backend, log_dir, clock, **changes)
        opened.append(harness)
        return harness

    yield factory
    for harness in opened:
        harness.close()
