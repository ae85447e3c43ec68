"""The credentials of an S3 store's async reader: the store's own, refreshed when they are.

The async reader (:class:`~rlm.storage.async_s3.AsyncS3Reader`) signs with the credentials of the
store it reads (:meth:`rlm.storage.s3.S3Storage.credentials`). Static keys are handed over as
they are. Temporary ones — a web identity token's role (IRSA on Kubernetes), the container or
instance metadata, an assumed role — expire, often within the hour, and botocore refreshes them
in the store's session: a copy taken once would sign with expired keys from then on, and every
remote read of a long-lived process would fail with ``ExpiredToken``. So the reader's client is
given credentials that refresh from the store's session: every :data:`HORIZON` at most, and
whenever the client finds them about to expire (aiobotocore asks 15 minutes before the expiry it
is told, and insists at 10). Asking the store's session costs nothing while its keys are fresh;
when they are not, botocore refreshes them there, off the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from aiobotocore.credentials import AioCredentialResolver, AioCredentials, AioRefreshableCredentials
from botocore.credentials import Credentials, RefreshableCredentials

#: How long refreshed keys are said to last. aiobotocore refreshes 15 minutes before that, so
#: the reader asks the store's session again about a minute after each refresh; the session's own
#: keys are refreshed by botocore well before they expire (15 minutes, 10 at the latest).
HORIZON = timedelta(minutes=16)
METHOD = "rlm-store-session"


def _utc_now() -> datetime:
    return datetime.now(UTC)


class StoreCredentialProvider:
    """An aiobotocore credential provider that answers with ``source``, the store's session's
    credentials, refreshed from it when they are refreshable."""

    METHOD = METHOD

    def __init__(self, source: Credentials, *, now: Callable[[], datetime] = _utc_now) -> None:
        self._source = source
        self._now = now

    async def load(self) -> AioCredentials:
        if not isinstance(self._source, RefreshableCredentials):
            frozen = self._source.get_frozen_credentials()
            return AioCredentials(frozen.access_key, frozen.secret_key, frozen.token, method=METHOD)
        metadata = await self._metadata()
        return AioRefreshableCredentials(
            metadata["access_key"],
            metadata["secret_key"],
            metadata["token"],
            datetime.fromisoformat(metadata["expiry_time"]),
            self._metadata,
            METHOD,
            time_fetcher=self._now,
        )

    async def _metadata(self) -> dict[str, Any]:
        # The store's session refreshes its keys itself when they near their expiry, which may
        # mean a request to an STS or metadata endpoint: a thread's work, not the loop's.
        frozen = await asyncio.to_thread(self._source.get_frozen_credentials)
        return {
            "access_key": frozen.access_key,
            "secret_key": frozen.secret_key,
            "token": frozen.token,
            "expiry_time": (self._now() + HORIZON).isoformat(),
        }


def store_credential_resolver(
    source: Credentials, *, now: Callable[[], datetime] = _utc_now
) -> AioCredentialResolver:
    """The ``credential_provider`` component of an aiobotocore session that signs with
    ``source`` (see the module's text)."""
    return AioCredentialResolver([StoreCredentialProvider(source, now=now)])
