#!/usr/bin/env bash
# Quick start, part two: lint, type-check and run the test suite (benchmarks excluded).
# Any failure fails the script, including pytest finding no tests (its exit code 5).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/venv.sh
source "$ROOT/hack/venv.sh"
cd "$ROOT"

echo "==> ruff"
ruff check .
ruff format --check .
echo "==> mypy --strict"
mypy
echo "==> pytest"
# One worker per core (pytest-xdist): tests own their servers, ports (0) and directories, so they
# run side by side. A file's tests stay together, in order, on one worker (its module fixtures,
# such as an API server, are made once). "-n 0" among the arguments runs them in this process.
pytest -n auto --dist loadfile "$@"
