"""The streams' idle calls (RecordStreams.when_idle): run once the last stream of a burst has
ended and no other began for idle_after_s; not while a stream is sent, not between two streams
that follow each other closely, not before the first stream."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, cast

from rlm.stream.service import RecordStreams

IDLE_AFTER_S = 0.05
#: Several times IDLE_AFTER_S: long enough for a call that is due to have been made.
PAST_IT_S = 0.3


def streams() -> RecordStreams:
    # The idle calls need neither the lookups nor the stores: placeholders stand for them.
    nothing = cast(Any, None)
    return RecordStreams(nothing, nothing, nothing, idle_after_s=IDLE_AFTER_S)


def test_the_idle_call_runs_after_a_burst_not_during_it() -> None:
    calls: list[str] = []
    made = threading.Event()

    def call() -> None:
        calls.append(threading.current_thread().name)
        made.set()

    async def main(s: RecordStreams) -> None:
        s.when_idle(call)
        await asyncio.sleep(PAST_IT_S)
        assert calls == []  # no stream yet: nothing to give back
        first, second = s.slot(), s.slot()
        assert first is not None and second is not None
        first.release("completed")
        await asyncio.sleep(PAST_IT_S)
        assert calls == []  # one stream still sent
        second.release("cancelled")
        assert await asyncio.to_thread(made.wait, 10)
        await asyncio.sleep(PAST_IT_S)
        assert len(calls) == 1  # once a burst
        assert calls[0].startswith("rlm-stream-io")  # on the streams' executor, off the loop

    s = streams()
    try:
        asyncio.run(main(s))
    finally:
        s.close()


def test_a_stream_that_begins_before_idle_after_s_puts_the_call_off() -> None:
    calls: list[int] = []
    made = threading.Event()

    def call() -> None:
        calls.append(1)
        made.set()

    async def main(s: RecordStreams) -> None:
        s.when_idle(call)
        one = s.slot()
        assert one is not None
        one.release("completed")
        following = s.slot()  # at once: the same burst
        assert following is not None
        await asyncio.sleep(PAST_IT_S)
        assert calls == []
        following.release("failed")
        assert await asyncio.to_thread(made.wait, 10)
        assert calls == [1]

    s = streams()
    try:
        asyncio.run(main(s))
    finally:
        s.close()


def test_a_failing_idle_call_is_logged_and_the_next_burst_calls_again(caplog: Any) -> None:
    tries: list[int] = []
    second = threading.Event()

    def call() -> None:
        tries.append(1)
        if len(tries) == 2:
            second.set()
        raise OSError("trim failed")

    async def main(s: RecordStreams) -> None:
        s.when_idle(call)
        for _ in range(2):
            slot = s.slot()
            assert slot is not None
            slot.release("completed")
            await asyncio.sleep(PAST_IT_S)
        assert await asyncio.to_thread(second.wait, 10)

    s = streams()
    try:
        asyncio.run(main(s))
    finally:
        s.close()
    assert len(tries) == 2
    assert "a call on the streams' executor failed" in caplog.text


class Reads:
    """Ends reads as a stream's do (through the streams' meter), as sizes."""

    def __init__(self, s: RecordStreams) -> None:
        self.meter = s._meter

    def end(self, *sizes: int) -> None:
        for size in sizes:
            self.meter.read_started()
            self.meter.read_ended(size)


def test_the_read_call_is_made_where_the_read_ends_each_time_so_many_more_bytes_are_read() -> None:
    calls: list[str] = []
    s = streams()
    try:
        reads = Reads(s)
        reads.end(400, 500)  # before the call is registered: not counted
        s.when_read(1000, lambda: calls.append(threading.current_thread().name))
        reads.end(400, 500)
        assert calls == []
        reads.end(100)  # 1000 read since the call was registered
        assert len(calls) == 1
        reads.end(999)
        reads.end(1, 5000)  # one read of more than every_bytes: one call, the count from zero
        reads.end(999)
        # Here, not on the executor: a call there woke a second thread for nothing (when_read).
        assert calls == [threading.current_thread().name] * 3
    finally:
        s.close()


def test_submitted_calls_run_on_the_executor_and_not_once_it_is_closed(caplog: Any) -> None:
    ran: list[str] = []
    done = threading.Event()

    def call() -> None:
        ran.append(threading.current_thread().name)
        done.set()
        raise OSError("trim failed")

    s = streams()
    try:
        s.submit(call)
        assert done.wait(10)
    finally:
        s.close()
    s.submit(call)  # closed: dropped, not raised
    time.sleep(PAST_IT_S)
    assert len(ran) == 1 and ran[0].startswith("rlm-stream-io")
    assert "a call on the streams' executor failed" in caplog.text
