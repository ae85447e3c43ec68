"""Fixtures shared by the unit tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from rlm.metrics import Metrics


@pytest.fixture
def metrics() -> Metrics:
    """rlm's metrics in a registry of the test's own."""
    return Metrics(CollectorRegistry())


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """An event blocked tasks wait on; always opened at the end so no worker stays stuck."""
    event = threading.Event()
    yield event
    event.set()
