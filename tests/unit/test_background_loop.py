"""The background loop that runs the copier and retention passes."""

from __future__ import annotations

import threading

from rlm.loops import BackgroundLoop


def test_an_interval_longer_than_a_thread_can_wait_keeps_the_loop_alive() -> None:
    """``remote.log.manager.task.interval.ms`` is a Java long: an interval past what a thread
    can wait (Long.MAX_VALUE ms) must leave the loop waiting, not end its thread after one pass."""
    passes = threading.Semaphore(0)
    loop = BackgroundLoop("test", passes.release, (2**63 - 1) / 1000)
    loop.start()
    assert passes.acquire(timeout=10), "the first pass never ran"
    loop._thread.join(0.5)
    assert loop._thread.is_alive(), "the loop's thread ended after its first pass"
    assert loop.stop(10), "the loop did not stop when asked"
