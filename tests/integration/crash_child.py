"""A sidecar that dies: runs one copy or retention pass and kills itself with SIGKILL on cue.

Run as a script by the crash tests. The process builds its runtime from the arguments, as ``rlm
copy --once`` does, then either completes the pass and prints its outcomes as JSON, or is killed
for real (no exception, no ``finally``, no flush) at the N-th time the pass reports a named step,
at the N-th S3 request of a named operation (e.g. the 2nd ``UploadPart`` of a multipart upload),
or at the N-th chunk of ``.log`` bytes a put is about to send (in the middle of a put).

    python crash_child.py --log-dir DIR --metadata-url URL --remote-url URL [--s3-endpoint URL]
        [--s3-access-key KEY] [--s3-addressing-style path] [--job copy|retention]
        [--kill-at-step NAME | --kill-at-request OPERATION | --kill-in-put] [--nth N]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import boto3

from rlm.bootstrap import build_runtime, open_remote_storage
from rlm.config import Settings, TopicSettings
from rlm.storage.ratelimit import RateLimiter
from rlm.storage.retry import RetryPolicy
from rlm.storage.s3_config import MIN_PART_BYTES


class Killer:
    """Counts occurrences of one event and kills this process at the N-th."""

    def __init__(self, name: str | None, nth: int) -> None:
        self.name = name
        self.nth = nth
        self.seen = 0
        self._lock = threading.Lock()

    def __call__(self, name: str) -> None:
        if name != self.name:
            return
        with self._lock:
            self.seen += 1
            if self.seen == self.nth:
                os.kill(os.getpid(), signal.SIGKILL)


class KillingRateLimiter(RateLimiter):
    """Lets everything through, but kills this process when asked for its N-th chunk of bytes."""

    def __init__(self, nth: int) -> None:
        super().__init__(1e15)
        self.killer = Killer("chunk", nth)

    def acquire(self, amount: int) -> None:
        self.killer("chunk")
        super().acquire(amount)


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--log-dir", type=Path, required=True)
    parser.add_argument("--metadata-url", required=True)
    parser.add_argument("--remote-url", required=True)
    parser.add_argument("--s3-endpoint")
    parser.add_argument("--s3-access-key", default="rlm-test-key", help="moto takes any, s3rver S3RVER")
    parser.add_argument("--s3-addressing-style", default="auto")
    parser.add_argument("--broker-id", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--job", choices=("copy", "retention"), default="copy")
    parser.add_argument("--kill-at-step", help="a step name the pass reports (copy_started, ...)")
    parser.add_argument("--kill-at-request", help="an S3 operation name (UploadPart, PutObject, ...)")
    parser.add_argument("--kill-in-put", action="store_true", help="kill before a chunk of .log bytes goes")
    parser.add_argument("--nth", type=int, default=1, help="kill at this occurrence")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = _parse(argv)
    settings = Settings(
        log_dirs=(args.log_dir,),
        broker_id=args.broker_id,
        metadata_url=args.metadata_url,
        remote_url=args.remote_url,
        s3_endpoint_url=args.s3_endpoint,
        s3_addressing_style=args.s3_addressing_style,
        remote_log_manager_copier_thread_pool_size=args.threads,
        # The runtime locks its index cache directory: one of this test's own, not the default.
        remote_log_index_cache_dir=args.log_dir.parent / "index-cache",
        topic_defaults=TopicSettings(retention_ms=-1),
        # The tests expire segments by moving the broker's log start offset, as DeleteRecords does.
        remote_log_start_offset_from_broker=True,
    )
    storage = None
    if args.remote_url.startswith("s3:"):
        session = boto3.session.Session(
            aws_access_key_id=args.s3_access_key,
            aws_secret_access_key="rlm-test-secret",
            region_name="us-east-1",
        )
        if args.kill_at_request:
            killer = Killer(args.kill_at_request, args.nth)
            session.events.register(
                f"before-send.s3.{args.kill_at_request}", lambda **_: killer(args.kill_at_request)
            )
        storage = open_remote_storage(
            settings,
            session=session,
            region="us-east-1",
            multipart_threshold_bytes=MIN_PART_BYTES,
            part_size_bytes=MIN_PART_BYTES,
            max_concurrency=2,
            retry=RetryPolicy(max_attempts=10, base_delay_s=0.001, max_delay_s=0.01),
        )
    runtime = build_runtime(settings, storage=storage)
    step = Killer(args.kill_at_step, args.nth)
    runtime.copier.step = step
    runtime.retention.step = step
    if args.kill_in_put:
        runtime.copier.rate_limiter = KillingRateLimiter(args.nth)
    try:
        job = runtime.copier if args.job == "copy" else runtime.retention
        outcomes: list[Any] = list(job.run_once())
    finally:
        runtime.close()
    report = [
        {"partition": str(o.topic_partition), "error": None if o.error is None else str(o.error)}
        for o in outcomes
    ]
    json.dump(report, sys.stdout)
    return 1 if any(o.error is not None for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
