"""Soak run of the log-directory fuzzer (``tests/fuzz_support.py``); prints one JSON document.

The same cases as ``tests/integration/test_fuzz_log_dirs.py``, as many as asked for, from any seed:
each damages a produced partition (one to three mutations), runs ``rlm log dump``, ``verify``,
``find-offset`` and ``rlm copy --once`` in-process, checks the invariants, repairs the directory
and copies again. The baseline is the same commands on undamaged directories, in the same run.

Figures: cases and mutations run, failures (seed and mutations of each, up to ``--show``),
seconds, seconds per case against the baseline's, and the load average.

Usage: ``python bench/fuzz_soak.py [--cases 2000] [--seed 0] [--baseline-cases 20] [--dir /dev/shm]``
(or ``python -m bench.fuzz_soak ...`` from the repository's root)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the fuzzer lives with the tests, and bench/
    # first on sys.path would hide the metadata package behind bench/metadata.py
    _here = Path(__file__).resolve().parent
    sys.path[:] = [str(_here.parent)] + [p for p in sys.path if Path(p or ".").resolve() != _here]

from tests.fuzz_support import describe, make_pristine, run_case, template_database


def _workspace(requested: Path | None) -> Path:
    """A scratch directory: on a tmpfs when there is one (copies fsync every object)."""
    base = requested or (Path("/dev/shm") if Path("/dev/shm").is_dir() else None)
    return Path(tempfile.mkdtemp(prefix="rlm-fuzz-soak-", dir=base))


def run(args: argparse.Namespace) -> dict[str, Any]:
    load_at_start = os.getloadavg()
    workspace = _workspace(args.dir)
    try:
        pristine = make_pristine(workspace / "pristine")
        template = template_database(workspace)
        started = time.perf_counter()
        for seed in range(args.baseline_cases):
            run_case(seed, pristine, workspace / "baseline", template, damage=False)
        baseline_seconds = time.perf_counter() - started

        started = time.perf_counter()
        cases = mutations = commands = 0
        failures: list[str] = []
        for seed in range(args.seed, args.seed + args.cases):
            case = run_case(seed, pristine, workspace / "case", template)
            cases += 1
            mutations += len(case.mutations)
            commands += case.commands
            if case.failures:
                failures.append(describe(case))
        seconds = time.perf_counter() - started
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
    return {
        "cases": cases,
        "mutations": mutations,
        "commands": commands,
        "failures": len(failures),
        "failed_cases": failures[: args.show],
        "seeds": [args.seed, args.seed + args.cases - 1],
        "seconds": round(seconds, 1),
        "seconds_per_case": round(seconds / max(cases, 1), 3),
        "baseline_seconds_per_case": round(baseline_seconds / max(args.baseline_cases, 1), 3),
        "load_average_at_start": [round(x, 2) for x in load_at_start],
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0, help="the first case's seed")
    parser.add_argument("--baseline-cases", type=int, default=20, help="cases run without damage")
    parser.add_argument("--show", type=int, default=20, help="failed cases to describe")
    parser.add_argument("--dir", type=Path, help="scratch directory (default: /dev/shm, else /tmp)")
    result = run(parser.parse_args())
    print(json.dumps(result, indent=2))
    if result["failures"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
