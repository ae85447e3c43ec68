"""``rlm copy`` and ``rlm retention``: the sidecar's background jobs, once or in a loop."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable
from types import FrameType

from rlm.cli.common import add_settings_options, settings_from_args
from rlm.copier import CopyOutcome
from rlm.loops import BackgroundLoop
from rlm.retention import RetentionOutcome


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``copy`` and ``retention``."""
    copy = sub.add_parser("copy", help="tier rolled segments to the remote store")
    copy.add_argument("--once", action="store_true", help="one pass, then exit (default: loop)")
    copy.add_argument("--quiet", action="store_true", help="no progress bar")
    add_settings_options(copy)
    copy.set_defaults(func=_copy)
    retention = sub.add_parser("retention", help="delete remote segments past retention")
    retention.add_argument("--once", action="store_true", help="one pass, then exit (default: loop)")
    add_settings_options(retention)
    retention.set_defaults(func=_retention)


def _loop(name: str, job: Callable[[], None], interval_s: float) -> int:
    """Run ``job`` every interval until SIGTERM/SIGINT, letting the pass in flight finish."""
    loop = BackgroundLoop(name, job, interval_s)

    def handle(signum: int, frame: FrameType | None) -> None:
        loop.request_stop()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    loop.run()
    return 0


def _describe_copy(o: CopyOutcome) -> str:
    if o.error is not None:
        return f"{o.topic_partition}: error: {o.error}"
    if o.skipped is not None:
        return f"{o.topic_partition}: skipped ({o.skipped})"
    return (
        f"{o.topic_partition}: copied {o.copied_segments} segments ({o.copied_bytes} bytes), "
        f"cleaned {o.cleaned_segments}, lag {o.lag_segments} segments"
    )


def _copy(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from rlm.bootstrap import build_runtime

    runtime = build_runtime(settings_from_args(args), index_cache_on_demand=True)
    try:
        if args.once:
            partitions = runtime.copier.partitions()
            with tqdm(total=len(partitions), unit="partition", disable=args.quiet, desc="copy") as bar:

                def advance(outcome: CopyOutcome) -> None:
                    bar.update(1)

                outcomes = runtime.copier.run_once(partitions, progress=advance)
            for outcome in outcomes:
                print(_describe_copy(outcome))
            return 1 if any(o.error is not None for o in outcomes) else 0

        def copy_pass() -> None:
            for outcome in runtime.copier.run_once():
                if outcome.error is not None or outcome.copied_segments:
                    print(_describe_copy(outcome), file=sys.stderr)

        return _loop("copier", copy_pass, runtime.settings.remote_log_manager_task_interval_ms / 1000)
    finally:
        runtime.close()


def _describe_retention(o: RetentionOutcome) -> str:
    if o.error is not None:
        return f"{o.topic_partition}: error: {o.error}"
    if o.skipped is not None:
        return f"{o.topic_partition}: skipped ({o.skipped})"
    return (
        f"{o.topic_partition}: deleted {o.deleted_segments} segments ({o.deleted_bytes} bytes), "
        f"remote log start offset {o.log_start_offset}"
    )


def _retention(args: argparse.Namespace) -> int:
    from rlm.bootstrap import build_runtime

    runtime = build_runtime(settings_from_args(args), index_cache_on_demand=True)
    try:
        if args.once:
            outcomes = runtime.retention.run_once()
            for outcome in outcomes:
                print(_describe_retention(outcome))
            return 1 if any(o.error is not None for o in outcomes) else 0

        def retention_pass() -> None:
            for outcome in runtime.retention.run_once():
                if outcome.error is not None or outcome.deleted_segments:
                    print(_describe_retention(outcome), file=sys.stderr)

        return _loop("retention", retention_pass, runtime.settings.remote_log_manager_task_interval_ms / 1000)
    finally:
        runtime.close()
