"""The file operations an export's commit needs, on whatever file system holds the output.

A Parquet export's output is any path Spark writes: a local directory, ``s3a://`` and the rest of
Hadoop's file systems. The commit (:mod:`rlm.pipeline.export.commit`) only lists, renames, writes
a small manifest and deletes, through :class:`Files`: Hadoop's ``FileSystem`` on Spark's driver
(:class:`rlm.pipeline.spark.files.HadoopFiles`), or :class:`LocalFiles` for a local directory.
Paths are strings; ``join`` puts a ``/`` between a directory and a relative path.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Protocol
from urllib.parse import urlparse

from rlm.log.files import fsync_dir

#: The file a run locks in its output (readers skip names starting with ``_``).
LOCK_NAME = "_rlm_export.lock"


def join(directory: str, relative: str) -> str:
    """``directory/relative``."""
    return f"{directory.rstrip('/')}/{relative.lstrip('/')}"


class Files(Protocol):
    """File operations on the output's file system."""

    def list_files(self, directory: str) -> list[str]:
        """Paths relative to ``directory`` of every file under it, recursively; empty when it
        does not exist."""
        ...

    def list_children(self, directory: str) -> list[str]:
        """Names of the files and directories right under ``directory``; empty when it does not exist."""
        ...

    def exists(self, path: str) -> bool: ...

    def make_dirs(self, directories: Sequence[str]) -> None:
        """Create ``directories`` and their parents (those that exist are left as they are)."""
        ...

    def rename(self, source: str, target: str) -> None:
        """Move a file, creating the target's parent directories when they are missing (cheaper
        when :meth:`make_dirs` made them). Safe to call from several threads."""
        ...

    def write_text(self, path: str, text: str) -> None:
        """Write a small file so that it appears whole or not at all, and durably: once this
        returns, a crash of the machine leaves it whole (its name starts with ``.`` while it is
        written)."""
        ...

    def read_text(self, path: str) -> str: ...

    def delete(self, path: str) -> None:
        """Delete a file or a directory with everything under it; nothing when it is absent."""
        ...

    def sync_dirs(self, directories: Sequence[str]) -> None:
        """Make the files created, renamed or deleted in ``directories`` survive a crash of the
        machine, not only of the process (``fsync`` of each; nothing for those missing, nor on
        file systems whose renames are durable when they return)."""
        ...

    def exclusive(self, directory: str) -> AbstractContextManager[bool]:
        """Held while a run works on the output ``directory``: yields whether this run holds it
        (False at once when another run does; nothing waits). A run that dies lets go of it."""
        ...


class LocalFiles:
    """:class:`Files` on this machine's file system (paths or ``file:`` URIs)."""

    @staticmethod
    def _path(path: str) -> Path:
        parsed = urlparse(path)
        return Path(parsed.path if parsed.scheme == "file" else path)

    def list_files(self, directory: str) -> list[str]:
        root = self._path(directory)
        if not root.is_dir():
            return []
        return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())

    def list_children(self, directory: str) -> list[str]:
        root = self._path(directory)
        return sorted(p.name for p in root.iterdir()) if root.is_dir() else []

    def exists(self, path: str) -> bool:
        return self._path(path).exists()

    def make_dirs(self, directories: Sequence[str]) -> None:
        for directory in directories:
            self._path(directory).mkdir(parents=True, exist_ok=True)

    def rename(self, source: str, target: str) -> None:
        destination = self._path(target)
        destination.parent.mkdir(parents=True, exist_ok=True)
        os.replace(self._path(source), destination)

    def write_text(self, path: str, text: str) -> None:
        final = self._path(path)
        final.parent.mkdir(parents=True, exist_ok=True)
        temporary = final.with_name(f".{final.name}.tmp")
        with temporary.open("w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, final)
        fsync_dir(final.parent)

    def read_text(self, path: str) -> str:
        return self._path(path).read_text(encoding="utf-8")

    def delete(self, path: str) -> None:
        target = self._path(path)
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()

    def sync_dirs(self, directories: Sequence[str]) -> None:
        for directory in directories:
            path = self._path(directory)
            if path.is_dir():
                fsync_dir(path)

    @contextmanager
    def exclusive(self, directory: str) -> Iterator[bool]:
        """An ``flock`` of :data:`LOCK_NAME` in the output: the kernel lets go of it when the
        process holding it dies, so a killed run never leaves the output locked."""
        root = self._path(directory)
        root.mkdir(parents=True, exist_ok=True)
        with (root / LOCK_NAME).open("a") as handle:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
