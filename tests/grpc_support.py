"""Pieces of the gRPC tests: a server on its own event loop thread, a remote store whose reads can
be held, the standard services' calls, and a self-signed certificate for TLS."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2

from rlm.errors import StorageUnavailableError
from rlm.storage.delegate import DelegatingStorage
from rlm.storage.protocol import RemoteStorage


class GatedStorage(DelegatingStorage):
    """The filesystem store, with reads (ranged and streamed, piece by piece) that can be held at a
    gate and a probe that can fail."""

    def __init__(self, inner: RemoteStorage) -> None:
        super().__init__(inner)
        self.open = threading.Event()
        self.open.set()
        self._arrivals = threading.Semaphore(0)
        self.unavailable = False

    @contextlib.contextmanager
    def closed(self) -> Iterator[threading.Semaphore]:
        """Hold every ranged read until the block ends; yields a count of the reads held."""
        self._arrivals = threading.Semaphore(0)
        self.open.clear()
        try:
            yield self._arrivals
        finally:
            self.open.set()

    def at_gate(self) -> None:
        """Wait while the gate is closed (each read of the store does, first)."""
        if not self.open.is_set():
            self._arrivals.release()
            self.open.wait()

    def read_range(self, key: str, start: int, length: int) -> bytes:
        self.at_gate()
        return self.inner.read_range(key, start, length)

    def stream_range(
        self, key: str, start: int, length: int, *, piece_bytes: int = 1 << 23
    ) -> Iterator[bytes]:
        """The inner store's pieces, each read once past the gate (:meth:`at_gate`)."""
        return self._gated(self.inner.stream_range(key, start, length, piece_bytes=piece_bytes))

    def _gated(self, pieces: Iterator[bytes]) -> Iterator[bytes]:
        with contextlib.closing(pieces):  # type: ignore[type-var]
            while True:
                self.at_gate()
                piece = next(pieces, None)
                if piece is None:
                    return
                yield piece

    def object_size(self, key: str) -> int | None:
        if self.unavailable:
            raise StorageUnavailableError("the store cannot be reached", key=key)
        return self.inner.object_size(key)

    def list_keys(self, prefix: str = "") -> Iterator[str]:
        if self.unavailable:  # readiness lists a prefix
            raise StorageUnavailableError("the store cannot be reached", key=prefix)
        return self.inner.list_keys(prefix)


class ServerThread:
    """A gRPC server running on its own event loop thread, as ``rlm serve`` runs it."""

    def __init__(self, build: Callable[[], grpc.aio.Server]) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="grpc-test-loop", daemon=True)
        self.thread.start()

        async def start() -> grpc.aio.Server:
            server = build()
            await server.start()
            return server

        self.server = asyncio.run_coroutine_threadsafe(start(), self.loop).result(10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(None), self.loop).result(10)
        asyncio.run_coroutine_threadsafe(self.loop.shutdown_default_executor(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def health_check(
    channel: grpc.Channel,
) -> grpc.UnaryUnaryMultiCallable[health_pb2.HealthCheckRequest, health_pb2.HealthCheckResponse]:
    """The health service's Check, as any gRPC client calls it (the stubs' types leave it out)."""
    return channel.unary_unary(
        "/grpc.health.v1.Health/Check",
        request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
        response_deserializer=health_pb2.HealthCheckResponse.FromString,
    )


def health_watch(
    channel: grpc.Channel,
) -> grpc.UnaryStreamMultiCallable[health_pb2.HealthCheckRequest, health_pb2.HealthCheckResponse]:
    return channel.unary_stream(
        "/grpc.health.v1.Health/Watch",
        request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
        response_deserializer=health_pb2.HealthCheckResponse.FromString,
    )


def reflection_info(
    channel: grpc.Channel,
) -> grpc.StreamStreamMultiCallable[
    reflection_pb2.ServerReflectionRequest, reflection_pb2.ServerReflectionResponse
]:
    return channel.stream_stream(
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )


def wait_until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Poll ``condition`` (another thread makes it true) until it holds; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the condition did not come true"
        time.sleep(0.01)


def code_of(call: Callable[[], Any]) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    error: Any = caught.value
    return error.code(), error.details()


def self_signed() -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem
