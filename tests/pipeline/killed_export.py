"""``rlm spark export`` killed (SIGKILL, no cleanup) at a chosen point of its commit.

    python -m tests.pipeline.killed_export POINT rlm-spark-export-arguments...

The run joins the test session's JVM (:mod:`tests.pipeline.shared_jvm`) when its environment names
one: every point is in the driver, after the run's Spark work.

The commit runs as it always does (its real moves, :data:`~rlm.pipeline.export.commit.MOVE_THREADS`
at a time); the process dies when it reaches POINT:

- ``before-commit``: the rows are written to staging, the manifest is not;
- ``mid-manifest``: the manifest is written to its temporary name, not renamed to its own;
- ``mid-move``: the manifest is written and half of its files were moved (others may be in
  flight on the other threads);
- ``before-ledger``: every file moved, the ledger not advanced;
- ``before-cleanup``: the ledger advanced, the staging directory and the manifest still there.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Mapping
from typing import Any
from uuid import UUID

from metadata.store import SqlMetadataStore
from rlm.cli import main
from rlm.metastore.model import TopicPartition
from rlm.pipeline.export import job
from rlm.pipeline.export.commit import MANIFEST_SUFFIX, Manifest
from rlm.pipeline.export.files import Files, LocalFiles
from tests.pipeline import shared_jvm

POINTS = ("before-commit", "mid-manifest", "mid-move", "before-ledger", "before-cleanup")


def _die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def _kill_mid_manifest() -> None:
    real_replace = os.replace

    def replace(source: Any, target: Any, *args: Any, **kwargs: Any) -> None:
        if str(target).endswith(MANIFEST_SUFFIX):
            _die()
        real_replace(source, target, *args, **kwargs)

    os.replace = replace  # type: ignore[assignment]


def _kill_mid_move() -> None:
    real_write_manifest, real_rename = job.write_manifest, LocalFiles.rename  # type: ignore[attr-defined]
    lock = threading.Lock()
    state = {"files": 0, "moved": 0}

    def write_manifest(files: Files, output: str, manifest: Manifest) -> None:
        state["files"] = len(manifest.files)
        real_write_manifest(files, output, manifest)

    def rename(self: LocalFiles, source: str, target: str) -> None:
        real_rename(self, source, target)
        with lock:
            state["moved"] += 1
            if state["moved"] * 2 >= state["files"]:
                _die()

    job.write_manifest = write_manifest  # type: ignore[attr-defined]
    LocalFiles.rename = rename  # type: ignore[method-assign]


def _kill_at_ledger(*, after: bool) -> None:
    real_record = SqlMetadataStore.record_export_offsets

    def record(
        self: SqlMetadataStore,
        output: str,
        offsets: Mapping[TopicPartition, int],
        topic_ids: Mapping[TopicPartition, UUID | None] | None = None,
        lineages: Mapping[TopicPartition, int | None] | None = None,
    ) -> dict[TopicPartition, int]:
        if after:
            real_record(self, output, offsets, topic_ids, lineages)
        _die()
        return {}

    SqlMetadataStore.record_export_offsets = record  # type: ignore[method-assign]


def main_killed(point: str, argv: list[str]) -> int:
    if point == "before-commit":
        job.write_manifest = lambda *args, **kwargs: _die()  # type: ignore[attr-defined]
    elif point == "mid-manifest":
        _kill_mid_manifest()
    elif point == "mid-move":
        _kill_mid_move()
    elif point in ("before-ledger", "before-cleanup"):
        _kill_at_ledger(after=point == "before-cleanup")
    else:
        raise SystemExit(f"unknown point {point!r}; one of {', '.join(POINTS)}")
    if shared_jvm.joins():
        shared_jvm.join()
    return main(["spark", "export", *argv])


if __name__ == "__main__":
    sys.exit(main_killed(sys.argv[1], sys.argv[2:]))
