"""The REST API fuzzed from its own OpenAPI document with schemathesis.

Every operation gets valid and invalid inputs (path parameters, query strings, bodies) generated
from the spec, against the app over a tiered partition whose answers span both tiers:

* with an admin token, so that authentication passes and the input reaches the handlers, no
  answer is a server error (5xx) — but a 504 when the caller itself asked for less than a second;
* without a token, every protected operation answers 401 whatever the input, before reading it;
* integers in paths and queries are taken exactly when they are plain ASCII digits in range, and
  timestamps answer alike on REST and gRPC (one parser for both), never accepting what is not ASCII
  or has spaces around it.

Examples are derandomized: a failure repeats on the next run.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.openapi import from_asgi
from schemathesis.schemas import BaseSchema

from api.gen.rlm.v1 import rlm_pb2 as pb
from api.gen.rlm.v1 import rlm_pb2_grpc
from tests.e2e.conftest import ADMIN_TOKEN, InProcess, bearer

#: Operations anyone may call: the probes.
UNPROTECTED = [("GET", "/healthz"), ("GET", "/readyz")]
PROTECTED = [
    ("GET", "/v1/topics/{topic}/partitions/{partition}/offsets"),
    ("POST", "/v1/list-offsets"),
    ("GET", "/v1/topics/{topic}/partitions/{partition}/records"),
    ("GET", "/v1/topics/{topic}/partitions/{partition}/segments"),
    ("GET", "/v1/topics"),
    ("GET", "/v1/config"),
    ("PATCH", "/v1/config"),
    ("GET", "/metrics"),
]
#: Operations that take no input: nothing to make invalid.
NO_INPUT = {("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/v1/config"), ("GET", "/metrics")}
EXAMPLES_PER_OPERATION = 50
EXAMPLES_WITHOUT_TOKEN = 20
#: A caller's own ``timeout_ms`` below this may run out on a remote lookup: 504 is the right answer.
SHORT_TIMEOUT_MS = 1000


def cases(operations: list[tuple[str, str]]) -> list[tuple[str, str, GenerationMode]]:
    """Each operation with valid inputs, and with invalid ones where it takes any."""
    return [
        (method, path, mode)
        for method, path in operations
        for mode in GenerationMode
        if mode is GenerationMode.POSITIVE or (method, path) not in NO_INPUT
    ]


def fuzz_settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


def asked_for_little_time(case: Case[Any]) -> bool:
    timeout = (case.query or {}).get("timeout_ms")
    return isinstance(timeout, int) and 0 <= timeout < SHORT_TIMEOUT_MS


@pytest.fixture(scope="module")
def api_schema(in_process: InProcess) -> BaseSchema:
    return from_asgi("/openapi.json", in_process.app())


@pytest.fixture(autouse=True)
def settings_restored(in_process: InProcess) -> Iterator[None]:
    """Fuzzing PATCH /v1/config changes the reader pool and the timeout; put them back."""
    config = in_process.runtime.dynamic_config
    before = config.current()
    yield
    config.update(
        reader_threads=before.remote_log_offset_reader_threads,
        request_timeout_ms=before.remote_list_offsets_request_timeout_ms,
        copy_max_bytes_per_second=before.remote_log_manager_copy_max_bytes_per_second,
    )


def test_the_spec_lists_exactly_the_fuzzed_operations(api_schema: BaseSchema) -> None:
    listed = set()
    for result in api_schema.get_all_operations():
        assert isinstance(result, Ok), result.err()
        listed.add((result.ok().method.upper(), result.ok().path))
    assert listed == set(UNPROTECTED + PROTECTED)


@pytest.mark.parametrize(("method", "path", "mode"), cases(UNPROTECTED + PROTECTED))
def test_no_generated_input_gets_a_server_error(
    api_schema: BaseSchema, method: str, path: str, mode: GenerationMode
) -> None:
    operation = api_schema[path][method]

    @fuzz_settings(EXAMPLES_PER_OPERATION)
    @given(case=operation.as_strategy(mode))
    def check(case: Case[Any]) -> None:
        response = case.call(headers=bearer(ADMIN_TOKEN))
        if response.status_code == 504 and asked_for_little_time(case):
            return
        case.validate_response(response, checks=[not_a_server_error])

    check()


@pytest.mark.parametrize(("method", "path", "mode"), cases(PROTECTED))
def test_without_a_token_every_protected_operation_answers_401(
    api_schema: BaseSchema, method: str, path: str, mode: GenerationMode
) -> None:
    operation = api_schema[path][method]

    @fuzz_settings(EXAMPLES_WITHOUT_TOKEN)
    @given(case=operation.as_strategy(mode))
    def check(case: Case[Any]) -> None:
        response = case.call()
        assert response.status_code == 401, (case.formatted_path, case.query, case.body, response.text)
        assert response.headers["www-authenticate"] == ["Bearer"]

    check()


def test_a_rate_limit_beyond_int64_is_refused_as_both_apis_store_int64(in_process: InProcess) -> None:
    patch = {"remote_log_manager_copy_max_bytes_per_second": 2**63}
    with TestClient(in_process.app()) as client:
        response = client.patch("/v1/config", json=patch, headers=bearer(ADMIN_TOKEN))
    assert response.status_code == 400, response.text
    assert in_process.runtime.dynamic_config.current().remote_log_manager_copy_max_bytes_per_second == -1


# -- integers and timestamps, strictly, everywhere ----------------------------------------------

#: Text a lax parser reads as a number: digits of other scripts, signs, spaces, "_", exponents.
_NUMBER_CHARS = [
    *"0123456789",
    "+",
    "-",
    " ",
    "\t",
    "_",
    ".",
    "e",
    "x",
    "\uff15",
    "\u0665",
    "\u00b2",
    "\u2212",
]
_number_like = st.one_of(
    st.text(alphabet=st.sampled_from(_NUMBER_CHARS), max_size=24),
    st.integers(-(2**70), 2**70).map(str),
    st.integers(1, 6000).map(lambda n: "9" * n),
)
_timestamp_like = st.one_of(
    _number_like,
    st.sampled_from(["latest", "earliest", "max-timestamp", "2023-11-14T22:13:20Z", "2023-11-14"]).flatmap(
        lambda word: st.tuples(st.sampled_from(["", " ", "\n", "+"]), st.sampled_from(["", " ", "\t"])).map(
            lambda around: around[0] + word + around[1]
        )
    ),
)
MAX_TIMEOUT_MS = 3_600_000
ADMIN_METADATA = (("authorization", f"Bearer {ADMIN_TOKEN}"),)


def _plain(text: str, low: int, high: int) -> bool:
    if re.fullmatch(r"-?[0-9]+", text) is None or len(text.lstrip("-").lstrip("0")) > 30:
        return False
    return low <= int(text) <= high


@fuzz_settings(EXAMPLES_PER_OPERATION * 4)
@given(text=_number_like)
def test_integers_are_taken_exactly_when_plain_ascii_digits_in_range(
    api_client: TestClient, text: str
) -> None:
    offsets = "/v1/topics/orders/partitions/0/offsets"
    timeout = api_client.get(offsets, params={"timestamp": "latest", "timeout_ms": text})
    limit = api_client.get("/v1/topics/orders/partitions/0/segments", params={"limit": text})
    for response, ok, name in (
        (timeout, _plain(text, 1, MAX_TIMEOUT_MS), "timeout_ms"),
        (limit, _plain(text, 1, 1000), "limit"),
    ):
        if ok:  # answered (a timeout of a few ms may run out: 504), not refused
            assert response.status_code in (200, 504), (text, response.text)
        else:
            assert response.status_code == 400, (text, response.text)
            error = response.json()["error"]
            assert name in error and "Exceeds the limit" not in error and len(error) < 400, error


@fuzz_settings(EXAMPLES_PER_OPERATION * 4)
@given(text=_timestamp_like)
def test_timestamps_answer_alike_on_rest_and_grpc(
    api_client: TestClient, api_stub: rlm_pb2_grpc.RemoteLogManagerStub, text: str
) -> None:
    rest = api_client.get("/v1/topics/orders/partitions/0/offsets", params={"timestamp": text})
    request = pb.GetOffsetRequest(topic="orders", partition=0, timestamp=text)
    try:
        answer = api_stub.GetOffset(
            request, metadata=(("authorization", f"Bearer {ADMIN_TOKEN}"),), timeout=30
        )
    except grpc.RpcError as exc:
        error: Any = exc
        assert error.code() is grpc.StatusCode.INVALID_ARGUMENT, error.details()
        assert rest.status_code == 400, (text, rest.text)
        assert rest.json()["error"].removeprefix("query.") == error.details(), (rest.text, error.details())
        return
    assert rest.status_code == 200, (text, rest.text)
    assert (rest.json()["offset"], rest.json()["timestamp"]) == (answer.offset, answer.timestamp)
    assert text.isascii() and text == text.strip() and not text.startswith("+"), text
