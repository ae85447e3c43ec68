"""Staging then commit, without Spark: on a local directory through :class:`LocalFiles`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from uuid import UUID

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
        self.topic_ids: dict[TopicPartition, UUID | None] = {}
        self.lineages: dict[TopicPartition, int] = {}

    def advance(self, manifest: Manifest) -> None:
        self.offsets.update(manifest.next_offsets)
        self.topic_ids.update(manifest.recorded_ids or {})
        self.lineages.update(manifest.lineages)


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
    staged = tuple(data_files(files, staging_dir(str(out), "committed")))
    manifest = Manifest("committed", staged, {TP: 42}, {TP: None}, lineages={TP: 3})
    assert manifest.files == FILES  # markers and checksums are not data
    write_manifest(files, str(out), manifest)
    # Half moved when the run died.
    files.rename(staging_dir(str(out), "committed") + "/" + FILES[0], f"{out}/{FILES[0]}")
    assert _visible(out) == [FILES[0]] and ledger.offsets == {}
    settled = settle(files, str(out), ledger.advance)
    assert settled.discarded == ("dead",) and settled.completed == ("committed",)
    assert _visible(out) == sorted(FILES)
    # Read back from the manifest: the offset, its topic id and the lineage it was planned at.
    assert (ledger.offsets, ledger.topic_ids, ledger.lineages) == ({TP: 42}, {TP: None}, {TP: 3})
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


class RecordingFiles(LocalFiles):
    """Local files, with the order of the steps a commit's safety rests on."""

    def __init__(self, steps: list[str]) -> None:
        self.steps = steps

    def rename(self, source: str, target: str) -> None:
        super().rename(source, target)
        self.steps.append(f"rename {target.rpartition('/')[2]}")

    def write_text(self, path: str, text: str) -> None:
        super().write_text(path, text)
        self.steps.append(f"write {path.rpartition('/')[2]}")

    def sync_dirs(self, directories: Sequence[str]) -> None:
        super().sync_dirs(directories)
        self.steps.append("sync " + " ".join(sorted(d.rpartition("/")[2] for d in directories)))


def test_what_a_commit_names_is_durable_before_the_next_step_relies_on_it(tmp_path: Path) -> None:
    steps: list[str] = []
    files, out = RecordingFiles(steps), tmp_path / "out"
    _stage(out, "run")
    manifest = Manifest("run", FILES, {TP: 7})
    write_manifest(files, str(out), manifest)
    # The staged files' directories (down from the run's), then the journal.
    assert steps == [
        "sync date=2026-11-26 date=2026-11-27 partition=0 run topic=orders",
        "write run.commit.json",
    ]
    steps.clear()
    finish(files, str(out), manifest, lambda m: steps.append(f"advance {dict(m.next_offsets)}"))
    assert sorted(steps[:2]) == ["rename part-0.parquet", "rename part-1.parquet"]
    # Every move durable (the output's directories down to the files'), then the ledger.
    assert steps[2:] == [
        "sync date=2026-11-26 date=2026-11-27 out partition=0 topic=orders",
        f"advance { ({TP: 7}) }",
    ]
    assert _visible(out) == sorted(FILES)


class RefusingFiles(LocalFiles):
    """Renames that refuse an existing target, as Hadoop's file systems do."""

    def rename(self, source: str, target: str) -> None:
        if Path(target).exists():
            raise OSError(f"could not move {source} to {target}: it exists")
        super().rename(source, target)


def test_a_move_an_object_store_copied_and_did_not_delete_is_not_made_twice(tmp_path: Path) -> None:
    files, ledger, out = RefusingFiles(), Ledger(), tmp_path / "out"
    _stage(out, "run")
    manifest = Manifest("run", FILES, {TP: 3})
    write_manifest(files, str(out), manifest)
    # Killed between an object store rename's copy and its delete: the file is in both places.
    copied = out / FILES[0]
    copied.parent.mkdir(parents=True)
    copied.write_bytes((Path(staging_dir(str(out), "run")) / FILES[0]).read_bytes())
    settled = settle(files, str(out), ledger.advance)
    assert settled.completed == ("run",) and ledger.offsets == {TP: 3}
    assert _visible(out) == sorted(FILES)
    assert [(out / name).read_bytes() for name in FILES] == [name.encode() for name in FILES]
    assert not (out / "_rlm_staging").exists() or not list((out / "_rlm_staging").iterdir())


def test_a_manifest_killed_before_its_rename_is_no_commit(tmp_path: Path) -> None:
    files, ledger, out = LocalFiles(), Ledger(), tmp_path / "out"
    _stage(out, "dead")
    temporary = Path(manifest_path(str(out), "dead"))
    temporary = temporary.with_name(f".{temporary.name}.tmp")
    temporary.write_text(Manifest("dead", FILES, {TP: 9}).to_json())
    settled = settle(files, str(out), ledger.advance)
    assert (settled.discarded, settled.completed) == (("dead",), ())
    assert ledger.offsets == {} and _visible(out) == []
    assert list((out / "_rlm_staging").iterdir()) == []


def test_one_run_holds_a_local_output_at_a_time_and_a_killed_one_lets_go(tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    with LocalFiles().exclusive(out) as first, LocalFiles().exclusive(out) as second:
        assert (first, second) == (True, False)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from rlm.pipeline.export.files import LocalFiles\n"
            "with LocalFiles().exclusive(sys.argv[1]) as held:\n"
            "    print(held, flush=True)\n"
            "    time.sleep(600)\n",
            out,
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "True"
        with LocalFiles().exclusive(out) as held:
            assert not held
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    with LocalFiles().exclusive(out) as held:
        assert held  # the kernel let go of the killed holder's lock
