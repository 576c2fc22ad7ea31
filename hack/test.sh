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
pytest "$@"
