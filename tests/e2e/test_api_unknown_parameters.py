"""A query parameter a route does not take is refused (400 naming it and what the route takes),
never ignored: ``isolation_level`` on the single-partition lookup (only POST /v1/list-offsets
takes one) would otherwise answer READ_UNCOMMITTED to a caller who asked READ_COMMITTED, and a
misspelt range bound (``end_ofset``) would answer the bounded page as if it were the range.
A body that is no JSON object is named as the body (not as ``: ...`` or a bare position), and a
key given twice in one of its objects is refused, as a query parameter given twice is. The words of
other refusals name what the caller wrote: an unencoded '+', gRPC's ``page_size``; and a negative
fetch offset is the same error class on both APIs.
"""

from __future__ import annotations

import grpc
import pytest
from fastapi.testclient import TestClient

from api.gen.rlm.v1 import rlm_pb2 as pb
from api.gen.rlm.v1 import rlm_pb2_grpc
from tests.e2e.conftest import ADMIN_TOKEN
from tests.grpc_support import code_of

READ = (("authorization", f"Bearer {ADMIN_TOKEN}"),)
TOPIC = "orders"
PARTITION = f"/v1/topics/{TOPIC}/partitions/0"


@pytest.mark.parametrize(
    ("path", "params", "accept", "unknown", "taken"),
    [
        (
            f"{PARTITION}/offsets",
            {"timestamp": "0", "isolation_level": "1"},
            None,
            "isolation_level",
            "timestamp",
        ),
        (f"{PARTITION}/offsets", {"timestamp": "0", "timeout": "5"}, None, "timeout", "timeout_ms"),
        (f"{PARTITION}/records", {"offset": "100", "end_ofset": "101"}, None, "end_ofset", "max_bytes"),
        (f"{PARTITION}/records", {"offset": "100", "max_bytes": "1", "raw": "1"}, None, "raw", "offset"),
        (
            f"{PARTITION}/records",
            {"offset": "100", "end_offset": "103", "to_timestmp": "0"},
            "application/x-ndjson",
            "to_timestmp",
            "to_timestamp",
        ),
        (f"{PARTITION}/segments", {"page": "2"}, None, "page", "page_token"),
        ("/v1/topics", {"topics": TOPIC}, None, "topics", "topic"),
    ],
)
def test_a_parameter_the_route_does_not_take_is_refused_naming_it(
    api_client: TestClient, path: str, params: dict[str, str], accept: str | None, unknown: str, taken: str
) -> None:
    headers = {"Accept": accept} if accept else {}
    response = api_client.get(path, params=params, headers=headers)
    assert response.status_code == 400, (params, response.status_code, response.text[:200])
    error = response.json()["error"]
    assert f"query.{unknown}" in error and taken in error, error


def test_the_parameters_a_route_takes_still_pass(api_client: TestClient) -> None:
    assert (
        api_client.get(f"{PARTITION}/offsets", params={"timestamp": "0", "timeout_ms": "5000"}).status_code
        == 200
    )
    fetched = api_client.get(
        f"{PARTITION}/records", params={"offset": "100", "max_bytes": "1", "timeout_ms": "5000"}
    )
    assert fetched.status_code == 200
    streamed = api_client.get(
        f"{PARTITION}/records",
        params={
            "offset": "100",
            "end_offset": "101",
            "isolation_level": "read_committed",
            "timeout_ms": "5000",
        },
        headers={"Accept": "application/x-ndjson"},
    )
    assert streamed.status_code == 200
    assert api_client.get(f"{PARTITION}/segments", params={"limit": "1", "page_token": ""}).status_code == 200
    assert api_client.get("/v1/topics", params={"topic": TOPIC}).status_code == 200


@pytest.mark.parametrize(
    ("content", "content_type", "words"),
    [
        (b"{nope", "application/json", "body: not valid JSON at character 1"),
        (b"[]", "application/json", "body: "),
        (b"", "application/json", "body: "),
    ],
)
def test_a_list_offsets_body_that_is_no_json_object_is_named_as_the_body(
    api_client: TestClient, content: bytes, content_type: str, words: str
) -> None:
    response = api_client.post("/v1/list-offsets", content=content, headers={"Content-Type": content_type})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert words in error and ": :" not in error and not error.startswith("invalid request: 1:"), error


# -- words that name what was wrong -----------------------------------------------------------------


def test_an_unencoded_plus_of_a_zone_offset_is_explained(api_client: TestClient) -> None:
    """A '+' left unencoded in a URL query arrives as a space: the answer says so."""
    response = api_client.get(f"{PARTITION}/offsets?timestamp=2023-11-14T23:13:20+01:00")
    assert response.status_code == 400
    error = response.json()["error"]
    assert "%2B" in error and "query.timestamp" in error, error
    encoded = api_client.get(f"{PARTITION}/offsets?timestamp=2023-11-14T23:13:20%2B01:00")
    assert encoded.status_code == 200, encoded.text


@pytest.mark.parametrize("size", [0, -1, 1001])
def test_a_grpc_page_size_out_of_range_is_named_as_page_size(
    api_stub: rlm_pb2_grpc.RemoteLogManagerStub, size: int
) -> None:
    request = pb.ListSegmentsRequest(topic=TOPIC, partition=0, page_size=size)
    code, details = code_of(lambda: api_stub.ListSegments(request, metadata=READ, timeout=10))
    assert code is grpc.StatusCode.INVALID_ARGUMENT and details.startswith("page_size"), details


@pytest.mark.parametrize("offset", [-1, -(2**63)])
def test_a_negative_fetch_offset_is_an_invalid_argument_on_both_apis(
    api_client: TestClient, api_stub: rlm_pb2_grpc.RemoteLogManagerStub, offset: int
) -> None:
    rest = api_client.get(f"{PARTITION}/records", params={"offset": str(offset)})
    assert rest.status_code == 400 and "query.offset" in rest.json()["error"], rest.text
    request = pb.FetchRecordsRequest(topic=TOPIC, partition=0, offset=offset)
    code, details = code_of(lambda: api_stub.FetchRecords(request, metadata=READ, timeout=10))
    assert code is grpc.StatusCode.INVALID_ARGUMENT and details.startswith("offset"), (code, details)


# -- JSON bodies ----------------------------------------------------------------------------------

JSON = {"Content-Type": "application/json"}


@pytest.mark.parametrize(
    ("body", "key"),
    [
        (
            b'{"topics": [{"name": "orders", "partitions": '
            b'[{"partition_index": 0, "timestamp": 0, "timestamp": -1}]}]}',
            "timestamp",
        ),
        (b'{"topics": [{"name": "orders", "name": "other", "partitions": []}]}', "name"),
        (b'{"topics": [], "isolation_level": 0, "isolation_level": 1}', "isolation_level"),
    ],
)
def test_a_key_given_twice_in_a_json_object_is_refused_not_one_of_its_values_taken(
    api_client: TestClient, body: bytes, key: str
) -> None:
    response = api_client.post("/v1/list-offsets", content=body, headers=JSON)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert "body" in error and repr(key) in error and "twice" in error, error


def test_a_setting_given_twice_is_refused_and_nothing_changes(api_client: TestClient) -> None:
    before = api_client.get("/v1/config").json()
    body = b'{"remote_log_offset_reader_threads": 3, "remote_log_offset_reader_threads": 7}'
    response = api_client.patch("/v1/config", content=body, headers=JSON)
    assert response.status_code == 400 and "twice" in response.json()["error"], response.text
    assert api_client.get("/v1/config").json() == before


def test_a_json_number_too_long_for_python_is_named_not_a_parse_failure(api_client: TestClient) -> None:
    body = (
        b'{"topics": [{"name": "orders", "partitions": [{"partition_index": 0, "timestamp": '
        + b"9" * 5000
        + b"}]}]}"
    )
    response = api_client.post("/v1/list-offsets", content=body, headers=JSON)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert "body" in error and "digits" in error and "There was an error" not in error, error


BODY_ROUTES = [
    ("POST", "/v1/list-offsets", b'{"topics": []}'),
    ("PATCH", "/v1/config", b'{"remote_log_offset_reader_threads": 5}'),
]


@pytest.mark.parametrize(("method", "path", "body"), BODY_ROUTES)
@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_a_body_not_sent_as_json_is_refused_with_415_saying_how_to_send_it(
    api_client: TestClient, method: str, path: str, body: bytes, content_type: str | None
) -> None:
    # It used to be read as a string: "body: Input should be a valid dictionary".
    headers = {} if content_type is None else {"Content-Type": content_type}
    response = api_client.request(method, path, content=body, headers=headers)
    assert response.status_code == 415, response.text
    error = response.json()["error"]
    assert "Content-Type: application/json" in error and "dictionary" not in error, error


def test_the_openapi_document_declares_the_415_of_every_operation_taking_a_body(
    api_client: TestClient,
) -> None:
    document = api_client.get("/openapi.json").json()
    taking_a_body = set()
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            if "requestBody" not in operation:
                assert "415" not in responses, (method, path)
                continue
            taking_a_body.add((method.upper(), path))
            refused = responses.get("415")
            assert refused is not None, (method, path)
            assert "Content-Type: application/json" in refused["description"]
            schema = refused["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/Problem"}, (method, path)
    assert taking_a_body == {(method, path) for method, path, _ in BODY_ROUTES}


@pytest.mark.parametrize(("method", "path", "body"), BODY_ROUTES)
@pytest.mark.parametrize("content_type", ["application/json; charset=utf-8", "application/vnd.rlm+json"])
def test_json_content_types_are_taken(
    api_client: TestClient, method: str, path: str, body: bytes, content_type: str
) -> None:
    response = api_client.request(method, path, content=body, headers={"Content-Type": content_type})
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_json_nested_too_deeply_is_named_not_a_parse_failure(api_client: TestClient, depth: int) -> None:
    body = b'{"topics": ' + b"[" * depth + b"]" * depth + b"}"
    response = api_client.post("/v1/list-offsets", content=body, headers=JSON)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert "body" in error and "nested" in error and "There was an error" not in error, error


def test_a_body_that_is_not_utf_8_is_named_not_a_parse_failure(api_client: TestClient) -> None:
    # JSON is UTF-8 (RFC 8259): a name written in Latin-1 is refused saying where, as any other
    # body that does not parse, never "There was an error parsing the body".
    body = '{"topics": [{"name": "café", "partitions": []}]}'.encode("latin-1")
    for path, method in (("/v1/list-offsets", "POST"), ("/v1/config", "PATCH")):
        response = api_client.request(method, path, content=body, headers=JSON)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error == "invalid request: body: not UTF-8 at byte 25 (counting from 0)", error
