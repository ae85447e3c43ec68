"""The ``rlm`` command line. Each sub-command group lives in its own module and registers itself."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Sequence

from rlm.errors import RlmError


@functools.cache
def build_parser() -> argparse.ArgumentParser:
    """Build the parser with every sub-command group registered (once: a parser is reusable, and
    building one costs tens of milliseconds)."""
    from rlm.cli import db as db_cmd
    from rlm.cli import log as log_cmd
    from rlm.cli import lookup, serve, spark, tiering

    parser = argparse.ArgumentParser(prog="rlm", description="Tiered-storage remote log manager for Kafka")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    log_cmd.register(sub)
    tiering.register(sub)
    serve.register(sub)
    lookup.register(sub)
    db_cmd.register(sub)
    spark.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``rlm`` console script; returns the process exit code."""
    try:
        args = build_parser().parse_args(argv)
        code: int = args.func(args)
    except RlmError as exc:
        print(f"rlm: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:  # Ctrl-C: the shell's code for SIGINT, and no traceback
        print("rlm: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:  # a file that cannot be read (permissions, a directory where a file was expected)
        print(f"rlm: error: {exc}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
