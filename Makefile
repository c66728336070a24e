# The two commands of the README: `make demo` and `make test`.
# Both run the idempotent set-up first (a second run of it takes a second).
.PHONY: setup demo test test-quick lint

setup:
	@bash scripts/setup.sh

demo: setup
	@.venv/bin/pulsarcast demo

test: setup lint
	@.venv/bin/python -m pytest

test-quick: setup
	@.venv/bin/python -m pytest -m "not kubo and not cluster and not spark and not slow"

lint:
	@.venv/bin/ruff check .
	@.venv/bin/ruff format --check .
	@.venv/bin/mypy
