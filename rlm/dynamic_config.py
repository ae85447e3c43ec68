"""Settings that change at run time, without a restart: reader threads, the default ListOffsets
timeout and the upload rate limit. Both REST (``PATCH /v1/config``) and gRPC apply them here."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from rlm.config import MAX_READER_THREADS, MAX_REQUEST_TIMEOUT_MS
from rlm.errors import ConfigError
from rlm.lookup.pool import BoundedPool, RequestTimeout
from rlm.storage.ratelimit import RateLimiter
from rlm.tiering.copier import Copier


@dataclass(frozen=True)
class DynamicSettings:
    """The run-time settings (Kafka's names with dots as underscores)."""

    remote_log_offset_reader_threads: int
    remote_list_offsets_request_timeout_ms: int
    remote_log_manager_copy_max_bytes_per_second: int
    """-1: unlimited."""


class DynamicConfig:
    """Reads and changes the run-time settings of a running rlm."""

    def __init__(self, offset_pool: BoundedPool, timeout: RequestTimeout, copier: Copier) -> None:
        self.offset_pool = offset_pool
        self.timeout = timeout
        self.copier = copier
        self._lock = threading.Lock()

    def current(self) -> DynamicSettings:
        limiter = self.copier.rate_limiter
        return DynamicSettings(
            self.offset_pool.threads,
            self.timeout.default_ms,
            int(limiter.rate) if limiter is not None else -1,
        )

    def update(
        self,
        *,
        reader_threads: int | None = None,
        request_timeout_ms: int | None = None,
        copy_max_bytes_per_second: int | None = None,
    ) -> DynamicSettings:
        """Apply the given changes, all or none.

        Raises:
            ConfigError: a value out of range; the message names the setting.
        """
        if reader_threads is not None and not 1 <= reader_threads <= MAX_READER_THREADS:
            raise ConfigError(
                f"remote.log.offset.reader.threads must be 1 to {MAX_READER_THREADS}, not {reader_threads}"
            )
        if request_timeout_ms is not None and not 1 <= request_timeout_ms <= MAX_REQUEST_TIMEOUT_MS:
            raise ConfigError(
                f"remote.list.offsets.request.timeout.ms must be 1 to {MAX_REQUEST_TIMEOUT_MS}, "
                f"not {request_timeout_ms}"
            )
        if copy_max_bytes_per_second is not None and (
            copy_max_bytes_per_second == 0 or copy_max_bytes_per_second < -1
        ):
            raise ConfigError(
                "remote.log.manager.copy.max.bytes.per.second must be -1 (unlimited) or > 0, "
                f"not {copy_max_bytes_per_second}"
            )
        with self._lock:
            if reader_threads is not None:
                self.offset_pool.resize(reader_threads)
            if request_timeout_ms is not None:
                self.timeout.default_ms = request_timeout_ms
            if copy_max_bytes_per_second is not None:
                # In-flight uploads finish under the old limit; the next ones use the new one.
                self.copier.rate_limiter = (
                    RateLimiter(copy_max_bytes_per_second) if copy_max_bytes_per_second > 0 else None
                )
            return self.current()
