"""Edge input of the APIs that parses but could be answered wrongly or differently per transport.

* ISO-8601 times finer than a millisecond: Kafka compares whole milliseconds, so "the first
  record at or after T" is the first at or after T rounded up; rounding down answers a record
  from before the time asked for. Fractions are read exactly (no float), every digit counted.
"""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from fastapi.testclient import TestClient

from api.gen.rlm.v1 import rlm_pb2 as pb
from api.gen.rlm.v1 import rlm_pb2_grpc
from tests.e2e.conftest import ADMIN_TOKEN
from tests.grpc_support import code_of

READ = (("authorization", f"Bearer {ADMIN_TOKEN}"),)
TOPIC = "orders"
OFFSETS = f"/v1/topics/{TOPIC}/partitions/0/offsets"
#: The first record of the in-process partition (offset 0) has this timestamp; the next
#: (offset 1) is 700 ms later.
FIRST_MS = 1_700_000_000_000


def rest_offset(api_client: TestClient, timestamp: str) -> dict[str, Any]:
    response = api_client.get(OFFSETS, params={"timestamp": timestamp})
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


# -- ISO-8601 fractions ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("iso", "millis"),
    [
        ("2023-11-14T22:13:20Z", FIRST_MS),
        ("2023-11-14T22:13:20.000Z", FIRST_MS),
        ("2023-11-14T22:13:20.001Z", FIRST_MS + 1),
        ("2023-11-14T22:13:20.0005Z", FIRST_MS + 1),
        ("2023-11-14T22:13:20.000001Z", FIRST_MS + 1),
        ("2023-11-14T22:13:20.0000001Z", FIRST_MS + 1),  # beyond microseconds: still after
        ("2023-11-14T22:13:20.000000000Z", FIRST_MS),
        ("2023-11-14T22:13:20,0005Z", FIRST_MS + 1),
        ("2023-11-14T23:13:20.0005+01:00", FIRST_MS + 1),
        ("2023-11-14T22:13:20.700000001Z", FIRST_MS + 701),
    ],
)
def test_an_iso_time_finer_than_a_millisecond_rounds_up_on_rest_and_grpc(
    api_client: TestClient, api_stub: rlm_pb2_grpc.RemoteLogManagerStub, iso: str, millis: int
) -> None:
    expected = rest_offset(api_client, str(millis))
    got = rest_offset(api_client, iso)
    assert got == expected, (iso, got, expected)
    assert got["timestamp"] >= millis  # never a record from before the time asked for
    answer = api_stub.GetOffset(pb.GetOffsetRequest(topic=TOPIC, partition=0, timestamp=iso), metadata=READ)
    assert (answer.offset, answer.timestamp) == (expected["offset"], expected["timestamp"])


def test_the_first_answer_after_a_fraction_is_not_the_record_before_it(api_client: TestClient) -> None:
    at_first = rest_offset(api_client, "2023-11-14T22:13:20Z")
    assert (at_first["offset"], at_first["timestamp"]) == (0, FIRST_MS)
    half_past = rest_offset(api_client, "2023-11-14T22:13:20.0005Z")
    assert half_past["offset"] != 0 and half_past["timestamp"] > FIRST_MS, half_past


@pytest.mark.parametrize("iso", ["1969-12-31T23:59:59.9999Z", "1969-12-31T23:59:59.999999+00:00"])
def test_a_time_a_fraction_of_a_millisecond_before_1970_is_refused(
    api_client: TestClient, api_stub: rlm_pb2_grpc.RemoteLogManagerStub, iso: str
) -> None:
    response = api_client.get(OFFSETS, params={"timestamp": iso})
    assert response.status_code == 400 and "before 1970" in response.json()["error"], response.text
    request = pb.GetOffsetRequest(topic=TOPIC, partition=0, timestamp=iso)
    code, details = code_of(lambda: api_stub.GetOffset(request, metadata=READ))
    assert code is grpc.StatusCode.INVALID_ARGUMENT and "before 1970" in details, details


# -- fields a gRPC request leaves unset -----------------------------------------------------------


def test_a_list_offsets_partition_without_a_timestamp_is_refused_on_rest_and_grpc(
    api_client: TestClient, api_stub: rlm_pb2_grpc.RemoteLogManagerStub
) -> None:
    posted = api_client.post(
        "/v1/list-offsets", json={"topics": [{"name": TOPIC, "partitions": [{"partition_index": 0}]}]}
    )
    assert posted.status_code == 400 and "topics.0.partitions.0.timestamp" in posted.json()["error"]
    # proto3 sends no 0: without presence, a forgotten timestamp would be answered as timestamp 0
    # (the earliest record), where REST refuses it.
    forgotten = pb.ListOffsetsRequest(
        topics=[pb.ListOffsetsTopic(name=TOPIC, partitions=[pb.ListOffsetsPartition(partition_index=0)])]
    )
    code, details = code_of(lambda: api_stub.ListOffsets(forgotten, metadata=READ, timeout=10))
    assert code is grpc.StatusCode.INVALID_ARGUMENT, details
    assert "topics[0].partitions[0].timestamp" in details and "required" in details, details
    zero = pb.ListOffsetsRequest(
        topics=[
            pb.ListOffsetsTopic(
                name=TOPIC, partitions=[pb.ListOffsetsPartition(partition_index=0, timestamp=0)]
            )
        ]
    )
    [answer] = api_stub.ListOffsets(zero, metadata=READ, timeout=10).topics[0].partitions
    assert (answer.error_code, answer.offset, answer.timestamp) == (0, 0, FIRST_MS)


def test_a_fetch_without_an_offset_is_refused_on_rest_and_grpc(
    api_client: TestClient, api_stub: rlm_pb2_grpc.RemoteLogManagerStub
) -> None:
    records = api_client.get(f"/v1/topics/{TOPIC}/partitions/0/records")
    assert records.status_code == 400 and "offset" in records.json()["error"], records.text
    forgotten = pb.FetchRecordsRequest(topic=TOPIC, partition=0)
    code, details = code_of(lambda: api_stub.FetchRecords(forgotten, metadata=READ, timeout=10))
    assert code is grpc.StatusCode.INVALID_ARGUMENT and "offset" in details and "required" in details
    fetched = api_stub.FetchRecords(
        pb.FetchRecordsRequest(topic=TOPIC, partition=0, offset=0, max_bytes=1), metadata=READ, timeout=10
    )
    assert fetched.records[0].offset == 0


# -- Accept ---------------------------------------------------------------------------------------

RECORDS = f"/v1/topics/{TOPIC}/partitions/0/records"
NDJSON = "application/x-ndjson"
OCTET = "application/octet-stream"
ARROW = "application/vnd.apache.arrow.stream"
#: A range of the in-process partition in the broker's log (the session's runtime outlives the
#: apps of other modules, whose end closes its remote readers).
RANGE = {"offset": "100", "end_offset": "103"}


def media_of(response: Any) -> str:
    return str(response.headers["content-type"]).split(";")[0]


@pytest.mark.parametrize(
    ("accept", "media"),
    [
        (f"{NDJSON};q=0, {OCTET}", OCTET),  # q=0: "not acceptable", never the one sent
        (f"{NDJSON};q=0.2, {ARROW};q=0.9", ARROW),
        (f"{OCTET};q=0.5, {NDJSON}", NDJSON),
        (f"{NDJSON}, {OCTET}", NDJSON),  # equal: the server's order, as before
        ("Application/X-NDJSON", NDJSON),  # media types are case-insensitive
        (f"{NDJSON} ; q=1.0", NDJSON),
        ("*/*", NDJSON),  # curl's default: any streamed type will do
        ("application/*;q=0.5, text/html", NDJSON),
    ],
)
def test_a_stream_is_sent_in_the_media_type_accept_prefers(
    api_client: TestClient, accept: str, media: str
) -> None:
    response = api_client.get(RECORDS, params=RANGE, headers={"Accept": accept})
    assert response.status_code == 200, response.text
    assert media_of(response) == media, (accept, response.headers)


@pytest.mark.parametrize(
    "accept", [f"{NDJSON};q=0", f"{NDJSON};q=0, {ARROW};q=0, {OCTET};q=0", "text/html", "*/*;q=0"]
)
def test_a_stream_whose_every_media_type_is_refused_answers_406(api_client: TestClient, accept: str) -> None:
    response = api_client.get(RECORDS, params=RANGE, headers={"Accept": accept})
    assert response.status_code == 406, (accept, response.status_code, response.text[:200])
    assert "Accept" in response.json()["error"]


@pytest.mark.parametrize(
    ("accept", "media"),
    [
        (f"application/json, {OCTET};q=0", "application/json"),
        (f"application/json, {OCTET};q=0.1", "application/json"),
        (f"application/json;q=0.5, {OCTET}", OCTET),
        (f"application/json, {OCTET}", OCTET),  # equal: raw, as before
        (OCTET.upper(), OCTET),
        ("*/*", "application/json"),
        (f"{NDJSON};q=0, application/json", "application/json"),  # q=0 asks no stream
    ],
)
def test_the_bounded_answer_follows_accept_q_values(api_client: TestClient, accept: str, media: str) -> None:
    response = api_client.get(RECORDS, params={"offset": "50", "max_bytes": "1"}, headers={"Accept": accept})
    assert response.status_code == 200, response.text
    assert media_of(response) == media, (accept, response.headers)


# -- unknown partitions ---------------------------------------------------------------------------


@pytest.mark.parametrize(("topic", "partition"), [("nosuch", 0), (TOPIC, 7)])
def test_the_segments_of_an_unknown_partition_are_not_found_like_its_offsets(
    api_client: TestClient, api_stub: rlm_pb2_grpc.RemoteLogManagerStub, topic: str, partition: int
) -> None:
    offsets = api_client.get(f"/v1/topics/{topic}/partitions/{partition}/offsets", params={"timestamp": "0"})
    assert offsets.status_code == 404
    listed = api_client.get(f"/v1/topics/{topic}/partitions/{partition}/segments")
    assert listed.status_code == 404, listed.text  # not an empty page: "known, nothing tiered"
    assert f"{topic}-{partition}" in listed.json()["error"]
    request = pb.ListSegmentsRequest(topic=topic, partition=partition)
    code, details = code_of(lambda: api_stub.ListSegments(request, metadata=READ, timeout=10))
    assert code is grpc.StatusCode.NOT_FOUND and f"{topic}-{partition}" in details, details


def test_the_segments_of_a_known_partition_are_listed(
    api_client: TestClient, api_stub: rlm_pb2_grpc.RemoteLogManagerStub
) -> None:
    listed = api_client.get(f"/v1/topics/{TOPIC}/partitions/0/segments", params={"limit": "1"})
    assert listed.status_code == 200 and len(listed.json()["segments"]) == 1, listed.text
    token = listed.json()["next_page_token"]
    last = api_client.get(
        f"/v1/topics/{TOPIC}/partitions/0/segments",
        params={"page_token": "9" * 18 + ":" + token.split(":", 1)[1]},
    )
    assert last.status_code == 200 and last.json()["segments"] == [], last.text  # past the end: an empty page


# -- stream starts ---------------------------------------------------------------------------------

#: The high watermark and log end offset of the in-process partition.
HIGH_WATERMARK = 136


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
@pytest.mark.parametrize("offset", [HIGH_WATERMARK + 1, 10**12])
def test_a_stream_from_past_the_end_of_the_log_is_out_of_range_like_a_fetch(
    api_client: TestClient, api_stub: rlm_pb2_grpc.RemoteLogManagerStub, offset: int, isolation: str
) -> None:
    fetched = api_client.get(RECORDS, params={"offset": str(offset)})
    assert fetched.status_code == 404 and "outside" in fetched.json()["error"], fetched.text
    params = {"offset": str(offset), "isolation_level": isolation}
    streamed = api_client.get(RECORDS, params=params, headers={"Accept": NDJSON})
    assert streamed.status_code == 404, (streamed.status_code, streamed.headers, streamed.text[:200])
    assert f"offset {offset} of {TOPIC}-0" in streamed.json()["error"]
    assert str(HIGH_WATERMARK) in streamed.json()["error"]
    request = pb.ReadRecordsRequest(
        topic=TOPIC, partition=0, offset=offset, isolation_level=1 if isolation == "read_committed" else 0
    )
    code, details = code_of(lambda: list(api_stub.ReadRecords(request, metadata=READ, timeout=10)))
    assert code is grpc.StatusCode.OUT_OF_RANGE and f"offset {offset}" in details, details


def test_a_stream_from_the_high_watermark_is_empty_not_an_error(
    api_client: TestClient, api_stub: rlm_pb2_grpc.RemoteLogManagerStub
) -> None:
    streamed = api_client.get(RECORDS, params={"offset": str(HIGH_WATERMARK)}, headers={"Accept": NDJSON})
    assert streamed.status_code == 200 and streamed.text == "", streamed.text
    assert streamed.headers["x-rlm-start-offset"] == str(HIGH_WATERMARK)
    request = pb.ReadRecordsRequest(topic=TOPIC, partition=0, offset=HIGH_WATERMARK)
    assert [m.records for m in api_stub.ReadRecords(request, metadata=READ, timeout=10)] in ([], [[]])


# -- a parameter given twice ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "query", "name"),
    [
        (OFFSETS, [("timestamp", "latest"), ("timestamp", "0")], "timestamp"),
        (OFFSETS, [("timestamp", "0"), ("timeout_ms", "5"), ("timeout_ms", "50000")], "timeout_ms"),
        (RECORDS, [("offset", "100"), ("offset", "0")], "offset"),
        (RECORDS, [("offset", "100"), ("end_offset", "101"), ("end_offset", "103")], "end_offset"),
        (RECORDS, [("from_timestamp", "earliest"), ("from_timestamp", "latest")], "from_timestamp"),
        (f"/v1/topics/{TOPIC}/partitions/0/segments", [("limit", "1"), ("limit", "2")], "limit"),
    ],
)
def test_a_query_parameter_given_twice_is_refused_not_one_of_them_taken(
    api_client: TestClient, path: str, query: list[tuple[str, str]], name: str
) -> None:
    response = api_client.get(path, params=query, headers={"Accept": NDJSON})
    assert response.status_code == 400, (query, response.status_code, response.text[:200])
    error = response.json()["error"]
    assert f"query.{name}" in error and "more than once" in error, error


def test_a_parameter_given_twice_without_a_token_is_still_401(api_client: TestClient) -> None:
    response = api_client.get(
        OFFSETS, params=[("timestamp", "0"), ("timestamp", "1")], headers={"Authorization": "Bearer nope"}
    )
    assert response.status_code == 401


# -- ISO-8601 forms -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "iso", ["2023-11-14T22:13:20.0005z", "2023-11-14t22:13:20.0005z", "2023-11-14T22:13:20.0005+00:00"]
)
def test_rfc_3339s_lower_case_z_is_utc_on_rest_and_grpc(
    api_client: TestClient, api_stub: rlm_pb2_grpc.RemoteLogManagerStub, iso: str
) -> None:
    expected = rest_offset(api_client, str(FIRST_MS + 1))
    assert rest_offset(api_client, iso) == expected
    answer = api_stub.GetOffset(pb.GetOffsetRequest(topic=TOPIC, partition=0, timestamp=iso), metadata=READ)
    assert answer.offset == expected["offset"]


@pytest.mark.parametrize("iso", ["2016-12-31T23:59:60Z", "2016-12-31T23:59:60.5+00:00"])
def test_a_leap_second_is_refused_in_words_that_say_so(
    api_client: TestClient, api_stub: rlm_pb2_grpc.RemoteLogManagerStub, iso: str
) -> None:
    response = api_client.get(OFFSETS, params={"timestamp": iso})
    assert response.status_code == 400 and "leap second" in response.json()["error"], response.text
    request = pb.GetOffsetRequest(topic=TOPIC, partition=0, timestamp=iso)
    code, details = code_of(lambda: api_stub.GetOffset(request, metadata=READ))
    assert code is grpc.StatusCode.INVALID_ARGUMENT and "leap second" in details, details


def test_a_range_argument_whose_name_is_percent_encoded_still_asks_a_stream(api_client: TestClient) -> None:
    # '_' may be written %5F: the name is the same once decoded, as the routes read it.
    response = api_client.get(f"{RECORDS}?offset=100&end%5Foffset=102", headers={"Accept": OCTET})
    assert response.status_code == 200, response.text
    assert response.headers["x-rlm-end-offset"] == "102", response.headers
