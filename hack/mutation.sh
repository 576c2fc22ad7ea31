#!/usr/bin/env bash
# Mutation testing (not part of the default test run): mutmut changes one thing at a time in the
# modules listed under [tool.mutmut] in pyproject.toml and runs the tests that cover it; a mutant
# that no test notices is a gap (or an equivalent change). Results go to docs/testing.md.
# Usage: hack/mutation.sh [MODULE...]   e.g. hack/mutation.sh controller.writer
#   MODULE is a dotted module name; without one, every configured module is run.
# Progress goes to stderr; the summary of survivors goes to stdout.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/venv.sh
source "$ROOT/hack/venv.sh"
cd "$ROOT"

if ! command -v mutmut >/dev/null 2>&1; then
  echo "mutmut is missing: install the test extra (pip install -e '.[test]')" >&2
  exit 1
fi

patterns=()
for module in "$@"; do
  patterns+=("${module}.*")
done

echo "==> mutmut run ${patterns[*]:-(every configured module)}" >&2
mutmut run "${patterns[@]}" >&2
echo "==> survivors" >&2
mutmut results
