"""rlm's Spark jobs through spark-submit: the arguments are those of ``rlm spark``.

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/spark-submit --master local[2] \\
        rlm/pipeline/spark/submit.py verify --config rlm.yaml --deep

or ``python -m rlm.pipeline.spark.submit verify ...``. The master, memory and the rest of Spark's
settings come from spark-submit; rlm's settings from ``--config`` and ``RLM_*``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``rlm spark`` with ``argv`` (default: the command line); returns the exit code."""
    from rlm.cli import main as rlm_main

    return rlm_main(["spark", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    # Run as a file, this directory comes first on sys.path, where its modules would hide others.
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    sys.exit(main())
