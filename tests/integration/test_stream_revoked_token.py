"""Streams whose bearer token is revoked while they run, over real HTTP (uvicorn) and gRPC.

The tokens are a mounted Secret's file, read again when it changes (at most once a second, on a
clock the tests move). The remote store holds its reads at a gate: a stream has sent its status and
waits for its first read when its token is revoked. It then ends at its next piece with the
transport's authentication error (an NDJSON error line with 401; raw and Arrow bodies cut;
UNAUTHENTICATED). A reload that keeps the stream's token leaves the stream whole.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import httpx
import pytest

from api.auth import TokenAuthenticator
from api.gen.rlm.v1 import rlm_pb2 as pb
from api.gen.rlm.v1 import rlm_pb2_grpc
from api.grpc_server import build_grpc_server
from api.rest import errors
from tests.clock import FakeClock
from tests.grpc_support import GatedStorage, ServerThread, code_of, free_port
from tests.integration.test_stream import (
    ARROW,
    NDJSON,
    OCTET,
    URL,
    expected,
    message_records,
    records_of,
    stop_grpc,
)
from tests.integration.test_stream_limits import Served, gated_partition
from tests.lookup_support import TOPIC, Tiered
from tests.mounted_secret import MountedSecret

#: A token that stays in the file, so that it never holds no token.
KEEPER = "keeper-token-0b7d"


@dataclass
class Guarded:
    tiered: Tiered
    gate: GatedStorage
    secret: MountedSecret
    clock: FakeClock[float]
    rest: Served
    stub: rlm_pb2_grpc.RemoteLogManagerStub

    def tokens(self, *tokens: str) -> None:
        """Make ``tokens`` the file's read tokens, read again at the next look (a second later)."""
        self.secret.update("".join(f"read {token}\n" for token in (KEEPER, *tokens)))
        self.clock.advance(1.0)


@pytest.fixture(scope="module")
def guarded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Guarded]:
    root = tmp_path_factory.mktemp("stream-revoked")
    tiered, gate = gated_partition(request, root, GatedStorage)
    rt = tiered.runtime
    secret = MountedSecret(root / "secrets", f"read {KEEPER}\n")
    clock = FakeClock(100.0)
    authenticator = TokenAuthenticator({}, tokens_file=secret.path, clock=clock)
    rest = Served(rt, authenticator)
    port = free_port()
    grpc_server = ServerThread(lambda: build_grpc_server(rt, authenticator, port=port))
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield Guarded(tiered, gate, secret, clock, rest, rlm_pb2_grpc.RemoteLogManagerStub(channel))
    finally:
        channel.close()
        stop_grpc(grpc_server, rt)
        rest.stop()
        rt.close()


@dataclass
class Answer:
    body: bytes
    headers: dict[str, str]
    cut: bool
    """The connection closed before the chunked body's end."""


def rest_stream(guarded: Guarded, media: str, token: str, then: tuple[str, ...]) -> Answer:
    """A stream of the whole partition opened with ``token``; once it waits for its first read,
    the file's tokens become ``then``."""
    # A range argument: octet-stream alone asks for the bounded answer.
    params: dict[str, str | int] = {
        "offset": guarded.tiered.truth.log_start_offset,
        "isolation_level": "read_uncommitted",
    }
    headers = {"Accept": media, "Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=guarded.rest.url, timeout=30) as client:
        with guarded.gate.closed() as held:
            answer = client.send(
                client.build_request("GET", URL, params=params, headers=headers), stream=True
            )
            assert answer.status_code == 200
            assert held.acquire(timeout=10)  # the stream has started and waits for its first read
            guarded.tokens(*then)
        body, cut = bytearray(), False
        try:
            for piece in answer.iter_raw():
                body += piece
        except httpx.RemoteProtocolError:
            cut = True
        finally:
            answer.close()
    return Answer(bytes(body), dict(answer.headers), cut)


def reports(caplog: pytest.LogCaptureFixture) -> list[tuple[str, int, str, bool]]:
    """What the server logged at WARNING or above: logger, level, message, whether with a traceback."""
    return [
        (r.name, r.levelno, r.getMessage(), r.exc_info is not None)
        for r in caplog.records
        if r.levelno >= logging.WARNING
    ]


@pytest.mark.parametrize("media", [NDJSON, OCTET, ARROW])
def test_a_rest_stream_ends_when_its_token_is_revoked(
    guarded: Guarded, media: str, caplog: pytest.LogCaptureFixture
) -> None:
    token = f"rest-{media.rsplit('/', 1)[-1]}"
    guarded.tokens(token)
    caplog.set_level(logging.WARNING)
    answer = rest_stream(guarded, media, token, then=())
    if media == NDJSON:
        assert not answer.cut
        last = json.loads(answer.body.decode().splitlines()[-1])
        assert last["status"] == 401 and "revoked" in last["error"], last
        assert token not in last["error"]
    else:
        assert answer.cut  # never a body that looks whole
        # Reported once, before the connection closed: a warning naming the request, no error,
        # no traceback (uvicorn's report of the exception left out).
        [(logger, level, message, traceback)] = reports(caplog)
        assert (logger, level, traceback) == (errors.__name__, logging.WARNING, False)
        assert message.startswith(f"GET {URL}: stream cut: the bearer token of this stream was revoked")
        assert token not in message
    # The token is refused from now on, as for any request.
    with httpx.Client(base_url=guarded.rest.url, timeout=30) as client:
        refused = client.get(
            URL, params={"offset": "0"}, headers={"Accept": NDJSON, "Authorization": f"Bearer {token}"}
        )
        assert refused.status_code == 401


@pytest.mark.parametrize("media", [NDJSON, OCTET, ARROW])
def test_a_rest_stream_whose_token_stays_runs_to_its_end(guarded: Guarded, media: str) -> None:
    token = f"kept-{media.rsplit('/', 1)[-1]}"
    guarded.tokens(token, "another-token")
    answer = rest_stream(guarded, media, token, then=(token,))  # another-token revoked
    assert not answer.cut
    truth = guarded.tiered.truth
    records = records_of(media, answer.body, answer.headers)
    assert records == expected(truth, truth.log_start_offset, None, False)


def grpc_stream(
    guarded: Guarded, raw: bool, token: str, then: tuple[str, ...]
) -> Iterator[pb.ReadRecordsResponse]:
    """A ``ReadRecords`` call of the whole partition opened with ``token``; once it waits for its
    first read, the file's tokens become ``then``."""
    start = guarded.tiered.truth.log_start_offset
    request = pb.ReadRecordsRequest(topic=TOPIC, partition=0, offset=start, raw=raw)
    with guarded.gate.closed() as held:
        call = guarded.stub.ReadRecords(request, metadata=(("authorization", f"Bearer {token}"),), timeout=30)
        assert held.acquire(timeout=10)
        guarded.tokens(*then)
    return call


@pytest.mark.parametrize("raw", [False, True], ids=["records", "raw"])
def test_a_grpc_stream_ends_unauthenticated_when_its_token_is_revoked(guarded: Guarded, raw: bool) -> None:
    token = f"grpc-{raw}"
    guarded.tokens(token)
    call = grpc_stream(guarded, raw, token, then=())
    code, details = code_of(lambda: list(call))
    assert code is grpc.StatusCode.UNAUTHENTICATED
    assert "revoked" in details and token not in details


@pytest.mark.parametrize("raw", [False, True], ids=["records", "raw"])
def test_a_grpc_stream_whose_token_stays_runs_to_its_end(guarded: Guarded, raw: bool) -> None:
    token = f"grpc-kept-{raw}"
    guarded.tokens(token, "another-token")
    call = grpc_stream(guarded, raw, token, then=(token,))
    truth = guarded.tiered.truth
    assert message_records(call, raw) == expected(truth, truth.log_start_offset, None, False)
