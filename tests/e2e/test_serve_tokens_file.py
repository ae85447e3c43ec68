"""``rlm serve`` refusing a tokens file it cannot take as meant, before it serves anything: a real
process, its settings in a YAML file, the tokens in ``auth.tokens.file``."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import subprocess_env, write_config
from tests.grpc_support import free_port

#: The process runs in another directory than this checkout's: it imports it from here.
ENV = {"PYTHONPATH": str(Path(__file__).resolve().parents[2])}
#: Long enough for a refusal; a server that starts instead runs on and is stopped there.
REFUSAL_TIMEOUT_S = 30


def serve_with(tmp_path: Path, sqlite_template: Path, tokens_file: str, **settings: object) -> str:
    """Run ``rlm serve`` with ``tokens_file`` as its tokens file; returns what it printed, once it
    was refused (the test fails when it started instead)."""
    tokens = tmp_path / "tokens"
    tokens.write_text(tokens_file)
    db = tmp_path / "meta.db"
    shutil.copyfile(sqlite_template, db)
    config = write_config(
        tmp_path / "serve.yaml",
        {
            "metadata.url": f"sqlite:///{db}",
            "remote.url": (tmp_path / "remote").as_uri(),
            "auth.tokens.file": str(tokens),
            "http.host": "127.0.0.1",
            "http.port": free_port(),
            "grpc.host": "127.0.0.1",
            "grpc.port": free_port(),
            **settings,
        },
    )
    try:
        done = subprocess.run(
            [sys.executable, "-m", "rlm", "serve", "--config", str(config)],
            capture_output=True,
            cwd=tmp_path,
            env=subprocess_env(ENV),
            timeout=REFUSAL_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("rlm serve started with the tokens file instead of refusing it")
    assert done.returncode != 0
    return (done.stdout + done.stderr).decode()


@pytest.mark.parametrize("first,second", [("read", "admin"), ("admin", "read")])
def test_a_token_listed_twice_with_two_scopes_is_refused_naming_the_lines_not_the_token(
    tmp_path: Path, sqlite_template: Path, first: str, second: str
) -> None:
    # The last line used to win: a token given to the dashboards as read-only became an admin one.
    printed = serve_with(
        tmp_path,
        sqlite_template,
        f"# scope token\n{first} dup-s3cr3t-token\nread other-token\n{second} dup-s3cr3t-token\n",
    )
    assert "lines 2 and 4" in printed and "two scopes" in printed, printed
    assert "dup-s3cr3t" not in printed


def test_an_empty_tokens_file_beside_auth_tokens_is_refused_at_start(
    tmp_path: Path, sqlite_template: Path
) -> None:
    # Read again while running, an emptied file is an error that keeps the tokens read before; at
    # start it used to be taken silently, the server running on auth.tokens alone.
    printed = serve_with(
        tmp_path, sqlite_template, "# the tokens are still to come\n", **{"auth.tokens": "admin:env-token"}
    )
    assert "holds no token" in printed and str(tmp_path / "tokens") in printed, printed
    assert "env-token" not in printed
