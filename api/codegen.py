"""Generates the gRPC Python code of ``api/proto`` into ``api/gen``, or checks that it is current.

    python -m api.codegen --check   # exit 1 and name the files that differ from a fresh generation
    python -m api.codegen --write   # regenerate api/gen

The protos live under ``api/proto`` (``rlm/v1/rlm.proto``, package ``rlm.v1``) but are compiled
under the virtual path ``api/gen/...`` (``protoc -Iapi/gen=api/proto``): the generated service
module then imports its messages as ``api.gen.rlm.v1.rlm_pb2``, which resolves from the repository
root and from an installed rlm alike, where a plain ``rlm.v1`` would collide with the ``rlm``
package. protoc writes the messages and the service (``rlm_pb2.py``, ``rlm_pb2_grpc.py``);
mypy-protobuf's plugins write their type stubs (``.pyi``), which type-check under ``mypy --strict``.
Nothing is post-processed, so the committed code is exactly the generators' output (plus empty
``__init__.py`` files), and the pinned grpcio-tools and mypy-protobuf reproduce it byte for byte.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = Path("api/proto")
"""The proto sources, relative to the repository root."""
GEN_DIR = Path("api/gen")
"""The generated package, relative to the repository root; also the protos' virtual path."""
PACKAGE_DOC = '"""Code generated from api/proto by ``python -m api.codegen --write``; do not edit."""\n'


def generate(out: Path, *, root: Path = ROOT) -> dict[Path, bytes]:
    """Compile every proto of ``root/api/proto`` under ``out`` (a scratch directory).

    Returns:
        Every file of the generated package, by path relative to the package directory.

    Raises:
        RuntimeError: protoc failed; the message holds its output.
    """
    protos = sorted(p.relative_to(root / PROTO_DIR) for p in (root / PROTO_DIR).rglob("*.proto"))
    if not protos:
        raise RuntimeError(f"no .proto files under {root / PROTO_DIR}")
    command = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{GEN_DIR.as_posix()}={PROTO_DIR.as_posix()}",
        f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy')}",
        f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc')}",
        f"--python_out={out}",
        f"--mypy_out={out}",
        f"--grpc_python_out={out}",
        f"--mypy_grpc_out={out}",
        *((GEN_DIR / p).as_posix() for p in protos),
    ]
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"protoc failed ({done.returncode}): {(done.stderr or done.stdout).strip()}")
    package = out / GEN_DIR
    files = {p.relative_to(package): p.read_bytes() for p in package.rglob("*") if p.is_file()}
    # Every directory down to the generated modules is a regular package.
    for module in list(files):
        for parent in module.parents:
            files.setdefault(parent / "__init__.py", b"")
    files[Path("__init__.py")] = PACKAGE_DOC.encode()
    return files


def _plugin(name: str) -> str:
    # mypy-protobuf's protoc plugins sit beside the interpreter in a virtual environment.
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.is_file() else shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} not found: install mypy-protobuf (a dev dependency)")
    return found


def committed(gen_dir: Path) -> dict[Path, bytes]:
    """The files of the committed generated package (caches excluded)."""
    return {
        p.relative_to(gen_dir): p.read_bytes()
        for p in gen_dir.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def differences(expected: dict[Path, bytes], actual: dict[Path, bytes]) -> list[str]:
    """One line per file that is missing, stale (not generated any more) or different."""
    lines = []
    for path in sorted(expected.keys() | actual.keys()):
        if path not in actual:
            lines.append(f"missing: {path}")
        elif path not in expected:
            lines.append(f"not generated from any proto: {path}")
        elif expected[path] != actual[path]:
            lines.append(f"differs: {path}")
    return lines


def check(*, root: Path = ROOT, gen_dir: Path | None = None) -> list[str]:
    """Regenerate into a scratch directory and compare with ``gen_dir`` (default ``root/api/gen``)."""
    with tempfile.TemporaryDirectory(prefix="rlm-codegen-") as scratch:
        expected = generate(Path(scratch), root=root)
    return differences(expected, committed(gen_dir if gen_dir is not None else root / GEN_DIR))


def write(*, root: Path = ROOT) -> list[str]:
    """Regenerate ``root/api/gen`` in place; returns what was written or removed."""
    gen_dir = root / GEN_DIR
    with tempfile.TemporaryDirectory(prefix="rlm-codegen-") as scratch:
        expected = generate(Path(scratch), root=root)
    actual = committed(gen_dir)
    done = []
    for path in sorted(actual.keys() - expected.keys()):
        (gen_dir / path).unlink()
        done.append(f"removed {GEN_DIR / path}")
    for path, data in sorted(expected.items()):
        if actual.get(path) != data:
            (gen_dir / path).parent.mkdir(parents=True, exist_ok=True)
            (gen_dir / path).write_bytes(data)
            done.append(f"wrote {GEN_DIR / path}")
    for directory in sorted((p for p in gen_dir.rglob("*") if p.is_dir()), reverse=True):
        if not any(directory.iterdir()):
            directory.rmdir()
    return done


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m api.codegen", description="Generate or check api/gen.")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="fail when api/gen is not protoc's output")
    mode.add_argument("--write", action="store_true", help="regenerate api/gen")
    args = parser.parse_args(argv)
    try:
        if args.write:
            for line in write():
                print(line)
            return 0
        problems = check()
    except RuntimeError as exc:
        print(f"codegen: {exc}", file=sys.stderr)
        return 2
    if problems:
        print(f"{GEN_DIR} is not what {PROTO_DIR} generates:", file=sys.stderr)
        for line in problems:
            print(f"  {line}", file=sys.stderr)
        print("run `python -m api.codegen --write` (with the pinned grpcio-tools)", file=sys.stderr)
        return 1
    print(f"{GEN_DIR} is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
