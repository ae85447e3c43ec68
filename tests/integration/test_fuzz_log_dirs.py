"""A bounded, seeded fuzz of damaged log directories through dump, verify, find-offset and copy.

See :mod:`tests.fuzz_support` for the mutations and the invariants. The same cases, in larger
numbers, are ``bench/fuzz_soak.py``. A failure prints the seed and the mutations of each failing
case; ``run_case(seed, ...)`` replays one.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fuzz_support import (
    MUTATORS,
    describe,
    make_pristine,
    run_case,
    run_subprocess,
    template_database,
)

#: Cases (one to three mutations each): some 220 mutations, about 20 s on an idle machine.
CASES = 120
#: Copies make every object and row durable (fsync): on a tmpfs that costs nothing.
FAST_DIRECTORY = Path("/dev/shm")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if FAST_DIRECTORY.is_dir() and shutil.disk_usage(FAST_DIRECTORY).free > 1 << 30:
        path = Path(tempfile.mkdtemp(prefix="rlm-fuzz-", dir=FAST_DIRECTORY))
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)
    else:
        yield tmp_path_factory.mktemp("fuzz")


@pytest.fixture(scope="module")
def pristine(workspace: Path) -> Path:
    return make_pristine(workspace / "pristine")


@pytest.fixture(scope="module")
def template(workspace: Path) -> Path:
    return template_database(workspace)


@pytest.mark.slow
def test_damaged_log_dirs_never_crash_a_command_nor_reach_the_remote_tier(
    workspace: Path, pristine: Path, template: Path
) -> None:
    cases = [run_case(seed, pristine, workspace / "case", template) for seed in range(CASES)]

    failed = [describe(case) for case in cases if case.failures]
    assert not failed, f"{len(failed)} of {len(cases)} cases failed:\n" + "\n".join(failed[:10])
    mutations = [m for case in cases for m in case.mutations]
    assert len(mutations) >= 200
    assert sum(case.commands for case in cases) >= 5 * CASES
    # Every kind of damage was made at least once (the names of the mutators show in the texts).
    made = " ".join(mutations)
    for words in ("flip bytes", "truncate", "empty", "length", "base offset", "rename", "swap", "delete"):
        assert words in made, words
    for words in ("index entry", "partial entry", "random bytes", "stray file", "log start", "garbage"):
        assert words in made, words
    assert len(MUTATORS) >= 15


@pytest.mark.slow
def test_damaged_log_dirs_through_the_console_script(workspace: Path, pristine: Path, template: Path) -> None:
    # In a process of its own, as users run it: what reaches the terminal, and the exit code.
    for seed in (11,):
        case = run_case(seed, pristine, workspace / "script", template, runner=run_subprocess)
        assert not case.failures, describe(case)
        assert case.commands >= 5
