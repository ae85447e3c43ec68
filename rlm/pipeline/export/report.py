"""An export's report as text (``--json`` prints :meth:`ExportReport.to_json`)."""

from __future__ import annotations

from rlm.pipeline.export.job import ExportReport


def render_text(report: ExportReport) -> str:
    lines = [
        f"{report.rows} rows of {report.segments} segments exported to {report.output} "
        f"({report.format.value}, {report.files} files, {report.seconds:.1f} s)",
    ]
    if report.snapshot_id is not None:
        lines.append(f"Iceberg snapshot {report.snapshot_id}")
    for run in report.settled.completed:
        lines.append(f"completed the commit of an earlier run {run}")
    for run in report.settled.discarded:
        lines.append(f"discarded the staged files of an earlier run that never committed: {run}")
    for p in report.partitions:
        doc = p.to_json()
        lines.append(
            f"{doc['topic']}-{doc['partition']}: offsets [{doc['start_offset']}, {doc['stop_offset']}) "
            f"of {doc['segments']} segments; next run starts at {doc['next_offset']}"
        )
    for tp, offset in sorted(report.diverged.items()):
        lines.append(
            f"{tp}: copies from offset {offset} on were replaced after the run planned (the broker's "
            f"log diverged from them): the rows exported from {offset} on are the replaced copies'; "
            f"the next incremental run starts at {offset}"
        )
    return "\n".join(lines) + "\n"
