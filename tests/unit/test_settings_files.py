"""Secrets from files: ``RLM_<NAME>_FILE`` holds the value of ``RLM_<NAME>`` (a mounted Secret)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlm.cli import main
from rlm.config import load_settings
from rlm.errors import ConfigError


def _secret(tmp_path: Path, name: str, content: str) -> str:
    path = tmp_path / name
    path.write_text(content)
    return str(path)


def test_a_setting_is_read_from_the_file_its_variable_names(tmp_path: Path) -> None:
    url = "postgresql+psycopg://rlm:s3cret@db:5432/rlm"
    env = {
        "RLM_METADATA_URL_FILE": _secret(tmp_path, "metadata-url", url + "\n"),  # as `echo` writes it
        "RLM_AUTH_TOKENS": "read:abc",
        "RLM_RETENTION_MS_FILE": _secret(tmp_path, "retention", "1000"),
    }
    settings = load_settings(env=env)
    assert settings.metadata_url == url
    assert settings.topic_defaults.retention_ms == 1000


def test_auth_tokens_file_keeps_its_own_meaning(tmp_path: Path) -> None:
    tokens = _secret(tmp_path, "tokens", "read abc\n")
    settings = load_settings(env={"RLM_AUTH_TOKENS_FILE": tokens})
    assert settings.auth_tokens_file == Path(tokens)
    assert settings.auth_tokens == ""


def test_the_variable_and_its_file_together_are_an_error(tmp_path: Path) -> None:
    env = {"RLM_METADATA_URL": "sqlite://", "RLM_METADATA_URL_FILE": _secret(tmp_path, "u", "sqlite://")}
    with pytest.raises(ConfigError, match="RLM_METADATA_URL and RLM_METADATA_URL_FILE are both set"):
        load_settings(env=env)


def test_an_unreadable_file_is_named_without_its_content(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(ConfigError, match=f"RLM_METADATA_URL_FILE: cannot read {missing}"):
        load_settings(env={"RLM_METADATA_URL_FILE": str(missing)})
    binary = _secret(tmp_path, "binary", "")
    Path(binary).write_bytes(b"\xff\xfe secret")
    with pytest.raises(ConfigError) as err:
        load_settings(env={"RLM_METADATA_URL_FILE": binary})
    assert "secret" not in str(err.value).replace(binary, "")


def test_db_upgrade_takes_the_url_from_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [k for k in os.environ if k.startswith("RLM_")]:
        monkeypatch.delenv(name)
    database = tmp_path / "from-secret.db"
    monkeypatch.setenv("RLM_METADATA_URL_FILE", _secret(tmp_path, "url", f"sqlite:///{database}\n"))
    assert main(["db", "upgrade"]) == 0
    assert database.stat().st_size > 0
    assert main(["db", "current"]) == 0
