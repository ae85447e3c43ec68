"""A stream's groups encoded off the event loop, ahead of the piece sent: in order, as many at a
time as asked, what was read before a failure sent before it, and nothing left running once
closed."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from rlm.stream.service import encode_ahead


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(2) as pool:
        yield pool


async def numbers(count: int, fail_at: int | None = None) -> AsyncIterator[int]:
    for i in range(count):
        if i == fail_at:
            raise OSError(f"read {i} failed")
        await asyncio.sleep(0)
        yield i


@pytest.mark.parametrize("ahead", [1, 2, 3])
def test_groups_are_encoded_in_order_as_many_at_a_time_as_asked_off_the_loop(ahead: int) -> None:
    running = 0
    most = 0
    threads: set[int] = set()
    lock = threading.Lock()

    def encode(i: int) -> str:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        threads.add(threading.get_ident())
        time.sleep(0.02)  # long enough for the others to start, were they allowed to
        with lock:
            running -= 1
        return f"piece {i}"

    async def main(executor: ThreadPoolExecutor) -> list[str]:
        return [piece async for piece in encode_ahead(numbers(9), encode, executor, ahead)]

    with ThreadPoolExecutor(4) as executor:  # more threads than the encodings allowed
        assert asyncio.run(main(executor)) == [f"piece {i}" for i in range(9)]
    assert most == ahead
    assert threading.get_ident() not in threads


def test_ahead_must_be_at_least_one(executor: ThreadPoolExecutor) -> None:
    async def main() -> None:
        async for _ in encode_ahead(numbers(1), str, executor, 0):
            pass

    with pytest.raises(ValueError, match="ahead must be ≥ 1, not 0"):
        asyncio.run(main())


def test_what_was_read_before_a_failure_is_sent_before_it(executor: ThreadPoolExecutor) -> None:
    async def main() -> tuple[list[str], BaseException | None]:
        got: list[str] = []
        try:
            async for piece in encode_ahead(numbers(5, fail_at=3), str, executor):
                got.append(piece)
        except OSError as exc:
            return got, exc
        return got, None

    got, failure = asyncio.run(main())
    assert got == ["0", "1", "2"]
    assert str(failure) == "read 3 failed"


def test_an_encoding_failure_ends_the_pieces_where_it_happens(executor: ThreadPoolExecutor) -> None:
    def encode(i: int) -> str:
        if i == 2:
            raise ValueError("group 2 is corrupt")
        return str(i)

    async def main() -> tuple[list[str], BaseException | None]:
        got: list[str] = []
        try:
            async for piece in encode_ahead(numbers(6), encode, executor):
                got.append(piece)
        except ValueError as exc:
            return got, exc
        return got, None

    got, failure = asyncio.run(main())
    assert got == ["0", "1"]
    assert str(failure) == "group 2 is corrupt"


@pytest.mark.parametrize("ahead", [1, 2])
def test_closing_drops_the_encodings_in_flight(executor: ThreadPoolExecutor, ahead: int) -> None:
    # Groups 1 to ``ahead`` are in flight when group 0 is yielded; each holds its thread until
    # released, and the consumer closes the stream only once all of them are under way (a group
    # still queued when the stream closes is cancelled before it starts, which is also right).
    in_flight = threading.Semaphore(0)
    release = threading.Event()
    encoded: list[int] = []

    def encode(i: int) -> int:
        if i >= 1:
            in_flight.release()
            release.wait(10)
        encoded.append(i)
        return i

    def all_under_way() -> bool:
        return all(in_flight.acquire(timeout=10) for _ in range(ahead))

    async def main() -> list[int]:
        got = []
        async with contextlib.aclosing(encode_ahead(numbers(10), encode, executor, ahead)) as pieces:
            async for piece in pieces:
                got.append(piece)
                assert await asyncio.get_running_loop().run_in_executor(None, all_under_way)
                break  # group 1 is being encoded (and group 2 beside it, two at a time)
        release.set()
        return got

    assert asyncio.run(main()) == [0]
    executor.shutdown(wait=True)
    # the groups in flight ran to their end; no later one started
    assert sorted(encoded) == list(range(ahead + 1))
