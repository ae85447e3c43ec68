"""Timestamps as users write them: epoch milliseconds, ISO-8601, or Kafka's special values."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import IntEnum

from rlm.errors import InvalidRecordError


class SpecialTimestamp(IntEnum):
    """ListOffsets' special timestamps."""

    LATEST = -1
    EARLIEST = -2
    MAX_TIMESTAMP = -3
    EARLIEST_LOCAL = -4
    LATEST_TIERED = -5


SPECIAL_NAMES = {
    "latest": SpecialTimestamp.LATEST,
    "earliest": SpecialTimestamp.EARLIEST,
    "max-timestamp": SpecialTimestamp.MAX_TIMESTAMP,
    "earliest-local": SpecialTimestamp.EARLIEST_LOCAL,
    "latest-tiered": SpecialTimestamp.LATEST_TIERED,
}


class InvalidTimestampError(InvalidRecordError):
    """A timestamp argument that is neither milliseconds, ISO-8601 nor a special name."""


def parse_timestamp(text: str) -> int:
    """Parse ``1700000000000``, ``2023-11-14T22:13:20Z``, ``-3`` or ``max-timestamp``.

    Returns epoch milliseconds (≥ 0) or a :class:`SpecialTimestamp` value (-1 to -5).
    ISO-8601 without a zone is taken as UTC.
    """
    value = text.strip()
    special = SPECIAL_NAMES.get(value.lower())
    if special is not None:
        return int(special)
    try:
        number = int(value)
    except ValueError:
        pass
    else:
        if number < min(SpecialTimestamp):
            raise InvalidTimestampError(
                f"timestamp {number} is invalid: use milliseconds ≥ 0 or a special value -1 to -5"
            )
        return number
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise InvalidTimestampError(
            f"timestamp {text!r} is not epoch milliseconds, ISO-8601, or one of {', '.join(SPECIAL_NAMES)}"
        ) from exc
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    millis = int(parsed.timestamp() * 1000)
    if millis < 0:
        raise InvalidTimestampError(f"timestamp {text!r} is before 1970")
    return millis
