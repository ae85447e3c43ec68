"""The committed gRPC code is exactly what ``api/proto`` generates, and the check notices when not."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from api import codegen


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """A scratch repository root holding copies of ``api/proto`` and ``api/gen``."""
    for part in (codegen.PROTO_DIR, codegen.GEN_DIR):
        shutil.copytree(codegen.ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def test_the_committed_code_is_what_the_protos_generate() -> None:
    assert codegen.check() == []


def test_the_check_command_exits_0_on_the_committed_code() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "api.codegen", "--check"],
        cwd=codegen.ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "up to date" in done.stdout


def test_an_edited_generated_file_is_reported(copy: Path) -> None:
    module = copy / codegen.GEN_DIR / "rlm/v1/rlm_pb2_grpc.py"
    module.write_text(module.read_text().replace("GRPC_GENERATED_VERSION", "GRPC_VERSION_EDITED", 1))
    assert codegen.check(root=copy) == ["differs: rlm/v1/rlm_pb2_grpc.py"]


def test_missing_and_stale_files_are_reported(copy: Path) -> None:
    gen = copy / codegen.GEN_DIR
    (gen / "rlm/v1/rlm_pb2.pyi").unlink()
    (gen / "rlm/v1/old_pb2.py").write_text("# from a proto that was removed\n")
    assert codegen.check(root=copy) == [
        "not generated from any proto: rlm/v1/old_pb2.py",
        "missing: rlm/v1/rlm_pb2.pyi",
    ]


def test_a_proto_change_without_regenerating_is_reported_and_write_fixes_it(copy: Path) -> None:
    proto = copy / codegen.PROTO_DIR / "rlm/v1/rlm.proto"
    proto.write_text(proto.read_text() + "\nmessage Added {\n  int64 n = 1;\n}\n")
    assert codegen.check(root=copy) == [
        "differs: rlm/v1/rlm_pb2.py",
        "differs: rlm/v1/rlm_pb2.pyi",
    ]
    (copy / codegen.GEN_DIR / "rlm/v1/stale_pb2.py").write_text("")
    codegen.write(root=copy)
    assert codegen.check(root=copy) == []
    assert not (copy / codegen.GEN_DIR / "rlm/v1/stale_pb2.py").exists()
    assert b"_ADDED" in (copy / codegen.GEN_DIR / "rlm/v1/rlm_pb2.py").read_bytes()


def test_a_proto_that_does_not_compile_is_an_error(copy: Path) -> None:
    proto = copy / codegen.PROTO_DIR / "rlm/v1/rlm.proto"
    proto.write_text(proto.read_text() + "\nmessage Broken {\n")
    with pytest.raises(RuntimeError, match="protoc failed"):
        codegen.check(root=copy)
