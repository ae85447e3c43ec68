"""The error line that ends an NDJSON stream whose answer began: its words, and what is logged.

The stream's body ends as a whole body does, so none of the app's error handlers sees the error:
it is reported where the line is made, as those handlers (and gRPC's ``ReadRecords``) report it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest

from api.rest.stream import OCTET, _ndjson, _SlotStream
from rlm.errors import StorageUnavailableError

WHAT = "GET /v1/topics/orders/partitions/0/records"


class _FailingStreams:
    """Record streams whose encoding gives one piece, then fails with ``error``."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def encoded_range(self, plan: object, encode: object, size: int) -> AsyncIterator[bytes]:
        return self._pieces()

    async def _pieces(self) -> AsyncIterator[bytes]:
        yield b'{"offset":0}\n'
        raise self.error


class _Slot:
    def __init__(self) -> None:
        self.outcomes: list[str] = []

    def release(self, outcome: str) -> None:
        self.outcomes.append(outcome)


def ended_with(error: Exception) -> tuple[dict[str, Any], list[str]]:
    slot = _Slot()

    async def lines() -> list[bytes]:
        body = _ndjson(
            cast(Any, None), cast(Any, _FailingStreams(error)), lambda: None, cast(Any, slot), WHAT
        )
        return [piece async for piece in body]

    pieces = asyncio.run(lines())
    assert pieces[0] == b'{"offset":0}\n'
    return json.loads(pieces[-1]), slot.outcomes


def test_an_unexpected_error_is_logged_with_its_traceback_and_its_words_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    last, outcomes = ended_with(KeyError("the server's own words"))
    # As the app answers an unexpected error, and as gRPC ends ReadRecords (INTERNAL).
    assert last == {"error": "internal error: KeyError", "status": 500}
    assert outcomes == ["failed"]
    [record] = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert record.levelno == logging.ERROR and record.exc_info is not None
    assert record.getMessage() == f"{WHAT} failed"


def test_a_failing_store_is_logged_as_a_warning_and_its_words_sent(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    last, _ = ended_with(StorageUnavailableError("GetObject answered 503"))
    assert last == {"error": "GetObject answered 503", "status": 503}
    [record] = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert (record.levelno, record.exc_info) == (logging.WARNING, None)
    assert record.getMessage() == f"{WHAT} failed: GetObject answered 503"


# -- raw and Arrow streams: cut, and counted as failed, when their reads fail ---------------------


def run_slot_stream(body: AsyncIterator[bytes], slot: _Slot, *, send_fails: bool = False) -> list[str]:
    """Send ``body`` as a raw stream holding ``slot``; the kinds of messages sent."""
    sent: list[str] = []

    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()  # the client stays
        raise AssertionError

    async def send(message: Any) -> None:
        if send_fails and message["type"] == "http.response.body":
            raise ConnectionResetError(104, "Connection reset by peer")  # a server whose send raises
        sent.append(message["type"] + (".more" if message.get("more_body") else ""))

    stream = _SlotStream(body, OCTET, {}, cast(Any, slot))
    asyncio.run(stream({"type": "http"}, receive, send))
    return sent


def test_a_read_error_of_a_raw_stream_fails_it_not_taken_for_the_client_leaving() -> None:
    # A local segment the disk cannot read (EIO) raises OSError out of the body: the stream must
    # fail (the server cuts the connection and logs it), not end quietly counted as cancelled.
    async def body() -> AsyncIterator[bytes]:
        yield b"batch"
        raise OSError(5, "Input/output error")

    slot = _Slot()
    with pytest.raises(OSError, match="Input/output error"):
        run_slot_stream(body(), slot)
    assert slot.outcomes == ["failed"]


def test_a_client_that_left_while_a_piece_was_sent_cancels_the_stream() -> None:
    async def body() -> AsyncIterator[bytes]:
        yield b"batch"
        yield b"another"

    slot = _Slot()
    sent = run_slot_stream(body(), slot, send_fails=True)
    assert slot.outcomes == ["cancelled"] and sent == ["http.response.start"]
