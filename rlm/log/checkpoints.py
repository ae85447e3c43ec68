"""Text files of a log directory: offset checkpoints, ``leader-epoch-checkpoint``,
``partition.metadata`` and ``meta.properties``.

Checkpoints (``CheckpointFile``) are UTF-8 text, one ``\\n``-terminated line each::

    <version>       0
    <count>         number of entry lines that follow
    <entry>...      "topic partition offset" (offset checkpoints) or "epoch startOffset"

Reading follows Kafka: a missing or empty file has no entries, so has a file holding only the
version line; entries are split on runs of whitespace; a wrong version, a line that does not parse
or a count that does not match the entries is an error. Writes are atomic (``<name>.tmp``, fsync,
rename, fsync of the directory).

``partition.metadata`` is exactly ``version: 0\\ntopic_id: <id>`` with no trailing newline, where
the id is Kafka's ``Uuid.toString()``: the 16 UUID bytes in URL-safe base64 without padding.
"""

from __future__ import annotations

import base64
import os
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import NamedTuple, TypeVar

from rlm.errors import CorruptCheckpointError
from rlm.log.files import StrPath, atomic_write

T = TypeVar("T")

CHECKPOINT_VERSION = 0
PARTITION_METADATA_VERSION = 0

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
META_PROPERTIES = "meta.properties"

_INT = re.compile(r"[+-]?[0-9]+")
# Java's \s: the separators Kafka's formatters split on.
_JAVA_SPACE = re.compile(r"[ \t\n\x0b\f\r]+")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
_TOPIC_ID = re.compile(r"[A-Za-z0-9_-]{22}")

ZERO_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"
_RESERVED_UUIDS = (uuid.UUID(int=0), uuid.UUID(int=1))


class EpochEntry(NamedTuple):
    """A leader epoch and the first offset written in it."""

    epoch: int
    start_offset: int


def _java_lines(text: str) -> list[str]:
    """Lines as ``BufferedReader.readLine`` returns them (a final terminator ends no line)."""
    lines = _LINE_BREAK.split(text)
    if lines[-1] == "":
        lines.pop()
    return lines


def _java_split(line: str) -> list[str]:
    """``Pattern.compile("\\\\s+").split(line)``: trailing empty strings are dropped."""
    parts = _JAVA_SPACE.split(line)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def _parse_int(text: str, bits: int) -> int:
    """``Integer.parseInt`` / ``Long.parseLong``: decimal, optional sign, no spaces."""
    if _INT.fullmatch(text) is None:
        raise ValueError(f"{text!r} is not a decimal integer")
    value = int(text)
    if not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
        raise ValueError(f"{text!r} does not fit an int{bits}")
    return value


def _read_text(path: StrPath, encoding: str = "utf-8") -> str | None:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise CorruptCheckpointError(f"not {encoding} text: {exc}", path=os.fspath(path)) from exc


def _read_checkpoint(path: StrPath, parse: Callable[[list[str]], T]) -> list[T]:
    return _parse_checkpoint(_read_text(path), os.fspath(path), parse)


def _parse_checkpoint(text: str | None, location: str | None, parse: Callable[[list[str]], T]) -> list[T]:
    lines = _java_lines(text) if text else []

    def corrupt(lineno: int, reason: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"line {lineno}: {reason}", path=location)

    if not lines:
        return []
    try:
        version = _parse_int(lines[0], 32)
    except ValueError as exc:
        raise corrupt(1, f"malformed version {lines[0]!r}") from exc
    if version != CHECKPOINT_VERSION:
        raise corrupt(1, f"unrecognised version {version}, expected {CHECKPOINT_VERSION}")
    if len(lines) < 2:
        return []
    try:
        count = _parse_int(lines[1], 32)
    except ValueError as exc:
        raise corrupt(2, f"malformed entry count {lines[1]!r}") from exc
    entries = []
    for lineno, line in enumerate(lines[2:], start=3):
        try:
            entries.append(parse(_java_split(line)))
        except ValueError as exc:
            raise corrupt(lineno, f"malformed entry {line!r}: {exc}") from exc
    if len(entries) != count:
        raise corrupt(2, f"expected {count} entries but found {len(entries)}")
    return entries


def _encode_checkpoint(lines: list[str]) -> bytes:
    body = "".join(f"{line}\n" for line in lines)
    return f"{CHECKPOINT_VERSION}\n{len(lines)}\n{body}".encode()


def _write_checkpoint(path: StrPath, lines: list[str]) -> None:
    atomic_write(path, _encode_checkpoint(lines))


def _parse_offset_entry(parts: list[str]) -> tuple[tuple[str, int], int]:
    if len(parts) != 3:
        raise ValueError(f"expected 'topic partition offset', got {len(parts)} fields")
    return (parts[0], _parse_int(parts[1], 32)), _parse_int(parts[2], 64)


def read_offset_checkpoint(path: StrPath) -> dict[tuple[str, int], int]:
    """Read a per-partition offset checkpoint (recovery point, log start, replication, cleaner).

    Returns ``{(topic, partition): offset}``; a missing or empty file gives ``{}``. When a
    partition appears twice the later line wins, as in Kafka.

    Raises:
        CorruptCheckpointError: naming the file and the line.
    """
    return dict(_read_checkpoint(path, _parse_offset_entry))


def write_offset_checkpoint(path: StrPath, entries: Mapping[tuple[str, int], int]) -> None:
    """Atomically write ``{(topic, partition): offset}`` as a version-0 checkpoint.

    Raises:
        ValueError: an illegal topic name, or a partition or offset out of range.
    """
    lines = []
    for (topic, partition), offset in entries.items():
        if _LEGAL_TOPIC.fullmatch(topic) is None:
            raise ValueError(f"illegal topic name {topic!r}")
        if not 0 <= partition < 2**31 or not -(2**63) <= offset < 2**63:
            raise ValueError(f"partition {partition} or offset {offset} is out of range")
        lines.append(f"{topic} {partition} {offset}")
    _write_checkpoint(path, lines)


def _parse_epoch_entry(parts: list[str]) -> EpochEntry:
    if len(parts) != 2:
        raise ValueError(f"expected 'epoch startOffset', got {len(parts)} fields")
    return EpochEntry(_parse_int(parts[0], 32), _parse_int(parts[1], 64))


def read_leader_epoch_checkpoint(path: StrPath) -> list[EpochEntry]:
    """Read ``leader-epoch-checkpoint`` in file order; a missing or empty file gives ``[]``.

    Raises:
        CorruptCheckpointError: naming the file and the line.
    """
    return _read_checkpoint(path, _parse_epoch_entry)


def decode_leader_epoch_checkpoint(data: bytes, *, path: StrPath | None = None) -> list[EpochEntry]:
    """The entries of a leader-epoch checkpoint's bytes (a remote segment keeps them in its index
    object); empty bytes give ``[]``.

    Raises:
        CorruptCheckpointError: not UTF-8, or a malformed line; it names ``path`` when given.
    """
    location = None if path is None else os.fspath(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptCheckpointError(f"not utf-8 text: {exc}", path=location) from exc
    return _parse_checkpoint(text, location, _parse_epoch_entry)


def encode_leader_epoch_checkpoint(entries: Iterable[EpochEntry]) -> bytes:
    """The bytes of a leader-epoch checkpoint holding ``entries`` (ascending epoch and offset).

    Raises:
        ValueError: an epoch or offset out of range.
    """
    lines = []
    for epoch, start_offset in entries:
        if not 0 <= epoch < 2**31 or not 0 <= start_offset < 2**63:
            raise ValueError(f"epoch {epoch} or start offset {start_offset} is out of range")
        lines.append(f"{epoch} {start_offset}")
    return _encode_checkpoint(lines)


def write_leader_epoch_checkpoint(path: StrPath, entries: Iterable[EpochEntry]) -> None:
    """Atomically write epoch entries (ascending epoch and start offset) as a checkpoint.

    Raises:
        ValueError: an epoch or offset out of range.
    """
    atomic_write(path, encode_leader_epoch_checkpoint(entries))


def epoch_for_offset(entries: Iterable[tuple[int, int]], offset: int) -> int:
    """The leader epoch ``offset`` was written in, or -1 when it is before the first entry
    (``entries``: ``(epoch, start offset)`` pairs in offset order).

    Follows ``LeaderEpochFileCache.epochForOffset``: the epoch of the last entry starting at or
    before ``offset``.
    """
    previous = -1
    for epoch, start_offset in entries:
        if start_offset == offset:
            return epoch
        if start_offset > offset:
            return previous
        previous = epoch
    return previous


def uuid_to_topic_id(value: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString()``: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def topic_id_to_uuid(topic_id: str) -> uuid.UUID:
    """Kafka's ``Uuid.fromString``: 22 URL-safe base64 characters (optionally ``==`` padded).

    Raises:
        ValueError: the string does not encode exactly 16 bytes.
    """
    text = topic_id[:-2] if len(topic_id) == 24 and topic_id.endswith("==") else topic_id
    if _TOPIC_ID.fullmatch(text) is None:
        raise ValueError(f"{topic_id!r} is not a base64 topic id")
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))


def new_topic_id() -> str:
    """A random topic id as ``Uuid.randomUuid()`` makes them: never 0, 1, or starting with '-'."""
    while True:
        candidate = uuid.uuid4()
        text = uuid_to_topic_id(candidate)
        if candidate not in _RESERVED_UUIDS and not text.startswith("-"):
            return text


def _metadata_value(line: str | None, key: str) -> str:
    # PartitionMetadataReadBuffer: split at the first ":" followed by whitespace.
    parts = [] if line is None else re.split(r":[ \t\n\x0b\f\r]+", line, maxsplit=1)
    if len(parts) != 2 or parts[0] != key:
        raise ValueError(f"malformed line {line!r}")
    return parts[1]


def read_partition_metadata(path: StrPath) -> str | None:
    """The topic id in ``partition.metadata`` (canonical form), or None when the file is missing.

    Like Kafka any version >= 0 is accepted, for downgrades.

    Raises:
        CorruptCheckpointError: a malformed line, a negative version, a malformed or zero id.
    """
    text = _read_text(path)
    if text is None:
        return None
    lines = _java_lines(text)
    location = os.fspath(path)
    try:
        version = _parse_int(_metadata_value(lines[0] if lines else None, "version"), 32)
    except ValueError as exc:
        raise CorruptCheckpointError(f"line 1: {exc}", path=location) from exc
    if version < PARTITION_METADATA_VERSION:
        raise CorruptCheckpointError(f"line 1: unrecognised version {version}", path=location)
    try:
        topic_id = topic_id_to_uuid(_metadata_value(lines[1] if len(lines) > 1 else None, "topic_id"))
    except ValueError as exc:
        raise CorruptCheckpointError(f"line 2: {exc}", path=location) from exc
    if topic_id.int == 0:
        raise CorruptCheckpointError("line 2: the topic id is the zero UUID", path=location)
    return uuid_to_topic_id(topic_id)


def write_partition_metadata(path: StrPath, topic_id: str) -> None:
    """Atomically write ``version: 0\\ntopic_id: <id>`` (no trailing newline).

    Raises:
        ValueError: a malformed or zero topic id.
    """
    value = topic_id_to_uuid(topic_id)
    if value.int == 0:
        raise ValueError("the zero UUID is not a topic id")
    text = f"version: {PARTITION_METADATA_VERSION}\ntopic_id: {uuid_to_topic_id(value)}"
    atomic_write(path, text.encode("ascii"))


# meta.properties is read the way java.util.Properties.load reads an InputStream (ISO-8859-1,
# "#"/"!" comments, "=", ":" or whitespace separators, backslash escapes and continuations).
_PROP_SPACE = " \t\f"
_UNESCAPE = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    natural = _java_lines(text)
    i = 0
    while i < len(natural):
        lineno, line = i + 1, natural[i].lstrip(_PROP_SPACE)
        i += 1
        if not line or line[0] in "#!":
            continue
        while (len(line) - len(line.rstrip("\\"))) % 2 == 1:
            line = line[:-1]
            if i == len(natural):
                break
            line += natural[i].lstrip(_PROP_SPACE)
            i += 1
        yield lineno, line


def _unescape(text: str, lineno: int, location: str) -> str:
    if "\\" not in text:  # the common case (and read as latin-1, the text holds no surrogate)
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c != "\\" or i + 1 == len(text):
            out.append(c)
            i += 1
            continue
        c = text[i + 1]
        if c == "u":
            digits = text[i + 2 : i + 6]
            if re.fullmatch(r"[0-9a-fA-F]{4}", digits) is None:
                raise CorruptCheckpointError(f"line {lineno}: malformed \\uxxxx escape", path=location)
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_UNESCAPE.get(c, c))
            i += 2
    result = "".join(out)
    if any("\ud800" <= ch <= "\udfff" for ch in result):  # join UTF-16 surrogate pairs
        result = result.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return result


def read_meta_properties(path: StrPath) -> dict[str, str]:
    """Read a log directory's ``meta.properties`` (Java properties) into a dict.

    Raises:
        FileNotFoundError: the log directory has no ``meta.properties``.
        CorruptCheckpointError: a malformed ``\\uxxxx`` escape.
    """
    text = _read_text(path, "latin-1")
    if text is None:
        raise FileNotFoundError(os.fspath(path))
    location = os.fspath(path)
    props: dict[str, str] = {}
    for lineno, line in _logical_lines(text):
        end, n = 0, len(line)
        while end < n and line[end] not in "=:" + _PROP_SPACE:
            end += 2 if line[end] == "\\" else 1
        end = min(end, n)
        start, has_sep = end, False
        while start < n and (line[start] in _PROP_SPACE or (not has_sep and line[start] in "=:")):
            has_sep = has_sep or line[start] in "=:"
            start += 1
        key = _unescape(line[:end], lineno, location)
        props[key] = _unescape(line[start:], lineno, location)
    return props


def _escape(text: str, *, is_key: bool) -> str:
    out = []
    for i, c in enumerate(text):
        if c == " ":
            out.append("\\ " if is_key or i == 0 else " ")
        elif c in "\t\n\r\f":
            out.append("\\" + {"\t": "t", "\n": "n", "\r": "r", "\f": "f"}[c])
        elif c in "\\=:#!":
            out.append("\\" + c)
        elif " " < c <= "~":
            out.append(c)
        else:
            units = c.encode("utf-16-be", "surrogatepass")
            out.extend(f"\\u{units[j]:02X}{units[j + 1]:02X}" for j in range(0, len(units), 2))
    return "".join(out)


def write_meta_properties(path: StrPath, props: Mapping[str, str]) -> None:
    """Atomically write ``props`` as Java properties, keys sorted, escaped like ``store``."""
    lines = [f"{_escape(k, is_key=True)}={_escape(v, is_key=False)}\n" for k, v in sorted(props.items())]
    atomic_write(path, "".join(lines).encode("ascii"))
