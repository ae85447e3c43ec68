"""``rlm serve``'s C heap thresholds (rlm/cli/heap.py), each case in a fresh interpreter."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

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
