"""A TCP proxy the tests control, in front of a real server (PostgreSQL), to play its outages.

Modes:

* ``PASS``: bytes flow both ways, as without the proxy.
* ``REFUSE``: nothing listens on the port any more (a connect is refused) and every open
  connection is closed: a server that is down.
* ``SILENT``: connections are accepted and kept open, but no byte goes either way: a frozen
  server, or a network that swallows packets while the proxy's kernel still acknowledges them (so
  neither TCP keepalives nor a server-side statement timeout end the wait). Back to ``PASS``, the
  bytes held meanwhile flow on.

Threads: one accepting, two per connection; all daemons, all ended by :meth:`TcpProxy.close`.
"""

from __future__ import annotations

import contextlib
import enum
import select
import socket
import threading
from types import TracebackType

#: How often an idle pump looks at the mode.
POLL_S = 0.02


class Mode(enum.Enum):
    PASS = "pass"
    REFUSE = "refuse"
    SILENT = "silent"


class TcpProxy:
    """Listens on 127.0.0.1 (a port of its own, kept across modes) and forwards to ``target``."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._mode = Mode.PASS
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._listener: socket.socket | None = None
        self.port = self._listen(0)
        self.accepted = 0
        """Connections accepted so far."""

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def mode(self) -> Mode:
        return self._mode

    def set_mode(self, mode: Mode) -> None:
        """Switch mode; REFUSE closes every open connection and the listening socket."""
        with self._lock:
            previous, self._mode = self._mode, mode
            if mode is Mode.REFUSE:
                self._stop_listening()
                for pair in self._pairs:
                    _close(*pair)
                self._pairs.clear()
        if previous is Mode.REFUSE and mode is not Mode.REFUSE:
            self._listen(self.port)

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            self._stop_listening()
            for pair in self._pairs:
                _close(*pair)
            self._pairs.clear()

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _listen(self, port: int) -> int:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(128)
        bound: int = listener.getsockname()[1]
        with self._lock:
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), name="tcp-proxy-accept", daemon=True).start()
        return bound

    def _stop_listening(self) -> None:
        # Caller holds the lock. shutdown() wakes the accepting thread; close() frees the port.
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
            self._listener = None

    def _accept(self, listener: socket.socket) -> None:
        while not self._closed.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return  # the listener was closed
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._mode is Mode.REFUSE:
                    _close(client, upstream)
                    continue
                self._pairs.append((client, upstream))
                self.accepted += 1
            pair = (client, upstream)
            for source, sink in (pair, (upstream, client)):
                threading.Thread(
                    target=self._pump, args=(source, sink, pair), name="tcp-proxy-pump", daemon=True
                ).start()

    def _silent(self) -> bool:
        return self._mode is Mode.SILENT

    def _pump(
        self, source: socket.socket, sink: socket.socket, pair: tuple[socket.socket, socket.socket]
    ) -> None:
        try:
            while not self._closed.is_set():
                if self._silent():
                    self._closed.wait(POLL_S)
                    continue
                readable, _, _ = select.select([source], [], [], POLL_S)
                if not readable or self._silent():
                    continue
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except (OSError, ValueError):
            pass  # closed by the other pump, by REFUSE or by close()
        with self._lock:
            if pair in self._pairs:
                self._pairs.remove(pair)
        _close(*pair)


def _close(*sockets: socket.socket) -> None:
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
