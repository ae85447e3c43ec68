"""Bearer tokens from ``auth.tokens`` and from the tokens file (real files, no server)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from api.auth import Scope, TokenAuthenticator, TokenRevokedError
from rlm.config import load_settings
from rlm.errors import ConfigError
from rlm.metrics import Metrics
from tests.mounted_secret import MountedSecret


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


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def watching(secret: MountedSecret, clock: Clock, **tokens: Scope) -> TokenAuthenticator:
    return TokenAuthenticator(tokens, tokens_file=secret.path, clock=clock)


def test_a_rotated_secret_is_read_again_within_a_second(tmp_path: Path) -> None:
    clock = Clock()
    secret = MountedSecret(tmp_path / "secrets", "read old-read\nadmin old-admin\n")
    auth = watching(secret, clock, env_token=Scope.READ)
    assert scope_of(auth, "old-read") is Scope.READ
    secret.update("read new-read\nadmin old-admin\n")  # old-read revoked
    clock.now += 0.5
    assert scope_of(auth, "old-read") is Scope.READ  # not looked at yet: one stat a second at most
    clock.now += 0.5
    assert scope_of(auth, "old-read") is None
    assert scope_of(auth, "new-read") is Scope.READ
    assert scope_of(auth, "old-admin") is Scope.ADMIN
    assert scope_of(auth, "env_token") is Scope.READ  # auth.tokens are kept


def test_a_file_rewritten_in_place_is_read_again(tmp_path: Path) -> None:
    clock = Clock()
    tokens = tmp_path / "tokens"
    tokens.write_text("read first\n")
    auth = TokenAuthenticator({}, tokens_file=tokens, clock=clock)
    tokens.write_text("read second-and-longer\n")
    clock.now += 1
    assert scope_of(auth, "first") is None
    assert scope_of(auth, "second-and-longer") is Scope.READ


@pytest.mark.parametrize(
    ("broken", "logged"),
    [
        ("read\n", "line 1: expected 'scope token'"),
        ("# every token revoked by mistake\n", "no API tokens configured"),
        (None, "cannot read auth.tokens.file"),
    ],
)
def test_a_file_that_becomes_unusable_keeps_the_tokens_read_before(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, broken: str | None, logged: str
) -> None:
    clock = Clock()
    before = time.time()
    secret = MountedSecret(tmp_path / "secrets", "read kept-token\n")
    auth = watching(secret, clock)
    metrics = Metrics(CollectorRegistry())
    auth.report_to(metrics)
    unreadable, read_at = tokens_file_metrics(metrics)
    assert unreadable == 0 and read_at is not None and before <= read_at <= time.time()
    if broken is None:
        secret.path.unlink()
    else:
        secret.update(broken)
    for _ in range(3):
        clock.now += 1
        assert scope_of(auth, "kept-token") is Scope.READ
        assert tokens_file_metrics(metrics) == (1, read_at)  # the tokens in use were read then
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and logged in errors[0].getMessage()  # once, not every second
    assert "kept-token" not in caplog.text
    secret.update("read fixed-token\n")
    if broken is None:
        (secret.root / "tokens").symlink_to("..data/tokens")
    clock.now += 1
    assert scope_of(auth, "fixed-token") is Scope.READ
    assert scope_of(auth, "kept-token") is None
    unreadable, read_again_at = tokens_file_metrics(metrics)
    assert unreadable == 0 and read_again_at is not None and read_again_at >= read_at


def tokens_file_metrics(metrics: Metrics) -> tuple[float | None, float | None]:
    """``rlm_auth_tokens_file_unreadable`` and ``rlm_auth_tokens_file_last_read_timestamp_seconds``."""
    registry = metrics.registry
    return (
        registry.get_sample_value("rlm_auth_tokens_file_unreadable"),
        registry.get_sample_value("rlm_auth_tokens_file_last_read_timestamp_seconds"),
    )


def test_an_admission_ends_when_its_token_is_revoked_and_only_then(tmp_path: Path) -> None:
    clock = Clock()
    secret = MountedSecret(tmp_path / "secrets", "read streaming-token\nread other-token\n")
    auth = watching(secret, clock)
    admitted = auth.admission("Bearer streaming-token")
    admitted.check()
    secret.update("read streaming-token\n")  # another token revoked: the tokens are read again
    clock.now += 1
    admitted.check()
    assert auth.generation == 1
    secret.update("read other-token\n")
    clock.now += 0.5
    admitted.check()  # not looked at yet: one stat a second at most
    clock.now += 0.5
    with pytest.raises(TokenRevokedError, match="revoked") as revoked:
        admitted.check()
    assert "streaming-token" not in str(revoked.value)


def test_an_admission_made_after_its_token_was_revoked_ends_at_its_first_check(tmp_path: Path) -> None:
    clock = Clock()
    secret = MountedSecret(tmp_path / "secrets", "read streaming-token\nread other-token\n")
    auth = watching(secret, clock)
    assert scope_of(auth, "streaming-token") is Scope.READ
    secret.update("read other-token\n")
    clock.now += 1
    assert scope_of(auth, "other-token") is Scope.READ  # this request reads the tokens again
    admitted = auth.admission("Bearer streaming-token")
    with pytest.raises(TokenRevokedError):
        admitted.check()


def test_without_authentication_an_admission_never_ends(tmp_path: Path) -> None:
    clock = Clock()
    secret = MountedSecret(tmp_path / "secrets", "read some-token\n")
    auth = TokenAuthenticator({}, enabled=False, tokens_file=secret.path, clock=clock)
    admitted = auth.admission(None)
    secret.update("read another-token\n")
    clock.now += 1
    admitted.check()


def watched_and_reported(tmp_path: Path, clock: Clock) -> tuple[MountedSecret, TokenAuthenticator, Metrics]:
    """A mounted secret holding ``kept-token``, watched, its looks reported to fresh metrics."""
    secret = MountedSecret(tmp_path / "secrets", "read kept-token\n")
    auth = watching(secret, clock)
    metrics = Metrics(CollectorRegistry())
    auth.report_to(metrics)
    return secret, auth, metrics


def test_a_tokens_file_back_as_it_was_read_is_usable_again(tmp_path: Path) -> None:
    clock = Clock()
    secret, auth, metrics = watched_and_reported(tmp_path, clock)
    _, read_at = tokens_file_metrics(metrics)
    secret.path.unlink()  # the link goes, the file it named stays
    clock.now += 1
    assert scope_of(auth, "kept-token") is Scope.READ
    assert tokens_file_metrics(metrics) == (1, read_at)
    (secret.root / "tokens").symlink_to("..data/tokens")
    clock.now += 1
    assert scope_of(auth, "kept-token") is Scope.READ
    assert tokens_file_metrics(metrics) == (0, read_at)  # not read again: nothing changed in it


def test_without_a_tokens_file_nothing_is_reported() -> None:
    auth = TokenAuthenticator({"env-token": Scope.READ})
    metrics = Metrics(CollectorRegistry())
    auth.report_to(metrics)
    assert scope_of(auth, "env-token") is Scope.READ
    assert tokens_file_metrics(metrics) == (0, 0)


def test_a_tokens_file_that_is_not_utf8_text_is_refused_at_start_naming_the_file(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_bytes(b"read s3cr3t-\xff\xfe-token\n")
    with pytest.raises(ConfigError, match=r"tokens.*not UTF-8 text") as refused:
        TokenAuthenticator.from_settings(load_settings(env={}, auth_tokens_file=tokens))
    assert "s3cr3t" not in str(refused.value)


def test_a_tokens_file_garbled_while_running_keeps_the_tokens_read_before(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    secret, auth, metrics = watched_and_reported(tmp_path, clock)
    _, read_at = tokens_file_metrics(metrics)
    garbled = secret.root / "..2024_01_01_00_00_01" / "tokens"
    garbled.write_bytes(b"read kept-token\n\x80\x81 binary garbage\n")  # the file the link names
    for _ in range(3):
        clock.now += 1
        assert scope_of(auth, "kept-token") is Scope.READ  # every request, not a failure a second
        assert tokens_file_metrics(metrics) == (1, read_at)
        admitted = auth.admission("Bearer kept-token")
        admitted.check()
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "not UTF-8 text" in errors[0].getMessage()


@pytest.mark.parametrize("emptied", ["", "# every token revoked by mistake\n"])
def test_a_tokens_file_emptied_beside_auth_tokens_keeps_the_tokens_read_before(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, emptied: str
) -> None:
    clock = Clock()
    secret = MountedSecret(tmp_path / "secrets", "read file-token\n")
    auth = watching(secret, clock, env_token=Scope.READ)
    metrics = Metrics(CollectorRegistry())
    auth.report_to(metrics)
    admitted = auth.admission("Bearer file-token")
    admitted.check()
    secret.update(emptied)
    clock.now += 1
    assert scope_of(auth, "file-token") is Scope.READ
    admitted.check()  # its stream goes on
    assert scope_of(auth, "env_token") is Scope.READ
    assert tokens_file_metrics(metrics)[0] == 1
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "holds no token" in errors[0].getMessage()


def test_a_byte_order_mark_and_crlf_line_ends_are_no_part_of_the_tokens_file(tmp_path: Path) -> None:
    # Editors on Windows save UTF-8 with a byte order mark and CRLF line ends.
    tokens = tmp_path / "tokens"
    tokens.write_bytes("read abc\r\nadmin def\r\n".encode("utf-8-sig"))
    auth = TokenAuthenticator.from_settings(load_settings(env={}, auth_tokens_file=tokens))
    assert scope_of(auth, "abc") is Scope.READ
    assert scope_of(auth, "def") is Scope.ADMIN


def test_a_token_given_two_scopes_in_auth_tokens_is_refused_naming_the_entries() -> None:
    with pytest.raises(
        ConfigError, match=r"auth.tokens entries 1 and 3 give one token two scopes"
    ) as refused:
        TokenAuthenticator.from_settings(
            load_settings(env={"RLM_AUTH_TOKENS": "read:t0k3n, admin:x, admin:t0k3n"})
        )
    assert "t0k3n" not in str(refused.value)


def test_a_token_of_auth_tokens_given_another_scope_in_the_file_is_refused_naming_the_line(
    tmp_path: Path,
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("read other\nadmin t0k3n\n")
    with pytest.raises(ConfigError, match=r"line 2 gives a token of auth.tokens another scope") as refused:
        TokenAuthenticator.from_settings(
            load_settings(env={"RLM_AUTH_TOKENS": "read:t0k3n"}, auth_tokens_file=tokens)
        )
    assert "t0k3n" not in str(refused.value)


def test_a_token_listed_twice_with_one_scope_is_taken(tmp_path: Path) -> None:
    auth = from_file(tmp_path, "read abc\nadmin def\nread abc\n")
    assert scope_of(auth, "abc") is Scope.READ
    assert scope_of(auth, "def") is Scope.ADMIN


def test_a_token_given_a_second_scope_while_running_keeps_the_tokens_read_before(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    secret = MountedSecret(tmp_path / "secrets", "read dash-token\n")
    auth = watching(secret, clock)
    secret.update("read dash-token\nadmin dash-token\n")
    clock.now += 1
    assert scope_of(auth, "dash-token") is Scope.READ
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "lines 1 and 2 give one token two scopes" in errors[0]
    assert "dash-token" not in errors[0]


def test_an_empty_tokens_file_is_taken_while_authentication_is_off(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("")
    auth = TokenAuthenticator.from_settings(
        load_settings(env={}, auth_tokens_file=tokens, auth_enabled=False)
    )
    assert scope_of(auth, "anything") is Scope.ADMIN
