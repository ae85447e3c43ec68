"""A seeded fuzzer of Kafka log directories: damage a produced partition, run every command on it.

Each case copies a pristine produced log directory, applies one to three mutations to its
partition (byte flips, truncations, zero-length files, huge batch lengths, wrong base offsets,
renamed, swapped and deleted segments, bad index entries, damaged snapshots and checkpoints,
stray names), then runs ``rlm log dump``, ``verify``, ``find-offset`` and ``rlm copy --once``
in-process through :func:`rlm.cli.main`, repairs the directory and copies again. The invariants:

* no command raises (no traceback): it exits 0, or 1 with a message naming the file (and for a
  ``.log``, the position);
* no ``COPY_SEGMENT_FINISHED`` row is for a segment ``rlm log verify`` rejects;
* the finished ranges and the skipped ones leave no gap, and no copy is left half done;
* once the directory is repaired, the next pass tiers everything below the high watermark.

Used by ``tests/integration/test_fuzz_log_dirs.py`` (a few hundred mutations) and
``bench/fuzz_soak.py`` (as many as you like).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import random
import re
import shutil
import struct
import subprocess
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from metadata.engine import create_engine_for_url
from metadata.store import SqlMetadataStore
from rlm.cli import main
from rlm.errors import CorruptDataError
from rlm.log.byte_source import BytesSource, iter_headers
from rlm.log.files import segment_file_name
from rlm.log.logdir import LogDir
from rlm.log.produce import ProduceSpec, produce
from rlm.metastore.model import SegmentState, TopicPartition

SPEC = ProduceSpec(
    topics=1,
    partitions=1,
    records=700,
    segment_bytes=10 * 1024,
    max_batch_records=25,
    legacy_batches=6,
    seed=21,
)
TP = TopicPartition("orders", 0)
INDEX_SUFFIXES = (".index", ".timeindex", ".txnindex")
STRAYS = (
    "abc.log",
    "-1.log",
    "12345678901234567890123456.log",
    "0000000000000000001.log",
    "ünï.log",
    "٣٤٠.log",
    "abc.index",
    "00000000000000999999.index",
    "junk.snapshot",
)


@dataclass
class Case:
    """One fuzz case: what was done, and what broke."""

    seed: int
    mutations: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    commands: int = 0


def make_pristine(directory: Path) -> Path:
    """Produce the log directory every case starts from; returns it."""
    root = directory / "logs"
    produce(root, SPEC)
    return root


# -- mutations ----------------------------------------------------------------------------------


def _logs(partition: Path) -> list[Path]:
    return sorted(
        p for p in partition.glob("*.log") if p.is_file() and len(p.stem) == 20 and p.stem.isdigit()
    )


def _headers(path: Path) -> list[tuple[int, int]]:
    """``(position, size)`` of the batches of ``path`` that still parse."""
    found = []
    try:
        for header in iter_headers(BytesSource(path.read_bytes())):
            found.append((header.position, header.size))
    except CorruptDataError:
        pass
    return found


def _patch(path: Path, position: int, data: bytes) -> None:
    content = bytearray(path.read_bytes())
    if position + len(data) <= len(content):
        content[position : position + len(data)] = data
        path.write_bytes(bytes(content))


def _flip(rng: random.Random, partition: Path) -> str:
    path = rng.choice(_logs(partition))
    content = bytearray(path.read_bytes())
    if not content:
        return f"nothing to flip in empty {path.name}"
    spots = [rng.randrange(len(content)) for _ in range(rng.randint(1, 4))]
    for spot in spots:
        content[spot] ^= rng.randint(1, 255)
    path.write_bytes(bytes(content))
    return f"flip bytes {spots} of {path.name}"


def _truncate(rng: random.Random, partition: Path) -> str:
    path = rng.choice(_logs(partition))
    headers = _headers(path)
    at_batch = headers and rng.random() < 0.4
    size = rng.choice(headers)[0] if at_batch else rng.randrange(max(1, path.stat().st_size))
    with path.open("r+b") as out:
        out.truncate(size)
    return f"truncate {path.name} to {size}{' (a batch boundary)' if at_batch else ''}"


def _zero_length(rng: random.Random, partition: Path) -> str:
    files = [
        p for p in partition.iterdir() if p.is_file() and p.suffix in (".log", ".snapshot", *INDEX_SUFFIXES)
    ]
    path = rng.choice(files)
    path.write_bytes(b"")
    return f"empty {path.name}"


def _random_batch(rng: random.Random, partition: Path) -> tuple[Path, int | None]:
    """A random ``.log`` and the position of a random batch of it (None when none parses)."""
    path = rng.choice(_logs(partition))
    headers = _headers(path)
    return path, rng.choice(headers)[0] if headers else None


def _huge_length(rng: random.Random, partition: Path) -> str:
    path, position = _random_batch(rng, partition)
    if position is None:
        return f"no batch to lengthen in {path.name}"
    length = rng.choice((2**31 - 1, 2**30, 10**6, 13, -5, 0))
    _patch(path, position + 8, struct.pack(">i", length))
    return f"length {length} for the batch at {position} of {path.name}"


def _base_offset(rng: random.Random, partition: Path) -> str:
    path, position = _random_batch(rng, partition)
    if position is None:
        return f"no batch to move in {path.name}"
    (base,) = struct.unpack(">q", path.read_bytes()[position : position + 8])
    new = rng.choice((base - rng.randint(1, 40), base + rng.randint(1, 40), -1, 2**62, base + 2**31))
    _patch(path, position, struct.pack(">q", new))
    return f"base offset {base} -> {new} for the batch at {position} of {path.name}"


def _rename(rng: random.Random, partition: Path) -> str:
    path = rng.choice(_logs(partition))
    base = int(path.stem)
    new = max(0, base + rng.choice((-30, -3, -1, 1, 2, 25)))
    target = partition / segment_file_name(new, ".log")
    if target.exists():
        return f"no rename of {path.name}: {target.name} exists"
    for suffix in (".log", *INDEX_SUFFIXES):
        source = path.with_suffix(suffix)
        if source.exists():
            source.rename(target.with_suffix(suffix))
    return f"rename segment {base} to {new}"


def _swap(rng: random.Random, partition: Path) -> str:
    logs = _logs(partition)
    if len(logs) < 2:
        return "nothing to swap"
    a, b = rng.sample(logs, 2)
    data_a, data_b = a.read_bytes(), b.read_bytes()
    a.write_bytes(data_b)
    b.write_bytes(data_a)
    return f"swap {a.name} and {b.name}"


def _delete(rng: random.Random, partition: Path) -> str:
    logs = _logs(partition)
    path = logs[0] if rng.random() < 0.5 else rng.choice(logs)
    for suffix in (".log", *INDEX_SUFFIXES):
        path.with_suffix(suffix).unlink(missing_ok=True)
    return f"delete segment {path.stem}"


def _index_entry(rng: random.Random, partition: Path) -> str:
    indexes = [p for p in partition.glob("*.index") if p.stat().st_size >= 8]
    if not indexes:
        return "no index entry to damage"
    path = rng.choice(indexes)
    slot = rng.randrange(path.stat().st_size // 8)
    (relative, position) = struct.unpack(">ii", path.read_bytes()[slot * 8 : slot * 8 + 8])
    change = rng.choice(("past the end", "mid-batch", "offset", "negative"))
    if change == "past the end":
        position = 30_000 + rng.randrange(10_000)
    elif change == "mid-batch":
        position += rng.randint(1, 60)
    elif change == "offset":
        relative += rng.choice((-5, 3, 400))
    else:
        relative = -relative - 1
    _patch(path, slot * 8, struct.pack(">ii", relative, position))
    return f"index entry {slot} of {path.name}: {change}"


def _partial_entry(rng: random.Random, partition: Path) -> str:
    files = [p for p in partition.iterdir() if p.suffix in INDEX_SUFFIXES]
    if not files:
        return "no index to extend"
    path = rng.choice(files)
    with path.open("ab") as out:
        out.write(rng.randbytes(rng.randint(1, 7)))
    return f"partial entry appended to {path.name}"


def _garbage(rng: random.Random, partition: Path) -> str:
    files = [p for p in partition.iterdir() if p.suffix in (".timeindex", ".snapshot", ".txnindex")]
    if not files:
        return "nothing to garble"
    path = rng.choice(files)
    size = path.stat().st_size
    path.write_bytes(rng.randbytes(size or rng.randint(1, 40)))
    return f"random bytes in {path.name}"


def _stray(rng: random.Random, partition: Path) -> str:
    name = rng.choice((*STRAYS, "dir"))
    if name == "dir":
        (partition / segment_file_name(rng.randrange(10**6), ".log")).mkdir(exist_ok=True)
        return "a directory named like a segment"
    (partition / name).write_bytes(rng.randbytes(rng.randint(0, 200)))
    return f"stray file {name}"


def _checkpoint(rng: random.Random, partition: Path) -> str:
    log_dir = partition.parent
    change = rng.choice(("log start", "high watermark", "garbage"))
    if change == "garbage":
        name = rng.choice(("log-start-offset-checkpoint", "replication-offset-checkpoint"))
        (log_dir / name).write_bytes(rng.randbytes(rng.randint(1, 30)))
        return f"garbage in {name}"
    name = "log-start-offset-checkpoint" if change == "log start" else "replication-offset-checkpoint"
    offset = rng.randrange(0, 900)
    (log_dir / name).write_text(f"0\n1\n{TP.topic} {TP.partition} {offset}\n")
    return f"{change} {offset}"


MUTATORS: tuple[Callable[[random.Random, Path], str], ...] = (
    _flip,
    _flip,
    _truncate,
    _truncate,
    _zero_length,
    _huge_length,
    _base_offset,
    _base_offset,
    _rename,
    _swap,
    _delete,
    _index_entry,
    _index_entry,
    _partial_entry,
    _garbage,
    _stray,
    _checkpoint,
)


def mutate(rng: random.Random, partition: Path) -> list[str]:
    """Apply one to three random mutations to ``partition``; returns what was done."""
    return [rng.choice(MUTATORS)(rng, partition) for _ in range(rng.choice((1, 1, 2, 3)))]


# -- running the commands -----------------------------------------------------------------------


def run_in_process(args: Sequence[str]) -> tuple[int | None, str, str]:
    """Run ``rlm ARGS`` in this process: ``(exit code or None if it raised, stdout, stderr)``."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code: int | None = main(list(args))
        except SystemExit as exc:  # argparse
            code = exc.code if isinstance(exc.code, int) else 2
        except Exception:
            err.write(traceback.format_exc())
            code = None
    return code, out.getvalue(), err.getvalue()


def run_subprocess(args: Sequence[str]) -> tuple[int | None, str, str]:
    """Run ``rlm ARGS`` as the console script does, in a process of its own."""
    result = subprocess.run(
        [sys.executable, "-m", "rlm", *args], capture_output=True, text=True, timeout=120, check=False
    )
    return result.returncode, result.stdout, result.stderr


Runner = Callable[[Sequence[str]], tuple[int | None, str, str]]


def _check_output(case: Case, args: Sequence[str], result: tuple[int | None, str, str], root: Path) -> None:
    code, out, err = result
    case.commands += 1
    what = "rlm " + " ".join(args[:3])
    if code is None or "Traceback" in err:
        case.failures.append(f"{what} raised:\n{err[-3000:]}")
        return
    if code not in (0, 1):
        case.failures.append(f"{what} exited {code}: {err[-500:]}")
        return
    if code == 0:
        return
    if str(root) not in out + err:
        case.failures.append(f"{what} failed without naming a file: {(out + err)[-800:]}")
    # A problem in a .log says where: stderr (and the copy's error lines) name the position.
    reports = err.splitlines() + [line for line in out.splitlines() if ": error: " in line]
    for line in reports:
        if SEGMENT_LOG.search(line) and "position" not in line and not line.startswith(NAMES_ONLY):
            case.failures.append(f"{what} named a .log without a position: {line}")


SEGMENT_LOG = re.compile(r"[0-9]{20}\.log")
#: Lines about a file's name, not about a place in it.
NAMES_ONLY = ("skipping ", "rlm: error: '")


def _copy_args(root: Path, work: Path) -> list[str]:
    return [
        "copy",
        "--once",
        "--quiet",
        "--log-dirs",
        str(root),
        "--metadata-url",
        f"sqlite:///{work / 'm.db'}",
        "--remote-url",
        (work / "remote").as_uri(),
    ]


def _store_problems(work: Path, partition: Path, rejected: set[str]) -> list[str]:
    """Invariants of what the copier recorded; ``rejected``: the ``.log`` files verify rejects."""
    problems = []
    store = SqlMetadataStore(create_engine_for_url(f"sqlite:///{work / 'm.db'}"))
    try:
        rows = list(store.list_segments(TP))
        skipped = store.list_skipped_ranges(TP)
    finally:
        store.close()
    finished = [r for r in rows if r.state is SegmentState.COPY_SEGMENT_FINISHED]
    for row in rows:
        if row.state is SegmentState.COPY_SEGMENT_STARTED:
            problems.append(f"a copy of {row.start_offset}..{row.end_offset} was left started")
    for row in finished:
        name = str(partition / segment_file_name(row.start_offset, ".log"))
        if name in rejected:
            problems.append(f"{name} is FINISHED but verify rejects it")
    ranges = sorted(
        [(r.start_offset, r.end_offset) for r in finished] + [(s.start_offset, s.end_offset) for s in skipped]
    )
    for (_, end), (start, _) in itertools.pairwise(ranges):
        if start > end + 1:
            problems.append(f"gap in the remote tier: offsets {end + 1}..{start - 1} ({ranges})")
    return problems


def run_case(
    seed: int,
    pristine: Path,
    work: Path,
    template_db: Path,
    *,
    runner: Runner = run_in_process,
    damage: bool = True,
) -> Case:
    """One case in ``work`` (emptied first): mutate, run every command, check, repair, copy again.

    Without ``damage`` the same commands run on the pristine directory (a baseline for timing).
    """
    case = Case(seed)
    rng = random.Random(seed)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    root = work / "logs"
    shutil.copytree(pristine, root)
    shutil.copyfile(template_db, work / "m.db")
    (work / "remote").mkdir()
    partition = root / f"{TP.topic}-{TP.partition}"
    if damage:
        case.mutations = mutate(rng, partition)

    timestamp = rng.choice(
        ("earliest", "latest", "max-timestamp", str(1_700_000_000_000 + rng.randrange(40_000)))
    )
    commands = [
        ["log", "dump", str(partition), *rng.choice(((), ("--records",), ("--json",)))],
        ["log", "verify", str(partition)],
        ["log", "find-offset", str(partition), "--timestamp", timestamp],
    ]
    files = [p for p in partition.iterdir() if p.is_file()]
    if files:
        commands.append(["log", "dump", str(rng.choice(files))])
    rejected: set[str] = set()
    for args in commands:
        result = runner(args)
        _check_output(case, args, result, root)
        if args[1] == "verify":
            rejected = _rejected_logs(result[2])
    _check_output(case, _copy_args(root, work), runner(_copy_args(root, work)), root)
    case.failures.extend(_store_problems(work, partition, rejected))

    # Repaired (the broker's replica copied back): the next pass tiers everything.
    shutil.rmtree(root)
    shutil.copytree(pristine, root)
    code, out, err = runner(_copy_args(root, work))
    if code != 0:
        case.failures.append(f"the copy after the repair failed ({code}): {(out + err)[-800:]}")
    case.failures.extend(_store_problems(work, partition, set()))
    case.failures.extend(_untiered(work, partition))
    return case


def _rejected_logs(verify_errors: str) -> set[str]:
    """The ``.log`` files ``rlm log verify`` reported problems of (each line: ``PATH: ...``)."""
    paths = (line.split(": ", 1)[0] for line in verify_errors.splitlines())
    return {path for path in paths if path.endswith(".log")}


def _untiered(work: Path, partition: Path) -> list[str]:
    """Offsets of the repaired partition's rolled segments below the high watermark that are
    neither finished nor skipped."""
    store = SqlMetadataStore(create_engine_for_url(f"sqlite:///{work / 'm.db'}"))
    try:
        covered = [
            (r.start_offset, r.end_offset)
            for r in store.list_segments(TP, states=[SegmentState.COPY_SEGMENT_FINISHED])
        ]
        covered += [(s.start_offset, s.end_offset) for s in store.list_skipped_ranges(TP)]
    finally:
        store.close()
    local = LogDir(partition.parent).partition(TP.topic, TP.partition)
    hw = local.high_watermark() or 0
    segments = local.segments()
    first = min((start for start, _ in covered), default=0)
    wanted = [
        (s.base_offset, n.base_offset - 1) for s, n in itertools.pairwise(segments) if n.base_offset <= hw
    ]
    missing = []
    for start, end in wanted:
        if end < first:
            continue
        for offset in (max(start, first), end):
            if not any(a <= offset <= b for a, b in covered):
                missing.append(f"offset {offset} of segment {start}..{end} is not tiered after the repair")
    return missing


def template_database(directory: Path) -> Path:
    """A migrated SQLite file for the cases to copy."""
    from metadata.schema import upgrade

    path = directory / "template.db"
    upgrade(f"sqlite:///{path}")
    return path


def describe(case: Case) -> str:
    return f"seed {case.seed}: {'; '.join(case.mutations)}\n  " + "\n  ".join(case.failures)
