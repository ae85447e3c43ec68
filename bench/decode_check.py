"""The C record decoder (rlm/log/_decode.c) under AddressSanitizer, fed mutated batches.

:func:`run_check` builds the decoder with ``-fsanitize=address`` into a directory of its own and
runs :func:`fuzz` in a child Python with ASan's runtime preloaded: every case goes through the
sanitized ``append_columns`` and ``decode_records`` and is compared with the Python reference (the
C either answers exactly as the reference or gives up; it never answers where the reference finds
corruption); every fourth case also walks a mutated log of mixed batches (every codec, legacy ones)
with ``append_log_columns`` (half of them without the CRC check, so that mutated payloads reach
the decompression), whose rows must be the reference's (``append_log_py``) for the batches it took;
every tenth decompresses a mutated payload with ``decompress_plain``, which must give it up or
answer as ``rlm.log.codecs.decompress``. An out-of-bounds read or write ends the child with ASan's
report; either that or a difference makes the check fail. ``bench/log_format.py --check`` prints its result.

Usage alone: ``python -m bench.decode_check [--cases 20000] [--seed 1]``
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import json
import os
import random
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import crc32c

from rlm.errors import CorruptRecordError
from rlm.log import codecs, columns, legacy
from rlm.log.columns import ColumnBuffers
from rlm.log.model import Codec, Record, TimestampType
from rlm.log.v2 import (
    V2Records,
    decode_records_py,
    encode_record,
    encode_v2_batch,
    parse_v2_header,
    records_of,
)

SOURCE = Path(__file__).resolve().parent.parent / "rlm" / "log" / "_decode.c"
INT64_MAX = 2**63 - 1


def build_sanitized(out_dir: Path) -> Path:
    """Compile ``_decode.c`` with AddressSanitizer into ``out_dir``; return the module's path."""
    target = out_dir / f"_decode{sysconfig.get_config_var('EXT_SUFFIX')}"
    command = [
        os.environ.get("CC", "gcc"),
        "-shared",
        "-fPIC",
        "-g",
        "-O1",
        "-fno-omit-frame-pointer",
        "-fsanitize=address",
        "-Wall",
        "-Wextra",
        f"-I{sysconfig.get_paths()['include']}",
        str(SOURCE),
        "-o",
        str(target),
    ]
    subprocess.run(command, check=True)
    return target


def _load(path: Path) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader("rlm.log._decode", str(path))
    spec = importlib.util.spec_from_file_location("rlm.log._decode", path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _case(rng: random.Random) -> tuple[bytes, int, int, int, int, int, int | None]:
    """Records of a batch (valid, then perhaps mutated): data, pos, end, count, bases, append time."""
    data = bytearray(rng.randbytes(rng.randint(0, 3)))
    lead = len(data)
    n = rng.randint(0, 12)
    for i in range(n):
        headers = [
            (rng.choice(["h", "\u00e9t\u00e9", "", "k" * 40]), rng.choice([None, b"", rng.randbytes(9)]))
            for _ in range(rng.choice([0, 0, 1, 3]))
        ]
        key = None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 20))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.choice([0, 5, 100, 3000]))
        ts_delta = rng.choice([rng.randint(-100, 100), rng.randint(-(2**63), INT64_MAX)])
        encode_record(
            data, i if rng.random() < 0.9 else rng.randint(-(2**31), 2**31 - 1), ts_delta, key, value, headers
        )
    end = len(data)
    kind = rng.random()
    if kind < 0.6 and data:  # flip bytes
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif kind < 0.7:  # cut short or run long
        end = max(lead, end - rng.randint(0, 10))
    elif kind < 0.8:
        data += rng.randbytes(rng.randint(1, 9))
        end = len(data)
    count = n if rng.random() < 0.8 else rng.choice([n + 1, max(0, n - 1), 2**31 - 1, rng.randint(0, 50)])
    base_offset = rng.choice([0, 10**6, INT64_MAX - rng.randint(0, 20)])
    base_ts = rng.choice([0, 1_700_000_000_000, -(2**63) + rng.randint(0, 5), INT64_MAX])
    log_append = None if rng.random() < 0.8 else rng.randint(-1, 2**40)
    return bytes(data), lead, end, count, base_offset, base_ts, log_append


def _reference(records: V2Records) -> tuple[list[Record] | None, list[bytes] | None]:
    try:
        decoded = decode_records_py(records)
    except CorruptRecordError:
        return None, None
    cols = ColumnBuffers()
    try:
        columns.append_records(cols, decoded, 0, INT64_MAX, 1)
    except CorruptRecordError:
        return decoded, None
    return decoded, [bytes(cols.view(c)) for c in range(len(columns.COLUMNS))]


def _batch_case(rng: random.Random) -> bytes:
    """A whole uncompressed v2 batch, mutated anywhere (its CRC then sometimes made right again)."""
    records = [
        Record(
            i, 1_700_000_000_000 + rng.randint(-9, 9), rng.randbytes(3), rng.randbytes(rng.randint(0, 300))
        )
        for i in range(rng.randint(1, 10))
    ]
    appended = rng.random() < 0.2
    buf = bytearray(
        encode_v2_batch(
            records,
            log_append_time=5 if appended else None,
            timestamp_type=TimestampType.LOG_APPEND_TIME if appended else TimestampType.CREATE_TIME,
        )
    )
    for _ in range(rng.randint(0, 3)):
        buf[rng.randrange(len(buf))] = rng.randrange(256)
    if rng.random() < 0.5:
        buf[17:21] = crc32c.crc32c(bytes(buf[21:])).to_bytes(4, "big")
    return bytes(buf[: len(buf) - rng.choice([0, 0, 0, 1, 30])])


def _batch_reference(buf: bytes) -> tuple[list[Record] | None, list[bytes] | None]:
    try:
        header = parse_v2_header(buf, 0)
        records = records_of(buf, header, True)
    except CorruptRecordError:
        return None, None
    return _reference(records)


def _compare(tally: Counter[str], call: Callable[[], object], want: object) -> None:
    """One call of the C decoder: an answer must be the reference's (``want``; None where the
    reference finds corruption, which no answer can equal)."""
    try:
        got = call()
    except (ValueError, OverflowError):
        tally["c_gave_up"] += 1
        return
    tally["c_answered"] += 1
    tally["differences_from_reference"] += got != want


def _columns_call(append: Callable[..., int], *args: object) -> Callable[[], object]:
    def call() -> object:
        cols = ColumnBuffers()
        append(cols.buffers, cols.used, *args, 0, INT64_MAX, 1)
        return [bytes(cols.view(c)) for c in range(len(columns.COLUMNS))]

    return call


def _log_case(rng: random.Random) -> bytes:
    """A log of a few batches (any codec, sometimes a legacy message set), perhaps mutated."""
    log = bytearray()
    offset = 0
    for _ in range(rng.randint(1, 5)):
        records = [
            Record(offset + i, 1_700_000_000_000 + i, rng.randbytes(3), rng.randbytes(rng.randint(0, 200)))
            for i in range(rng.randint(1, 8))
        ]
        if rng.random() < 0.1:
            log += legacy.encode_legacy_batch(records, magic=1, codec=rng.choice(list(Codec)[:4]))
        else:
            log += encode_v2_batch(records, codec=rng.choice(list(Codec)))
        offset += len(records)
    for _ in range(rng.choice([0, 0, 1, 3])):
        log[rng.randrange(len(log))] = rng.randrange(256)
    return bytes(log[: len(log) - rng.choice([0, 0, 0, 1, 40])])


def _compare_log(tally: Counter[str], module: ModuleType, log: bytes, rng: random.Random) -> None:
    """The C walk of ``log``: the rows of the batches it took must be the reference's for them."""
    cols, positions = ColumnBuffers(), bytearray()
    max_rows = rng.choice([3, 2**62])
    verify = rng.random() < 0.5  # without the CRC check, mutated payloads reach the decompression
    pos, batches, rows = module.append_log_columns(
        cols.buffers, cols.used, log, 0, len(log), verify, 0, INT64_MAX, 0, max_rows,
        codecs.plain_calls(), positions,
    )  # fmt: skip
    want, want_positions = ColumnBuffers(), bytearray()
    progress = columns.append_log_py(
        want,
        memoryview(log)[:pos],
        first_offset=0,
        last_offset=INT64_MAX,
        positions=want_positions,
        verify_crc=verify,
    )
    got = [bytes(cols.view(c)) for c in range(len(columns.COLUMNS))]
    same = got == [bytes(want.view(c)) for c in range(len(columns.COLUMNS))] and positions == want_positions
    tally["log_batches_walked"] += batches
    tally["log_walks_stopped_early"] += pos < len(log) and rows < max_rows
    tally["differences_from_reference"] += not same or progress != (pos, batches, rows)


def _compare_payload(tally: Counter[str], module: ModuleType, rng: random.Random) -> None:
    """A compressed payload, perhaps mutated: the C decompression must give it up or answer as
    :func:`rlm.log.codecs.decompress`."""
    codec = rng.choice(list(Codec)[1:])
    payload = bytearray(codecs.compress(codec, rng.randbytes(rng.randint(0, 40)) * rng.randint(1, 2000)))
    for _ in range(rng.choice([0, 1, 1, 3])):
        payload[rng.randrange(len(payload))] = rng.randrange(256)
    data = bytes(payload[: len(payload) - rng.choice([0, 0, 1, 7])])
    try:
        want: bytes | None = codecs.decompress(codec, data)
    except CorruptRecordError:
        want = None
    try:
        got: bytes | None = module.decompress_plain(codecs.plain_calls(), codec, data)
    except Exception:
        tally["payloads_given_up"] += 1
        return
    tally["payloads_decompressed"] += 1
    tally["differences_from_reference"] += got != want


def fuzz(module: ModuleType, cases: int, seed: int) -> dict[str, Any]:
    """Run ``cases`` cases (records, and whole batches) through ``module`` (the C decoder); count
    answers, give-ups and differences from the reference."""
    rng = random.Random(seed)
    tally: Counter[str] = Counter(c_answered=0, c_gave_up=0, differences_from_reference=0)
    start = time.perf_counter()
    for _ in range(cases):
        args = _case(rng)
        want_records, want_columns = _reference(V2Records(*args, compressed=False))
        view: bytes | memoryview = args[0] if rng.random() < 0.5 else memoryview(bytearray(args[0]))
        _compare(tally, partial(module.decode_records, Record, view, *args[1:]), want_records)
        _compare(tally, _columns_call(module.append_columns, view, *args[1:]), want_columns)
        buf = _batch_case(rng)
        want_records, want_columns = _batch_reference(buf)
        _compare(tally, partial(module.decode_batch_records, Record, buf, 0, True), want_records)
        _compare(tally, _columns_call(module.append_batch_columns, buf, 0, True), want_columns)
        if rng.random() < 0.25:
            _compare_log(tally, module, _log_case(rng), rng)
        if rng.random() < 0.1:
            _compare_payload(tally, module, rng)
    return {"cases": cases, **tally, "seconds": round(time.perf_counter() - start, 1)}


def run_check(cases: int, seed: int) -> dict[str, Any]:
    """Build the sanitized decoder and fuzz it in a child process; the outcome as JSON-ready data."""
    with tempfile.TemporaryDirectory(prefix="rlm-asan-") as tmp:
        path = build_sanitized(Path(tmp))
        runtime = subprocess.run(
            [os.environ.get("CC", "gcc"), "-print-file-name=libasan.so"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        env = {
            **os.environ,
            "LD_PRELOAD": runtime,
            # CPython's own allocations are not ours to judge (it is not built with ASan).
            "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:exitcode=86",
        }
        child = subprocess.run(
            [
                sys.executable,
                "-m",
                "bench.decode_check",
                "--child",
                str(path),
                "--cases",
                str(cases),
                "--seed",
                str(seed),
            ],
            capture_output=True,
            text=True,
            env=env,
            cwd=Path(__file__).resolve().parent.parent,
            check=False,
        )
    result: dict[str, Any] = {"sanitizer": "address", "exit_code": child.returncode}
    if child.returncode == 0:
        result.update(json.loads(child.stdout))
    else:
        result["report"] = child.stderr[-4000:]
    result["ok"] = child.returncode == 0 and result.get("differences_from_reference") == 0
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cases", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(fuzz(_load(args.child), args.cases, args.seed)))
        return
    result = run_check(args.cases, args.seed)
    print(json.dumps(result, indent=2))
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
