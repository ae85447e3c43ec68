"""PostgreSQL connections that stop waiting for a server that does not answer.

PostgreSQL's ``statement_timeout`` is enforced by the server: a server (or a network path, or a
proxy) that accepts a statement and then never answers leaves the client waiting for ever, and
with it the thread and the pooled connection. TCP keepalives do not help when something on the
way still acknowledges packets. So every round trip of a connection from here (a statement, a
commit, a rollback) waits at most ``answer_timeout_s``; past it the connection is closed (its
state is unknown) and the call fails with :class:`AnswerTimeout`, which SQLAlchemy takes for a
disconnect: the pool drops the connection and opens a new one for the next call.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import errors
from psycopg.abc import RV, PQGen

#: psycopg's own polling interval while it waits (it checks for Ctrl-C as often).
WAIT_INTERVAL_S = 0.1


class AnswerTimeout(psycopg.OperationalError):
    """The server did not answer a round trip in time; the connection was closed."""


class AnsweringConnection(psycopg.Connection[Any]):
    """A psycopg connection whose every round trip waits at most ``answer_timeout_s`` seconds
    (None: as long as it takes). Set the attribute after :meth:`connect`."""

    answer_timeout_s: float | None = None

    def wait(self, gen: PQGen[RV], interval: float = WAIT_INTERVAL_S, timeout: float | None = None) -> RV:
        limit = self.answer_timeout_s
        if timeout is not None or limit is None:
            return super().wait(gen, interval, timeout)
        try:
            return super().wait(gen, interval, limit)
        except errors._WaitTimeout:
            # Half a protocol exchange may be in flight: nothing else can use this connection.
            self.close()
            raise AnswerTimeout(
                f"the metadata database did not answer within {limit:g} s; the connection was closed"
            ) from None
