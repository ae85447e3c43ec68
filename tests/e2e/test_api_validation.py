"""Bad input answers the same way on REST GET, REST POST and gRPC, checked in one place each.

* Topic names are checked by the services, for every API: a bad one is Kafka's
  INVALID_TOPIC_EXCEPTION (17) inside ListOffsets answers, 400 / INVALID_ARGUMENT for single calls.
  It never reaches the metadata store (``"orders\\0"`` once came back as the driver's words).
* Integers and timestamps go through the one parser every API shares: ASCII digits only, in
  range (int64 at most), no ``+5``, no `` latest``, no fullwidth digits, JSON's ``true`` is not 1,
  and the answer says which argument was wrong and why, never Python's own words about its limits.
"""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from fastapi.testclient import TestClient

from api.gen.rlm.v1 import rlm_pb2 as pb
from api.gen.rlm.v1 import rlm_pb2_grpc
from tests.e2e.conftest import ADMIN_TOKEN, InProcess
from tests.grpc_support import code_of

READ = (("authorization", f"Bearer {ADMIN_TOKEN}"),)
TOPIC = "orders"
#: Topic names Kafka refuses, as written in a URL path and as the name itself.
BAD_TOPICS = [
    ("orders%00", "orders\x00"),
    ("%2E%2E", ".."),
    ("%2E", "."),
    ("a%20b", "a b"),
    ("x" * 250, "x" * 250),
]
#: Integers as text that only a lax parser takes, and what the answer must say.
BAD_INTEGERS = [
    ("+5", "is not an integer"),
    (" 5", "is not an integer"),
    ("5 ", "is not an integer"),
    ("\uff15", "is not an integer"),
    ("5_0", "is not an integer"),
    ("5.0", "is not an integer"),
    ("true", "is not an integer"),
    ("9" * 5000, "a number of 5000 digits is out of range"),
    ("99999999999999999999", "out of range"),
]
#: Timestamps as text that only a lax parser takes.
BAD_TIMESTAMPS = [
    ("+5", "is not epoch milliseconds"),
    (" latest", "spaces around the value"),
    ("latest\n", "spaces around the value"),
    ("\uff15", "other than ASCII"),
    ("9223372036854775808", "must be from -9223372036854775808 to 9223372036854775807"),
    ("9" * 5000, "longer than 64 characters"),
    ("-6", "use milliseconds ≥ 0 or a special value -1 to -5"),
]


def assert_refused(response: Any, *words: str) -> None:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    for word in words:
        assert word in error, error
    assert "Exceeds the limit" not in error and "int()" not in error and len(error) < 400, error


def post_offsets(api_client: TestClient, topics: list[dict[str, Any]], **fields: Any) -> Any:
    return api_client.post("/v1/list-offsets", json={"topics": topics, **fields})


# -- topic names ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("in_path", "name"), BAD_TOPICS)
def test_a_bad_topic_name_answers_the_same_on_every_api(
    api_client: TestClient, api_stub: rlm_pb2_grpc.RemoteLogManagerStub, in_path: str, name: str
) -> None:
    get = api_client.get(f"/v1/topics/{in_path}/partitions/0/offsets", params={"timestamp": "0"})
    assert_refused(get, "invalid topic name")

    posted = post_offsets(
        api_client, [{"name": name, "partitions": [{"partition_index": 0, "timestamp": 0}]}]
    )
    assert posted.status_code == 200, posted.text
    [answer] = posted.json()["topics"][0]["partitions"]
    assert answer["error_code"] == 17, answer  # INVALID_TOPIC_EXCEPTION
    assert "invalid topic name" in answer["error_message"]

    request = pb.ListOffsetsRequest(
        topics=[
            pb.ListOffsetsTopic(
                name=name, partitions=[pb.ListOffsetsPartition(partition_index=0, timestamp=0)]
            )
        ]
    )
    [grpc_answer] = api_stub.ListOffsets(request, metadata=READ, timeout=10).topics[0].partitions
    assert grpc_answer.error_code == 17 and "invalid topic name" in grpc_answer.error_message
    code, details = code_of(
        lambda: api_stub.GetOffset(pb.GetOffsetRequest(topic=name, partition=0, timestamp="0"), metadata=READ)
    )
    assert code is grpc.StatusCode.INVALID_ARGUMENT and "invalid topic name" in details


@pytest.mark.parametrize(("in_path", "name"), BAD_TOPICS[:2])
def test_a_bad_topic_name_is_refused_by_the_other_operations_too(
    api_client: TestClient, api_stub: rlm_pb2_grpc.RemoteLogManagerStub, in_path: str, name: str
) -> None:
    records = api_client.get(f"/v1/topics/{in_path}/partitions/0/records", params={"offset": 0})
    assert_refused(records, "invalid topic name")
    segments = api_client.get(f"/v1/topics/{in_path}/partitions/0/segments")
    assert_refused(segments, "invalid topic name")
    assert_refused(api_client.get("/v1/topics", params={"topic": name}), "invalid topic name")
    for call in (
        lambda: api_stub.FetchRecords(
            pb.FetchRecordsRequest(topic=name, partition=0, offset=0), metadata=READ
        ),
        lambda: api_stub.ListSegments(pb.ListSegmentsRequest(topic=name, partition=0), metadata=READ),
        lambda: api_stub.ListPartitions(pb.ListPartitionsRequest(topic=name), metadata=READ),
    ):
        code, details = code_of(call)
        assert code is grpc.StatusCode.INVALID_ARGUMENT and "invalid topic name" in details


def test_a_partition_asked_twice_or_a_bad_timestamp_is_still_per_partition(api_client: TestClient) -> None:
    partitions = [{"partition_index": 0, "timestamp": 0}, {"partition_index": 1, "timestamp": -6}]
    answered = post_offsets(
        api_client, [{"name": TOPIC, "partitions": partitions}, {"name": "..", "partitions": []}]
    )
    assert [p["error_code"] for p in answered.json()["topics"][0]["partitions"]] == [0, 42]


# -- integers -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "words"), BAD_INTEGERS)
def test_integers_in_paths_and_queries_are_parsed_strictly_on_every_route(
    api_client: TestClient, text: str, words: str
) -> None:
    offsets = f"/v1/topics/{TOPIC}/partitions"
    assert_refused(
        api_client.get(f"{offsets}/{text}/offsets", params={"timestamp": "0"}), "path.partition", words
    )
    assert_refused(
        api_client.get(f"{offsets}/0/offsets", params={"timestamp": "0", "timeout_ms": text}),
        "timeout_ms",
        words,
    )
    assert_refused(api_client.get(f"{offsets}/{text}/records", params={"offset": 0}), "partition", words)
    assert_refused(api_client.get(f"{offsets}/0/records", params={"offset": text}), "offset", words)
    assert_refused(
        api_client.get(f"{offsets}/0/records", params={"offset": 0, "max_bytes": text}), "max_bytes", words
    )
    assert_refused(api_client.get(f"{offsets}/0/segments", params={"limit": text}), "limit", words)


def test_an_integer_written_with_thousands_of_leading_zeros_is_the_number_it_writes(
    api_client: TestClient,
) -> None:
    # The digits that count are the ones after the zeros: "000…07" is 7 on every route, as "07" is,
    # never Python's refusal of a string of more than 4300 digits.
    zeros = "0" * 5000
    offsets = f"/v1/topics/{TOPIC}/partitions"
    plain = api_client.get(f"{offsets}/0/offsets", params={"timestamp": "0"})
    assert plain.status_code == 200, plain.text
    padded = api_client.get(
        f"{offsets}/{zeros}0/offsets", params={"timestamp": "0", "timeout_ms": zeros + "9000"}
    )
    assert padded.status_code == 200, padded.text
    assert padded.json() == plain.json()
    records = api_client.get(
        f"{offsets}/{zeros}0/records", params={"offset": zeros + "7", "max_bytes": zeros + "1"}
    )
    assert records.status_code == 200, records.text
    assert (
        records.json() == api_client.get(f"{offsets}/0/records", params={"offset": 7, "max_bytes": 1}).json()
    )
    segments = api_client.get(f"{offsets}/{zeros}0/segments", params={"limit": zeros + "1"})
    assert segments.status_code == 200, segments.text
    assert len(segments.json()["segments"]) == 1
    assert_refused(
        api_client.get(f"{offsets}/0/offsets", params={"timestamp": "0", "timeout_ms": zeros + "0"}),
        "query.timeout_ms",
        "must be from 1 to",
    )


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("partition_index", True, "true is not an integer"),
        ("partition_index", "0", "the string '0' is not an integer"),
        ("partition_index", 0.0, "0.0 is not an integer"),
        ("partition_index", 2**31, "must be from 0 to 2147483647"),
        ("partition_index", -1, "must be from 0 to 2147483647"),
        ("timestamp", 2**63, "must be from -9223372036854775808 to 9223372036854775807"),
        ("timestamp", "latest", "the string 'latest' is not an integer"),
        ("timestamp", False, "false is not an integer"),
    ],
)
def test_integers_in_a_list_offsets_body_are_json_integers_in_range(
    api_client: TestClient, field: str, value: object, words: str
) -> None:
    partition: dict[str, object] = {"partition_index": 0, "timestamp": 0, field: value}
    answered = post_offsets(api_client, [{"name": TOPIC, "partitions": [partition]}])
    assert_refused(answered, f"topics.0.partitions.0.{field}", words)


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"timeout_ms": True}, "timeout_ms: true is not an integer"),
        ({"timeout_ms": "1000"}, "timeout_ms: the string '1000' is not an integer"),
        ({"isolation_level": True}, "isolation_level: true is not an integer"),
        ({"isolation_level": 2}, "isolation_level: must be from 0 to 1"),
    ],
)
def test_the_fields_of_a_list_offsets_body_are_checked_alike(
    api_client: TestClient, fields: dict[str, object], words: str
) -> None:
    assert_refused(post_offsets(api_client, [], **fields), words)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (True, "true is not an integer"),
        ("4", "the string '4' is not an integer"),
        (4.0, "4.0 is not an integer"),
        (0, "must be 1 to 256, not 0"),
        (2**64, "must be from"),
    ],
)
def test_a_setting_is_changed_only_by_an_integer_in_range(
    in_process: InProcess,
    api_client: TestClient,
    api_stub: rlm_pb2_grpc.RemoteLogManagerStub,
    value: object,
    words: str,
) -> None:
    before = in_process.runtime.dynamic_config.current()
    refused = api_client.patch("/v1/config", json={"remote_log_offset_reader_threads": value})
    assert_refused(refused, "remote_log_offset_reader_threads" if value != 0 else "reader.threads", words)
    assert in_process.runtime.dynamic_config.current() == before
    if isinstance(value, int) and not isinstance(value, bool) and value < 2**31:
        code, details = code_of(
            lambda: api_stub.UpdateConfig(
                pb.UpdateConfigRequest(remote_log_offset_reader_threads=value), metadata=READ
            )
        )
        assert code is grpc.StatusCode.INVALID_ARGUMENT and words in details
        assert in_process.runtime.dynamic_config.current() == before


# -- timestamps -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "words"), BAD_TIMESTAMPS)
def test_timestamps_are_parsed_strictly_on_rest_and_grpc(
    api_client: TestClient, api_stub: rlm_pb2_grpc.RemoteLogManagerStub, text: str, words: str
) -> None:
    get = api_client.get(f"/v1/topics/{TOPIC}/partitions/0/offsets", params={"timestamp": text})
    assert_refused(get, "query.timestamp", words)
    code, details = code_of(
        lambda: api_stub.GetOffset(
            pb.GetOffsetRequest(topic=TOPIC, partition=0, timestamp=text), metadata=READ
        )
    )
    assert code is grpc.StatusCode.INVALID_ARGUMENT and words in details, details


def test_a_timestamp_beyond_int64_is_refused_not_answered_minus_one(api_client: TestClient) -> None:
    path = f"/v1/topics/{TOPIC}/partitions/0/offsets"
    assert (
        api_client.get(path, params={"timestamp": str(2**63 - 1)}).json()["offset"] == -1
    )  # nothing that late
    assert_refused(api_client.get(path, params={"timestamp": str(2**63)}), "must be from")
    assert_refused(api_client.get(path, params={"timestamp": str(2**64 + 5)}), "must be from")
