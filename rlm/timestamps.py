"""Timestamps as users write them: epoch milliseconds, ISO-8601, or Kafka's special values."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from enum import IntEnum

from rlm.arguments import parse_int, shown
from rlm.errors import InvalidArgumentError


class SpecialTimestamp(IntEnum):
    """ListOffsets' special timestamps."""

    LATEST = -1
    EARLIEST = -2
    MAX_TIMESTAMP = -3
    EARLIEST_LOCAL = -4
    LATEST_TIERED = -5


#: The lowest special timestamp (LATEST_TIERED): anything lower is no timestamp.
LOWEST_SPECIAL = min(SpecialTimestamp)

SPECIAL_NAMES = {
    "latest": SpecialTimestamp.LATEST,
    "earliest": SpecialTimestamp.EARLIEST,
    "max-timestamp": SpecialTimestamp.MAX_TIMESTAMP,
    "earliest-local": SpecialTimestamp.EARLIEST_LOCAL,
    "latest-tiered": SpecialTimestamp.LATEST_TIERED,
}


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: The fraction of the seconds of an ISO-8601 time (the first fraction in the text: a date has none).
_FRACTION = re.compile(r"(?<=\d)[.,](\d+)")
#: A time whose zone offset's '+' arrived as a space (unencoded in a URL query).
_SPACED_OFFSET = re.compile(r"\d \d\d(:?\d\d)?$")
#: The seconds of a leap second (23:59:60), which ISO-8601 allows and epoch time has no room for.
_LEAP_SECOND = re.compile(r"[Tt ]\d\d:?\d\d:?60(?![0-9])")

#: The longest timestamp argument read (ISO-8601 with a zone and microseconds has 32 characters).
MAX_TIMESTAMP_CHARS = 64


class InvalidTimestampError(InvalidArgumentError):
    """A timestamp argument that is neither milliseconds, ISO-8601 nor a special name."""


def parse_timestamp(text: str, name: str = "timestamp") -> int:
    """Parse ``1700000000000``, ``2023-11-14T22:13:20Z``, ``-3`` or ``max-timestamp``, strictly:
    nothing around the value, ASCII only, milliseconds within int64 (:mod:`rlm.arguments`).

    Returns epoch milliseconds (≥ 0) or a :class:`SpecialTimestamp` value (-1 to -5).
    ISO-8601 without a zone is taken as UTC. A time finer than a millisecond is rounded up: record
    timestamps are whole milliseconds, so the first record at or after it is the first at or after
    the next millisecond (rounding down would answer a record from before the time asked for).

    Raises:
        InvalidTimestampError: ``text`` is none of those; the message says why, naming ``name``.
    """
    if len(text) > MAX_TIMESTAMP_CHARS:
        raise InvalidTimestampError(name, f"{shown(text)} is longer than {MAX_TIMESTAMP_CHARS} characters")
    if not text.isascii():
        raise InvalidTimestampError(name, f"{shown(text)} holds characters other than ASCII")
    special = SPECIAL_NAMES.get(text.lower())
    if special is not None:
        return int(special)
    if (text[1:] if text.startswith("-") else text).isdigit():
        try:
            number = parse_int(text, name)
        except InvalidArgumentError as exc:
            raise InvalidTimestampError(name, exc.reason) from None
        if number < LOWEST_SPECIAL:
            raise InvalidTimestampError(
                name, f"{number} is invalid: use milliseconds ≥ 0 or a special value -1 to -5"
            )
        return number
    if text != text.strip():
        raise InvalidTimestampError(name, f"{shown(text)} has spaces around the value")
    try:
        # RFC 3339 allows a lower-case "z" (and "t", which datetime takes already).
        parsed = datetime.fromisoformat(text[:-1] + "+00:00" if text[-1:] in ("Z", "z") else text)
    except ValueError:
        if _SPACED_OFFSET.search(text):
            raise InvalidTimestampError(
                name,
                f"{shown(text)} has a space where its zone offset's '+' belongs: a '+' in a URL "
                "query means a space, write it %2B (or give the time in UTC, with Z)",
            ) from None
        if _LEAP_SECOND.search(text):
            raise InvalidTimestampError(
                name,
                f"{shown(text)} is a leap second, which epoch milliseconds cannot name: "
                "write :59.999 or the next minute's :00",
            ) from None
        raise InvalidTimestampError(
            name,
            f"{shown(text)} is not epoch milliseconds, ISO-8601, or one of {', '.join(SPECIAL_NAMES)}",
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    # Exactly, in integers: a float of the seconds since 1970 has no room for every microsecond.
    micros = (parsed - EPOCH) // timedelta(microseconds=1)
    fraction = _FRACTION.search(text)
    # datetime keeps six digits of a fraction and drops the rest: any of those left that is not 0
    # puts the time after the microsecond kept.
    beyond_micros = fraction is not None and fraction.group(1)[6:].strip("0") != ""
    if micros < 0:
        raise InvalidTimestampError(name, f"{shown(text)} is before 1970")
    if beyond_micros:
        return micros // 1000 + 1
    return -(-micros // 1000)
