"""Reading remote objects as rlm's inputs: a ``.log`` object as a byte source, one index file."""

from __future__ import annotations

from rlm.errors import CorruptDataError, CorruptIndexError, NotFoundError
from rlm.metastore.model import IndexType, ObjectLayout
from rlm.storage.protocol import RemoteStorage


class RangeSource:
    """A :class:`rlm.log.byte_source.ByteSource` over one remote object, read with ranged reads.

    Lets :func:`rlm.log.byte_source.iter_headers` walk a remote ``.log`` reading headers only: each
    window it asks for is one ranged GET.

    The source is ``size`` bytes long: a read within them that the store answers with fewer bytes
    (the object is shorter than its metadata row says) is a :class:`~rlm.errors.CorruptDataError`,
    not the end of the log, which a scan would take for its last batch and stop at, silently.
    """

    def __init__(self, storage: RemoteStorage, key: str, size: int | None = None) -> None:
        """Open ``key`` of ``storage``.

        Args:
            storage: Where the object is.
            key: The object.
            size: The object's size when known (the metadata row records it); otherwise it is
                asked of the store.

        Raises:
            NotFoundError: ``size`` was not given and no object is stored under ``key``.
        """
        if size is None:
            size = storage.object_size(key)
            if size is None:
                raise NotFoundError(f"no object {key!r} in remote storage")
        self._storage = storage
        self._key = key
        self._size = size

    @property
    def name(self) -> str:
        return self._key

    @property
    def size(self) -> int:
        return self._size

    def read(self, position: int, length: int) -> bytes:
        """Up to ``length`` bytes at ``position``; fewer only past ``size``.

        Raises:
            CorruptDataError: The object ends before ``size``.
        """
        length = max(0, min(length, self._size - position))
        if length == 0:
            return b""
        data = self._storage.read_range(self._key, position, length)
        if len(data) != length:
            raise CorruptDataError(
                f"{len(data)} of {length} bytes read: the object is shorter than the {self._size} "
                "bytes expected",
                path=self._key,
                position=position,
            )
        return data


def read_index(storage: RemoteStorage, layout: ObjectLayout, kind: IndexType) -> bytes | None:
    """Fetch one index file of a remote segment with one ranged read.

    Returns:
        The file's bytes; ``None`` when the segment has no such file.

    Raises:
        NotFoundError: The index object is missing.
        CorruptIndexError: The index object is shorter than the layout says.
    """
    found = layout.index_range(kind)
    if found is None:
        return None
    if found.size == 0:
        return b""
    data = storage.read_range(layout.index_key, found.position, found.size)
    if len(data) != found.size:
        raise CorruptIndexError(
            f"{kind.value} index should be {found.size} bytes at {found.position}, got {len(data)}",
            path=layout.index_key,
            position=found.position,
        )
    return data
