# rlm — `make run` shows the main job on embedded defaults; `make test` runs the whole suite.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
SAMPLE ?= build/sample-logs

.PHONY: run test lint typecheck pytest postgres bench clean lock

$(STAMP): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $(STAMP)

run: $(STAMP)
	rm -rf $(SAMPLE)
	$(BIN)/rlm log produce $(SAMPLE) --topics 2 --partitions 2 --records 20000 --legacy-batches 5 --seed 7
	$(BIN)/rlm log dump $(SAMPLE)/orders-0 | head -n 8
	$(BIN)/rlm log dump $(SAMPLE)/clicks-0/00000000000000000000.log --records --json | head -n 3
	$(BIN)/rlm log verify $(SAMPLE)
	$(BIN)/rlm log find-offset $(SAMPLE)/orders-0 --timestamp 2023-11-14T22:14:20Z --json
	$(BIN)/rlm log find-offset $(SAMPLE)/clicks-0 --timestamp max-timestamp --json

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

postgres:
	@bash .ci/ensure-postgres

pytest: $(STAMP) postgres
	$(BIN)/pytest -q

test: lint typecheck pytest

bench: $(STAMP)
	$(BIN)/python bench/log_format.py

lock:
	$(BIN)/pip freeze --exclude-editable | grep -v '^rlm' > requirements.lock

clean:
	rm -rf $(VENV) build .mypy_cache .pytest_cache .ruff_cache
