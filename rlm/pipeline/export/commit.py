"""Staging then commit: how a Parquet export's files become visible, each exactly once.

A run writes its files under ``<output>/_rlm_staging/<run id>/`` (readers skip directories whose
name starts with ``_``: Spark, pyarrow, pandas; DuckDB reads ``<output>/topic=*/partition=*/date=*/
*.parquet``). When every file is written (and, on a local disk, ``fsync``-ed with the directories
holding it) the driver writes the run's manifest, the commit journal,
``_rlm_staging/<run id>.commit.json``: to ``.<run id>.commit.json.tmp``, ``fsync``, renamed,
the directory ``fsync``-ed. That rename is the commit point. The manifest names the files and
where the next incremental run starts in each partition, with the topic id each offset is one
of (the partition's when the run planned it: a topic deleted and created again since is another
topic, whose ledger such an offset must not move, see :mod:`metadata.exports`) and the
partition's lineage then (copies replaced since hold the offset back). Then the files
are moved into the output's ``topic=…/partition=…/date=…`` directories, all at once
(:data:`MOVE_THREADS` renames in flight: on an object store a rename is a copy, and the moves are
what readers could see half done). A move is a rename: a reader sees a file whole or not at all.
Once every move is made (and durable) the ledger is advanced, then the staging directory and the
manifest are deleted.

Every run first settles what earlier runs left (:func:`settle`), before it plans anything: a
staging directory without a manifest is a run that died before its commit point, and is deleted
with any half-written manifest (its rows were never visible); a manifest is a committed run
whose moves or ledger update did not all happen, and is rolled forward: exactly the files it
names are moved (those moved already are skipped; one an object store copied but did not delete
yet is not copied twice), then the ledger is advanced to its offsets. So a killed run leaves no
partial rows visible until its commit point; after it, rows may be partly visible until the next
run of the output completes the commit, and none is ever written twice nor lost. One run per
output at a time: a run holds the output's lock (:meth:`~rlm.pipeline.export.files.Files.exclusive`)
throughout, or a second run would discard the first one's staging as a dead run's.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from uuid import UUID

from rlm.errors import CorruptDataError
from rlm.metastore.model import TopicPartition
from rlm.pipeline.export.files import Files, join

STAGING_DIR = "_rlm_staging"
MANIFEST_SUFFIX = ".commit.json"
#: Renames a commit runs at once.
MOVE_THREADS = 16

Advance = Callable[["Manifest"], None]
"""Advances the ledger of the output to a committed run's offsets (see
:func:`rlm.pipeline.export.job.record_offsets`)."""


@dataclass(frozen=True)
class Manifest:
    """What a committed run wrote and where the next run starts."""

    run_id: str
    files: tuple[str, ...]
    """Data files, relative to the run's staging directory (and then to the output)."""
    next_offsets: dict[TopicPartition, int]
    topic_ids: dict[TopicPartition, UUID | None] = field(default_factory=dict)
    """The topic id each offset is one of; ``None``: the partition had none when planned."""
    named: bool = True
    """Whether the manifest records ids (not one written before they were)."""
    lineages: dict[TopicPartition, int] = field(default_factory=dict)
    """The lineage each partition had when planned (absent: 0, a manifest written before
    lineages were; see :mod:`metadata.exports`)."""

    @property
    def recorded_ids(self) -> Mapping[TopicPartition, UUID | None] | None:
        """The topic ids to record the offsets under; ``None``: unknown (see :attr:`named`)."""
        return self.topic_ids if self.named else None

    def to_json(self) -> str:
        return json.dumps(
            {
                "run_id": self.run_id,
                "files": list(self.files),
                "next_offsets": [
                    {
                        "topic": tp.topic,
                        "partition": tp.partition,
                        "next_offset": offset,
                        "topic_id": _id_text(self.topic_ids.get(tp)),
                        "lineage": self.lineages.get(tp, 0),
                    }
                    for tp, offset in sorted(self.next_offsets.items())
                ],
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str, path: str) -> Manifest:
        """Raises CorruptDataError naming ``path`` when the manifest is not one rlm wrote."""
        try:
            doc = json.loads(text)
            offsets: dict[TopicPartition, int] = {}
            topic_ids: dict[TopicPartition, UUID | None] = {}
            lineages: dict[TopicPartition, int] = {}
            named = True
            for e in doc["next_offsets"]:
                tp = TopicPartition(str(e["topic"]), int(e["partition"]))
                offsets[tp] = int(e["next_offset"])
                named = named and "topic_id" in e
                topic_ids[tp] = None if e.get("topic_id") is None else UUID(str(e["topic_id"]))
                lineages[tp] = int(e.get("lineage", 0))
            files = tuple(str(f) for f in doc["files"])
            return cls(str(doc["run_id"]), files, offsets, topic_ids if named else {}, named, lineages)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CorruptDataError(f"the export manifest is not valid: {exc}", path=path) from exc


def _id_text(topic_id: UUID | None) -> str | None:
    return None if topic_id is None else str(topic_id)


def new_run_id() -> str:
    """A run id that sorts by nothing and collides with no other run's."""
    return uuid.uuid4().hex


def staging_dir(output: str, run_id: str) -> str:
    """Where a run writes its files."""
    return join(output, f"{STAGING_DIR}/{run_id}")


def manifest_path(output: str, run_id: str) -> str:
    return join(output, f"{STAGING_DIR}/{run_id}{MANIFEST_SUFFIX}")


def data_files(files: Files, directory: str) -> list[str]:
    """The Parquet files a writer left under ``directory`` (not its markers nor checksums)."""
    return [
        f
        for f in files.list_files(directory)
        if f.endswith(".parquet") and not any(part.startswith((".", "_")) for part in f.split("/"))
    ]


def directories_of(root: str, names: Sequence[str]) -> list[str]:
    """``root`` and every directory between it and the files ``names`` (relative to it)."""
    found = {root.rstrip("/")}
    for name in names:
        parts = name.split("/")[:-1]
        found.update(join(root, "/".join(parts[:depth])) for depth in range(1, len(parts) + 1))
    return sorted(found)


def write_manifest(files: Files, output: str, manifest: Manifest) -> None:
    """The commit point: after this the run's rows will be visible, whatever happens.

    The staged files' directories are made durable first (the executors made the files' bytes
    durable), so a manifest that survives a crash of the machine never names a file that did not.
    """
    files.sync_dirs(directories_of(staging_dir(output, manifest.run_id), manifest.files))
    files.write_text(manifest_path(output, manifest.run_id), manifest.to_json())


def finish(files: Files, output: str, manifest: Manifest, advance: Advance) -> int:
    """Move a committed run's files into the output, advance the ledger, clean up; idempotent.

    The files are moved concurrently (:data:`MOVE_THREADS` at a time); each parent directory is
    made once, before any file moves.

    Returns:
        How many files were moved now (fewer than the manifest's when a previous try moved some).

    Raises:
        CorruptDataError: A file the manifest names is neither staged nor in the output (something
            else deleted it); the message names it.
    """
    staged = staging_dir(output, manifest.run_id)

    def move(name: str) -> bool:
        source, target = join(staged, name), join(output, name)
        if files.exists(source):
            if files.exists(target):
                # On an object store a rename is a copy then a delete, and a copy appears whole:
                # a move killed between the two left the file in the output already. Names are
                # the run's own, so the output's file is this one.
                files.delete(source)
                return False
            files.rename(source, target)
            return True
        if not files.exists(target):
            raise CorruptDataError(
                f"export run {manifest.run_id}: {name} is neither staged nor in the output", path=staged
            )
        return False

    moved = 0
    if manifest.files:
        files.make_dirs(sorted({join(output, name).rpartition("/")[0] for name in manifest.files}))
        with ThreadPoolExecutor(min(MOVE_THREADS, len(manifest.files)), "rlm-export-commit") as pool:
            moved = sum(pool.map(move, manifest.files))
    # The moves must outlive a crash of the machine before the ledger says they happened.
    files.sync_dirs(directories_of(output, manifest.files))
    advance(manifest)
    files.delete(staged)
    files.delete(manifest_path(output, manifest.run_id))
    return moved


@dataclass(frozen=True)
class Settled:
    """What :func:`settle` found of earlier runs."""

    discarded: tuple[str, ...] = ()
    """Runs that died before their commit point: their staged files were deleted."""
    completed: tuple[str, ...] = ()
    """Committed runs whose commit this finished."""


def settle(files: Files, output: str, advance: Advance, *, keep: Sequence[str] = ()) -> Settled:
    """Finish the commits of earlier committed runs, and delete what uncommitted ones staged
    (runs in ``keep`` excepted)."""
    root = join(output, STAGING_DIR)
    children = files.list_children(root)
    committed = sorted(c[: -len(MANIFEST_SUFFIX)] for c in children if c.endswith(MANIFEST_SUFFIX))
    completed = []
    for run_id in committed:
        path = manifest_path(output, run_id)
        finish(files, output, Manifest.from_json(files.read_text(path), path), advance)
        completed.append(run_id)
    discarded = []
    for name in files.list_children(root):
        if name in keep or name.endswith(MANIFEST_SUFFIX):
            continue
        files.delete(join(root, name))
        if not name.startswith("."):
            # Names starting with "." are manifests a dead run was writing (or a file system's
            # checksums): deleted, and no run of their own.
            discarded.append(name)
    return Settled(tuple(discarded), tuple(completed))
