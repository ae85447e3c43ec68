"""Errors raised by rlm.

Every error carries ``retriable``: whether the same call may succeed if tried again.

    RlmError
    ├── CorruptDataError            bytes on disk or on the wire are not what the format says
    │   ├── CorruptRecordError      a record batch / message (file, position, reason)
    │   │   └── SegmentNotCopiedError   a rolled segment the copier cannot tier (it stops there)
    │   ├── CorruptIndexError       an .index / .timeindex / .txnindex file
    │   └── CorruptCheckpointError  a checkpoint, partition.metadata or producer snapshot file
    ├── InvalidRecordError          a record we were asked to write breaks a rule (e.g. timestamp)
    ├── OffsetOverflowError         an offset does not fit a segment's 32-bit relative offsets
    ├── NotFoundError               an unknown topic, partition, segment or file
    │   └── OffsetOutOfRangeError   a fetch offset below the log start or above the high watermark
    ├── ConfigError                 a setting is missing or out of range
    │   └── BrokerIdUnknownError    broker.id unset and no log dir has a meta.properties yet (retriable)
    ├── LogDirsOfflineError         none of the broker's log directories can be read (retriable)
    ├── BrokerRunningError          a broker holds the log directory a command would write to
    ├── PartitionUnavailableError   a partition may be in a log directory that cannot be read (retriable)
    ├── StaleReplicaError           a broker's log is a deleted topic's (older than the remote tier's)
    │   └── OlderTopicIdError       its partition.metadata predates the segments it would retire
    ├── InvalidArgumentError        a request's argument is malformed or out of range (also a ValueError)
    ├── InvalidTopicNameError       a topic name breaks Kafka's rule (characters, length, "." or "..")
    ├── InvalidFileNameError        a file is not named the way Kafka names its log files (also a ValueError)
    ├── MetadataError               the remote-segment metadata store refused or failed a call
    │   ├── MetadataUnavailableError     the database cannot be reached or gave up (retriable)
    │   ├── SchemaMismatchError          the database schema is not the revision rlm needs
    │   ├── StaleLeaseError              a write carried a lease that is no longer current
    │   ├── RetiredTopicIdError          a broker named a retired topic id (also a StaleReplicaError)
    │   ├── InvalidStateTransitionError  the state machine forbids going from one state to another
    │   ├── StateConflictError           the row is not in the state the caller expected
    │   ├── InvalidSkipRangeError        a range to skip overlaps tiered data or another skip
    │   └── DuplicateSegmentError        a segment id is already stored with other metadata
    ├── PoolError                   a bounded task pool refused or dropped a task
    │   ├── PoolFullError           the pool's queue holds its maximum of pending tasks (retriable)
    │   ├── PoolClosedError         the pool was closed and takes no more tasks
    │   └── TaskCancelledError      the task was cancelled before it finished (retriable)
    ├── RequestTimedOutError        a request's deadline passed before its answer was ready
    │                               (retriable; Kafka's REQUEST_TIMED_OUT, error code 7)
    └── StorageError                remote storage (S3, filesystem) refused or failed a call
        ├── StorageUnavailableError  throttled, 5xx, timed out or unreachable after retries (retriable)
        ├── InvalidObjectKeyError    an object key that could escape its prefix or root directory
        └── ChecksumMismatchError    the bytes stored or read are not the bytes expected
"""

from __future__ import annotations

from uuid import UUID


class RlmError(Exception):
    """Base of every error rlm raises on purpose."""

    retriable: bool = False


class CorruptDataError(RlmError):
    """Data does not follow its format. Carries where it was found, when known."""

    def __init__(self, reason: str, *, path: str | None = None, position: int | None = None):
        self.reason = reason
        self.path = path
        self.position = position
        super().__init__(self._message())

    def _message(self) -> str:
        where = []
        if self.path is not None:
            where.append(str(self.path))
        if self.position is not None:
            where.append(f"position {self.position}")
        return f"{': '.join([', '.join(where), self.reason]) if where else self.reason}"

    def at(self, path: str | None = None, position: int | None = None) -> CorruptDataError:
        """Return a copy of this error located in ``path`` at ``position`` (when not known yet)."""
        return type(self)(
            self.reason,
            path=self.path if self.path is not None else path,
            position=self.position if self.position is not None else position,
        )


class CorruptRecordError(CorruptDataError):
    """A record batch or legacy message is corrupt (bad CRC, length, magic, varint, codec...)."""


class SegmentNotCopiedError(CorruptRecordError):
    """A rolled segment fails the checks the copier makes before tiering it.

    The partition's copying stops at the segment until it is repaired or its offsets are skipped
    (``rlm copy skip``); the message names the file, the position, the problem and the command.
    """

    def _message(self) -> str:
        return self.reason  # it names the file and the position already

    def at(self, path: str | None = None, position: int | None = None) -> CorruptDataError:
        return self


class CorruptIndexError(CorruptDataError):
    """An offset, time or transaction index is inconsistent with its rules or its log."""


class CorruptCheckpointError(CorruptDataError):
    """A checkpoint file, ``partition.metadata`` or a producer snapshot cannot be parsed."""


class InvalidRecordError(RlmError):
    """A record offered for appending breaks a rule of the log (timestamp, size, ...)."""


class OffsetOverflowError(RlmError):
    """An offset cannot be stored relative to its segment's base offset in 32 bits."""


class NotFoundError(RlmError):
    """An unknown topic, partition, segment or file."""


class OffsetOutOfRangeError(NotFoundError):
    """A fetch asked for an offset below the log start offset or above the high watermark."""


class ConfigError(RlmError):
    """A setting is missing, malformed or out of its allowed range."""


class ClusterMismatchError(ConfigError):
    """The metadata store records another Kafka cluster's remote tier than the broker's log
    directories belong to (see :mod:`rlm.tiering.cluster_guard`)."""


class BrokerIdUnknownError(ConfigError):
    """``broker.id`` is not set and no log directory has a ``meta.properties`` to read it from yet
    (the broker formats its log directories when it first starts)."""

    retriable = True


class LogDirsOfflineError(RlmError):
    """None of the broker's log directories can be read: each is missing, cannot be listed, or
    has a ``meta.properties`` that cannot be read (see :mod:`rlm.log.broker_dirs`). A pass that
    can read one of them goes on with it instead."""

    retriable = True


class BrokerRunningError(RlmError):
    """A broker holds the log directory's ``.lock``: a command that writes the broker's files
    (``rlm log reindex``) refuses to run beside it."""


class PartitionUnavailableError(RlmError):
    """The broker may hold a partition in a log directory that cannot be read (see
    :mod:`rlm.log.broker_dirs`): it is in none of those that can, so its local log is unknown,
    and an answer from the remote tier alone could be wrong (Kafka: ``KAFKA_STORAGE_ERROR``)."""

    retriable = True


class MetadataError(RlmError):
    """The remote-segment metadata store refused or failed an operation."""


class MetadataUnavailableError(MetadataError):
    """The metadata database cannot be reached, timed out, or aborted the transaction.

    Nothing was changed: the transaction was rolled back, so the same call may be retried.
    ``kind`` says how the call failed, one of :data:`METADATA_ERROR_KINDS` (the label of the
    ``rlm_metadata_errors_total`` metric).
    """

    retriable = True

    def __init__(self, message: str, *, kind: str = "unavailable"):
        self.kind = kind
        super().__init__(message)


#: How a metadata call can fail without an answer: ``connect`` (no connection could be opened in
#: time), ``pool_timeout`` (no pooled connection came free in time), ``timeout`` (a statement got no
#: answer in time, or waited too long for a lock), ``disconnect`` (the connection broke during the
#: call), ``unavailable`` (anything else the database refused to do now).
METADATA_ERROR_KINDS = ("connect", "pool_timeout", "timeout", "disconnect", "unavailable")


class SchemaMismatchError(MetadataError):
    """The database schema is missing, older or newer than the revision this rlm needs.

    The message names the command that fixes it (``rlm db upgrade``, or upgrading rlm).
    """


class StaleLeaseError(MetadataError):
    """A write was fenced: its lease is not the partition's current lease.

    The writer lost its lease (it expired and was taken over, or was released; or a database
    failover handed its epoch to another holder too) and must stop writing for that partition.
    """


class StaleReplicaError(RlmError):
    """The broker's log is a stale replica of a deleted topic: its ``partition.metadata`` names an
    id older than the topic the remote tier holds. Nothing of it may be tiered or retired."""


class OlderTopicIdError(StaleReplicaError):
    """The broker wrote ``partition.metadata`` (naming another topic id than the remote tier's)
    before the remote segments adopting its id would retire were first copied: a topic created
    again is created after the deleted one's copies, a stale replica before the live one's."""

    def __init__(self, message: str, *, topic_id: UUID, other: UUID | None, first_copied_ms: int) -> None:
        super().__init__(message)
        self.topic_id = topic_id
        """The id the broker named."""
        self.other = other
        """The id of the segment first copied (None: one copied before ids were recorded)."""
        self.first_copied_ms = first_copied_ms


class RetiredTopicIdError(MetadataError, StaleReplicaError):
    """The broker's ``partition.metadata`` names a topic id whose remote state was retired: the
    topic was deleted and created again under the same name, and this log directory still holds
    a replica of the deleted one (a stray log the broker deletes once it loads the topic's
    metadata). Adopting the id again would retire the live topic's remote segments.
    """

    def __init__(self, message: str, *, topic_id: UUID, successor: UUID, retired_at_ms: int) -> None:
        super().__init__(message)
        self.topic_id = topic_id
        """The id the broker named."""
        self.successor = successor
        """The id adopted when ``topic_id`` was retired."""
        self.retired_at_ms = retired_at_ms


class InvalidStateTransitionError(MetadataError):
    """A state change that the segment or partition state machine does not allow."""

    def __init__(self, current: str, requested: str, *, subject: str | None = None):
        self.current = current
        self.requested = requested
        self.subject = subject
        what = f"{subject}: " if subject else ""
        super().__init__(f"{what}invalid state transition from {current} to {requested}")


class StateConflictError(MetadataError):
    """The row is not in the state the caller expected (another writer got there first)."""


class InvalidSkipRangeError(MetadataError):
    """A range of offsets cannot be recorded as skipped: it overlaps offsets already copied to the
    remote tier (or deleted from it), a copy under way, or a range skipped before."""


class DuplicateSegmentError(MetadataError):
    """A segment with this id is already stored, with different metadata."""


class InvalidArgumentError(RlmError, ValueError):
    """An argument of a request (a partition, a timestamp, a timeout, a setting's new value, the
    size of the request) is malformed or out of range.

    ``name`` says which argument, ``reason`` what was wrong with it, in words. Also a ``ValueError``,
    so that validation libraries (pydantic) report it as a bad value of the field it was found in.
    """

    def __init__(self, name: str, reason: str):
        self.name = name
        self.reason = reason
        super().__init__(f"{name}: {reason}")


class InvalidTopicNameError(RlmError):
    """A topic name breaks Kafka's rule: 1 to 249 characters of ``[a-zA-Z0-9._-]``, not ``.`` or ``..``."""

    def __init__(self, topic: str, reason: str):
        self.topic = topic
        self.reason = reason
        shown = repr(topic) if len(topic) <= 300 else f"{topic[:60]!r}… ({len(topic)} characters)"
        super().__init__(f"invalid topic name {shown}: {reason}")


class InvalidFileNameError(RlmError, ValueError):
    """A file is not named the way Kafka names segment, index and snapshot files (a 20-digit offset).

    Also a ``ValueError``, as the name is a value that does not parse.
    """

    def __init__(self, name: str, why: str):
        self.name = name
        self.why = why
        super().__init__(f"{name!r} is not named the way Kafka names its files: {why}")


class StorageError(RlmError):
    """Remote storage refused or failed an operation.

    ``retriable`` defaults to the class's value; the S3 adapter sets it per error from the
    status code (a denied request is final, a throttled one is not).
    """

    def __init__(self, message: str, *, key: str | None = None, retriable: bool | None = None):
        self.key = key
        if retriable is not None:
            self.retriable = retriable
        super().__init__(message)


class StorageUnavailableError(StorageError):
    """The store throttled the call, answered 5xx, timed out or could not be reached.

    Raised once the adapter's own retries are spent. Operations are idempotent, so the same call
    may be retried later.
    """

    retriable = True


class InvalidObjectKeyError(StorageError):
    """An object key is empty, absolute, has ``.``/``..``/empty parts, backslashes or control characters.

    Such a key could name an object or file outside the store's prefix or root directory.
    """


class ChecksumMismatchError(StorageError):
    """The bytes stored (or read) are not the bytes expected; the object was not kept.

    Retriable when the bytes were damaged on the way (a new upload may succeed); not retriable
    when the source itself differs from the checksum the caller expected.
    """

    retriable = True


class PoolError(RlmError):
    """A bounded task pool (the remote offset reader or remote fetch pool) refused or dropped a task."""


class PoolFullError(PoolError):
    """The pool's queue already holds its maximum of pending tasks; the task was not queued.

    Raised at once instead of waiting for room, so a request thread never blocks on a busy pool.
    The same call may succeed once queued tasks have drained.
    """

    retriable = True


class PoolClosedError(PoolError):
    """The pool was closed and takes no more tasks."""


class TaskCancelledError(PoolError):
    """A pool task was cancelled before it finished: its request's deadline passed or the pool closed.

    Raised by a task's result when the task was cancelled while queued, and by
    ``CancelToken.raise_if_cancelled`` inside a running task. The work was not done, so asking again
    may succeed.
    """

    retriable = True


class RequestTimedOutError(RlmError):
    """A request's deadline passed before its answer was ready.

    A ListOffsets partition in this state answers Kafka's REQUEST_TIMED_OUT (``error_code`` 7);
    the client may retry, possibly with a longer ``timeout_ms``.
    """

    retriable = True
    error_code = 7
