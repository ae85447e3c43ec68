"""The gRPC API, ``rlm.v1.RemoteLogManager`` (``api/proto/rlm/v1/rlm.proto``), with the standard
health and reflection services; built by :func:`build_grpc_server`.

The servicer only translates messages (:mod:`api.grpc_messages`) and errors (:mod:`api.grpc_errors`);
the work is done by the runtime's services. Lookups are planned on the event loop; what blocks
never runs there: lookups' metadata reads and remote searches and record fetches run on the
runtime's pools and are awaited without holding a thread (the loop is woken when one finishes),
the other calls on the loop's default executor, at most ``max_concurrent_rpcs`` at a time (the
server turns away calls beyond that with RESOURCE_EXHAUSTED).

The call deadline is the lookup timeout: a lookup gets the time the caller has left, less a little
to send the answer back; without a deadline, ``remote.list.offsets.request.timeout.ms`` applies.
The lookup's deadline is taken when the call arrives.
Arguments are checked as the REST API checks them: by the services (topic names, the size of a
ListOffsets, settings) and by the parsers every API shares (:mod:`rlm.arguments`,
:mod:`rlm.timestamps`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection
from typing_extensions import override

from api import grpc_messages as msg
from api.auth import TokenAuthenticator
from api.gen.rlm.v1 import rlm_pb2 as pb
from api.gen.rlm.v1 import rlm_pb2_grpc
from api.grpc_auth import BearerTokenInterceptor
from api.grpc_errors import StatusError, answers_errors, for_error_code
from api.grpc_stream import ReadRecordsServicer
from rlm.bootstrap import Runtime
from rlm.errors import ConfigError
from rlm.lookup.fetch import FetchResult
from rlm.lookup.list_offsets import ErrorCode
from rlm.lookup.pool import CancelToken, run_on
from rlm.timestamps import parse_timestamp

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["RemoteLogManager"].full_name
#: The share of the caller's time left kept to send the answer back (within the bounds below), so
#: that a ListOffsets whose partitions ran out of time still answers them (REQUEST_TIMED_OUT)
#: before the caller gives up.
REPLY_MARGIN_SHARE = 0.1
REPLY_MARGIN_BOUNDS_S = (0.02, 0.5)

#: Readiness is probed at most this often while health is watched, whatever ``refresh_s`` says.
MIN_WATCH_INTERVAL_S = 0.1
#: Health watchers take at most this share of ``max_concurrent_rpcs`` (at least one): a Watch,
#: which needs no token, holds its place for as long as its client keeps it open.
WATCHERS_SHARE = 0.25

Context = grpc.aio.ServicerContext[Any, Any]
T = TypeVar("T")


# ReadRecords writes its messages (grpc.aio takes a coroutine that calls context.write for a
# streaming method), where the generated stubs type it as returning an iterator of them.
class RemoteLogManagerServicer(  # type: ignore[misc]
    ReadRecordsServicer, rlm_pb2_grpc.RemoteLogManagerServicer
):
    """``rlm.v1.RemoteLogManager`` over a runtime's services."""

    def __init__(self, runtime: Runtime, authenticator: TokenAuthenticator) -> None:
        self.runtime = runtime
        self.authenticator = authenticator

    @override
    @answers_errors
    async def GetOffset(self, request: pb.GetOffsetRequest, context: Context) -> pb.GetOffsetResponse:
        # Both read now: the time the caller has left already counts what planning will take.
        arrived, deadline_ms = time.monotonic(), _deadline_ms(context)
        tp = msg.topic_partition(request.topic, request.partition)
        timestamp = parse_timestamp(request.timestamp)
        lookups = self.runtime.list_offsets
        planned = lookups.plan_one(tp, timestamp)  # a local-tier answer is found here, on the loop
        result = planned.answered
        if result is None:
            result = await planned.finish(lookups.deadline(deadline_ms, arrived=arrived))
        if result.error_code is not ErrorCode.NONE:
            raise for_error_code(result.error_code, result.error_message)
        return msg.offset_response(tp, result)

    @override
    @answers_errors
    async def ListOffsets(self, request: pb.ListOffsetsRequest, context: Context) -> pb.ListOffsetsResponse:
        query = msg.list_offsets_request(request, _deadline_ms(context))
        deadline = self.runtime.list_offsets.deadline(query.timeout_ms)
        response = await self.runtime.list_offsets.handle_async(query, deadline=deadline)
        return msg.list_offsets_response(response)

    @override
    @answers_errors
    async def FetchRecords(
        self, request: pb.FetchRecordsRequest, context: Context
    ) -> pb.FetchRecordsResponse:
        tp = msg.topic_partition(request.topic, request.partition)
        max_bytes = msg.fetch_bytes(request)
        offset = msg.fetch_offset(request)
        deadline_ms = _deadline_ms(context)
        fetcher = self.runtime.fetcher

        def read(token: CancelToken) -> FetchResult:
            return fetcher.fetch(tp, offset, max_bytes, checkpoint=token.raise_if_cancelled)

        timeout_s = self.runtime.request_timeout.seconds_for(deadline_ms)
        result = await run_on(
            self.runtime.fetch_pool, read, timeout_s, label=tp, what=f"reading {tp} from offset {offset}"
        )
        return msg.fetch_response(tp, result)

    @override
    @answers_errors
    async def ListSegments(
        self, request: pb.ListSegmentsRequest, context: Context
    ) -> pb.ListSegmentsResponse:
        tp = msg.topic_partition(request.topic, request.partition)
        page = await asyncio.to_thread(
            self.runtime.overview.segments,
            tp,
            limit=msg.page_size(request),
            page_token=request.page_token or None,
        )
        return msg.segments_response(tp, page)

    @override
    @answers_errors
    async def ListPartitions(
        self, request: pb.ListPartitionsRequest, context: Context
    ) -> pb.ListPartitionsResponse:
        topic = request.topic or None
        return msg.partitions_response(await asyncio.to_thread(self.runtime.overview.partitions, topic))

    @override
    @answers_errors
    async def GetConfig(self, request: pb.GetConfigRequest, context: Context) -> pb.DynamicConfig:
        return msg.config_response(self.runtime.dynamic_config.current())

    @override
    @answers_errors
    async def UpdateConfig(self, request: pb.UpdateConfigRequest, context: Context) -> pb.DynamicConfig:
        changes = msg.config_changes(request)
        current = await asyncio.to_thread(lambda: self.runtime.dynamic_config.update(**changes))
        return msg.config_response(current)


def _deadline_ms(context: Context) -> int | None:
    """The lookup timeout the call's deadline leaves; None when the call has no deadline.

    Raises:
        StatusError: DEADLINE_EXCEEDED, the deadline is (all but) past already.
    """
    remaining = context.time_remaining()
    if remaining is None:
        return None
    low, high = REPLY_MARGIN_BOUNDS_S
    margin = min(high, max(low, remaining * REPLY_MARGIN_SHARE))
    timeout_ms = math.floor((remaining - margin) * 1000)
    if timeout_ms <= 0:
        raise StatusError(grpc.StatusCode.DEADLINE_EXCEEDED, "the call's deadline passed before the lookup")
    return timeout_ms


class ReadinessHealthServicer(health_aio.HealthServicer):
    """The standard health service: SERVING for ``""`` and ``rlm.v1.RemoteLogManager`` while the
    runtime is ready (metadata store and remote storage reachable), NOT_SERVING otherwise.

    Readiness is probed when asked (Check) or every ``refresh_s`` while someone watches (Watch);
    at most one probe runs at a time, and at most one per ``refresh_s``. A probe answers within
    its own deadline (``readiness.timeout.ms``) and holds no worker thread while it waits.
    At most ``max_watchers`` Watch calls run at once; another ends at once with RESOURCE_EXHAUSTED.
    """

    def __init__(
        self,
        probe: Callable[[], Awaitable[list[str]]],
        *,
        refresh_s: float = 1.0,
        max_watchers: int | None = None,
    ) -> None:
        super().__init__()
        self._max_watchers = max_watchers
        self._probe = probe
        self._refresh_s = refresh_s
        self._probed_at = -math.inf
        self._problems: list[str] | None = None
        self._lock = asyncio.Lock()
        self._watchers = 0
        self._poller: asyncio.Task[None] | None = None

    async def refresh(self) -> None:
        """Probe readiness unless a probe finished less than ``refresh_s`` ago; publish the status."""
        async with self._lock:
            if time.monotonic() - self._probed_at < self._refresh_s:
                return
            try:
                problems = await self._probe()
            except Exception as exc:  # a probe that fails is a problem to report, not a failed Check
                problems = [f"readiness probe failed: {type(exc).__name__}: {exc}"]
            self._probed_at = time.monotonic()
            if problems != self._problems:
                if problems:
                    log.warning("not ready: %s", "; ".join(problems))
                self._problems = problems
            serving = health_pb2.HealthCheckResponse
            status = serving.NOT_SERVING if problems else serving.SERVING
            for service in ("", SERVICE_NAME):
                await self.set(service, status)

    @override
    async def Check(
        self,
        request: health_pb2.HealthCheckRequest,
        context: grpc.aio.ServicerContext[health_pb2.HealthCheckRequest, health_pb2.HealthCheckResponse],
    ) -> health_pb2.HealthCheckResponse:
        await self.refresh()
        return await super().Check(request, context)

    @override
    async def Watch(
        self,
        request: health_pb2.HealthCheckRequest,
        context: grpc.aio.ServicerContext[health_pb2.HealthCheckRequest, health_pb2.HealthCheckResponse],
    ) -> None:
        if self._max_watchers is not None and self._watchers >= self._max_watchers:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{self._max_watchers} health watchers are connected already: use Check, or try again later",
            )
        self._watchers += 1  # counted before the first await: watchers arriving at once are bounded too
        try:
            await self.refresh()  # the first answer is the current status, not a stale one
            if self._poller is None:
                self._poller = asyncio.create_task(self._poll(), name="rlm-grpc-readiness")
            await super().Watch(request, context)
        finally:
            self._watchers -= 1
            if self._watchers == 0 and self._poller is not None:
                self._poller.cancel()
                self._poller = None

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(max(self._refresh_s, MIN_WATCH_INTERVAL_S))
            await self.refresh()


def build_grpc_server(
    runtime: Runtime,
    authenticator: TokenAuthenticator,
    *,
    host: str = "127.0.0.1",
    port: int,
    tls: tuple[bytes, bytes] | None = None,
    max_concurrent_rpcs: int = 100,
    readiness_refresh_s: float = 1.0,
) -> grpc.aio.Server:
    """A gRPC server (not started) bound to ``host:port``, serving rlm, health and reflection.

    Args:
        runtime: the services to serve.
        authenticator: checks the bearer token of every call but health checks.
        host: the address to listen on.
        port: the port to listen on.
        tls: PEM certificate chain and private key; plaintext when None.
        max_concurrent_rpcs: calls handled at once; more are refused with RESOURCE_EXHAUSTED. Health
            watchers take at most a quarter of them (``WATCHERS_SHARE``).
        readiness_refresh_s: the health service probes readiness at most this often.

    Raises:
        ConfigError: the address cannot be bound or the TLS material is unusable.
    """
    server = grpc.aio.server(
        interceptors=[BearerTokenInterceptor(authenticator)],
        maximum_concurrent_rpcs=max_concurrent_rpcs,
        # A second process on the same port must fail to start, not share the port's calls.
        options=[("grpc.so_reuseport", 0)],
    )
    rlm_pb2_grpc.add_RemoteLogManagerServicer_to_server(
        RemoteLogManagerServicer(runtime, authenticator), server
    )
    health = ReadinessHealthServicer(
        runtime.readiness_problems_async,
        refresh_s=readiness_refresh_s,
        max_watchers=max(1, int(max_concurrent_rpcs * WATCHERS_SHARE)),
    )
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    health_service = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
    reflection.enable_server_reflection((SERVICE_NAME, health_service, reflection.SERVICE_NAME), server)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        if tls is None:
            bound = server.add_insecure_port(address)
        else:
            certificate_chain, private_key = tls
            credentials = grpc.ssl_server_credentials([(private_key, certificate_chain)])
            bound = server.add_secure_port(address, credentials)
    except RuntimeError:
        bound = 0
    if bound == 0:
        hint = (
            " with TLS: is the port free, and are tls.cert.file and tls.key.file a PEM pair?" if tls else ""
        )
        raise ConfigError(f"gRPC server cannot listen on {address}{hint or ': is the port free?'}")
    return server
