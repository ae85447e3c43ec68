"""Bearer tokens from ``auth.tokens``."""

from __future__ import annotations

import pytest

from api.auth import Scope, TokenAuthenticator
from rlm.config import load_settings
from rlm.errors import ConfigError


def scope_of(auth: TokenAuthenticator, token: str) -> Scope | None:
    return auth.authenticate(f"Bearer {token}")


def test_spaces_around_the_tokens_of_auth_tokens_are_not_part_of_them() -> None:
    # RLM_AUTH_TOKENS="read:abc, admin: def" used to store " def", which no bearer could match.
    auth = TokenAuthenticator.from_settings(load_settings(env={"RLM_AUTH_TOKENS": "read:abc, admin: def "}))
    assert scope_of(auth, "abc") is Scope.READ
    assert scope_of(auth, "def") is Scope.ADMIN


@pytest.mark.parametrize("tokens", ["read:abc,admin: ", "read:abc, admin:", "read: ,admin:x"])
def test_an_empty_token_in_auth_tokens_is_an_error_naming_the_entry(tokens: str) -> None:
    with pytest.raises(ConfigError, match=r"auth.tokens entry \d has no token"):
        TokenAuthenticator.from_settings(load_settings(env={"RLM_AUTH_TOKENS": tokens}))
