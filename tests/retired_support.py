"""Copies retired on the remote tier (:mod:`rlm.storage.marks`), for the tests of the copier
retiring them: what their marks say, a store that refuses the marks, and a metadata store rebuilt
from the objects."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from metadata.store import SqlMetadataStore
from rlm.errors import StorageUnavailableError
from rlm.metastore.model import TopicPartition
from rlm.pipeline.rebuild.job import RebuildOptions, RebuildReport, rebuild
from rlm.pipeline.stage import run_in_process
from rlm.pipeline.storage import StorageSpec
from rlm.storage.delegate import DelegatingStorage
from rlm.storage.description import RETIRED_KEY, Retirement, read_retired
from rlm.storage.protocol import PutResult, PutSource
from rlm.tiering.leases import LeaseKeeper
from tests.metadata_support import sqlite_copy
from tests.pipeline.tiers import AWS_ENV
from tests.tiering_support import Tiering


def retirements(tiering: Tiering, tp: TopicPartition) -> dict[int, Retirement | None]:
    """Per finished copy of ``tp``, by start offset: what its index object's retired mark says."""
    marks = {
        s.start_offset: tiering.storage.object_metadata(s.layout.index_key) for s in tiering.finished(tp)
    }
    return {start: None if m is None else read_retired(m) for start, m in marks.items()}


class FailingMarks(DelegatingStorage):
    """Refuses to store an object marked retired."""

    def put_object(self, key: str, source: PutSource, **kwargs: Any) -> PutResult:
        if RETIRED_KEY in (kwargs.get("metadata") or {}):
            raise StorageUnavailableError("throttled", key=key)
        return self.inner.put_object(key, source, **kwargs)


class SlowMarks(DelegatingStorage):
    """``tiering``'s storage, where each mark takes 40 s of a 60 s lease and another broker tries
    to take the lease of ``tp`` after each (``refused``: whether it was refused)."""

    def __init__(self, tiering: Tiering, tp: TopicPartition) -> None:
        super().__init__(tiering.storage)
        self.clock, self.tp = tiering.clock, tp
        ttl_ms = tiering.settings.remote_log_manager_lease_ttl_ms
        self.other = LeaseKeeper(tiering.store, tiering.settings.broker_id + 1, ttl_ms)
        self.refused: list[bool] = []

    def put_object(self, key: str, source: PutSource, **kwargs: Any) -> PutResult:
        result = self.inner.put_object(key, source, **kwargs)
        if RETIRED_KEY in (kwargs.get("metadata") or {}):
            self.clock.advance(40_000)
            self.refused.append(self.other.hold(self.tp) is None)
        return result


def rebuilt_from_objects(
    tiering: Tiering,
    tiering_factory: Callable[..., Tiering],
    log_dir: Path,
    sqlite_template: Path,
    directory: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    delete_orphans: bool = False,
) -> tuple[Tiering, RebuildReport]:
    """``rlm spark rebuild-metadata`` of ``tiering``'s objects into a new SQLite store in
    ``directory``, and a harness on it sharing ``tiering``'s storage backend and clock."""
    for name, value in AWS_ENV.items():  # what the rebuild's own S3 clients read (moto takes any)
        monkeypatch.setenv(name, value)
    directory.mkdir()
    url = sqlite_copy(sqlite_template, directory)
    with SqlMetadataStore.open(url) as store:
        spec = StorageSpec.from_settings(tiering.settings)
        options = RebuildOptions(delete_orphans=delete_orphans)
        report = rebuild(store, tiering.storage, spec, run_in_process, options)
    backend = dataclasses.replace(tiering.backend, metadata_url=url)
    return tiering_factory(backend, log_dir, clock=tiering.clock), report
