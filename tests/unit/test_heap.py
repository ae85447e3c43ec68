"""``rlm serve``'s C heap thresholds (rlm/cli/heap.py), each case in a fresh interpreter."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

on_glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the thresholds are glibc's")

#: Minor page faults of 4 MiB blocks made (and written) then freed, after the first.
FAULTS_OF_REUSED_BLOCKS = """
import resource, sys
from rlm.cli.heap import keep_freed_blocks
print(keep_freed_blocks())
block = bytearray(4 << 20); del block
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    block = bytearray(4 << 20); del block
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def run(script: str, **environ: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")} | environ
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    return done.stdout.split()


@on_glibc
def test_freed_blocks_of_a_few_mib_are_reused_without_faulting_pages_in_again() -> None:
    set_, faults = run(FAULTS_OF_REUSED_BLOCKS)
    assert set_ == "True"
    # Mapped afresh, each block faults in its 1024 pages (20480 in all); under glibc's own dynamic
    # thresholds, about a thousand here. Kept on the heap: a few at most, for other objects.
    assert int(faults) < 64


@on_glibc
@pytest.mark.parametrize("name", ["MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"])
def test_an_operators_glibc_setting_is_left_as_it_is(name: str) -> None:
    set_, _ = run(FAULTS_OF_REUSED_BLOCKS, **{name: str(1 << 20)})
    assert set_ == "False"


def test_nothing_is_set_where_the_environment_sets_a_threshold() -> None:
    from rlm.cli.heap import keep_freed_blocks

    assert keep_freed_blocks({"MALLOC_TRIM_THRESHOLD_": "0"}) is False


#: RSS (KiB) given back by give_back_freed_heap, after 64 blocks of 4 MiB were made (every page
#: written) and every other one freed under serve's thresholds: freed between live blocks, not at
#: the heap's top, they stay resident until handed back.
RSS_GIVEN_BACK = """
from pathlib import Path
from rlm.cli.heap import give_back_freed_heap, keep_freed_blocks

def rss() -> int:
    status = Path("/proc/self/status").read_text().splitlines()
    return int(next(line for line in status if line.startswith("VmRSS")).split()[1])

print(keep_freed_blocks())
blocks = []
for _ in range(64):
    block = bytearray(4 << 20)
    block[::4096] = b"x" * 1024
    blocks.append(block)
live = blocks[1::2]
del blocks, block
kept = rss()
print(give_back_freed_heap())
print(kept - rss())
"""


@on_glibc
def test_what_was_freed_is_handed_back_when_asked() -> None:
    set_, given, dropped = run(RSS_GIVEN_BACK)
    assert set_ == "True"
    assert given == "True"
    # 128 MiB freed and kept resident (without the call, RSS does not move): most of it leaves.
    assert int(dropped) > 100 * 1024


def test_nothing_is_handed_back_without_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    from rlm.cli import heap

    monkeypatch.setattr(heap, "_glibc", lambda: None)
    assert heap.give_back_freed_heap() is False


class Process:
    """A process whose resident memory the test sets; handing back takes it to ``after``."""

    def __init__(self, resident: int) -> None:
        self.resident = resident
        self.after: int | None = None
        self.handed_back = 0

    def give_back(self) -> None:
        self.handed_back += 1
        if self.after is not None:
            self.resident = self.after


def test_the_heap_is_handed_back_each_time_the_process_has_grown_by_the_bound() -> None:
    from rlm.cli.heap import GiveBackWhenGrown

    process = Process(100)
    keeper = GiveBackWhenGrown(10, resident=lambda: process.resident, give_back=process.give_back)
    process.resident = 109
    assert keeper() is False and process.handed_back == 0  # grown by less than the bound
    process.resident, process.after = 110, 104
    assert keeper() is True and process.handed_back == 1
    # Measured from what it was after handing back (104), not from where it began (100).
    process.resident = 113
    assert keeper() is False
    process.resident, process.after = 114, 114  # nothing given back: still from 114 on
    assert keeper() is True
    process.resident = 120
    assert keeper() is False
    # Smaller since (memory handed back once streams went idle): measured from the least seen.
    process.resident = 90
    assert keeper() is False
    process.resident, process.after = 100, 95
    assert keeper() is True
    assert (process.handed_back, keeper.given_back) == (3, 3)


def test_the_resident_memory_is_the_processes() -> None:
    from rlm.cli.heap import resident_bytes

    status = Path("/proc/self/status").read_text().splitlines()
    rss_kib = int(next(line for line in status if line.startswith("VmRSS")).split()[1])
    assert abs(resident_bytes() - rss_kib * 1024) < 16 * 1024 * 1024


def test_checks_wait_for_a_hand_back_run_elsewhere_and_measure_from_after_it() -> None:
    from rlm.cli.heap import GiveBackWhenGrown

    process = Process(100)
    handed: list[Callable[[], None]] = []
    keeper = GiveBackWhenGrown(
        10, resident=lambda: process.resident, give_back=process.give_back, run=handed.append
    )
    process.resident, process.after = 110, 101
    assert keeper() is True and len(handed) == 1 and process.handed_back == 0  # not run yet
    process.resident = 130
    assert keeper() is False and len(handed) == 1  # one pending is enough
    handed.pop()()
    assert (process.handed_back, keeper.given_back) == (1, 1)
    process.resident = 110  # 9 above what it held after handing back (101)
    assert keeper() is False
    process.resident = 111
    assert keeper() is True and len(handed) == 1
