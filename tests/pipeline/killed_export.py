"""``rlm spark export`` killed (SIGKILL, no cleanup) at a chosen point of its commit.

    python -m tests.pipeline.killed_export POINT rlm-spark-export-arguments...

POINT ``before-commit``: the rows are written to staging, the manifest is not; ``mid-move``:
the manifest is written and the first data file moved into the output.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from rlm.cli import main
from rlm.pipeline.export import commit, job
from rlm.pipeline.export.commit import Advance, Manifest, staging_dir
from rlm.pipeline.export.files import Files, join


def _die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def before_commit(*args: Any, **kwargs: Any) -> None:
    _die()


def main_killed(point: str, argv: list[str]) -> int:
    if point == "before-commit":
        job.write_manifest = before_commit  # type: ignore[attr-defined]
    elif point == "mid-move":
        real_finish = commit.finish

        def finish_one(files: Files, output: str, manifest: Manifest, advance: Advance) -> int:
            for name in manifest.files[:1]:
                files.rename(join(staging_dir(output, manifest.run_id), name), join(output, name))
            _die()
            return real_finish(files, output, manifest, advance)

        job.finish = finish_one  # type: ignore[attr-defined]
    else:
        raise SystemExit(f"unknown point {point!r}")
    return main(["spark", "export", *argv])


if __name__ == "__main__":
    sys.exit(main_killed(sys.argv[1], sys.argv[2:]))
