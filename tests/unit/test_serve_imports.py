"""What ``rlm serve`` holds before it is asked for anything: modules it only needs for some
requests are imported by the first of them (each case in a fresh interpreter)."""

from __future__ import annotations

import subprocess
import sys

#: The modules ``rlm serve`` imports to start: the CLI, the composition root and both transports.
SERVE_MODULES = "rlm.cli.serve, rlm.bootstrap, api.server, api.rest.app, api.grpc_server"


def imported_after(statements: str, names: tuple[str, ...]) -> list[str]:
    script = f"import sys\n{statements}\nprint(' '.join(n for n in {names!r} if n in sys.modules))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return done.stdout.split()


def test_the_server_imports_neither_pyarrow_nor_numpy_nor_pandas() -> None:
    # pyarrow and numpy alone are some 45 MiB of a sidecar that may never stream Arrow.
    assert imported_after(f"import {SERVE_MODULES}", ("pyarrow", "numpy", "pandas")) == []


def test_the_arrow_encoder_is_what_imports_pyarrow() -> None:
    # The control: the same check sees pyarrow once the first Arrow stream's import has run.
    statements = f"import {SERVE_MODULES}\nimport rlm.stream.arrow"
    assert imported_after(statements, ("pyarrow", "pandas")) == ["pyarrow"]
