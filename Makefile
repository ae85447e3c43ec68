# rlm — `make run` shows the main job on embedded defaults; `make test` runs the whole suite.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
SAMPLE ?= build/sample-logs
# A second, independent S3 server (file-backed) for the storage and copier tests, from npm.
S3RVER := build/s3rver/node_modules/.bin/s3rver

.PHONY: run test lint typecheck pytest postgres s3rver bench clean lock

# The editable install also builds the C search loops (rlm/log/_scan.c), the C record decoder
# (rlm/log/_decode.c) and the C NDJSON writer of streams (rlm/stream/_ndjson.c) in place.
$(STAMP): pyproject.toml requirements.lock rlm/log/_scan.c rlm/log/_decode.c rlm/log/_decode_checks.h rlm/log/_decode_log.h rlm/log/_decode_codecs.h rlm/log/_decode_native.h rlm/log/_decode_tuples.h rlm/log/_decode_walk.h rlm/log/_columns.h rlm/stream/_ndjson.c
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $(STAMP)

run: $(STAMP)
	bash examples/quickstart.sh

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy
	$(BIN)/python -m api.codegen --check

postgres:
	@bash .ci/ensure-postgres

s3rver: $(S3RVER)

$(S3RVER):
	npm install --prefix build/s3rver --no-audit --no-fund s3rver@3.7.1

# The suite runs on $(WORKERS) workers (pytest-xdist); `make pytest WORKERS=0` runs it in one process.
# Its processes write bytecode caches (git ignores them) even where the environment says not to
# (PYTHONDONTWRITEBYTECODE): the suite's modules are then compiled, and their asserts rewritten,
# once instead of in every process that imports them (collection: about 6 s instead of 16).
WORKERS ?= 2
pytest: $(STAMP) postgres $(S3RVER)
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -q -n $(WORKERS)

test: lint typecheck pytest

bench: $(STAMP) postgres
	$(BIN)/python bench/log_format.py
	$(BIN)/python bench/metadata.py
	$(BIN)/python bench/leases.py
	$(BIN)/python bench/copier.py
	$(BIN)/python bench/lookup.py
	$(BIN)/python bench/api.py
	$(BIN)/python bench/pipeline.py
	$(BIN)/python bench/list_offsets.py
	$(BIN)/python bench/compaction.py
	$(BIN)/python bench/stream.py

lock:
	$(BIN)/pip freeze --exclude-editable | grep -v '^rlm' > requirements.lock

clean:
	rm -rf $(VENV) build .mypy_cache .pytest_cache .ruff_cache rlm/log/_scan.*.so rlm/log/_decode.*.so rlm/stream/_ndjson.*.so
