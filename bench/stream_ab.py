"""Range streams of this checkout against another's, side by side; prints one JSON document.

Two ``rlm serve`` run at once, one from this checkout (``this``) and one from ``--other`` (another
checkout of rlm, its C modules built in place: ``make .venv/.installed-stamp``, or
``python -c "from setuptools import setup; setup()" build_ext --inplace`` there), each over its
own copy of one generated partition, tiered to one S3 server (moto, its own process). The same
range is then streamed from each in turn, one stream at a time, for ``--seconds``: this, other,
other, this, this, other... Each pair of streams sees the same machine, whose speed here drifts by half from
one minute to the next (more than most changes measure; :mod:`bench.stream` compares with a
decode timed in the same round for the same reason). The figure is the median of each pair's own
ratio (``other_over_this``: above 1, this checkout is faster), with each server's CPU per record.

Before the timed pairs, both bodies are fetched once and compared (``bodies_equal``): a change
that only makes streams faster sends the same bytes.

Usage: ``python bench/stream_ab.py --other PATH [--media arrow] [--where local] [--seconds 30]
[--codecs none] [--records 160000]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: import rlm from the checkout
    sys.path.insert(0, str(ROOT))

from bench.api import TOPIC, Served, start_rlm, stop, tiered_partition  # noqa: E402
from bench.stream import (  # noqa: E402
    cpu_seconds,
    drop_tiered_locally,
    median,
    partition_spec,
    s3_server,
    stream_settings,
    timed,
    timed_stream,
)
from rlm.log.model import Codec  # noqa: E402
from rlm.log.produce import produce  # noqa: E402

MEDIA = {
    "arrow": "application/vnd.apache.arrow.stream",
    "ndjson": "application/x-ndjson",
    "raw": "application/octet-stream",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--other", type=Path, required=True, help="another checkout of rlm, built")
    parser.add_argument("--media", choices=sorted(MEDIA), default="arrow")
    parser.add_argument("--where", choices=["local", "remote"], default="local")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--codecs", default="none", help="codecs of the batches, comma-separated")
    parser.add_argument("--records", type=int, default=160_000)
    parser.add_argument("--s3-server", choices=("moto", "s3rver"), default="moto")
    args = parser.parse_args()
    if not (args.other / "rlm" / "__main__.py").is_file():
        raise SystemExit(f"--other {args.other} is not a checkout of rlm")
    codecs = tuple(Codec[name.strip().upper()] for name in args.codecs.split(","))
    with (
        tempfile.TemporaryDirectory(prefix="rlm-bench-stream-ab-") as tmp,
        s3_server(args.s3_server, Path(tmp) / "s3") as endpoint,
    ):
        print(json.dumps(compare(Path(tmp), endpoint, args, codecs)))


def compare(work: Path, endpoint: str, args: argparse.Namespace, codecs: tuple[Codec, ...]) -> dict[str, Any]:
    spec = partition_spec(args.records, codecs, 1000, 8)
    produce(work / "logs", spec)
    served: list[Served] = []
    try:
        for name, root in (("this", ROOT), ("other", args.other.resolve())):
            (work / name).mkdir()
            shutil.copytree(work / "logs", work / name / "logs")
            served.append(
                start_rlm(work / name, work / name / "logs", extra=stream_settings(endpoint, name), root=root)
            )
        highest = [int(tiered_partition(s)["highest_tiered_offset"]) for s in served]
        if highest[0] != highest[1]:
            raise SystemExit(f"the two servers tiered different ranges: {highest}")
        if args.where == "remote":
            for name, top in zip(("this", "other"), highest, strict=True):
                drop_tiered_locally(work / name / "logs", top)
        return pairs(served, highest[0], args)
    finally:
        for s in served:
            stop(s)


def pairs(served: list[Served], highest: int, args: argparse.Namespace) -> dict[str, Any]:
    media = MEDIA[args.media]
    params = {"offset": "0", "end_offset": str(highest + 1)}
    urls = [f"{s.http}/v1/topics/{TOPIC}/partitions/0/records" for s in served]
    bodies = [asyncio.run(timed_stream(url, media, params, keep=True)).body() for url in urls]
    equal, size = bodies[0] == bodies[1], len(bodies[0])
    del bodies
    for url in urls:  # warm-up (imports, caches)
        asyncio.run(timed_stream(url, media, params))
    seconds: list[list[float]] = [[], []]
    cpu: list[list[float]] = [[], []]
    started = os.times().elapsed
    while os.times().elapsed - started < args.seconds:
        # Each pair in the other order from the last: always second, the same streaming code
        # measured 0.96 of the first here.
        for i in (0, 1) if len(seconds[0]) % 2 == 0 else (1, 0):
            url, server = urls[i], served[i]
            before = cpu_seconds(server.process.pid)
            seconds[i].append(timed(timed_stream(url, media, params)).seconds)
            cpu[i].append(cpu_seconds(server.process.pid) - before)
    records = highest + 1
    return {
        "workload": {"media": args.media, "where": args.where, "codecs": args.codecs, "records": records},
        "other": str(args.other),
        "bodies_equal": equal,
        "body_bytes": size,
        "pairs": len(seconds[0]),
        "this_median_s": round(median(seconds[0]), 3),
        "other_median_s": round(median(seconds[1]), 3),
        "other_over_this": round(median([b / a for a, b in zip(seconds[0], seconds[1], strict=True)]), 3),
        "this_cpu_us_per_record": round(sum(cpu[0]) / len(cpu[0]) / records * 1e6, 2),
        "other_cpu_us_per_record": round(sum(cpu[1]) / len(cpu[1]) / records * 1e6, 2),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }


if __name__ == "__main__":
    main()
