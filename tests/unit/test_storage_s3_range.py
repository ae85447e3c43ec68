"""The answer to a ranged GET is used only when it provably holds the asked-for bytes."""

from __future__ import annotations

import io

import pytest
from botocore.exceptions import IncompleteReadError

from rlm.errors import StorageError
from rlm.storage.s3_range import ContentRange, parse_content_range, ranged_answer

OBJECT = bytes(range(256)) * 4  # 1024 bytes


def _answer(status: int, content_range: str | None, body: bytes, start: int, length: int) -> bytes:
    return ranged_answer(io.BytesIO(body), status, content_range, start, length, "S3 GetObject 'k'")


@pytest.mark.parametrize(
    ("header", "parsed"),
    [
        ("bytes 0-9/1024", ContentRange(0, 9, 1024)),
        ("bytes 5-5/*", ContentRange(5, 5, None)),
        (" bytes 0-0/0 ", ContentRange(0, 0, 0)),
        ("bytes 9-0/1024", None),
        ("bytes */1024", None),
        ("items 0-9/10", None),
        ("", None),
        (None, None),
    ],
)
def test_content_range_headers(header: str | None, parsed: ContentRange | None) -> None:
    assert parse_content_range(header) == parsed


def test_an_exact_206_is_used_as_it_is() -> None:
    assert _answer(206, "bytes 100-109/1024", OBJECT[100:110], 100, 10) == OBJECT[100:110]
    assert _answer(206, "bytes 1000-1023/1024", OBJECT[1000:], 1000, 50) == OBJECT[1000:]  # the end


def test_a_206_holding_more_than_asked_is_sliced() -> None:
    # s3rver answers "bytes=0-0" with the whole object, saying so in Content-Range.
    assert _answer(206, "bytes 0-1023/1024", OBJECT, 0, 1) == OBJECT[:1]
    assert _answer(206, "bytes 90-199/1024", OBJECT[90:200], 100, 10) == OBJECT[100:110]


def test_a_200_is_the_whole_object_and_gives_the_asked_slice() -> None:
    assert _answer(200, None, OBJECT, 100, 10) == OBJECT[100:110]
    assert _answer(200, None, OBJECT, 1020, 10) == OBJECT[1020:]
    assert _answer(200, None, OBJECT, 2000, 10) == b""


def test_an_empty_object_answers_nothing() -> None:
    assert _answer(206, "bytes 0-0/0", b"", 0, 100) == b""


@pytest.mark.parametrize(
    ("status", "header", "message"),
    [
        (206, "bytes 101-110/1024", r"asked for bytes=100-109, the store answered 206 with Content-Range"),
        (206, "bytes 100-105/1024", r"Content-Range 'bytes 100-105/1024'"),
        (206, None, r"206 without a usable Content-Range \(None\)"),
        (206, "bytes */1024", r"206 without a usable Content-Range"),
        (304, None, r"asked for bytes=100-109, the store answered 304"),
    ],
)
def test_any_other_answer_is_a_clear_error(status: int, header: str | None, message: str) -> None:
    with pytest.raises(StorageError, match=message) as raised:
        _answer(status, header, OBJECT[100:110], 100, 10)
    assert not raised.value.retriable


def test_a_206_body_shorter_than_its_content_range_is_an_incomplete_read() -> None:
    with pytest.raises(IncompleteReadError):
        _answer(206, "bytes 100-109/1024", OBJECT[100:105], 100, 10)
