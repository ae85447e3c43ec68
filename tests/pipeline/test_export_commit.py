"""Staging then commit, without Spark: on a local directory through :class:`LocalFiles`."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from rlm.errors import CorruptDataError
from rlm.metastore.model import TopicPartition
from rlm.pipeline.export.commit import (
    Manifest,
    data_files,
    finish,
    manifest_path,
    settle,
    staging_dir,
    write_manifest,
)
from rlm.pipeline.export.files import LocalFiles

TP = TopicPartition("orders", 0)
FILES = (
    "topic=orders/partition=0/date=2026-11-26/part-0.parquet",
    "topic=orders/partition=0/date=2026-11-27/part-1.parquet",
)


class Ledger:
    def __init__(self) -> None:
        self.offsets: dict[TopicPartition, int] = {}

    def advance(self, offsets: Mapping[TopicPartition, int]) -> None:
        self.offsets.update(offsets)


def _stage(output: Path, run_id: str) -> None:
    staged = Path(staging_dir(str(output), run_id))
    for name in FILES:
        (staged / name).parent.mkdir(parents=True, exist_ok=True)
        (staged / name).write_bytes(name.encode())
    (staged / "_SUCCESS").write_bytes(b"")
    (staged / FILES[0]).with_name(".part-0.parquet.crc").write_bytes(b"")


def _visible(output: Path) -> list[str]:
    return sorted(str(p.relative_to(output)) for p in output.glob("topic=*/**/*.parquet"))


def test_an_uncommitted_run_is_discarded_and_a_committed_one_finished(tmp_path: Path) -> None:
    files, ledger, out = LocalFiles(), Ledger(), tmp_path / "out"
    _stage(out, "dead")
    _stage(out, "committed")
    manifest = Manifest("committed", tuple(data_files(files, staging_dir(str(out), "committed"))), {TP: 42})
    assert manifest.files == FILES  # markers and checksums are not data
    write_manifest(files, str(out), manifest)
    # Half moved when the run died.
    files.rename(staging_dir(str(out), "committed") + "/" + FILES[0], f"{out}/{FILES[0]}")
    assert _visible(out) == [FILES[0]] and ledger.offsets == {}
    settled = settle(files, str(out), ledger.advance)
    assert settled.discarded == ("dead",) and settled.completed == ("committed",)
    assert _visible(out) == sorted(FILES)
    assert ledger.offsets == {TP: 42}
    assert list((out / "_rlm_staging").iterdir()) == []
    assert settle(files, str(out), ledger.advance).completed == ()  # nothing left to do


def test_a_manifest_naming_a_lost_file_is_an_error_naming_it(tmp_path: Path) -> None:
    files, out = LocalFiles(), tmp_path / "out"
    _stage(out, "run")
    manifest = Manifest("run", (*FILES, "topic=orders/partition=0/date=x/lost.parquet"), {TP: 1})
    with pytest.raises(CorruptDataError, match="lost.parquet is neither staged nor in the output"):
        finish(files, str(out), manifest, Ledger().advance)
    (Path(manifest_path(str(out), "run"))).write_text("{not json")
    with pytest.raises(CorruptDataError, match=r"run\.commit\.json: the export manifest is not valid"):
        settle(files, str(out), Ledger().advance)
