"""Bearer tokens and TLS on the APIs.

* Every route of the REST app but the probes and the API documentation refuses a missing or wrong
  token with 401 and ``WWW-Authenticate: Bearer``; a read token may not change settings (403); an
  admin token may. The routes are read from the app itself, so a new route cannot slip through.
* ``rlm serve`` with TLS and tokens from a secrets file: HTTPS works for a client trusting the
  certificate and fails for one that does not; every gRPC method refuses a missing or wrong token;
  no token ever reaches a log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import iter_route_contexts
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from api.gen.rlm.v1 import rlm_pb2 as pb
from rlm.log.produce import ProduceSpec, produce
from tests.e2e.conftest import ADMIN_TOKEN, READ_TOKEN, InProcess, ServeProcess, bearer, start_serve
from tests.grpc_support import self_signed
from tests.lookup_support import TOPIC
from tests.mounted_secret import MountedSecret

#: Routes anyone may call: the probes and the API's documentation.
PUBLIC = {"/healthz", "/readyz", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"}
OFFSETS = f"/v1/topics/{TOPIC}/partitions/0/offsets"


@dataclass(frozen=True)
class Call:
    """A well-formed request to a protected route: only the token can make it fail."""

    params: dict[str, Any] | None = None
    json: dict[str, Any] | None = None
    admin_only: bool = False


#: One valid request per protected route, keyed by (method, route path).
CALLS = {
    ("GET", "/v1/topics/{topic}/partitions/{partition}/offsets"): Call({"timestamp": "earliest"}),
    ("POST", "/v1/list-offsets"): Call(
        json={"topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "timestamp": -3}]}]}
    ),
    ("GET", "/v1/topics/{topic}/partitions/{partition}/records"): Call({"offset": 100}),
    ("GET", "/v1/topics/{topic}/partitions/{partition}/segments"): Call({"limit": 2}),
    ("GET", "/v1/topics"): Call(),
    ("GET", "/v1/config"): Call(),
    ("PATCH", "/v1/config"): Call(json={"remote_log_offset_reader_threads": 5}, admin_only=True),
    ("GET", "/metrics"): Call(),
}
#: Authorization values that name no valid token.
WRONG = [
    "Bearer not-a-token",
    f"Bearer {READ_TOKEN}x",
    f"Basic {READ_TOKEN}",
    READ_TOKEN,
    "Bearer ",
    "",
]


@pytest.fixture
def app(in_process: InProcess) -> FastAPI:
    return in_process.app()


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app) as test_client:
        yield test_client


def protected_routes(app: FastAPI) -> set[tuple[str, str]]:
    found = set()
    for route in iter_route_contexts(app.routes):
        assert route.path is not None and route.methods is not None
        if route.path not in PUBLIC:
            found |= {(method, route.path) for method in route.methods}
    return found


def concrete(path: str) -> str:
    return path.format(topic=TOPIC, partition=0)


def send(client: TestClient, method: str, path: str, headers: dict[str, str] | None = None) -> httpx.Response:
    call = CALLS[(method, path)]
    response: httpx.Response = client.request(
        method, concrete(path), params=call.params, json=call.json, headers=headers
    )
    return response


def test_every_protected_route_refuses_a_missing_or_wrong_token(app: FastAPI, client: TestClient) -> None:
    assert protected_routes(app) == set(CALLS)
    for method, path in CALLS:
        for headers in [None, *({"Authorization": value} for value in WRONG)]:
            response = send(client, method, path, headers)
            assert response.status_code == 401, (method, path, headers, response.text)
            assert response.headers["www-authenticate"] == "Bearer"
            assert response.json()["error"].startswith("a valid bearer token is required")


def test_a_read_token_reads_and_only_an_admin_token_changes_settings(client: TestClient) -> None:
    for (method, path), call in CALLS.items():
        as_reader = send(client, method, path, bearer(READ_TOKEN))
        as_admin = send(client, method, path, bearer(ADMIN_TOKEN))
        assert as_admin.status_code == 200, (method, path, as_admin.text)
        if call.admin_only:
            assert as_reader.status_code == 403, (method, path, as_reader.text)
            assert as_reader.json()["error"] == "this token's scope is read; admin is required"
        else:
            assert as_reader.status_code == 200, (method, path, as_reader.text)


def test_probes_and_documentation_need_no_token(client: TestClient) -> None:
    for path in PUBLIC:
        response = client.get(path)
        assert response.status_code == 200, (path, response.text)


def test_paths_that_do_not_exist_need_a_token_too(client: TestClient) -> None:
    assert client.get("/v1/nothing-here").status_code == 401
    assert client.get("/v1/nothing-here", headers=bearer(READ_TOKEN)).status_code == 404


def test_no_token_reaches_the_logs(client: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    send(client, "GET", "/v1/topics/{topic}/partitions/{partition}/offsets", bearer(READ_TOKEN + "x"))
    send(client, "PATCH", "/v1/config", bearer(READ_TOKEN))
    send(client, "GET", "/v1/topics/{topic}/partitions/{partition}/records", bearer(ADMIN_TOKEN))
    # A lookup that fails inside the server is logged with the request line.
    client.get(OFFSETS, params={"timestamp": "0", "timeout_ms": 1}, headers=bearer(READ_TOKEN))
    assert caplog.records, "nothing was logged: the check below would prove nothing"
    for token in (READ_TOKEN, ADMIN_TOKEN):
        assert token not in caplog.text


# -- rlm serve with TLS and a secrets file ------------------------------------------------------


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[ServeProcess]:
    root = tmp_path_factory.mktemp("tls")
    produce(root / "logs", ProduceSpec(topics=1, partitions=1, records=400, segment_bytes=8 * 1024, seed=3))
    database = root / "metadata.db"
    database.write_bytes(sqlite_template.read_bytes())
    cert, key = self_signed()
    (root / "cert.pem").write_bytes(cert)
    (root / "key.pem").write_bytes(key)
    (root / "tokens").write_text(f"# rlm API tokens\nread {READ_TOKEN}\nadmin {ADMIN_TOKEN}  # operators\n")
    settings = {
        "log.dirs": [str(root / "logs")],
        "metadata.url": f"sqlite:///{database}",
        "remote.url": (root / "remote").as_uri(),
        "remote.log.index.cache.dir": str(root / "index-cache"),
        "remote.log.manager.task.interval.ms": 200,
        "auth.tokens.file": str(root / "tokens"),
        "tls.cert.file": str(root / "cert.pem"),
        "tls.key.file": str(root / "key.pem"),
        # The sample's timestamps are from 2023: with a retention time, remote retention would
        # soon delete the first tiered segments and move the earliest offset the tests ask for.
        "topics": {"defaults": {"retention.ms": -1}},
    }
    served = start_serve(root, settings, log_level="debug", ca_file=root / "cert.pem")
    try:
        yield served
    finally:
        served.terminate()


def test_rest_over_tls_trusts_only_its_certificate(tls_server: ServeProcess) -> None:
    assert tls_server.http_url.startswith("https://")
    with tls_server.client(headers=bearer(READ_TOKEN)) as client:
        response = client.get(OFFSETS.replace(TOPIC, "orders"), params={"timestamp": "earliest"})
        assert response.status_code == 200, response.text
        assert response.json()["offset"] == 0
        assert client.get("/v1/topics").status_code == 200
        assert client.get("/v1/topics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    with pytest.raises(httpx.ConnectError), httpx.Client(verify=True) as untrusting:
        untrusting.get(f"{tls_server.http_url}/healthz")


def test_every_grpc_method_refuses_a_missing_or_wrong_token(tls_server: ServeProcess) -> None:
    assert tls_server.ca_file is not None
    credentials = grpc.ssl_channel_credentials(root_certificates=tls_server.ca_file.read_bytes())
    service = pb.DESCRIPTOR.services_by_name["RemoteLogManager"]
    with grpc.secure_channel(tls_server.grpc_target, credentials) as channel:
        for method in service.methods:
            request_type: Any = getattr(pb, method.input_type.name)
            response_type: Any = getattr(pb, method.output_type.name)
            call = channel.unary_unary(
                f"/{service.full_name}/{method.name}",
                request_serializer=request_type.SerializeToString,
                response_deserializer=response_type.FromString,
            )
            for metadata in [(), (("authorization", "Bearer wrong"),), (("authorization", READ_TOKEN),)]:
                with pytest.raises(grpc.RpcError) as refused:
                    call(request_type(), metadata=metadata, timeout=10)
                assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED, method.name
        get_offset = pb.GetOffsetRequest(topic="orders", partition=0, timestamp="earliest")
        stub_call = channel.unary_unary(
            f"/{service.full_name}/GetOffset",
            request_serializer=pb.GetOffsetRequest.SerializeToString,
            response_deserializer=pb.GetOffsetResponse.FromString,
        )
        answer = stub_call(get_offset, metadata=(("authorization", f"Bearer {READ_TOKEN}"),), timeout=10)
        assert answer.offset == 0


def test_the_server_logs_no_token(tls_server: ServeProcess) -> None:
    with tls_server.client() as client:
        client.get("/v1/topics", headers={"Authorization": f"Bearer {READ_TOKEN}x"})
        client.patch("/v1/config", json={}, headers=bearer(READ_TOKEN))
        client.get("/v1/config", headers=bearer(ADMIN_TOKEN))
    log = tls_server.log_text()  # written a line at a time, as it happens (debug level)
    assert '"message": "serving"' in log
    for token in (READ_TOKEN, ADMIN_TOKEN):
        assert token not in log


# -- tokens rotated under a running rlm serve ----------------------------------------------------


def test_a_rotated_tokens_secret_takes_effect_without_a_restart(
    tmp_path: Path, sqlite_template: Path
) -> None:
    # The kubelet swaps a mounted Secret's ..data symlink: a revoked token must stop working on
    # both APIs, and a new one start working, without restarting the sidecar.
    database = tmp_path / "metadata.db"
    database.write_bytes(sqlite_template.read_bytes())
    secret = MountedSecret(tmp_path / "secrets", f"read {READ_TOKEN}\nadmin {ADMIN_TOKEN}\n")
    settings = {
        "metadata.url": f"sqlite:///{database}",
        "remote.url": (tmp_path / "remote").as_uri(),
        "remote.log.index.cache.dir": str(tmp_path / "index-cache"),
        "auth.tokens.file": str(secret.path),
    }
    served = start_serve(tmp_path, settings, name="rotating")
    new_token = "e2e-rotated-token-5d21"

    def rest(token: str) -> int:
        with served.client(headers=bearer(token)) as client:
            return client.get("/v1/config").status_code

    def grpc_code(token: str) -> grpc.StatusCode:
        with grpc.insecure_channel(served.grpc_target) as channel:
            call = channel.unary_unary(
                "/rlm.v1.RemoteLogManager/GetConfig",
                request_serializer=pb.GetConfigRequest.SerializeToString,
                response_deserializer=pb.DynamicConfig.FromString,
            )
            try:
                call(pb.GetConfigRequest(), metadata=(("authorization", f"Bearer {token}"),), timeout=10)
            except grpc.RpcError as exc:
                return exc.code()
            return grpc.StatusCode.OK

    def tokens_file_unreadable() -> float:
        with served.client(headers=bearer(ADMIN_TOKEN)) as client:
            exported = client.get("/metrics").text
        families = text_string_to_metric_families(exported)
        return next(f.samples[0].value for f in families if f.name == "rlm_auth_tokens_file_unreadable")

    try:
        assert rest(READ_TOKEN) == 200 and grpc_code(READ_TOKEN) == grpc.StatusCode.OK
        secret.update(f"read {new_token}\nadmin {ADMIN_TOKEN}\n")
        wait_until(lambda: rest(READ_TOKEN) == 401)
        assert grpc_code(READ_TOKEN) == grpc.StatusCode.UNAUTHENTICATED
        assert rest(new_token) == 200 and grpc_code(new_token) == grpc.StatusCode.OK
        assert rest(ADMIN_TOKEN) == 200

        assert tokens_file_unreadable() == 0
        secret.update("read\n")  # broken: the tokens read last stay in use
        time.sleep(2.5)
        assert rest(new_token) == 200 and grpc_code(new_token) == grpc.StatusCode.OK
        assert "line 1: expected 'scope token'" in served.log_text()
        assert tokens_file_unreadable() == 1
    finally:
        served.terminate()
    for token in (READ_TOKEN, ADMIN_TOKEN, new_token):
        assert token not in served.log_text()


def wait_until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the change did not take effect in time"
        time.sleep(0.1)
