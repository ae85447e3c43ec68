"""``ReadRecords``: a range of a partition streamed over gRPC (server streaming), as over REST.

Each message holds the decoded records of a group of stored batches (about a read chunk's worth,
at most :data:`RECORDS_PER_MESSAGE` records, and at most about :data:`MESSAGE_BYTES` of them: a
group that decodes to more is sent in several messages, so that a client with gRPC's default
4 MiB limit takes them), translated from the column decoder's buffers
(:mod:`rlm.stream.records`, no record object in between), or with ``raw`` the batches themselves;
messages are made on the streams' executor, the next while the last is sent. The stream
waits for the client to take each message, so a slow client slows the reads; a client that
cancels cancels them. A stream that cannot continue ends with the error's status, never with OK;
one whose bearer token is revoked (:mod:`api.auth`) ends with UNAUTHENTICATED at its next message
once the tokens file is read again.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from functools import partial
from typing import Any

import grpc

from api import grpc_messages as msg
from api.auth import TokenAuthenticator
from api.gen.rlm.v1 import rlm_pb2 as pb
from api.grpc_auth import authorization_of
from api.grpc_errors import abort_for
from api.streaming import open_stream
from rlm.arguments import check_range
from rlm.bootstrap import Runtime
from rlm.log import columns as c
from rlm.lookup.plans import IsolationLevel
from rlm.stream import records as columns
from rlm.stream.chunks import StreamBatch
from rlm.stream.plan import RangePlan, RangeQuery
from rlm.stream.records import decode_range
from rlm.stream.service import outcome_of
from rlm.timestamps import parse_timestamp

Context = grpc.aio.ServicerContext[Any, Any]
#: Records per message at most (a message also ends after about a read chunk of stored bytes).
RECORDS_PER_MESSAGE = 8192
#: The bytes of records (or raw batches) a message holds at most, but for a record or batch larger
#: than that, sent alone: a gRPC client takes messages of at most 4 MiB unless told otherwise, and
#: a read chunk of compressed text decodes to several times that.
MESSAGE_BYTES = 1 << 20
#: What a record or a header costs in a message beyond its bytes, at most (a header key's
#: characters count four bytes each, as UTF-8 may take).
RECORD_OVERHEAD_BYTES = 48
#: A batch's timestamp type, from its label in the decoded spans.
_TIMESTAMP_TYPES = {kind.label.encode(): value for kind, value in msg.TIMESTAMP_TYPES.items()}


def read_records_query(request: pb.ReadRecordsRequest) -> RangeQuery:
    """The range a request asks for.

    Raises:
        InvalidArgumentError: a partition, timestamp or isolation level out of range.
    """
    tp = msg.topic_partition(request.topic, request.partition)
    isolation = IsolationLevel(check_range(request.isolation_level, "isolation_level", 0, 1))

    return RangeQuery(
        tp,
        offset=request.offset if request.HasField("offset") else None,
        from_timestamp=(
            parse_timestamp(request.from_timestamp, "from_timestamp")
            if request.HasField("from_timestamp")
            else None
        ),
        end_offset=request.end_offset if request.HasField("end_offset") else None,
        to_timestamp=(
            parse_timestamp(request.to_timestamp, "to_timestamp")
            if request.HasField("to_timestamp")
            else None
        ),
        isolation=isolation,
    )


def _messages(plan: RangePlan, batches: list[StreamBatch], *, raw: bool) -> list[pb.ReadRecordsResponse]:
    """The messages of a group of batches: its decoded records (or with ``raw`` its batches), cut
    so that each holds at most about :data:`MESSAGE_BYTES` (a record or batch larger than that
    alone): a group's stored bytes may decode to many times their size."""

    def message() -> pb.ReadRecordsResponse:
        return pb.ReadRecordsResponse(start_offset=plan.start, end_offset=max(plan.start, plan.end))

    if raw:
        cuts = _cuts([len(b.data) for b in batches])
        return [
            pb.ReadRecordsResponse(
                start_offset=plan.start,
                end_offset=max(plan.start, plan.end),
                raw_batches=b"".join(b.data for b in batches[a:b]),
            )
            for a, b in itertools.pairwise(cuts)
        ] or [message()]
    cols, spans = decode_range(plan, batches)
    if cols.rows == 0:
        return [message()]
    offsets = columns.ints(cols, c.OFFSET, "q")
    timestamps = columns.ints(cols, c.TIMESTAMP, "q")
    keys, values, headers = columns.keys(cols), columns.values(cols), columns.headers(cols)
    records: list[pb.Record] = []
    start = 0
    for end, label, epoch in spans:
        kind = _TIMESTAMP_TYPES[label]
        records.extend(
            pb.Record(
                offset=offsets[i],
                timestamp=timestamps[i],
                timestamp_type=kind,
                key=keys[i],
                value=values[i],
                headers=[pb.RecordHeader(key=k, value=v) for k, v in headers[i]],
                leader_epoch=epoch,
            )
            for i in range(start, end)
        )
        start = end
    sizes = [
        RECORD_OVERHEAD_BYTES
        + len(keys[i] or b"")
        + len(values[i] or b"")
        + sum(RECORD_OVERHEAD_BYTES + len(k) * 4 + len(v or b"") for k, v in headers[i])
        for i in range(cols.rows)
    ]
    answers = []
    for a, b in itertools.pairwise(_cuts(sizes)):
        answer = message()
        answer.records.extend(records[a:b])
        answers.append(answer)
    return answers


def _cuts(sizes: list[int]) -> list[int]:
    """Where to cut items of ``sizes`` into runs of at most :data:`MESSAGE_BYTES` (an item larger
    than that alone): the first index of each run, then the end (``[]`` without items)."""
    cuts = [0]
    held = 0
    for i, size in enumerate(sizes):
        if held and held + size > MESSAGE_BYTES:
            cuts.append(i)
            held = 0
        held += size
    return [*cuts, len(sizes)] if sizes else []


def _deadline_ms(context: Context) -> int | None:
    remaining = context.time_remaining()
    return None if remaining is None else max(1, int(remaining * 1000))


class ReadRecordsServicer:
    """The ``ReadRecords`` method of ``rlm.v1.RemoteLogManager`` (mixed into its servicer)."""

    runtime: Runtime
    authenticator: TokenAuthenticator

    async def ReadRecords(  # noqa: N802 (the method's name in the proto)
        self, request: pb.ReadRecordsRequest, context: Context
    ) -> None:
        # Each message is written here, not yielded: a write the client's cancel ends then ends
        # this call, where grpc's own writes of yielded messages logged each such cancel as an
        # error ("ExecuteBatchError") with its traceback.
        try:
            slot, plan = await open_stream(self.runtime, read_records_query(request), _deadline_ms(context))
        except Exception as exc:
            await abort_for(context, exc, "ReadRecords")
        streams = self.runtime.streams
        admitted = self.authenticator.admission(authorization_of(context.invocation_metadata()))
        with outcome_of(slot):
            encode = partial(_messages, plan, raw=request.raw)
            async with contextlib.aclosing(
                streams.encoded_range(plan, encode, streams.group_bytes, RECORDS_PER_MESSAGE)
            ) as groups:
                try:
                    async for answers in groups:
                        for answer in answers:
                            admitted.check()
                            if not await _written(context, answer):
                                raise asyncio.CancelledError  # the client went away: no status to send
                except Exception as exc:
                    await abort_for(context, exc, "ReadRecords")


async def _written(context: Context, answer: pb.ReadRecordsResponse) -> bool:
    """Send ``answer``; False when the call ended under the write (the client cancelled it or
    went away, the connection with it)."""
    try:
        await context.write(answer)
    except Exception:  # grpc's error of a write on an ended call has no public type
        return False
    return True
