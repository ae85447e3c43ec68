"""Hadoop's ``FileSystem`` on Spark's driver, as :class:`rlm.pipeline.export.files.Files`.

Through it an export's commit works on every file system Spark writes to (local paths, ``s3a://``
where the cluster has hadoop-aws, HDFS), with the cluster's own settings and credentials.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from pyspark.sql import SparkSession


class HadoopFiles:
    """File operations through the session's Hadoop configuration."""

    def __init__(self, session: SparkSession) -> None:
        context = session.sparkContext
        self._jvm: Any = context._jvm
        self._conf: Any = context._jsc.hadoopConfiguration()

    def _fs(self, path: str) -> tuple[Any, Any]:
        jpath = self._jvm.org.apache.hadoop.fs.Path(path)
        return jpath.getFileSystem(self._conf), jpath

    def list_files(self, directory: str) -> list[str]:
        fs, root = self._fs(directory)
        if not fs.exists(root):
            return []
        prefix = fs.makeQualified(root).toUri().getPath().rstrip("/") + "/"
        found = []
        files = fs.listFiles(root, True)
        while files.hasNext():
            path = files.next().getPath().toUri().getPath()
            found.append(path[len(prefix) :] if path.startswith(prefix) else path)
        return sorted(found)

    def list_children(self, directory: str) -> list[str]:
        fs, root = self._fs(directory)
        if not fs.exists(root):
            return []
        return sorted(status.getPath().getName() for status in fs.listStatus(root))

    def exists(self, path: str) -> bool:
        fs, jpath = self._fs(path)
        return bool(fs.exists(jpath))

    def make_dirs(self, directories: Sequence[str]) -> None:
        for directory in directories:
            fs, path = self._fs(directory)
            fs.mkdirs(path)

    def rename(self, source: str, target: str) -> None:
        fs, src = self._fs(source)
        _, dst = self._fs(target)
        if not fs.rename(src, dst) and not (fs.mkdirs(dst.getParent()) and fs.rename(src, dst)):
            raise OSError(f"could not move {source} to {target}")

    def write_text(self, path: str, text: str) -> None:
        fs, final = self._fs(path)
        temporary = self._jvm.org.apache.hadoop.fs.Path(final.getParent(), f".{final.getName()}.tmp")
        stream = fs.create(temporary, True)
        try:
            stream.write(bytearray(text.encode("utf-8")))
            if stream.hasCapability("hsync"):
                stream.hsync()
        finally:
            stream.close()
        if fs.exists(final):
            fs.delete(final, False)
        if not fs.rename(temporary, final):
            raise OSError(f"could not write {path}")

    def read_text(self, path: str) -> str:
        fs, jpath = self._fs(path)
        stream = fs.open(jpath)
        try:
            data = self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream)
        finally:
            stream.close()
        return bytes(data).decode("utf-8")

    def delete(self, path: str) -> None:
        fs, jpath = self._fs(path)
        if fs.exists(jpath):
            fs.delete(jpath, True)

    def sync_dirs(self, directories: Sequence[str]) -> None:
        """Nothing: HDFS and the object stores persist a rename or a delete when it returns (a
        local path is written with :class:`rlm.pipeline.export.files.LocalFiles`)."""

    @contextmanager
    def exclusive(self, directory: str) -> Iterator[bool]:
        """Always held: Hadoop's file systems have no lock a killed run would let go of. One run
        per output at a time is the scheduler's to ensure (a local output is locked, see
        :class:`rlm.pipeline.export.files.LocalFiles`)."""
        yield True
