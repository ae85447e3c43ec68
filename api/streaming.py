"""Opening a range stream, for both transports: a stream place, then the plan (on the reader pool).

Above ``remote.fetch.max.streams`` streams the answer is ``PoolFullError`` (429 with ``Retry-After``,
RESOURCE_EXHAUSTED). Planning may search the remote tier, so it runs on the remote-fetch pool,
awaited without holding a thread, within the request's deadline; cut off by it, planning stops at
its next remote read.
"""

from __future__ import annotations

import asyncio

from rlm.bootstrap import Runtime
from rlm.errors import PoolFullError
from rlm.lookup.pool import CancelToken, run_on
from rlm.stream.plan import RangePlan, RangeQuery
from rlm.stream.service import StreamSlot


async def open_stream(rt: Runtime, query: RangeQuery, timeout_ms: int | None) -> tuple[StreamSlot, RangePlan]:
    """A stream place and the plan of ``query``; release the place when the stream ends.

    A stream that cannot be planned gives its place back at once, counted as failed, or as
    cancelled when the awaiting call is cancelled (its client went away while it was planned).

    Raises:
        PoolFullError: ``remote.fetch.max.streams`` streams are being sent.
        RequestTimedOutError: planning did not finish within the deadline.
        Whatever :func:`rlm.stream.plan.plan_range` raises.
    """
    streams = rt.streams
    slot = streams.slot()
    if slot is None:
        raise PoolFullError(
            f"{streams.max_streams} record streams are being sent (remote.fetch.max.streams): try again later"
        )

    def plan(token: CancelToken) -> RangePlan:
        return streams.plan(query, checkpoint=token.raise_if_cancelled)

    try:
        timeout_s = rt.request_timeout.seconds_for(timeout_ms)
        planned = await run_on(
            rt.fetch_pool, plan, timeout_s, label=query.tp, what=f"planning the stream of {query.tp}"
        )
    except asyncio.CancelledError:  # the client went away (or the server stops) while it was planned
        slot.release("cancelled")
        raise
    except BaseException:
        slot.release("failed")
        raise
    return slot, planned
