"""Fixtures shared by the unit tests."""

from __future__ import annotations

import threading
import types
from collections.abc import Iterator

import cramjam
import kafka.codec
import pytest
from prometheus_client import CollectorRegistry

from rlm.log import codecs
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


def _xxh32_digest(data: bytes) -> bytes:
    return codecs._xxh32(bytes(data)).to_bytes(4, "big")


@pytest.fixture
def kafka_python_codecs(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """kafka.codec, given snappy and xxhash back-ends when those packages are not installed.

    python-snappy's compress/decompress are cramjam's raw snappy, so that is the stand-in; the
    xxhash stand-in (used only by kafka-python's magic-0 LZ4 functions) is XXH32, whose value on
    Kafka's header is pinned against the reference library by ``test_codecs.py``'s
    ``KAFKA_LZ4_HEADER_MAGIC0``.
    """
    if kafka.codec.snappy is None:
        snappy = types.SimpleNamespace(
            compress=lambda data: bytes(cramjam.snappy.compress_raw(data)),
            decompress=lambda data: bytes(cramjam.snappy.decompress_raw(data)),
        )
        monkeypatch.setattr(kafka.codec, "snappy", snappy)
    if kafka.codec.xxhash is None:
        xxhash = types.SimpleNamespace(
            xxh32=lambda data: types.SimpleNamespace(digest=lambda: _xxh32_digest(data))
        )
        monkeypatch.setattr(kafka.codec, "xxhash", xxhash)
    module: types.ModuleType = kafka.codec
    return module
