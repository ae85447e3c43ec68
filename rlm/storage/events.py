"""What a store reports besides its answers: events the metrics count (``rlm.metrics.Metrics``)."""

from __future__ import annotations

from typing import Protocol


class StorageEvents(Protocol):
    """Receives a store's events; called from the store's threads, so implementations are thread-safe."""

    def optional_call_failed(self, operation: str) -> None:
        """An optional call (``ListMultipartUploads``, ``AbortMultipartUpload``) was refused and skipped."""
        ...

    def checksum_unreported(self) -> None:
        """A put was verified by its size only: the store reported no CRC-32C for it."""
        ...


class NoEvents:
    """Drops every event (the default of a store built without metrics)."""

    def optional_call_failed(self, operation: str) -> None:
        """Ignored."""

    def checksum_unreported(self) -> None:
        """Ignored."""
