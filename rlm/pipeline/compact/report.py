"""How ``rlm spark compact`` prints its report: one line per partition, or one JSON document."""

from __future__ import annotations

import json

from rlm.pipeline.compact.job import CompactReport


def render_text(report: CompactReport) -> str:
    """The report for a terminal: per partition its status, records and bytes in and out,
    tombstones kept and dropped, aborted records and records without a key dropped, seconds."""
    verb = "would remove" if report.dry_run else "removed"
    lines = []
    for p in report.partitions:
        c = p.counts
        line = f"{p.topic_partition}: {p.status}"
        if p.segments_out:
            line += (
                f", {p.segments_in} segments into {p.segments_out}; records {c.records_in} → {c.records_out} "
                f"({verb} {c.records_in - c.records_out}), bytes {c.bytes_in} → {c.bytes_out}; tombstones "
                f"kept {c.tombstones_kept}, dropped {c.tombstones_dropped}; "
                f"aborted dropped {c.aborted_dropped}; "
                f"without key dropped {c.null_keys_dropped}; markers dropped {c.markers_dropped}"
            )
        if p.reason:
            line += f" ({p.reason})"
        lines.append(line)
    if not lines:
        lines.append("no partition of a compacted topic (cleanup.policy with compact) to compact")
    mode = "dry run: nothing written; " if report.dry_run else ""
    cleaned = (
        f", {report.cleaned_objects} objects of earlier jobs cleaned up" if report.cleaned_objects else ""
    )
    lines.append(f"{mode}{len(report.partitions)} partitions in {report.seconds:.1f} s{cleaned}")
    return "\n".join(lines) + "\n"


def render_json(report: CompactReport) -> str:
    """The report as one JSON document."""
    return json.dumps(report.to_json(), indent=2) + "\n"
