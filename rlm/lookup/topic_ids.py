"""Remote segments answer only for the topic the broker's directory holds now.

A topic deleted and created again under the same name keeps its name but not its id
(``partition.metadata``), and its offsets start from 0 again. Until the copier retires the deleted
topic's remote state (:mod:`rlm.tiering.topic_identity`), or while another sidecar holds the
lease and has not, the metadata store still lists the deleted topic's segments under the name:
lookups, fetches and streams must not answer from them. A segment or a partition record with an
id other than the broker's is another topic's; without an id on either side (older brokers, a
query tier without log directories) nothing tells them apart and the remote tier is used as it is.

A ``partition.metadata`` that cannot be read or parsed leaves nothing to tell the topics apart
by: every read of a partition the store knows (lookups, ListOffsets, fetches, streams) fails with
:class:`UnreadableTopicIdError`, which names the file and what is wrong in it, as Kafka does not
load such a log, rather than answer from segments and offsets that may be a deleted topic's (a
log start offset alone, taken from them, would move the new topic's). A missing file is no error
(older brokers write none). The copier, which must not delete on a guess, reports it as an error
too. The transports answer it as they answer other corrupt data: lookups with
``KAFKA_STORAGE_ERROR`` (REST 503, gRPC ``UNAVAILABLE``), fetches and streams with REST 500 and
gRPC ``DATA_LOSS``; the message is the error's.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from uuid import UUID

from rlm.errors import CorruptDataError, NotFoundError
from rlm.log.byte_source import FileSource
from rlm.log.checkpoints import topic_id_to_uuid
from rlm.log.logdir import PARTITION_METADATA, PartitionDir
from rlm.log.segment import Segment
from rlm.metastore.model import RemoteSegment

log = logging.getLogger("rlm.lookup")


class UnreadableTopicIdError(CorruptDataError):
    """The broker's ``partition.metadata`` of a partition cannot be read or parsed: its remote
    segments cannot be told from those of a deleted topic of the same name."""


def local_topic_id(local: PartitionDir | None) -> UUID | None:
    """The topic id of the broker's directory; None without one (no directory, or no
    ``partition.metadata``: an older broker).

    Raises:
        UnreadableTopicIdError: the file is there but cannot be read or parsed.
    """
    if local is None:
        return None
    try:
        text = local.topic_id()
    except (CorruptDataError, OSError) as exc:
        path = str(local.path / PARTITION_METADATA)
        detail = exc.reason if isinstance(exc, CorruptDataError) else (exc.strerror or str(exc))
        if _reported.get(local.path) != detail:  # once per problem, not once per refused read
            _reported[local.path] = detail
            log.warning("the topic id of %s cannot be read: %s", local.tp, exc)
        raise UnreadableTopicIdError(
            f"the topic id of {local.tp} cannot be read ({detail}): its remote segments cannot be told "
            "from those of a topic deleted under the same name, so the partition is not read until "
            "the file is put right",
            path=path,
        ) from exc
    if _reported and local.path in _reported:
        _reported.pop(local.path, None)
        log.warning("the topic id of %s can be read again", local.tp)
    return None if text is None else _as_uuid(text)


#: The problem last logged for each partition directory whose topic id could not be read, until
#: it can.
_reported: dict[Path, str] = {}


#: The ids of the partitions looked up, parsed once: a remote search asks for its partition's.
_as_uuid = functools.lru_cache(maxsize=4096)(topic_id_to_uuid)


def is_other_topic(topic_id: UUID | None, local_id: UUID | None) -> bool:
    """Whether remote state recorded for ``topic_id`` belongs to another topic than ``local_id``."""
    return topic_id is not None and local_id is not None and topic_id != local_id


def of_local_topic(segment: RemoteSegment | None, local: PartitionDir | None) -> RemoteSegment | None:
    """``segment``, or None when it is another topic's than the broker's directory holds."""
    if segment is None or is_other_topic(segment.topic_id, local_topic_id(local)):
        return None
    return segment


def open_of_topic(
    local: PartitionDir, segment: Segment, topic_id: UUID | None, reader: str, offset: int
) -> FileSource:
    """``segment`` opened, where the broker's directory holds topic ``topic_id`` still (blocking).

    Raises:
        NotFoundError: the directory is another topic's: the one the ``reader`` (``"stream"``,
            ``"fetch"``) reading ``offset`` planned with was deleted and a topic of the same name
            made since, whose files bear the same names.
    """
    source = segment.open()
    found = local_topic_id(local)
    if is_other_topic(found, topic_id):
        source.close()
        raise NotFoundError(
            f"the topic of {local.tp} was deleted under the {reader} at offset {offset}: "
            f"{local.path} now holds topic id {found}, the {reader}'s was {topic_id}"
        )
    return source
