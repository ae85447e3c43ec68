"""Fixtures of the end-to-end tests: ``rlm serve`` as a real subprocess on free ports, and a small
tiered partition served in-process for the fuzzing and authentication tests.

The subprocess is the program users run (``python -m rlm serve --config FILE``); its settings are
a YAML file of Kafka-style keys, its log goes to a file the tests read back.
"""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import yaml
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry

from api.auth import TokenAuthenticator
from api.gen.rlm.v1 import rlm_pb2_grpc
from api.grpc_server import build_grpc_server
from api.rest.app import create_app
from rlm.bootstrap import Runtime, build_runtime
from rlm.config import Settings
from rlm.log.logdir import LogDir
from rlm.log.model import Codec
from tests.grpc_support import ServerThread, free_port
from tests.lookup_support import (
    TOPIC,
    Backend,
    BatchKind,
    BatchPlan,
    PartitionPlan,
    tier_partition,
    write_partition,
)

READ_TOKEN = "e2e-read-token-3b9f61c2"
ADMIN_TOKEN = "e2e-admin-token-c47d0a95"
#: How long ``rlm serve`` may take to answer ``/readyz`` (imports, schema check, both servers).
READY_TIMEOUT_S = 30.0
#: How long a graceful stop may take: finish requests in flight and the segment being copied.
STOP_TIMEOUT_S = 30.0


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def write_config(path: Path, settings: Mapping[str, Any]) -> Path:
    """Write ``rlm serve``'s YAML settings file (Kafka-style keys) and return its path."""
    path.write_text(yaml.safe_dump(dict(settings), sort_keys=False))
    return path


def subprocess_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This environment without any ``RLM_*`` setting (the YAML file alone configures the server)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLM_")}
    env.update(extra or {})
    return env


@dataclass
class ServeProcess:
    """A running ``rlm serve``: its REST base URL, gRPC target, log file and process."""

    process: subprocess.Popen[bytes]
    http_url: str
    grpc_target: str
    log_path: Path
    ca_file: Path | None = None
    exit_code: int | None = field(default=None)

    def client(self, **kwargs: Any) -> httpx.Client:
        """An HTTP client of the REST API (trusting the server's certificate when it uses TLS)."""
        verify: ssl.SSLContext | bool = True
        if self.ca_file is not None:
            verify = ssl.create_default_context(cafile=str(self.ca_file))
        return httpx.Client(base_url=self.http_url, timeout=30.0, verify=verify, **kwargs)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Poll ``/readyz`` until it answers 200; fail with the server's log if it exits or times out."""
        deadline = time.monotonic() + timeout_s
        with self.client() as client:
            while True:
                if self.process.poll() is not None:
                    pytest.fail(f"rlm serve exited with {self.process.returncode}:\n{self.log_text()}")
                try:
                    if client.get("/readyz").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    self.kill()
                    pytest.fail(f"rlm serve was not ready within {timeout_s} s:\n{self.log_text()}")
                time.sleep(0.1)

    def terminate(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """Send SIGTERM and wait for the exit code (the process is killed if it overruns)."""
        if self.exit_code is not None:
            return self.exit_code
        self.process.send_signal(signal.SIGTERM)
        try:
            self.exit_code = self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"rlm serve did not stop within {timeout_s} s of SIGTERM:\n{self.log_text()}")
        return self.exit_code

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self.exit_code = self.process.returncode


def start_serve(
    directory: Path,
    settings: Mapping[str, Any],
    *,
    env: Mapping[str, str] | None = None,
    log_level: str = "info",
    ca_file: Path | None = None,
    name: str = "serve",
) -> ServeProcess:
    """Start ``rlm serve`` with ``settings`` (plus free loopback ports) and wait until it is ready."""
    http_port, grpc_port = free_port(), free_port()
    config = write_config(
        directory / f"{name}.yaml",
        {
            **settings,
            "http.host": "127.0.0.1",
            "http.port": http_port,
            "grpc.host": "127.0.0.1",
            "grpc.port": grpc_port,
        },
    )
    log_path = directory / f"{name}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "rlm", "serve", "--config", str(config), "--log-level", log_level],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=subprocess_env(env),
        )
    scheme = "https" if ca_file is not None else "http"
    served = ServeProcess(
        process, f"{scheme}://127.0.0.1:{http_port}", f"127.0.0.1:{grpc_port}", log_path, ca_file
    )
    try:
        served.wait_ready()
    except BaseException:
        served.kill()
        raise
    return served


def upgrade_schema(url: str) -> None:
    """Create the metadata schema with the CLI, as an operator does before the first start."""
    done = subprocess.run(
        [sys.executable, "-m", "rlm", "db", "upgrade", "--url", url],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        check=False,
    )
    assert done.returncode == 0, done.stderr


# -- a small tiered partition served in-process ---------------------------------------------------

_KINDS: tuple[BatchKind, ...] = ("plain", "plain", "commit", "plain", "abort")
#: Out-of-order CreateTime, every codec, transactions, a leader change; half the tiered segments
#: deleted locally, so answers come from both tiers.
SMALL_PLAN = PartitionPlan(
    batches=tuple(
        BatchPlan(
            timestamps=(i * 100, i * 100 + 700, i * 100 + 30),
            codec=tuple(Codec)[i % len(Codec)],
            kind=_KINDS[i % len(_KINDS)],
            new_epoch=i == 20,
            value_bytes=50,
        )
        for i in range(40)
    ),
    segment_bytes=2048,
    tiering="remote",
    local_deleted=0.5,
)


@dataclass
class InProcess:
    """A wired runtime over a tiered ``orders-0`` (auth on: two tokens in a secrets file)."""

    runtime: Runtime
    settings: Settings
    tokens_file: Path

    def app(self) -> FastAPI:
        """A REST app on the runtime. Each user takes its own: an app's lifespan ends with the test
        that started it, and a shut-down app answers 503."""
        return create_app(self.settings, runtime_=self.runtime)


@pytest.fixture(scope="session")
def in_process(
    tmp_path_factory: pytest.TempPathFactory,
    sqlite_template: Path,
) -> Iterator[InProcess]:
    root = tmp_path_factory.mktemp("in-process")
    log_dir = root / "logs"
    truth = write_partition(log_dir, SMALL_PLAN)
    tokens_file = root / "tokens"
    tokens_file.write_text(f"# scope token\nread {READ_TOKEN}\nadmin {ADMIN_TOKEN}\n")
    settings = Backend("sqlite-fs", sqlite_template=sqlite_template).settings(
        root, log_dir, auth_tokens_file=tokens_file
    )
    runtime = build_runtime(settings, registry=CollectorRegistry())
    try:
        tier_partition(runtime, LogDir(log_dir).partition(TOPIC, 0), truth, SMALL_PLAN)
        assert 0 < truth.local_start_offset <= truth.highest_copied, "the partition must span both tiers"
        yield InProcess(runtime, settings, tokens_file)
    finally:
        runtime.close()


@pytest.fixture(scope="module")
def api_client(in_process: InProcess) -> Iterator[TestClient]:
    """A REST client of the in-process app, with an admin token."""
    with TestClient(in_process.app(), headers=bearer(ADMIN_TOKEN)) as client:
        yield client


@pytest.fixture(scope="module")
def api_stub(in_process: InProcess) -> Iterator[rlm_pb2_grpc.RemoteLogManagerStub]:
    """A gRPC stub of a server on the in-process runtime (send the admin token's metadata)."""
    port = free_port()
    authenticator = TokenAuthenticator.from_settings(in_process.settings)
    server = ServerThread(lambda: build_grpc_server(in_process.runtime, authenticator, port=port))
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield rlm_pb2_grpc.RemoteLogManagerStub(channel)
    finally:
        channel.close()
        server.stop()
