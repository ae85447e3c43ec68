"""Integers in requests, parsed strictly and in one place for every API (REST, gRPC, the CLI).

A number written as text (a path or query parameter, a timestamp) is an optional ``-`` and ASCII
digits, nothing else: no ``+``, no spaces, no ``_``, no digits of other scripts (``int()`` takes
all of those), and no more digits than an int64 has (``int()`` of thousands of digits is slow, and
past 4300 it fails with a message about Python's limits). A number given as a value (JSON,
protobuf) is an integer, not a boolean (JSON's ``true`` is not 1), a float or a string. Either
way it must lie in the range its argument allows. Every refusal is an
:class:`~rlm.errors.InvalidArgumentError` naming the argument and saying what was wrong.
"""

from __future__ import annotations

from rlm.errors import InvalidArgumentError

INT32_MAX = 2**31 - 1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
#: Digits of the longest int64 (``-9223372036854775808`` has 19).
MAX_DIGITS = 19
#: Characters of a refused value quoted back in a message.
SHOWN_CHARS = 24


def parse_int(text: str, name: str, low: int = INT64_MIN, high: int = INT64_MAX) -> int:
    """The integer ``text`` writes, which must lie in ``[low, high]``.

    Raises:
        InvalidArgumentError: ``text`` is not an optional ``-`` followed by ASCII digits, or the
            number is out of range.
    """
    digits = text[1:] if text.startswith("-") else text
    if not (digits.isascii() and digits.isdigit()):
        raise InvalidArgumentError(
            name, f"{shown(text)} is not an integer (ASCII digits, optionally after '-')"
        )
    significant = digits.lstrip("0")
    if len(significant) > MAX_DIGITS:
        raise InvalidArgumentError(
            name, f"a number of {len(digits)} digits is out of range: it must be from {low} to {high}"
        )
    # The digits after the leading zeros only: int() refuses a text of more than 4300 digits,
    # zeros included, in words about Python's limits.
    value = int(significant or "0")
    return check_range(-value if text.startswith("-") else value, name, low, high)


def check_int(value: object, name: str, low: int = INT64_MIN, high: int = INT64_MAX) -> int:
    """``value`` when it is an integer (not a boolean, float or string) in ``[low, high]``.

    Raises:
        InvalidArgumentError: it is not, saying what it is instead.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(name, f"{_kind(value)} is not an integer")
    return check_range(value, name, low, high)


def check_range(value: int, name: str, low: int, high: int) -> int:
    """``value`` when ``low <= value <= high``.

    Raises:
        InvalidArgumentError: it is out of range; the message gives the range.
    """
    if not low <= value <= high:
        number = str(value) if value.bit_length() <= 64 else f"a number of {value.bit_length()} bits"
        raise InvalidArgumentError(name, f"must be from {low} to {high}, not {number}")
    return value


def shown(text: str) -> str:
    """``text`` quoted for a message, cut short when long."""
    if len(text) <= SHOWN_CHARS:
        return repr(text)
    return f"{text[:SHOWN_CHARS]!r}… ({len(text)} characters)"


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        return f"the string {shown(value)}"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return f"a value of type {type(value).__name__}"
