"""Bearer tokens from ``auth.tokens`` and from the tokens file (real files, no server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from api.auth import Scope, TokenAuthenticator
from rlm.config import load_settings
from rlm.errors import ConfigError


def from_file(tmp_path: Path, text: str) -> TokenAuthenticator:
    tokens = tmp_path / "tokens"
    tokens.write_text(text)
    return TokenAuthenticator.from_settings(load_settings(env={}, auth_tokens_file=tokens))


def scope_of(auth: TokenAuthenticator, token: str) -> Scope | None:
    return auth.authenticate(f"Bearer {token}")


def test_a_hash_inside_a_token_is_part_of_it(tmp_path: Path) -> None:
    # `#` used to start a comment anywhere: `ab` became an admin token.
    auth = from_file(tmp_path, "admin ab#Zq9xLr2pWvT8sYk\nread r#1 # the dashboards\n")
    assert scope_of(auth, "ab#Zq9xLr2pWvT8sYk") is Scope.ADMIN
    assert scope_of(auth, "ab") is None
    assert scope_of(auth, "r#1") is Scope.READ
    assert scope_of(auth, "r") is None


def test_comments_start_a_line_or_follow_a_space(tmp_path: Path) -> None:
    auth = from_file(tmp_path, "# scope token\n   # indented\nread abc\t# tab then comment\nadmin def #x\n")
    assert scope_of(auth, "abc") is Scope.READ
    assert scope_of(auth, "def") is Scope.ADMIN


def test_a_token_that_would_start_with_a_hash_is_refused_without_showing_it(tmp_path: Path) -> None:
    # `read #secret` is a scope and a comment: a line that names no token is an error.
    with pytest.raises(ConfigError, match=r"line 2: expected 'scope token'.*#") as refused:
        from_file(tmp_path, "admin good\nread #secret-token\n")
    assert "secret-token" not in str(refused.value)


def test_a_token_in_the_place_of_the_scope_is_not_shown(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="line 1: unknown scope") as refused:
        from_file(tmp_path, "s3cr3t-token read\n")
    assert "s3cr3t-token" not in str(refused.value)


def test_spaces_around_the_tokens_of_auth_tokens_are_not_part_of_them() -> None:
    # RLM_AUTH_TOKENS="read:abc, admin: def" used to store " def", which no bearer could match.
    auth = TokenAuthenticator.from_settings(load_settings(env={"RLM_AUTH_TOKENS": "read:abc, admin: def "}))
    assert scope_of(auth, "abc") is Scope.READ
    assert scope_of(auth, "def") is Scope.ADMIN


@pytest.mark.parametrize("tokens", ["read:abc,admin: ", "read:abc, admin:", "read: ,admin:x"])
def test_an_empty_token_in_auth_tokens_is_an_error_naming_the_entry(tokens: str) -> None:
    with pytest.raises(ConfigError, match=r"auth.tokens entry \d has no token"):
        TokenAuthenticator.from_settings(load_settings(env={"RLM_AUTH_TOKENS": tokens}))
