"""A put to the filesystem store killed while it wrote its object's metadata (the sidecar, put
first, by a temporary file of its own) is an unfinished put of that key: abort_incomplete_puts
removes it, and nothing of another key."""

from __future__ import annotations

import uuid
from pathlib import Path

from rlm.storage.filesystem import META_SUFFIX, TMP_SUFFIX, FilesystemStorage


def _killed_while_writing_metadata(storage: FilesystemStorage, key: str) -> Path:
    """The temporary file a put of ``key`` with metadata leaves when killed writing its sidecar."""
    target = storage.root / key
    target.parent.mkdir(parents=True, exist_ok=True)
    leftover = target.parent / f".{target.name}{META_SUFFIX}.{uuid.uuid4().hex}{TMP_SUFFIX}"
    leftover.write_text('{"rlm-segment": "x"}', encoding="utf-8")
    return leftover


def test_the_unfinished_put_of_an_objects_metadata_is_removed_with_the_objects(tmp_path: Path) -> None:
    storage = FilesystemStorage(tmp_path / "remote")
    storage.put_object("p/kept.indexes", b"index bytes", metadata={"rlm-segment": "kept"})
    aborted = _killed_while_writing_metadata(storage, "p/seg.indexes")
    other = _killed_while_writing_metadata(storage, "p/kept.indexes")
    assert list(storage.list_keys()) == ["p/kept.indexes"]  # a leftover is no object

    storage.abort_incomplete_puts(["p/seg.indexes"])

    assert not aborted.exists()
    assert other.exists()  # another key's unfinished put is left to its own abort
    assert storage.object_metadata("p/kept.indexes") == {"rlm-segment": "kept"}
    storage.abort_incomplete_puts(["p/kept.indexes"])
    assert sorted(storage.root.rglob(f"*{TMP_SUFFIX}")) == []
    assert storage.read_range("p/kept.indexes", 0, 100) == b"index bytes"  # objects are not touched
    assert storage.object_metadata("p/kept.indexes") == {"rlm-segment": "kept"}
