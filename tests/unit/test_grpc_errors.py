"""Which gRPC status each rlm error and Kafka error code becomes, and which scope each method needs."""

from __future__ import annotations

import grpc
import pytest

from api.auth import Scope
from api.grpc_auth import needed_scope
from api.grpc_errors import STATUS_FOR_CODE, for_error_code, status_for
from api.rest.errors import status_for as rest_status_for
from rlm.errors import (
    ChecksumMismatchError,
    ConfigError,
    CorruptRecordError,
    InvalidArgumentError,
    InvalidTopicNameError,
    MetadataUnavailableError,
    NotFoundError,
    OffsetOutOfRangeError,
    PoolClosedError,
    PoolFullError,
    RequestTimedOutError,
    SchemaMismatchError,
    StorageError,
    StorageUnavailableError,
)
from rlm.lookup.list_offsets import ErrorCode
from rlm.timestamps import InvalidTimestampError

S = grpc.StatusCode
ERRORS_AND_CODES = [
    (NotFoundError("no partition orders-9"), S.NOT_FOUND),
    (OffsetOutOfRangeError("offset 9 is outside [0, 5]"), S.OUT_OF_RANGE),
    (InvalidTimestampError("timestamp", "'x' is not ..."), S.INVALID_ARGUMENT),
    (InvalidArgumentError("partition", "must be from 0 to 2147483647, not -1"), S.INVALID_ARGUMENT),
    (InvalidTopicNameError("a/b", "bad character"), S.INVALID_ARGUMENT),
    (ConfigError("out of range"), S.INVALID_ARGUMENT),
    (ValueError("limit must be 1 to 1000"), S.INVALID_ARGUMENT),
    (PoolFullError("queue full"), S.RESOURCE_EXHAUSTED),
    (RequestTimedOutError("late"), S.DEADLINE_EXCEEDED),
    (StorageUnavailableError("503"), S.UNAVAILABLE),
    (MetadataUnavailableError("connection refused"), S.UNAVAILABLE),
    (ChecksumMismatchError("damaged in transit"), S.UNAVAILABLE),
    (PoolClosedError("shutting down"), S.UNAVAILABLE),
    (CorruptRecordError("bad CRC"), S.DATA_LOSS),
    (StorageError("access denied", retriable=False), S.INTERNAL),
    (SchemaMismatchError("run rlm db upgrade"), S.INTERNAL),
    (KeyError("bug"), S.INTERNAL),
    (PermissionError(13, "Permission denied"), S.INTERNAL),
]
#: The REST status of each gRPC code: gRPC's OUT_OF_RANGE and DATA_LOSS say more than 404 and 500.
HTTP_STATUS = {
    S.NOT_FOUND: 404,
    S.OUT_OF_RANGE: 404,
    S.INVALID_ARGUMENT: 400,
    S.RESOURCE_EXHAUSTED: 429,
    S.DEADLINE_EXCEEDED: 504,
    S.UNAVAILABLE: 503,
    S.DATA_LOSS: 500,
    S.INTERNAL: 500,
}


@pytest.mark.parametrize(("error", "code"), ERRORS_AND_CODES)
def test_errors_map_to_statuses(error: Exception, code: grpc.StatusCode) -> None:
    assert status_for(error) is code


@pytest.mark.parametrize(("error", "code"), ERRORS_AND_CODES)
def test_rest_answers_each_error_as_grpc_does(error: Exception, code: grpc.StatusCode) -> None:
    assert rest_status_for(error) == HTTP_STATUS[code]


def test_every_kafka_error_code_of_a_single_answer_has_a_status() -> None:
    assert set(STATUS_FOR_CODE) == set(ErrorCode) - {ErrorCode.NONE}
    timed_out = for_error_code(ErrorCode.REQUEST_TIMED_OUT, None)
    assert (timed_out.code, timed_out.message) == (S.DEADLINE_EXCEEDED, "REQUEST_TIMED_OUT")
    assert for_error_code(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "no orders-9").message == "no orders-9"


@pytest.mark.parametrize(
    ("method", "scope"),
    [
        ("/rlm.v1.RemoteLogManager/GetOffset", Scope.READ),
        ("/rlm.v1.RemoteLogManager/GetConfig", Scope.READ),
        ("/rlm.v1.RemoteLogManager/UpdateConfig", Scope.ADMIN),
        ("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", Scope.READ),
        ("/grpc.health.v1.Health/Check", None),
        ("/grpc.health.v1.Health/Watch", None),
        ("/rlm.v1.RemoteLogManager/NoSuchMethod", Scope.READ),
    ],
)
def test_scopes_of_methods(method: str, scope: Scope | None) -> None:
    assert needed_scope(method) is scope
