"""What one lookup cost in remote reads: the GETs it issued and the bytes they returned."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class FetchStats:
    """Counts the remote reads made on behalf of one lookup.

    Passed down to whatever reads the remote tier for the lookup (the remote index cache, the
    ranged ``.log`` reads) so the lookup can report its own cost. A read is counted by whoever
    issued it: a lookup that waited for another one's index load counts nothing. Safe to share
    between threads.
    """

    gets: int = 0
    """Remote GETs issued."""
    bytes: int = 0
    """Bytes those GETs returned."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, nbytes: int) -> None:
        """Count one remote GET that returned ``nbytes`` bytes."""
        with self._lock:
            self.gets += 1
            self.bytes += nbytes
