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
    skipped = _skipped_lines(report)
    if report.healthy:
        return "\n".join([summary, *skipped, "no problems found"]) + "\n"
    counts = report.counts()
    kind_width = max(len("KIND"), *(len(k) for k, _ in counts))
    part_width = max(len("PARTITION"), *(len(p) for _, p in counts))
    lines = [summary, "", f"{'KIND':<{kind_width}}  {'PARTITION':<{part_width}}  PROBLEMS"]
    for (kind, partition), count in counts.items():
        lines.append(f"{kind:<{kind_width}}  {partition:<{part_width}}  {count}")
    lines += ["", *(str(p) for p in report.problems), *skipped, f"{len(report.problems)} problems found"]
    return "\n".join(lines) + "\n"


def _skipped_lines(report: VerifyReport) -> list[str]:
    """The skipped ranges, one a line: offsets accounted for, never tiered (not problems)."""
    if not report.skipped:
        return []
    lines = ["", f"{len(report.skipped)} skipped ranges (offsets never tiered, on record; not problems):"]
    for r in report.skipped:
        tp = r.topic_partition
        lines.append(
            f"  {tp.topic}-{tp.partition} offsets {r.start_offset}..{r.end_offset} "
            f"({r.kind.value}): {r.reason}"
        )
    return [*lines, ""]


def render_json(report: VerifyReport) -> str:
    """The report as one JSON document."""
    return json.dumps(report.to_json(), indent=2) + "\n"
