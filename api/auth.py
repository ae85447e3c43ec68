"""Bearer-token authentication shared by the REST and gRPC servers.

Tokens come from ``auth.tokens`` (``scope:token`` pairs) and/or ``auth.tokens.file`` (one
``scope token`` pair per line; a ``#`` at the start of a line or after a space starts a comment, a
``#`` inside a token is part of it, and a token cannot start with one). A token given two scopes
is an error naming where (lines, entries), never a last one winning. Only SHA-256 digests of
the tokens are kept in memory, compared in constant time; a token is never logged or echoed in an
error.

A stream outlives the request that opened it: its :class:`Admission` looks at its token again as
it goes on, so that a token revoked in the tokens file ends the streams it opened too
(:class:`TokenRevokedError`), not only the requests that come after.
"""

from __future__ import annotations

import codecs
import enum
import hashlib
import hmac
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple, Protocol

from rlm.config import Settings
from rlm.errors import ConfigError

log = logging.getLogger("rlm.auth")
#: How often, at most, a request looks whether the tokens file changed (one ``stat``).
TOKENS_FILE_CHECK_INTERVAL_S = 1.0


class Scope(enum.Enum):
    """What a token may do: ``admin`` may also do everything ``read`` may."""

    READ = "read"
    ADMIN = "admin"

    def allows(self, needed: Scope) -> bool:
        return self is Scope.ADMIN or needed is Scope.READ


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


class TokensFileEvents(Protocol):
    """Receives what the looks at the tokens file find (``rlm.metrics.Metrics`` exports it)."""

    def tokens_file_checked(self, usable: bool, read_at: float) -> None:
        """The file was looked at: ``usable`` while the tokens in use are the file's, False while
        it cannot be read or holds no valid tokens (the tokens read before stay in use);
        ``read_at`` is when it was last read whole (Unix time)."""
        ...


class TokenRevokedError(Exception):
    """The token that opened a stream was revoked while the stream ran (401, UNAUTHENTICATED)."""


class TokenAuthenticator:
    """Maps ``Authorization: Bearer <token>`` to a scope.

    The tokens of ``tokens_file`` are read again when the file changes (a Kubernetes Secret
    rotated: its ``..data`` symlink swapped), so that a revoked token stops working without a
    restart: at most every ``check_interval_s``, a request (or a piece of a running stream, through
    its :class:`Admission`) looks at the file's identity (one ``stat`` of the file the path
    resolves to: device, inode, mtime, size). A file that cannot be
    read, or holds no valid tokens, leaves the tokens read before in place and is logged as an
    error, once for each different problem, and reported to the :class:`TokensFileEvents` given
    to :meth:`report_to` (the metrics) at each look until it is fixed.
    """

    def __init__(
        self,
        tokens: Mapping[str, Scope],
        *,
        enabled: bool = True,
        tokens_file: Path | None = None,
        check_interval_s: float = TOKENS_FILE_CHECK_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.enabled = enabled
        self._fixed = dict(tokens)
        self._file = tokens_file
        self._check_interval_s = check_interval_s
        self._clock = clock
        self._next_check = clock() + check_interval_s
        self._problem: str | None = None
        self._identity: _Identity | None = None
        self._read_at = 0.0  # Unix time of the last whole read of the file
        self._events: TokensFileEvents | None = None
        self.generation = 0
        """How many times the tokens were read again: an :class:`Admission` looks its token up
        again only when this changed."""
        found = self._fixed
        if tokens_file is not None:
            self._identity = _identity(tokens_file)  # before the read: a change after it is seen next
            read = _read_tokens_file(tokens_file)
            found = _merged(self._fixed, read, tokens_file)
            self._read_at = time.time()
        self._digests = self._checked(found)
        if tokens_file is not None and enabled and not read:  # as when read again: not taken silently
            raise ConfigError(f"auth.tokens.file {tokens_file} holds no token")

    def _checked(self, tokens: Mapping[str, Scope]) -> tuple[tuple[bytes, Scope], ...]:
        if self.enabled and not tokens:
            raise ConfigError(
                "no API tokens configured: set auth.tokens (RLM_AUTH_TOKENS) or auth.tokens.file, "
                "or switch authentication off with auth.enabled=false"
            )
        return tuple((_digest(token), scope) for token, scope in tokens.items())

    @classmethod
    def from_settings(cls, settings: Settings) -> TokenAuthenticator:
        """Read the tokens the settings name.

        Raises:
            ConfigError: a malformed pair, an unknown scope, an unreadable file, or no token while
                authentication is on. The message never contains a token.
        """
        tokens: dict[str, Scope] = {}
        entries: dict[str, int] = {}
        for n, pair in enumerate(p for p in settings.auth_tokens.split(",") if p.strip()):
            scope, sep, token = pair.partition(":")
            # A space after the comma or the colon ("read:abc, admin: def") is no part of a token.
            token = token.strip()
            if not sep:
                raise ConfigError(f"auth.tokens entry {n + 1} is not scope:token")
            if not token:
                raise ConfigError(f"auth.tokens entry {n + 1} has no token (scope:token)")
            found = _scope(scope, f"auth.tokens entry {n + 1}")
            if token in tokens and tokens[token] is not found:
                raise ConfigError(
                    f"auth.tokens entries {entries[token]} and {n + 1} give one token two scopes "
                    f"({tokens[token].value} and {found.value}): list it once"
                )
            tokens[token] = found
            entries.setdefault(token, n + 1)
        return cls(tokens, enabled=settings.auth_enabled, tokens_file=settings.auth_tokens_file)

    def report_to(self, events: TokensFileEvents) -> None:
        """Report each look at the tokens file to ``events`` from now on, starting with the last
        one's finding; nothing without a file or with authentication off."""
        self._events = events
        self._report()

    def _report(self) -> None:
        if self._events is not None and self.enabled and self._file is not None:
            self._events.tokens_file_checked(self._problem is None, self._read_at)

    def refresh(self) -> None:
        """Read the tokens file again if it changed; looked at most every ``check_interval_s``
        (one ``stat``), so that calling this for every piece of a stream costs a clock reading."""
        if self.enabled and self._file is not None:
            self._refresh(self._file)

    def _refresh(self, path: Path) -> None:
        """Read ``path`` again if its identity changed (at most every ``check_interval_s``)."""
        now = self._clock()
        if now < self._next_check:
            return
        self._next_check = now + self._check_interval_s
        try:
            identity = _identity(path)
            if identity == self._identity:
                if self._problem is not None:  # back as it was when last read: its tokens are in use
                    self._problem = None
                    log.info("%s is as it was when last read: its API tokens are in use", path)
                    self._report()
                return
            read = _read_tokens_file(path)
            digests = self._checked(_merged(self._fixed, read, path))
            if not read:  # emptied or cut short, more likely than every token revoked at once
                raise ConfigError(f"auth.tokens.file {path} holds no token")
        except ConfigError as exc:  # never holds a token
            if str(exc) != self._problem:
                self._problem = str(exc)
                log.error("%s; the API tokens read before stay in use", exc)
            self._report()
            return
        self._identity, self._digests = identity, digests
        self._read_at = time.time()
        self.generation += 1
        self._problem = None
        self._report()
        log.info("read the API tokens again from %s: it changed", path)

    def authenticate(self, authorization: str | None) -> Scope | None:
        """The scope of the bearer token in an ``Authorization`` value; None if missing or wrong.

        With authentication off every caller is an admin.
        """
        if not self.enabled:
            return Scope.ADMIN
        self.refresh()
        return self._scope_of(_offered(authorization))

    def admission(self, authorization: str | None) -> Admission:
        """The admission of a stream opened with ``authorization`` (already authenticated), for
        the stream to check as it goes on."""
        return Admission(self, _offered(authorization))

    def _scope_of(self, offered: bytes | None) -> Scope | None:
        if not self.enabled:
            return Scope.ADMIN
        if offered is None:
            return None
        found = None
        for digest, scope in self._digests:
            if hmac.compare_digest(digest, offered):
                found = scope
        return found


class Admission:
    """The token a stream was opened with (its digest), looked up again while the stream runs.

    :meth:`check` is called before each piece of the stream is sent: it costs a clock reading and
    a comparison of :attr:`TokenAuthenticator.generation`, and looks the token up only when the
    tokens were read again since its last look. Every scope may read, so a token still listed
    admits its stream, whatever its scope now.
    """

    __slots__ = ("_authenticator", "_generation", "_offered")

    def __init__(self, authenticator: TokenAuthenticator, offered: bytes | None) -> None:
        self._authenticator = authenticator
        self._offered = offered
        self._generation: int | None = None  # the first check looks: the tokens may have changed since

    def check(self) -> None:
        """Return while the stream's token is valid.

        Raises:
            TokenRevokedError: the token is no longer among the tokens read (never named).
        """
        authenticator = self._authenticator
        authenticator.refresh()
        if authenticator.generation == self._generation:
            return
        self._generation = authenticator.generation
        if authenticator._scope_of(self._offered) is None:
            raise TokenRevokedError(
                "the bearer token of this stream was revoked (auth.tokens.file changed): the stream ends here"
            )


def _offered(authorization: str | None) -> bytes | None:
    """The digest of the bearer token of an ``Authorization`` value; None without one."""
    if not authorization:
        return None
    kind, _, token = authorization.strip().partition(" ")
    if kind.lower() != "bearer" or not token:
        return None
    return _digest(token.strip())


def _scope(text: str, where: str) -> Scope:
    try:
        return Scope(text.strip().lower())
    except ValueError:
        # Not echoed: a pair written the wrong way round puts the token where the scope goes.
        raise ConfigError(f"{where}: unknown scope (use read or admin)") from None


class _Identity(NamedTuple):
    """What changes when a file is replaced or written: ``stat`` of the file a path resolves to."""

    device: int
    inode: int
    mtime_ns: int
    size: int


def _identity(path: Path) -> _Identity:
    try:
        found = path.stat()  # follows symlinks: a Secret's ..data swap gives another inode
    except OSError as exc:
        raise ConfigError(f"cannot read auth.tokens.file {path}: {exc.strerror}") from exc
    return _Identity(found.st_dev, found.st_ino, found.st_mtime_ns, found.st_size)


class _Listed(NamedTuple):
    """A token's scope in the tokens file and the line that gives it."""

    scope: Scope
    line: int


def _merged(fixed: Mapping[str, Scope], read: Mapping[str, _Listed], path: Path) -> dict[str, Scope]:
    """The tokens of ``auth.tokens`` and of the file; one given two scopes is an error.

    Raises:
        ConfigError: a token of ``auth.tokens`` has another scope in the file (never named).
    """
    tokens = dict(fixed)
    for token, listed in read.items():
        scope = tokens.setdefault(token, listed.scope)
        if scope is not listed.scope:
            raise ConfigError(
                f"{path} line {listed.line} gives a token of auth.tokens another scope "
                f"({listed.scope.value}, not {scope.value}): list it once"
            )
    return tokens


def _read_tokens_file(path: Path) -> dict[str, _Listed]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read auth.tokens.file {path}: {exc.strerror}") from exc
    data = data.removeprefix(codecs.BOM_UTF8)  # a byte order mark is no part of the first line
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:  # its text is not shown: it may hold a token
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"{path} line {line}: not UTF-8 text") from None
    tokens: dict[str, _Listed] = {}
    for number, raw in enumerate(lines, 1):
        # A word starting with # starts a comment: a # inside a token is part of it (cutting the
        # token there would make its first characters a valid token of their own).
        words = raw.split()
        for n, word in enumerate(words):
            if word.startswith("#"):
                words = words[:n]
                break
        if not words:
            continue
        if len(words) != 2:
            raise ConfigError(
                f"{path} line {number}: expected 'scope token' (a token cannot start with #: "
                "# at the start of a word starts a comment)"
            )
        listed = _Listed(_scope(words[0], f"{path} line {number}"), number)
        before = tokens.setdefault(words[1], listed)
        if before.scope is not listed.scope:  # the last line must not win: say which two lines
            raise ConfigError(
                f"{path} lines {before.line} and {number} give one token two scopes "
                f"({before.scope.value} and {listed.scope.value}): list it once"
            )
    return tokens
