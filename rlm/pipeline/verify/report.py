"""How ``rlm spark verify`` prints its report: a table of problems by kind and partition, then each
problem on a line; or one JSON document."""

from __future__ import annotations

import json

from rlm.pipeline.verify.job import VerifyReport


def render_text(report: VerifyReport) -> str:
    """The report for a terminal."""
    mode = "deep: every byte read" if report.deep else "objects' sizes and metadata; --deep reads every byte"
    summary = (
        f"verified {report.segments} segments of {report.partitions} partitions ({mode}); "
        f"{report.bytes_read} bytes read in {report.seconds:.1f} s"
    )
    if report.healthy:
        return f"{summary}\nno problems found\n"
    counts = report.counts()
    kind_width = max(len("KIND"), *(len(k) for k, _ in counts))
    part_width = max(len("PARTITION"), *(len(p) for _, p in counts))
    lines = [summary, "", f"{'KIND':<{kind_width}}  {'PARTITION':<{part_width}}  PROBLEMS"]
    for (kind, partition), count in counts.items():
        lines.append(f"{kind:<{kind_width}}  {partition:<{part_width}}  {count}")
    lines += ["", *(str(p) for p in report.problems), f"{len(report.problems)} problems found"]
    return "\n".join(lines) + "\n"


def render_json(report: VerifyReport) -> str:
    """The report as one JSON document."""
    return json.dumps(report.to_json(), indent=2) + "\n"
