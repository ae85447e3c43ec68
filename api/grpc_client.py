"""A client of ``rlm.v1.RemoteLogManager`` for ``rlm lookup --grpc``: one GetOffset call."""

from __future__ import annotations

from typing import Any

import grpc

from api.gen.rlm.v1 import rlm_pb2, rlm_pb2_grpc
from rlm.errors import RlmError

TIERS = {rlm_pb2.TIER_LOCAL: "local", rlm_pb2.TIER_REMOTE: "remote"}


def get_offset(
    address: str, token: str, topic: str, partition: int, timestamp: str, timeout_s: float
) -> dict[str, Any]:
    """The answer of the rlm at ``address`` (plaintext) to GetOffset, as ``rlm lookup`` prints it.

    Raises:
        RlmError: the call failed; the message gives its status code and details.
    """
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    with grpc.insecure_channel(address) as channel:
        stub = rlm_pb2_grpc.RemoteLogManagerStub(channel)
        try:
            reply = stub.GetOffset(
                rlm_pb2.GetOffsetRequest(topic=topic, partition=partition, timestamp=timestamp),
                metadata=metadata,
                timeout=timeout_s,
            )
        except grpc.RpcError as exc:
            code = exc.code().name if hasattr(exc, "code") else "UNKNOWN"
            details = exc.details() if hasattr(exc, "details") else str(exc)
            raise RlmError(f"gRPC {code}: {details}") from exc
    return {
        "topic": reply.topic,
        "partition": reply.partition,
        "offset": reply.offset,
        "timestamp": reply.timestamp,
        "leader_epoch": reply.leader_epoch,
        "tier": TIERS.get(reply.tier),
    }
